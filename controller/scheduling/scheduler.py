"""The scheduling simulation: pending pods -> pods on existing nodes + new NodeClaims, as Karpenter's provisioner does.

Shape of the algorithm (Karpenter's, made fast):
- Pods are grouped into equivalence classes (same requests, labels and constraints) and a class is placed in bulk.
- Classes go largest first. Each pod goes to the first existing node, then the first open NodeClaim, that can take it;
  otherwise a new NodeClaim is opened from the highest-weight NodePool that is compatible, within limits.
- A NodeClaim keeps the set of instance types (a numpy mask over its pool's index) that can still hold its pods; at the
  end it launches the cheapest offering of the cheapest type that fits (spot first when the NodeClaim allows spot).
- Preferences (preferred node affinity, preferred pod (anti-)affinity, ScheduleAnyway spreads) are first treated as
  required and relaxed one at a time for pods that cannot be placed, as Karpenter does.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from itertools import count

import numpy as np

from controller.api import labels as L
from controller.api.quantity import CPU, MEMORY, PODS, format_quantity
from controller.catalog.types import InstanceType
from controller.scheduling.pod import AffinityTerm, Pod, SpreadConstraint
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.types import ExistingNode, SchedNodePool, Taint, untolerated

CAPACITY_TYPES = (L.CAPACITY_TYPE_SPOT, L.CAPACITY_TYPE_ON_DEMAND, L.CAPACITY_TYPE_RESERVED)
_OFFERING_KEYS = frozenset({L.ZONE, L.CAPACITY_TYPE, L.HOSTNAME, L.NODEPOOL})
INF = float("inf")
MAX_ROUNDS = 256


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


@dataclass
class Plan:
    """The outcome of a simulation."""

    node_claims: list[PlannedNodeClaim] = field(default_factory=list)
    existing: dict[str, list[Pod]] = field(default_factory=dict)
    unschedulable: dict[str, str] = field(default_factory=dict)
    cost_per_hour: float = 0.0
    lower_bound_per_hour: float = 0.0

    @property
    def gap(self) -> float:
        """How far the plan's cost is above the lower bound, relative to the bound."""
        if self.lower_bound_per_hour <= 0:
            return 0.0
        return (self.cost_per_hour - self.lower_bound_per_hour) / self.lower_bound_per_hour


class _PoolIndex:
    """A NodePool's instance types as arrays: allocatable per resource, offering prices per (zone, capacity type)."""

    def __init__(self, pool: SchedNodePool, resources: list[str], daemon_overhead: dict[str, int]) -> None:
        self.pool = pool
        self.resources = resources
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
        self._columns: dict[str, np.ndarray] = {}
        self._mask_cache: dict[Requirement, np.ndarray] = {}
        self.all_mask = np.ones(n, dtype=bool) & (self.free0 >= 0).all(axis=1)

    @staticmethod
    def _labels_ok(it: InstanceType, reqs: Requirements) -> bool:
        for r in reqs:
            if r.key in _OFFERING_KEYS:
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
            if r.key in _OFFERING_KEYS:
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
        """Allowed zones and capacity types under reqs."""
        zr, cr = reqs.get(L.ZONE), reqs.get(L.CAPACITY_TYPE)
        zm = np.array([zr is None or zr.has(z) for z in self.zones] or [False], dtype=bool)
        cm = np.array([cr is None or cr.has(c) for c in CAPACITY_TYPES], dtype=bool)
        return zm, cm


_names = count(1)


