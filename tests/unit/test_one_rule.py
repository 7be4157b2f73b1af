"""Rules karpy implements once and uses everywhere, each as Karpenter states it: its taints matched by key and effect
(MatchTaint), ownership by apiVersion and kind (IsOwnedBy), Go durations read by time.ParseDuration's grammar."""

from __future__ import annotations

import pytest

from controller.api import labels as L
from controller.api.durations import parse_go_duration
from controller.api.pods import owned_by_daemonset
from controller.api.taints import KNOWN_EPHEMERAL_TAINTS, UNREGISTERED_TAINT, Taint, is_known_ephemeral
from controller.cloud.aws.userdata import with_unregistered_taint
from controller.disruption.budgets import BudgetError, parse_duration
from controller.disruption.candidates import is_reschedulable
from controller.main import _going_away
from controller.nodeclaim.expiration import reschedulable_pods
from controller.nodeclaim.podevents import pod_event_node
from controller.ops.nodes import _evictable


def test_the_unregistered_taint_is_matched_by_key_and_effect():
    """A NodeClaim may carry karpenter.sh/unregistered with another effect: it is the user's, not the registration
    taint, so the node still registers with karpenter.sh/unregistered:NoExecute (as the AWS provider's resolver
    does) and only that one is ephemeral."""
    users = Taint(L.UNREGISTERED_TAINT_KEY, "", "NoSchedule")
    assert with_unregistered_taint([users]) == [users, UNREGISTERED_TAINT]
    assert with_unregistered_taint([UNREGISTERED_TAINT]) == [UNREGISTERED_TAINT]
    assert UNREGISTERED_TAINT in KNOWN_EPHEMERAL_TAINTS
    assert is_known_ephemeral(Taint(L.UNREGISTERED_TAINT_KEY, "anything", "NoExecute"))  # the value is not compared
    assert not is_known_ephemeral(users)


def _node(*taints: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "n"}, "spec": {"taints": list(taints)}}


def test_the_disrupted_taint_is_matched_by_key_and_effect_in_the_controllers_wiring():
    assert _going_away(_node({"key": L.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}))
    assert not _going_away(_node({"key": L.DISRUPTED_TAINT_KEY, "effect": "NoExecute"}))


def _pod(api_version: str, kind: str, **meta: object) -> dict[str, object]:
    return {"metadata": {"name": "p", "namespace": "default", "ownerReferences": [
        {"apiVersion": api_version, "kind": kind, "name": "o", "uid": "u", "controller": True}], **meta},
        "spec": {"nodeName": "n", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}}


def test_daemonset_ownership_is_apps_v1_daemonset_everywhere():
    """Karpenter's IsOwnedByDaemonSet compares the owner's apiVersion and kind: a DaemonSet of another group (a CRD
    named DaemonSet, e.g. OpenKruise's) does not make its pods DaemonSet pods, in any of the places that ask."""
    ours, other = _pod("apps/v1", "DaemonSet"), _pod("apps.kruise.io/v1alpha1", "DaemonSet")
    assert owned_by_daemonset(ours) and not owned_by_daemonset(other)
    assert not is_reschedulable(ours) and is_reschedulable(other)
    assert reschedulable_pods([ours, other]) == 1
    assert not _evictable(ours) and _evictable(other)
    assert pod_event_node("ADDED", None, ours) == "" and pod_event_node("ADDED", None, other) == "n"


def test_a_terminating_statefulset_pod_is_reschedulable_only_when_apps_v1_owns_it():
    stamp = "2026-01-01T00:00:00Z"
    assert is_reschedulable(_pod("apps/v1", "StatefulSet", deletionTimestamp=stamp))
    assert not is_reschedulable(_pod("example.com/v1", "StatefulSet", deletionTimestamp=stamp))


@pytest.mark.parametrize("text, seconds", [("1h30m", 5400.0), ("30ms", 0.03), ("1.5h", 5400.0), ("0", 0.0),
                                           ("10μs", 1e-5), ("10µs", 1e-5)])
def test_one_go_duration_parser_for_budgets_and_everything_else(text: str, seconds: float):
    assert parse_go_duration(text) == pytest.approx(seconds)
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "-1h", "1d", "h", "1h 30m"])
def test_a_budget_duration_that_is_not_a_positive_go_duration_is_refused(text: str):
    with pytest.raises(BudgetError, match="is not a duration"):
        parse_duration(text)


def test_kubelet_eviction_grace_periods_are_validated_by_the_same_parser():
    from controller.api.documents import parse_documents
    from controller.api.validation import validate_document

    text = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: d}
spec:
  role: r
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {a: b}}]
  securityGroupSelectorTerms: [{tags: {a: b}}]
  kubelet:
    evictionSoft: {memory.available: 5%, nodefs.available: 10%}
    evictionSoftGracePeriod: {memory.available: 10μs, nodefs.available: -1m}
"""
    [doc] = parse_documents(text, "nc.yaml")
    errors = [str(e) for e in validate_document(doc)]
    assert len(errors) == 1 and "nodefs.available" in errors[0] and "negative" in errors[0], errors


def test_times_and_name_lists_have_one_reading() -> None:
    """One RFC 3339 reader (a time without a zone is UTC, as the API writes every time) and one pretty.Slice."""
    from controller.api import conditions as C
    from controller.logs import pretty_names
    from controller.termination import drain as D

    assert D.parse_time is C.parse_time
    assert C.parse_time("2026-01-01T00:00:00") == C.parse_time("2026-01-01T00:00:00Z") == 1767225600.0
    assert C.parse_time(12) is None and C.parse_time("soon") is None
    assert pretty_names([f"n{i}" for i in range(7)]) == "n0, n1, n2, n3, n4 and 2 other(s)"
    assert pretty_names(["a", "b"]) == "a, b"
