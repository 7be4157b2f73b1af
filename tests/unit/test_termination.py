"""Drain decisions (tiers, which pods are evicted, waited on, deleted or skipped, the terminationGracePeriod deadline,
the per-pod eviction backoff, the conditions' shape), then node termination over an in-memory API for what the
control plane cannot show quickly: volume attachments, taint replacement, a racing writer, fresh controllers every
pass. The NodeClaim finalizer's own tests are in test_nodeclaim_termination.py."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api import conditions as C
from controller.kube import resources as R
from controller.kube.workqueue import Result
from controller.termination import drain as D
from tests.unit.termination_world import NOW, PID, conditions, counter, histogram, world


def pod(name: str = "p", *, critical: bool = False, daemon: bool = False, static: bool = False,
        phase: str = "Running", deleted_at: float | None = None, tgps: int | None = 30,
        annotations: dict[str, str] | None = None, tolerations: list[dict[str, Any]] | None = None,
        started: float | None = None) -> dict[str, Any]:
    owners = []
    if daemon:
        owners.append({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u1", "controller": True})
    if static:
        owners.append({"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u2", "controller": True})
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}", "ownerReferences": owners,
                            "annotations": annotations or {}}
    if deleted_at is not None:
        meta["deletionTimestamp"] = D.format_time(deleted_at)
    spec: dict[str, Any] = {"nodeName": "n1", "tolerations": tolerations or []}
    if tgps is not None:
        spec["terminationGracePeriodSeconds"] = tgps
    if critical:
        spec["priorityClassName"] = "system-cluster-critical"
    status: dict[str, Any] = {"phase": phase}
    if started is not None:
        status["startTime"] = D.format_time(started)
    return {"metadata": meta, "spec": spec, "status": status}


def names(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


# ---- durations and the deadline -------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "seconds"), [
    ("0", 0), ("30s", 30), ("1h30m", 5400), ("1.5h", 5400), ("500ms", 0.5), ("2m3s", 123), ("-1m", -60),
    ("48h", 172800), ("1h0m0s", 3600),
])
def test_go_durations(text: str, seconds: float) -> None:
    assert D.parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1d", "10", "h", "1h 30m", "abc", "1.2.3s"])
def test_not_go_durations(text: str) -> None:
    with pytest.raises(ValueError):
        D.parse_go_duration(text)


def test_termination_timestamp_is_deletion_plus_grace_period() -> None:
    claim: dict[str, Any] = {"metadata": {"name": "c", "deletionTimestamp": "2024-05-01T10:00:00Z"},
                             "spec": {"terminationGracePeriod": "1h30m"}}
    assert D.termination_timestamp(claim) == "2024-05-01T11:30:00Z"
    claim["metadata"]["annotations"] = {"karpenter.sh/nodeclaim-termination-timestamp": "2024-05-01T11:30:00Z"}
    assert D.termination_deadline(claim) == D.parse_time("2024-05-01T11:30:00Z")


def test_no_termination_timestamp_without_deletion_or_grace_period() -> None:
    assert D.termination_timestamp({"metadata": {}, "spec": {"terminationGracePeriod": "1h"}}) is None
    assert D.termination_timestamp({"metadata": {"deletionTimestamp": "2024-05-01T10:00:00Z"}, "spec": {}}) is None
    assert D.termination_timestamp({"metadata": {"deletionTimestamp": "2024-05-01T10:00:00Z"},
                                    "spec": {"terminationGracePeriod": "soon"}}) is None
    assert D.termination_deadline({"metadata": {}}) is None
    assert D.termination_deadline(None) is None


def test_time_round_trip() -> None:
    assert D.parse_time(D.format_time(NOW)) == NOW
    assert D.parse_time("not a time") is None
    assert D.parse_time(None) is None


# ---- tiers --------------------------------------------------------------------------------------------------

def test_tiers() -> None:
    assert D.tier(pod()) == D.TIER_NONCRITICAL
    assert D.tier(pod(critical=True)) == D.TIER_CRITICAL
    assert D.tier(pod(daemon=True)) == D.TIER_NONCRITICAL_DAEMON
    assert D.tier(pod(daemon=True, critical=True)) == D.TIER_CRITICAL_DAEMON
    node_critical = pod()
    node_critical["spec"]["priorityClassName"] = "system-node-critical"
    assert D.tier(node_critical) == D.TIER_CRITICAL


def test_drain_works_one_tier_at_a_time() -> None:
    pods = [pod("a"), pod("b", critical=True), pod("c", daemon=True), pod("d", daemon=True, critical=True)]
    seen = []
    for _ in range(4):
        plan = D.plan_drain(pods, None, NOW)
        assert len(plan.waiting) == len(pods)
        seen.append(names(plan.evict))
        pods = [p for p in pods if p["metadata"]["name"] not in names(plan.evict)]
    # Karpenter's groupPodsByPriority: non-critical, non-critical DaemonSet, critical, critical DaemonSet
    assert seen == [["a"], ["c"], ["b"], ["d"]]
    assert D.plan_drain(pods, None, NOW).drained


def test_daemonset_pods_go_before_critical_pods() -> None:
    pods = [pod("critical", critical=True), pod("daemon", daemon=True)]
    plan = D.plan_drain(pods, None, NOW)
    assert plan.tier == D.TIER_NONCRITICAL_DAEMON
    assert names(plan.evict) == ["daemon"]


def test_a_terminating_pod_holds_the_next_tier_back() -> None:
    pods = [pod("a", deleted_at=NOW - 5), pod("b", critical=True)]
    plan = D.plan_drain(pods, None, NOW)
    assert plan.tier == D.TIER_NONCRITICAL
    assert plan.evict == []
    assert names(plan.waiting) == ["a", "b"]


def test_a_pod_stuck_terminating_no_longer_blocks() -> None:
    plan = D.plan_drain([pod("a", deleted_at=NOW - 61), pod("b", critical=True)], None, NOW)
    assert names(plan.evict) == ["b"]
    assert names(plan.waiting) == ["b"]


# ---- skipped, waited on, evicted -------------------------------------------------------------------------------

def test_skipped_pods() -> None:
    skipped = [
        pod("static", static=True),
        pod("mirror", annotations={"kubernetes.io/config.mirror": "abc"}),
        pod("done", phase="Succeeded"),
        pod("failed", phase="Failed"),
        pod("tolerates", tolerations=[{"key": "karpenter.sh/disrupted", "operator": "Exists"}]),
        pod("tolerates-all", tolerations=[{"operator": "Exists"}]),
        pod("tolerates-noschedule", tolerations=[{"key": "karpenter.sh/disrupted", "operator": "Exists",
                                                  "effect": "NoSchedule"}]),
    ]
    plan = D.plan_drain(skipped, None, NOW)
    assert plan.drained and plan.evict == [] and plan.delete == []


def test_tolerations_that_do_not_match_are_drained() -> None:
    pods = [
        pod("noexecute", tolerations=[{"key": "karpenter.sh/disrupted", "operator": "Exists",
                                       "effect": "NoExecute"}]),
        pod("other-key", tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]),
        pod("wrong-value", tolerations=[{"key": "karpenter.sh/disrupted", "value": "x"}]),
    ]
    assert names(D.plan_drain(pods, None, NOW).evict) == ["noexecute", "other-key", "wrong-value"]
    assert D.tolerates([{"key": "karpenter.sh/disrupted", "operator": "Equal", "value": ""}], D.DISRUPTED_TAINT)


def test_do_not_disrupt_is_waited_on_not_evicted() -> None:
    plan = D.plan_drain([pod("dnd", annotations={"karpenter.sh/do-not-disrupt": "true"}), pod("x")], None, NOW)
    assert names(plan.evict) == ["x"]
    assert names(plan.waiting) == ["dnd", "x"]
    plan = D.plan_drain([pod("dnd", annotations={"karpenter.sh/do-not-disrupt": "true"})], None, NOW)
    assert plan.evict == [] and not plan.drained


def test_do_not_disrupt_durations() -> None:
    young = pod("young", annotations={"karpenter.sh/do-not-disrupt": "10m"}, started=NOW - 60)
    old = pod("old", annotations={"karpenter.sh/do-not-disrupt": "10m"}, started=NOW - 3600)
    unknown = pod("unstarted", annotations={"karpenter.sh/do-not-disrupt": "10m"})
    bad = pod("bad", annotations={"karpenter.sh/do-not-disrupt": "yes"})
    false = pod("false", annotations={"karpenter.sh/do-not-disrupt": "false"})
    assert D.do_not_disrupt_active(young, NOW)
    assert not D.do_not_disrupt_active(old, NOW)
    assert D.do_not_disrupt_active(unknown, NOW)
    assert not D.do_not_disrupt_active(bad, NOW)
    assert not D.do_not_disrupt_active(false, NOW)


# ---- the terminationGracePeriod deadline ----------------------------------------------------------------------

def test_pods_are_deleted_at_deadline_minus_their_grace_period() -> None:
    deadline = NOW + 100
    assert not D.needs_force_delete(pod(tgps=30), deadline, NOW)
    assert not D.needs_force_delete(pod(tgps=30), deadline, deadline - 30)
    assert D.needs_force_delete(pod(tgps=30), deadline, deadline - 29)
    assert D.needs_force_delete(pod(tgps=300), deadline, NOW)
    assert not D.needs_force_delete(pod(tgps=300), None, NOW)
    assert not D.needs_force_delete(pod(tgps=None), deadline, NOW)


def test_a_terminating_pod_is_deleted_again_when_it_would_outlast_the_deadline() -> None:
    deadline = NOW + 100
    assert D.needs_force_delete(pod(deleted_at=NOW + 300), deadline, NOW)
    assert not D.needs_force_delete(pod(deleted_at=NOW + 50), deadline, NOW)


def test_at_the_deadline_everything_left_is_deleted_whatever_its_tier_pdb_or_annotation() -> None:
    deadline = NOW
    pods = [pod("a", tgps=0), pod("b", critical=True), pod("c", daemon=True),
            pod("dnd", annotations={"karpenter.sh/do-not-disrupt": "true"}), pod("done", phase="Succeeded")]
    plan = D.plan_drain(pods, deadline, NOW + 1)
    assert names(plan.delete) == ["a", "b", "c", "dnd"]
    assert plan.evict == []


def test_before_the_deadline_only_long_grace_periods_are_deleted() -> None:
    deadline = NOW + 60
    pods = [pod("short", tgps=10), pod("long", tgps=120), pod("crit", critical=True, tgps=10)]
    plan = D.plan_drain(pods, deadline, NOW)
    assert names(plan.delete) == ["long"]
    assert names(plan.evict) == ["short"]


def test_force_delete_grace() -> None:
    assert D.force_delete_grace(NOW + 42.7, NOW) == 42
    assert D.force_delete_grace(NOW, NOW) == 1
    assert D.force_delete_grace(NOW - 100, NOW) == 1


# ---- volumes -------------------------------------------------------------------------------------------------

def test_volume_attachments_of_undrainable_pods_do_not_block() -> None:
    tolerating = pod("t", tolerations=[{"operator": "Exists"}])
    tolerating["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "pvc-t"}},
                                     {"name": "scratch", "ephemeral": {}}, {"name": "cfg", "configMap": {}}]
    normal = pod("n")
    normal["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "pvc-n"}}]
    assert D.undrainable_pod_claims([tolerating, normal], NOW) == [("default", "pvc-t"), ("default", "t-scratch")]
    vas = [{"metadata": {"name": "va1"}, "spec": {"nodeName": "n1", "source": {"persistentVolumeName": "pv-t"}}},
           {"metadata": {"name": "va2"}, "spec": {"nodeName": "n1", "source": {"persistentVolumeName": "pv-n"}}},
           {"metadata": {"name": "va3"}, "spec": {"nodeName": "n2", "source": {"persistentVolumeName": "pv-x"}}},
           {"metadata": {"name": "va4"}, "spec": {"nodeName": "n1", "source": {"inlineVolumeSpec": {}}}}]
    blocking = D.blocking_volume_attachments(vas, "n1", {"pv-t"})
    assert [v["metadata"]["name"] for v in blocking] == ["va2"]


# ---- nodes, conditions, backoff ------------------------------------------------------------------------------

def test_node_helpers() -> None:
    node = {"spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoExecute"}]},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    assert not D.has_disrupted_taint(node)
    assert not C.node_ready(node)
    node["spec"]["taints"].append({"key": "karpenter.sh/disrupted", "effect": "NoSchedule"})
    node["status"]["conditions"][0]["status"] = "True"
    assert D.has_disrupted_taint(node)
    assert C.node_ready(node)
    assert not C.node_ready({"status": {}})


def test_conditions_keep_their_transition_time_while_the_status_holds() -> None:
    status: dict[str, Any] = {}
    assert D.set_condition(status, "Drained", "Unknown", "Draining", "Draining", NOW, 1)
    assert status["conditions"] == [{"type": "Drained", "status": "Unknown", "reason": "Draining",
                                     "message": "Draining", "lastTransitionTime": D.format_time(NOW),
                                     "observedGeneration": 1}]
    assert not D.set_condition(status, "Drained", "Unknown", "Draining", "Draining", NOW + 10, 1)
    assert D.set_condition(status, "Drained", "True", "Drained", "", NOW + 20, 1)
    assert D.get_condition(status, "Drained") == {"type": "Drained", "status": "True", "reason": "Drained",
                                                  "lastTransitionTime": D.format_time(NOW + 20),
                                                  "observedGeneration": 1}
    assert D.set_condition(status, "Drained", "True", "Drained", "", NOW + 30, 2)
    assert D.get_condition(status, "Drained")["lastTransitionTime"] == D.format_time(NOW + 20)  # type: ignore[index]
    assert len(status["conditions"]) == 1


def test_eviction_backoff_doubles_to_ten_seconds_per_pod() -> None:
    b = D.PodBackoff()
    delays = [b.failed("a", NOW) for _ in range(9)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0])
    assert not b.ready("a", NOW + 9.9)
    assert b.ready("a", NOW + 10)
    assert b.ready("b", NOW)  # another pod is not held back
    assert b.next_try(["a", "b"], NOW) == pytest.approx(10.0)
    assert b.next_try(["b"], NOW) is None
    b.forget("a")
    assert b.ready("a", NOW)
    assert b.failed("a", NOW) == pytest.approx(0.1)


# ---- node termination over an in-memory API (volumes, taint replacement, restarts) -----------------------------

@pytest.fixture
def fake() -> Any:
    """c1 deleted and its finalizer's first pass done: the Node n1 is deleted, its own finalizer holds it."""
    w = world()
    assert w.claims().reconcile("c1") == Result()  # deletes the Node, then waits for it
    assert w.api.objects[("nodes", "", "n1")]["metadata"].get("deletionTimestamp")
    return w


