"""The disruption loop's and queue's pure parts: Karpenter's label values, command strings and event messages; then
the queue over an in-memory API for the DisruptionReason condition it writes on its candidates' NodeClaims."""

from __future__ import annotations

from typing import Any

from controller.api import conditions as C
from controller.disruption import events as E
from controller.disruption.queue import Queue, consolidation_type, describe, snake, termination_mode
from controller.disruption.types import (
    DRIFT,
    EMPTINESS,
    MULTI_NODE_CONSOLIDATION,
    SINGLE_NODE_CONSOLIDATION,
    STATIC_DRIFT,
    Candidate,
    Command,
)
from controller.kube import resources as R
from controller.kube.events import Recorder
from controller.termination.controller import eviction_reason
from tests.unit.kubefake import FakeKube, FakeRecorder


def _candidate(name: str, pool: str = "default", price: float = 0.2) -> Candidate:
    return Candidate(nodeclaim={"metadata": {"name": name}}, node={"metadata": {"name": f"node-{name}"}},
                     nodepool=pool, instance_type="m5.large", capacity_type="on-demand", zone="us-east-1a",
                     price=price, disruption_cost=1.0)


def test_label_values_as_karpenter_writes_them() -> None:
    assert snake("Underutilized") == "underutilized"
    assert snake("WhenEmptyOrUnderutilized") == "when_empty_or_underutilized"
    assert [consolidation_type(m) for m in (EMPTINESS, STATIC_DRIFT, DRIFT, MULTI_NODE_CONSOLIDATION,
                                            SINGLE_NODE_CONSOLIDATION)] == ["empty", "", "", "multi", "single"]
    assert termination_mode({"spec": {}}) == "graceful"
    assert termination_mode({"spec": {"terminationGracePeriod": "0s"}}) == "forceful"
    assert termination_mode({"spec": {"terminationGracePeriod": "1h0m0s"}}) == "eventual"


def test_command_string_as_karpenter_logs_it() -> None:
    delete = Command(method=EMPTINESS, reason="Empty", candidates=[_candidate("a"), _candidate("b", "other")])
    assert describe(delete, "id1") == "Empty/id1: delete: nodepools=[default,other]: [node-a, node-b] (savings: $0.40)"


def test_event_messages_and_targets() -> None:
    node, claim = {"metadata": {"name": "n"}}, {"metadata": {"name": "c"}}
    assert [(o["kind"], m) for o, _, _, m in E.terminating(node, claim, "underutilized")] == [
        ("Node", "Disrupting Node: Underutilized"), ("NodeClaim", "Disrupting NodeClaim: Underutilized")]
    assert [m for _, _, _, m in E.launching(claim, "drifted")] == ["Launching NodeClaim: Drifted"]
    assert [r for _, _, r, _ in E.blocked(None, claim, "x")] == [E.DISRUPTION_BLOCKED]
    assert [m for _, _, _, m in E.consolidation_candidate(node, claim, "cmd", 1.234)] == [
        "Consolidation candidate: cmd (savings: $1.23)"] * 2
    assert [m for _, _, _, m in E.nodepool_blocked({"metadata": {"name": "p"}}, "Drifted")] == [
        "No allowed disruptions for disruption reason Drifted due to blocking budget"]


def test_events_dedupe_as_karpenter_keys_them() -> None:
    """Unconsolidatable: one per node for 15 minutes whatever the message; a node's DisruptionBlocked: one per node for
    the default 2 minutes; a NodePool's budget block: one per reason for a minute (Karpenter's disruption events)."""
    now = [0.0]
    rec = Recorder(None, clock=lambda: now[0])
    node, claim = {"metadata": {"name": "n", "uid": "u1"}}, {"metadata": {"name": "c", "uid": "u2"}}
    pool = {"metadata": {"name": "p", "uid": "u3"}}

    def reasons() -> list[tuple[str, str]]:
        return [(k, r) for k, r, _ in rec.published]

    E.publish(rec, E.unconsolidatable(node, claim, "a"))
    E.publish(rec, E.unconsolidatable(node, claim, "b"))  # another message, same node: dropped
    assert reasons() == [("/n", E.UNCONSOLIDATABLE), ("/c", E.UNCONSOLIDATABLE)]
    now[0] = 14 * 60
    E.publish(rec, E.unconsolidatable(node, None, "c"))
    assert len(rec.published) == 2
    now[0] = 15 * 60 + 1
    E.publish(rec, E.unconsolidatable(node, None, "c"))
    assert len(rec.published) == 3
    E.publish(rec, E.blocked(node, None, "x"))
    E.publish(rec, E.blocked(node, None, "y"))
    assert len(rec.published) == 4
    now[0] += 121
    E.publish(rec, E.blocked(node, None, "y"))
    assert len(rec.published) == 5
    E.publish(rec, E.nodepool_blocked(pool, "Drifted"))
    E.publish(rec, E.nodepool_blocked(pool, "Empty"))  # another reason: its own event
    E.publish(rec, E.nodepool_blocked(pool, "Drifted"))
    assert len(rec.published) == 7
    now[0] += 61
    E.publish(rec, E.nodepool_blocked(pool, "Drifted"))
    assert len(rec.published) == 8


