"""The pricing provider. The AWS Pricing API is not emulated by LocalStack, so its responses here come from botocore's
Stubber with the recorded shape of GetProducts; spot history is stubbed the same way to test selection of the latest
price, and tested against LocalStack's real DescribeSpotPriceHistory in tests/integration/test_aws_instancetypes.py."""

from __future__ import annotations

import datetime as dt
import json

import boto3
from botocore.stub import ANY, Stubber

from controller.catalog.pricing import PriceTable
from controller.cloud.aws.pricing import PricingProvider, parse_price_list
from controller.cloud.aws.unavailable import UnavailableOfferings


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


def test_price_list_parsing():
    assert parse_price_list([_product("m5.large", "0.0960000000"), _product("c5.large", "0.0850000000")]) == {
        "m5.large": 0.096, "c5.large": 0.085}


def test_live_prices_then_fallback_and_refresh_every_12_hours():
    pricing, ec2 = _clients()
    now = [0.0]
    fallback = PriceTable(on_demand={"m5.large": 0.1, "r5.large": 0.126}, spot={("r5.large", "us-east-1a"): 0.04})
    provider = PricingProvider(pricing, ec2, "us-east-1", fallback, clock=lambda: now[0])
    with Stubber(pricing) as ps, Stubber(ec2) as es:
        ps.add_response("get_products", {"PriceList": [_product("m5.large", "0.096")], "FormatVersion": "aws_v1"},
                        {"ServiceCode": "AmazonEC2", "Filters": ANY})
        t0 = dt.datetime(2026, 11, 22, 10, tzinfo=dt.UTC)
        es.add_response("describe_spot_price_history", {"SpotPriceHistory": [
            {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.031", "Timestamp": t0},
            {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.035",
             "Timestamp": t0 + dt.timedelta(hours=1)}]}, {"ProductDescriptions": ANY, "StartTime": ANY})
        assert provider.on_demand_price("m5.large") == 0.096
        assert provider.spot_price("m5.large", "us-east-1a") == 0.035  # the latest
        assert provider.on_demand_price("r5.large") == 0.126  # not in the live answer: static
        assert provider.spot_price("r5.large", "us-east-1a") == 0.04
        assert provider.source == "pricing-api"
        # within 12 hours nothing is fetched again (the stubber would fail on an unexpected call)
        now[0] = 11 * 3600
        assert provider.on_demand_price("m5.large") == 0.096
        # after 12 hours it refreshes; the Pricing API is unreachable now and the last prices stay
        now[0] = 12 * 3600 + 1
        ps.add_client_error("get_products", service_error_code="AccessDeniedException", http_status_code=403)
        es.add_response("describe_spot_price_history", {"SpotPriceHistory": []},
                        {"ProductDescriptions": ANY, "StartTime": ANY})
        assert provider.on_demand_price("m5.large") == 0.096
        assert provider.version == 2


def test_isolated_vpc_uses_static_prices():
    pricing, ec2 = _clients()
    provider = PricingProvider(pricing, ec2, "us-east-1", PriceTable(on_demand={"m5.large": 0.1}))
    with Stubber(pricing) as ps, Stubber(ec2) as es:
        ps.add_client_error("get_products", service_error_code="EndpointConnectionError", http_status_code=503)
        es.add_client_error("describe_spot_price_history", service_error_code="UnauthorizedOperation",
                            http_status_code=403)
        assert provider.on_demand_price("m5.large") == 0.1
        assert provider.spot_price("m5.large", "us-east-1a") is None
        assert provider.source == "fallback"


def test_unavailable_offerings_expire():
    now = [100.0]
    ice = UnavailableOfferings(clock=lambda: now[0])
    ice.mark_unavailable("m5.large", "us-east-1a", "spot", reason="InsufficientInstanceCapacity")
    assert ice.is_unavailable("m5.large", "us-east-1a", "spot")
    assert not ice.is_unavailable("m5.large", "us-east-1b", "spot")
    now[0] += 181
    assert not ice.is_unavailable("m5.large", "us-east-1a", "spot")
