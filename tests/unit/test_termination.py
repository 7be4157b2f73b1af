"""Drain decisions (tiers, which pods are evicted, waited on, deleted or skipped, the terminationGracePeriod deadline,
the per-pod eviction backoff, the conditions' shape), then the Terminator over an in-memory API for what the control
plane cannot show quickly: volume attachments, taint replacement, a racing writer, fresh instances every pass."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest

from controller.api import conditions as C
from controller.cloud.errors import NodeClaimNotFoundError
from controller.kube import resources as R
from controller.kube.errors import ConflictError, InvalidError, NotFoundError
from controller.state.views import NodeClaimView, NodeView, PodView
from controller.termination import drain as D
from controller.termination.controller import Terminator

NOW = 1_700_000_000.0


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


# ---- the Terminator over an in-memory API (volumes, taint replacement, restarts) -------------------------------

class FakeAPI:
    """Just enough of KubeClient for the Terminator: objects by (plural, namespace, name), deletion with
    finalizers, merge / strategic / JSON patches of the shapes the Terminator sends, evictions."""

    def __init__(self, clock: list[float]) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.clock = clock
        self.rv = 1
        self.evicted: list[str] = []

    def add(self, res: Any, obj: dict[str, Any]) -> None:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(self.rv)
        self.rv += 1
        obj.setdefault("kind", res.kind)
        self.objects[(res.plural, meta.get("namespace") or "", meta["name"])] = obj

    def _key(self, res: Any, name: str, namespace: str | None) -> tuple[str, str, str]:
        key = (res.plural, namespace or "", name)
        if key not in self.objects:
            raise NotFoundError(404, "NotFound", name)
        return key

    def get(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        assert res.plural != "persistentvolumeclaims", "termination reads PVCs from the informer"
        return copy.deepcopy(self.objects[self._key(res, name, namespace)])

    def list(self, res: Any, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[dict[str, Any]], str]:
        assert res.plural != "volumeattachments", "termination reads VolumeAttachments from the indexed informer"
        return [copy.deepcopy(o) for (p, ns, _), o in self.objects.items()
                if p == res.plural and (namespace is None or ns == namespace)], str(self.rv)

    def patch(self, res: Any, name: str, body: Any, namespace: str | None = None, subresource: str | None = None,
              patch_type: str = "merge") -> dict[str, Any]:
        key = self._key(res, name, namespace)
        obj = self.objects[key]
        if patch_type == "json":
            for op in body:
                index = int(op["path"].rsplit("/", 1)[1])
                if op["op"] == "test" and obj["metadata"]["finalizers"][index] != op["value"]:
                    raise InvalidError(422, "Invalid", "test failed")
                if op["op"] == "remove":
                    del obj["metadata"]["finalizers"][index]
        else:
            body = dict(body)
            meta = dict(body.pop("metadata", {}) or {})
            rv = meta.pop("resourceVersion", None)
            if rv is not None and rv != obj["metadata"]["resourceVersion"]:
                raise ConflictError(409, "Conflict", "stale")
            drop = meta.pop("$deleteFromPrimitiveList/finalizers", [])
            obj["metadata"]["finalizers"] = [f for f in obj["metadata"].get("finalizers") or [] if f not in drop]
            for k, v in meta.items():
                obj["metadata"].setdefault(k, {}).update(v)
            for section, value in body.items():
                if patch_type == "strategic" and section == "spec" and "taints" in value:
                    taints = [t for t in obj["spec"].get("taints") or []
                              if t["key"] not in {n["key"] for n in value["taints"]}]
                    obj["spec"]["taints"] = taints + value["taints"]
                else:
                    obj.setdefault(section, {}).update(value)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.rv += 1
        if obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
            del self.objects[key]
        return self.get(res, name, namespace) if key in self.objects else obj

    def delete(self, res: Any, name: str, namespace: str | None = None, grace_period_seconds: int | None = None,
               uid: str | None = None) -> None:
        key = self._key(res, name, namespace)
        obj = self.objects[key]
        if obj["metadata"].get("finalizers"):
            obj["metadata"].setdefault("deletionTimestamp", D.format_time(self.clock[0]))
        else:
            del self.objects[key]

    def evict(self, namespace: str, name: str, grace_period_seconds: int | None = None,
              uid: str | None = None) -> None:
        self._key(type("P", (), {"plural": "pods"}), name, namespace)
        if uid != self.objects[("pods", namespace, name)]["metadata"]["uid"]:  # the API's precondition check
            raise ConflictError(409, "Conflict", "Precondition failed: UID in precondition does not match")
        self.evicted.append(name)
        del self.objects[("pods", namespace, name)]


class FakeState:
    """The Cluster reads the Terminator makes, straight from the FakeAPI (as the Cluster's typed views)."""

    def __init__(self, api: FakeAPI) -> None:
        self.api = api

    def pods_on_node(self, node: str) -> list[PodView]:
        return [PodView(o) for (p, _, _), o in self.api.objects.items()
                if p == "pods" and o["spec"].get("nodeName") == node]

    def node_for_provider_id(self, pid: str) -> NodeView | None:
        return next((NodeView(o) for (p, _, _), o in self.api.objects.items()
                     if p == "nodes" and o["spec"].get("providerID") == pid), None)

    def nodeclaim_for_provider_id(self, pid: str) -> NodeClaimView | None:
        return next((NodeClaimView(o) for (p, _, _), o in self.api.objects.items()
                     if p == "nodeclaims" and (o.get("status") or {}).get("providerID") == pid), None)

    def volume_attachments_on_node(self, node: str) -> list[dict[str, Any]]:
        return [o for (p, _, _), o in self.api.objects.items()
                if p == "volumeattachments" and o["spec"].get("nodeName") == node]

    def persistent_volume_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.api.objects.get(("persistentvolumeclaims", namespace, name))


class FakeCloud:
    def __init__(self, pid: str) -> None:
        self.instances = {pid}
        self.deleted: list[str] = []

    def get(self, pid: str) -> None:
        if pid not in self.instances:
            raise NodeClaimNotFoundError(pid)

    def delete(self, pid: str) -> None:
        self.get(pid)
        self.deleted.append(pid)


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def publish(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], reason, message))


