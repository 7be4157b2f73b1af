"""The provisioner held to Karpenter's provisioning behaviours, through a real Cluster fed by the in-memory apiserver:
volume topology, requeues, reschedulable pods, dynamic resource claims, DaemonSet overhead from live pods, NodePool
readiness, Karpenter's log and event rules, and the bound-pod cache's eviction."""

from __future__ import annotations

import logging

import pytest

from controller.api import labels as L
from controller.catalog.types import InstanceType, Offering
from controller.kube import resources as R
from controller.provisioning import inputs
from controller.provisioning.pdb import PdbLimits, is_reschedulable
from controller.provisioning.provisioner import Provisioner
from tests.unit.kubefake import stamp
from tests.unit.test_provisioning import GI, _claims, _node_with_pods, _pending, _world


def _zonal(name: str, price: float, cpus: int) -> InstanceType:
    return InstanceType(name, {L.INSTANCE_TYPE: name, L.ARCH: "amd64", L.OS: "linux"},
                        {"cpu": cpus * 1000, "memory": cpus * 4 * GI, "pods": 110},
                        offerings=[Offering(z, "on-demand", price) for z in ("us-east-1a", "us-east-1b")])


def _zone_values(claim: dict) -> list[str]:
    return next(r["values"] for r in claim["spec"]["requirements"] if r["key"] == L.ZONE)


# ---- volume topology -------------------------------------------------------------------------------------------

def test_a_pod_whose_claim_is_bound_to_a_zonal_volume_gets_a_nodeclaim_in_that_zone():
    w = _world(types=[_zonal("m.1x", 0.2, 4)])
    w.kube.add(R.PERSISTENTVOLUMES, {"metadata": {"name": "pv-1"}, "spec": {"nodeAffinity": {"required": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": L.ZONE, "operator": "In", "values": ["us-east-1b"]}]}]}}}})
    w.kube.add(R.PERSISTENTVOLUMECLAIMS, {"metadata": {"name": "data", "namespace": "default"},
                                          "spec": {"volumeName": "pv-1", "storageClassName": "gp3"}})
    _pending(w.kube, "db", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}])
    res = w.prov.schedule()
    [claim] = _claims(w.kube)
    assert res.created == [claim["metadata"]["name"]]
    assert _zone_values(claim) == ["us-east-1b"]


def test_an_unbound_claim_follows_its_storage_class_topology_and_a_missing_claim_is_reported():
    w = _world(types=[_zonal("m.1x", 0.2, 4)])
    w.kube.add(R.STORAGECLASSES, {"metadata": {"name": "zonal"}, "allowedTopologies": [
        {"matchLabelExpressions": [{"key": L.ZONE, "values": ["us-east-1a"]}]}]})
    w.kube.add(R.PERSISTENTVOLUMECLAIMS, {"metadata": {"name": "new", "namespace": "default"},
                                          "spec": {"storageClassName": "zonal"}})
    _pending(w.kube, "a", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "new"}}])
    _pending(w.kube, "b", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "nowhere"}}])
    res = w.prov.schedule()
    [claim] = _claims(w.kube)
    assert _zone_values(claim) == ["us-east-1a"]
    assert "PersistentVolumeClaim default/nowhere not found" in res.unschedulable["default/b"]


# ---- requeues --------------------------------------------------------------------------------------------------

def test_a_pod_still_provisionable_is_requeued_without_another_event():
    w = _world()
    assert w.prov.requeue() is False  # nothing provisionable: no window
    _pending(w.kube, "p1")
    w.cloud.ice = True
    w.prov.schedule()
    assert not w.prov.batcher.pending()
    assert w.prov.requeue() is True
    assert w.prov.batcher.pending()


