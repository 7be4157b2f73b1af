"""Reserved offerings and reserved launches of the AWS provider, case by case as Karpenter's AWS provider tests them
(providers/instancetype offering resolver, providers/capacityreservation availability, providers/instance filters and
CreateFleet input, launchtemplate targeted mode, instance capacity type)."""

from __future__ import annotations

import dataclasses

import pytest

from controller.api import labels as L
from controller.catalog.types import InstanceType, Offering
from controller.cloud.aws import instances
from controller.cloud.aws.capacityreservations import ReservationAvailability, with_reserved_offerings
from controller.cloud.aws.discovery import Subnet
from controller.cloud.aws.fleet import choose_overrides, target_capacity_type
from controller.cloud.aws.launchtemplates import LaunchTemplateSpec
from controller.cloud.aws.unavailable import UnavailableOfferings
from controller.cloud.provider import NodeClass, ResolvedCapacityReservation
from controller.scheduling.requirements import Requirements

SUBNETS = {"a": Subnet("subnet-a", "a", "use1-az1", 100), "b": Subnet("subnet-b", "b", "use1-az2", 100)}
OD = {"m5.large": 0.096, "m5.xlarge": 0.192}


def _it(name: str) -> InstanceType:
    return InstanceType(name, {L.INSTANCE_TYPE: name, L.ARCH: "amd64"}, {"cpu": 2000},
                        offerings=[Offering(z, ct, OD[name] * (0.4 if ct == "spot" else 1.0))
                                   for z in ("a", "b") for ct in ("spot", "on-demand")])


def _cr(rid: str, it: str = "m5.large", zone: str = "a", **kw: object) -> ResolvedCapacityReservation:
    return ResolvedCapacityReservation(rid, zone, it, **kw)


def _avail(**counts: int) -> ReservationAvailability:
    a = ReservationAvailability(clock=lambda: 100.0)
    a.sync({k.replace("_", "-"): v for k, v in counts.items()})
    return a


def _reqs(*cts: str) -> Requirements:
    return Requirements.from_node_selector_requirements([{"key": L.CAPACITY_TYPE, "operator": "In",
                                                          "values": list(cts)}])


def _reserved(its: list[InstanceType], name: str) -> list[Offering]:
    return [o for it in its if it.name == name for o in it.offerings if o.capacity_type == L.CAPACITY_TYPE_RESERVED]


# ---- offerings ------------------------------------------------------------------------------------------------
def test_reserved_offering_is_priced_at_the_on_demand_price_divided_by_ten_million():
    its = with_reserved_offerings([_it("m5.large"), _it("m5.xlarge")], [_cr("cr-1")], _avail(cr_1=3), OD.get,
                                  {"a": "use1-az1"})
    [o] = _reserved(its, "m5.large")
    assert o.price == pytest.approx(0.096 / 10_000_000) and o.zone == "a" and o.zone_id == "use1-az1"
    assert (o.reservation_id, o.reservation_capacity, o.reservation_type, o.available) == ("cr-1", 3, "default", True)
    assert not _reserved(its, "m5.xlarge")


def test_reserved_offering_without_a_price_is_still_offered_at_zero():
    [o] = _reserved(with_reserved_offerings([_it("m5.large")], [_cr("cr-1")], _avail(cr_1=1), lambda _: None),
                    "m5.large")
    assert o.price == 0.0 and o.available


def test_reserved_offering_is_unavailable_without_room_when_expiring_or_outside_the_types_zones():
    crs = [_cr("cr-1"), _cr("cr-2", state="expiring"), _cr("cr-3", zone="z"), _cr("cr-4")]
    offerings = {o.reservation_id: o for o in _reserved(
        with_reserved_offerings([_it("m5.large")], crs, _avail(cr_1=0, cr_2=2, cr_3=2), OD.get), "m5.large")}
    assert {k: o.available for k, o in offerings.items()} == {"cr-1": False, "cr-2": False, "cr-3": False,
                                                             "cr-4": False}  # cr-4: EC2 never counted it


def test_types_without_a_reservation_are_the_shared_objects_and_the_listing_is_untouched():
    base = [_it("m5.large"), _it("m5.xlarge")]
    its = with_reserved_offerings(base, [_cr("cr-1")], _avail(cr_1=1), OD.get)
    assert its[1] is base[1] and its[0] is not base[0]
    assert not _reserved(base, "m5.large")  # the cached listing did not change


def test_nodeclass_reads_status_capacity_reservations():
    nc = NodeClass.from_manifest({"metadata": {"name": "x"}, "status": {"capacityReservations": [
        {"id": "cr-1", "availabilityZone": "a", "instanceType": "m5.large", "reservationType": "capacity-block",
         "interruptible": False, "state": "expiring", "endTime": "2026-11-25T12:00:00Z"},
        {"id": "", "instanceType": "m5.large"}, "junk"]}})
    assert nc.capacity_reservations == (ResolvedCapacityReservation(
        "cr-1", "a", "m5.large", "capacity-block", False, "expiring", "2026-11-25T12:00:00Z"),)


