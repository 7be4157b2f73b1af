"""The disruption pass: candidates and why nodes are not candidates, disruption cost, budgets, expiration, Emptiness,
Drift and StaticDrift, the methods' order, and bad input; ported from Karpenter's suite_test.go, emptiness_test.go,
drift_test.go and staticdrift_test.go (names follow the cases they mirror)."""

from __future__ import annotations

import pytest

from controller.api import labels as L
from controller.disruption.candidates import build_candidates, eviction_cost, lifetime_remaining
from controller.disruption.core import compute_pass, validate
from controller.disruption.types import (
    DECISION_DELETE,
    DECISION_REPLACE,
    DRIFT,
    EMPTINESS,
    STATIC_DRIFT,
    Options,
    Pass,
)
from tests.unit.disruption_world import NOW, World, itype, nodepool, pdb, pod, ts

SMALL = itype("m5.large", 2, 8, 0.096, 0.030)
LARGE = itype("m5.2xlarge", 8, 32, 0.384, 0.120)
TYPES = [SMALL, LARGE]


def _blocked(result: Pass, name: str) -> list[str]:
    return [b.reason for b in result.blocked if b.nodeclaim == name]


# ---- candidates ---------------------------------------------------------------------------------------------------

def test_should_not_consider_node_with_do_not_disrupt_annotation() -> None:
    w = World(TYPES)
    w.node("a", "m5.large", annotations={L.DO_NOT_DISRUPT: "true"})
    result = compute_pass(w.snapshot(), Options())
    assert result.commands == []
    assert _blocked(result, "a") == ['Disruption is blocked through the "karpenter.sh/do-not-disrupt" annotation']


def test_should_not_consider_node_with_do_not_disrupt_pod() -> None:
    w = World(TYPES)
    w.node("a", "m5.2xlarge")
    w.pods.append(pod("p", "a", annotations={L.DO_NOT_DISRUPT: "true"}))
    result = compute_pass(w.snapshot(), Options())
    assert result.commands == []
    assert _blocked(result, "a") == ['Pod has "karpenter.sh/do-not-disrupt" annotation (Pod=default/p)']


@pytest.mark.parametrize(("started_ago", "blocked"), [(60, True), (7200, False)])
def test_do_not_disrupt_duration_counts_from_pod_start(started_ago: float, blocked: bool) -> None:
    """'should consider candidates that have do-not-disrupt pods with an expired duration'."""
    w = World(TYPES)
    w.node("a", "m5.2xlarge")
    w.pods.append(pod("p", "a", annotations={L.DO_NOT_DISRUPT: "1h"}, started=NOW - started_ago))
    cands = build_candidates(w.snapshot())
    assert bool(cands.blocked) is blocked
    assert bool(cands.graceful) is not blocked


def test_terminal_do_not_disrupt_pod_does_not_block() -> None:
    """'should consider candidates that have do-not-disrupt terminal pods'."""
    w = World(TYPES)
    w.node("a", "m5.2xlarge")
    w.pods.append(pod("p", "a", annotations={L.DO_NOT_DISRUPT: "true"}, phase="Succeeded"))
    assert [c.name for c in build_candidates(w.snapshot()).graceful] == ["a"]


@pytest.mark.parametrize("api", ["policy/v1", "policy/v1beta1"])
def test_should_not_consider_candidate_with_blocking_pdb(api: str) -> None:
    w = World(TYPES)
    w.node("a", "m5.2xlarge")
    w.pods.append(pod("p", "a", labels={"app": "web"}))
    w.pdbs.append(pdb("web", {"app": "web"}, 0, api=api))
    result = compute_pass(w.snapshot(), Options())
    assert result.commands == []
    assert _blocked(result, "a") == ["Pdb prevents pod evictions (PodDisruptionBudget=[default/web])"]


def test_pdb_that_allows_disruptions_does_not_block() -> None:
    w = World(TYPES)
    w.node("a", "m5.2xlarge")
    w.pods.append(pod("p", "a", labels={"app": "web"}))
    w.pdbs.append(pdb("web", {"app": "web"}, 1))
    assert [c.name for c in build_candidates(w.snapshot()).graceful] == ["a"]


def test_pod_with_multiple_pdbs_blocks() -> None:
    w = World(TYPES)
    w.node("a", "m5.2xlarge")
    w.pods.append(pod("p", "a", labels={"app": "web"}))
    w.pdbs += [pdb("one", {"app": "web"}, 1), pdb("two", {"app": "web"}, 5)]
    result = compute_pass(w.snapshot(), Options())
    assert _blocked(result, "a") == [
        "Eviction does not support multiple PDBs (PodDisruptionBudget(s)=[default/one, default/two])"]


