"""The disruption controller's events, with Karpenter's reasons and messages (pkg/controllers/disruption/events).

Each returns (object, type, reason, message) tuples for the Recorder; events about a node go to both its Node and its
NodeClaim, as Karpenter publishes them.
"""

from __future__ import annotations

from typing import Any

from controller.kube.events import Recorder

Obj = dict[str, Any]
Event = tuple[Obj, str, str, str]

DISRUPTION_BLOCKED = "DisruptionBlocked"
DISRUPTION_LAUNCHING = "DisruptionLaunching"
DISRUPTION_WAITING_READINESS = "DisruptionWaitingReadiness"
DISRUPTION_TERMINATING = "DisruptionTerminating"
UNCONSOLIDATABLE = "Unconsolidatable"
CONSOLIDATION_CANDIDATE = "ConsolidationCandidate"
UNCONSOLIDATABLE_DEDUPE_SECONDS = 15 * 60.0
NODEPOOL_BLOCKED_DEDUPE_SECONDS = 60.0


def _kinded(obj: Obj, kind: str, api_version: str) -> Obj:
    """Informer list items carry no kind: the Event's involvedObject needs one."""
    if obj.get("kind"):
        return obj
    return {**obj, "kind": kind, "apiVersion": api_version}


def _node(obj: Obj) -> Obj:
    return _kinded(obj, "Node", "v1")


def _claim(obj: Obj) -> Obj:
    return _kinded(obj, "NodeClaim", "karpenter.sh/v1")


def _title(reason: str) -> str:
    """Karpenter's cases.Title(language.Und, cases.NoLower): the first letter upper-cased, the rest kept."""
    return reason[:1].upper() + reason[1:]


def launching(nodeclaim: Obj, reason: str) -> list[Event]:
    """A replacement NodeClaim was launched for a command."""
    return [(_claim(nodeclaim), "Normal", DISRUPTION_LAUNCHING, f"Launching NodeClaim: {_title(reason)}")]


def waiting_on_readiness(nodeclaim: Obj) -> list[Event]:
    """A command waits for its replacement to initialize."""
    return [(_claim(nodeclaim), "Normal", DISRUPTION_WAITING_READINESS, "Waiting on readiness to continue disruption")]


def terminating(node: Obj | None, nodeclaim: Obj, reason: str) -> list[Event]:
    """A candidate is being deleted by a command."""
    out = _on_both(node, None, DISRUPTION_TERMINATING, f"Disrupting Node: {_title(reason)}")
    return out + _on_both(None, nodeclaim, DISRUPTION_TERMINATING, f"Disrupting NodeClaim: {_title(reason)}")


def _on_both(node: Obj | None, nodeclaim: Obj | None, reason: str, message: str) -> list[Event]:
    """The same event on the Node and on its NodeClaim (either may be missing)."""
    out: list[Event] = []
    if node is not None:
        out.append((_node(node), "Normal", reason, message))
    if nodeclaim is not None:
        out.append((_claim(nodeclaim), "Normal", reason, message))
    return out


def blocked(node: Obj | None, nodeclaim: Obj | None, message: str) -> list[Event]:
    """A node cannot be disrupted, and why."""
    return _on_both(node, nodeclaim, DISRUPTION_BLOCKED, message)


def unconsolidatable(node: Obj | None, nodeclaim: Obj | None, message: str) -> list[Event]:
    """A node consolidation cannot act on, and why."""
    return _on_both(node, nodeclaim, UNCONSOLIDATABLE, message)


def nodepool_blocked(nodepool: Obj, reason: str = "") -> list[Event]:
    """A NodePool's budgets allow no disruption (for one reason, or at all)."""
    np_ = _kinded(nodepool, "NodePool", "karpenter.sh/v1")
    if reason:
        return [(np_, "Normal", DISRUPTION_BLOCKED,
                 f"No allowed disruptions for disruption reason {reason} due to blocking budget")]
    return [(np_, "Normal", DISRUPTION_BLOCKED, "No allowed disruptions due to blocking budget")]


def consolidation_candidate(node: Obj | None, nodeclaim: Obj, command: str, savings: float) -> list[Event]:
    """A node a consolidation command is about to disrupt, with the command and its savings per hour."""
    return _on_both(node, nodeclaim, CONSOLIDATION_CANDIDATE,
                    f"Consolidation candidate: {command} (savings: ${savings:.2f})")


def _dedupe(obj: Obj, reason: str, message: str) -> tuple[tuple[str, ...] | None, float | None]:
    """Karpenter's dedupe values and window for a disruption event: a node's Unconsolidatable and DisruptionBlocked
    events are one per object whatever their message (Unconsolidatable for 15 minutes, so a node that cannot be
    consolidated is not reported every pass), a NodePool's budget block is one per reason for a minute; the others
    are keyed by their message (which carries the reason or command Karpenter keys them by) for the default window."""
    if reason == UNCONSOLIDATABLE:
        return (), UNCONSOLIDATABLE_DEDUPE_SECONDS
    if reason == DISRUPTION_BLOCKED:
        if obj.get("kind") == "NodePool":
            return (message,), NODEPOOL_BLOCKED_DEDUPE_SECONDS
        return (), None
    return None, None


def publish(recorder: Recorder, events: list[Event]) -> None:
    """Hand the events to the recorder, which drops repeats within Karpenter's dedupe window for each."""
    for obj, type_, reason, message in events:
        values, seconds = _dedupe(obj, reason, message)
        recorder.publish(obj, type_, reason, message, dedupe_values=values, dedupe_seconds=seconds)
