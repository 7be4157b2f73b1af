"""Karpenter's metric names, labels and help texts scraped from the real /metrics server; /healthz and /readyz
following their callbacks; bounded label values; measure()."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from importlib import metadata

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller import metrics as M
from controller.cloud.metered import MeteredCloudProvider
from controller.health import Servers, serve
from controller.kube import resources as R
from controller.nodeclaim.termination import NodeClaimTerminationController

# Karpenter's exposition names (counters with their _total) and label names (Karpenter v1.14)
KARPENTER = {
    "karpenter_nodeclaims_created_total": ("counter", {"reason", "nodepool", "min_values_relaxed"}),
    "karpenter_nodeclaims_terminated_total": ("counter", {"nodepool", "capacity_type", "zone"}),
    "karpenter_nodeclaims_disrupted_total": ("counter", {"reason", "nodepool", "capacity_type", "consolidation_policy",
                                                         "termination_mode"}),
    "karpenter_nodes_created_total": ("counter", {"nodepool", "zone"}),
    "karpenter_nodes_terminated_total": ("counter", {"nodepool", "zone"}),
    "karpenter_nodes_drained_total": ("counter", {"nodepool"}),
    "karpenter_pods_state": ("gauge", {"name", "namespace", "owner", "node", "scheduled", "nodepool", "zone", "arch",
                                       "capacity_type", "instance_type", "phase", "ready", "managed"}),
    "karpenter_pods_drained_total": ("counter", {"reason"}),
    "karpenter_pods_eviction_requests_total": ("counter", {"code"}),
    "karpenter_scheduler_scheduling_duration_seconds": ("histogram", {"controller"}),
    "karpenter_scheduler_queue_depth": ("gauge", {"controller", "scheduling_id"}),
    "karpenter_nodepools_usage": ("gauge", {"resource_type", "nodepool"}),
    "karpenter_nodepools_limit": ("gauge", {"resource_type", "nodepool"}),
    "karpenter_cloudprovider_duration_seconds": ("histogram", {"controller", "method", "provider"}),
    "karpenter_cloudprovider_errors_total": ("counter", {"controller", "method", "provider", "error"}),
    "karpenter_interruption_received_messages_total": ("counter", {"message_type"}),
    "karpenter_interruption_deleted_messages_total": ("counter", set()),
    "karpenter_interruption_message_queue_duration_seconds": ("histogram", set()),
    "karpenter_cluster_state_synced": ("gauge", set()),
    "karpenter_cluster_state_node_count": ("gauge", set()),
    "karpenter_build_info": ("gauge", {"version", "goversion", "goarch", "commit"}),
}


def _touch_every_metric() -> None:
    """One sample in each labelled metric, so the scrape shows its label names."""
    M.NODECLAIMS_CREATED.labels(reason="provisioned", nodepool="default").inc()
    M.NODECLAIMS_TERMINATED.labels(nodepool="default", capacity_type="spot", zone="us-west-2a").inc()
    M.NODECLAIMS_DISRUPTED.labels(reason="interruption", nodepool="default", capacity_type="spot").inc()
    M.NODES_CREATED.labels(nodepool="default", zone="us-west-2a").inc()
    M.NODES_TERMINATED.labels(nodepool="default", zone="us-west-2a").inc()
    M.NODES_DRAINED.labels(nodepool="default").inc()
    M.PODS_STATE.labels(name="a", namespace="b", owner="", node="n", scheduled="true", nodepool="default",
                        zone="us-west-2a", arch="amd64", capacity_type="spot", instance_type="m5.large",
                        phase="Running", ready="true", managed="true").set(1)
    M.PODS_DRAINED.labels(reason="deleted").inc()
    M.EVICTION_REQUESTS.labels(code="200").inc()
    M.SCHEDULING_DURATION.labels(controller="provisioner").observe(0.2)
    M.SCHEDULER_QUEUE_DEPTH.labels(controller="provisioner", scheduling_id="1").set(3)
    M.NODEPOOLS_USAGE.labels(resource_type="cpu", nodepool="default").set(4)
    M.NODEPOOLS_LIMIT.labels(resource_type="cpu", nodepool="default").set(100)
    M.CLOUDPROVIDER_DURATION.labels(controller="nodeclaim.lifecycle", method="Create", provider="aws").observe(1)
    M.CLOUDPROVIDER_ERRORS.labels(controller="nodeclaim.lifecycle", method="Create", provider="aws",
                                  error="InsufficientCapacityError").inc()
    M.INTERRUPTION_RECEIVED.labels(message_type="spot_interrupted").inc()
    M.INTERRUPTION_DELETED.inc()
    M.INTERRUPTION_MESSAGE_QUEUE_DURATION.observe(2.5)
    M.CLUSTER_STATE_SYNCED.set(1)
    M.CLUSTER_STATE_NODE_COUNT.set(3)


@pytest.fixture
def servers() -> Iterator[tuple[Servers, dict[str, bool]]]:
    state = {"ready": False, "healthy": True}
    s = serve(0, 0, ready=lambda: state["ready"], healthy=lambda: state["healthy"], host="127.0.0.1")
    yield s, state
    s.stop()


def _get(port: int, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def test_karpenters_metric_names_labels_and_types_are_scraped(servers):
    s, _ = servers
    _touch_every_metric()
    status, ctype, body = _get(s.metrics_port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body)}
    samples = {sample.name: sample for f in families.values() for sample in f.samples}
    for name, (kind, labels) in KARPENTER.items():
        family = name.removesuffix("_total") if kind == "counter" else name
        assert family in families, name
        assert families[family].type == kind, name
        assert f"# HELP {name} " in body and f"# TYPE {name} {kind}" in body, name
        sample = samples.get(name) or samples.get(name + "_count")
        assert sample is not None and set(sample.labels) == labels, (name, sample)
    assert not [n for n in samples if n.endswith("_created")]  # no prometheus_client extras
    assert "process_resident_memory_bytes" in samples


def test_help_texts_are_karpenters():
    assert M.NODECLAIMS_CREATED._documentation == (
        "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created, the owning "
        "nodepool, and if min values was relaxed for this nodeclaim.")
    assert M.SCHEDULER_QUEUE_DEPTH._documentation == "The number of pods currently waiting to be scheduled."
    assert M.CLOUDPROVIDER_ERRORS._documentation == "Total number of errors returned from CloudProvider calls."
    assert M.INTERRUPTION_DELETED._documentation == "Count of messages deleted from the SQS queue."


def test_build_info_labels():
    labels = M.build_labels()
    assert labels["version"] == metadata.version("karpy")
    assert labels["goversion"].startswith("python3.")
    assert labels["goarch"] in ("amd64", "arm64") or labels["goarch"]
    assert M.REGISTRY.get_sample_value("karpenter_build_info", labels) == 1.0


def test_keyword_labels_are_lenient_but_not_careless():
    before = M.REGISTRY.get_sample_value("karpenter_nodeclaims_created_total", {
        "reason": "provisioned", "nodepool": "lenient", "min_values_relaxed": "false"}) or 0
    # capacity_type is a label of Karpenter v1.0's metric: dropped; min_values_relaxed left out: "false"
    M.NODECLAIMS_CREATED.labels(reason="provisioned", nodepool="lenient", capacity_type="spot").inc()
    assert M.REGISTRY.get_sample_value("karpenter_nodeclaims_created_total", {
        "reason": "provisioned", "nodepool": "lenient", "min_values_relaxed": "false"}) == before + 1
    M.NODES_TERMINATED.labels(nodepool="lenient").inc()  # zone left out: ""
    assert M.REGISTRY.get_sample_value("karpenter_nodes_terminated_total", {"nodepool": "lenient", "zone": ""}) == 1
    with pytest.raises(ValueError, match="nodepol"):
        M.NODES_CREATED.labels(nodepol="typo")
    M.PODS_DRAINED.labels("positional").inc()  # positional values keep prometheus_client's rules
    with pytest.raises(ValueError):
        M.PODS_DRAINED.labels("a", "b")


def test_bounded_label_values():
    allowed = frozenset({"Create", "Delete"})
    assert M.bounded("Create", allowed) == "Create"
    assert M.bounded("DROP TABLE", allowed) == "other"
    assert M.bounded("x", allowed, other="") == ""


def test_measure_observes_also_when_the_block_raises():
    labels = {"controller": "measure-test", "method": "Delete", "provider": "aws"}
    with M.measure(M.CLOUDPROVIDER_DURATION, **labels):
        pass
    with pytest.raises(RuntimeError), M.measure(M.CLOUDPROVIDER_DURATION, **labels):
        raise RuntimeError("x")
    assert M.REGISTRY.get_sample_value("karpenter_cloudprovider_duration_seconds_count", labels) == 2
    before = M.REGISTRY.get_sample_value("karpenter_interruption_message_queue_duration_seconds_count") or 0
    with M.measure(M.INTERRUPTION_MESSAGE_QUEUE_DURATION):
        pass
    assert M.REGISTRY.get_sample_value("karpenter_interruption_message_queue_duration_seconds_count") == before + 1


def test_healthz_and_readyz_follow_their_callbacks(servers):
    s, state = servers
    assert s.metrics_port != s.health_port and s.metrics_port > 0 and s.health_port > 0
    assert _get(s.health_port, "/healthz")[::2] == (200, "ok\n")
    status, _, body = _get(s.health_port, "/readyz")
    assert status == 500 and body.count("\n") == 1 and "not ready" in body
    state["ready"] = True
    assert _get(s.health_port, "/readyz")[::2] == (200, "ok\n")
    state["healthy"] = False
    status, _, body = _get(s.health_port, "/healthz")
    assert status == 500 and body.count("\n") == 1
    state["ready"] = False
    assert _get(s.health_port, "/readyz")[0] == 500
    assert _get(s.health_port, "/metrics")[0] == 404 and _get(s.metrics_port, "/readyz")[0] == 404


def test_a_probe_that_raises_is_a_500_with_one_line():
    def broken() -> bool:
        raise ConnectionError("apiserver\nunreachable")

    s = serve(0, 0, ready=broken, host="127.0.0.1")
    try:
        status, _, body = _get(s.health_port, "/readyz")
        assert status == 500 and body == "readyz check failed: ConnectionError: apiserver unreachable\n"
        assert _get(s.health_port, "/healthz")[0] == 200
    finally:
        s.stop()


def test_one_port_for_both_and_stop_releases_the_ports():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    s = serve(port, port, ready=lambda: True, host="127.0.0.1")
    try:
        assert s.metrics_port == s.health_port == port
        assert _get(port, "/metrics")[0] == 200 and _get(port, "/readyz")[0] == 200
    finally:
        s.stop()
        s.stop()  # idempotent
    s2 = serve(port, 0, ready=lambda: True, host="127.0.0.1")  # the port is free again
    s2.stop()


def test_a_taken_port_raises_and_leaks_nothing():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            serve(0, taken.getsockname()[1], ready=lambda: True, host="127.0.0.1")


# ---- metrics set by the code that acts (driven through the controllers, read from the registry) ---------------------

def _value(name: str, **labels: str) -> float:
    return M.REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_nodeclaim_the_lifecycle_deletes_is_counted_terminated_only_when_its_finalizer_goes():
    from tests.unit.test_provisioning import _pending, _world

    w = _world()
    w.cloud.ice = True
    _pending(w.kube, "p1")
    [name] = w.prov.schedule().created
    labels = {"nodepool": "general", "capacity_type": "", "zone": ""}
    before = _value("karpenter_nodeclaims_terminated_total", **labels)
    w.lifecycle.reconcile(name)  # finalizer
    w.lifecycle.reconcile(name)  # ICE: deleted
    assert w.kube.get(R.NODECLAIMS, name)["metadata"].get("deletionTimestamp")
    assert _value("karpenter_nodeclaims_terminated_total", **labels) == before  # not yet: the finalizer is there
    NodeClaimTerminationController(w.kube, w.kube.cluster, w.cloud, w.recorder).reconcile(name)
    assert ("nodeclaims", "", name) not in w.kube.objects
    assert _value("karpenter_nodeclaims_terminated_total", **labels) == before + 1


def test_nodepool_usage_and_limit_series_go_when_the_resource_or_the_pool_does():
    from controller.nodepool.status import NodePoolStatusController
    from tests.unit.test_provisioning import _world

    w = _world(limits={"cpu": "100", "memory": "1Ti"}, pools=("gauged",))
    w.kube.add(R.NODECLAIMS, {"metadata": {"name": "c1", "labels": {"karpenter.sh/nodepool": "gauged"}},
                              "spec": {}, "status": {"providerID": "aws:///us-east-1a/i-1",
                                                     "capacity": {"cpu": "4", "nvidia.com/gpu": "1"}}})
    ctl = NodePoolStatusController(w.kube.cluster, w.kube)
    ctl.reconcile("gauged")
    assert _value("karpenter_nodepools_usage", nodepool="gauged", resource_type="cpu") == 4000
    assert M.REGISTRY.get_sample_value("karpenter_nodepools_usage",
                                       {"nodepool": "gauged", "resource_type": "nvidia.com/gpu"}) == 1
    assert M.REGISTRY.get_sample_value("karpenter_nodepools_limit",
                                       {"nodepool": "gauged", "resource_type": "memory"}) == 1024**4
    # the GPU NodeClaim goes and the memory limit is taken out: their series go, cpu stays
    w.kube.patch(R.NODECLAIMS, "c1", {"status": {"capacity": {"cpu": "4", "nvidia.com/gpu": None}}})
    w.kube.patch(R.NODEPOOLS, "gauged", {"spec": {"limits": {"memory": None}}})
    ctl.reconcile("gauged")
    assert M.REGISTRY.get_sample_value("karpenter_nodepools_usage",
                                       {"nodepool": "gauged", "resource_type": "nvidia.com/gpu"}) is None
    assert M.REGISTRY.get_sample_value("karpenter_nodepools_limit",
                                       {"nodepool": "gauged", "resource_type": "memory"}) is None
    assert _value("karpenter_nodepools_limit", nodepool="gauged", resource_type="cpu") == 100000
    # the pool is deleted: none of its series is left
    w.kube.delete(R.NODEPOOLS, "gauged")
    ctl.reconcile("gauged")
    left = [s for f in M.REGISTRY.collect() if f.name in ("karpenter_nodepools_usage", "karpenter_nodepools_limit")
            for s in f.samples if s.labels.get("nodepool") == "gauged"]
    assert left == []


def test_cloud_provider_calls_are_timed_and_their_errors_counted_with_karpenters_labels():
    from controller.cloud.errors import NodeClaimNotFoundError
    from controller.kube.workqueue import Controller
    from tests.unit.test_provisioning import _pending, _world

    w = _world()
    w.cloud.ice = True
    w.cloud.get = lambda pid: (_ for _ in ()).throw(NodeClaimNotFoundError(pid))
    w.cloud.list = lambda: []
    w.cloud.delete = lambda pid: None
    metered = MeteredCloudProvider(w.cloud, "fake")
    w.lifecycle.cloud = metered
    w.prov.cloud = metered
    create = {"controller": "nodeclaim.lifecycle", "method": "Create", "provider": "fake"}
    types = {"controller": "provisioner", "method": "GetInstanceTypes", "provider": "fake"}
    before = {k: _value("karpenter_cloudprovider_duration_seconds_count", **v) for k, v in
              (("create", create), ("types", types))}
    ice = _value("karpenter_cloudprovider_errors_total", **create, error="InsufficientCapacityError")
    _pending(w.kube, "p1")
    with M.controller_context("provisioner"):
        [name] = w.prov.schedule().created
    c = Controller("nodeclaim.lifecycle", w.lifecycle.reconcile)
    c.process_one(name)
    c.process_one(name)
    assert _value("karpenter_cloudprovider_duration_seconds_count", **create) == before["create"] + 1
    assert _value("karpenter_cloudprovider_duration_seconds_count", **types) == before["types"] + 1
    assert _value("karpenter_cloudprovider_errors_total", **create, error="InsufficientCapacityError") == ice + 1
    # Get, List, Delete too; an error of no known type is error=""
    gc = {"controller": "garbagecollection", "provider": "fake"}
    with M.controller_context("garbagecollection"):
        with pytest.raises(NodeClaimNotFoundError):
            metered.get("aws:///x/i-1")
        metered.list()
        metered.delete("aws:///x/i-1")
    for method in ("Get", "List", "Delete"):
        assert _value("karpenter_cloudprovider_duration_seconds_count", **gc, method=method) >= 1, method
    assert _value("karpenter_cloudprovider_errors_total", **gc, method="Get", error="NodeClaimNotFoundError") >= 1
    assert metered.types is w.cloud.types  # anything else is the wrapped provider's


def test_the_provisioner_sets_pod_counts_and_decision_and_bound_durations():
    from tests.unit.test_provisioning import _pending, _world

    w = _world()
    decisions = _value("karpenter_pods_scheduling_decision_duration_seconds_count")
    bound = _value("karpenter_pods_bound_duration_seconds_count")
    fits = _pending(w.kube, "fits")
    _pending(w.kube, "huge", cpu="500")  # no instance type is that big
    _pending(w.kube, "bad", cpu="lots")  # not a quantity: ignored before scheduling
    for name in ("fits", "huge", "bad"):
        pod = w.kube.cluster.pod(f"default/{name}")
        w.prov.on_pod("ADDED", None, pod)
    w.kube.now += 5
    res = w.prov.schedule()
    assert sorted(res.unschedulable) == ["default/bad", "default/huge"]
    assert _value("karpenter_scheduler_unschedulable_pods_count", controller="provisioner") == 2
    assert _value("karpenter_scheduler_ignored_pods_count") == 1
    assert _value("karpenter_pods_scheduling_decision_duration_seconds_count") == decisions + 3
    w.prov.schedule()  # a second decision about the same pods is not observed again
    assert _value("karpenter_pods_scheduling_decision_duration_seconds_count") == decisions + 3
    created = fits["metadata"]["creationTimestamp"]
    bound_pod = w.kube.patch(R.PODS, "fits", {"spec": {"nodeName": "n1"}, "status": {"conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2023-11-14T22:13:32Z"}]}},
        namespace="default")
    w.prov.on_pod("MODIFIED", fits, bound_pod)
    assert _value("karpenter_pods_bound_duration_seconds_count") == bound + 1
    assert created == "2023-11-14T22:13:20Z"  # 12 s from creation to PodScheduled
    w.prov.on_pod("MODIFIED", bound_pod, bound_pod)  # already bound: not observed again
    assert _value("karpenter_pods_bound_duration_seconds_count") == bound + 1


def test_cluster_state_gauges_say_how_long_state_has_been_unsynced():
    from controller.main import state_tick
    from tests.unit.kubefake import FakeKube

    kube = FakeKube()
    cluster = kube.cluster
    kube.add(R.NODES, {"metadata": {"name": "n1"}, "spec": {}})
    at = state_tick(cluster, 0.0, 100.0)
    assert at == 100.0
    assert (_value("karpenter_cluster_state_synced"), _value("karpenter_cluster_state_unsynced_time_seconds"),
            _value("karpenter_cluster_state_node_count")) == (1, 0, 1)
    cluster.mark_created("general-x")  # created here, not visible yet: unsynced
    at = state_tick(cluster, at, 101.0)
    at = state_tick(cluster, at, 103.5)
    assert _value("karpenter_cluster_state_synced") == 0
    assert _value("karpenter_cluster_state_unsynced_time_seconds") == 3.5
    kube.add(R.NODECLAIMS, {"metadata": {"name": "general-x"}, "spec": {}})
    state_tick(cluster, at, 104.0)
    assert (_value("karpenter_cluster_state_synced"), _value("karpenter_cluster_state_unsynced_time_seconds")) == (1, 0)
