"""NodeClaim lifecycle held to Karpenter's (pkg/controllers/nodeclaim/lifecycle): registration copies annotations to
the Node, liveness leaves a Registered NodeClaim alone, a failed launch leaves Launched Unknown and backs off 1 s to
1 min, and the deletions liveness and launch make are counted in karpenter_nodeclaims_disrupted_total."""

from __future__ import annotations

import pytest

from controller import metrics as M
from controller.api import conditions as C
from controller.api import labels as L
from controller.kube import resources as R
from controller.lifecycle.controller import lifecycle_queue
from tests.unit.kubefake import stamp
from tests.unit.test_provisioning import _launched_claim, _pending, _world

T0 = 1_700_000_000.0


def _disrupted(reason: str, capacity_type: str = "on-demand") -> float:
    return M.REGISTRY.get_sample_value("karpenter_nodeclaims_disrupted_total", {
        "reason": reason, "nodepool": "general", "capacity_type": capacity_type, "consolidation_policy": "",
        "termination_mode": ""}) or 0.0


def _node(w, provider_id: str = "aws:///us-east-1a/i-0001") -> None:
    w.kube.add(R.NODES, {"metadata": {"name": "n1", "labels": {}},
                         "spec": {"providerID": provider_id, "taints": [
                             {"key": L.UNREGISTERED_TAINT_KEY, "effect": "NoExecute"}]},
                         "status": {"conditions": [{"type": "Ready", "status": "True"}]}})


def test_registration_copies_the_nodeclaims_annotations_to_the_node() -> None:
    w = _world()
    name = _launched_claim(w, created=T0, launched=T0 + 10, registered_since=T0)
    w.kube.patch(R.NODECLAIMS, name, {"metadata": {"annotations": {"example.com/owner": "team-a"}}})
    _node(w)
    w.lifecycle.reconcile(name)
    node = w.kube.get(R.NODES, "n1")
    assert node["metadata"]["annotations"]["example.com/owner"] == "team-a"
    assert C.is_true(w.kube.get(R.NODECLAIMS, name)["status"], "Registered")


def test_a_registered_nodeclaim_whose_node_vanished_is_not_a_registration_timeout() -> None:
    w = _world()
    name = _launched_claim(w, created=T0, launched=T0 + 10, registered_since=None)
    w.kube.patch(R.NODECLAIMS, name, {"metadata": {"labels": {L.CAPACITY_TYPE: "on-demand"}}, "status": {
        "nodeName": "gone", "conditions": [
            {"type": "Launched", "status": "True", "reason": "Launched", "lastTransitionTime": stamp(T0 + 10)},
            {"type": "Registered", "status": "True", "reason": "Registered", "lastTransitionTime": stamp(T0 + 20)}]}})
    before = _disrupted("registration_timeout")
    w.kube.now = T0 + 3600
    w.lifecycle.reconcile(name)
    assert not w.kube.get(R.NODECLAIMS, name)["metadata"].get("deletionTimestamp")
    assert _disrupted("registration_timeout") == before


@pytest.mark.parametrize(("reason", "launched", "after"), [("registration_timeout", T0 + 10, 901),
                                                           ("launch_timeout", None, 301)])
def test_liveness_timeouts_are_counted_as_disruptions(reason: str, launched: float | None, after: float) -> None:
    w = _world()
    if launched is None:  # cannot launch: it waits
        w.kube.patch(R.EC2NODECLASSES, "default", {"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "SubnetsNotFound"}]}})
    name = _launched_claim(w, created=T0, launched=launched, registered_since=T0 if launched else None)
    w.kube.patch(R.NODECLAIMS, name, {"metadata": {"labels": {L.CAPACITY_TYPE: "on-demand"}}})
    before = _disrupted(reason)
    w.kube.now = T0 + after
    w.lifecycle.reconcile(name)
    assert w.kube.get(R.NODECLAIMS, name)["metadata"].get("deletionTimestamp")
    assert _disrupted(reason) == before + 1


def test_insufficient_capacity_is_counted_as_a_disruption() -> None:
    w = _world()
    _pending(w.kube, "p1")
    [name] = w.prov.schedule().created
    w.cloud.ice = True
    # a NodeClaim not launched yet has no capacity-type label: Karpenter's label value is empty then
    capacity_type = w.kube.get(R.NODECLAIMS, name)["metadata"].get("labels", {}).get(L.CAPACITY_TYPE, "")
    before = _disrupted("insufficient_capacity", capacity_type)
    w.lifecycle.reconcile(name)
    w.lifecycle.reconcile(name)
    assert w.kube.get(R.NODECLAIMS, name)["metadata"].get("deletionTimestamp")
    assert _disrupted("insufficient_capacity", capacity_type) == before + 1


def test_a_failed_launch_leaves_launched_unknown_and_is_retried() -> None:
    w = _world()
    _pending(w.kube, "p1")
    [name] = w.prov.schedule().created

    def broken(request, nodeclass):
        raise RuntimeError("CreateFleet: connection reset")

    w.cloud.create = broken
    w.lifecycle.reconcile(name)  # the finalizer
    with pytest.raises(RuntimeError):
        w.lifecycle.reconcile(name)
    launched = C.get(w.kube.get(R.NODECLAIMS, name)["status"], "Launched") or {}
    assert launched.get("status") == "Unknown"
    assert launched.get("reason") == "LaunchFailed"
    assert "connection reset" in launched.get("message", "")


def test_launch_errors_back_off_from_one_second_to_one_minute() -> None:
    queue = lifecycle_queue()
    delays = []
    for _ in range(9):
        delays.append(queue.next_backoff("c"))
        queue.add_rate_limited("c")
    queue.shutdown()
    assert delays[0] == pytest.approx(1.0)
    assert delays[1] == pytest.approx(2.0)
    assert delays[-1] == pytest.approx(60.0)


@pytest.mark.parametrize(("taint", "initialized"), [
    ({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}, True),  # not in Karpenter's list
    ({"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}, False),
    ({"key": "readiness.k8s.io/network", "effect": "NoSchedule"}, False),  # a known ephemeral key prefix
])
def test_initialization_waits_for_karpenters_known_ephemeral_taints(taint: dict, initialized: bool) -> None:
    w = _world()
    name = _launched_claim(w, created=T0, launched=T0 + 10, registered_since=T0)
    w.kube.add(R.NODES, {"metadata": {"name": "n1", "labels": {}},
                         "spec": {"providerID": "aws:///us-east-1a/i-0001", "taints": [taint]},
                         "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    w.lifecycle.reconcile(name)  # registration
    w.lifecycle.reconcile(name)  # initialization
    status = w.kube.get(R.NODECLAIMS, name)["status"]
    assert C.is_true(status, "Registered")
    assert C.is_true(status, "Initialized") == initialized, C.get(status, "Initialized")