def test_instance_termination_waits_for_volume_attachments(fake: Any) -> None:
    w = fake
    counters = ("NODES_DRAINED", "NODES_TERMINATED", "NODECLAIMS_TERMINATED")
    before = {m: counter(m) for m in counters}
    w.api.add(R.VOLUMEATTACHMENTS, {"metadata": {"name": "va-1"},
                                    "spec": {"nodeName": "n1", "source": {"persistentVolumeName": "pv-1"}}})
    assert w.nodes().reconcile("n1").requeue_after == pytest.approx(1.0)
    assert conditions(w) == {"Drained": "Unknown"}
    w.clock[0] += D.MIN_DRAIN_TIME
    assert w.nodes().reconcile("n1").requeue_after == pytest.approx(1.0)
    assert conditions(w) == {"Drained": "True", "VolumesDetached": "Unknown"}
    assert ("n1", "AwaitingVolumeDetachment", "Awaiting deletion of bound volumeattachments (va-1)") \
        in w.recorder.events
    assert w.cloud.deleted == []
    del w.api.objects[("volumeattachments", "", "va-1")]
    assert w.nodes().reconcile("n1").requeue_after == pytest.approx(D.INSTANCE_POLL)
    assert conditions(w) == {"Drained": "True", "VolumesDetached": "True", "InstanceTerminating": "True"}
    assert w.cloud.deleted == [PID]
    assert w.nodes().reconcile("n1").requeue_after == pytest.approx(D.INSTANCE_POLL)
    assert w.cloud.deleted == [PID]  # deleted once, then polled
    w.cloud.instances.clear()
    assert w.nodes().reconcile("n1").requeue_after is None
    assert ("nodes", "", "n1") not in w.api.objects  # the Node's finalizer went; the NodeClaim's follows
    assert ("nodeclaims", "", "c1") in w.api.objects
    assert w.claims().reconcile("c1").requeue_after is None
    assert w.api.objects == {}
    assert w.cloud.deleted == [PID]
    assert {m: counter(m) - before[m] for m in counters} == dict.fromkeys(counters, 1.0)