# ---- the DisruptionReason condition (Karpenter's markDisrupted), over an in-memory API --------------------------

def _live_candidate(kube: FakeKube, name: str) -> Candidate:
    """An initialized NodeClaim (with the termination finalizer) and its Node, as the core hands a candidate over."""
    claim = kube.add(R.NODECLAIMS, {"metadata": {"name": name, "finalizers": ["karpenter.sh/termination"],
                                                 "labels": {"karpenter.sh/nodepool": "default"}},
                                    "spec": {}, "status": {"providerID": f"aws:///us-east-1a/i-{name}",
                                                           "nodeName": f"node-{name}", "conditions": [
                                                               {"type": "Initialized", "status": "True",
                                                                "reason": "Initialized"}]}})
    node = kube.add(R.NODES, {"metadata": {"name": f"node-{name}", "labels": {"karpenter.sh/nodepool": "default"}},
                              "spec": {"providerID": f"aws:///us-east-1a/i-{name}"}})
    return Candidate(nodeclaim=claim, node=node, nodepool="default", instance_type="m5.large",
                     capacity_type="on-demand", zone="us-east-1a", price=0.1, disruption_cost=1.0)


def _reason(kube: FakeKube, name: str) -> dict[str, Any] | None:
    return C.get(kube.get(R.NODECLAIMS, name).get("status"), "DisruptionReason")


def test_a_candidate_is_marked_with_the_commands_reason_which_its_evictions_carry() -> None:
    kube = FakeKube()
    cand = _live_candidate(kube, "a")
    queue = Queue(kube.cluster, kube, FakeRecorder())
    queue.start(Command(method=DRIFT, reason="Drifted", candidates=[cand]))
    cond = _reason(kube, "a")
    assert cond is not None
    assert (cond["status"], cond["reason"], cond["message"], cond["observedGeneration"]) == \
        ("True", "Drifted", "Drifted", 1)
    assert [c["type"] for c in kube.get(R.NODECLAIMS, "a")["status"]["conditions"]] == \
        ["Initialized", "DisruptionReason"]  # the other conditions are kept
    queue.sweep()  # held by the command: kept
    assert _reason(kube, "a") is not None
    queue.tick()  # no replacements: the NodeClaim is deleted, and keeps its reason while it terminates
    claim = kube.get(R.NODECLAIMS, "a")
    assert claim["metadata"].get("deletionTimestamp")
    queue.sweep()
    assert _reason(kube, "a") is not None
    assert eviction_reason(kube.get(R.NODECLAIMS, "a")) == "Drifted"  # "Evicted pod: Drifted"


def test_a_new_process_clears_the_reason_of_a_command_it_does_not_hold() -> None:
    kube = FakeKube()
    cand, other = _live_candidate(kube, "a"), _live_candidate(kube, "b")
    crashed = Queue(kube.cluster, kube, FakeRecorder())
    crashed.start(Command(method=SINGLE_NODE_CONSOLIDATION, reason="Underutilized", candidates=[cand]))
    assert _reason(kube, "a") is not None
    writes = len(kube.writes)
    fresh = Queue(kube.cluster, kube, FakeRecorder())
    fresh.sweep()
    assert _reason(kube, "a") is None
    assert [c["type"] for c in kube.get(R.NODECLAIMS, "a")["status"]["conditions"]] == ["Initialized"]
    assert eviction_reason(kube.get(R.NODECLAIMS, "a")) == "Forceful Termination"
    assert ("patch/status", "nodeclaims", "b") not in kube.writes[writes:]  # nothing to clear: no write
    assert _reason(kube, other.name) is None