def test_a_failed_create_is_retried_without_another_event():
    import threading
    import time

    from controller.kube.errors import KubeError
    from controller.provisioning.batcher import Batcher

    w = _world()
    real_create = w.kube.create
    refusals: list[str] = []

    def create(res, body, namespace=None, record=True):
        if res.plural == "nodeclaims" and not refusals:
            refusals.append("once")
            raise KubeError(503, "ServiceUnavailable", "the apiserver is busy")
        return real_create(res, body, namespace, record)

    w.kube.create = create
    w.prov.batcher = Batcher(idle=0.01, maximum=0.05)
    _pending(w.kube, "p1")
    stop = threading.Event()
    t = threading.Thread(target=w.prov.run, args=(stop,), daemon=True)
    w.prov.trigger()  # the pod's arrival; nothing else happens after the refusal
    t.start()
    try:
        deadline = time.monotonic() + 60
        while not _claims(w.kube) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        t.join(10)
    assert refusals == ["once"] and len(_claims(w.kube)) == 1


def test_a_node_going_away_is_requeued_while_it_drains():
    w = _world()
    _node_with_pods(w.kube, "old", 1, disrupted=True)
    assert w.prov.requeue() is True


# ---- reschedulable pods ----------------------------------------------------------------------------------------

def _on(node: str, name: str, **meta) -> dict:
    return {"metadata": {"name": name, "namespace": "default", "uid": name, **meta},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running", "startTime": stamp(1_700_000_000)}}


def test_pods_of_a_deleting_node_that_cannot_move_are_not_provisioned_for():
    w = _world()
    _node_with_pods(w.kube, "old", 0, disrupted=True)
    w.kube.add(R.PODS, _on("old", "free"))
    w.kube.add(R.PODS, _on("old", "pinned", annotations={L.DO_NOT_DISRUPT: "true"}))
    w.kube.add(R.PODS, _on("old", "guarded", labels={"app": "guarded"}))
    w.kube.add(R.PDBS, {"metadata": {"name": "never", "namespace": "default"},
                        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}}})
    sts = _on("old", "db-0", deletionTimestamp=stamp(1_700_000_000), finalizers=["x"], ownerReferences=[
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "s", "controller": True}])
    w.kube.add(R.PODS, sts)
    w.kube.add(R.PODS, _on("old", "leaving", deletionTimestamp=stamp(1_700_000_000), finalizers=["x"]))
    res = w.prov.schedule()
    assert sorted(res.nominated) == ["default/db-0", "default/free"]


@pytest.mark.parametrize(("pdb_spec", "blocked"), [
    ({"maxUnavailable": 0}, True),
    ({"maxUnavailable": "0%"}, True),
    ({"minAvailable": "100%"}, True),
    ({"minAvailable": 2}, False),  # blocks only while the budget says so: Karpenter still provisions
    ({"maxUnavailable": 0, "unhealthyPodEvictionPolicy": "AlwaysAllow"}, True),
])
def test_fully_blocking_pdbs_as_karpenter_reads_them(pdb_spec, blocked):
    pdb = {"metadata": {"name": "b", "namespace": "default"},
           "spec": {**pdb_spec, "selector": {"matchLabels": {"app": "x"}}}}
    pod = _on("n", "p", labels={"app": "x"})
    assert bool(PdbLimits([pdb]).fully_blocked(pod, 1_700_000_100)) is blocked
    unready = {**pod, "status": {**pod["status"], "conditions": [{"type": "Ready", "status": "False"}]}}
    if pdb_spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        assert PdbLimits([pdb]).fully_blocked(unready, 1_700_000_100) == []
    # two budgets over one pod: the Eviction API refuses it whatever they allow
    other = {"metadata": {"name": "c", "namespace": "default"},
             "spec": {"minAvailable": 0, "selector": {"matchLabels": {"app": "x"}}}}
    assert PdbLimits([pdb, other]).fully_blocked(pod, 1_700_000_100) == ["default/b", "default/c"]


def test_reschedulable_rules():
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "d", "controller": True}
    node = {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "n", "controller": True}
    assert is_reschedulable(_on("n", "p"))
    assert not is_reschedulable(_on("n", "p", ownerReferences=[ds]))
    assert not is_reschedulable(_on("n", "p", ownerReferences=[node]))
    assert not is_reschedulable(_on("n", "p", deletionTimestamp=stamp(0)))
    done = _on("n", "p")
    done["status"]["phase"] = "Succeeded"
    assert not is_reschedulable(done)


# ---- dynamic resource claims -----------------------------------------------------------------------------------

