"""Consolidation decisions, ported from Karpenter's consolidation_test.go, singlenodeconsolidation_test.go and
balanced_test.go over hand-built Snapshots (names follow the Karpenter cases they mirror)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api import labels as L
from controller.disruption.core import compute_pass, validate
from controller.disruption.types import (
    DECISION_DELETE,
    DECISION_REPLACE,
    MULTI_NODE_CONSOLIDATION,
    SINGLE_NODE_CONSOLIDATION,
    Options,
    Pass,
)
from tests.unit.disruption_world import World, itype, nodepool, pod

SMALL = itype("m5.large", 2, 8, 0.096, 0.030)
MEDIUM = itype("m5.xlarge", 4, 16, 0.192, 0.060)
LARGE = itype("m5.2xlarge", 8, 32, 0.384, 0.120)
TYPES = [SMALL, MEDIUM, LARGE]
OD_ONLY = nodepool(requirements=[{"key": L.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}])


def _unconsolidatable(result: Pass, name: str) -> list[str]:
    return [b.reason for b in result.blocked if b.nodeclaim == name and b.unconsolidatable]


def test_can_delete_nodes_whose_pods_fit_elsewhere() -> None:
    """'can delete nodes': two on-demand nodes under half used; replacing both with one of their own type saves
    nothing (multi-node filters out the same instance type), so single-node deletes one."""
    w = World(TYPES, nodepools=[OD_ONLY])
    w.node("a", "m5.xlarge")
    w.node("b", "m5.xlarge")
    w.pods += [pod("p1", "a", cpu="1500m"), pod("p2", "b", cpu="1500m", priority=1000)]
    result = compute_pass(w.snapshot(), Options())
    assert result.method == SINGLE_NODE_CONSOLIDATION
    (cmd,) = result.commands
    assert cmd.decision == DECISION_DELETE
    assert len(cmd.candidates) == 1
    # the cheaper-to-disrupt node goes: p1 has no priority, p2 does
    assert cmd.candidates[0].name == "a"


def test_can_replace_node_with_a_cheaper_one() -> None:
    """'can replace node': one on-demand node too big for its pod becomes a smaller spot-pinned NodeClaim."""
    w = World(TYPES)
    w.node("big", "m5.2xlarge")
    w.pods.append(pod("p", "big", cpu="1"))
    result = compute_pass(w.snapshot(), Options())
    assert result.method == SINGLE_NODE_CONSOLIDATION
    (cmd,) = result.commands
    assert cmd.decision == DECISION_REPLACE
    rep = cmd.replacements[0].planned
    assert rep.price_per_hour < cmd.candidates[0].price
    from controller.disruption.consolidation import option_price
    assert all(option_price(t, rep.requirements) < cmd.candidates[0].price for t in rep.instance_type_options)
    # on-demand -> [on-demand, spot] is priced as spot, so the replacement is pinned to spot
    ct = rep.requirements.get(L.CAPACITY_TYPE)
    assert ct is not None and ct.has("spot") and not ct.has("on-demand")


def test_wont_replace_with_a_more_expensive_node() -> None:
    """"Can't replace with a cheaper node": the pods need the node's whole size and no cheaper type fits."""
    w = World([SMALL, MEDIUM], nodepools=[nodepool(requirements=[
        {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}])])
    w.node("x", "m5.large")
    w.pods.append(pod("p", "x", cpu="1500m"))
    result = compute_pass(w.snapshot(), Options())
    assert result.commands == []
    assert "Can't replace with a cheaper node" in _unconsolidatable(result, "x")


def test_spot_to_spot_disabled_blocks_spot_replacement() -> None:
    """'spot to spot consolidation disabled': a spot node is never replaced by spot without the gate."""
    w = World(TYPES)
    w.node("s", "m5.2xlarge", ct="spot")
    w.pods.append(pod("p", "s", cpu="1"))
    result = compute_pass(w.snapshot(), Options(spot_to_spot=False))
    assert result.commands == []
    assert ("SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
            in _unconsolidatable(result, "s"))


def _many_spot_types(n: int) -> list:
    return [itype(f"c{i}.large", 2, 8, 1.0 + i, 0.01 * (i + 1)) for i in range(n)] + [
        itype("big.8xlarge", 32, 128, 10.0, 5.0)]


