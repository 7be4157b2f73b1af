"""The catalog's plain data types: instance types and their offerings.

Instance types carry single-valued labels (arch, family, cpu, ...); zone and capacity type vary per offering.
Resources are in canonical integer units (see controller.api.quantity).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.api.quantity import subtract


@dataclass(frozen=True, slots=True)
class Offering:
    """One place and way an instance type can be bought: zone x capacity type, at a price per hour."""

    zone: str
    capacity_type: str  # "spot" | "on-demand" | "reserved"
    price: float
    available: bool = True
    zone_id: str = ""
    reservation_id: str = ""
    # a reserved offering's capacity reservation: how many instances it still has room for (Karpenter's
    # ReservationCapacity), its type (default | capacity-block) and whether EC2 may reclaim it (interruptible ODCR)
    reservation_capacity: int = 0
    reservation_type: str = ""
    reservation_interruptible: bool = False


@dataclass(slots=True)
class Overhead:
    """What Karpenter subtracts from capacity to get allocatable: kube-reserved, system-reserved, eviction threshold."""

    kube_reserved: dict[str, int] = field(default_factory=dict)
    system_reserved: dict[str, int] = field(default_factory=dict)
    eviction_threshold: dict[str, int] = field(default_factory=dict)

    def total(self) -> dict[str, int]:
        """The three reservations summed per resource."""
        out: dict[str, int] = {}
        for part in (self.kube_reserved, self.system_reserved, self.eviction_threshold):
            for k, v in part.items():
                out[k] = out.get(k, 0) + v
        return out


@dataclass(slots=True)
class InstanceType:
    """An EC2 instance type as the scheduler sees it."""

    name: str
    labels: dict[str, str]
    capacity: dict[str, int]
    overhead: Overhead = field(default_factory=Overhead)
    offerings: list[Offering] = field(default_factory=list)

    @property
    def allocatable(self) -> dict[str, int]:
        """Capacity less overhead, never negative."""
        return {k: max(0, v) for k, v in subtract(self.capacity, self.overhead.total()).items()}

    def available_offerings(self) -> list[Offering]:
        """Offerings that can be launched now."""
        return [o for o in self.offerings if o.available]

    def cheapest_price(self) -> float:
        """The lowest price among available offerings (inf when none)."""
        prices = [o.price for o in self.offerings if o.available]
        return min(prices) if prices else float("inf")