def test_drift_ignores_pod_blocks_with_termination_grace_period() -> None:
    """'should consider candidates with blocking PDBs when the NodeClaim has a terminationGracePeriod' (drift is
    eventual disruption)."""
    w = World(TYPES)
    w.node("a", "m5.large", drifted=NOW - 60, claim_spec={"terminationGracePeriod": "1h"})
    w.pods.append(pod("p", "a", labels={"app": "web"}))
    w.pdbs.append(pdb("web", {"app": "web"}, 0))
    result = compute_pass(w.snapshot(), Options())
    assert result.method == DRIFT
    assert [c.name for c in result.commands[0].candidates] == ["a"]


def test_uninitialized_and_deleting_and_disrupting_are_not_candidates() -> None:
    w = World(TYPES)
    w.node("uninit", "m5.large", initialized=False)
    w.node("deleting", "m5.large")
    w.nodeclaims[-1]["metadata"]["deletionTimestamp"] = ts(NOW)
    w.node("held", "m5.large")
    w.disrupting.add("held")
    result = compute_pass(w.snapshot(), Options())
    assert _blocked(result, "uninit") == ["Node isn't initialized"]
    assert _blocked(result, "deleting") == ["Node is deleting or marked for deletion"]
    assert _blocked(result, "held") == []  # already disrupting: silently skipped
    assert result.commands == []


def test_disruption_cost_formula() -> None:
    """Karpenter's EvictionCost and LifetimeRemaining."""
    assert eviction_cost(pod("p")) == 1.0
    assert eviction_cost(pod("p", annotations={"controller.kubernetes.io/pod-deletion-cost": str(2 ** 27)})) == 2.0
    assert eviction_cost(pod("p", priority=2 ** 25)) == 2.0
    assert eviction_cost(pod("p", priority=2 ** 31 - 1)) == 10.0
    assert eviction_cost(pod("p", annotations={"controller.kubernetes.io/pod-deletion-cost": "nope"})) == 1.0
    claim = {"metadata": {"creationTimestamp": ts(NOW - 3600)}, "spec": {"expireAfter": "4h"}}
    assert lifetime_remaining(claim, NOW) == pytest.approx(0.75)
    assert lifetime_remaining({"spec": {"expireAfter": "Never"}}, NOW) == 1.0
    w = World(TYPES)
    w.node("a", "m5.2xlarge", created=NOW - 3600, expire_after="4h")
    w.pods += [pod("p1", "a"), pod("p2", "a", priority=2 ** 25),
               pod("ds", "a", owner="DaemonSet")]  # a DaemonSet pod is not rescheduled, costs nothing
    (c,) = build_candidates(w.snapshot()).graceful
    assert c.disruption_cost == pytest.approx((1.0 + 2.0) * 0.75)
    assert c.reschedule_disruption_cost == pytest.approx(4.0)


# ---- expiration ---------------------------------------------------------------------------------------------------

def test_expired_nodeclaims_listed() -> None:
    w = World(TYPES)
    w.node("old", "m5.large", created=NOW - 7200, expire_after="1h")
    w.node("young", "m5.large", created=NOW - 600, expire_after="1h")
    w.node("never", "m5.large", created=NOW - 10 ** 7, expire_after="Never")
    result = compute_pass(w.snapshot(), Options())
    assert [e.nodeclaim for e in result.expired] == ["old"]
    assert all("old" not in {c.name for c in cmd.candidates} for cmd in result.commands)


# ---- emptiness ----------------------------------------------------------------------------------------------------

def test_emptiness_deletes_empty_nodes_in_one_command() -> None:
    """emptiness_test.go 'can delete empty nodes'; a DaemonSet pod does not make a node non-empty."""
    w = World(TYPES)
    w.node("e1", "m5.large")
    w.node("e2", "m5.large")
    w.pods.append(pod("ds", "e2", owner="DaemonSet"))
    w.node("busy", "m5.large")
    w.pods.append(pod("p", "busy"))
    result = compute_pass(w.snapshot(), Options())
    assert result.method == EMPTINESS
    (cmd,) = result.commands
    assert cmd.decision == DECISION_DELETE and {c.name for c in cmd.candidates} == {"e1", "e2"}
    assert validate(cmd, w.snapshot(), Options()) is None
    w.pods.append(pod("arrived", "e1"))
    assert validate(cmd, w.snapshot(), Options()) == "1 candidates are no longer valid"  # Karpenter's churn