def test_spot_to_spot_requires_15_cheaper_types() -> None:
    """'cannot replace spot with spot if less than minimum InstanceTypes flexibility'."""
    w = World(_many_spot_types(10))
    w.node("s", "big.8xlarge", ct="spot")
    w.pods.append(pod("p", "s", cpu="1"))
    result = compute_pass(w.snapshot(), Options(spot_to_spot=True))
    assert result.commands == []
    assert ("SpotToSpotConsolidation requires 15 cheaper instance type options than the current candidate to "
            "consolidate, got 10" in _unconsolidatable(result, "s"))


def test_spot_to_spot_launches_only_the_15_cheapest() -> None:
    """'spot to spot consolidation should consider the max of default and minimum number of instanceTypeOptions'
    without minValues: exactly the 15 cheapest spot types are offered."""
    w = World(_many_spot_types(20))
    w.node("s", "big.8xlarge", ct="spot")
    w.pods.append(pod("p", "s", cpu="1"))
    result = compute_pass(w.snapshot(), Options(spot_to_spot=True))
    (cmd,) = result.commands
    rep = cmd.replacements[0].planned
    assert [t.name for t in rep.instance_type_options] == [f"c{i}.large" for i in range(15)]
    assert rep.requirements.get(L.CAPACITY_TYPE).values == frozenset({"spot"})


def test_spot_to_spot_with_min_values_keeps_what_min_values_needs() -> None:
    """'spot to spot consolidation should consider the max of default and minimum number of instanceTypeOptions'
    with minValues 18 on the instance type: 18 types are sent."""
    types = _many_spot_types(20)
    w = World(types, nodepools=[nodepool(requirements=[
        {"key": L.INSTANCE_TYPE, "operator": "Exists", "minValues": 18}])])
    w.node("s", "big.8xlarge", ct="spot")
    w.pods.append(pod("p", "s", cpu="1"))
    result = compute_pass(w.snapshot(), Options(spot_to_spot=True))
    (cmd,) = result.commands
    assert len(cmd.replacements[0].planned.instance_type_options) == 18


def test_min_values_not_met_after_price_filter() -> None:
    """'should not consolidate if minValues is not met after filtering by price'."""
    w = World(TYPES, nodepools=[nodepool(requirements=[
        {"key": L.INSTANCE_TYPE, "operator": "Exists", "minValues": 3},
        {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}])])
    w.node("m", "m5.xlarge")
    w.pods.append(pod("p", "m", cpu="1"))
    result = compute_pass(w.snapshot(), Options())
    assert result.commands == []
    assert any(r.startswith("Filtering by price: minValues requirement is not met")
               for r in _unconsolidatable(result, "m"))


def test_when_empty_does_not_consolidate_non_empty_nodes() -> None:
    """'should not consolidate non-empty nodes with WhenEmpty policy'."""
    w = World(TYPES, nodepools=[nodepool(policy="WhenEmpty")])
    w.node("a", "m5.xlarge")
    w.node("b", "m5.xlarge")
    w.pods += [pod("p1", "a"), pod("p2", "b")]
    result = compute_pass(w.snapshot(), Options())
    assert result.commands == []
    assert _unconsolidatable(result, "a") == [
        'NodePool "default" has consolidation policy WhenEmpty, but node is not empty']


def test_consolidate_after_never_blocks() -> None:
    """'should not consolidate when consolidateAfter is Never'."""
    w = World(TYPES, nodepools=[nodepool(after="Never")])
    w.node("a", "m5.2xlarge")
    w.pods.append(pod("p", "a"))
    result = compute_pass(w.snapshot(), Options())
    assert result.commands == []
    assert _unconsolidatable(result, "a") == ['NodePool "default" has consolidation disabled']


def test_not_consolidatable_is_not_a_candidate() -> None:
    """A NodeClaim without the Consolidatable condition (inside consolidateAfter) is left alone."""
    w = World(TYPES)
    w.node("a", "m5.2xlarge", consolidatable=False)
    w.pods.append(pod("p", "a"))
    result = compute_pass(w.snapshot(), Options())
    assert result.commands == [] and result.eligible[SINGLE_NODE_CONSOLIDATION] == 0