class _Bin:
    """A place pods can go: an existing node (fixed allocatable) or a new NodeClaim (a mask of instance types)."""

    def __init__(self, *, name: str, index: _PoolIndex | None, requirements: Requirements, taints: list[Taint],
                 used: np.ndarray, alloc: np.ndarray | None = None, mask: np.ndarray | None = None,
                 existing: ExistingNode | None = None) -> None:
        self.name = name
        self.index = index
        self.requirements = requirements
        self.taints = taints
        self.used = used
        self.alloc = alloc
        self.mask = mask
        self.existing = existing
        self.pods: list[Pod] = []
        self.host_ports: set[tuple[str, str, int]] = set()
        self.anti_terms: list[AffinityTerm] = []  # required anti-affinity of pods already here
        self.maxfree = self.free_upper_bound()
        self.position = -1

    def free_upper_bound(self) -> np.ndarray:
        """Per resource, the most any still-possible instance type has free: a cheap first test for fit."""
        if self.index is None:
            assert self.alloc is not None
            return self.alloc - self.used
        assert self.mask is not None
        if not self.mask.any():
            return np.full_like(self.used, -1)
        return self.index.free0[self.mask].max(axis=0) - self.used

    @property
    def zone(self) -> str | None:
        """The zone if it is decided."""
        r = self.requirements.get(L.ZONE)
        if r is not None and not r.complement and len(r.values) == 1:
            return next(iter(r.values))
        if self.existing is not None:
            return self.existing.labels.get(L.ZONE)
        return None

    def labels(self) -> dict[str, str]:
        """Labels the node has (or will have) that topology keys refer to."""
        if self.existing is not None:
            return self.existing.labels
        out = self.requirements.labels()
        out[L.HOSTNAME] = self.name
        return out

    def offering_ok(self, mask: np.ndarray, zm: np.ndarray, cm: np.ndarray) -> np.ndarray:
        """Types in mask with an available offering in the allowed zones x capacity types."""
        assert self.index is not None
        sub = self.index.price[:, zm][:, :, cm]
        return mask & (sub.reshape(sub.shape[0], -1) < INF).any(axis=1)


@dataclass
class _Group:
    """Pods that some topology constraint counts: selector within namespaces, by topology key."""

    namespaces: frozenset[str]
    selector: object
    key: str
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    by_bin: np.ndarray = field(default_factory=lambda: np.zeros(64, dtype=np.int64))  # hostname groups, per bin

    def matches(self, pod: Pod) -> bool:
        return pod.namespace in self.namespaces and self.selector.matches(pod.labels)  # type: ignore[attr-defined]


