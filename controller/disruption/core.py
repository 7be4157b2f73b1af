"""One disruption pass (Karpenter's disruption controller.go), pure over a Snapshot: expired NodeClaims, the
candidates and why the others are not, budgets per NodePool and reason, then the methods in Karpenter's order
(Emptiness, StaticDrift, Drift, MultiNodeConsolidation, SingleNodeConsolidation); the first that yields commands
wins. `validate` re-checks a command on a later snapshot (Karpenter's validation.go)."""

from __future__ import annotations

import time
from collections.abc import Callable

from controller.api import conditions as C
from controller.api.quantity import QuantityError, resources_from_dict
from controller.disruption import consolidation as cons
from controller.disruption import simulation
from controller.disruption.candidates import CandidateSet, budget_mapping, build_candidates, sentence
from controller.disruption.types import (
    DRIFT,
    EMPTINESS,
    MULTI_NODE_CONSOLIDATION,
    REASON_DRIFTED,
    REASON_EMPTY,
    REASON_UNDERUTILIZED,
    REASONS,
    SINGLE_NODE_CONSOLIDATION,
    STATIC_DRIFT,
    Blocked,
    Candidate,
    Command,
    Expired,
    Obj,
    Options,
    Pass,
    Replacement,
    Snapshot,
)
from controller.scheduling.nodeclaim import PlannedNodeClaim
from controller.scheduling.requirements import Requirements


def _name(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("name") or "")


def expired(snapshot: Snapshot, cands: CandidateSet) -> tuple[list[Expired], list[Blocked]]:
    """NodeClaims past spec.expireAfter from their creationTimestamp ("Never" never expires); a value that cannot
    be read is a blocked reason, not an exception."""
    from controller.nodeclaim.disruption import DisruptionRuleError, parse_go_duration

    out: list[Expired] = []
    bad: list[Blocked] = []
    for s in cands.all_nodes:
        claim = s.nodeclaim
        if claim is None or (claim.get("metadata") or {}).get("deletionTimestamp"):
            continue
        after = (claim.get("spec") or {}).get("expireAfter")
        if after is None:
            continue
        try:
            seconds = parse_go_duration(after, "spec.expireAfter")
        except DisruptionRuleError as e:
            bad.append(Blocked(s.nodeclaim_name, _name(s.node), str(e)[:500]))
            continue
        created = C.parse_time((claim.get("metadata") or {}).get("creationTimestamp"))
        if seconds is None or created is None:
            continue
        if snapshot.now >= created + seconds:
            out.append(Expired(nodeclaim=s.nodeclaim_name, node=_name(s.node), nodepool=s.nodepool))
    return out, bad


def _drift_reason(c: Candidate, snapshot: Snapshot) -> bool:
    return C.is_true(c.nodeclaim.get("status"), "Drifted") or c.name in snapshot.drifted


def _drift_time(c: Candidate, snapshot: Snapshot) -> float:
    cond = C.get(c.nodeclaim.get("status"), "Drifted")
    t = C.parse_time((cond or {}).get("lastTransitionTime")) if cond else None
    return t if t is not None else snapshot.now


