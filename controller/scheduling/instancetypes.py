"""The instance-type index: a NodePool's instance types and offerings as numpy arrays, so a NodeClaim can keep the
set of types that can still hold its pods as a mask and test fit for a whole equivalence class at once (Karpenter
filters its instance-type list per NodeClaim; this is the same filter, vectorised)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from controller.api import labels as L
from controller.catalog.types import InstanceType, Offering
from controller.scheduling.pod import Pod, Toleration
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.types import SchedNodePool, untolerated

PREFER_NO_SCHEDULE = Toleration(operator="Exists", effect="PreferNoSchedule")

CAPACITY_TYPES = (L.CAPACITY_TYPE_SPOT, L.CAPACITY_TYPE_ON_DEMAND, L.CAPACITY_TYPE_RESERVED)
# requirement keys decided by the offering or the NodeClaim, not by an instance type's labels
OFFERING_KEYS = frozenset({L.ZONE, L.CAPACITY_TYPE, L.HOSTNAME, L.NODEPOOL})
INF = float("inf")


class OfferingFilter:
    """The one offering/requirement compatibility predicate (scheduler, CreateFleet overrides, the fake cloud):
    whether an offering's zone, zone ID, capacity type and capacity reservation (ID, type, interruptible) satisfy a
    set of requirements, as Karpenter's Offerings.Compatible. Built once per requirement set; allows() is then a few
    comparisons."""

    __slots__ = ("_capacity_type", "_interruptible", "_reservation", "_reservation_type", "_unconstrained", "_zone",
                 "_zone_id")

    def __init__(self, reqs: Requirements) -> None:
        self._zone = reqs.get(L.ZONE)
        self._zone_id = reqs.get(L.ZONE_ID)
        self._capacity_type = reqs.get(L.CAPACITY_TYPE)
        self._reservation = reqs.get(L.CAPACITY_RESERVATION_ID)
        self._reservation_type = reqs.get(L.CAPACITY_RESERVATION_TYPE)
        self._interruptible = reqs.get(L.CAPACITY_RESERVATION_INTERRUPTIBLE)
        self._unconstrained = (self._zone is None and self._zone_id is None and self._capacity_type is None
                               and self._reservation is None and self._reservation_type is None
                               and self._interruptible is None)

    def allows(self, o: Offering) -> bool:
        """Whether the offering meets the requirements (availability is the caller's question: a DaemonSet counts
        on a type whatever its capacity today, a launch needs an available offering)."""
        if self._unconstrained:
            return True
        if self._zone is not None and not self._zone.has(o.zone):
            return False
        if self._zone_id is not None and o.zone_id and not self._zone_id.has(o.zone_id):
            return False
        if self._capacity_type is not None and not self._capacity_type.has(o.capacity_type):
            return False
        if self._reservation is not None and not (
                # only reserved offerings carry a reservation ID; requiring one rules the others out
                self._reservation.has(o.reservation_id) if o.reservation_id else self._reservation.allows_absent()):
            return False
        if self._reservation_type is not None and not (
                self._reservation_type.has(o.reservation_type) if o.reservation_id
                else self._reservation_type.allows_absent()):
            return False
        if self._interruptible is None:
            return True
        return (self._interruptible.has(str(o.reservation_interruptible).lower()) if o.reservation_id
                else self._interruptible.allows_absent())


def labels_compatible(it: InstanceType, reqs: Requirements) -> bool:
    """Whether an instance type's labels satisfy the requirements: keys decided per offering or per NodeClaim
    (zone, capacity type, hostname, NodePool) are the offerings' question, and a key the type has no label for is a
    label the NodePool sets on its nodes, not a property of the type."""
    for r in reqs:
        if r.key in OFFERING_KEYS:
            continue
        value = it.labels.get(r.key)
        if value is None and r.key == L.INSTANCE_TYPE:
            value = it.name
        if value is not None and not r.has(value):
            return False
    return True


def compatible_offerings(it: InstanceType, reqs: Requirements, offering_filter: OfferingFilter | None = None
                         ) -> list[Offering]:
    """The type's available offerings that satisfy reqs; none when its labels do not."""
    if not labels_compatible(it, reqs):
        return []
    f = offering_filter or OfferingFilter(reqs)
    return [o for o in it.offerings if o.available and f.allows(o)]