def test_volume_attachments_stop_blocking_at_the_deadline(fake: Any) -> None:
    w = fake
    claim = w.api.objects[("nodeclaims", "", "c1")]
    claim["metadata"]["annotations"] = {"karpenter.sh/nodeclaim-termination-timestamp": D.format_time(NOW + 10)}
    w.api.add(R.VOLUMEATTACHMENTS, {"metadata": {"name": "va-1"},
                                    "spec": {"nodeName": "n1", "source": {"persistentVolumeName": "pv-1"}}})
    w.nodes().reconcile("n1")
    assert ("n1", "TerminationGracePeriodExpiring", f"All pods will be deleted by {D.format_time(NOW + 10)}") \
        in w.recorder.events
    w.clock[0] += 11
    assert w.nodes().reconcile("n1").requeue_after == pytest.approx(D.INSTANCE_POLL)
    conds = w.api.objects[("nodeclaims", "", "c1")]["status"]["conditions"]
    assert {c["type"]: (c["status"], c["reason"]) for c in conds}["VolumesDetached"] == \
        ("False", "TerminationGracePeriodElapsed")
    assert w.cloud.deleted == [PID]


def test_volumes_of_pods_the_drain_leaves_do_not_block(fake: Any) -> None:
    w = fake
    w.api.add(R.PODS, {"metadata": {"name": "agent", "namespace": "kube-system"},
                       "spec": {"nodeName": "n1", "tolerations": [{"operator": "Exists"}],
                                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]},
                       "status": {"phase": "Running"}})
    w.api.add(R.PERSISTENTVOLUMECLAIMS, {"metadata": {"name": "data", "namespace": "kube-system"},
                                         "spec": {"volumeName": "pv-1"}})
    w.api.add(R.VOLUMEATTACHMENTS, {"metadata": {"name": "va-1"},
                                    "spec": {"nodeName": "n1", "source": {"persistentVolumeName": "pv-1"}}})
    w.nodes().reconcile("n1")
    w.clock[0] += D.MIN_DRAIN_TIME
    w.nodes().reconcile("n1")
    assert conditions(w)["VolumesDetached"] == "True"
    assert w.cloud.deleted == [PID]
    assert w.api.evicted == []


