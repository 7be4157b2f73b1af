"""The EC2NodeClass side of a NodeClaim's drift, as karpenter-provider-aws's pkg/cloudprovider/drift.go judges it:
the static hash (NodeClassDrift), the image among the class's resolved AMIs (AMIDrift), then the instance's security
groups, subnet and capacity reservation against the resolved ones. Pure: the cloud providers pass in what the
instance says, and `karpy disruption` what the documents say."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from controller.api import labels as L
from controller.api.nodeclasshash import EC2NODECLASS_HASH_VERSION, hash_annotations
from controller.scheduling.requirements import Requirements

Obj = dict[str, Any]


def _meta(obj: Mapping[str, Any] | None, key: str) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get(key) or {})


def nodeclass_static_drift(nodeclaim: Obj, nodeclass: Obj | None) -> str:
    """NodeClassDrift: the NodeClaim's ec2nodeclass-hash differs from the EC2NodeClass's current static hash under
    the same hash version (another version is re-stamped, never drift)."""
    if nodeclass is None:
        return ""
    ann = _meta(nodeclaim, "annotations")
    have = ann.get(L.EC2NODECLASS_HASH)
    if not have or ann.get(L.EC2NODECLASS_HASH_VERSION) != EC2NODECLASS_HASH_VERSION:
        return ""
    return "NodeClassDrift" if have != hash_annotations(nodeclass)[L.EC2NODECLASS_HASH] else ""


def nodeclass_drift(nodeclaim: Obj, nodeclass: Obj | None, *, subnet_id: str = "",
                    security_group_ids: Iterable[str] | None = None, reservation_id: str = "") -> str:
    """The EC2NodeClass side of drift, in karpenter-provider-aws's order (pkg/cloudprovider/drift.go): the static
    hash (NodeClassDrift), the NodeClaim's image among the class's resolved AMIs for its labels (AMIDrift), then the
    instance's security groups equal to the resolved ones (SecurityGroupDrift), its subnet among the resolved ones
    (SubnetDrift), its capacity reservation among the resolved ones (CapacityReservationDrift). What the instance
    does not say (empty) and what the class has not resolved yet is no drift."""
    if nodeclass is None:
        return ""
    why = nodeclass_static_drift(nodeclaim, nodeclass)
    if why:
        return why
    status = nodeclass.get("status") or {}
    image = str((nodeclaim.get("status") or {}).get("imageID") or "")
    amis = [a for a in status.get("amis") or [] if isinstance(a, dict) and a.get("id")]
    if image and amis:
        have = Requirements.from_labels(_meta(nodeclaim, "labels"))
        fitting = {str(a["id"]) for a in amis if have.incompatibility(Requirements.from_node_selector_requirements(
            r for r in a.get("requirements") or [] if isinstance(r, dict))) is None}
        if image not in fitting:
            return "AMIDrift"
    groups = {str(g.get("id")) for g in status.get("securityGroups") or [] if isinstance(g, dict) and g.get("id")}
    if security_group_ids is not None and groups and set(security_group_ids) != groups:
        return "SecurityGroupDrift"
    subnets = {str(x.get("id")) for x in status.get("subnets") or [] if isinstance(x, dict) and x.get("id")}
    if subnet_id and subnets and subnet_id not in subnets:
        return "SubnetDrift"
    reservations = {str(r.get("id")) for r in status.get("capacityReservations") or [] if isinstance(r, dict)}
    if reservation_id and reservation_id not in reservations:
        return "CapacityReservationDrift"
    return ""