def test_multi_node_consolidation_merges_nodes_into_one() -> None:
    """'can merge 3 nodes into 1': three lightly used large nodes become one cheaper NodeClaim."""
    w = World(TYPES)
    for n in ("a", "b", "c"):
        w.node(n, "m5.2xlarge")
        w.pods.append(pod(f"p-{n}", n, cpu="1"))
    result = compute_pass(w.snapshot(), Options())
    assert result.method == MULTI_NODE_CONSOLIDATION
    (cmd,) = result.commands
    assert {c.name for c in cmd.candidates} == {"a", "b", "c"}
    assert cmd.decision == DECISION_REPLACE and len(cmd.replacements) == 1
    assert cmd.savings_per_hour > 0


def test_multi_node_binary_search_takes_the_longest_prefix_that_fits() -> None:
    """The prefix search: four full-ish nodes can lose only some of their number; the command is the longest
    prefix that still packs."""
    w = World([LARGE], nodepools=[nodepool(requirements=[
        {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}])])
    for n in ("a", "b", "c", "d"):
        w.node(n, "m5.2xlarge")
        w.pods.append(pod(f"p-{n}", n, cpu="2500m"))
    result = compute_pass(w.snapshot(), Options())
    assert result.method == MULTI_NODE_CONSOLIDATION
    (cmd,) = result.commands
    assert cmd.decision == DECISION_DELETE
    # 4 x 2.5 cpu on 7.x-cpu nodes: two nodes can be deleted (their pods fit on the other two)
    assert len(cmd.candidates) == 2


def test_multi_node_timeout_returns_best_command_found() -> None:
    """'should stop consolidation after timeout' with an injected clock: the search stops and the pass records it."""
    w = World(TYPES)
    for n in ("a", "b", "c"):
        w.node(n, "m5.2xlarge")
        w.pods.append(pod(f"p-{n}", n, cpu="1"))
    ticks = iter(range(0, 10_000, 100))
    result = compute_pass(w.snapshot(), Options(multi_node_timeout=50, single_node_timeout=50,
                                                clock=lambda: float(next(ticks))))
    assert MULTI_NODE_CONSOLIDATION in result.timeouts
    assert SINGLE_NODE_CONSOLIDATION in result.timeouts
    assert result.commands == []


def test_budgets_limit_consolidation_candidates() -> None:
    """'should only consider candidates allowed by the budget': a budget of 1 node lets one go at a time."""
    w = World(TYPES, nodepools=[nodepool(budgets=[{"nodes": "1"}])])
    for n in ("a", "b", "c"):
        w.node(n, "m5.2xlarge")
        w.pods.append(pod(f"p-{n}", n, cpu="1"))
    result = compute_pass(w.snapshot(), Options())
    assert result.allowed[("default", "Underutilized")] == 1
    (cmd,) = result.commands
    assert len(cmd.candidates) == 1


def test_budget_of_zero_for_underutilized_blocks_consolidation() -> None:
    """Budgets with reasons: 0 for Underutilized leaves consolidation out while Empty still may act."""
    w = World(TYPES, nodepools=[nodepool(budgets=[{"nodes": "0", "reasons": ["Underutilized"]}])])
    w.node("a", "m5.2xlarge")
    w.pods.append(pod("p", "a"))
    result = compute_pass(w.snapshot(), Options())
    assert result.allowed[("default", "Underutilized")] == 0
    assert result.allowed[("default", "Empty")] > 1  # no budget names Empty: unbounded, as in Karpenter
    assert result.commands == []


def test_single_node_interleaves_nodepools() -> None:
    """'should prioritize nodepools fairly': candidates are taken round-robin across NodePools."""
    from controller.disruption.consolidation import interleave
    from controller.disruption.types import Candidate

    def cand(name: str, pool: str, price: float) -> Candidate:
        return Candidate({"metadata": {"name": name}}, {"metadata": {"name": name}}, pool, "t", "on-demand", "z",
                         price, 1.0)
    cs = [cand("a1", "a", 3), cand("a2", "a", 2), cand("a3", "a", 1), cand("b1", "b", 1)]
    assert [c.name for c in interleave(cs)] == ["a1", "b1", "a2", "a3"]


