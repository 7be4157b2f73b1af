"""Instances by providerID (`aws:///<zone>/<instance-id>`) and by Karpenter's ownership tags."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from controller.api import labels as L
from controller.cloud.aws.errors import NodeClaimNotFoundError
from controller.cloud.aws.tags import NODECLAIM, ownership_filters

_PROVIDER_ID = re.compile(r"^aws:///(?P<zone>[^/]+)/(?P<id>i-[0-9a-z]+)$")
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")


@dataclass(frozen=True)
class Instance:
    """An EC2 instance Karpenter manages."""

    id: str
    zone: str
    instance_type: str
    capacity_type: str
    image_id: str
    state: str
    tags: dict[str, str] = field(default_factory=dict)
    # a reserved instance's capacity reservation: its ID, type (default | capacity-block), whether interruptible
    reservation_id: str = ""
    reservation_type: str = ""
    reservation_interruptible: bool = False

    @property
    def provider_id(self) -> str:
        """The Node's spec.providerID for this instance."""
        return provider_id(self.zone, self.id)


def provider_id(zone: str, instance_id: str) -> str:
    """aws:///<zone>/<instance-id>."""
    return f"aws:///{zone}/{instance_id}"


def parse_provider_id(value: str) -> tuple[str, str]:
    """(zone, instance id) from a providerID; ValueError naming the value when it is not one."""
    m = _PROVIDER_ID.match(value or "")
    if not m:
        raise ValueError(f"{value!r} is not an AWS providerID (aws:///<zone>/<instance-id>)")
    return m.group("zone"), m.group("id")


def from_description(d: dict[str, Any]) -> Instance:
    """An Instance from one DescribeInstances entry. Reserved is what karpy launched into a reservation (targeted:
    capacity-reservations-only) and still runs in one; an instance that merely landed in an open reservation, or
    whose reservation ended, is on-demand (Karpenter's capacityTypeFromInstance)."""
    lifecycle = d.get("InstanceLifecycle")
    rid = str(d.get("CapacityReservationId") or "")
    preference = (d.get("CapacityReservationSpecification") or {}).get("CapacityReservationPreference")
    reserved = lifecycle != "spot" and bool(rid) and preference == "capacity-reservations-only"
    return Instance(id=d["InstanceId"], zone=d["Placement"]["AvailabilityZone"], instance_type=d["InstanceType"],
                    capacity_type=L.CAPACITY_TYPE_SPOT if lifecycle == "spot"
                    else L.CAPACITY_TYPE_RESERVED if reserved else L.CAPACITY_TYPE_ON_DEMAND,
                    image_id=d.get("ImageId", ""), state=d["State"]["Name"],
                    tags={t["Key"]: t["Value"] for t in d.get("Tags", [])},
                    reservation_id=rid if reserved else "",
                    reservation_type=("capacity-block" if lifecycle == "capacity-block" else "default") if reserved
                    else "",
                    reservation_interruptible=reserved and lifecycle == "interruptible-capacity-reservation")


def _describe(ec2: Any, **kwargs: Any) -> list[Instance]:
    out: list[Instance] = []
    for page in ec2.get_paginator("describe_instances").paginate(**kwargs):
        for r in page["Reservations"]:
            out.extend(from_description(d) for d in r["Instances"])
    return out


def get(ec2: Any, provider_id_value: str) -> Instance:
    """The live instance behind a providerID; NodeClaimNotFoundError when it is gone or terminated."""
    _, instance_id = parse_provider_id(provider_id_value)
    try:
        found = _describe(ec2, InstanceIds=[instance_id])
    except ClientError as e:
        if e.response["Error"]["Code"] in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
            raise NodeClaimNotFoundError(f"instance {instance_id} not found") from None
        raise
    live = [i for i in found if i.state in LIVE_STATES]
    if not live:
        raise NodeClaimNotFoundError(f"instance {instance_id} is terminated")
    return live[0]


def list_managed(ec2: Any, cluster_name: str) -> list[Instance]:
    """Live instances this cluster's Karpenter launched (for garbage collection)."""
    return _describe(ec2, Filters=[*ownership_filters(cluster_name, tag_keys=(NODECLAIM,)),
                                   {"Name": "instance-state-name", "Values": list(LIVE_STATES)}])


def find_by_nodeclaim(ec2: Any, cluster_name: str, nodeclaim: str) -> Instance | None:
    """The live instance already launched for a NodeClaim, if any (what makes a retried launch idempotent)."""
    found = _describe(ec2, Filters=[*ownership_filters(cluster_name, nodeclaim=nodeclaim),
                                    {"Name": "instance-state-name", "Values": list(LIVE_STATES)}])
    return found[0] if found else None


def delete(ec2: Any, provider_id_value: str) -> None:
    """Terminate the instance; NodeClaimNotFoundError when it is already gone."""
    instance = get(ec2, provider_id_value)
    if instance.state == "shutting-down":
        raise NodeClaimNotFoundError(f"instance {instance.id} is already terminating")
    ec2.terminate_instances(InstanceIds=[instance.id])
