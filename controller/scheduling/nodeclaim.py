"""The in-progress NodeClaim of a solve (Karpenter's scheduling.NodeClaim) and the NodeClaim a plan would create.

A NodeClaim keeps the set of instance types that can still hold its pods as a mask over its pool's
InstanceTypeIndex; at the end it launches the cheapest offering of the cheapest type that fits (a capacity reservation
it holds first, controller.scheduling.reservations; else spot first when the NodeClaim allows spot). `Bin` is what
NodeClaims and existing nodes share: a place pods can go.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controller.api import labels as L
from controller.catalog.types import InstanceType
from controller.scheduling.instancetypes import (
    CAPACITY_TYPES,
    InstanceTypeIndex,
    OfferingFilter,
    column_max,
    column_min,
    fit_count,
    holds,
)
from controller.scheduling.pod import AffinityTerm, Pod
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.reservations import ReservationManager
from controller.scheduling.types import Taint

FEW = 64  # room() tests "takes all `want` pods" by comparison up to this many pods ...
NO_OVERFLOW = 1 << 56  # ... and requests below this (want x request stays within int64)


def reserved_fits(ix: InstanceTypeIndex, manager: ReservationManager, host: str, merged: Requirements,
                  rows: np.ndarray, k: np.ndarray) -> tuple[int, int]:
    """Among the reserved offerings of the types in rows (sorted; each type holding k[i] more pods) that merged
    allows: the most pods a type with one holds, and the most a type with one that NodeClaim `host` can hold holds
    (0 when none)."""
    allowed = OfferingFilter(merged)
    compatible = reservable = 0
    for row, o in ix.reserved:
        i = int(np.searchsorted(rows, row))
        if i >= rows.size or rows[i] != row or not allowed.allows(o):
            continue
        fit = int(k[i])
        compatible = max(compatible, fit)
        if fit > reservable and manager.can_reserve(host, o.reservation_id):
            reservable = fit
    return compatible, reservable


@dataclass
class PlannedNodeClaim:
    """A NodeClaim the plan would create."""

    node_pool: str
    requirements: Requirements
    instance_type_options: list[InstanceType]
    instance_type: InstanceType | None
    capacity_type: str
    zone: str
    price_per_hour: float
    pods: list[Pod]
    hostname: str = ""


class Bin:
    """A place pods can go: an existing node (fixed allocatable) or a new NodeClaim (a mask of instance types).
    `used` and `maxfree` are vectors over the solve's resources; `position` is the bin's row in the scheduler."""

    def __init__(self, name: str, requirements: Requirements, taints: list[Taint], used: np.ndarray) -> None:
        self.name = name
        self.requirements = requirements
        self.taints = taints
        self.used = used
        self.pods: list[Pod] = []
        self.host_ports: set[tuple[str, str, int]] = set()
        self.anti_terms: list[AffinityTerm] = []  # required hostname anti-affinity of pods already here
        self.maxfree = np.zeros_like(used)
        self.position = -1

    def free_upper_bound(self) -> np.ndarray:
        """Per resource, the most the bin can still have free: a cheap first test for fit."""
        raise NotImplementedError

    def labels(self) -> dict[str, str]:
        """Labels the node has (or will have) that topology keys refer to."""
        raise NotImplementedError

    def incompatibility(self, reqs: Requirements) -> str | None:
        """Why the bin's node cannot meet a pod's requirements (None when it can)."""
        raise NotImplementedError

    def room(self, reqs: Requirements, req: np.ndarray, want: int,
             ports: frozenset[tuple[str, str, int]] = frozenset()) -> int:
        """How many more pods (each requesting req, needing reqs and host ports) fit, at most want."""
        raise NotImplementedError

    def slack(self) -> np.ndarray:
        """Per resource, the room left on the node as it would launch now (its cheapest fitting type)."""
        return self.maxfree

    def possible(self, key: str) -> list[str]:
        """The values of key the node may still get (one when decided; none when it cannot have the key)."""
        raise NotImplementedError

    def add(self, reqs: Requirements, req: np.ndarray, pods: list[Pod],
            ports: frozenset[tuple[str, str, int]] = frozenset()) -> None:
        """Take pods (identical, each requesting req and needing reqs and host ports)."""
        self.used = self.used + req * len(pods)
        self.maxfree = self.free_upper_bound()
        self.pods.extend(pods)


class NodeClaim(Bin):
    """A NodeClaim being planned: its pool's index and the instance types that can still hold its pods."""

    def __init__(self, name: str, index: InstanceTypeIndex, requirements: Requirements, taints: list[Taint],
                 used: np.ndarray, mask: np.ndarray,
                 fit: tuple[Requirements, frozenset[tuple[str, str, int]], np.ndarray, np.ndarray] | None = None,
                 types: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                 reservations: ReservationManager | None = None, strict: bool = False) -> None:
        """fit: the pod requirements, host ports, types (indexes into mask's True entries) and per-type pod counts
        the NodeClaim is opened for, so that its first add() needs no second fit test. types: mask's True entries,
        their free room on an empty node and its per-resource maximum, when the caller knows them (read-only).
        reservations: the solve's capacity reservations, when the pool has reserved offerings; strict: the
        provisioner's mode (a pod is not added where the NodeClaim would lose its reserved offerings)."""
        super().__init__(name, requirements, taints, used)
        self.index = index
        self.mask = mask
        self.manager = reservations if index.reserved else None
        self.strict = strict
        self.held: tuple[str, ...] = ()  # the reservation IDs this NodeClaim holds, in offering order
        # the last room() answer (pod requirements, host ports, the NodeClaim's requirements with them, the types
        # considered, their fit counts or which of them take `want` pods, want), for the add() that follows it
        self._room: tuple[Requirements, frozenset[tuple[str, str, int]], Requirements, np.ndarray,
                          np.ndarray | None, np.ndarray | None, int] | None = None
        if fit is not None:
            self._room = (fit[0], fit[1], requirements, fit[2], fit[3], None, 0)
        self._slack: np.ndarray | None = None  # room on the cheapest type that fits, while the pods do not change
        # the types of mask as indexes, the free room on each and its per-resource maximum, while the mask does not
        # change: most adds leave every type in (the types are far larger than a pod), so these are computed once
        self._rows = np.flatnonzero(mask) if types is None else types[0]
        self._free: np.ndarray | None = None if types is None else types[1]
        self._top: np.ndarray | None = None if types is None else types[2]
        self._bottom: np.ndarray | None = None  # the per-resource minimum, likewise
        # per pod requirements and host ports: what room() narrows the NodeClaim to, while mask and requirements hold
        self._narrowed: dict[tuple[object, ...], tuple[Requirements, np.ndarray, np.ndarray, np.ndarray]] = {}
        # per pod requirements, while the NodeClaim's requirements hold: incompatibility(), and the NodeClaim's
        # requirements with the pod's (what room() narrows to, whatever the types)
        self._compatible: dict[tuple[object, ...], str | None] = {}
        self._merged: dict[tuple[object, ...], Requirements] = {}
        self._labels: dict[str, str] | None = None  # labels(), while the requirements do not change
        self.maxfree = self.free_upper_bound()

    def _set_mask(self, mask: np.ndarray, rows: np.ndarray) -> None:
        """Narrow the types to mask (rows: its True entries)."""
        self.mask = mask
        self._rows = rows
        self._free = self._top = self._bottom = None
        self._narrowed.clear()

    def _types_free(self) -> np.ndarray:
        """Free room on an empty node of each type still in the mask (free0 rows, cheapest first)."""
        if self._free is None:
            self._free = self.index.free0[self._rows]
        return self._free

    def _floor(self) -> np.ndarray:
        """Per resource, the least free room on an empty node among the types still in the mask (not empty)."""
        if self._bottom is None:
            self._bottom = column_min(self._types_free())
        return self._bottom

    def free_upper_bound(self) -> np.ndarray:
        if not self._rows.size:
            return np.full_like(self.used, -1)
        if self._top is None:
            self._top = column_max(self._types_free())
        return self._top - self.used

    def labels(self) -> dict[str, str]:
        if self._labels is None:
            self._labels = self.requirements.labels()
            self._labels[L.HOSTNAME] = self.name
        return self._labels

    def incompatibility(self, reqs: Requirements) -> str | None:
        key = reqs.key()
        if key in self._compatible:
            return self._compatible[key]
        why = self._compatible[key] = self.requirements.incompatibility(reqs)
        return why

    def room(self, reqs: Requirements, req: np.ndarray, want: int,
             ports: frozenset[tuple[str, str, int]] = frozenset()) -> int:
        ix = self.index
        if not len(reqs) and not ports:
            # nothing narrows the NodeClaim: the types left are its own (its mask is within its offerings)
            merged, mask, rows, free = self.requirements, self.mask, self._rows, self._types_free()
        else:
            ck = (reqs.key(), ports)
            hit = self._narrowed.get(ck)
            if hit is None:
                known = self._merged.get(ck[0])
                if known is None:
                    known = self.requirements.intersect(reqs)
                    if known.key() == self.requirements.key():
                        known = self.requirements  # nothing new: keep the NodeClaim's own (an add changes nothing)
                    self._merged[ck[0]] = known
                merged = known
                zm, cm = ix.offer_masks(merged)
                mask = ix.offered(self.mask & ix.mask(reqs), zm, cm)
                if ports:
                    mask = mask & ix.ports_ok(ports)  # types whose DaemonSets hold none of the pod's host ports
                rows = np.flatnonzero(mask)
                free = self._types_free() if rows.size == self._rows.size else ix.free0[rows]
                hit = self._narrowed[ck] = (merged, mask, rows, free)
            merged, mask, rows, free = hit
        if not rows.size:
            return 0
        if self.manager is not None:
            k = fit_count(free - self.used[None, :], req)
            self._room = (reqs, ports, merged, rows, k, None, 0)
            return self.reserved_cap(merged, rows, k, min(want, ix.min_values_cap(mask, k, merged)))
        if want <= FEW and not ix.has_min_values and req.max() < NO_OVERFLOW:
            # usually some type takes all `want` pods: one comparison per type, no division (the types that take
            # them are those whose fit count reaches want, as types keep at least the used resources free); and
            # usually every type does, which the smallest room among the NodeClaim's types tells at once
            need = self.used + req * want
            if (need <= self._floor()).all():
                self._room = (reqs, ports, merged, rows, None, None, want)
                return want
            took = holds(free, need)
            if took.any():
                self._room = (reqs, ports, merged, rows, None, took, want)
                return want
        k = fit_count(free - self.used[None, :], req)
        self._room = (reqs, ports, merged, rows, k, None, 0)  # add() of the same pods narrows the mask from these
        return min(want, ix.min_values_cap(mask, k, merged))

    def reserved_cap(self, merged: Requirements, rows: np.ndarray, k: np.ndarray, n: int) -> int:
        """Of n pods, how many the NodeClaim may take without breaking Karpenter's strict reserved-offering rule: once
        it holds reservations, only while one of them stays launchable; holding none, none at all when a compatible
        reservation is there but cannot be held (fallback mode: all n)."""
        if not self.strict or n <= 0 or self.manager is None:
            return n
        compatible, reservable = reserved_fits(self.index, self.manager, self.name, merged, rows, k)
        if not self.held and compatible < 1:
            return n  # no reserved offering survives even one pod: nothing to keep
        return min(n, reservable)

    def _hold(self) -> None:
        """Hold every reservation the NodeClaim can still launch into (pessimistically: the launch picks one), and
        release those it no longer can (Karpenter's offeringsToReserve, Reserve and releaseReservedOfferings)."""
        if self.manager is None:
            return
        allowed = OfferingFilter(self.requirements)
        rows = self._rows
        ids: dict[str, None] = {}
        for row, o in self.index.reserved:
            i = int(np.searchsorted(rows, row))
            if (i < rows.size and rows[i] == row and allowed.allows(o)
                    and self.manager.can_reserve(self.name, o.reservation_id)):
                ids.setdefault(o.reservation_id)
        self.held = tuple(ids)
        self.manager.hold(self.name, self.held)

    def slack(self) -> np.ndarray:
        if self._slack is None:
            rows = self._rows
            self._slack = self.index.free0[rows[0]] - self.used if rows.size else np.full_like(self.used, -1)
        return self._slack

    def possible(self, key: str) -> list[str]:
        r = self.requirements.get(key)
        if r is not None and not r.complement:
            return sorted(r.values)
        ix = self.index
        if key in (L.ZONE, L.CAPACITY_TYPE):
            zm, cm = ix.offer_masks(self.requirements)
            sub = ix.price[self.mask][:, zm, :][:, :, cm]
            if key == L.ZONE:
                names = [z for i, z in enumerate(ix.zones) if zm[i]]
                live = np.isfinite(sub).any(axis=(0, 2))
            else:
                names = [c for i, c in enumerate(CAPACITY_TYPES) if cm[i]]
                live = np.isfinite(sub).any(axis=(0, 1))
            return [n for n, ok in zip(names, live.tolist(), strict=True) if ok]
        values = {v for v in ix.column(key)[self.mask].tolist() if v is not None}
        return sorted(v for v in values if r is None or r.has(v))

    def add(self, reqs: Requirements, req: np.ndarray, pods: list[Pod],
            ports: frozenset[tuple[str, str, int]] = frozenset()) -> None:
        ix = self.index
        last = self._room
        self._room = None
        if last is not None and last[0] is reqs and last[1] == ports:
            # room() was just asked for these requirements: the types left are those that held n more pods
            _, _, merged, rows, k, took, want = last
            if k is None and len(pods) == want:
                keep = rows if took is None else rows[took]  # None: every type took them
            else:
                if k is None:
                    k = fit_count(self.index.free0[rows] - self.used[None, :], req)
                keep = rows[k >= len(pods)]
            self.used = self.used + req * len(pods)
            if merged is not self.requirements:
                self.requirements = merged
                self._labels = None
                self._narrowed.clear()
                self._compatible.clear()
                self._merged.clear()
            if keep.size != self._rows.size:  # keep is within rows, within the mask: equal sizes, same types
                mask = np.zeros_like(self.mask)
                mask[keep] = True
                self._set_mask(mask, keep)
            if keep.size:
                self.maxfree = self.free_upper_bound()
                self._slack = ix.free0[keep[0]] - self.used  # types are ordered cheapest first
            else:
                self.maxfree = self._slack = np.full_like(self.used, -1)
            self.pods.extend(pods)
            self._hold()
            return
        self._slack = None
        self._labels = None
        self._narrowed.clear()
        self._compatible.clear()
        self._merged.clear()
        self.used = self.used + req * len(pods)
        self.requirements = self.requirements.intersect(reqs)
        zm, cm = ix.offer_masks(self.requirements)
        mask = ix.offered(self.mask & ix.mask(reqs), zm, cm) & holds(ix.free0, self.used)
        if ports:
            mask &= ix.ports_ok(ports)
        self._set_mask(mask, np.flatnonzero(mask))
        self.maxfree = self.free_upper_bound()
        self.pods.extend(pods)
        self._hold()

    def launch(self) -> PlannedNodeClaim:
        """The instance type and offering this NodeClaim would launch with: a reservation it holds first (its
        requirements then narrow to capacity type reserved and those reservation IDs, as Karpenter's
        FinalizeScheduling), else spot if allowed, then on-demand; the cheapest within each."""
        ix = self.index
        rows = self._rows[holds(self._types_free(), self.used)]  # the types that hold the pods, cheapest first
        if self.held:
            planned = self._launch_reserved(rows)
            if planned is not None:
                return planned
        zm, cm = ix.offer_masks(self.requirements)
        best: tuple[float, int, int, int] | None = None
        # spot, on-demand (Karpenter launches spot when the NodeClaim allows it); a reserved offering this NodeClaim
        # holds none of only when nothing else is allowed
        for ct in (0, 1, 2):
            if not cm[ct]:
                continue
            prices, zones = ix.cheapest_offers(zm, ct)
            prices = prices[rows]
            if rows.size and np.isfinite(prices).any():
                # the first cheapest (type, zone) in type then zone order: the first type at the lowest price, in
                # the first zone at its price
                ti = int(rows[int(np.argmin(prices))])
                best = (float(ix.price[ti, zones[ti], ct]), ti, int(zones[ti]), ct)
                break
        options: list[InstanceType] = ix.types_array[rows].tolist()
        if best is None:
            return PlannedNodeClaim(ix.pool.name, self.requirements, options, None, "", "", 0.0, self.pods, self.name)
        price, t, z, ct = best
        return PlannedNodeClaim(node_pool=ix.pool.name, requirements=self.requirements, instance_type_options=options,
                                instance_type=ix.types[t], capacity_type=CAPACITY_TYPES[ct], zone=ix.zones[z],
                                price_per_hour=price, pods=self.pods, hostname=self.name)

    def _launch_reserved(self, rows: np.ndarray) -> PlannedNodeClaim | None:
        """The NodeClaim launched into one of the reservations it holds: the cheapest held offering among the types
        that hold its pods; its requirements narrowed to capacity type reserved and the held reservation IDs, and its
        instance types to those with a held offering."""
        ix = self.index
        held = set(self.held)
        allowed = OfferingFilter(self.requirements)
        best: tuple[float, int, str] | None = None
        typed: set[int] = set()
        for row, o in ix.reserved:
            i = int(np.searchsorted(rows, row))
            if i >= rows.size or rows[i] != row or o.reservation_id not in held or not allowed.allows(o):
                continue
            typed.add(row)
            if best is None or (o.price, row) < best[:2]:
                best = (o.price, row, o.zone)
        if best is None:
            return None
        requirements = self.requirements.intersect(Requirements([
            Requirement(L.CAPACITY_TYPE, False, frozenset([L.CAPACITY_TYPE_RESERVED])),
            Requirement(L.CAPACITY_RESERVATION_ID, False, frozenset(self.held))]))
        options: list[InstanceType] = [ix.types[r] for r in rows.tolist() if r in typed]
        price, t, zone = best
        return PlannedNodeClaim(node_pool=ix.pool.name, requirements=requirements, instance_type_options=options,
                                instance_type=ix.types[t], capacity_type=L.CAPACITY_TYPE_RESERVED, zone=zone,
                                price_per_hour=price, pods=self.pods, hostname=self.name)
