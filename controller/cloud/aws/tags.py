"""Karpenter's ownership tags: what marks an AWS resource (instance, volume, network interface, launch template,
instance profile) as this cluster's and which NodePool / NodeClaim / EC2NodeClass it belongs to. The controller's
scoped IAM policy (infra/policies.py) keys on these tags, so every resource is tagged and found through this module."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.api import labels as L

EKS_CLUSTER_NAME = "eks:eks-cluster-name"
NODECLAIM = "karpenter.sh/nodeclaim"


def cluster_tag(cluster_name: str) -> str:
    """kubernetes.io/cluster/<name>: "owned" on everything the cluster's Karpenter made."""
    return f"kubernetes.io/cluster/{cluster_name}"


def ownership_tags(cluster_name: str, *, nodepool: str | None = None, nodeclaim: str | None = None,
                   nodeclass: str | None = None, region: str | None = None,
                   user_tags: Mapping[str, str] | None = None) -> dict[str, str]:
    """The tags of a resource Karpenter makes: the EC2NodeClass's own tags, then the cluster's ownership and the
    owners given (Karpenter's win over the user's, as the EC2NodeClass validation forbids users setting them). The
    instance's Name (its Node's name) is added once the Node registers (controller/cloud/aws/tagging.py)."""
    tags = dict(user_tags or {})
    tags.update({cluster_tag(cluster_name): "owned", EKS_CLUSTER_NAME: cluster_name})
    for key, value in ((L.NODEPOOL, nodepool), (NODECLAIM, nodeclaim), (L.EC2NODECLASS, nodeclass),
                       (L.REGION, region)):
        if value is not None:
            tags[key] = value
    return tags


def ownership_filters(cluster_name: str, *, nodepool: str | None = None, nodeclaim: str | None = None,
                      nodeclass: str | None = None, tag_keys: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """EC2 Describe* filters for this cluster's resources with these owners (and carrying these tag keys, whatever
    their value)."""
    filters: list[dict[str, Any]] = [{"Name": f"tag:{k}", "Values": [v]}
                                      for k, v in owner_tags(cluster_name, nodepool=nodepool, nodeclaim=nodeclaim,
                                                             nodeclass=nodeclass).items()]
    filters += [{"Name": "tag-key", "Values": [k]} for k in tag_keys]
    return filters


def owner_tags(cluster_name: str, *, nodepool: str | None = None, nodeclaim: str | None = None,
               nodeclass: str | None = None) -> dict[str, str]:
    """The tags that identify a resource as the cluster's (its kubernetes.io/cluster tag: every karpy resource has
    it, also those tagged by hand in recovery) and these owners': what a lookup filters and rechecks on."""
    wanted = {cluster_tag(cluster_name): "owned"}
    for key, value in ((L.NODEPOOL, nodepool), (NODECLAIM, nodeclaim), (L.EC2NODECLASS, nodeclass)):
        if value is not None:
            wanted[key] = value
    return wanted


def owned_by(tags: Mapping[str, str], cluster_name: str) -> bool:
    """Whether a resource's tags say it belongs to this cluster (either of the two cluster tags: resources made
    before the eks:eks-cluster-name tag was added carry only the kubernetes.io/cluster one)."""
    return tags.get(cluster_tag(cluster_name)) == "owned" or tags.get(EKS_CLUSTER_NAME) == cluster_name


def matches(tags: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    """Whether every wanted tag is on the resource with its value (a client-side recheck of a filtered Describe*)."""
    return all(tags.get(k) == v for k, v in wanted.items())
