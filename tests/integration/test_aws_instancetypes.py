"""Instance types and offerings from LocalStack's real EC2 API (DescribeInstanceTypes, DescribeInstanceTypeOfferings,
DescribeSpotPriceHistory). No Pricing API here: on-demand prices come from the static table, as in an isolated VPC."""

from __future__ import annotations

import pytest

from controller.catalog.pricing import PriceTable
from controller.cloud.aws.instancetypes import InstanceTypeProvider
from controller.cloud.aws.pricing import PricingProvider
from controller.cloud.aws.unavailable import UnavailableOfferings

pytestmark = pytest.mark.localstack


@pytest.fixture(scope="module")
def provider(aws_client):
    ec2 = aws_client("ec2")
    fallback = PriceTable(on_demand={"m5.large": 0.096, "c7g.xlarge": 0.145, "p4d.24xlarge": 32.77})
    pricing = PricingProvider(None, ec2, "us-east-1", fallback)
    return InstanceTypeProvider(ec2, pricing, "us-east-1", UnavailableOfferings())


def test_types_offerings_and_prices(provider):
    types = {it.name: it for it in provider.list()}
    assert {"m5.large", "c7g.xlarge", "p4d.24xlarge"} <= set(types)
    m5 = types["m5.large"]
    assert m5.labels["karpenter.k8s.aws/instance-family"] == "m5"
    assert m5.allocatable["cpu"] == 1930 and m5.capacity["pods"] == 29
    od = [o for o in m5.offerings if o.capacity_type == "on-demand"]
    spot = [o for o in m5.offerings if o.capacity_type == "spot"]
    assert {o.price for o in od} == {0.096}
    assert spot and all(o.price > 0 for o in spot)  # from LocalStack's spot price history
    assert len({o.zone for o in od}) >= 3
    assert types["p4d.24xlarge"].capacity["nvidia.com/gpu"] == 8


def test_ice_marks_offerings_unavailable_and_kubelet_overrides(provider):
    zone = next(o.zone for it in provider.list() if it.name == "m5.large" for o in it.offerings)
    provider.unavailable.mark_unavailable("m5.large", zone, "spot", reason="InsufficientInstanceCapacity")
    m5 = next(it for it in provider.list() if it.name == "m5.large")
    flagged = [o for o in m5.offerings if o.zone == zone and o.capacity_type == "spot"]
    assert flagged and not any(o.available for o in flagged)
    assert all(o.available for o in m5.offerings if o.zone != zone)
    custom = next(it for it in provider.list(kubelet={"maxPods": 110}) if it.name == "m5.large")
    assert custom.capacity["pods"] == 110


def test_catalog_refresh_cli_writes_a_usable_snapshot(localstack_endpoint, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from cli import main
    from controller.catalog.snapshot import load_catalog

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    out = tmp_path / "snap.json.gz"
    res = CliRunner().invoke(main, ["catalog", "refresh", "--region", "us-east-1", "--endpoint", localstack_endpoint,
                                    "--no-pricing-api", "-o", str(out)])
    assert res.exit_code == 0, res.output
    cat = load_catalog(str(out))
    assert len(cat.instance_types) > 500
    # spot prices came from the spot price history, on-demand from the estimate model, and the file says so
    assert cat.price_source.startswith("live: Pricing API on-demand and spot price history where available")
    assert "estimated" in cat.price_source
