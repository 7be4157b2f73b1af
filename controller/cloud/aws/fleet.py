"""Launching one NodeClaim with EC2 CreateFleet (type instant), as Karpenter does.

Overrides are the cheapest (instance type x zonal subnet) offerings the NodeClaim's requirements allow, at most 60.
Spot is used when the NodeClaim allows it and spot offerings exist (allocation strategy price-capacity-optimized),
otherwise on-demand (lowest-price). Offerings refused for lack of capacity are marked unavailable for 3 minutes and the
launch is retried without them. A retried launch of the same NodeClaim never creates a second instance: an instance
already tagged with the NodeClaim's name is returned, and the request carries a client token derived from it.
Each zone's subnet is the one with the most free addresses (controller/cloud/aws/subnets.py); a subnet out of addresses
is passed over and the zone's offerings are given up only when no other subnet of the zone is left.
Reserved capacity comes first when the NodeClaim allows it and a reservation has room, as Karpenter's launch does: one
kind of reservation per request (the cheapest; ties go to ordinary reservations, then capacity blocks, then
interruptible ones), one capacity block at most, one reservation per instance type and zone (the one with the most
room), each through its own launch template targeting it. A reservation EC2 refuses is marked as having no room and
the launch goes on without it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError

from controller.api import labels as L
from controller.catalog.types import InstanceType
from controller.cloud.aws import instances
from controller.cloud.aws.capacityreservations import ReservationAvailability
from controller.cloud.aws.discovery import Subnet
from controller.cloud.aws.errors import (
    INSUFFICIENT_CAPACITY_CODES,
    INSUFFICIENT_FREE_ADDRESSES,
    InsufficientCapacityError,
    LaunchError,
    LaunchTemplateNotFoundError,
)
from controller.cloud.aws.subnets import SubnetProvider
from controller.cloud.aws.tags import ownership_tags
from controller.cloud.aws.unavailable import UnavailableOfferings
from controller.cloud.provider import LaunchRequest
from controller.scheduling.instancetypes import OfferingFilter, compatible_offerings
from controller.scheduling.requirements import Requirements

log = logging.getLogger("karpy.launch")
MAX_OVERRIDES = 60
MAX_ATTEMPTS = 5
LAUNCH_ORDER = (L.CAPACITY_TYPE_RESERVED, L.CAPACITY_TYPE_SPOT, L.CAPACITY_TYPE_ON_DEMAND)


@dataclass(frozen=True)
class Override:
    """One (instance type, subnet) CreateFleet may choose."""

    instance_type: str
    subnet: Subnet
    price: float
    arch: str = "amd64"
    reservation_id: str = ""  # a reserved offering's capacity reservation
    reservation_type: str = ""  # default | capacity-block
    reservation_interruptible: bool = False
    reservation_capacity: int = 0


# the order Karpenter's CapacityReservationTypeFilter prefers kinds of reservation in when their prices tie
RESERVATION_KIND_ORDER = {("default", False): 0, ("capacity-block", False): 1, ("default", True): 2}


def reserved_overrides(overrides: list[Override]) -> list[Override]:
    """Karpenter's reserved-launch filters: CreateFleet takes one market per request, one capacity block at most and
    one reservation per (instance type, zone). The kind with the cheapest offering is kept (ties: ordinary, capacity
    block, interruptible); of capacity blocks only the cheapest; per type and zone the reservation with most room."""
    if not overrides:
        return []
    kinds: dict[tuple[str, bool], float] = {}
    for o in overrides:
        kind = (o.reservation_type or "default", o.reservation_interruptible)
        kinds[kind] = min(kinds.get(kind, float("inf")), o.price)
    chosen = min(kinds, key=lambda k: (kinds[k], RESERVATION_KIND_ORDER.get(k, 3)))
    kept = [o for o in overrides if (o.reservation_type or "default", o.reservation_interruptible) == chosen]
    if chosen[0] == "capacity-block":
        return [min(kept, key=lambda o: (o.price, o.instance_type, o.subnet.zone))]
    best: dict[tuple[str, str], Override] = {}
    for o in kept:
        key = (o.instance_type, o.subnet.zone)
        if key not in best or o.reservation_capacity > best[key].reservation_capacity:
            best[key] = o
    return list(best.values())


def choose_overrides(requirements: Requirements, instance_types: list[InstanceType], subnets: dict[str, Subnet],
                     unavailable: UnavailableOfferings, reservations: ReservationAvailability | None = None
                     ) -> tuple[str, list[Override]]:
    """The capacity type to launch and its cheapest allowed offerings: reserved capacity first when allowed and
    offered (it is paid for already), then spot, then on-demand, as Karpenter's getCapacityType. A reservation that
    has no room left (reservations' count, live: EC2 may have refused it during this launch) is not offered."""
    allowed = OfferingFilter(requirements)
    by_ct: dict[str, list[Override]] = {}
    for it in instance_types:
        for o in compatible_offerings(it, requirements, allowed):
            subnet = subnets.get(o.zone)
            if subnet is None or unavailable.is_unavailable(it.name, o.zone, o.capacity_type):
                continue
            if o.reservation_id and reservations is not None and reservations.count(o.reservation_id) == 0:
                continue
            by_ct.setdefault(o.capacity_type, []).append(Override(
                it.name, subnet, o.price, it.labels.get(L.ARCH, "amd64"), o.reservation_id, o.reservation_type,
                o.reservation_interruptible, o.reservation_capacity))
    if by_ct.get(L.CAPACITY_TYPE_RESERVED):
        by_ct[L.CAPACITY_TYPE_RESERVED] = reserved_overrides(by_ct[L.CAPACITY_TYPE_RESERVED])
    for ct in LAUNCH_ORDER:
        if by_ct.get(ct):
            return ct, sorted(by_ct[ct], key=lambda o: (o.price, o.instance_type, o.subnet.zone))[:MAX_OVERRIDES]
    return "", []


def target_capacity_type(capacity_type: str, overrides: list[Override]) -> str:
    """CreateFleet's DefaultTargetCapacityType (Karpenter's defaultTargetCapacityType): a reserved launch draws
    on-demand capacity from an ordinary reservation, capacity-block from a capacity block, reserved-capacity from an
    interruptible reservation."""
    if capacity_type != L.CAPACITY_TYPE_RESERVED:
        return capacity_type
    first = overrides[0]
    if first.reservation_type == "capacity-block":
        return "capacity-block"
    return "reserved-capacity" if first.reservation_interruptible else L.CAPACITY_TYPE_ON_DEMAND


def _by_template(overrides: list[Override], templates: str | dict[str, str] | Callable[[Override], str]
                 ) -> list[tuple[str, list[Override]]]:
    if isinstance(templates, str):
        return [(templates, overrides)]
    groups: dict[str, list[Override]] = {}
    for o in overrides:
        name = templates(o) if callable(templates) else templates.get(o.instance_type) or templates[o.arch]
        groups.setdefault(name, []).append(o)
    # the configuration holding the cheapest offering first
    return sorted(groups.items(), key=lambda kv: (min(o.price for o in kv[1]), kv[0]))


def launch(ec2: Any, *, cluster_name: str, request: LaunchRequest, nodeclass_name: str,
           instance_types: list[InstanceType], subnets: dict[str, Subnet] | list[Subnet],
           launch_template: str | dict[str, str] | Callable[[Override], str], unavailable: UnavailableOfferings,
           user_tags: dict[str, str] | None = None, subnet_provider: SubnetProvider | None = None,
           reservations: ReservationAvailability | None = None) -> instances.Instance:
    """Launch the instance for a NodeClaim (or return the one already launched for it).

    `subnets` are the EC2NodeClass's subnets (or one per zone); `subnet_provider` keeps their free-address
    accounting across launches. `launch_template` is one template name, or one per instance type name or
    architecture (amd64/arm64) when the AMIs differ (instance types without a template are not offered), or a
    function giving (and making) the template of an override (one per capacity reservation). `reservations` counts
    the room left in capacity reservations: a refused one gets none. A reserved launch returns the instance with its
    reservation."""
    candidates = list(subnets.values()) if isinstance(subnets, dict) else list(subnets)
    accounting = subnet_provider or SubnetProvider()
    templates = launch_template if isinstance(launch_template, dict) else None
    if templates is not None:
        instance_types = [it for it in instance_types
                          if it.name in templates or it.labels.get(L.ARCH, "amd64") in templates]
    name = request.name
    existing = instances.find_by_nodeclaim(ec2, cluster_name, name)
    if existing is not None:
        return existing
    requirements = request.requirements
    tags = ownership_tags(cluster_name, nodepool=request.nodepool, nodeclaim=name, nodeclass=nodeclass_name,
                          user_tags=user_tags)
    tag_list = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
    token = hashlib.sha256(f"{cluster_name}/{name}/{request.uid}".encode()).hexdigest()[:64]
    for attempt in range(MAX_ATTEMPTS):
        zonal = accounting.zonal(candidates)
        capacity_type, overrides = choose_overrides(requirements, instance_types, zonal, unavailable, reservations)
        if not overrides:
            raise InsufficientCapacityError(f"nodeclaim {name}: no available offering satisfies its requirements")
        groups = _by_template(overrides, launch_template)  # before any accounting: may create templates
        offered = {o.subnet.zone: o.subnet for o in overrides}
        offered_types = {o.instance_type for o in overrides}
        candidates_types = [it for it in instance_types if it.name in offered_types]  # what may land in each subnet
        accounting.reserve(offered, candidates_types, capacity_type)
        fleet: dict[str, Any] = {
            "Type": "instant",
            "TargetCapacitySpecification": {"TotalTargetCapacity": 1, "DefaultTargetCapacityType":
                                            target_capacity_type(capacity_type, overrides)},
            "LaunchTemplateConfigs": [{
                "LaunchTemplateSpecification": {"LaunchTemplateName": template, "Version": "$Latest"},
                "Overrides": [{"InstanceType": o.instance_type, "SubnetId": o.subnet.id,
                               "AvailabilityZone": o.subnet.zone} for o in group]}
                for template, group in groups],
            "TagSpecifications": [{"ResourceType": rt, "Tags": tag_list}
                                  for rt in ("instance", "volume", "network-interface", "fleet")],
            "ClientToken": f"{token[:60]}-{attempt}",
        }
        if capacity_type == L.CAPACITY_TYPE_SPOT:
            fleet["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
        elif capacity_type == L.CAPACITY_TYPE_RESERVED and overrides[0].reservation_interruptible:
            fleet["ReservedCapacityOptions"] = {"ReservationTypes": ["interruptible-capacity-reservation"]}
        elif not (capacity_type == L.CAPACITY_TYPE_RESERVED and overrides[0].reservation_type == "capacity-block"):
            # an ordinary reservation is on-demand capacity: each override's template targets its reservation
            fleet["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
        try:
            resp = ec2.create_fleet(**fleet)
        except ClientError as e:
            accounting.release_unused(offered, (), candidates_types, capacity_type)
            if e.response["Error"]["Code"].startswith(("InvalidLaunchTemplateName.NotFound",
                                                       "InvalidLaunchTemplateId.NotFound")):
                raise LaunchTemplateNotFoundError(str(e)) from None
            raise
        other_errors = []
        for err in resp.get("Errors", []):
            code = err.get("ErrorCode", "")
            o = (err.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
            subnet_id = o.get("SubnetId") or ""
            zone = o.get("AvailabilityZone") or next((s.zone for s in candidates if s.id == subnet_id), "")
            if code == INSUFFICIENT_FREE_ADDRESSES and subnet_id:
                accounting.mark_full(subnet_id)
                if zone in accounting.zonal(candidates):
                    continue  # the zone has another subnet: the next attempt launches there
            if code in INSUFFICIENT_CAPACITY_CODES and o.get("InstanceType") and capacity_type == \
                    L.CAPACITY_TYPE_RESERVED:
                # a reservation that ran out (ReservationCapacityExceeded, or any ICE): it has no room until EC2's
                # next count, and the next attempt leaves it out (Karpenter marks the reservation, not the offering)
                refused_ids = [r.reservation_id for r in overrides
                               if r.instance_type == o["InstanceType"] and r.subnet.zone == zone]
                log.info("marking capacity reservation unavailable", extra={
                    "reason": code, "instance-type": o["InstanceType"], "zone": zone,
                    "capacity-reservation-id": ", ".join(refused_ids)})
                if reservations is not None:
                    reservations.mark_unavailable(*refused_ids)
                else:
                    unavailable.mark_unavailable(o["InstanceType"], zone, capacity_type, reason=code)
            elif code in INSUFFICIENT_CAPACITY_CODES and o.get("InstanceType"):
                unavailable.mark_unavailable(o["InstanceType"], zone, err.get("Lifecycle") or capacity_type,
                                             reason=code)
            elif code.startswith(("InvalidLaunchTemplateName.NotFound", "InvalidLaunchTemplateId.NotFound")):
                raise LaunchTemplateNotFoundError(err.get("ErrorMessage", code))
            else:
                other_errors.append(f"{code}: {err.get('ErrorMessage', '')}")
        ids = [i for fleet_instance in resp.get("Instances", []) for i in fleet_instance.get("InstanceIds", [])]
        if not ids:
            accounting.release_unused(offered, (), candidates_types, capacity_type)
        else:
            extras = ids[1:]
            if (resp.get("ResponseMetadata") or {}).get("RetryAttempts"):
                # botocore resent this request: an attempt whose reply was lost may have launched an instance too
                # (EC2 answers a repeated ClientToken with the same fleet; an endpoint that does not would leak one)
                extras += [i.id for i in instances.list_managed(ec2, cluster_name)
                           if i.tags.get("karpenter.sh/nodeclaim") == name and i.id not in ids]
            for extra in extras:  # never keep more than one instance per NodeClaim
                log.warning("nodeclaim %s: terminating duplicate instance %s", name, extra)
                ec2.terminate_instances(InstanceIds=[extra])
            described = ec2.describe_instances(InstanceIds=[ids[0]])["Reservations"][0]["Instances"][0]
            # the subnets offered but not launched into get their addresses back
            accounting.release_unused(offered, _fulfilled_subnets(resp) or [described.get("SubnetId", "")],
                                      candidates_types, capacity_type)
            inst = instances.from_description(described)
            if capacity_type == L.CAPACITY_TYPE_RESERVED:
                # the reservation of the offering EC2 filled (one per type and zone: reserved_overrides)
                chosen = next((r for r in overrides if r.instance_type == inst.instance_type
                               and r.subnet.zone == inst.zone), overrides[0])
                inst = replace(inst, capacity_type=L.CAPACITY_TYPE_RESERVED, reservation_id=chosen.reservation_id,
                               reservation_type=chosen.reservation_type or "default",
                               reservation_interruptible=chosen.reservation_interruptible)
            return inst
        if other_errors:
            raise LaunchError(f"nodeclaim {name}: CreateFleet failed: {'; '.join(other_errors)}")
        log.info("nodeclaim %s: no capacity on attempt %d, retrying without the refused offerings", name, attempt + 1)
    raise InsufficientCapacityError(f"nodeclaim {name}: every allowed offering was refused for lack of capacity")


def _fulfilled_subnets(resp: dict[str, Any]) -> list[str]:
    """The subnets CreateFleet launched into (as its reply names them)."""
    return [s for i in resp.get("Instances", [])
            if (s := ((i.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}).get("SubnetId"))]
