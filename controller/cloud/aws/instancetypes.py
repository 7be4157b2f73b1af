"""Instance types from the EC2 API: DescribeInstanceTypes + DescribeInstanceTypeOfferings per zone, converted with
the catalog's Karpenter formulas, priced by the PricingProvider, with ICE'd offerings marked unavailable."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from cachetools import TTLCache

from controller.api import labels as L
from controller.catalog.allocatable import DEFAULT_VM_MEMORY_OVERHEAD_PERCENT
from controller.catalog.ec2 import describe_instance_data, instance_type_from_ec2
from controller.catalog.types import InstanceType, Offering
from controller.cloud.aws.pricing import PricingProvider
from controller.cloud.aws.unavailable import UnavailableOfferings

DEFAULT_TTL_SECONDS = 300.0
MAX_VARIANTS = 64  # (AMI family, kubelet) variants kept: one per distinct EC2NodeClass setting in use


class InstanceTypeProvider:
    """Cached, refreshed instance types of one region."""

    def __init__(self, ec2: Any, pricing: PricingProvider, region: str, unavailable: UnavailableOfferings | None = None,
                 ttl_seconds: float = DEFAULT_TTL_SECONDS, clock: Callable[[], float] = time.monotonic,
                 vm_memory_overhead_percent: float = DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
                 reserved_enis: int = 0) -> None:
        self.ec2 = ec2
        self.pricing = pricing
        self.region = region
        self.unavailable = unavailable or UnavailableOfferings()
        self.clock = clock
        self.vm_memory_overhead_percent = vm_memory_overhead_percent  # VM_MEMORY_OVERHEAD_PERCENT
        self.reserved_enis = reserved_enis  # RESERVED_ENIS
        self._infos: list[dict[str, Any]] = []
        self._zones: dict[str, list[str]] = {}
        # what EC2 said (one entry), and the instance types built from it per (AMI family and kubelet, availability
        # generation, price version): both live ttl_seconds, so a type or zone EC2 adds shows within 5 minutes
        self._described: TTLCache[str, tuple[list[dict[str, Any]], dict[str, list[str]]]] = TTLCache(
            1, ttl_seconds, timer=clock)
        self._cache: TTLCache[tuple[str, int, int], list[InstanceType]] = TTLCache(MAX_VARIANTS, ttl_seconds,
                                                                                   timer=clock)
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()

    @property
    def ttl(self) -> float:
        """How long what EC2 said, and the instance types built from it, are used before asking again."""
        return float(self._cache.ttl)

    def refresh(self) -> None:
        """Re-read the instance types and their zones from EC2."""
        infos, zones = describe_instance_data(self.ec2)
        with self._lock:
            self._infos = infos
            self._zones = zones
            self._described["ec2"] = (infos, zones)
            self._cache.clear()

    def _offerings(self, info: dict[str, Any]) -> list[Offering]:
        name = info["InstanceType"]
        classes = info.get("SupportedUsageClasses") or ["on-demand", "spot"]
        out = []
        for zone in self._zones.get(name, []):
            for ct in (L.CAPACITY_TYPE_ON_DEMAND, L.CAPACITY_TYPE_SPOT):
                if ct not in classes:
                    continue
                price = (self.pricing.on_demand_price(name) if ct == L.CAPACITY_TYPE_ON_DEMAND
                         else self.pricing.spot_price(name, zone))
                if price is None:
                    continue  # Karpenter does not offer what it cannot price
                out.append(Offering(zone=zone, capacity_type=ct, price=price,
                                    available=not self.unavailable.is_unavailable(name, zone, ct)))
        return out

    def list(self, kubelet: dict[str, Any] | None = None, ami_family: str = "al2023") -> list[InstanceType]:
        """Instance types with offerings, for one EC2NodeClass's kubelet settings and AMI family."""
        with self._lock:
            stale = "ec2" not in self._described
        if stale:
            with self._refresh_lock:  # one DescribeInstanceTypes at a time: a concurrent caller uses its answer
                with self._lock:
                    stale = "ec2" not in self._described
                if stale:
                    self.refresh()
        # the availability generation is part of the key: the first listing after an offering is marked unavailable
        # (or its 3 minutes end) is built anew, so the next batch plans without (or with) it
        key = (json.dumps([ami_family, kubelet or {}], sort_keys=True), self.unavailable.generation,
               self.pricing.current_version())
        with self._lock:
            cached = self._cache.get(key)
            if cached is None:
                cached = [instance_type_from_ec2(i, self._offerings(i), region=self.region, ami_family=ami_family,
                                                 kubelet=kubelet,
                                                 vm_memory_overhead_percent=self.vm_memory_overhead_percent,
                                                 reserved_enis=self.reserved_enis)
                          for i in self._infos if self._zones.get(i["InstanceType"])]
                # entries of older availability or price versions are never asked for again: keep only current
                for old in [k for k in self._cache if k[1:] != key[1:]]:
                    with contextlib.suppress(KeyError):  # expired meanwhile: gone already
                        del self._cache[old]
                self._cache[key] = cached
            return cached