PID = "aws:///us-east-1a/i-0abc"


@pytest.fixture
def fake() -> Any:
    clock = [NOW]
    api = FakeAPI(clock)
    api.add(R.NODES, {"metadata": {"name": "n1", "finalizers": ["karpenter.sh/termination"], "labels": {}},
                      "spec": {"providerID": PID},
                      "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    api.add(R.NODECLAIMS, {"metadata": {"name": "c1", "finalizers": ["karpenter.sh/termination"]},
                           "spec": {}, "status": {"providerID": PID, "nodeName": "n1"}})
    api.delete(R.NODECLAIMS, "c1")
    cloud = FakeCloud(PID)
    recorder = FakeRecorder()
    return SimpleNamespace(api=api, clock=clock, cloud=cloud, recorder=recorder,
                           terminator=lambda: Terminator(api, FakeState(api), cloud, recorder,
                                                         clock=lambda: clock[0]))


def _conditions(w: Any) -> dict[str, str]:
    claim = w.api.objects.get(("nodeclaims", "", "c1"))
    return {c["type"]: c["status"] for c in ((claim or {}).get("status") or {}).get("conditions") or []}


def _sample(name: str) -> float:
    """A counter of controller.metrics by constant name, for the labels a label-less fake object gets (all empty)."""
    from controller import metrics
    metric = getattr(metrics, name)
    labels = dict.fromkeys(metric._labelnames, "")
    return metrics.REGISTRY.get_sample_value(f"{metric._name}_total", labels) or 0.0


def test_instance_termination_waits_for_volume_attachments(fake: Any) -> None:
    w = fake
    counters = ("NODES_DRAINED", "NODES_TERMINATED", "NODECLAIMS_TERMINATED")
    before = {m: _sample(m) for m in counters}
    w.api.add(R.VOLUMEATTACHMENTS, {"metadata": {"name": "va-1"},
                                    "spec": {"nodeName": "n1", "source": {"persistentVolumeName": "pv-1"}}})
    assert w.terminator().reconcile_nodeclaim("c1").requeue_after == pytest.approx(1.0)
    assert _conditions(w) == {"Drained": "Unknown"}
    w.clock[0] += D.MIN_DRAIN_TIME
    assert w.terminator().reconcile_nodeclaim("c1").requeue_after == pytest.approx(1.0)
    assert _conditions(w) == {"Drained": "True", "VolumesDetached": "Unknown"}
    assert ("n1", "AwaitingVolumeDetachment", "Awaiting deletion of bound volumeattachments (va-1)") \
        in w.recorder.events
    assert w.cloud.deleted == []
    del w.api.objects[("volumeattachments", "", "va-1")]
    assert w.terminator().reconcile_nodeclaim("c1").requeue_after == pytest.approx(D.INSTANCE_POLL)
    assert _conditions(w) == {"Drained": "True", "VolumesDetached": "True", "InstanceTerminating": "True"}
    assert w.cloud.deleted == [PID]
    assert w.terminator().reconcile_nodeclaim("c1").requeue_after == pytest.approx(D.INSTANCE_POLL)
    assert w.cloud.deleted == [PID]  # deleted once, then polled
    w.cloud.instances.clear()
    assert w.terminator().reconcile_nodeclaim("c1").requeue_after is None
    assert w.api.objects == {}  # Node and NodeClaim both gone
    assert {m: _sample(m) - before[m] for m in counters} == dict.fromkeys(counters, 1.0)