# ---- availability -----------------------------------------------------------------------------------------------
def test_availability_counts_launches_after_the_sync_terminations_and_refusals():
    now = [100.0]
    a = ReservationAvailability(clock=lambda: now[0])
    a.sync({"cr-1": 2})
    a.mark_launched("cr-1")
    assert a.count("cr-1") == 1
    a.mark_terminated("cr-1")
    assert a.count("cr-1") == 2
    a.mark_unavailable("cr-1", "cr-unknown")
    assert a.count("cr-1") == 0 and a.count("cr-unknown") == 0
    a.mark_launched("cr-1")  # never below zero
    assert a.count("cr-1") == 0


def test_a_launch_before_the_last_sync_is_not_counted_twice():
    now = [100.0]
    a = ReservationAvailability(clock=lambda: now[0])
    a.sync({"cr-1": 2})
    now[0] = 50.0  # a launch older than EC2's count (the count already includes it)
    a.mark_launched("cr-1")
    assert a.count("cr-1") == 2


# ---- launch ------------------------------------------------------------------------------------------------------
def _with(crs: list[ResolvedCapacityReservation], **counts: int) -> tuple[list[InstanceType], ReservationAvailability]:
    avail = _avail(**counts)
    return with_reserved_offerings([_it("m5.large"), _it("m5.xlarge")], crs, avail, OD.get), avail


def test_reserved_capacity_is_launched_first_when_the_nodeclaim_allows_it():
    its, avail = _with([_cr("cr-1")], cr_1=1)
    ct, overrides = choose_overrides(_reqs("reserved", "spot", "on-demand"), its, SUBNETS, UnavailableOfferings(),
                                     avail)
    assert ct == "reserved" and [(o.instance_type, o.reservation_id) for o in overrides] == [("m5.large", "cr-1")]
    assert target_capacity_type(ct, overrides) == "on-demand"
    ct, _ = choose_overrides(_reqs("spot", "on-demand"), its, SUBNETS, UnavailableOfferings(), avail)
    assert ct == "spot"  # a NodePool that does not allow reserved never launches into the reservation


def test_a_reservation_with_no_room_left_is_not_offered():
    its, avail = _with([_cr("cr-1")], cr_1=1)
    avail.mark_unavailable("cr-1")  # EC2 refused it during this launch
    ct, _ = choose_overrides(_reqs("reserved", "on-demand"), its, SUBNETS, UnavailableOfferings(), avail)
    assert ct == "on-demand"
    ct, overrides = choose_overrides(_reqs("reserved"), its, SUBNETS, UnavailableOfferings(), avail)
    assert (ct, overrides) == ("", [])


def test_reserved_offering_filter_keeps_one_reservation_per_type_and_zone_the_one_with_most_room():
    its, avail = _with([_cr("cr-1"), _cr("cr-2"), _cr("cr-3", zone="b")], cr_1=1, cr_2=5, cr_3=1)
    _, overrides = choose_overrides(_reqs("reserved"), its, SUBNETS, UnavailableOfferings(), avail)
    assert sorted((o.subnet.zone, o.reservation_id) for o in overrides) == [("a", "cr-2"), ("b", "cr-3")]


def test_capacity_reservation_type_filter_picks_the_cheapest_kind_ordinary_first_on_ties():
    its, avail = _with([_cr("cr-1", reservation_type="capacity-block"), _cr("cr-2", interruptible=True),
                        _cr("cr-3")], cr_1=1, cr_2=1, cr_3=1)
    _, overrides = choose_overrides(_reqs("reserved"), its, SUBNETS, UnavailableOfferings(), avail)
    assert [o.reservation_id for o in overrides] == ["cr-3"]
    its, avail = _with([_cr("cr-1", reservation_type="capacity-block"), _cr("cr-2", interruptible=True)],
                       cr_1=1, cr_2=1)
    ct, overrides = choose_overrides(_reqs("reserved"), its, SUBNETS, UnavailableOfferings(), avail)
    assert [o.reservation_id for o in overrides] == ["cr-1"]
    assert target_capacity_type(ct, overrides) == "capacity-block"
    its, avail = _with([_cr("cr-2", interruptible=True)], cr_2=1)
    ct, overrides = choose_overrides(_reqs("reserved"), its, SUBNETS, UnavailableOfferings(), avail)
    assert target_capacity_type(ct, overrides) == "reserved-capacity"


