"""The NodeClaim tagging controller against LocalStack's EC2 and the real control plane: an instance launched for a
NodeClaim carries no Name; once the NodeClaim's Node has registered (status.nodeName), the instance is tagged Name =
the Node's name and the NodeClaim annotated karpenter.k8s.aws/tagged, as Karpenter's nodeclaim.tagging does."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from controller.cloud.aws.tagging import CLUSTER_NAME_TAGGED, TAGGED, TaggingController, is_taggable
from controller.kube import resources as R
from tests.integration.launched import launched_nodeclaim, one_zone_world
from tests.kubetest import wait_for

pytestmark = [pytest.mark.localstack, pytest.mark.kube,
              pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


@pytest.fixture(scope="module")
def world(aws_client: Callable[..., Any]) -> tuple[Any, dict[str, Any]]:
    return one_zone_world(aws_client, 43)


def _tags(ec2: Any, provider_id: str) -> dict[str, str]:
    described = ec2.describe_instances(InstanceIds=[provider_id.rsplit("/", 1)[1]])
    return {t["Key"]: t["Value"] for t in described["Reservations"][0]["Instances"][0].get("Tags", [])}


def test_registered_nodeclaims_instance_is_named_after_its_node(world, kube):
    provider, nodeclass = world
    kc, cluster, _ = kube
    name, provider_id = launched_nodeclaim(kc, provider, nodeclass)
    tags = _tags(provider.ec2, provider_id)
    assert "Name" not in tags and tags["karpenter.sh/nodeclaim"] == name  # not Named at launch
    tagger = TaggingController(kc, provider.ec2, provider.cluster.name, cluster.nodeclaim)
    launched = wait_for("the launched NodeClaim in the informer",
                        lambda: (c := cluster.nodeclaim(name)) and (c.get("status") or {}).get("providerID") and c)
    assert not is_taggable(launched)  # no Node yet
    tagger.reconcile(name)
    assert "Name" not in _tags(provider.ec2, provider_id)

    node_name = f"ip-10-43-0-{uuid.uuid4().int % 250}.ec2.internal"
    kc.patch(R.NODECLAIMS, name, {"status": {"nodeName": node_name}}, subresource="status")
    wait_for("the registered NodeClaim in the informer", lambda: is_taggable(cluster.nodeclaim(name) or {}))
    tagger.reconcile(name)
    tags = _tags(provider.ec2, provider_id)
    assert tags["Name"] == node_name
    assert tags["eks:eks-cluster-name"] == provider.cluster.name and tags["karpenter.sh/nodeclaim"] == name
    annotations = kc.get(R.NODECLAIMS, name)["metadata"]["annotations"]
    assert annotations[TAGGED] == "true" and annotations[CLUSTER_NAME_TAGGED] == "true"
    wait_for("the tagged NodeClaim in the informer", lambda: not is_taggable(cluster.nodeclaim(name) or {}))
    # a Name the EC2NodeClass gave stays: only missing tags are added
    assert tagger.tag_instance(provider_id, provider_id.rsplit("/", 1)[1], name, "other") == {}
    assert _tags(provider.ec2, provider_id)["Name"] == node_name
