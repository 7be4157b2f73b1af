"""Which subnet of a zone a launch goes into, as Karpenter's subnet provider chooses it.

Per zone, the subnet with the most free IP addresses: EC2's AvailableIpAddressCount as last described (kept for five
minutes), less the addresses of launches in flight (each launch deducts, from every subnet it offers CreateFleet, the
pods of the smallest instance type it may get there; a subnet CreateFleet did not pick gets them back). A subnet that
answered InsufficientFreeAddressesInSubnet counts as full (no free addresses) and is passed over for three minutes,
so the next launch takes another subnet of the zone; only a zone with no other subnet loses its offerings.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from cachetools import TTLCache

from controller.catalog.types import InstanceType
from controller.cloud.aws.discovery import Subnet, discover_subnets

AVAILABLE_IP_TTL_SECONDS = 300.0  # Karpenter's AvailableIPAddressTTL
FULL_SUBNET_TTL_SECONDS = 180.0  # as long as an offering refused for capacity stays unavailable
MAX_SUBNETS = 20_000


def min_pods(instance_types: Iterable[InstanceType], zone: str, capacity_type: str) -> int:
    """The pods of the smallest instance type with an available offering in this zone and capacity type: the
    addresses a launch there is sure to take (at least one for the instance itself)."""
    pods = [it.capacity.get("pods", 0) for it in instance_types
            if any(o.available and o.zone == zone and o.capacity_type == capacity_type for o in it.offerings)]
    return max(1, min(pods)) if pods else 0


class SubnetProvider:
    """Free-address accounting over the subnets of every EC2NodeClass (thread-safe; one per controller)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 ttl_seconds: float = AVAILABLE_IP_TTL_SECONDS,
                 full_ttl_seconds: float = FULL_SUBNET_TTL_SECONDS) -> None:
        self._lock = threading.Lock()
        self._available: TTLCache[str, int] = TTLCache(MAX_SUBNETS, ttl_seconds, timer=clock)
        self._full: TTLCache[str, bool] = TTLCache(MAX_SUBNETS, full_ttl_seconds, timer=clock)
        self._inflight: dict[str, int] = {}

    def describe(self, ec2: Any, terms: list[dict[str, Any]]) -> list[Subnet]:
        """The subnets the terms select, recording each one's free addresses as EC2 counts them now (which already
        includes the instances launched so far, so the in-flight deductions are dropped)."""
        subnets = discover_subnets(ec2, terms)
        self.observe(subnets)
        return subnets

    def observe(self, subnets: Iterable[Subnet]) -> None:
        """Take the free-address counts of freshly described subnets."""
        with self._lock:
            for s in subnets:
                self._available[s.id] = s.available_ips
                self._inflight.pop(s.id, None)

    def free(self, subnet: Subnet) -> int:
        """The addresses a launch may count on in this subnet: in flight, else described, else the subnet's own."""
        with self._lock:
            return self._free(subnet)

    def _free(self, subnet: Subnet) -> int:
        if subnet.id in self._full:
            return 0
        if subnet.id in self._inflight:
            return self._inflight[subnet.id]
        return self._available.get(subnet.id, subnet.available_ips)

    def zonal(self, subnets: Iterable[Subnet]) -> dict[str, Subnet]:
        """Per zone the subnet with the most free addresses (ties: the first given), skipping subnets found full;
        a zone whose subnets are all full is absent."""
        with self._lock:
            best: dict[str, Subnet] = {}
            for s in subnets:
                if s.id in self._full:
                    continue
                free = self._free(s)
                if s.zone not in best or free > best[s.zone].available_ips:
                    best[s.zone] = Subnet(s.id, s.zone, s.zone_id, free)
            return best

    def reserve(self, chosen: dict[str, Subnet], instance_types: list[InstanceType], capacity_type: str) -> None:
        """A launch is offered these subnets: deduct from each the pods of the smallest instance type that may land
        there in this capacity type."""
        with self._lock:
            for zone, s in chosen.items():
                self._inflight[s.id] = self._free(s) - min_pods(instance_types, zone, capacity_type)

    def zonal_for_launch(self, subnets: Iterable[Subnet], instance_types: list[InstanceType],
                         capacity_type: str) -> dict[str, Subnet]:
        """zonal() with the launch's addresses reserved in each chosen subnet."""
        chosen = self.zonal(subnets)
        self.reserve(chosen, instance_types, capacity_type)
        return chosen

    def release_unused(self, offered: dict[str, Subnet], used_subnet_ids: Iterable[str],
                       instance_types: list[InstanceType], capacity_type: str) -> None:
        """After CreateFleet answered: the subnets offered but not launched into get their deduction back (unless
        EC2 was described again meanwhile and the deduction is gone)."""
        used = set(used_subnet_ids)
        with self._lock:
            for zone, s in offered.items():
                if s.id in used or s.id not in self._inflight or s.id in self._full:
                    continue
                self._inflight[s.id] += min_pods(instance_types, zone, capacity_type)

    def mark_full(self, subnet_id: str) -> None:
        """EC2 said the subnet has no free addresses: count it full and pass it over for a while."""
        with self._lock:
            self._full[subnet_id] = True
            self._available[subnet_id] = 0
            self._inflight.pop(subnet_id, None)

    def is_full(self, subnet_id: str) -> bool:
        """Whether the subnet recently refused a launch for lack of addresses."""
        with self._lock:
            return subnet_id in self._full