class _Pass:
    """The state of one pass: candidates, budgets and the simulation, built once and shared by the methods."""

    def __init__(self, snapshot: Snapshot, options: Options) -> None:
        self.snapshot = snapshot
        self.options = options
        self.out = Pass()
        self.cands = build_candidates(snapshot)
        self.out.expired, bad = expired(snapshot, self.cands)
        gone = {e.nodeclaim for e in self.out.expired}
        self.cands.graceful = [c for c in self.cands.graceful if c.name not in gone]
        self.cands.eventual_only = [c for c in self.cands.eventual_only if c.name not in gone]
        self.out.blocked.extend(bad)
        self.out.blocked.extend(self.cands.blocked)
        self.out.budgets = {r: budget_mapping(snapshot, self.cands, r) for r in REASONS}
        self.budgets = {r: m.remaining for r, m in self.out.budgets.items()}
        self._sim: simulation.Simulation | None = None

    @property
    def sim(self) -> simulation.Simulation:
        if self._sim is None:
            self._sim = simulation.build(self.snapshot, self.cands, self.options)
        return self._sim

    def pool(self, c: Candidate) -> Obj:
        return self.cands.nodepools.get(c.nodepool, {})

    # ---- methods ----------------------------------------------------------------------------------------------
    def emptiness(self) -> list[Command]:
        """Karpenter's Emptiness: every empty, Consolidatable candidate the Empty budget allows, in one command."""
        eligible = [c for c in self.cands.graceful
                    if not cons.is_static(self.pool(c)) and not cons.consolidation_disabled(self.pool(c))
                    and c.is_empty and cons.consolidatable(c)]
        self.out.eligible[EMPTINESS] = len(eligible)
        for c in self.cands.graceful:
            if c.is_empty and not cons.is_static(self.pool(c)) and cons.consolidation_disabled(self.pool(c)):
                self._unconsolidatable(c, f'NodePool "{c.nodepool}" has consolidation disabled')
        left = dict(self.budgets[REASON_EMPTY])
        chosen = []
        for c in sorted(eligible, key=lambda c: (c.disruption_cost, c.name)):
            if left.get(c.nodepool, 0) <= 0:
                continue
            left[c.nodepool] -= 1
            chosen.append(c)
        return [Command(method=EMPTINESS, reason=REASON_EMPTY, candidates=chosen)] if chosen else []

    def static_drift(self) -> list[Command]:
        """Karpenter's StaticDrift: drifted NodeClaims of static NodePools replaced one for one from the template,
        within the budget and the pool's node limit, while the pool is not above its replicas."""
        eligible = [c for c in self.cands.graceful + self.cands.eventual_only
                    if cons.is_static(self.pool(c)) and _drift_reason(c, self.snapshot)]
        self.out.eligible[STATIC_DRIFT] = len(eligible)
        by_pool: dict[str, list[Candidate]] = {}
        for c in sorted(eligible, key=lambda c: (_drift_time(c, self.snapshot), c.name)):
            by_pool.setdefault(c.nodepool, []).append(c)
        out: list[Command] = []
        for pool_name, cands in sorted(by_pool.items()):
            np_ = self.cands.nodepools[pool_name]
            spec = np_.get("spec") or {}
            running = sum(1 for s in self.cands.all_nodes if s.nodeclaim is not None and s.nodepool == pool_name
                          and not (s.nodeclaim.get("metadata") or {}).get("deletionTimestamp"))
            replicas = spec.get("replicas")
            if not isinstance(replicas, int) or running > replicas:
                continue
            n = min(self.budgets[REASON_DRIFTED].get(pool_name, 0), len(cands))
            try:
                limit = resources_from_dict(spec.get("limits")).get("nodes")
            except QuantityError:
                limit = None
            if limit is not None:
                n = min(n, max(0, limit - running))
            for c in cands[:n]:
                rep = self._template_claim(pool_name, np_)
                out.append(Command(method=STATIC_DRIFT, reason=REASON_DRIFTED, candidates=[c],
                                   replacements=[Replacement(rep)] if rep is not None else []))
        return out

    def _template_claim(self, pool_name: str, np_: Obj) -> PlannedNodeClaim | None:
        """A NodeClaim from the NodePool's template, offered every instance type the pool allows."""
        from controller.provisioning import inputs
        from controller.scheduling.instancetypes import compatible_offerings

        try:
            sp = inputs.node_pool(np_, self.snapshot.instance_types.get(pool_name, []), {})
        except inputs.InputError:
            return None
        options = [it for it in sp.instance_types if compatible_offerings(it, sp.requirements)]
        base = PlannedNodeClaim(node_pool=pool_name, requirements=Requirements(list(sp.requirements)),
                                instance_type_options=[], instance_type=None, capacity_type="", zone="",
                                price_per_hour=0.0, pods=[])
        return cons.with_options(base, sorted(options, key=lambda it: (cons.option_price(it, sp.requirements),
                                                                        it.name)), sp.requirements)

    def drift(self) -> list[Command]:
        """Karpenter's Drift: the oldest-drifted candidate (empty ones first) whose pods can be rescheduled, replaced
        by what the simulation launches for them."""
        eligible = [c for c in self.cands.graceful + self.cands.eventual_only
                    if not cons.is_static(self.pool(c)) and _drift_reason(c, self.snapshot)]
        self.out.eligible[DRIFT] = len(eligible)
        ordered = sorted(eligible, key=lambda c: (_drift_time(c, self.snapshot), c.name))
        for c in [c for c in ordered if not c.reschedulable_pods] + [c for c in ordered if c.reschedulable_pods]:
            if self.budgets[REASON_DRIFTED].get(c.nodepool, 0) <= 0:
                continue
            plan, why = self.sim.simulate([c])
            if plan is None:
                self.out.blocked.append(Blocked(c.name, c.node_name, sentence(why)[:500]))
                continue
            return [Command(method=DRIFT, reason=REASON_DRIFTED, candidates=[c],
                            replacements=[Replacement(nc) for nc in plan.node_claims])]
        return []

    def _consolidation_candidates(self, method: str) -> list[Candidate]:
        out = []
        for c in self.cands.graceful:
            why = cons.should_consolidate(c, self.pool(c))
            if why is None:
                continue
            if why:
                if method == SINGLE_NODE_CONSOLIDATION or not any(
                        b.nodeclaim == c.name and b.unconsolidatable for b in self.out.blocked):
                    self._unconsolidatable(c, why)
                continue
            out.append(c)
        self.out.eligible[method] = len(out)
        return out

    def _unconsolidatable(self, c: Candidate, why: str) -> None:
        if not any(b.nodeclaim == c.name and b.reason == why for b in self.out.blocked):
            self.out.blocked.append(Blocked(c.name, c.node_name, why[:500], unconsolidatable=True))

    def _timer(self, method: str, limit: float) -> Callable[[], bool]:
        start = self.options.clock()

        def timed_out() -> bool:
            return self.options.clock() - start > limit
        return timed_out

    def multi_node(self) -> list[Command]:
        cands = self._consolidation_candidates(MULTI_NODE_CONSOLIDATION)
        if len(cands) < 2:
            return []
        totals = cons.pool_totals(self.cands.graceful, self.cands.all_nodes)
        cmd, hit = cons.multi_node(self.sim, cands, self.budgets[REASON_UNDERUTILIZED], self.options,
                                   self.cands.nodepools, totals,
                                   self._timer(MULTI_NODE_CONSOLIDATION, self.options.multi_node_timeout))
        if hit:
            self.out.timeouts.append(MULTI_NODE_CONSOLIDATION)
        return [cmd] if cmd is not None else []

    def single_node(self) -> list[Command]:
        cands = self._consolidation_candidates(SINGLE_NODE_CONSOLIDATION)
        totals = cons.pool_totals(self.cands.graceful, self.cands.all_nodes)
        blocked: list[Blocked] = []
        cmd, hit = cons.single_node(self.sim, cands, self.budgets[REASON_UNDERUTILIZED], self.options,
                                    self.cands.nodepools, totals,
                                    self._timer(SINGLE_NODE_CONSOLIDATION, self.options.single_node_timeout),
                                    blocked)
        for b in blocked:
            self._unconsolidatable(next(c for c in cands if c.name == b.nodeclaim), b.reason)
        if hit:
            self.out.timeouts.append(SINGLE_NODE_CONSOLIDATION)
        return [cmd] if cmd is not None else []


