"""Subnet choice and free-address accounting (controller/cloud/aws/subnets.py), as Karpenter's subnet provider:
most free addresses per zone, launches in flight deducted, unused deductions given back, full subnets passed over."""

from __future__ import annotations

from controller.catalog.types import InstanceType, Offering
from controller.cloud.aws.discovery import Subnet
from controller.cloud.aws.subnets import SubnetProvider, min_pods


class Clock:
    """A settable clock for the provider's TTL caches."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _it(name: str, pods: int, zones: tuple[str, ...] = ("a", "b"), ct: str = "on-demand") -> InstanceType:
    return InstanceType(name, {}, {"pods": pods}, offerings=[Offering(z, ct, 0.1) for z in zones])


A_BIG, A_SMALL, B = Subnet("subnet-1", "a", "az1", 100), Subnet("subnet-2", "a", "az1", 40), Subnet(
    "subnet-3", "b", "az2", 10)
TYPES = [_it("m5.large", 29), _it("m5.xlarge", 58)]


def test_min_pods_is_the_smallest_type_offered_there():
    assert min_pods(TYPES, "a", "on-demand") == 29
    assert min_pods([_it("m5.large", 29, zones=("b",)), _it("m5.xlarge", 58)], "a", "on-demand") == 58
    assert min_pods(TYPES, "a", "spot") == 0  # nothing lands there
    assert min_pods([_it("tiny", 0)], "a", "on-demand") == 1  # the instance's own address at least


def test_most_free_addresses_per_zone_ties_to_the_first():
    provider = SubnetProvider()
    assert {z: s.id for z, s in provider.zonal([A_SMALL, A_BIG, B]).items()} == {"a": "subnet-1", "b": "subnet-3"}
    tie = Subnet("subnet-9", "a", "az1", 100)
    assert provider.zonal([tie, A_BIG])["a"].id == "subnet-9"


def test_launches_in_flight_move_the_next_launch_to_another_subnet():
    provider = SubnetProvider()
    first = provider.zonal_for_launch([A_BIG, A_SMALL], TYPES, "on-demand")
    assert first["a"].id == "subnet-1" and first["a"].available_ips == 100
    assert provider.free(A_BIG) == 71  # 29 pods of the smallest type in flight
    second = provider.zonal_for_launch([A_BIG, A_SMALL], TYPES, "on-demand")
    assert second["a"].id == "subnet-1" and provider.free(A_BIG) == 42
    third = provider.zonal_for_launch([A_BIG, A_SMALL], TYPES, "on-demand")
    assert third["a"].id == "subnet-1" and provider.free(A_BIG) == 13
    # 13 left in subnet-1, 40 in subnet-2: the fourth launch goes to subnet-2
    assert provider.zonal_for_launch([A_BIG, A_SMALL], TYPES, "on-demand")["a"].id == "subnet-2"


def test_subnets_not_launched_into_get_their_deduction_back():
    provider = SubnetProvider()
    offered = provider.zonal_for_launch([A_BIG, B], TYPES, "on-demand")
    assert provider.free(A_BIG) == 71 and provider.free(B) == -19
    provider.release_unused(offered, ["subnet-1"], TYPES, "on-demand")
    assert provider.free(A_BIG) == 71 and provider.free(B) == 10


def test_a_fresh_description_replaces_the_in_flight_count():
    provider = SubnetProvider()
    provider.zonal_for_launch([A_BIG], TYPES, "on-demand")
    provider.observe([Subnet("subnet-1", "a", "az1", 99)])  # EC2 now counts the launched instance's address
    assert provider.free(A_BIG) == 99
    # the status lists subnets without counts: the described count is the one used
    assert provider.zonal([Subnet("subnet-1", "a", "az1", 0)])["a"].available_ips == 99


def test_described_counts_expire_after_five_minutes():
    clock = Clock()
    provider = SubnetProvider(clock)
    provider.observe([Subnet("subnet-1", "a", "az1", 7)])
    assert provider.free(A_BIG) == 7
    clock.now = 301
    assert provider.free(A_BIG) == 100  # back to the subnet's own count


def test_a_full_subnet_is_passed_over_until_it_expires():
    clock = Clock()
    provider = SubnetProvider(clock)
    provider.mark_full("subnet-1")
    assert provider.is_full("subnet-1") and provider.free(A_BIG) == 0
    assert provider.zonal([A_BIG, A_SMALL, B])["a"].id == "subnet-2"
    provider.mark_full("subnet-2")
    assert "a" not in provider.zonal([A_BIG, A_SMALL, B])  # the zone has no subnet left
    clock.now = 181
    assert not provider.is_full("subnet-1") and provider.free(A_BIG) == 0  # counted at 0 until described again
    provider.observe([Subnet("subnet-2", "a", "az1", 40)])
    assert provider.zonal([A_BIG, A_SMALL])["a"].id == "subnet-2"
    clock.now = 302  # the zero count expires as Karpenter's does: the subnet's own count again
    assert provider.free(A_BIG) == 100 and provider.zonal([A_BIG, A_SMALL])["a"].id == "subnet-1"