@pytest.mark.parametrize(("budget", "expected"), [("1", 1), ("50%", 2), ("0", 0)])
def test_emptiness_respects_budgets(budget: str, expected: int) -> None:
    """'should only allow N empty nodes to be disrupted' by count and percentage (rounded up)."""
    w = World(TYPES, nodepools=[nodepool(budgets=[{"nodes": budget}])])
    for i in range(3):
        w.node(f"e{i}", "m5.large")
    result = compute_pass(w.snapshot(), Options())
    assert result.allowed[("default", "Empty")] == expected
    assert sum(len(c.candidates) for c in result.commands) == expected


def test_budget_subtracts_not_ready_and_deleting_nodes() -> None:
    """BuildDisruptionBudgetMapping: NotReady and deleting nodes use up the budget."""
    w = World(TYPES, nodepools=[nodepool(budgets=[{"nodes": "2"}])])
    w.node("e0", "m5.large")
    w.node("nr", "m5.large", ready=False)
    w.pods.append(pod("p", "nr"))
    w.node("held", "m5.large")
    w.disrupting.add("held")
    result = compute_pass(w.snapshot(), Options())
    assert result.allowed[("default", "Empty")] == 0
    assert result.commands == []
    # what karpenter_nodepools_allowed_disruptions and ..._nodes_consuming_budgets report: the budget's own figure
    mapping = result.budgets["Empty"]
    assert (mapping.allowed["default"], mapping.consuming["default"], mapping.nodes["default"]) == (2, 2, 3)


def test_budget_with_reasons_applies_only_to_them() -> None:
    w = World(TYPES, nodepools=[nodepool(budgets=[{"nodes": "0", "reasons": ["Empty"]}])])
    w.node("e0", "m5.large")
    result = compute_pass(w.snapshot(), Options())
    assert result.allowed[("default", "Empty")] == 0
    assert result.commands == []


def test_unparseable_budget_fails_closed() -> None:
    w = World(TYPES, nodepools=[nodepool(budgets=[{"nodes": "lots"}])])
    w.node("e0", "m5.large")
    result = compute_pass(w.snapshot(), Options())
    assert result.allowed[("default", "Empty")] == 0 and result.commands == []


# ---- drift ----------------------------------------------------------------------------------------------------------

def test_drift_replaces_drifted_node_with_its_pods() -> None:
    """drift_test.go 'should replace drifted nodes': the replacement carries the pods."""
    w = World(TYPES)
    w.node("d", "m5.2xlarge", drifted=NOW - 60, consolidatable=False)
    w.pods.append(pod("p", "d", cpu="1"))
    result = compute_pass(w.snapshot(), Options())
    assert result.method == DRIFT
    (cmd,) = result.commands
    assert cmd.decision == DECISION_REPLACE and len(cmd.replacements) == 1
    assert [p.name for p in cmd.replacements[0].planned.pods] == ["p"]


def test_drift_deletes_empty_drifted_node_first_and_uses_snapshot_drift() -> None:
    """'should disrupt empty drifted nodes first'; drift found outside the condition (snapshot.drifted) counts."""
    w = World(TYPES)
    w.node("old", "m5.2xlarge", drifted=NOW - 600, consolidatable=False)
    w.pods.append(pod("p", "old", cpu="1"))
    w.node("empty", "m5.large", consolidatable=False)
    w.drifted["empty"] = "NodeClassDrift"
    result = compute_pass(w.snapshot(), Options())
    (cmd,) = result.commands
    assert [c.name for c in cmd.candidates] == ["empty"] and cmd.decision == DECISION_DELETE


def test_drift_orders_by_drift_time_and_respects_budget() -> None:
    w = World(TYPES, nodepools=[nodepool(budgets=[{"nodes": "0", "reasons": ["Drifted"]}])])
    w.node("d", "m5.large", drifted=NOW - 60, consolidatable=False)
    result = compute_pass(w.snapshot(), Options())
    assert result.commands == [] and result.eligible[DRIFT] == 1


def test_drift_blocked_when_pods_cannot_schedule() -> None:
    """A drifted node whose pod fits nowhere is blocked with the scheduling error."""
    w = World([SMALL])
    w.node("d", "m5.large", drifted=NOW - 60, consolidatable=False)
    w.pods.append(pod("huge", "d", cpu="1500m", mem="100Gi"))
    result = compute_pass(w.snapshot(), Options())
    assert result.commands == []
    assert any("huge" in r for r in _blocked(result, "d"))


