"""Consolidation (Karpenter's consolidation.go, multinodeconsolidation.go, singlenodeconsolidation.go, balanced.go):
delete candidates whose pods fit elsewhere, or replace them with one strictly cheaper NodeClaim; multi-node by a
prefix (binary) search over the best candidates, single-node one candidate at a time across NodePools."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from controller.api import labels as L
from controller.catalog.types import InstanceType
from controller.disruption.candidates import PER_NODE_BASE_DISRUPTION_COST, StateNode, eviction_cost, sentence
from controller.disruption.simulation import Simulation
from controller.disruption.types import (
    MULTI_NODE_CONSOLIDATION,
    REASON_UNDERUTILIZED,
    SINGLE_NODE_CONSOLIDATION,
    Blocked,
    Candidate,
    Command,
    Obj,
    Options,
    Replacement,
)
from controller.scheduling.instancetypes import compatible_offerings
from controller.scheduling.nodeclaim import PlannedNodeClaim
from controller.scheduling.requirements import Requirement, Requirements

MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT = 15
MAX_MULTI_NODE_CANDIDATES = 100
BALANCED = "Balanced"
BALANCED_K = 2
WHEN_EMPTY = "WhenEmpty"


def _disruption(nodepool: Obj) -> Obj:
    return (nodepool.get("spec") or {}).get("disruption") or {}


def is_static(nodepool: Obj) -> bool:
    """A static NodePool (spec.replicas): never consolidated."""
    return (nodepool.get("spec") or {}).get("replicas") is not None


def consolidation_disabled(nodepool: Obj) -> bool:
    """consolidateAfter Never (or unset): the NodePool never consolidates."""
    after = _disruption(nodepool).get("consolidateAfter")
    return after is None or str(after).strip() == "Never"


def consolidatable(c: Candidate) -> bool:
    """The NodeClaim's Consolidatable condition is True."""
    for cond in (c.nodeclaim.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Consolidatable":
            return cond.get("status") == "True"
    return False


def should_consolidate(c: Candidate, nodepool: Obj) -> str | None:
    """Karpenter's consolidation ShouldDisrupt: "" when the candidate may be consolidated, None when it is simply
    not for consolidation (static, empty, not yet Consolidatable), else the Unconsolidatable message."""
    if is_static(nodepool):
        return None
    labels = (c.node.get("metadata") or {}).get("labels") or {}
    if c.instance is None:
        return f"Instance Type \"{labels.get(L.INSTANCE_TYPE, '')}\" not found"
    if L.CAPACITY_TYPE not in labels:
        return f'Node does not have label "{L.CAPACITY_TYPE}"'
    if L.ZONE not in labels:
        return f'Node does not have label "{L.ZONE}"'
    name = (nodepool.get("metadata") or {}).get("name")
    if consolidation_disabled(nodepool):
        return f'NodePool "{name}" has consolidation disabled'
    if c.is_empty:
        return None  # Emptiness's
    if _disruption(nodepool).get("consolidationPolicy") == WHEN_EMPTY:
        return f'NodePool "{name}" has consolidation policy WhenEmpty, but node is not empty'
    return "" if consolidatable(c) else None


# ---- price filtering ------------------------------------------------------------------------------------------

def option_price(it: InstanceType, reqs: Requirements) -> float:
    """The cheapest available offering of the type that meets the requirements (inf when none)."""
    prices = [o.price for o in compatible_offerings(it, reqs)]
    return min(prices) if prices else math.inf


def _label_value(it: InstanceType, key: str) -> str | None:
    return it.name if key == L.INSTANCE_TYPE else it.labels.get(key)


def min_values_unmet(options: list[InstanceType], reqs: Requirements) -> list[str]:
    """Requirement keys whose minValues the options no longer meet."""
    out = []
    for r in reqs:
        if r.min_values:
            values = {v for v in (_label_value(it, r.key) for it in options) if v is not None and r.has(v)}
            if len(values) < r.min_values:
                out.append(r.key)
    return out


def min_values_prefix(options: list[InstanceType], reqs: Requirements) -> int:
    """How many of the (price-ordered) options are needed to meet every minValues (Karpenter's SatisfiesMinValues)."""
    for n in range(1, len(options) + 1):
        if not min_values_unmet(options[:n], reqs):
            return n
    return len(options)


def remove_by_price(claim: PlannedNodeClaim, max_price: float) -> tuple[PlannedNodeClaim, str]:
    """Karpenter's RemoveInstanceTypeOptionsByPriceAndMinValues: the options strictly cheaper than max_price, ordered
    by price; an error when minValues is no longer met."""
    priced = sorted(((option_price(it, claim.requirements), it.name, it) for it in claim.instance_type_options),
                    key=lambda t: (t[0], t[1]))
    kept = [it for p, _, it in priced if p < max_price]
    unmet = min_values_unmet(kept, claim.requirements) if kept else []
    if unmet:
        return claim, f"minValues requirement is not met for label(s) ({', '.join(unmet)})"
    return with_options(claim, kept, claim.requirements), ""


def with_options(claim: PlannedNodeClaim, options: list[InstanceType], reqs: Requirements) -> PlannedNodeClaim:
    """The NodeClaim with these instance-type options, priced and placed at the cheapest offering."""
    best: tuple[float, InstanceType | None, str, str] = (math.inf, None, claim.zone, claim.capacity_type)
    for it in options:
        for o in compatible_offerings(it, reqs):
            if o.price < best[0]:
                best = (o.price, it, o.zone, o.capacity_type)
    return dataclasses.replace(claim, instance_type_options=list(options), requirements=reqs,
                               instance_type=best[1], price_per_hour=best[0] if best[1] else 0.0,
                               zone=best[2], capacity_type=best[3])


def _pin(reqs: Requirements, key: str, value: str) -> Requirements:
    out = reqs.copy()
    out.add(Requirement.new(key, "In", [value]))  # intersected with what the key already allows
    return out


# ---- one consolidation decision ---------------------------------------------------------------------------------

@dataclass
class Decision:
    """A consolidation's outcome: the command, or why there is none (reported only for single candidates)."""

    command: Command | None
    why: str = ""


def compute_consolidation(sim: Simulation, candidates: list[Candidate], options: Options, method: str) -> Decision:
    """Karpenter's computeConsolidation over these candidates."""
    plan, why = sim.simulate(candidates)
    if plan is None:
        return Decision(None, sentence(why))
    if not plan.node_claims:
        return Decision(Command(method=method, reason=REASON_UNDERUTILIZED, candidates=list(candidates)))
    price = sum(c.price for c in candidates)
    if len(plan.node_claims) != 1:
        if options.many_to_many and method == MULTI_NODE_CONSOLIDATION and len(plan.node_claims) < len(candidates):
            return _many_to_many(plan.node_claims, candidates, price, method)
        return Decision(None, f"Can't remove without creating {len(plan.node_claims)} candidates")
    claim = plan.node_claims[0]
    claim = with_options(claim, sorted(claim.instance_type_options,
                                       key=lambda it: (option_price(it, claim.requirements), it.name)),
                         claim.requirements)
    ct = claim.requirements.get(L.CAPACITY_TYPE)
    all_spot = all(c.capacity_type == L.CAPACITY_TYPE_SPOT for c in candidates)
    if all_spot and (ct is None or ct.has(L.CAPACITY_TYPE_SPOT)):
        return _spot_to_spot(claim, candidates, price, options, method)
    claim, err = remove_by_price(claim, price)
    if err:
        return Decision(None, f"Filtering by price: {err}")
    if not claim.instance_type_options:
        return Decision(None, "Can't replace with a cheaper node")
    ct = claim.requirements.get(L.CAPACITY_TYPE)
    if ct is None or (ct.has(L.CAPACITY_TYPE_SPOT) and ct.has(L.CAPACITY_TYPE_ON_DEMAND)):
        # priced assuming spot launches: an on-demand fallback could cost more than the candidates
        reqs = _pin(claim.requirements, L.CAPACITY_TYPE, L.CAPACITY_TYPE_SPOT)
        claim = with_options(claim, claim.instance_type_options, reqs)
    return Decision(Command(method=method, reason=REASON_UNDERUTILIZED, candidates=list(candidates),
                            replacements=[Replacement(claim)]))


def _spot_to_spot(claim: PlannedNodeClaim, candidates: list[Candidate], price: float, options: Options,
                  method: str) -> Decision:
    """Karpenter's computeSpotToSpotConsolidation (the 15-cheaper-types rule for single nodes)."""
    if not options.spot_to_spot:
        return Decision(None, "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node")
    reqs = _pin(claim.requirements, L.CAPACITY_TYPE, L.CAPACITY_TYPE_SPOT)
    claim = with_options(claim, [it for it in claim.instance_type_options if compatible_offerings(it, reqs)], reqs)
    claim, err = remove_by_price(claim, price)
    if err:
        return Decision(None, f"Filtering by price: {err}")
    if not claim.instance_type_options:
        return Decision(None, "Can't replace with a cheaper node")
    if len(candidates) == 1:
        n = len(claim.instance_type_options)
        if n < MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT:
            return Decision(None, f"SpotToSpotConsolidation requires {MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT} cheaper "
                                  f"instance type options than the current candidate to consolidate, got {n}")
        keep = MIN_INSTANCE_TYPES_FOR_SPOT_TO_SPOT
        if any(r.min_values for r in claim.requirements):
            keep = max(keep, min_values_prefix(claim.instance_type_options, claim.requirements))
        claim = with_options(claim, claim.instance_type_options[:keep], claim.requirements)
    return Decision(Command(method=method, reason=REASON_UNDERUTILIZED, candidates=list(candidates),
                            replacements=[Replacement(claim)]))


def _many_to_many(claims: list[PlannedNodeClaim], candidates: list[Candidate], price: float,
                  method: str) -> Decision:
    """karpy's ManyToManyConsolidation: N candidates replaced by M < N NodeClaims costing strictly less in total;
    each replacement keeps only the options that keep the total under the candidates' price."""
    ordered = [with_options(c, sorted(c.instance_type_options, key=lambda it: (option_price(it, c.requirements),
                                                                               it.name)), c.requirements)
               for c in claims]
    floor = sum(c.price_per_hour for c in ordered)
    if not floor < price:
        return Decision(None, "Can't replace with a cheaper node")
    out = []
    for c in ordered:
        budget = price - (floor - c.price_per_hour)
        c, err = remove_by_price(c, budget)
        if err or not c.instance_type_options:
            return Decision(None, f"Filtering by price: {err}" if err else "Can't replace with a cheaper node")
        ct = c.requirements.get(L.CAPACITY_TYPE)
        if ct is None or (ct.has(L.CAPACITY_TYPE_SPOT) and ct.has(L.CAPACITY_TYPE_ON_DEMAND)):
            c = with_options(c, c.instance_type_options, _pin(c.requirements, L.CAPACITY_TYPE, L.CAPACITY_TYPE_SPOT))
        out.append(Replacement(c))
    return Decision(Command(method=method, reason=REASON_UNDERUTILIZED, candidates=list(candidates),
                            replacements=out))


# ---- Balanced -------------------------------------------------------------------------------------------------

@dataclass
class PoolTotals:
    """A NodePool's total cost and total disruption cost: the denominators of Balanced scoring."""

    cost: float = 0.0
    disruption: float = 0.0


def pool_totals(candidates: list[Candidate], nodes: list[StateNode]) -> dict[str, PoolTotals]:
    """Karpenter's computeNodePoolTotals: cost over the pool's candidates, disruption over all its nodes."""
    by_name = {c.name: c for c in candidates}
    out: dict[str, PoolTotals] = {}
    for c in candidates:
        out.setdefault(c.nodepool, PoolTotals()).cost += c.price
    for s in nodes:
        pool = s.nodepool
        if not pool or pool not in out:
            continue
        cand = by_name.get(s.nodeclaim_name)
        if cand is not None:
            out[pool].disruption += cand.reschedule_disruption_cost
        else:
            out[pool].disruption += PER_NODE_BASE_DISRUPTION_COST + sum(max(0.0, eviction_cost(p)) for p in s.pods)
    return out


def score(savings: float, disruption: float, totals: PoolTotals) -> float:
    """Karpenter's ScoreMove: savings fraction over disruption fraction (0 without savings, inf without cost)."""
    if totals.cost <= 0 or totals.disruption <= 0:
        return 0.0
    sf = savings / totals.cost
    df = disruption / totals.disruption
    if sf <= 0:
        return 0.0
    return math.inf if df == 0 else sf / df


def approve(cmd: Command, nodepools: dict[str, Obj], totals: dict[str, PoolTotals]) -> bool:
    """Karpenter's EvaluateBalancedMove: every Balanced pool in the command scores at least 1/k."""
    by_pool: dict[str, list[Candidate]] = {}
    for c in cmd.candidates:
        by_pool.setdefault(c.nodepool, []).append(c)
    savings = cmd.savings_per_hour
    source = sum(c.price for c in cmd.candidates)
    for pool, cands in by_pool.items():
        if _disruption(nodepools.get(pool, {})).get("consolidationPolicy") != BALANCED:
            continue
        pool_cost = sum(c.price for c in cands)
        pool_savings = savings * (pool_cost / source) if source > 0 and len(by_pool) > 1 else savings
        disruption = sum(c.reschedule_disruption_cost for c in cands)
        if score(pool_savings, disruption, totals.get(pool, PoolTotals())) < 1.0 / BALANCED_K:
            return False
    return True


def can_pass_threshold(c: Candidate, nodepools: dict[str, Obj], totals: dict[str, PoolTotals]) -> bool:
    """Whether even deleting the candidate outright could pass its Balanced pool's threshold."""
    if _disruption(nodepools.get(c.nodepool, {})).get("consolidationPolicy") != BALANCED:
        return True
    return score(c.price, c.reschedule_disruption_cost, totals.get(c.nodepool, PoolTotals())) >= 1.0 / BALANCED_K


# ---- the two methods --------------------------------------------------------------------------------------------

def sort_candidates(candidates: list[Candidate]) -> list[Candidate]:
    """Highest price per unit of disruption first (Karpenter's consolidation order), by name for ties."""
    return sorted(candidates, key=lambda c: (-c.savings_ratio, c.name))


def _filter_same_type(cmd: Command, candidates: list[Candidate]) -> bool:
    """Karpenter's filterOutSameInstanceType: a multi-node replacement must be cheaper than any candidate's own
    type among its options (else it just moves pods between like nodes). False when nothing is left."""
    rep = cmd.replacements[0].planned
    own: dict[str, float] = {}
    for c in candidates:
        if c.instance is None:
            continue
        labels = (c.node.get("metadata") or {}).get("labels") or {}
        p = option_price(c.instance, Requirements.from_labels(
            {k: v for k, v in labels.items() if k in (L.ZONE, L.CAPACITY_TYPE)}))
        if math.isfinite(p):
            own[c.instance.name] = min(own.get(c.instance.name, math.inf), p)
    max_price = min((own[it.name] for it in rep.instance_type_options if it.name in own), default=math.inf)
    claim, err = remove_by_price(rep, max_price)
    if err or not claim.instance_type_options:
        return False
    cmd.replacements[0] = Replacement(claim)
    return True


def multi_node(sim: Simulation, candidates: list[Candidate], budget: dict[str, int], options: Options,
               nodepools: dict[str, Obj], totals: dict[str, PoolTotals],
               timed_out: Callable[[], bool]) -> tuple[Command | None, bool]:
    """Karpenter's firstNConsolidationOption: binary search for the longest prefix of the best candidates that
    consolidates into deletes or one cheaper replacement. Returns the command and whether the timeout hit."""
    chosen: list[Candidate] = []
    left = dict(budget)
    for c in sort_candidates(candidates):
        if left.get(c.nodepool, 0) <= 0:
            continue
        chosen.append(c)
        left[c.nodepool] -= 1
    chosen = chosen[:MAX_MULTI_NODE_CANDIDATES]
    if len(chosen) < 2:
        return None, False
    lo, hi = 1, len(chosen) - 1
    best: Command | None = None
    while lo <= hi:
        if timed_out():
            return best, True
        mid = (lo + hi) // 2
        batch = chosen[:mid + 1]
        cmd = compute_consolidation(sim, batch, options, MULTI_NODE_CONSOLIDATION).command
        valid = cmd is not None and (not cmd.replacements or len(cmd.replacements) > 1
                                     or _filter_same_type(cmd, batch))
        if valid and cmd is not None and not approve(cmd, nodepools, totals):
            valid = False
        if valid:
            best = cmd
            lo = mid + 1
        else:
            hi = mid - 1
    return best, False


def interleave(candidates: list[Candidate]) -> list[Candidate]:
    """Karpenter's single-node order: each NodePool's candidates best first, taken round-robin across pools."""
    by_pool: dict[str, list[Candidate]] = {}
    for c in sort_candidates(candidates):
        by_pool.setdefault(c.nodepool, []).append(c)
    pools = sorted(by_pool)
    out: list[Candidate] = []
    for i in range(max((len(v) for v in by_pool.values()), default=0)):
        for p in pools:
            if i < len(by_pool[p]):
                out.append(by_pool[p][i])
    return out


def single_node(sim: Simulation, candidates: list[Candidate], budget: dict[str, int], options: Options,
                nodepools: dict[str, Obj], totals: dict[str, PoolTotals], timed_out: Callable[[], bool],
                blocked: list[Blocked]) -> tuple[Command | None, bool]:
    """Karpenter's SingleNodeConsolidation: the first candidate (interleaved across NodePools) that consolidates;
    each one that cannot gets its Unconsolidatable reason."""
    for c in interleave(candidates):
        if timed_out():
            return None, True
        if budget.get(c.nodepool, 0) <= 0:
            continue
        if not can_pass_threshold(c, nodepools, totals):
            continue
        decision = compute_consolidation(sim, [c], options, SINGLE_NODE_CONSOLIDATION)
        if decision.command is None:
            if decision.why:
                blocked.append(Blocked(nodeclaim=c.name, node=c.node_name, reason=decision.why[:500],
                                       unconsolidatable=True))
            continue
        if not approve(decision.command, nodepools, totals):
            continue
        return decision.command, False
    return None, False
