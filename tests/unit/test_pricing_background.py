"""The controller's prices at a cold start: the bundled prices answer at once while the Pricing API (slow, or not
reachable at all) is asked in the background, and its answer is served once it comes."""

from __future__ import annotations

import json
import threading
from typing import Any

from controller.catalog.pricing import PriceTable
from controller.cloud.aws.pricing import PricingProvider


class _Pages:
    def __init__(self, pages: list[dict[str, Any]], gate: threading.Event | None = None) -> None:
        self.pages = pages
        self.gate = gate

    def paginate(self, **_: Any) -> list[dict[str, Any]]:
        if self.gate is not None:
            assert self.gate.wait(60), "the test never released the Pricing API"
        return self.pages


class _SlowPricing:
    """The Pricing API that answers only once the test lets it (a stand-in: no server here emulates Pricing)."""

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate

    def get_paginator(self, name: str) -> _Pages:
        assert name == "get_products"
        product = {"product": {"attributes": {"instanceType": "m5.large"}},
                   "terms": {"OnDemand": {"t": {"priceDimensions": {"d": {"pricePerUnit": {"USD": "0.096"}}}}}}}
        return _Pages([{"PriceList": [json.dumps(product)]}], self.gate)


class _EC2:
    def get_paginator(self, name: str) -> _Pages:
        assert name == "describe_spot_price_history"
        return _Pages([{"SpotPriceHistory": []}])


def test_bundled_prices_answer_while_the_pricing_api_is_slow_then_its_prices_are_served():
    gate = threading.Event()
    provider = PricingProvider(_SlowPricing(gate), _EC2(), "us-east-1", PriceTable(on_demand={"m5.large": 0.1}),
                               background=True)
    try:
        assert provider.current_version() == 0
        assert provider.on_demand_price("m5.large") == 0.1  # at once: the refresh waits on the API meanwhile
        assert provider.source == "fallback"
    finally:
        gate.set()
    assert provider.wait_refreshed(60)
    assert provider.on_demand_price("m5.large") == 0.096
    assert (provider.version, provider.source) == (1, "pricing-api")