def test_volume_attachments_stop_blocking_at_the_deadline(fake: Any) -> None:
    w = fake
    claim = w.api.objects[("nodeclaims", "", "c1")]
    claim["metadata"]["annotations"] = {"karpenter.sh/nodeclaim-termination-timestamp": D.format_time(NOW + 10)}
    w.api.add(R.VOLUMEATTACHMENTS, {"metadata": {"name": "va-1"},
                                    "spec": {"nodeName": "n1", "source": {"persistentVolumeName": "pv-1"}}})
    w.terminator().reconcile_nodeclaim("c1")
    w.clock[0] += 11
    assert w.terminator().reconcile_nodeclaim("c1").requeue_after == pytest.approx(D.INSTANCE_POLL)
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
    w.terminator().reconcile_nodeclaim("c1")
    w.clock[0] += D.MIN_DRAIN_TIME
    w.terminator().reconcile_nodeclaim("c1")
    assert _conditions(w)["VolumesDetached"] == "True"
    assert w.cloud.deleted == [PID]
    assert w.api.evicted == []


def test_the_disrupted_taint_replaces_one_of_the_same_key(fake: Any) -> None:
    w = fake
    node = w.api.objects[("nodes", "", "n1")]
    node["spec"]["taints"] = [{"key": "karpenter.sh/disrupted", "effect": "NoExecute"},
                              {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    w.terminator().reconcile_nodeclaim("c1")
    node = w.api.objects[("nodes", "", "n1")]
    assert node["spec"]["taints"] == [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                                      {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]
    assert node["metadata"]["labels"]["node.kubernetes.io/exclude-from-external-load-balancers"] == "karpenter"
    rv = node["metadata"]["resourceVersion"]
    w.terminator().reconcile_nodeclaim("c1")
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
    assert w.terminator().reconcile_nodeclaim("c1").requeue_after == pytest.approx(0.1)
    w.api.patch = real_patch
    assert w.terminator().reconcile_nodeclaim("c1").requeue_after == pytest.approx(1.0)
    assert _conditions(w) == {"Drained": "Unknown"}


def test_the_node_flow_deletes_the_nodeclaim_and_follows_it(fake: Any) -> None:
    w = fake
    claim = w.api.objects[("nodeclaims", "", "c1")]
    del claim["metadata"]["deletionTimestamp"]
    w.api.add(R.PODS, {"metadata": {"name": "web", "namespace": "default"},
                       "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30}, "status": {"phase": "Running"}})
    w.api.delete(R.NODES, "n1")
    assert w.terminator().reconcile_node("n1").requeue_after == pytest.approx(1.0)
    assert w.api.objects[("nodeclaims", "", "c1")]["metadata"].get("deletionTimestamp")
    assert w.api.evicted == ["web"]
    w.clock[0] += D.MIN_DRAIN_TIME
    w.cloud.instances.clear()  # terminated at once
    assert w.terminator().reconcile_node("n1").requeue_after is None
    assert w.cloud.deleted == []  # the instance was already gone when termination came to it
    assert w.api.objects == {}


def _histogram(name: str, suffix: str) -> float:
    """A histogram's _count or _sum (by the metric's constant name), for empty labels."""
    from controller import metrics
    metric = getattr(metrics, name)
    labels = dict.fromkeys(metric._labelnames, "")
    return metrics.REGISTRY.get_sample_value(f"{metric._name}_{suffix}", labels) or 0.0


def test_termination_durations_and_node_lifetime_are_observed_as_karpenter_does(fake: Any) -> None:
    """nodeclaims_termination_duration: deletion to finalizer gone; instance_termination_duration: InstanceTerminating
    to the instance gone; nodes_lifetime_duration: the Node's creation to its finalizer gone; and the NodeClaim is
    counted terminated once."""
    w = fake
    w.api.objects[("nodes", "", "n1")]["metadata"]["creationTimestamp"] = D.format_time(NOW - 3600)
    names = ("NODECLAIMS_TERMINATION_DURATION", "NODECLAIMS_INSTANCE_TERMINATION_DURATION", "NODES_LIFETIME_DURATION")
    before = {(n, s): _histogram(n, s) for n in names for s in ("count", "sum")}
    terminated = _sample("NODECLAIMS_TERMINATED")
    w.terminator().reconcile_nodeclaim("c1")
    w.clock[0] += D.MIN_DRAIN_TIME
    assert w.terminator().reconcile_nodeclaim("c1").requeue_after == pytest.approx(D.INSTANCE_POLL)
    terminating_at = w.clock[0]
    w.clock[0] += 7
    w.cloud.instances.clear()
    assert w.terminator().reconcile_nodeclaim("c1").requeue_after is None
    delta = {k: _histogram(*k) - v for k, v in before.items()}
    assert delta[("NODECLAIMS_TERMINATION_DURATION", "count")] == 1
    assert delta[("NODECLAIMS_TERMINATION_DURATION", "sum")] == pytest.approx(w.clock[0] - NOW)
    assert delta[("NODECLAIMS_INSTANCE_TERMINATION_DURATION", "count")] == 1
    assert delta[("NODECLAIMS_INSTANCE_TERMINATION_DURATION", "sum")] == pytest.approx(w.clock[0] - terminating_at)
    assert delta[("NODES_LIFETIME_DURATION", "count")] == 1
    assert delta[("NODES_LIFETIME_DURATION", "sum")] == pytest.approx(w.clock[0] - (NOW - 3600))
    assert _sample("NODECLAIMS_TERMINATED") - terminated == 1


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