class InstanceTypeIndex:
    """A NodePool's instance types as arrays, cheapest first: allocatable and free room (less DaemonSet overhead) per
    resource, offering prices per (zone, capacity type), and label masks cached per requirement."""

    def __init__(self, pool: SchedNodePool, resources: list[str], daemonsets: Sequence[Pod] = ()) -> None:
        self.pool = pool
        self.resources = resources
        self.has_min_values = any(r.min_values for r in pool.requirements)
        # the pool's offering predicate, applied once here: the price grid below holds only the offerings it allows,
        # so per-pod checks (offer_masks/offered) narrow zones and capacity types within what the pool allows
        allowed = OfferingFilter(pool.requirements)
        types: list[InstanceType] = []
        offers: list[list[Offering]] = []
        for it in pool.instance_types:
            if labels_compatible(it, pool.requirements):
                ok = [o for o in it.offerings if o.available and allowed.allows(o)]
                if ok:
                    types.append(it)
                    offers.append(ok)
        self.zones = sorted({o.zone for it in types for o in it.offerings})
        zi = {z: i for i, z in enumerate(self.zones)}
        ci = {c: i for i, c in enumerate(CAPACITY_TYPES)}
        n = len(types)
        self.price = np.full((n, max(1, len(self.zones)), len(CAPACITY_TYPES)), INF)
        for t, ok in enumerate(offers):
            for o in ok:
                if o.capacity_type in ci:
                    self.price[t, zi[o.zone], ci[o.capacity_type]] = min(self.price[t, zi[o.zone], ci[o.capacity_type]],
                                                                         o.price)
        self.min_price = self.price.reshape(n, -1).min(axis=1) if n else np.zeros(0)
        order = np.argsort(self.min_price, kind="stable")
        self.types = [types[i] for i in order]
        # the available reserved offerings the pool allows, by type row (cheapest first): what NodeClaims of the
        # pool may hold reservations of (controller.scheduling.reservations); empty for most pools
        self.reserved: list[tuple[int, Offering]] = [
            (row, o) for row, old in enumerate(order.tolist()) for o in offers[old]
            if o.capacity_type == L.CAPACITY_TYPE_RESERVED and o.reservation_id]
        self.price = self.price[order]
        self.min_price = self.min_price[order]
        self._daemon_groups(list(daemonsets))
        # allocatable is computed per call: once per type here, not once per resource
        self.alloc = np.array([[a.get(r, 0) for r in resources] for a in (it.allocatable for it in self.types)],
                              dtype=np.int64).reshape(n, len(resources))
        self.capacity = np.array([[it.capacity.get(r, 0) for r in resources] for it in self.types],
                                 dtype=np.int64).reshape(n, len(resources))
        self.free0 = self.alloc - self.daemon  # what pods may use on an empty node of each type
        self.types_array = np.empty(n, dtype=object)  # the types again, for taking a mask's types in one step
        self.types_array[:] = self.types
        self._columns: dict[str, np.ndarray] = {}
        self._mask_cache: dict[Requirement, np.ndarray] = {}
        self._combined: dict[tuple[Requirement, ...], np.ndarray] = {}
        self._offer_masks: dict[tuple[Requirement | None, Requirement | None], tuple[np.ndarray, np.ndarray]] = {}
        self._offered: dict[bytes, np.ndarray] = {}
        self._ports_ok: dict[frozenset[tuple[str, str, int]], np.ndarray] = {}
        self.all_mask = np.ones(n, dtype=bool) & (self.free0 >= 0).all(axis=1)
        self._cheapest: dict[tuple[bytes, int], tuple[np.ndarray, np.ndarray]] = {}

    def _daemon_groups(self, daemonsets: list[Pod]) -> None:
        """Karpenter's DaemonSet overhead groups: per instance type, the DaemonSets whose own pod spec can land on it
        (the pool's taints tolerated, PreferNoSchedule always; a required node-affinity term compatible with the pool
        and intersecting the type's labels and offerings; startup taints never keep a DaemonSet off), their summed
        requests (`daemon`, one row per type) and the host ports they hold (`port_sets[port_group[t]]`)."""
        n = len(self.types)
        self.daemon = np.zeros((n, len(self.resources)), dtype=np.int64)
        self.port_group = np.zeros(n, dtype=np.int64)
        self.port_sets: list[frozenset[tuple[str, str, int]]] = [frozenset()]
        if not daemonsets or not n:
            return
        terms_of: list[list[Requirements]] = []
        for ds in daemonsets:
            tolerations = ds.tolerations if tolerates_prefer_no_schedule(ds.tolerations) else (
                *ds.tolerations, PREFER_NO_SCHEDULE)
            if untolerated(self.pool.taints, tolerations) is not None:
                terms_of.append([])
                continue
            terms = list(ds.node_terms) or [Requirements()]
            terms_of.append([t for t in terms if self.pool.requirements.incompatibility(t) is None])
        groups: dict[tuple[int, ...], int] = {}
        rindex = {r: i for i, r in enumerate(self.resources)}
        for t, it in enumerate(self.types):
            members = tuple(i for i, terms in enumerate(terms_of) if any(_type_intersects(it, term) for term in terms))
            if not members:
                continue
            for i in members:
                for k, v in daemonsets[i].requests.items():
                    if k in rindex:
                        self.daemon[t, rindex[k]] += v
            g = groups.get(members)
            if g is None:
                g = groups[members] = len(self.port_sets)
                self.port_sets.append(frozenset().union(*(daemonsets[i].host_ports for i in members)))
            self.port_group[t] = g

    def column(self, key: str) -> np.ndarray:
        """The label key of every type (None where a type has no such label), cheapest first."""
        col = self._columns.get(key)
        if col is None:
            col = self._columns[key] = np.array([it.labels.get(key) for it in self.types], dtype=object)
        return col

    def ports_ok(self, ports: frozenset[tuple[str, str, int]]) -> np.ndarray:
        """Types on which no DaemonSet holds any of these host ports."""
        hit = self._ports_ok.get(ports)
        if hit is None:
            free = np.array([not (ps & ports) for ps in self.port_sets], dtype=bool)
            hit = self._ports_ok[ports] = free[self.port_group]
        return hit

    def mask(self, reqs: Requirements) -> np.ndarray:
        """Types whose labels satisfy reqs (zone/capacity type are checked on offerings instead)."""
        labelled = tuple(r for r in reqs if r.key not in OFFERING_KEYS)
        hit = self._combined.get(labelled)
        if hit is not None:
            return hit
        m = self.all_mask.copy()
        for r in labelled:
            cached = self._mask_cache.get(r)
            if cached is None:
                col = self._columns.get(r.key)
                if col is None:
                    col = np.array([it.labels.get(r.key) for it in self.types], dtype=object)
                    self._columns[r.key] = col
                if all(v is None for v in col):
                    cached = np.ones(len(self.types), dtype=bool)
                else:
                    uniq = {v: r.has(v) if v is not None else r.allows_absent() for v in set(col.tolist())}
                    cached = np.fromiter((uniq[v] for v in col), dtype=bool, count=len(col))
                self._mask_cache[r] = cached
            m &= cached
        m.flags.writeable = False  # shared: callers combine it with & and never write it
        self._combined[labelled] = m
        return m

    def min_values_cap(self, mask: np.ndarray, fit: np.ndarray, reqs: Requirements) -> int:
        """The most pods (of a class whose per-type fit counts are `fit`, aligned with mask's True entries) that still
        leave at least minValues distinct values per key among the types that can hold them (Karpenter's minValues)."""
        best = int(fit.max()) if fit.size else 0
        if not self.has_min_values:  # minValues comes only from NodePool requirements
            return best
        for r in reqs:
            if not r.min_values:
                continue
            col = self._columns.get(r.key)
            if col is None:
                col = self._columns[r.key] = np.array([it.labels.get(r.key) for it in self.types], dtype=object)
            values = col[mask]
            # the largest n such that types with fit >= n carry at least min_values distinct values
            order = np.argsort(-fit, kind="stable")
            seen: set[object] = set()
            cap = 0
            for i in order:
                if values[i] is not None:
                    seen.add(values[i])
                if len(seen) >= r.min_values:
                    cap = int(fit[i])
                    break
            best = min(best, cap)
        return best

    def offer_masks(self, reqs: Requirements) -> tuple[np.ndarray, np.ndarray]:
        """Allowed zones and capacity types under reqs (shared arrays: read, never write)."""
        zr, cr = reqs.get(L.ZONE), reqs.get(L.CAPACITY_TYPE)
        hit = self._offer_masks.get((zr, cr))
        if hit is None:
            zm = np.array([zr is None or zr.has(z) for z in self.zones] or [False], dtype=bool)
            cm = np.array([cr is None or cr.has(c) for c in CAPACITY_TYPES], dtype=bool)
            hit = self._offer_masks[(zr, cr)] = (zm, cm)
        return hit

    def offered(self, mask: np.ndarray, zm: np.ndarray, cm: np.ndarray) -> np.ndarray:
        """Types in mask with an available offering in the allowed zones x capacity types."""
        key = zm.tobytes() + b"/" + cm.tobytes()
        avail = self._offered.get(key)
        if avail is None:
            sub = self.price[:, zm][:, :, cm]
            avail = self._offered[key] = np.asarray((sub < INF).any(axis=(1, 2)))
        return mask & avail

    def cheapest_offers(self, zm: np.ndarray, ct: int) -> tuple[np.ndarray, np.ndarray]:
        """Per type, its cheapest price of capacity type ct in the zones zm allows (inf when none) and the first zone
        with that price (shared arrays: read, never write)."""
        key = (zm.tobytes(), ct)
        hit = self._cheapest.get(key)
        if hit is None:
            prices = np.where(zm[None, :], self.price[:, :, ct], INF)
            zone = prices.argmin(axis=1) if prices.size else np.zeros(len(self.types), dtype=np.int64)
            best = prices[np.arange(len(self.types)), zone] if prices.size else np.full(len(self.types), INF)
            best.flags.writeable = zone.flags.writeable = False
            hit = self._cheapest[key] = (best, zone)
        return hit

    def admits(self, tolerations: tuple[Toleration, ...], term: Requirements) -> bool:
        """Whether a pod with these tolerations and node requirements could use the pool at all: ready, taints
        tolerated, requirements compatible."""
        return (not self.pool.not_ready_reason and untolerated(self.pool.taints, tolerations) is None
                and self.pool.requirements.incompatibility(term) is None)


