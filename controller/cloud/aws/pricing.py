"""Live EC2 prices: on-demand from the AWS Pricing API, spot from DescribeSpotPriceHistory, refreshed every 12 hours,
falling back to static prices when the APIs cannot be reached (isolated VPCs have no Pricing endpoint).

In the controller the refresh runs in the background (as Karpenter's pricing controller does): the bundled prices
answer from the first pending pod on, so no Pricing API call, slow or failing, sits between a pod and its NodeClaim.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from cachetools import TTLCache

from controller.catalog.pricing import PriceTable

log = logging.getLogger("karpy.pricing")
REFRESH_SECONDS = 12 * 3600
# the Pricing API's names for regions (its "location" attribute is not the region code; regionCode is)
ON_DEMAND_FILTERS = (("operatingSystem", "Linux"), ("tenancy", "Shared"), ("preInstalledSw", "NA"),
                     ("capacitystatus", "Used"))


def parse_price_list(items: list[str]) -> dict[str, float]:
    """On-demand USD per hour per instance type from GetProducts' PriceList (JSON strings)."""
    out: dict[str, float] = {}
    for raw in items:
        product = json.loads(raw)
        itype = ((product.get("product") or {}).get("attributes") or {}).get("instanceType")
        for term in ((product.get("terms") or {}).get("OnDemand") or {}).values():
            for dim in (term.get("priceDimensions") or {}).values():
                usd = (dim.get("pricePerUnit") or {}).get("USD")
                if itype and usd is not None and float(usd) > 0:
                    out[itype] = float(usd)
    return out


class PricingProvider:
    """Prices for the instance-type provider; never raises for an unreachable API, it serves the fallback."""

    def __init__(self, pricing: Any | None, ec2: Any, region: str, fallback: PriceTable,
                 clock: Callable[[], float] = time.monotonic, refresh_seconds: float = REFRESH_SECONDS,
                 background: bool = False) -> None:
        self.pricing = pricing
        self.ec2 = ec2
        self.region = region
        self.fallback = fallback
        self.clock = clock
        self.on_demand: dict[str, float] = {}
        self.spot: dict[tuple[str, str], float] = {}
        # one entry while the prices are fresh: its expiry is the next refresh
        self._fresh: TTLCache[str, int] = TTLCache(1, refresh_seconds, timer=clock)
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self.source = "fallback"
        self.version = 0  # bumps on every refresh, so caches of priced offerings know to rebuild
        self.background = background  # refresh on a thread of its own, serving the prices in hand meanwhile
        self._refreshing: threading.Thread | None = None

    def _warn_once(self, what: str, error: Exception) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning("%s prices unavailable (%s); using the static prices", what, error)

    def refresh(self) -> None:
        """Fetch on-demand and spot prices; each part keeps its previous values (or the fallback) on error."""
        if self.pricing is not None:
            try:
                items: list[str] = []
                filters = [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": self.region}]
                filters += [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in ON_DEMAND_FILTERS]
                for page in self.pricing.get_paginator("get_products").paginate(ServiceCode="AmazonEC2",
                                                                                Filters=filters):
                    items.extend(page.get("PriceList", []))
                prices = parse_price_list(items)
                if prices:
                    self.on_demand = prices
                    self.source = "pricing-api"
            except (BotoCoreError, ClientError) as e:
                self._warn_once("on-demand", e)
        try:
            latest: dict[tuple[str, str], tuple[dt.datetime, float]] = {}
            pages = self.ec2.get_paginator("describe_spot_price_history").paginate(
                ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
                StartTime=dt.datetime.now(dt.UTC))
            for page in pages:
                for p in page.get("SpotPriceHistory", []):
                    key = (p["InstanceType"], p["AvailabilityZone"])
                    stamp = p["Timestamp"]
                    if key not in latest or stamp > latest[key][0]:
                        latest[key] = (stamp, float(p["SpotPrice"]))
            if latest:
                self.spot = {k: v for k, (_, v) in latest.items()}
        except (BotoCoreError, ClientError) as e:
            self._warn_once("spot", e)
        self.version += 1
        self._fresh["prices"] = self.version

    @property
    def refresh_seconds(self) -> float:
        """How long fetched prices are used before fetching again (12 hours, as Karpenter)."""
        return float(self._fresh.ttl)

    def current_version(self) -> int:
        """The version of the prices in use, refreshing them first when 12 hours are up (a cache keyed on it is
        then keyed on the prices it will actually be built with)."""
        self._maybe_refresh()
        return self.version

    def _maybe_refresh(self) -> None:
        # one refresh at a time: the instance-type provider prices ~5,000 offerings from several threads
        with self._lock:
            if "prices" in self._fresh:
                return
            if not self.background:
                self.refresh()
                return
            if self._refreshing is None or not self._refreshing.is_alive():
                self._refreshing = threading.Thread(target=self._refresh_logged, name="pricing-refresh",
                                                    daemon=True)
                self._refreshing.start()

    def _refresh_logged(self) -> None:
        try:
            self.refresh()
        except Exception:  # an unexpected answer: the prices in hand stay, the next read tries again
            log.exception("refreshing prices failed")

    def wait_refreshed(self, timeout: float) -> bool:
        """Wait for a background refresh in flight (for tests and benchmarks); whether none is running now."""
        thread = self._refreshing
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    def on_demand_price(self, instance_type: str) -> float | None:
        """USD per hour, live when known, else the static price, else None."""
        self._maybe_refresh()
        return self.on_demand.get(instance_type, self.fallback.on_demand.get(instance_type))

    def spot_price(self, instance_type: str, zone: str) -> float | None:
        """USD per hour in that zone, live when known, else the static price, else None."""
        self._maybe_refresh()
        key = (instance_type, zone)
        return self.spot.get(key, self.fallback.spot.get(key))