def test_static_drift_replaces_from_template() -> None:
    """staticdrift_test.go: a drifted NodeClaim of a static NodePool gets one replacement from the template."""
    w = World(TYPES, nodepools=[nodepool("static", replicas=2)])
    w.node("s1", "m5.large", pool="static", drifted=NOW - 60)
    w.node("s2", "m5.large", pool="static")
    result = compute_pass(w.snapshot(), Options())
    assert result.method == STATIC_DRIFT
    (cmd,) = result.commands
    assert [c.name for c in cmd.candidates] == ["s1"] and len(cmd.replacements) == 1
    assert cmd.replacements[0].nodepool == "static"


def test_static_nodepool_is_never_consolidated() -> None:
    w = World(TYPES, nodepools=[nodepool("static", replicas=1)])
    w.node("s1", "m5.2xlarge", pool="static")
    w.pods.append(pod("p", "s1"))
    result = compute_pass(w.snapshot(), Options())
    assert result.commands == []


# ---- order of methods -----------------------------------------------------------------------------------------

def test_emptiness_wins_over_drift_and_consolidation() -> None:
    w = World(TYPES)
    w.node("empty", "m5.large")
    w.node("d", "m5.2xlarge", drifted=NOW - 60)
    w.pods.append(pod("p", "d"))
    result = compute_pass(w.snapshot(), Options())
    assert result.method == EMPTINESS
    assert set(result.evaluation_seconds) == {EMPTINESS}


# ---- bad input ------------------------------------------------------------------------------------------------------

def test_bad_input_ends_in_blocked_reasons() -> None:
    """A Node without instance-type labels, a NodeClaim whose Node is missing, an unknown instance type, an unknown
    NodePool: each is a reason, never an exception."""
    w = World(TYPES)
    w.node("nolabels", "m5.2xlarge", labels={L.INSTANCE_TYPE: "", L.ZONE: ""})
    w.pods.append(pod("p1", "nolabels"))
    w.node("nonode", "m5.large", with_node=False)
    w.node("unknown", "x9.huge")
    w.pods.append(pod("p2", "unknown"))
    w.node("orphan", "m5.large", pool="gone")
    w.pods.append({"metadata": {"name": "broken", "namespace": "default"}, "spec": {"nodeName": "nolabels",
                                                                                   "containers": "nope"}})
    result = compute_pass(w.snapshot(), Options())
    assert _blocked(result, "nonode") == ["Nodeclaim does not have an associated node"]
    assert _blocked(result, "unknown") == ['Instance Type "x9.huge" not found']
    assert _blocked(result, "nolabels") == ['Instance Type "" not found']
    assert _blocked(result, "orphan") == ["NodePool not found (NodePool=gone)"]


def test_unparseable_expire_after_is_blocked_not_raised() -> None:
    w = World(TYPES)
    w.node("bad", "m5.large", expire_after="soon")
    result = compute_pass(w.snapshot(), Options())
    assert any("spec.expireAfter" in r for r in _blocked(result, "bad"))


def test_validation_rejects_budget_and_changed_replacement() -> None:
    """validation_test.go: a budget that now allows none, and a replacement the new simulation would size
    differently, both invalidate the command (Karpenter's messages)."""
    w = World(TYPES)
    w.node("big", "m5.2xlarge")
    w.pods.append(pod("p", "big", cpu="1"))
    (cmd,) = compute_pass(w.snapshot(), Options()).commands
    assert cmd.replacements and validate(cmd, w.snapshot(), Options()) is None
    w.pods.append(pod("grew", "big", cpu="1500m"))  # the pods no longer fit the planned m5.large
    assert validate(cmd, w.snapshot(), Options()) == "scheduling simulation produced new results"
    w.pods.pop()
    w.nodepools[0]["spec"]["disruption"]["budgets"] = [{"nodes": "0"}]
    assert validate(cmd, w.snapshot(), Options()) == (
        "a candidate can no longer be disrupted without violating budgets")


def test_emptiness_reports_consolidation_disabled() -> None:
    w = World(TYPES, nodepools=[nodepool(after=None)])
    w.node("e", "m5.large")
    result = compute_pass(w.snapshot(), Options())
    assert result.commands == []
    assert [(b.reason, b.unconsolidatable) for b in result.blocked] == [
        ('NodePool "default" has consolidation disabled', True)]