def test_the_disrupted_taint_replaces_one_of_the_same_key(fake: Any) -> None:
    w = fake
    node = w.api.objects[("nodes", "", "n1")]
    node["spec"]["taints"] = [{"key": "karpenter.sh/disrupted", "effect": "NoExecute"},
                              {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    w.nodes().reconcile("n1")
    node = w.api.objects[("nodes", "", "n1")]
    assert node["spec"]["taints"] == [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                                      {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]
    assert node["metadata"]["labels"]["node.kubernetes.io/exclude-from-external-load-balancers"] == "karpenter"
    rv = node["metadata"]["resourceVersion"]
    w.nodes().reconcile("n1")
    assert w.api.objects[("nodes", "", "n1")]["metadata"]["resourceVersion"] == rv  # nothing to change: no patch


def test_a_pass_that_races_another_writer_looks_again(fake: Any) -> None:
    w = fake
    real_patch = w.api.patch

    def racing_patch(res: Any, name: str, body: Any, namespace: str | None = None, subresource: str | None = None,
                     patch_type: str = "merge") -> Any:
        if subresource == "status":
            w.api.objects[("nodeclaims", "", "c1")]["metadata"]["resourceVersion"] = "changed"
        return real_patch(res, name, body, namespace, subresource, patch_type)

    w.api.patch = racing_patch
    assert w.nodes().reconcile("n1").requeue_after == pytest.approx(0.1)
    w.api.patch = real_patch
    assert w.nodes().reconcile("n1").requeue_after == pytest.approx(1.0)
    assert conditions(w) == {"Drained": "Unknown"}


def test_a_user_deleting_the_node_deletes_its_nodeclaim_and_drains_the_node() -> None:
    w = world()
    del w.api.objects[("nodeclaims", "", "c1")]["metadata"]["deletionTimestamp"]
    w.api.add(R.PODS, {"metadata": {"name": "web", "namespace": "default"},
                       "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30}, "status": {"phase": "Running"}})
    w.api.delete(R.NODES, "n1")
    assert w.nodes().reconcile("n1").requeue_after == pytest.approx(1.0)
    assert w.api.objects[("nodeclaims", "", "c1")]["metadata"].get("deletionTimestamp")
    assert w.api.evicted == ["web"]
    assert ("web", "Evicted", "Evicted pod: Forceful Termination") in w.recorder.events
    w.clock[0] += D.MIN_DRAIN_TIME
    w.cloud.instances.clear()  # terminated at once
    assert w.nodes().reconcile("n1").requeue_after is None
    assert w.cloud.deleted == []  # the instance was already gone when termination came to it
    assert list(w.api.objects) == [("nodeclaims", "", "c1")]
    assert conditions(w) == {"Drained": "True", "VolumesDetached": "True", "InstanceTerminating": "True"}
    assert w.claims().reconcile("c1").requeue_after is None
    assert w.api.objects == {}


def test_a_node_without_a_nodeclaim_is_drained_and_let_go_without_touching_the_instance() -> None:
    w = world()
    del w.api.objects[("nodeclaims", "", "c1")]
    w.api.add(R.PODS, {"metadata": {"name": "web", "namespace": "default"},
                       "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    w.api.delete(R.NODES, "n1")
    drained = counter("NODES_DRAINED")
    assert w.nodes().reconcile("n1").requeue_after == pytest.approx(1.0)
    assert D.has_disrupted_taint(w.api.objects[("nodes", "", "n1")])
    assert w.nodes().reconcile("n1").requeue_after is None  # no NodeClaim: no minimum drain time, no instance
    assert w.api.objects == {}
    assert w.cloud.deleted == [] and w.cloud.instances == {PID}
    assert counter("NODES_DRAINED") == drained  # counted only with a NodeClaim's Drained condition


def test_a_not_ready_node_whose_instance_is_gone_is_let_go_untainted(fake: Any) -> None:
    w = fake
    w.api.objects[("nodes", "", "n1")]["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    w.api.add(R.PODS, {"metadata": {"name": "web", "namespace": "default"},
                       "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    w.cloud.instances.clear()
    assert w.nodes().reconcile("n1") == Result()
    assert ("nodes", "", "n1") not in w.api.objects
    assert w.api.evicted == [] and conditions(w) == {}
    # a Ready Node is drained whatever the cloud says: its kubelet is still running
    w2 = world()
    w2.claims().reconcile("c1")
    w2.cloud.instances.clear()
    w2.api.add(R.PODS, {"metadata": {"name": "web", "namespace": "default"},
                        "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    assert w2.nodes().reconcile("n1").requeue_after == pytest.approx(1.0)
    assert w2.api.evicted == ["web"]


def test_node_termination_durations_and_lifetime_are_observed_as_karpenter_does(fake: Any) -> None:
    """nodes_termination_duration: the Node's deletion to its finalizer gone; nodes_lifetime_duration: its creation
    to its finalizer gone."""
    w = fake
    w.api.objects[("nodes", "", "n1")]["metadata"]["creationTimestamp"] = D.format_time(NOW - 3600)
    names = ("NODES_TERMINATION_DURATION", "NODES_LIFETIME_DURATION")
    before = {(n, s): histogram(n, s) for n in names for s in ("count", "sum")}
    w.nodes().reconcile("n1")
    w.clock[0] += D.MIN_DRAIN_TIME
    w.cloud.instances.clear()
    assert w.nodes().reconcile("n1").requeue_after is None
    delta = {k: histogram(*k) - v for k, v in before.items()}
    assert delta[("NODES_TERMINATION_DURATION", "count")] == 1
    assert delta[("NODES_TERMINATION_DURATION", "sum")] == pytest.approx(w.clock[0] - NOW)
    assert delta[("NODES_LIFETIME_DURATION", "count")] == 1
    assert delta[("NODES_LIFETIME_DURATION", "sum")] == pytest.approx(w.clock[0] - (NOW - 3600))


# ---- one Taint type, one toleration matcher ----

@pytest.mark.parametrize(("toleration", "taint", "expected"), [
    ({"operator": "Exists"}, {"key": "a", "value": "x", "effect": "NoExecute"}, True),
    ({"operator": "Exists", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}, False),
    ({"key": "a", "operator": "Exists"}, {"key": "a", "value": "x", "effect": "NoSchedule"}, True),
    ({"key": "a", "value": "x"}, {"key": "a", "value": "x", "effect": "NoSchedule"}, True),  # Equal by default
    ({"key": "a", "value": "y"}, {"key": "a", "value": "x", "effect": "NoSchedule"}, False),
    ({"key": "a"}, {"key": "a", "effect": "NoSchedule"}, True),  # empty value equals empty value
    ({"key": "b", "operator": "Exists"}, {"key": "a", "effect": "NoSchedule"}, False),
    ({"value": "x"}, {"key": "a", "value": "x", "effect": "NoSchedule"}, False),  # no key: only Exists matches all
    ({"key": "a", "operator": "Lt", "value": "x"}, {"key": "a", "value": "x", "effect": "NoSchedule"}, False),
])
def test_the_drain_and_the_scheduler_tolerate_by_one_rule(toleration: dict[str, Any], taint: dict[str, Any],
                                                           expected: bool) -> None:
    from controller.api import models
    from controller.api.taints import Taint
    from controller.scheduling import types as scheduling_types
    from controller.scheduling.pod import Toleration

    assert models.Taint is scheduling_types.Taint is Taint  # one type
    assert D.tolerates([toleration], taint) is expected
    typed = Toleration(**{k: v for k, v in toleration.items()})
    assert Taint.from_dict(taint).tolerated_by((typed,)) is expected
    assert scheduling_types.untolerated([Taint.from_dict(taint)], (typed,)) == (
        None if expected else Taint.from_dict(taint))
    assert Taint.from_dict(taint).to_dict() == {k: v for k, v in taint.items() if v}
