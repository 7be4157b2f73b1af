"""Capacity reservations during one solve, as Karpenter's scheduler holds them (provisioning/scheduling/
reservationmanager.go and NodeClaim.offeringsToReserve).

Each NodeClaim of the solve holds, pessimistically, one instance of every reserved offering it could still launch
into (it does not know which the launch will pick); a reservation with n free instances is held by at most n
NodeClaims. In strict mode (the provisioner's: Karpenter's DisableReservedCapacityFallback) a pod is not added where
doing so would lose the NodeClaim's reserved offerings, and no NodeClaim is opened for it while a compatible
reservation exists that cannot be held: the decision is deferred to a later pass instead of falling back to on-demand
or spot (or to a lower-weight NodePool). In fallback mode (disruption's simulations) reservations are held where they
can be and nothing is refused for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from controller.api import labels as L
from controller.catalog.types import Offering

STRICT = "strict"
FALLBACK = "fallback"
MODES = (STRICT, FALLBACK)
RESERVED_OFFERING_ERROR = ("one or more instance types with compatible reserved offerings are available, but could "
                           "not be reserved")


class ReservationManager:
    """Free instances per reservation ID and the reservations each NodeClaim (by name) holds."""

    def __init__(self, offerings: Iterable[Offering]) -> None:
        self.capacity: dict[str, int] = {}
        for o in offerings:
            if o.capacity_type != L.CAPACITY_TYPE_RESERVED or not o.reservation_id:
                continue
            # the same reservation seen through several NodePools (or listings) counts its smallest free count
            current = self.capacity.get(o.reservation_id)
            if current is None or o.reservation_capacity < current:
                self.capacity[o.reservation_id] = max(0, o.reservation_capacity)
        self.held: dict[str, set[str]] = {}

    def can_reserve(self, host: str, reservation_id: str) -> bool:
        """Whether the NodeClaim holds the reservation already or one of its instances is still free."""
        if reservation_id in self.held.get(host, ()):
            return True
        return self.capacity.get(reservation_id, 0) > 0

    def reserve(self, host: str, reservation_ids: Iterable[str]) -> None:
        """Hold one instance of each reservation for the NodeClaim (idempotent)."""
        mine = self.held.setdefault(host, set())
        for rid in reservation_ids:
            if rid in mine:
                continue
            self.capacity[rid] = self.capacity.get(rid, 0) - 1
            mine.add(rid)

    def release(self, host: str, reservation_ids: Iterable[str]) -> None:
        """Give back the NodeClaim's hold on each reservation."""
        mine = self.held.get(host)
        if not mine:
            return
        for rid in reservation_ids:
            if rid in mine:
                mine.discard(rid)
                self.capacity[rid] = self.capacity.get(rid, 0) + 1

    def hold(self, host: str, reservation_ids: Sequence[str]) -> None:
        """Make the NodeClaim hold exactly these reservations: the new ones reserved, the ones it no longer can
        launch into released (Karpenter's Reserve then releaseReservedOfferings)."""
        self.reserve(host, reservation_ids)
        self.release(host, [r for r in list(self.held.get(host, ())) if r not in set(reservation_ids)])
