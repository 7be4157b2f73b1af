"""The NodeClaim tagging controller, as Karpenter's nodeclaim.tagging: once a NodeClaim's Node has registered, its
instance gets the tags `Name` = the Node's name, karpenter.sh/nodeclaim and eks:eks-cluster-name (those it lacks: a
Name the EC2NodeClass set stays), and the NodeClaim is annotated karpenter.k8s.aws/tagged so it is done once."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from controller.cloud.aws import instances
from controller.cloud.aws.errors import NodeClaimNotFoundError
from controller.cloud.aws.tags import EKS_CLUSTER_NAME, NODECLAIM
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import NotFoundError
from controller.kube.workqueue import Result

log = logging.getLogger("karpy.nodeclaim.tagging")
TAGGED = "karpenter.k8s.aws/tagged"
CLUSTER_NAME_TAGGED = "compatibility.karpenter.k8s.aws/cluster-name-tagged"
NAME_TAG = "Name"


def is_taggable(nodeclaim: dict[str, Any]) -> bool:
    """An EC2 NodeClaim whose Node name is known, not being deleted and not yet tagged."""
    meta = nodeclaim.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if annotations.get(TAGGED) == "true" and annotations.get(CLUSTER_NAME_TAGGED) == "true":
        return False
    ref = (nodeclaim.get("spec") or {}).get("nodeClassRef") or {}
    if ref.get("group", "karpenter.k8s.aws") != "karpenter.k8s.aws":
        return False
    return bool((nodeclaim.get("status") or {}).get("nodeName")) and not meta.get("deletionTimestamp")


class TaggingController:
    """Tags registered NodeClaims' instances (one worker: CreateTags shares EC2's mutating-call budget with
    CreateFleet)."""

    def __init__(self, client: KubeClient, ec2: Any, cluster_name: str,
                 lookup: Callable[[str], dict[str, Any] | None]) -> None:
        self.client, self.ec2, self.cluster_name = client, ec2, cluster_name
        self.lookup = lookup  # name -> the NodeClaim as the informer has it

    def reconcile(self, name: str) -> Result:
        """Tag the instance behind the NodeClaim, then mark the NodeClaim tagged."""
        nodeclaim = self.lookup(name)
        if nodeclaim is None or not is_taggable(nodeclaim):
            return Result()
        status = nodeclaim.get("status") or {}
        try:
            _, instance_id = instances.parse_provider_id(str(status.get("providerID") or ""))
        except ValueError as e:  # not launched yet (or not an AWS machine): the next update brings it
            log.debug("not tagging: %s", e, extra={"NodeClaim": {"name": name}})
            return Result()
        try:
            self.tag_instance(status.get("providerID", ""), instance_id, name, str(status["nodeName"]))
        except NodeClaimNotFoundError:
            return Result()  # the instance is gone: garbage collection and the lifecycle see to the NodeClaim
        with contextlib.suppress(NotFoundError):  # deleted meanwhile: nothing left to mark
            self.client.patch(R.NODECLAIMS, name, {"metadata": {"annotations": {TAGGED: "true",
                                                                                CLUSTER_NAME_TAGGED: "true"}}})
        return Result()

    def tag_instance(self, provider_id: str, instance_id: str, nodeclaim: str, node_name: str) -> dict[str, str]:
        """CreateTags with the tags the instance lacks; returns what was added."""
        wanted = {NAME_TAG: node_name, NODECLAIM: nodeclaim, EKS_CLUSTER_NAME: self.cluster_name}
        existing = instances.get(self.ec2, provider_id).tags
        missing = {k: v for k, v in wanted.items() if k not in existing}
        if not missing:
            return {}
        try:
            self.ec2.create_tags(Resources=[instance_id], Tags=[{"Key": k, "Value": v}
                                                                for k, v in sorted(missing.items())])
        except ClientError as e:
            if e.response["Error"]["Code"] in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                raise NodeClaimNotFoundError(f"instance {instance_id} not found") from None
            raise
        log.info("tagged instance", extra={"NodeClaim": {"name": nodeclaim}, "instance": instance_id,
                                           "tags": missing})
        return missing
