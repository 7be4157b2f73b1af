"""The AWS provider's TTL caches, with their lifetimes pinned on an injected clock: unavailable offerings (3 minutes),
instance types (5 minutes), discovery (1 minute) and prices (12 hours). The EC2 client here is an in-test fake that
counts calls: only the caching is under test (the real EC2 answers are tested against LocalStack)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controller.catalog.pricing import PriceTable
from controller.cloud.aws.instancetypes import InstanceTypeProvider
from controller.cloud.aws.pricing import PricingProvider
from controller.cloud.aws.unavailable import UnavailableOfferings
from tests.unit.test_catalog import M5_LARGE

ZONES = ("us-east-1a", "us-east-1b")


class Clock:
    """A clock tests move by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class _Paginator:
    def __init__(self, ec2: CountingEC2, operation: str) -> None:
        self.ec2, self.operation = ec2, operation

    def paginate(self, **_: Any) -> Iterator[dict[str, Any]]:
        self.ec2.calls[self.operation] = self.ec2.calls.get(self.operation, 0) + 1
        if self.operation == "describe_instance_type_offerings":
            yield {"InstanceTypeOfferings": [{"InstanceType": "m5.large", "Location": z} for z in ZONES]}
        elif self.operation == "describe_instance_types":
            yield {"InstanceTypes": [M5_LARGE]}
        elif self.operation == "describe_spot_price_history":
            yield {"SpotPriceHistory": []}


class CountingEC2:
    """Answers the three Describe calls of the instance-type and price providers, counting them."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def get_paginator(self, operation: str) -> _Paginator:
        return _Paginator(self, operation)


def _provider(clock: Clock) -> tuple[InstanceTypeProvider, CountingEC2]:
    ec2 = CountingEC2()
    pricing = PricingProvider(None, ec2, "us-east-1", PriceTable(on_demand={"m5.large": 0.096},
                                                                 spot={("m5.large", z): 0.03 for z in ZONES}),
                              clock=clock)
    return InstanceTypeProvider(ec2, pricing, "us-east-1", UnavailableOfferings(clock=clock), clock=clock), ec2


def _availability(provider: InstanceTypeProvider) -> dict[tuple[str, str], bool]:
    (m5,) = provider.list()
    return {(o.zone, o.capacity_type): o.available for o in m5.offerings}


def test_unavailable_offering_lasts_exactly_three_minutes():
    clock = Clock()
    ice = UnavailableOfferings(clock=clock)
    ice.mark_unavailable("m5.large", "us-east-1a", "spot", reason="InsufficientInstanceCapacity")
    before = ice.generation
    clock.now += 179
    assert ice.is_unavailable("m5.large", "us-east-1a", "spot")
    assert not ice.is_unavailable("m5.large", "us-east-1b", "spot")
    assert not ice.is_unavailable("m5.large", "us-east-1a", "on-demand")
    assert ice.generation == before  # nothing changed yet
    clock.now += 2
    assert not ice.is_unavailable("m5.large", "us-east-1a", "spot")
    assert ice.generation != before  # its expiry is a change caches must see


def test_marking_again_restarts_the_three_minutes():
    clock = Clock()
    ice = UnavailableOfferings(clock=clock)
    ice.mark_unavailable("m5.large", "us-east-1a", "spot")
    clock.now += 100
    ice.mark_unavailable("m5.large", "us-east-1a", "spot")
    clock.now += 179
    assert ice.is_unavailable("m5.large", "us-east-1a", "spot")
    clock.now += 2
    assert not ice.is_unavailable("m5.large", "us-east-1a", "spot")


def test_next_listing_after_an_ice_no_longer_offers_it_and_offers_it_again_after_three_minutes():
    clock = Clock()
    provider, ec2 = _provider(clock)
    assert all(_availability(provider).values())
    provider.unavailable.mark_unavailable("m5.large", "us-east-1a", "spot", reason="InsufficientInstanceCapacity")
    clock.now += 1
    after = _availability(provider)
    assert after.pop(("us-east-1a", "spot")) is False
    assert all(after.values())
    clock.now += 179  # 180 s after the mark: available again, without waiting for the 5-minute type cache
    assert all(_availability(provider).values())
    assert ec2.calls["describe_instance_types"] == 1  # rebuilt from what EC2 said, not described again


def test_instance_types_are_described_again_after_exactly_five_minutes():
    clock = Clock()
    provider, ec2 = _provider(clock)
    first = provider.list()
    clock.now += 299
    assert provider.list() is first  # the same built list: no EC2 call, no rebuild
    assert ec2.calls == {"describe_instance_type_offerings": 1, "describe_instance_types": 1,
                         "describe_spot_price_history": 1}
    clock.now += 2
    assert [it.name for it in provider.list()] == ["m5.large"]
    assert ec2.calls["describe_instance_types"] == 2 and ec2.calls["describe_instance_type_offerings"] == 2


def test_kubelet_variants_are_cached_apart():
    clock = Clock()
    provider, _ = _provider(clock)
    default = provider.list()
    custom = provider.list(kubelet={"maxPods": 110})
    assert default[0].capacity["pods"] == 29 and custom[0].capacity["pods"] == 110
    assert provider.list() is default and provider.list(kubelet={"maxPods": 110}) is custom


def test_prices_are_fetched_again_after_exactly_twelve_hours():
    clock = Clock()
    ec2 = CountingEC2()
    pricing = PricingProvider(None, ec2, "us-east-1", PriceTable(on_demand={"m5.large": 0.096}), clock=clock)
    assert pricing.on_demand_price("m5.large") == 0.096
    assert (ec2.calls, pricing.version) == ({"describe_spot_price_history": 1}, 1)
    clock.now += 12 * 3600 - 1
    pricing.spot_price("m5.large", "us-east-1a")
    assert (ec2.calls, pricing.version) == ({"describe_spot_price_history": 1}, 1)
    clock.now += 2
    pricing.on_demand_price("m5.large")
    assert (ec2.calls, pricing.version) == ({"describe_spot_price_history": 2}, 2)


@pytest.mark.parametrize(("after", "described"), [(59, 1), (61, 2)])
def test_discovery_is_cached_for_exactly_a_minute(after, described):
    from controller.cloud.aws.provider import AWSCloudProvider
    from controller.cloud.aws.userdata import ClusterInfo

    clock = Clock()
    provider, _ = _provider(clock)
    aws = AWSCloudProvider(cluster=ClusterInfo("c", "https://x", "", "10.0.0.0/16"), region="us-east-1",
                           k8s_version="1.31", ec2=None, ssm=None, iam=None, instance_types=provider, clock=clock)
    made: list[float] = []

    def make() -> list[str]:
        made.append(clock.now)
        return ["subnet-1"]

    assert aws._cached("subnets/default", make) == ["subnet-1"]
    clock.now += after
    assert aws._cached("subnets/default", make) == ["subnet-1"]
    assert len(made) == described
