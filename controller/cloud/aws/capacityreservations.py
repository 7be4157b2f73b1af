"""Capacity reservations an EC2NodeClass selects, as Karpenter's capacity reservation provider resolves them, and
the reserved offerings they give.

Each `capacityReservationSelectorTerms` term becomes DescribeCapacityReservations queries: one by id, and one by
tags / ownerID / instanceMatchCriteria; only active reservations are asked for, and one past its end date is dropped.
The status entries are Karpenter's (`status.capacityReservations`): a Capacity Block within 40 minutes of its end is
`expiring`; a reservation with an instance match criteria or type EC2 added later is left out (and logged) rather than
misread. How many instances each reservation still has room for is kept apart (ReservationAvailability): EC2's count
at each resolution, less the launches made since, zero once EC2 refuses a launch into it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from controller.api import labels as L
from controller.catalog.types import InstanceType, Offering
from controller.cloud.aws.discovery import tag_filters

log = logging.getLogger("karpy.nodeclass")
EXPIRATION_PERIOD = dt.timedelta(minutes=40)
MATCH_CRITERIA = ("open", "targeted")
RESERVATION_TYPES = {"default": "default", "capacity-block": "capacity-block"}
# Karpenter prices a reserved offering at its on-demand price divided by this: all but free (it is paid for already),
# yet ordered as the types' prices are, so consolidation still compares them
RESERVED_PRICE_DIVISOR = 10_000_000.0


class ReservationAvailability:
    """Free instances per capacity reservation ID (Karpenter's availabilityCache): synced from EC2's
    AvailableInstanceCount at each resolution, one fewer per launch made after that sync, one more per instance of it
    that terminated, zero when EC2 refuses a launch into it (until the next sync). Unknown reservations have none."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[int, float]] = {}  # id -> (count, when EC2 said it)

    def sync(self, counts: dict[str, int]) -> None:
        """EC2's counts, as just described."""
        now = self.clock()
        with self._lock:
            for rid, count in counts.items():
                self._entries[rid] = (max(0, int(count)), now)

    def count(self, reservation_id: str) -> int:
        """How many instances the reservation still has room for (0 when unknown)."""
        with self._lock:
            entry = self._entries.get(reservation_id)
        return entry[0] if entry else 0

    def mark_launched(self, reservation_id: str) -> None:
        """An instance was launched into the reservation. A launch the last sync may already count (made before
        it) is not taken off again: overestimating is safer than underestimating, as Karpenter reasons."""
        now = self.clock()
        with self._lock:
            entry = self._entries.get(reservation_id)
            if entry is None or entry[1] > now:
                return
            self._entries[reservation_id] = (max(0, entry[0] - 1), entry[1])

    def mark_terminated(self, reservation_id: str) -> None:
        """An instance of the reservation is gone: its room is free again."""
        with self._lock:
            entry = self._entries.get(reservation_id)
            if entry is not None:
                self._entries[reservation_id] = (entry[0] + 1, entry[1])

    def mark_unavailable(self, *reservation_ids: str) -> None:
        """EC2 refused a launch into these reservations (capacity exceeded, or an interruption): none left."""
        with self._lock:
            for rid in reservation_ids:
                entry = self._entries.get(rid)
                if entry is not None:
                    self._entries[rid] = (0, entry[1])


def queries(terms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """DescribeCapacityReservations requests for the terms (Karpenter's QueriesFromSelectorTerms)."""
    active = {"Name": "state", "Values": ["active"]}
    out: list[dict[str, Any]] = []
    for term in terms:
        if term.get("id"):
            out.append({"CapacityReservationIds": [term["id"]], "Filters": [active]})
        if term.get("tags") or term.get("instanceMatchCriteria"):
            filters = [active]
            if term.get("ownerID"):
                filters.append({"Name": "owner-id", "Values": [term["ownerID"]]})
            filters += tag_filters(term.get("tags") or {})
            if term.get("instanceMatchCriteria"):
                filters.append({"Name": "instance-match-criteria", "Values": [term["instanceMatchCriteria"]]})
            out.append({"Filters": filters, "MaxResults": 1000})
    return out


def describe(ec2: Any, terms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every active reservation any term selects (deduplicated, by id); no call without terms."""
    found: dict[str, dict[str, Any]] = {}
    for request in queries(terms):
        token = None
        while True:
            page = ec2.describe_capacity_reservations(**request, **({"NextToken": token} if token else {}))
            for r in page.get("CapacityReservations", []):
                found.setdefault(str(r.get("CapacityReservationId", "")), r)
            token = page.get("NextToken")
            if not token or "CapacityReservationIds" in request:
                break
    return [found[k] for k in sorted(found)]


def status_entry(r: dict[str, Any], now: dt.datetime) -> dict[str, Any] | None:
    """The status.capacityReservations entry for a DescribeCapacityReservations one (Karpenter's
    CapacityReservationFromEC2); None for one karpy cannot read."""
    rid = str(r.get("CapacityReservationId", ""))
    criteria = str(r.get("InstanceMatchCriteria", ""))
    kind = RESERVATION_TYPES.get(str(r.get("ReservationType") or "default"))
    if criteria not in MATCH_CRITERIA or kind is None:
        log.error("failed to parse discovered capacity reservation", extra={
            "capacity-reservation": rid[:40], "instance-match-criteria": criteria[:40],
            "reservation-type": str(r.get("ReservationType"))[:40]})
        return None
    end = r.get("EndDate")
    if isinstance(end, dt.datetime) and end.tzinfo is None:
        end = end.replace(tzinfo=dt.UTC)
    expiring = kind == "capacity-block" and isinstance(end, dt.datetime) and now >= end - EXPIRATION_PERIOD
    entry: dict[str, Any] = {
        "availabilityZone": r.get("AvailabilityZone", ""), "id": rid, "instanceMatchCriteria": criteria,
        "instanceType": r.get("InstanceType", ""), "ownerID": r.get("OwnerId", ""), "reservationType": kind,
        "interruptible": bool(r.get("Interruptible", False)), "state": "expiring" if expiring else "active"}
    if isinstance(end, dt.datetime):
        entry["endTime"] = end.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return entry


def _ended(r: dict[str, Any], now: dt.datetime) -> bool:
    """Whether the reservation's end date has passed (Karpenter's filterReservations drops those)."""
    end = r.get("EndDate")
    if not isinstance(end, dt.datetime):
        return False
    if end.tzinfo is None:
        end = end.replace(tzinfo=dt.UTC)
    return end <= now


def resolve(ec2: Any, terms: list[dict[str, Any]], now: dt.datetime,
            availability: ReservationAvailability | None = None) -> list[dict[str, Any]]:
    """status.capacityReservations for the terms, by id (their free instance counts synced into availability)."""
    found = [r for r in describe(ec2, terms) if not _ended(r, now)]
    if availability is not None:
        availability.sync({str(r.get("CapacityReservationId", "")): int(r.get("AvailableInstanceCount") or 0)
                           for r in found if r.get("CapacityReservationId")})
    return [e for r in found if (e := status_entry(r, now)) is not None]


def with_reserved_offerings(instance_types: list[InstanceType], reservations: Iterable[Any],
                            availability: ReservationAvailability,
                            on_demand_price: Callable[[str], float | None],
                            zone_ids: dict[str, str] | None = None) -> list[InstanceType]:
    """The instance types with one reserved offering per reservation of their type (Karpenter's
    ReservedCapacityResolver): capacity type reserved, the reservation's zone and ID, its free instances as
    reservation_capacity, priced at the on-demand price / 10,000,000 (0 when unpriced). It is available while the
    reservation has room, the type is offered in its zone and it is not expiring. Types with a reservation are copies;
    the others are the same objects (the listing they come from is shared)."""
    by_type: dict[str, list[Offering]] = {}
    for r in reservations:
        od = on_demand_price(r.instance_type)
        count = availability.count(r.id)
        by_type.setdefault(r.instance_type, []).append(Offering(
            zone=r.zone, capacity_type=L.CAPACITY_TYPE_RESERVED,
            price=od / RESERVED_PRICE_DIVISOR if od is not None else 0.0,
            available=count != 0 and r.state != "expiring", zone_id=(zone_ids or {}).get(r.zone, ""),
            reservation_id=r.id, reservation_capacity=count, reservation_type=r.reservation_type,
            reservation_interruptible=r.interruptible))
    if not by_type:
        return instance_types
    out = []
    for it in instance_types:
        extra = by_type.get(it.name)
        if extra:
            zones = {o.zone for o in it.offerings}
            extra = [o if o.zone in zones else dataclasses.replace(o, available=False) for o in extra]
            it = dataclasses.replace(it, offerings=[*it.offerings, *extra])
        out.append(it)
    return out
