"""Capacity reservations an EC2NodeClass selects, as Karpenter's capacity reservation provider resolves them.

Each `capacityReservationSelectorTerms` term becomes DescribeCapacityReservations queries: one by id, and one by
tags / ownerID / instanceMatchCriteria; only active reservations are asked for. The status entries are Karpenter's
(`status.capacityReservations`): a Capacity Block within 40 minutes of its end is `expiring`; a reservation with an
instance match criteria or type EC2 added later is left out (and logged) rather than misread.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from controller.cloud.aws.discovery import tag_filters

log = logging.getLogger("karpy.nodeclass")
EXPIRATION_PERIOD = dt.timedelta(minutes=40)
MATCH_CRITERIA = ("open", "targeted")
RESERVATION_TYPES = {"default": "default", "capacity-block": "capacity-block"}


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


def resolve(ec2: Any, terms: list[dict[str, Any]], now: dt.datetime) -> list[dict[str, Any]]:
    """status.capacityReservations for the terms, by id."""
    return [e for r in describe(ec2, terms) if (e := status_entry(r, now)) is not None]