def compute_pass(snapshot: Snapshot, options: Options) -> Pass:
    """One disruption pass: the first method (in Karpenter's order) that yields commands decides."""
    p = _Pass(snapshot, options)
    methods: list[tuple[str, Callable[[], list[Command]]]] = [
        (EMPTINESS, p.emptiness), (STATIC_DRIFT, p.static_drift), (DRIFT, p.drift),
        (MULTI_NODE_CONSOLIDATION, p.multi_node), (SINGLE_NODE_CONSOLIDATION, p.single_node)]
    for name, method in methods:
        started = time.perf_counter()
        commands = method()
        p.out.evaluation_seconds[name] = time.perf_counter() - started
        if commands:
            p.out.method = name
            p.out.commands = commands
            break
    return p.out


def validate(command: Command, snapshot: Snapshot, options: Options) -> str | None:
    """Karpenter's validation after the delay (validation.go), in its messages: the command's candidates are all
    still candidates for its method, its NodePools' budgets still allow them, and for consolidation a new simulation
    still gives the same decision (no replacement where none was planned, one whose instance types include the
    planned ones). Returns why the command is no longer valid, else None."""
    p = _Pass(snapshot, options)
    eventual = command.method in (DRIFT, STATIC_DRIFT)
    current = {c.name: c for c in p.cands.graceful + (p.cands.eventual_only if eventual else [])}
    fresh = [current[c.name] for c in command.candidates if c.name in current]
    if command.method == EMPTINESS:
        fresh = [c for c in fresh if c.is_empty and cons.consolidatable(c)]
    elif command.method in (MULTI_NODE_CONSOLIDATION, SINGLE_NODE_CONSOLIDATION):
        fresh = [c for c in fresh if cons.should_consolidate(c, p.pool(c)) == ""]
    if len(fresh) != len(command.candidates):
        return f"{len(command.candidates) - len(fresh)} candidates are no longer valid"
    per_pool: dict[str, int] = {}
    for c in fresh:
        per_pool[c.nodepool] = per_pool.get(c.nodepool, 0) + 1
    for pool, n in per_pool.items():
        if n > p.budgets[command.reason].get(pool, 0):
            return "a candidate can no longer be disrupted without violating budgets"
    if command.method not in (MULTI_NODE_CONSOLIDATION, SINGLE_NODE_CONSOLIDATION):
        return None
    if not fresh:
        return "no candidates"
    plan, why = p.sim.simulate(fresh)
    if plan is None:
        return why
    changed = "scheduling simulation produced new results"
    if len(plan.node_claims) != len(command.replacements):
        return changed
    for planned, now in zip(command.replacements, plan.node_claims, strict=True):
        offered = {it.name for it in now.instance_type_options}
        if not {it.name for it in planned.planned.instance_type_options} <= offered:
            return changed
    return None


__all__ = ["compute_pass", "validate"]