def test_balanced_rejects_low_savings_move() -> None:
    """balanced_test.go: a move whose savings fraction is under half its disruption fraction is not approved
    (score < 1/k, k=2), while WhenEmptyOrUnderutilized would take it."""
    def world(policy: str) -> World:
        w = World(TYPES, nodepools=[nodepool(policy=policy)])
        w.node("busy", "m5.2xlarge")
        w.node("idle-ish", "m5.2xlarge", consolidatable=False)  # counts in the pool's totals only
        # the replaceable node carries most of the pool's pods but saves little
        w.pods += [pod(f"q{i}", "busy", cpu="100m") for i in range(30)]
        w.pods += [pod("keep", "idle-ish", cpu="7")]
        return w
    balanced = compute_pass(world("Balanced").snapshot(), Options())
    plain = compute_pass(world("WhenEmptyOrUnderutilized").snapshot(), Options())
    assert plain.commands, "the move exists without Balanced"
    assert any("busy" in {c.name for c in cmd.candidates} for cmd in plain.commands)
    # Balanced: replacing "busy" saves 0.354 of the pool's 0.768/h (0.46) for 31 of its 33 disruption (0.94)
    assert balanced.commands == []


def test_many_to_many_replaces_three_with_two_when_gated() -> None:
    """karpy's ManyToManyConsolidation: three nodes whose pods need two smaller nodes become two with the gate;
    without it (Karpenter's N -> 1) only the two that fit one replacement go."""
    types = [itype("r.big", 10, 40, 0.30), itype("r.huge", 20, 80, 0.45), itype("r.4xlarge", 16, 64, 1.0)]
    w = World(types, nodepools=[nodepool(requirements=[
        {"key": L.INSTANCE_TYPE, "operator": "In", "values": ["r.big", "r.huge"]},
        {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}])])
    for n in ("a", "b", "c"):
        w.node(n, "r.4xlarge")
        w.pods.append(pod(f"p-{n}", n, cpu="9"))  # no two fit on one remaining node
    off = compute_pass(w.snapshot(), Options())
    on = compute_pass(w.snapshot(), Options(many_to_many=True))
    assert off.method == MULTI_NODE_CONSOLIDATION
    (cmd,) = off.commands
    assert len(cmd.candidates) == 2 and len(cmd.replacements) == 1
    assert on.method == MULTI_NODE_CONSOLIDATION
    (cmd,) = on.commands
    assert len(cmd.candidates) == 3 and len(cmd.replacements) == 2
    assert sum(r.price for r in cmd.replacements) < 3.0


def test_validate_consolidation_after_pods_arrive() -> None:
    """validation.go: a delete decided before new pods landed on the surviving node is no longer valid."""
    w = World(TYPES, nodepools=[OD_ONLY])
    w.node("a", "m5.xlarge")
    w.node("b", "m5.xlarge")
    w.pods += [pod("p1", "a", cpu="2"), pod("p2", "b", cpu="1", priority=1000)]
    first = compute_pass(w.snapshot(), Options())
    (cmd,) = first.commands
    assert validate(cmd, w.snapshot(), Options()) is None
    survivor = "b" if cmd.candidates[0].name == "a" else "a"
    w.pods.append(pod("late", survivor, cpu="3"))
    assert validate(cmd, w.snapshot(), Options()) is not None


def test_multi_node_timeout_keeps_the_last_valid_command() -> None:
    """'should return the last valid command when multi-node consolidation times out': the clock passes the
    timeout after the first batch was found valid, and that batch is the command."""
    w = World(TYPES)
    for n in ("a", "b", "c", "d", "e"):
        w.node(n, "m5.2xlarge")
        w.pods.append(pod(f"p-{n}", n, cpu="500m"))
    calls = {"n": 0}

    def clock() -> float:
        calls["n"] += 1
        return 0.0 if calls["n"] <= 2 else 1000.0  # start, first check; then past the timeout
    result = compute_pass(w.snapshot(), Options(multi_node_timeout=60, clock=clock))
    assert result.method == MULTI_NODE_CONSOLIDATION
    assert result.timeouts == [MULTI_NODE_CONSOLIDATION]
    (cmd,) = result.commands
    # the first batch tried is the midpoint of 2..5 candidates: 3 of them
    assert len(cmd.candidates) == 3


