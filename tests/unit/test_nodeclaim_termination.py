"""The NodeClaim finalizer (controller/nodeclaim/termination.py) over an in-memory API, in Karpenter's order: the
terminationGracePeriod annotation, the Node(s) deleted and waited for when Registered, then the instance, then the
finalizer; node termination's own tests are in test_termination.py."""

from __future__ import annotations

import pytest

from controller.kube.workqueue import Result
from controller.termination import drain as D
from tests.unit.termination_world import NOW, PID, conditions, counter, histogram, world


def _claim(w: object) -> dict:
    return w.api.objects[("nodeclaims", "", "c1")]  # type: ignore[attr-defined]


def test_a_registered_nodeclaim_deletes_its_node_and_waits_for_it_before_the_instance() -> None:
    w = world()
    for _ in range(3):  # however often it is woken, nothing more happens while the Node is there
        assert w.claims().reconcile("c1") == Result()
    node = w.api.objects[("nodes", "", "n1")]
    assert node["metadata"]["deletionTimestamp"] == D.format_time(NOW)
    assert not D.has_disrupted_taint(node)  # tainting and draining are the Node's finalizer's
    assert w.cloud.deleted == [] and conditions(w) == {}
    assert "karpenter.sh/termination" in _claim(w)["metadata"]["finalizers"]
    # the Node's finalizer drains it and terminates the instance; then the NodeClaim goes
    w.nodes().reconcile("n1")
    w.clock[0] += D.MIN_DRAIN_TIME
    assert w.nodes().reconcile("n1").requeue_after == pytest.approx(D.INSTANCE_POLL)
    assert w.claims().reconcile("c1") == Result()  # the Node is still there (the instance is shutting down)
    w.cloud.instances.clear()
    w.nodes().reconcile("n1")
    assert w.claims().reconcile("c1") == Result()
    assert w.api.objects == {}
    assert w.cloud.deleted == [PID]  # once, by node termination


def test_an_unregistered_nodeclaim_terminates_its_instance_without_deleting_the_node() -> None:
    w = world(registered=False)
    terminated = counter("NODECLAIMS_TERMINATED")
    assert w.claims().reconcile("c1").requeue_after == pytest.approx(D.INSTANCE_POLL)
    assert w.cloud.deleted == [PID]
    assert conditions(w) == {"InstanceTerminating": "True"}
    assert not w.api.objects[("nodes", "", "n1")]["metadata"].get("deletionTimestamp")
    assert w.claims().reconcile("c1").requeue_after == pytest.approx(D.INSTANCE_POLL)
    assert w.cloud.deleted == [PID]  # asked once, then only looked
    w.cloud.instances.clear()
    assert w.claims().reconcile("c1") == Result()
    assert ("nodeclaims", "", "c1") not in w.api.objects
    assert counter("NODECLAIMS_TERMINATED") - terminated == 1


def test_a_nodeclaim_never_launched_just_lets_go() -> None:
    w = world(registered=False)
    del _claim(w)["status"]["providerID"]
    assert w.claims().reconcile("c1") == Result()
    assert ("nodeclaims", "", "c1") not in w.api.objects
    assert w.cloud.deleted == [] and w.cloud.instances == {PID}


def test_the_grace_period_deadline_is_annotated_once_and_announced() -> None:
    w = world()
    _claim(w)["spec"]["terminationGracePeriod"] = "1h30m"
    w.claims().reconcile("c1")
    value = D.format_time(NOW + 5400)
    assert _claim(w)["metadata"]["annotations"]["karpenter.sh/nodeclaim-termination-timestamp"] == value
    assert w.recorder.events == [("c1", "TerminationGracePeriodExpiring", f"All pods will be deleted by {value}")]
    _claim(w)["spec"]["terminationGracePeriod"] = "10m"
    w.clock[0] += 60
    w.claims().reconcile("c1")
    assert _claim(w)["metadata"]["annotations"]["karpenter.sh/nodeclaim-termination-timestamp"] == value
    assert len(w.recorder.events) == 1


def test_a_deadline_another_controller_set_meanwhile_is_kept() -> None:
    """Node repair stamps the annotation "now" before deleting; a pass that read the NodeClaim before that write
    must not overwrite it (the patch is locked on the resourceVersion read, as Karpenter's)."""
    w = world()
    _claim(w)["spec"]["terminationGracePeriod"] = "1h"
    real_get = w.api.get
    repaired = D.format_time(NOW)

    def racing_get(res, name, namespace=None):
        got = real_get(res, name, namespace)
        if res.plural == "nodeclaims" and "annotations" not in _claim(w)["metadata"]:
            w.api.patch(res, name, {"metadata": {"annotations": {
                "karpenter.sh/nodeclaim-termination-timestamp": repaired}}})
        return got

    w.api.get = racing_get
    assert w.claims().reconcile("c1").requeue_after == pytest.approx(0.1)
    w.api.get = real_get
    w.claims().reconcile("c1")
    assert _claim(w)["metadata"]["annotations"]["karpenter.sh/nodeclaim-termination-timestamp"] == repaired
    assert not [e for e in w.recorder.events if e[1] == "TerminationGracePeriodExpiring"]


def test_the_finalizer_goes_without_dropping_one_added_meanwhile() -> None:
    w = world(registered=False)
    w.cloud.instances.clear()
    real_patch = w.api.patch

    def adding_patch(res, name, body, namespace=None, subresource=None, patch_type="merge"):
        if patch_type == "json" and "other.io/hold" not in _claim(w)["metadata"]["finalizers"]:
            _claim(w)["metadata"]["finalizers"].insert(0, "other.io/hold")  # the JSON patch's test fails
        return real_patch(res, name, body, namespace, subresource, patch_type)

    w.api.patch = adding_patch
    assert w.claims().reconcile("c1") == Result()
    assert _claim(w)["metadata"]["finalizers"] == ["other.io/hold"]


def test_nodeclaim_termination_durations_are_observed_as_karpenter_does() -> None:
    """nodeclaims_termination_duration: the NodeClaim's deletion to its finalizer gone;
    nodeclaims_instance_termination_duration: InstanceTerminating to the cloud saying the instance is gone."""
    w = world(registered=False)
    names = ("NODECLAIMS_TERMINATION_DURATION", "NODECLAIMS_INSTANCE_TERMINATION_DURATION")
    before = {(n, s): histogram(n, s) for n in names for s in ("count", "sum")}
    w.clock[0] += 2
    w.claims().reconcile("c1")
    terminating_at = w.clock[0]
    w.clock[0] += 7
    w.cloud.instances.clear()
    assert w.claims().reconcile("c1") == Result()
    delta = {k: histogram(*k) - v for k, v in before.items()}
    assert delta[("NODECLAIMS_TERMINATION_DURATION", "count")] == 1
    assert delta[("NODECLAIMS_TERMINATION_DURATION", "sum")] == pytest.approx(w.clock[0] - NOW)
    assert delta[("NODECLAIMS_INSTANCE_TERMINATION_DURATION", "count")] == 1
    assert delta[("NODECLAIMS_INSTANCE_TERMINATION_DURATION", "sum")] == pytest.approx(w.clock[0] - terminating_at)


def test_a_nodeclaim_whose_node_went_is_let_go_once_the_instance_is() -> None:
    """The Node's finalizer went first (the instance already gone): the NodeClaim's pass finds no Node and drops
    its finalizer, with no TerminateInstances for an instance already gone."""
    w = world()
    w.api.objects.pop(("nodes", "", "n1"))
    w.cloud.instances.clear()
    assert w.claims().reconcile("c1") == Result()
    assert w.api.objects == {}
    assert w.cloud.deleted == []
