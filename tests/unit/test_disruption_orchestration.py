"""The disruption loop's and queue's pure parts: Karpenter's label values, command strings and event messages."""

from __future__ import annotations

from controller.disruption import events as E
from controller.disruption.queue import consolidation_type, describe, snake, termination_mode
from controller.disruption.types import (
    DRIFT,
    EMPTINESS,
    MULTI_NODE_CONSOLIDATION,
    SINGLE_NODE_CONSOLIDATION,
    STATIC_DRIFT,
    Candidate,
    Command,
)
from controller.kube.events import Recorder


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