def fit_count(free: np.ndarray, req: np.ndarray) -> np.ndarray:
    """For each row of free capacity, how many pods with req fit (never below 0).

    Column by column: numpy reduces an (n, few) int64 array along its short axis several times slower than it
    divides and compares whole columns, and this runs for every placement."""
    if free.ndim == 1:
        free = free[None, :]
    k: np.ndarray | None = None
    for j, r in enumerate(req.tolist()):
        if r > 0:  # divisors are positive: no division by zero
            q = free[:, j] // r
            k = q if k is None else np.minimum(k, q, out=q)
    if k is None:
        return np.full(free.shape[0], 1 << 30)
    return np.maximum(k, 0, out=k)


def holds(free: np.ndarray, need: np.ndarray) -> np.ndarray:
    """Rows of free (n x resources) with at least need in every resource; (free >= need).all(axis=1), column by
    column for the reason fit_count gives."""
    want = need.tolist()
    m = free[:, 0] >= want[0]
    for j in range(1, len(want)):
        m &= free[:, j] >= want[j]
    return m


def column_max(free: np.ndarray) -> np.ndarray:
    """free.max(axis=0) of a non-empty (n x resources) array, reduced along rows of its transpose (see fit_count)."""
    return np.ascontiguousarray(free.T).max(axis=1)


def column_min(free: np.ndarray) -> np.ndarray:
    """free.min(axis=0) of a non-empty (n x resources) array, likewise."""
    return np.ascontiguousarray(free.T).min(axis=1)


def tolerates_prefer_no_schedule(tolerations: tuple[Toleration, ...]) -> bool:
    """Whether the tolerations already cover every PreferNoSchedule taint."""
    return any(t.operator == "Exists" and not t.key and t.effect in ("", "PreferNoSchedule") for t in tolerations)


def _type_intersects(it: InstanceType, term: Requirements) -> bool:
    """Whether a DaemonSet pod's node requirements intersect an instance type: its labels are compatible (keys the
    type does not define are ignored) and some offering, available or not, is allowed."""
    if not labels_compatible(it, term):
        return False
    allowed = OfferingFilter(term)
    return any(allowed.allows(o) for o in it.offerings)