def test_pods_with_resource_claims_are_refused_as_karpenter_refuses_them():
    w = _world()
    _pending(w.kube, "gpu", resourceClaims=[{"name": "g", "resourceClaimName": "gpu-claim"}])
    res = w.prov.schedule()
    assert res.created == []
    assert res.unschedulable["default/gpu"] == inputs.DRA_UNSUPPORTED
    assert ("gpu", "Warning", "FailedScheduling", f"Failed to schedule pod, {inputs.DRA_UNSUPPORTED}") in \
        w.recorder.events
    claims = {"spec": {"containers": [{"name": "c", "resources": {"claims": [{"name": "g"}]}}]}}
    assert inputs.has_dra_requirements(claims)
    assert not inputs.has_dra_requirements({"spec": {"containers": [{"name": "c"}]}})


# ---- DaemonSet overhead ----------------------------------------------------------------------------------------

def _daemonset(kube, cpu: str) -> dict:
    return kube.add(R.DAEMONSETS, {"metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds-agent"},
                                   "spec": {"template": {"metadata": {"labels": {"app": "agent"}}, "spec": {
                                       "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}}})


def _cheapest(w) -> str:
    [claim] = _claims(w.kube)
    return next(r["values"][0] for r in claim["spec"]["requirements"] if r["key"] == L.INSTANCE_TYPE)


def test_daemonset_overhead_comes_from_its_template_without_a_live_pod():
    w = _world()
    _daemonset(w.kube, "100m")
    _pending(w.kube, "p", cpu="3")
    w.prov.schedule()
    assert _cheapest(w) == "m.1x"  # 3 + 0.1 fits four cores


def test_daemonset_overhead_comes_from_a_live_pod_when_one_exists():
    w = _world()
    _daemonset(w.kube, "100m")
    # a LimitRange raised the live pod's requests to 2 cores: each node gives the agent 2 cores, not 0.1
    w.kube.add(R.PODS, {"metadata": {"name": "agent-x", "namespace": "kube-system", "uid": "agent-x",
                                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                                          "name": "agent", "uid": "ds-agent", "controller": True}]},
                        "spec": {"nodeName": "elsewhere", "affinity": {"nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                                {"matchFields": [{"key": "metadata.name", "operator": "In",
                                                  "values": ["elsewhere"]}]}]}}},
                                 "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]},
                        "status": {"phase": "Running"}})
    _pending(w.kube, "p", cpu="3")
    w.prov.schedule()
    assert _cheapest(w) == "m.2x"  # 3 + 2 does not fit four cores
    live = w.kube.cluster.daemonset_pod(w.kube.cluster.daemonsets()[0])
    assert live is not None and live["metadata"]["name"] == "agent-x"


# ---- NodePool readiness ----------------------------------------------------------------------------------------

def test_a_nodepool_that_is_not_ready_is_not_used():
    w = _world(pools=("general", "backup"))
    w.kube.patch(R.NODEPOOLS, "general", {"spec": {"weight": 50}})
    w.kube.patch(R.NODEPOOLS, "general", {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "NodeClassNotReady", "message": "EC2NodeClass not ready"}]}},
        subresource="status")
    _pending(w.kube, "p")
    w.prov.schedule()
    [claim] = _claims(w.kube)
    assert claim["metadata"]["labels"][L.NODEPOOL] == "backup"


# ---- log and event noise ---------------------------------------------------------------------------------------

