"""The pricing provider. The AWS Pricing API is not emulated by LocalStack, so its responses here come from botocore's
Stubber with the recorded shape of GetProducts; spot history is stubbed the same way to test selection of the latest
price, and tested against LocalStack's real DescribeSpotPriceHistory in tests/integration/test_aws_instancetypes.py.

Every Stubber is used through `stubbed`, which fails the test unless every queued response was consumed: the provider
swallows botocore errors (it falls back to static prices), so an unexpected or missing call would otherwise pass."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from controller.catalog.pricing import PriceTable
from controller.cloud.aws.clients import PRICING_MAX_ATTEMPTS, make_clients
from controller.cloud.aws.pricing import REFRESH_SECONDS, PricingProvider, parse_price_list
from controller.cloud.aws.unavailable import DEFAULT_TTL_SECONDS, UnavailableOfferings


def _product(instance_type: str, usd: str) -> str:
    return json.dumps({
        "product": {"productFamily": "Compute Instance", "attributes": {
            "instanceType": instance_type, "regionCode": "us-east-1", "operatingSystem": "Linux", "tenancy": "Shared",
            "preInstalledSw": "NA", "capacitystatus": "Used"}},
        "terms": {"OnDemand": {"ABC.JRTCKXETXF": {"priceDimensions": {"ABC.JRTCKXETXF.6YS6EN2CT7": {
            "unit": "Hrs", "pricePerUnit": {"USD": usd}, "description": f"$ per On Demand Linux {instance_type}"}}}}},
    })


def _clients():
    kw = {"aws_access_key_id": "x", "aws_secret_access_key": "x"}
    return boto3.client("pricing", region_name="us-east-1", **kw), boto3.client("ec2", region_name="us-east-1", **kw)


@contextlib.contextmanager
def stubbed(*clients: Any) -> Iterator[list[Stubber]]:
    """Stubbers for the clients that, on a clean exit, fail unless every queued response was used."""
    stubbers = [Stubber(c) for c in clients]
    for s in stubbers:
        s.activate()
    try:
        yield stubbers
        for s in stubbers:
            s.assert_no_pending_responses()
    finally:
        for s in stubbers:
            s.deactivate()


def _spot_history(*prices: tuple[str, str, str, dt.datetime]) -> dict[str, Any]:
    return {"SpotPriceHistory": [{"InstanceType": t, "AvailabilityZone": z, "SpotPrice": p, "Timestamp": at}
                                 for t, z, p, at in prices]}


SPOT_PARAMS = {"ProductDescriptions": ANY, "StartTime": ANY}
T0 = dt.datetime(2026, 11, 22, 10, tzinfo=dt.UTC)


def test_price_list_parsing():
    assert parse_price_list([_product("m5.large", "0.0960000000"), _product("c5.large", "0.0850000000")]) == {
        "m5.large": 0.096, "c5.large": 0.085}


def test_the_stub_guard_fails_on_an_unused_response():
    pricing, _ = _clients()
    with pytest.raises(AssertionError, match="responses remaining"), stubbed(pricing) as (ps,):
        ps.add_response("get_products", {"PriceList": [], "FormatVersion": "aws_v1"})


def test_live_prices_then_the_static_ones_for_what_the_api_does_not_list():
    pricing, ec2 = _clients()
    fallback = PriceTable(on_demand={"m5.large": 0.1, "r5.large": 0.126}, spot={("r5.large", "us-east-1a"): 0.04})
    provider = PricingProvider(pricing, ec2, "us-east-1", fallback, clock=lambda: 0.0)
    with stubbed(pricing, ec2) as (ps, es):
        ps.add_response("get_products", {"PriceList": [_product("m5.large", "0.096")], "FormatVersion": "aws_v1"},
                        {"ServiceCode": "AmazonEC2", "Filters": ANY})
        es.add_response("describe_spot_price_history", _spot_history(
            ("m5.large", "us-east-1a", "0.031", T0), ("m5.large", "us-east-1a", "0.035", T0 + dt.timedelta(hours=1)),
            ("m5.large", "us-east-1b", "0.030", T0 + dt.timedelta(hours=2))), SPOT_PARAMS)
        assert provider.on_demand_price("m5.large") == 0.096
        assert provider.spot_price("m5.large", "us-east-1a") == 0.035  # the latest in that zone
        assert provider.spot_price("m5.large", "us-east-1b") == 0.030
        assert provider.on_demand_price("r5.large") == 0.126  # not in the live answer: static
        assert provider.spot_price("r5.large", "us-east-1a") == 0.04
        assert provider.source == "pricing-api"


def test_prices_refresh_every_12_hours_to_the_second():
    """Pinned: 11h59m59s after a refresh nothing is fetched, 12h+1s after it the new prices are served."""
    assert REFRESH_SECONDS == 12 * 3600
    pricing, ec2 = _clients()
    now = [1000.0]
    provider = PricingProvider(pricing, ec2, "us-east-1", PriceTable(on_demand={}), clock=lambda: now[0])
    with stubbed(pricing, ec2) as (ps, es):
        ps.add_response("get_products", {"PriceList": [_product("m5.large", "0.096")], "FormatVersion": "aws_v1"})
        es.add_response("describe_spot_price_history", _spot_history(("m5.large", "us-east-1a", "0.035", T0)))
        assert provider.on_demand_price("m5.large") == 0.096
        assert provider.version == 1
    # no response queued: a call now would fail inside the provider and bump the version
    with stubbed(pricing, ec2):
        now[0] = 1000 + 12 * 3600 - 1
        assert provider.on_demand_price("m5.large") == 0.096
        assert provider.spot_price("m5.large", "us-east-1a") == 0.035
        assert provider.version == 1
    with stubbed(pricing, ec2) as (ps, es):
        now[0] = 1000 + 12 * 3600 + 1
        ps.add_response("get_products", {"PriceList": [_product("m5.large", "0.101")], "FormatVersion": "aws_v1"})
        es.add_response("describe_spot_price_history", _spot_history(("m5.large", "us-east-1a", "0.041", T0)))
        assert provider.on_demand_price("m5.large") == 0.101
        assert provider.spot_price("m5.large", "us-east-1a") == 0.041
        assert provider.version == 2


def test_a_failed_refresh_keeps_the_last_live_prices():
    pricing, ec2 = _clients()
    now = [0.0]
    provider = PricingProvider(pricing, ec2, "us-east-1", PriceTable(on_demand={"m5.large": 0.1}),
                               clock=lambda: now[0])
    with stubbed(pricing, ec2) as (ps, es):
        ps.add_response("get_products", {"PriceList": [_product("m5.large", "0.096")], "FormatVersion": "aws_v1"})
        es.add_response("describe_spot_price_history", _spot_history(("m5.large", "us-east-1a", "0.035", T0)))
        assert provider.on_demand_price("m5.large") == 0.096
        now[0] = REFRESH_SECONDS
        ps.add_client_error("get_products", service_error_code="AccessDeniedException", http_status_code=403)
        es.add_response("describe_spot_price_history", {"SpotPriceHistory": []}, SPOT_PARAMS)
        assert provider.on_demand_price("m5.large") == 0.096  # not the static 0.1
        assert provider.spot_price("m5.large", "us-east-1a") == 0.035
        assert provider.version == 2 and provider.source == "pricing-api"


def _closed_port() -> int:
    """A 127.0.0.1 port nothing listens on: bound, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_isolated_vpc_unreachable_pricing_endpoint_uses_static_prices(caplog, monkeypatch):
    """An isolated VPC has no Pricing endpoint: a real connection refusal (EndpointConnectionError), retried as
    karpy's own Pricing client config says, then the static prices; spot prices still come from EC2."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    clients = make_clients("us-east-1", endpoint_url=f"http://127.0.0.1:{_closed_port()}", eks=False)
    sends: list[str] = []
    clients.pricing.meta.events.register("before-send.pricing.GetProducts",
                                         lambda **kw: sends.append("GetProducts"))
    _, ec2 = _clients()
    provider = PricingProvider(clients.pricing, ec2, "us-east-1", PriceTable(on_demand={"m5.large": 0.1}))
    with caplog.at_level(logging.WARNING, logger="karpy.pricing"), stubbed(ec2) as (es,):
        es.add_response("describe_spot_price_history", _spot_history(("m5.large", "us-east-1a", "0.035", T0)))
        assert provider.on_demand_price("m5.large") == 0.1
        assert provider.on_demand_price("c5.large") is None
        assert provider.spot_price("m5.large", "us-east-1a") == 0.035
    assert provider.source == "fallback"
    assert sends == ["GetProducts"] * PRICING_MAX_ATTEMPTS
    assert [r.getMessage() for r in caplog.records if r.name == "karpy.pricing"] == [
        f"on-demand prices unavailable (Could not connect to the endpoint URL: "
        f'"http://127.0.0.1:{clients.pricing.meta.endpoint_url.rsplit(":", 1)[1]}/"); using the static prices']


def test_unavailable_offerings_last_three_minutes_to_the_second():
    """Pinned: Karpenter's 3-minute ICE cache: still unavailable at 179 s, available again at 181 s."""
    assert DEFAULT_TTL_SECONDS == 180
    now = [100.0]
    ice = UnavailableOfferings(clock=lambda: now[0])
    ice.mark_unavailable("m5.large", "us-east-1a", "spot", reason="InsufficientInstanceCapacity")
    assert ice.is_unavailable("m5.large", "us-east-1a", "spot")
    assert not ice.is_unavailable("m5.large", "us-east-1b", "spot")
    assert not ice.is_unavailable("m5.large", "us-east-1a", "on-demand")
    now[0] = 100 + 179
    assert ice.is_unavailable("m5.large", "us-east-1a", "spot")
    now[0] = 100 + 181
    assert not ice.is_unavailable("m5.large", "us-east-1a", "spot")