def test_capacity_block_filter_keeps_only_the_cheapest_capacity_block():
    its, avail = _with([_cr("cr-1", "m5.xlarge", reservation_type="capacity-block"),
                        _cr("cr-2", reservation_type="capacity-block"),
                        _cr("cr-3", zone="b", reservation_type="capacity-block")], cr_1=1, cr_2=1, cr_3=1)
    _, overrides = choose_overrides(_reqs("reserved"), its, SUBNETS, UnavailableOfferings(), avail)
    assert [(o.instance_type, o.reservation_id) for o in overrides] == [("m5.large", "cr-2")]


def test_requirements_on_the_reservation_labels_select_offerings():
    its, avail = _with([_cr("cr-1"), _cr("cr-2", zone="b", reservation_type="capacity-block")], cr_1=1, cr_2=1)
    reqs = Requirements.from_node_selector_requirements([
        {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["reserved"]},
        {"key": L.CAPACITY_RESERVATION_TYPE, "operator": "In", "values": ["capacity-block"]}])
    _, overrides = choose_overrides(reqs, its, SUBNETS, UnavailableOfferings(), avail)
    assert [o.reservation_id for o in overrides] == ["cr-2"]


def test_launch_templates_in_targeted_mode_as_karpenter_builds_them():
    base = LaunchTemplateSpec("ami-1", "", ("sg-1",), "profile")
    assert "CapacityReservationSpecification" not in base.data()  # the ReservedCapacity gate off
    assert dataclasses.replace(base, targeted=True).data()["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "none"}
    reserved = dataclasses.replace(base, targeted=True, capacity_reservation_id="cr-1",
                                   capacity_reservation_type="default")
    assert reserved.data()["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "capacity-reservations-only",
        "CapacityReservationTarget": {"CapacityReservationId": "cr-1"}}
    assert "InstanceMarketOptions" not in reserved.data() and reserved.name() != base.name()
    block = dataclasses.replace(reserved, capacity_reservation_type="capacity-block")
    assert block.data()["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    odcr = dataclasses.replace(reserved, capacity_reservation_interruptible=True)
    assert odcr.data()["InstanceMarketOptions"] == {"MarketType": "interruptible-capacity-reservation"}


def _described(**kw: object) -> dict[str, object]:
    return {"InstanceId": "i-1", "InstanceType": "m5.large", "Placement": {"AvailabilityZone": "a"},
            "State": {"Name": "running"}, **kw}


def test_instance_capacity_type_is_reserved_only_when_launched_into_the_reservation():
    targeted = {"CapacityReservationPreference": "capacity-reservations-only"}
    i = instances.from_description(_described(CapacityReservationId="cr-1",
                                              CapacityReservationSpecification=targeted))
    assert (i.capacity_type, i.reservation_id, i.reservation_type, i.reservation_interruptible) == (
        "reserved", "cr-1", "default", False)
    block = instances.from_description(_described(CapacityReservationId="cr-1", InstanceLifecycle="capacity-block",
                                                  CapacityReservationSpecification=targeted))
    assert block.reservation_type == "capacity-block"
    odcr = instances.from_description(_described(CapacityReservationId="cr-1",
                                                 InstanceLifecycle="interruptible-capacity-reservation",
                                                 CapacityReservationSpecification=targeted))
    assert odcr.reservation_interruptible
    # landed in an open reservation, or the reservation ended (EC2 drops its ID): on-demand
    assert instances.from_description(_described(CapacityReservationId="cr-1", CapacityReservationSpecification={
        "CapacityReservationPreference": "open"})).capacity_type == "on-demand"
    assert instances.from_description(_described(CapacityReservationSpecification=targeted)).capacity_type == \
        "on-demand"


class _Listing:
    """The instance-type provider's shared listing, as AWSCloudProvider reads it."""

    def __init__(self) -> None:
        self.unavailable = UnavailableOfferings()
        self.pricing = type("Pricing", (), {"on_demand_price": staticmethod(OD.get)})()
        self.types = [_it("m5.large"), _it("m5.xlarge")]

    def list(self, kubelet: object = None, ami_family: str = "al2023") -> list[InstanceType]:
        return self.types


@pytest.mark.parametrize("gate", [True, False])
def test_the_reserved_capacity_gate_decides_whether_reservations_are_offered(gate):
    from controller.cloud.aws.provider import AWSCloudProvider
    from controller.cloud.aws.userdata import ClusterInfo

    provider = AWSCloudProvider(cluster=ClusterInfo("c", "https://x", "Q0E="), region="us-east-1", k8s_version="1.31",
                                ec2=None, ssm=None, iam=None, instance_types=_Listing(),
                                reserved_capacity=gate)
    provider.reservations.sync({"cr-1": 1})
    nc = NodeClass("x", subnets=(), capacity_reservations=(_cr("cr-1"),))
    offered = _reserved(provider.get_instance_types(nc), "m5.large")
    assert [o.reservation_id for o in offered] == (["cr-1"] if gate else [])