def test_no_provisionable_log_when_nothing_is_created_and_no_event_for_pods_avoiding_karpenter(caplog):
    w = _world()
    _node_with_pods(w.kube, "n1", 0)
    _pending(w.kube, "fits")
    _pending(w.kube, "elsewhere", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": L.NODEPOOL, "operator": "DoesNotExist"}]}]}}})
    with caplog.at_level(logging.INFO, logger="karpy.provisioner"):
        res = w.prov.schedule()
    assert res.created == [] and res.nominated == {"default/fits": "n1"}
    assert "default/elsewhere" not in res.unschedulable
    assert not [e for e in w.recorder.events if e[0] == "elsewhere"]
    assert "found provisionable pod(s)" not in caplog.messages
    caplog.clear()
    _pending(w.kube, "big", cpu="16")
    with caplog.at_level(logging.INFO, logger="karpy.provisioner"):
        assert len(w.prov.schedule().created) == 1
    [found] = [r for r in caplog.records if r.getMessage() == "found provisionable pod(s)"]
    assert found.duration != "0s" and found.duration.endswith("s")


# ---- the bound-pod cache ---------------------------------------------------------------------------------------

def _read_nodes(prov: Provisioner) -> None:
    """The nodes and their bound pods read as a pass reads them (bound pods through the provisioner's cache)."""
    inputs.scheduler_inputs(nodes=prov.node_sources(), pods=(), pools=list, convert_bound=prov._pod)


def test_the_bound_pod_cache_forgets_deleted_pods_and_old_versions():
    w = _world()
    _node_with_pods(w.kube, "n1", 3)
    _read_nodes(w.prov)
    cached = len(w.prov._pods)
    assert cached == 4  # three pods and the DaemonSet's
    w.kube.patch(R.PODS, "n1-p0", {"metadata": {"labels": {"v": "2"}}}, namespace="default")
    _read_nodes(w.prov)
    assert len(w.prov._pods) == cached  # one entry per pod, not per version
    for i in range(3):
        w.kube.delete(R.PODS, f"n1-p{i}", namespace="default")
        w.prov.on_pod("DELETED", {"metadata": {"uid": f"n1-{i}"}}, None)
    assert len(w.prov._pods) == 1


def test_ignore_dra_requests_defaults_true_and_false_is_refused_at_start():
    from controller.settings import SettingsError, load

    env = {"CLUSTER_NAME": "c", "AWS_REGION": "us-east-1"}
    assert load(env, {}, read_configmaps=False)[0].ignore_dra_requests is True
    with pytest.raises(SettingsError) as e:
        load({**env, "IGNORE_DRA_REQUESTS": "false"}, {}, read_configmaps=False)
    assert "IGNORE_DRA_REQUESTS" in str(e.value) and "Dynamic Resource Allocation" in str(e.value)


# ---- static NodePools ------------------------------------------------------------------------------------------

def _static_world(replicas: int, limit: int | None = None, ready: bool = True):
    from controller.provisioning.static import StaticProvisioner

    w = _world()
    spec: dict = {"replicas": replicas}
    if limit is not None:
        spec["limits"] = {"nodes": str(limit)}
    w.kube.patch(R.NODEPOOLS, "general", {"spec": spec})
    w.kube.patch(R.NODEPOOLS, "general", {"status": {"conditions": [
        {"type": "Ready", "status": "True" if ready else "False", "reason": "Ready"}]}}, subresource="status")
    return w, StaticProvisioner(w.kube.cluster, w.kube)


def test_a_static_nodepool_gets_its_replicas_from_its_template_alone():
    w, static = _static_world(3)
    assert static.reconcile("general").requeue_after == 60.0
    claims = _claims(w.kube)
    assert len(claims) == 3
    for claim in claims:
        keys = {r["key"] for r in claim["spec"]["requirements"]}
        assert L.INSTANCE_TYPE not in keys and L.CAPACITY_TYPE in keys  # the cloud provider picks the type
        assert claim["metadata"]["labels"][L.NODEPOOL] == "general"
    static.reconcile("general")
    assert len(_claims(w.kube)) == 3  # satisfied: nothing more
    # a NodeClaim going away is made up for (the deleting one still counts against the node limit)
    w.kube.delete(R.NODECLAIMS, claims[0]["metadata"]["name"])
    static.reconcile("general")
    assert len(_claims(w.kube)) == 3
    # pending pods never size a static pool: the dynamic provisioner leaves it alone
    _pending(w.kube, "p", cpu="64")
    assert w.prov.schedule().created == []


def test_a_static_nodepool_stays_within_its_node_limit_and_waits_until_ready():
    w, static = _static_world(5, limit=2)
    assert static.reconcile("general").requeue_after == 60.0
    assert len(_claims(w.kube)) == 2
    assert static.reconcile("general").requeue_after == 30.0  # limit reached
    w2, static2 = _static_world(2, ready=False)
    assert static2.reconcile("general").requeue_after is None and _claims(w2.kube) == []