class Scheduler:
    """Karpenter's provisioning simulation over NodePools, existing nodes and DaemonSets."""

    def __init__(self, node_pools: list[SchedNodePool], existing_nodes: list[ExistingNode] | None = None,
                 daemonsets: list[Pod] | None = None) -> None:
        self.pools = sorted(node_pools, key=lambda p: (-(p.weight or 0), p.name))
        self.existing_nodes = existing_nodes or []
        self.daemonsets = daemonsets or []

    # ---- setup -------------------------------------------------------------------------------------------------
    def _daemon_overhead(self, pool: SchedNodePool) -> dict[str, int]:
        total: dict[str, int] = {}
        pool_reqs = pool.requirements
        for ds in self.daemonsets:
            if untolerated(pool.taints + pool.startup_taints, ds.tolerations) is not None:
                continue
            if ds.node_terms and all(pool_reqs.compatible(t) is not None for t in ds.node_terms):
                continue
            for k, v in ds.requests.items():
                total[k] = total.get(k, 0) + v
        return total

    def solve(self, pods: list[Pod], *, lower_bound: bool = False) -> Plan:
        """Place pods; returns the plan with new NodeClaims, placements on existing nodes, and reasons for the rest.
        With lower_bound, also the LP bound on the cost of the new capacity (simulate and benchmarks ask for it)."""
        resources = [CPU, MEMORY, PODS]
        for p in pods:
            for r in p.requests:
                if r not in resources:
                    resources.append(r)
        self.resources = resources
        self.rindex = {r: i for i, r in enumerate(resources)}
        self.indexes = [_PoolIndex(p, resources, self._daemon_overhead(p)) for p in self.pools]
        self.remaining = {p.name: (None if p.limits is None else dict(p.limits)) for p in self.pools}
        for pool in self.pools:
            rem = self.remaining[pool.name]
            if rem is not None:
                for k, v in pool.used.items():
                    if k in rem:
                        rem[k] -= v
        self.bins: list[_Bin] = []
        self._maxfree = np.zeros((64, len(resources)), dtype=np.int64)
        for node in self.existing_nodes:
            used = self._vec({})
            for p in node.pods:
                used += self._vec(p.requests)
            b = _Bin(name=node.name, index=None, requirements=Requirements.from_labels(node.labels),
                     taints=node.taints, used=used, alloc=self._vec(node.allocatable), existing=node)
            for p in node.pods:
                b.pods.append(p)
                b.anti_terms.extend(p.anti_affinity)
            self._add_bin(b)
        self.new_bins: list[_Bin] = []
        self._cursor: dict[object, int] = {}
        self._zone_cache: dict[object, list[str]] = {}
        self._class_pools: dict[object, set[int]] = {}
        self.groups: dict[tuple[object, ...], _Group] = {}
        for p in pods:
            for c in p.spread:
                self._group(p, c.selector, frozenset([p.namespace]), c.topology_key)
            for t in (*p.affinity, *p.anti_affinity, *(t for _, t in p.preferred_affinity),
                      *(t for _, t in p.preferred_anti_affinity)):
                self._group(p, t.selector, t.namespaces, t.topology_key)
        for b in self.bins:
            for p in b.pods:
                self._count(b, p)
        classes: dict[object, list[Pod]] = {}
        for p in pods:
            classes.setdefault(p.class_key, []).append(p)
        order = sorted(classes.values(), key=lambda ps: (-ps[0].requests.get(CPU, 0), -ps[0].requests.get(MEMORY, 0),
                                                        ps[0].key))
        plan = Plan()
        rounds = self._rounds(pods)
        for rnd in range(rounds):
            for group in order:
                size = -(-len(group) // rounds)
                chunk = group[rnd * size:(rnd + 1) * size]
                if chunk:
                    self._place_class(chunk, plan)
        self._finish(plan, pods, lower_bound)
        return plan

    def _add_bin(self, b: _Bin) -> None:
        b.position = len(self.bins)
        self.bins.append(b)
        if b.position >= len(self._maxfree):
            self._maxfree = np.vstack([self._maxfree, np.zeros_like(self._maxfree)])
        self._maxfree[b.position] = b.maxfree

    def _rounds(self, pods: list[Pod]) -> int:
        """How many interleaved rounds to place classes in: about the number of largest nodes the pods need.

        Placing each class whole, largest first, fills early nodes with cpu-heavy pods and later ones with
        memory-heavy pods, stranding the other resource on both. Placing a proportional slice of every class per round
        gives each node the workload's overall mix, which is what keeps the plan near the lower bound."""
        demand = np.zeros(len(self.resources))
        for p in pods:
            demand += self._vec(p.requests)
        biggest = np.zeros(len(self.resources))
        for ix in self.indexes:
            if len(ix.types):
                biggest = np.maximum(biggest, ix.free0.max(axis=0))
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(biggest > 0, demand / np.maximum(biggest, 1), 0)
        return int(min(MAX_ROUNDS, max(1, np.ceil(share.max() if share.size else 1))))

    def _vec(self, res: dict[str, int]) -> np.ndarray:
        v = np.zeros(len(self.resources), dtype=np.int64)
        for k, amount in res.items():
            i = self.rindex.get(k)
            if i is not None:
                v[i] = amount
        return v

    def _group(self, pod: Pod, selector: object, namespaces: frozenset[str], key: str) -> _Group:
        gk = (selector, namespaces, key)
        g = self.groups.get(gk)
        if g is None:
            g = self.groups[gk] = _Group(namespaces, selector, key)
        return g

    def _count(self, b: _Bin, pod: Pod, n: int = 1) -> None:
        labels = b.labels()
        for g in self.groups.values():
            if g.matches(pod):
                domain = labels.get(g.key)
                if domain is not None:
                    g.counts[domain] += n
                if g.key == L.HOSTNAME and b.position >= 0:
                    if b.position >= len(g.by_bin):
                        g.by_bin = np.concatenate([g.by_bin, np.zeros(len(self._maxfree), dtype=np.int64)])
                    g.by_bin[b.position] += n

    # ---- placement -----------------------------------------------------------------------------------------------
    def _place_class(self, pods: list[Pod], plan: Plan) -> None:
        proto = pods[0]
        pending = list(pods)
        level = 0
        reason = ""
        while pending:
            view = _relaxed(proto, level)
            if view is None:
                break
            placed, reason = self._place_view(view, pending)
            pending = pending[placed:]
            if pending:
                level += 1
        for p in pending:
            plan.unschedulable[p.key] = reason or "no nodepool can take it"

    def _place_view(self, view: _View, pods: list[Pod]) -> tuple[int, str]:
        """Place as many of the class's pods as possible under one relaxation level; returns (placed, why not)."""
        pools = self._class_pools.setdefault(view.pod.class_key, set())
        for term in view.node_terms or (Requirements(),):
            pools.update(id(ix) for ix in self._compatible_pools(view, term))
        placed = 0
        reasons: list[str] = []
        total = len(pods)
        while placed < total:
            terms = view.node_terms or (Requirements(),)
            progress = 0
            for term in terms:
                progress = self._place_some(view, term, pods[placed:], reasons)
                if progress:
                    break
            if not progress:
                return placed, "; ".join(dict.fromkeys(reasons))
            placed += progress
        return placed, ""

    def _topology_requirements(self, view: _View, term: Requirements, candidates_zones: list[str]) -> tuple[
            Requirements | None, int, str]:
        """Extra zone requirement and per-node cap that the pod's topology constraints impose right now."""
        reqs = term
        cap = 1 << 30
        proto = view.pod
        for c in view.spread:
            g = self._group(proto, c.selector, frozenset([proto.namespace]), c.topology_key)
            if c.topology_key == L.HOSTNAME:
                cap = min(cap, c.max_skew)
                continue
            if c.topology_key == L.ZONE:
                domains = list(candidates_zones)
            elif c.topology_key == L.CAPACITY_TYPE:
                domains = self._capacity_types_for(view, term)
            else:
                domains = sorted(g.counts)
            allowed = reqs.get(c.topology_key)
            if allowed is not None:
                domains = [d for d in domains if allowed.has(d)]
            if not domains:
                return None, 0, f"topology spread on {c.topology_key}: no eligible domain"
            counts = {d: g.counts.get(d, 0) for d in domains}
            low = min(counts.values())
            if c.min_domains and len(domains) < c.min_domains:
                low = 0
            best = min(domains, key=lambda d: (counts[d], d))
            if counts[best] + 1 - low > c.max_skew:
                return None, 0, f"topology spread on {c.topology_key} would exceed maxSkew {c.max_skew}"
            # how many can go to best before another domain becomes the lowest
            others = [counts[d] for d in domains if d != best]
            room = (min(others) if others else 1 << 30) + c.max_skew - counts[best]
            cap = min(cap, max(1, room))
            reqs = reqs.intersect(Requirements([Requirement(c.topology_key, False, frozenset([best]))]))
        for t in view.affinity:
            g = self._group(proto, t.selector, t.namespaces, t.topology_key)
            domains = [d for d, n in g.counts.items() if n > 0]
            if t.topology_key == L.HOSTNAME:
                continue  # handled per bin
            if domains:
                reqs = reqs.intersect(Requirements([Requirement(t.topology_key, False, frozenset(domains))]))
            elif not t.selects(proto.namespace, proto.labels):
                return None, 0, f"pod affinity on {t.topology_key}: no pod matches the selector"
            elif t.topology_key == L.ZONE and candidates_zones:
                allowed = reqs.get(L.ZONE)
                zones = [z for z in candidates_zones if allowed is None or allowed.has(z)]
                if zones:
                    reqs = reqs.intersect(Requirements([Requirement(L.ZONE, False, frozenset([zones[0]]))]))
        for t in view.anti_affinity:
            if t.topology_key == L.HOSTNAME:
                if t.selects(proto.namespace, proto.labels):
                    cap = 1
                continue
            g = self._group(proto, t.selector, t.namespaces, t.topology_key)
            taken = [d for d, n in g.counts.items() if n > 0]
            if taken:
                reqs = reqs.intersect(Requirements([Requirement(t.topology_key, True, frozenset(taken))]))
            if t.selects(proto.namespace, proto.labels):
                cap = 1
        return reqs, cap, ""

    def _compatible_pools(self, view: _View, term: Requirements) -> list[_PoolIndex]:
        """Pools that could take the pod at all: ready, taints tolerated, requirements compatible."""
        return [ix for ix in self.indexes if not ix.pool.not_ready_reason
                and untolerated(ix.pool.taints, view.tolerations) is None
                and ix.pool.requirements.compatible(term) is None]

    def _capacity_types_for(self, view: _View, term: Requirements) -> list[str]:
        """Capacity-type domains: those the compatible NodePools offer (spot, on-demand, reserved)."""
        found: set[str] = set()
        for ix in self._compatible_pools(view, term):
            merged = ix.pool.requirements.intersect(term)
            mask = ix.all_mask & ix.mask(merged)
            zm, cm = ix.offer_masks(merged)
            if mask.any():
                sub = ix.price[mask][:, zm, :]
                found.update(ct for i, ct in enumerate(CAPACITY_TYPES) if cm[i] and np.isfinite(sub[:, :, i]).any())
        found.update(n.labels[L.CAPACITY_TYPE] for n in self.existing_nodes if L.CAPACITY_TYPE in n.labels)
        return sorted(found)

    def _zones_for(self, view: _View, term: Requirements) -> list[str]:
        """Topology domains for zone constraints, as Karpenter computes them: the zones of the NodePools the pod is
        compatible with (within the pod's own zone requirement), plus zones of existing nodes."""
        key = (view.pod.class_key, view.tolerations, term.describe())
        zones = self._zone_cache.get(key)
        if zones is None:
            found: set[str] = set()
            for ix in self._compatible_pools(view, term):
                merged = ix.pool.requirements.intersect(term)
                mask = ix.all_mask & ix.mask(merged)
                if mask.any():
                    zm, cm = ix.offer_masks(merged)
                    sub = ix.price[mask][:, :, cm]
                    found.update(z for i, z in enumerate(ix.zones) if zm[i] and np.isfinite(sub[:, i, :]).any())
            found.update(n.labels[L.ZONE] for n in self.existing_nodes if L.ZONE in n.labels)
            zr = term.get(L.ZONE)
            zones = self._zone_cache[key] = sorted(z for z in found if zr is None or zr.has(z))
        return zones

    def _bin_blocks(self, b: _Bin, view: _View) -> bool:
        pod = view.pod
        if view.host_ports & b.host_ports:
            return True
        for t in b.anti_terms:
            if t.topology_key == L.HOSTNAME and t.selects(pod.namespace, pod.labels):
                return True
        for t in view.anti_affinity:
            if t.topology_key == L.HOSTNAME and any(t.selects(p.namespace, p.labels) for p in b.pods):
                return True
        for t in view.affinity:
            if t.topology_key == L.HOSTNAME:
                g = self._group(pod, t.selector, t.namespaces, t.topology_key)
                anywhere = any(n > 0 for n in g.counts.values())
                here = g.counts.get(b.name, 0) > 0 or any(t.selects(p.namespace, p.labels) for p in b.pods)
                if (anywhere or not t.selects(pod.namespace, pod.labels)) and not here:
                    return True
        return False

    def _hostname_cap(self, b: _Bin, view: _View, cap: int) -> int:
        for c in view.spread:
            if c.topology_key == L.HOSTNAME:
                here = sum(1 for p in b.pods if p.namespace == view.pod.namespace and c.selector.matches(p.labels))
                cap = min(cap, c.max_skew - here)
        return cap

    def _place_some(self, view: _View, term: Requirements, pods: list[Pod], reasons: list[str]) -> int:
        """Place a prefix of pods (all identical) into one bin; returns how many were placed (0 = none possible)."""
        req = self._vec(view.pod.requests)
        reqs, cap, why = self._topology_requirements(view, term, self._zones_for(view, term))
        if reqs is None:
            reasons.append(why)
            return 0
        want = len(pods)
        # Requirements that depend on current counts (zonal spread/affinity) allow one bin per call; otherwise the
        # class fills bin after bin. Bins only fill up, so one rejected for this class and requirements stays so.
        one_bin = any(c.topology_key != L.HOSTNAME for c in view.spread) or any(
            t.topology_key != L.HOSTNAME for t in (*view.affinity, *view.anti_affinity))
        cursor_key = (view.pod.class_key, len(view.spread), len(view.affinity), len(view.anti_affinity),
                      reqs.describe())
        start = self._cursor.get(cursor_key, 0)
        done = 0
        # one vector test over every bin's free-capacity upper bound leaves only bins that might fit
        nb = len(self.bins)
        room = (self._maxfree[start:nb] >= req[None, :]).all(axis=1)
        for c in view.spread:
            if c.topology_key == L.HOSTNAME:
                g = self._group(view.pod, c.selector, frozenset([view.pod.namespace]), c.topology_key)
                room &= _padded(g.by_bin, nb)[start:nb] < c.max_skew
        for t in view.anti_affinity:
            if t.topology_key == L.HOSTNAME:
                g = self._group(view.pod, t.selector, t.namespaces, t.topology_key)
                room &= _padded(g.by_bin, nb)[start:nb] == 0
        candidates = np.flatnonzero(room) + start
        if candidates.size == 0:
            start = nb
        for i in candidates.tolist():
            b = self.bins[i]
            n = self._fits_bin(b, view, reqs, req, min(want - done, cap))
            if not n:
                if done == 0:
                    start = i + 1
                continue
            if done == 0:
                start = i
            self._commit(b, view, reqs, pods[done:done + n])
            done += n
            if one_bin or done >= want:
                break
        else:
            if done == 0:
                start = nb
        self._cursor[cursor_key] = start
        if done:
            return done
        # 2. a new NodeClaim from the first compatible NodePool by weight
        pool_reasons = []
        for ix in self.indexes:
            n, why = self._open(ix, view, reqs, req, min(want, cap), pods)
            if n:
                return n
            pool_reasons.append(f'nodepool "{ix.pool.name}": {why}')
        if not self.indexes:
            pool_reasons.append("no NodePool")
        reasons.append("; ".join(pool_reasons) if pool_reasons else "no capacity")
        return 0

    def _fits_bin(self, b: _Bin, view: _View, reqs: Requirements, req: np.ndarray, want: int) -> int:
        if (b.maxfree < req).any():
            return 0
        if untolerated(b.taints, view.tolerations) is not None:
            return 0
        if b.existing is not None:
            if Requirements.from_labels(b.existing.labels).compatible(reqs, frozenset()) is not None:
                return 0
        elif b.requirements.compatible(reqs) is not None:
            return 0
        if self._bin_blocks(b, view):
            return 0
        want = self._hostname_cap(b, view, want)
        if want <= 0:
            return 0
        if view.host_ports:
            want = 1
        if b.existing is not None:
            assert b.alloc is not None
            return min(want, _fit_count(b.alloc[None, :] - b.used[None, :], req)[0])
        assert b.index is not None and b.mask is not None
        merged = b.requirements.intersect(reqs)
        zm, cm = b.index.offer_masks(merged)
        mask = b.offering_ok(b.mask & b.index.mask(reqs), zm, cm)
        if not mask.any():
            return 0
        k = _fit_count(b.index.free0[mask] - b.used[None, :], req)
        if not k.size:
            return 0
        return min(want, b.index.min_values_cap(mask, k, merged))

    def _commit(self, b: _Bin, view: _View, reqs: Requirements, pods: list[Pod]) -> None:
        n = len(pods)
        b.used = b.used + self._vec(view.pod.requests) * n
        if b.index is not None:
            assert b.mask is not None
            b.requirements = b.requirements.intersect(reqs)
            zm, cm = b.index.offer_masks(b.requirements)
            b.mask = b.offering_ok(b.mask & b.index.mask(reqs), zm, cm) & (b.index.free0 >= b.used[None, :]).all(axis=1)
        b.maxfree = b.free_upper_bound()
        self._maxfree[b.position] = b.maxfree
        b.pods.extend(pods)
        b.host_ports |= view.host_ports
        b.anti_terms.extend(t for t in view.anti_affinity if t.topology_key == L.HOSTNAME)
        for p in pods[:1]:
            self._count(b, p, n)

    def _open(self, ix: _PoolIndex, view: _View, reqs: Requirements, req: np.ndarray, want: int,
              pods: list[Pod]) -> tuple[int, str]:
        pool = ix.pool
        if pool.not_ready_reason:
            return 0, pool.not_ready_reason
        taint = untolerated(pool.taints, view.tolerations)
        if taint is not None:
            return 0, f"taint {taint} not tolerated"
        why = pool.requirements.compatible(reqs)
        if why is not None:
            return 0, why
        merged = pool.requirements.intersect(reqs)
        zm, cm = ix.offer_masks(merged)
        mask = ix.all_mask & ix.mask(merged)
        if not mask.any():
            return 0, f"no instance type matches {reqs.describe() or 'the requirements'}"
        offered = (ix.price[:, zm][:, :, cm].reshape(len(ix.types), -1) < INF).any(axis=1) if len(ix.types) else mask
        mask = mask & offered
        if not mask.any():
            return 0, "no offering in the allowed zones and capacity types"
        rem = self.remaining[pool.name]
        within = np.ones(len(ix.types), dtype=bool)
        if rem is not None:
            pending = self._vec({})
            for b in self.new_bins:
                if b.index is ix and b.mask is not None and b.mask.any():
                    pending += ix.capacity[int(np.argmax(b.mask))]
            for k, v in rem.items():
                i = self.rindex.get(k)
                if i is not None:
                    within &= ix.capacity[:, i] + pending[i] <= v
        fit = _fit_count(ix.free0[mask & within], req)
        if not fit.size or fit.max() <= 0:
            if rem is not None and _fit_count(ix.free0[mask], req).max(initial=0) > 0:
                left = ", ".join(f"{k}={format_quantity(k, max(0, v))}" for k, v in rem.items())
                return 0, f"limits exceeded: a node large enough would go past the pool's limits (left: {left})"
            need = ", ".join(f"{r}={format_quantity(r, int(req[i]))}" for i, r in enumerate(self.resources)
                             if req[i] and r != PODS)
            return 0, f"no instance type has room for requests {need} (with daemonset overhead)"
        mask = mask & within
        n = min(want, ix.min_values_cap(mask, fit, merged))
        if n <= 0:
            return 0, "fewer instance types than minValues requires: " + ", ".join(
                f"{r.key} minValues {r.min_values}" for r in merged if r.min_values)
        if view.host_ports:
            n = 1
        name = f"{pool.name}-{next(_names):05d}"
        b = _Bin(name=name, index=ix, requirements=merged.intersect(Requirements([
            Requirement(L.NODEPOOL, False, frozenset([pool.name]))])), taints=pool.taints, used=self._vec({}),
            mask=mask)
        self._add_bin(b)
        self.new_bins.append(b)
        self._commit(b, view, reqs, pods[:n])
        return n, ""

    # ---- result ----------------------------------------------------------------------------------------------
    def _finish(self, plan: Plan, pods: list[Pod], with_bound: bool) -> None:
        for b in self.bins:
            if b.existing is not None:
                new = [p for p in b.pods if p not in b.existing.pods]
                if new:
                    plan.existing[b.name] = new
        for b in self.new_bins:
            plan.node_claims.append(_launch(b))
        plan.cost_per_hour = round(sum(c.price_per_hour for c in plan.node_claims), 6)
        if not with_bound:
            return
        from controller.scheduling.lower_bound import lower_bound  # scipy: only when the bound is asked for

        placed = [p for c in plan.node_claims for p in c.pods]
        by_id = {id(ix): ix for ix in self.indexes}
        pools_of = {k: [by_id[i] for i in ids] for k, ids in self._class_pools.items()}
        plan.lower_bound_per_hour = round(lower_bound(placed, pools_of, self.indexes, self.resources), 6)


def _padded(a: np.ndarray, n: int) -> np.ndarray:
    return a if len(a) >= n else np.concatenate([a, np.zeros(n - len(a), dtype=a.dtype)])


def _fit_count(free: np.ndarray, req: np.ndarray) -> np.ndarray:
    """For each row of free capacity, how many pods with req fit."""
    if free.ndim == 1:
        free = free[None, :]
    nz = req > 0
    if not nz.any():
        return np.full(free.shape[0], 1 << 30)
    with np.errstate(divide="ignore"):
        k = np.floor_divide(free[:, nz], req[nz]).min(axis=1)
    return np.maximum(k, 0)


def _launch(b: _Bin) -> PlannedNodeClaim:
    """Choose the instance type and offering a NodeClaim would launch with: spot first if allowed, then cheapest."""
    ix = b.index
    assert ix is not None and b.mask is not None
    zm, cm = ix.offer_masks(b.requirements)
    fits = b.mask & (ix.free0 >= b.used[None, :]).all(axis=1)
    best: tuple[float, int, int, int] | None = None
    for ct in (0, 1, 2):  # spot, on-demand, reserved: Karpenter launches spot when the NodeClaim allows it
        if not cm[ct]:
            continue
        prices = np.where(zm[None, :], ix.price[:, :, ct], INF)
        prices = np.where(fits[:, None], prices, INF)
        if np.isfinite(prices).any():
            ti, zi = np.unravel_index(int(np.argmin(prices)), prices.shape)
            best = (float(prices[ti, zi]), int(ti), int(zi), ct)
            break
    options = [ix.types[i] for i in np.flatnonzero(fits)]
    if best is None:
        return PlannedNodeClaim(ix.pool.name, b.requirements, options, None, "", "", 0.0, b.pods, b.name)
    price, t, z, ct = best
    return PlannedNodeClaim(node_pool=ix.pool.name, requirements=b.requirements, instance_type_options=options,
                            instance_type=ix.types[t], capacity_type=CAPACITY_TYPES[ct], zone=ix.zones[z],
                            price_per_hour=price, pods=b.pods, hostname=b.name)


@dataclass(frozen=True)
class _View:
    """A pod's constraints at one relaxation level."""

    pod: Pod
    node_terms: tuple[Requirements, ...]
    tolerations: tuple
    spread: tuple[SpreadConstraint, ...]
    affinity: tuple[AffinityTerm, ...]
    anti_affinity: tuple[AffinityTerm, ...]
    host_ports: frozenset[tuple[str, str, int]]


def _relaxed(pod: Pod, level: int) -> _View | None:
    """Level 0: every preference as required. Each further level drops one preference, in Karpenter's order:
    preferred pod anti-affinity, preferred pod affinity, preferred node affinity (lowest weight first),
    ScheduleAnyway spreads, then PreferNoSchedule taints become tolerated. None when nothing is left to relax."""
    anti = sorted(pod.preferred_anti_affinity, key=lambda wt: -wt[0])
    aff = sorted(pod.preferred_affinity, key=lambda wt: -wt[0])
    node = sorted(pod.preferred_node, key=lambda wt: -wt[0])
    soft = [c for c in pod.spread if not c.hard]
    steps = len(anti) + len(aff) + len(node) + len(soft) + 1
    if level > steps:
        return None
    drop = level
    k_anti = max(0, len(anti) - drop)
    drop = max(0, drop - len(anti))
    k_aff = max(0, len(aff) - drop)
    drop = max(0, drop - len(aff))
    k_node = max(0, len(node) - drop)
    drop = max(0, drop - len(node))
    k_soft = max(0, len(soft) - drop)
    drop = max(0, drop - len(soft))
    tolerations = pod.tolerations
    if drop >= 1:
        from controller.scheduling.pod import Toleration

        tolerations = (*tolerations, Toleration(operator="Exists", effect="PreferNoSchedule"))
    terms = pod.node_terms
    prefs = [r for _, r in node[:k_node]]
    if prefs:
        base = terms or (Requirements(),)
        extra = Requirements()
        for r in prefs:
            extra = extra.intersect(r)
        terms = tuple(t.intersect(extra) for t in base)
    return _View(pod=pod, node_terms=terms, tolerations=tolerations,
                 spread=tuple(c for c in pod.spread if c.hard) + tuple(soft[:k_soft]),
                 affinity=pod.affinity + tuple(t for _, t in aff[:k_aff]),
                 anti_affinity=pod.anti_affinity + tuple(t for _, t in anti[:k_anti]), host_ports=pod.host_ports)
