"""A one-zone LocalStack world and NodeClaims launched into it on the real control plane, for the tests of the
controllers that act on launched NodeClaims (tagging, instance health)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from controller.api import labels as L
from controller.kube import resources as R
from tests.integration.aws_world import launch_for, make_world


def one_zone_world(aws_client: Callable[..., Any], cidr_octet: int) -> tuple[Any, dict[str, Any]]:
    """make_world in us-east-1a with m5.large only, and the Service range the test cluster would report."""
    provider, nodeclass = make_world(aws_client("ec2"), aws_client("ssm"), aws_client("iam"), cidr_octet=cidr_octet,
                                     zones=("us-east-1a",), prices={"m5.large": 0.096})
    provider.cluster = dataclasses.replace(provider.cluster, service_cidr="10.100.0.0/16")
    return provider, nodeclass


def launched_nodeclaim(kc: Any, provider: Any, nodeclass: dict[str, Any],
                       finalizers: tuple[str, ...] = ()) -> tuple[str, str]:
    """A NodeClaim created, launched on LocalStack and given its providerID (as the lifecycle controller writes it);
    returns its name and its provider ID."""
    name = f"default-{uuid.uuid4().hex[:5]}"
    created = kc.create(R.NODECLAIMS, {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}, "finalizers": list(finalizers)},
        "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                   "values": ["m5.large"]},
                                  {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}})
    node = launch_for(provider, created, nodeclass)
    kc.patch(R.NODECLAIMS, name, {"metadata": {"labels": {L.CAPACITY_TYPE: "on-demand"}}})
    kc.patch(R.NODECLAIMS, name, {"status": {"providerID": node.provider_id}}, subresource="status")
    return name, node.provider_id
