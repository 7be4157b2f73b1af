"""The instance-type index: a NodePool's instance types and offerings as numpy arrays, so a NodeClaim can keep the
set of types that can still hold its pods as a mask and test fit for a whole equivalence class at once (Karpenter
filters its instance-type list per NodeClaim; this is the same filter, vectorised)."""

from __future__ import annotations

import numpy as np

from controller.api import labels as L
from controller.catalog.types import InstanceType
from controller.scheduling.pod import Toleration
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.types import SchedNodePool, untolerated

CAPACITY_TYPES = (L.CAPACITY_TYPE_SPOT, L.CAPACITY_TYPE_ON_DEMAND, L.CAPACITY_TYPE_RESERVED)
# requirement keys decided by the offering or the NodeClaim, not by an instance type's labels
OFFERING_KEYS = frozenset({L.ZONE, L.CAPACITY_TYPE, L.HOSTNAME, L.NODEPOOL})
INF = float("inf")


class InstanceTypeIndex:
    """A NodePool's instance types as arrays, cheapest first: allocatable and free room (less DaemonSet overhead) per
    resource, offering prices per (zone, capacity type), and label masks cached per requirement."""

    def __init__(self, pool: SchedNodePool, resources: list[str], daemon_overhead: dict[str, int],
                 daemon_host_ports: frozenset[tuple[str, str, int]] = frozenset()) -> None:
        self.pool = pool
        self.resources = resources
        self.daemon_host_ports = daemon_host_ports  # held on every node of the pool by its DaemonSets
        self.has_min_values = any(r.min_values for r in pool.requirements)
        zone_req = pool.requirements.get(L.ZONE)
        ct_req = pool.requirements.get(L.CAPACITY_TYPE)
        types: list[InstanceType] = []
        for it in pool.instance_types:
            if self._labels_ok(it, pool.requirements) and any(
                    o.available and (zone_req is None or zone_req.has(o.zone))
                    and (ct_req is None or ct_req.has(o.capacity_type)) for o in it.offerings):
                types.append(it)
        self.zones = sorted({o.zone for it in types for o in it.offerings})
        zi = {z: i for i, z in enumerate(self.zones)}
        ci = {c: i for i, c in enumerate(CAPACITY_TYPES)}
        n = len(types)
        self.price = np.full((n, max(1, len(self.zones)), len(CAPACITY_TYPES)), INF)
        for t, it in enumerate(types):
            for o in it.offerings:
                if o.available and (zone_req is None or zone_req.has(o.zone)) and (
                        ct_req is None or ct_req.has(o.capacity_type)) and o.capacity_type in ci:
                    self.price[t, zi[o.zone], ci[o.capacity_type]] = min(self.price[t, zi[o.zone], ci[o.capacity_type]],
                                                                         o.price)
        self.min_price = self.price.reshape(n, -1).min(axis=1) if n else np.zeros(0)
        order = np.argsort(self.min_price, kind="stable")
        self.types = [types[i] for i in order]
        self.price = self.price[order]
        self.min_price = self.min_price[order]
        overhead = np.array([daemon_overhead.get(r, 0) for r in resources], dtype=np.int64)
        self.daemon = overhead
        self.alloc = np.array([[it.allocatable.get(r, 0) for r in resources] for it in self.types],
                              dtype=np.int64).reshape(n, len(resources))
        self.capacity = np.array([[it.capacity.get(r, 0) for r in resources] for it in self.types],
                                 dtype=np.int64).reshape(n, len(resources))
        self.free0 = self.alloc - overhead  # what pods may use on an empty node of each type
        self.types_array = np.empty(n, dtype=object)  # the types again, for taking a mask's types in one step
        self.types_array[:] = self.types
        self._columns: dict[str, np.ndarray] = {}
        self._mask_cache: dict[Requirement, np.ndarray] = {}
        self._offer_masks: dict[tuple[Requirement | None, Requirement | None], tuple[np.ndarray, np.ndarray]] = {}
        self._offered: dict[bytes, np.ndarray] = {}
        self.all_mask = np.ones(n, dtype=bool) & (self.free0 >= 0).all(axis=1)

    @staticmethod
    def _labels_ok(it: InstanceType, reqs: Requirements) -> bool:
        for r in reqs:
            if r.key in OFFERING_KEYS:
                continue
            value = it.labels.get(r.key)
            if value is None:
                continue  # a label the pool sets on nodes (template labels), not a property of the type
            if not r.has(value):
                return False
        return True

    def mask(self, reqs: Requirements) -> np.ndarray:
        """Types whose labels satisfy reqs (zone/capacity type are checked on offerings instead)."""
        m = self.all_mask.copy()
        for r in reqs:
            if r.key in OFFERING_KEYS:
                continue
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

    def admits(self, tolerations: tuple[Toleration, ...], term: Requirements) -> bool:
        """Whether a pod with these tolerations and node requirements could use the pool at all: ready, taints
        tolerated, requirements compatible."""
        return (not self.pool.not_ready_reason and untolerated(self.pool.taints, tolerations) is None
                and self.pool.requirements.incompatibility(term) is None)


def fit_count(free: np.ndarray, req: np.ndarray) -> np.ndarray:
    """For each row of free capacity, how many pods with req fit."""
    if free.ndim == 1:
        free = free[None, :]
    nz = req > 0
    if not nz.any():
        return np.full(free.shape[0], 1 << 30)
    with np.errstate(divide="ignore"):
        k = np.floor_divide(free[:, nz], req[nz]).min(axis=1)
    return np.maximum(k, 0)
