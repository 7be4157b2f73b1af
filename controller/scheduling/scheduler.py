"""The scheduler: pending pods -> pods on existing nodes + new NodeClaims, as Karpenter's provisioner decides
(pkg/controllers/provisioning/scheduling/scheduler.go).

Shape of the algorithm (Karpenter's, made fast):
- Pods are grouped into equivalence classes (same requests, labels and constraints) and a class is placed in bulk.
- Classes go largest first. Each pod goes to an existing node or open NodeClaim that can take it, first one whose
  launch type still has room for it (filling that costs nothing), else the first that can grow to hold it; otherwise
  a new NodeClaim is opened from the highest-weight NodePool that is compatible, within limits.
- Pods left over are retried (from their full preferences) while a pass places some, as Karpenter's queue does: a pod
  whose affinity target was placed after it gets its turn.
- A NodeClaim keeps the set of instance types (a mask over its pool's InstanceTypeIndex) that can still hold its pods;
  at the end it launches the cheapest offering of the cheapest type that fits (a capacity reservation it holds first,
  else spot first when the NodeClaim allows spot). Capacity reservations are held as Karpenter holds them
  (controller.scheduling.reservations): strictly by the provisioner, whose pods wait for a later pass rather than
  fall back from a compatible reservation that is fully held.
- Preferences (preferred node affinity, preferred pod (anti-)affinity, ScheduleAnyway spreads, PreferNoSchedule
  taints) are first treated as required and relaxed one at a time, in Karpenter's order, for pods that cannot be
  placed (controller.scheduling.preferences).
The pieces live by concern: instancetypes (the index), nodeclaim and existingnode (the bins), topology (spread and
pod (anti-)affinity), preferences (relaxation); this module is the solve loop and placement.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from controller.api import labels as L
from controller.api.quantity import CPU, MEMORY, PODS, format_quantity
from controller.scheduling.existingnode import ExistingNodeBin
from controller.scheduling.instancetypes import InstanceTypeIndex, column_max, fit_count, holds
from controller.scheduling.nodeclaim import Bin, NodeClaim, PlannedNodeClaim, reserved_fits
from controller.scheduling.pod import Pod
from controller.scheduling.preferences import View, relaxed
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.reservations import FALLBACK, MODES, RESERVED_OFFERING_ERROR, STRICT, ReservationManager
from controller.scheduling.topology import Topology
from controller.scheduling.types import ExistingNode, SchedNodePool, untolerated

MAX_ROUNDS = 256
WINDOW = 256  # bins tested at a time when looking for the first that fits
MAX_RETRY_PASSES = 32  # Karpenter retries while it makes progress, bounded by its solve timeout; this bounds it too
BASE_RESOURCES = (CPU, MEMORY, PODS)
NODES = "nodes"  # a NodePool limit on the number of nodes, counted in its usage (status.resources) too


@dataclass
class Plan:
    """The outcome of a solve."""

    node_claims: list[PlannedNodeClaim] = field(default_factory=list)
    existing: dict[str, list[Pod]] = field(default_factory=dict)
    unschedulable: dict[str, str] = field(default_factory=dict)
    # pods whose decision waits for a later pass: a compatible capacity reservation exists but every free instance of
    # it is held by this plan's NodeClaims (strict mode; Karpenter neither relaxes them nor reports them unschedulable)
    deferred: dict[str, str] = field(default_factory=dict)
    cost_per_hour: float = 0.0
    lower_bound_per_hour: float = 0.0  # computed only when solve(..., lower_bound=True)

    @property
    def gap(self) -> float:
        """How far the plan's cost is above the lower bound, relative to the bound."""
        if self.lower_bound_per_hour <= 0:
            return 0.0
        return (self.cost_per_hour - self.lower_bound_per_hour) / self.lower_bound_per_hour