def test_balanced_score_rule() -> None:
    """balanced.go ScoreMove: savings fraction / disruption fraction, approved at >= 1/k (k = 2)."""
    from controller.disruption.consolidation import PoolTotals, score
    totals = PoolTotals(cost=1.0, disruption=10.0)
    assert score(0.5, 5.0, totals) == 1.0
    assert score(0.2, 5.0, totals) == pytest.approx(0.4)  # under 1/2: rejected
    assert score(0.0, 1.0, totals) == 0.0
    assert score(0.1, 0.0, totals) == float("inf")
    assert score(0.1, 1.0, PoolTotals()) == 0.0


def test_pending_pods_are_simulated_with_the_candidates() -> None:
    """SimulateScheduling includes the cluster's pending pods: room they need is not room the candidate's pods get."""
    def world(pending: bool) -> World:
        w = World(TYPES, nodepools=[OD_ONLY])
        w.node("a", "m5.xlarge")
        w.node("b", "m5.xlarge")
        w.pods += [pod("p1", "a", cpu="1500m"), pod("p2", "b", cpu="1500m", priority=1000)]
        if pending:
            w.pods.append(pod("waiting", cpu="2", pending=True))
        return w
    assert compute_pass(world(False).snapshot(), Options()).commands[0].decision == DECISION_DELETE
    with_pending = compute_pass(world(True).snapshot(), Options())
    assert all(c.decision != DECISION_DELETE for c in with_pending.commands)


def test_daemonset_overhead_counts_on_replacements() -> None:
    """A DaemonSet's pod on every node: a replacement must hold it too, so a type too small for both is not offered."""
    w = World(TYPES)
    w.node("big", "m5.2xlarge")
    w.pods.append(pod("p", "big", cpu="1500m"))
    w.daemonsets.append({"apiVersion": "apps/v1", "kind": "DaemonSet",
                         "metadata": {"name": "agent", "namespace": "kube-system"},
                         "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
                             "metadata": {"labels": {"app": "agent"}},
                             "spec": {"containers": [{"name": "a", "image": "x",
                                                      "resources": {"requests": {"cpu": "1"}}}]}}}})
    (cmd,) = compute_pass(w.snapshot(), Options()).commands
    assert [t.name for t in cmd.replacements[0].planned.instance_type_options] == ["m5.xlarge", "m5.2xlarge"]


def test_multi_node_considers_at_most_100_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Karpenter's multi-node limit: 100 candidates per search."""
    from controller.disruption import consolidation as cons
    w = World([SMALL], nodepools=[OD_ONLY])
    for i in range(120):
        w.node(f"n{i:03}", "m5.large")
        w.pods.append(pod(f"p{i:03}", f"n{i:03}", cpu="100m"))
    seen: list[int] = []
    real = cons.compute_consolidation

    def spy(sim: Any, candidates: list[Any], options: Options, method: str) -> Any:
        seen.append(len(candidates))
        return real(sim, candidates, options, method)
    monkeypatch.setattr(cons, "compute_consolidation", spy)
    result = compute_pass(w.snapshot(), Options())
    assert result.method == MULTI_NODE_CONSOLIDATION
    assert seen and max(seen) <= 100
    assert len(result.commands[0].candidates) == 100


def test_wont_consolidate_onto_uninitialized_node() -> None:
    """Karpenter's UninitializedNodeError: a delete that relies on a node not yet initialized is not made."""
    w = World(TYPES, nodepools=[OD_ONLY])
    w.node("a", "m5.xlarge")
    w.pods.append(pod("p1", "a", cpu="1500m"))
    w.node("fresh", "m5.xlarge", initialized=False)
    result = compute_pass(w.snapshot(), Options())
    assert all(c.decision != DECISION_DELETE for c in result.commands)
    assert "Would schedule against uninitialized nodeclaim/fresh, node/fresh" in _unconsolidatable(result, "a")