@dataclass
class _Opening:
    """A new NodeClaim for pods of one shape from one pool: its requirements, the most pods it takes (cap), the
    types that could hold one (rows, cheapest first) with how many each holds (fit); or why none (why)."""

    why: str
    requirements: Requirements = field(default_factory=Requirements)
    cap: int = 0
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    fit: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _after: dict[int, tuple[np.ndarray, ...]] = field(default_factory=dict)

    def after(self, ix: InstanceTypeIndex, n: int) -> tuple[np.ndarray, ...]:
        """The types left once n pods are in (as a mask and as rows), how many pods each held (k), their free room on
        an empty node and its per-resource maximum: what the NodeClaim's first add would compute, once per n."""
        hit = self._after.get(n)
        if hit is None:
            keep = self.fit >= n
            rows, k = self.rows[keep], self.fit[keep]
            mask = np.zeros(len(ix.types), dtype=bool)
            mask[rows] = True
            free = ix.free0[rows]
            top = column_max(free)
            for a in (mask, rows, k, free, top):
                a.flags.writeable = False  # shared by every NodeClaim opened for this shape: read, never written
            hit = self._after[n] = (mask, rows, k, free, top)
        return hit


class Scheduler:
    """Karpenter's provisioning simulation over NodePools, existing nodes (and in-flight NodeClaims) and DaemonSets.

    One Scheduler may solve several times; each solve starts from the inputs given here, and NodeClaim names
    (`<nodepool>-<5 digits>`, counted from 1) depend only on the solve."""

    def __init__(self, node_pools: list[SchedNodePool], existing_nodes: list[ExistingNode] | None = None,
                 daemonsets: list[Pod] | None = None, reserved_mode: str = FALLBACK) -> None:
        """reserved_mode: strict (the provisioner's: no fallback from a compatible capacity reservation that cannot
        be held) or fallback (Karpenter's default, disruption's simulations); controller.scheduling.reservations."""
        if reserved_mode not in MODES:
            raise ValueError(f"reserved offering mode {reserved_mode!r}: must be one of {', '.join(MODES)}")
        self.strict = reserved_mode == STRICT
        self.reservations: ReservationManager | None = None
        self._deferring = False  # a reserved offering error in the placement being tried
        self.pools = sorted(node_pools, key=lambda p: (-(p.weight or 0), p.name))
        self.existing_nodes = existing_nodes or []
        self.daemonsets = daemonsets or []
        # Karpenter adds the PreferNoSchedule toleration as the last relaxation only when some pool has such a taint
        self.tolerate_prefer_no_schedule = any(t.effect == "PreferNoSchedule" for p in self.pools for t in p.taints)
        # the state of one solve, reset by _start
        self.resources: list[str] = list(BASE_RESOURCES)
        self.rindex: dict[str, int] = {}
        self.indexes: list[InstanceTypeIndex] = []
        self.remaining: dict[str, dict[str, int] | None] = {}
        self.bins: list[Bin] = []
        self.new_bins: list[NodeClaim] = []
        self.topology = Topology([], [])
        self._maxfree = np.zeros((0, 0), dtype=np.int64)  # per bin position: its maxfree, for one vector test
        self._slack = np.zeros((0, 0), dtype=np.int64)  # per bin position: room left on the type it would launch as
        self._cursor: dict[object, int] = {}  # per class and requirements: the first bin that may still fit
        self._class_pools: dict[object, set[int]] = {}  # per class: the pools it could use (for the lower bound)
        self._views: dict[tuple[object, int], View | None] = {}  # per class and relaxation level
        self._req: dict[object, np.ndarray] = {}  # per class: its requests as a vector
        self._openings: dict[tuple[object, ...], _Opening] = {}  # per pool and pod shape, for pools without limits
        self._names = 0

    # ---- setup -------------------------------------------------------------------------------------------------
    def _start(self, pods: list[Pod]) -> None:
        """Reset the solve state: resources, instance-type indexes, limits left, existing nodes as bins, groups."""
        resources = list(BASE_RESOURCES)
        for p in pods:
            for r in p.requests:
                if r not in resources:
                    resources.append(r)
        self.resources = resources
        self.rindex = {r: i for i, r in enumerate(resources)}
        # each pool's instance types less the DaemonSets that would run on each (InstanceTypeIndex._daemon_groups)
        self.indexes = [InstanceTypeIndex(p, resources, self.daemonsets) for p in self.pools]
        reserved = [o for ix in self.indexes for _, o in ix.reserved]
        self.reservations = ReservationManager(reserved) if reserved else None
        self.remaining = {p.name: (None if p.limits is None else dict(p.limits)) for p in self.pools}
        for pool in self.pools:
            rem = self.remaining[pool.name]
            if rem is not None:
                for k, v in pool.used.items():
                    if k in rem:
                        rem[k] -= v
        self.bins = []
        self.new_bins = []
        self._maxfree = np.zeros((64, len(resources)), dtype=np.int64)
        self._slack = np.zeros((64, len(resources)), dtype=np.int64)
        self._cursor = {}
        self._class_pools = {}
        self._views = {}
        self._req = {}
        self._openings = {}
        self._names = 0
        for node in self.existing_nodes:
            used = self._vec({})
            for p in node.pods:
                used += self._vec(p.requests)
            used += self._daemon_room(node)
            self._add_bin(ExistingNodeBin(node, used, self._vec(node.allocatable)))
        self.topology = Topology(self.indexes, self.existing_nodes)
        self.topology.register(pods)
        for b in self.bins:
            for p in b.pods:
                self.topology.count(b, p)

    def solve(self, pods: list[Pod], *, lower_bound: bool = False) -> Plan:
        """Place pods; returns the plan with new NodeClaims, placements on existing nodes, and reasons for the rest.
        With lower_bound, also the LP bound on the cost of the new capacity (simulate and benchmarks ask for it)."""
        self._start(pods)
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
        self._retry(pods, plan)
        self._finish(plan, lower_bound)
        return plan

    def _retry(self, pods: list[Pod], plan: Plan) -> None:
        """Retry the pods left over, from their full preferences, for as long as a pass places some: a pod whose
        affinity target (or the pod that frees a spread domain) was placed after it gets another go, as Karpenter's
        queue retries failed pods while it makes progress."""
        for _ in range(MAX_RETRY_PASSES):
            if not plan.unschedulable and not plan.deferred:
                return
            left = [p for p in pods if p.key in plan.unschedulable or p.key in plan.deferred]
            before = len(left)
            classes: dict[object, list[Pod]] = {}
            for p in left:
                classes.setdefault(p.class_key, []).append(p)
                plan.unschedulable.pop(p.key, None)
                plan.deferred.pop(p.key, None)
            for group in classes.values():
                self._place_class(group, plan)
            if len(plan.unschedulable) + len(plan.deferred) >= before:
                return

    def _add_bin(self, b: Bin) -> None:
        b.position = len(self.bins)
        self.bins.append(b)
        if b.position >= len(self._maxfree):
            self._maxfree = np.vstack([self._maxfree, np.zeros_like(self._maxfree)])
            self._slack = np.vstack([self._slack, np.zeros_like(self._slack)])
        self._maxfree[b.position] = b.maxfree
        self._slack[b.position] = b.slack()

    def _daemon_room(self, node: ExistingNode) -> np.ndarray:
        """What an existing node (or in-flight NodeClaim) keeps for DaemonSets that will run there but are not bound
        yet, as Karpenter's ExistingNode does: the requests of the DaemonSets whose pod tolerates the node's taints and
        whose node affinity its labels meet, less the DaemonSet pods already bound to it, never below zero."""
        if not self.daemonsets:
            return self._vec({})
        labels = Requirements.from_labels(node.labels)
        want = self._vec({})
        for ds in self.daemonsets:
            if untolerated(node.taints, ds.tolerations) is not None:
                continue
            if ds.node_terms and all(labels.incompatibility(t, frozenset()) is not None for t in ds.node_terms):
                continue
            want += self._vec(ds.requests)
        bound = self._vec({})
        for p in node.pods:
            if p.owner.startswith("DaemonSet/"):
                bound += self._vec(p.requests)
        return np.maximum(want - bound, 0)

    def _rounds(self, pods: list[Pod]) -> int:
        """How many interleaved rounds to place classes in: about the number of largest nodes the pods need.

        Placing each class whole, largest first, fills early nodes with cpu-heavy pods and later ones with
        memory-heavy pods, stranding the other resource on both. Placing a proportional slice of every class per round
        gives each node the workload's overall mix, which is what keeps the plan near the lower bound."""
        demand = np.zeros(len(self.resources))
        sizes: dict[object, tuple[Pod, int]] = {}
        for p in pods:
            first, n = sizes.get(p.class_key, (p, 0))
            sizes[p.class_key] = (first, n + 1)
        for first, n in sizes.values():  # a class's pods request the same
            demand += self._vec(first.requests) * n
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

    # ---- placement -----------------------------------------------------------------------------------------------
    def _place_class(self, pods: list[Pod], plan: Plan) -> None:
        proto = pods[0]
        pending = list(pods)
        level = 0
        reason = ""
        deferred = False
        while pending:
            vk = (proto.class_key, level)
            view = self._views[vk] if vk in self._views else self._views.setdefault(
                vk, relaxed(proto, level, self.tolerate_prefer_no_schedule))
            if view is None:
                break
            self._deferring = False
            placed, reason = self._place_view(view, pending)
            pending = pending[placed:]
            if pending and self._deferring:
                # a reserved offering error: the pod may fit a reservation in a later pass, so its preferences are
                # not relaxed (Karpenter's trySchedule)
                deferred = True
                break
            if pending:
                level += 1
        for p in pending:
            if deferred:
                plan.deferred[p.key] = reason or RESERVED_OFFERING_ERROR
            else:
                plan.unschedulable[p.key] = reason or "no nodepool can take it"

    def _place_view(self, view: View, pods: list[Pod]) -> tuple[int, str]:
        """Place as many of the class's pods as possible under one relaxation level; returns (placed, why not)."""
        pools = self._class_pools.setdefault(view.pod.class_key, set())
        for term in view.node_terms:
            pools.update(id(ix) for ix in self.topology.compatible_pools(view, term))
        placed = 0
        reasons: list[str] = []
        total = len(pods)
        while placed < total:
            progress = 0
            for term, strict in zip(view.node_terms, view.strict_terms, strict=True):
                progress = self._place_some(view, term, strict, pods[placed:], reasons)
                if progress:
                    break
            if not progress:
                return placed, "; ".join(dict.fromkeys(reasons))
            placed += progress
        return placed, ""

    def _place_some(self, view: View, term: Requirements, strict: Requirements, pods: list[Pod],
                    reasons: list[str]) -> int:
        """Place a prefix of pods (all identical); returns how many were placed (0 = none possible).
        term is the node requirement tried (preferences included), strict the same from required affinity alone."""
        req = self._req.get(view.pod.class_key)
        if req is None:
            req = self._req[view.pod.class_key] = self._vec(view.pod.requests)
        options, why = self.topology.options(view, term, strict, req)
        if not options:
            reasons.append(why)
            return 0
        for reqs, cap, total in options:
            n = self._place_in(view, reqs, cap, req, pods[:total], reasons)
            if n:
                return n
        return 0

    def _place_in(self, view: View, reqs: Requirements, cap: int, req: np.ndarray, pods: list[Pod],
                  reasons: list[str]) -> int:
        """Place a prefix of pods into bins under requirements reqs (a topology domain chosen), at most cap of them
        per bin; returns how many were placed. The caller bounds the pods to what the domain may take before its
        counts must be looked at again. Bins only fill up, so one rejected for this class and requirements stays so
        (unless the pod has hostname pod affinity: a matching pod may land there later).
        """
        want = len(pods)
        # relaxation only drops constraints or adds the PreferNoSchedule toleration, so counts tell the levels apart
        cursor_key: tuple[object, ...] = (view.pod.class_key, len(view.spread), len(view.affinity),
                                          len(view.anti_affinity), len(view.tolerations), reqs.describe())
        start = self._cursor.get(cursor_key, 0)
        done = 0
        # 1. existing nodes and open NodeClaims: vector tests over the bins' free capacity (and the hostname counts)
        # leave only bins that might fit. First the bins whose launch type still has room for the pod (filling them
        # costs nothing: the room on that type is within the bin's free-capacity upper bound), then first fit.
        nb = len(self.bins)
        in_slack = self.topology.hostname_room(view, holds(self._slack[start:nb], req), start)
        slack_bins = np.flatnonzero(in_slack)
        if slack_bins.size:
            slack_bins += start
            for i, free in zip(slack_bins.tolist(), fit_count(self._slack[slack_bins], req).tolist(), strict=True):
                b = self.bins[i]
                n = self._fits(b, view, reqs, req, min(want - done, cap, free))
                if n:
                    self._commit(b, view, reqs, req, pods[done:done + n])
                    done += n
                    if done >= want:
                        return done
        settled = False
        first = start
        for lo in range(first, nb, WINDOW):  # usually the first bins take the pods: test a window at a time
            # bins past the ones just filled are as they were before the slack pass: testing them now is the same
            hi = min(nb, lo + WINDOW)
            room = self.topology.hostname_room(view, holds(self._maxfree[lo:hi], req), lo)
            room &= ~in_slack[lo - first:hi - first]
            for i in (np.flatnonzero(room) + lo).tolist():
                b = self.bins[i]
                n = self._fits(b, view, reqs, req, min(want - done, cap))
                if not n:
                    if done == 0:
                        start = i + 1
                    continue
                if done == 0:
                    start = i
                self._commit(b, view, reqs, req, pods[done:done + n])
                done += n
                if done >= want:
                    settled = True
                    break
            if settled:
                break
        if not settled and done == 0:
            start = nb
        if not any(t.topology_key == L.HOSTNAME for t in view.affinity):
            # a bin rejected for hostname pod affinity takes the pod once a matching pod lands there (an affinity
            # chain placed out of order): only without such a term does a rejected bin stay rejected
            self._cursor[cursor_key] = start
        if done:
            return done
        # 2. a new NodeClaim from the first compatible NodePool by weight
        pool_reasons: list[tuple[bool, str]] = []
        chosen = reqs.get(L.NODEPOOL)
        for ix in self.indexes:
            n, why = self._open(ix, view, reqs, req, min(want, cap), pods)
            if n:
                if n < want and self._alone(view):
                    n = self._open_more(view, reqs, req, cap, pods, n, cursor_key)
                return n
            # the pools the pod selects come first: a FailedScheduling event is bounded, and their reasons matter most
            pool_reasons.append((chosen is not None and not chosen.has(ix.pool.name),
                                 f'nodepool "{ix.pool.name}": {why}'))
            if why is RESERVED_OFFERING_ERROR:
                break  # a pool with a compatible reservation is not passed over for lower-weight pools
        pool_reasons.sort(key=lambda r: r[0])
        if not self.indexes:
            pool_reasons.append((False, "no NodePool"))
        reasons.append("; ".join(r for _, r in pool_reasons) if pool_reasons else "no capacity")
        return 0

    @staticmethod
    def _alone(view: View) -> bool:
        """Whether each pod of the view needs a node no other pod of its class is on (a required hostname
        anti-affinity term that selects the pod itself) and has no topology constraint but hostname ones: then while
        its class is placed, its topology options stay as they are and every bin opened for it stays closed to it."""
        pod = view.pod
        return (not view.affinity and all(c.topology_key == L.HOSTNAME for c in view.spread)
                and all(t.topology_key == L.HOSTNAME for t in view.anti_affinity)
                and any(t.selects(pod.namespace, pod.labels) for t in view.anti_affinity))

    def _open_more(self, view: View, reqs: Requirements, req: np.ndarray, cap: int, pods: list[Pod], placed: int,
                   cursor_key: tuple[object, ...]) -> int:
        """After a NodeClaim was opened for the first `placed` of pods (a view that is _alone), open NodeClaims for the
        rest as their own placements would: each would find only the bins opened since, all closed to it, and open
        one from the first NodeClaim pool that can (the pools are asked again each time). Stops where none can;
        returns how many are placed."""
        while placed < len(pods):
            for ix in self.indexes:
                n, why = self._open(ix, view, reqs, req, min(len(pods) - placed, cap), pods[placed:])
                if n or why is RESERVED_OFFERING_ERROR:
                    break
            else:
                break
            if not n:
                break
            placed += n
            self._cursor[cursor_key] = len(self.bins) - 1  # where the next placement would have started looking
        return placed

    def _fits(self, b: Bin, view: View, reqs: Requirements, req: np.ndarray, want: int) -> int:
        """How many of the class's pods bin b can take now (0 when none). Callers pass only bins whose free-capacity
        upper bound holds one pod (the vector test in _place_in)."""
        if untolerated(b.taints, view.tolerations) is not None:
            return 0
        if b.incompatibility(reqs) is not None:
            return 0
        if self.topology.blocks(b, view):
            return 0
        want = self.topology.hostname_cap(b, view, want)
        if want <= 0:
            return 0
        if view.host_ports:
            want = 1
        return b.room(reqs, req, want, view.host_ports)

    def _commit(self, b: Bin, view: View, reqs: Requirements, req: np.ndarray, pods: list[Pod]) -> None:
        b.add(reqs, req, pods, view.host_ports)
        self._maxfree[b.position] = b.maxfree
        self._slack[b.position] = b.slack()
        b.host_ports |= view.host_ports
        b.anti_terms.extend(t for t in view.anti_affinity if t.topology_key == L.HOSTNAME)
        self.topology.count(b, pods[0], len(pods))

    def _open(self, ix: InstanceTypeIndex, view: View, reqs: Requirements, req: np.ndarray, want: int,
              pods: list[Pod]) -> tuple[int, str]:
        """Open a NodeClaim from ix's pool for as many pods as one can hold; (0, why not) when the pool cannot."""
        pool = ix.pool
        if pool.not_ready_reason:
            return 0, pool.not_ready_reason
        taint = untolerated(pool.taints, view.tolerations)
        if taint is not None:
            return 0, f"taint {taint} not tolerated"
        why = pool.requirements.incompatibility(reqs)
        if why is not None:
            return 0, why
        why = self.topology.opens(view)
        if why:
            return 0, why
        rem = self.remaining[pool.name]
        if rem is None:  # without limits, what a new NodeClaim would be depends only on the pods' shape
            key = (id(ix), reqs.key(), view.host_ports, req.tobytes())
            opening = self._openings.get(key)
            if opening is None:
                opening = self._openings[key] = self._opening(ix, reqs, req, view.host_ports, None)
        else:
            opening = self._opening(ix, reqs, req, view.host_ports, rem)
        if opening.why:
            return 0, opening.why
        n = 1 if view.host_ports else min(want, opening.cap)
        if self.strict and self.reservations is not None and ix.reserved:
            # Karpenter's strict offeringsToReserve for a new NodeClaim: a compatible reservation that cannot be held
            # fails the NodeClaim (the pod waits for a later pass); one that can bounds the pods to its types' room
            compatible, reservable = reserved_fits(ix, self.reservations, "", opening.requirements, opening.rows,
                                                   opening.fit)
            if compatible >= 1:
                if reservable < 1:
                    self._deferring = True
                    return 0, RESERVED_OFFERING_ERROR
                n = min(n, reservable)
        mask, rows, k, free, top = opening.after(ix, n)
        self._names += 1
        b = NodeClaim(f"{pool.name}-{self._names:05d}", ix, opening.requirements.copy(), pool.taints, self._vec({}),
                      mask, fit=(reqs, view.host_ports, rows, k), types=(rows, free, top),
                      reservations=self.reservations, strict=self.strict)
        self._add_bin(b)
        self.new_bins.append(b)
        self._commit(b, view, reqs, req, pods[:n])
        return n, ""

    def _opening(self, ix: InstanceTypeIndex, reqs: Requirements, req: np.ndarray,
                 ports: frozenset[tuple[str, str, int]], rem: dict[str, int] | None) -> _Opening:
        """The NodeClaim ix's pool would open for pods of one shape (node requirements reqs, requests req, host
        ports), within what the pool's limits (rem) still allow; or why it cannot open one."""
        pool = ix.pool
        merged = pool.requirements.intersect(reqs)
        zm, cm = ix.offer_masks(merged)
        mask = ix.all_mask & ix.mask(merged)
        if not mask.any():
            return _Opening(f"no instance type matches {reqs.describe() or 'the requirements'}")
        mask = ix.offered(mask, zm, cm)
        if not mask.any():
            return _Opening("no offering in the allowed zones and capacity types")
        if ports:
            mask = mask & ix.ports_ok(ports)
            if not mask.any():
                protocol, ip, port = min(ports)
                return _Opening(f"host port {port}/{protocol} ({ip}) is held by a DaemonSet on the pool's nodes")
        within = np.ones(len(ix.types), dtype=bool)
        if rem is not None:
            pending = self._vec({})
            opened = 0
            for b in self.new_bins:
                if b.index is ix and b.mask.any():
                    pending += ix.capacity[int(np.argmax(b.mask))]
                    opened += 1
            if NODES in rem and opened + 1 > rem[NODES]:
                return _Opening(f"limits exceeded: another node would go past the pool's limit of {NODES} "
                                f"({_left(rem)})")
            for k, v in rem.items():
                i = self.rindex.get(k)
                if i is not None:
                    within &= ix.capacity[:, i] + pending[i] <= v
        fit = fit_count(ix.free0[mask & within], req)
        if not fit.size or fit.max() <= 0:
            if rem is not None and fit_count(ix.free0[mask], req).max(initial=0) > 0:
                return _Opening(f"limits exceeded: a node large enough would go past the pool's limits ({_left(rem)})")
            need = ", ".join(f"{r}={format_quantity(r, int(req[i]))}" for i, r in enumerate(self.resources)
                             if req[i] and r != PODS)
            return _Opening(f"no instance type has room for requests {need} (with daemonset overhead)")
        mask = mask & within
        cap = ix.min_values_cap(mask, fit, merged)
        if cap <= 0:
            return _Opening("fewer instance types than minValues requires: " + ", ".join(
                f"{r.key} minValues {r.min_values}" for r in merged if r.min_values))
        requirements = merged.intersect(Requirements([Requirement(L.NODEPOOL, False, frozenset([pool.name]))]))
        return _Opening("", requirements, cap, np.flatnonzero(mask), fit)

    # ---- result ----------------------------------------------------------------------------------------------
    def _finish(self, plan: Plan, with_bound: bool) -> None:
        for b in self.bins:
            if isinstance(b, ExistingNodeBin):
                new = b.new_pods()
                if new:
                    plan.existing[b.name] = new
        for c in self.new_bins:
            plan.node_claims.append(c.launch())
        plan.cost_per_hour = round(sum(c.price_per_hour for c in plan.node_claims), 6)
        if with_bound:
            plan.lower_bound_per_hour = self.lower_bound(plan)

    def lower_bound(self, plan: Plan) -> float:
        """The LP lower bound on the hourly cost of the new capacity `plan` (this Scheduler's last solve) launches:
        what solve(..., lower_bound=True) sets, asked for separately so that it can be timed apart from the solve."""
        from controller.scheduling.lower_bound import lower_bound  # scipy: only when the bound is asked for

        placed = [p for c in plan.node_claims for p in c.pods]
        by_id = {id(ix): ix for ix in self.indexes}
        pools_of = {k: [by_id[i] for i in ids] for k, ids in self._class_pools.items()}
        return round(lower_bound(placed, pools_of, self.indexes, self.resources), 6)


def _left(remaining: dict[str, int]) -> str:
    """What a pool's limits still allow, for messages."""
    return "left: " + ", ".join(f"{k}={format_quantity(k, max(0, v))}" for k, v in remaining.items())
