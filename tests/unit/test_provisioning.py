"""The provisioner's pure parts: Karpenter's provisionable-pod rule, the batch window, NodeClaims shaped as
Karpenter's NodeClaimTemplate makes them, and the lifecycle's registration labels and initialization rules."""

from __future__ import annotations

import copy
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from controller.api import labels as L
from controller.catalog.types import InstanceType, Offering
from controller.lifecycle.controller import LifecycleController, requirement_labels
from controller.provisioning.batcher import Batcher
from controller.provisioning.nodeclaimtemplate import (
    MAX_INSTANCE_TYPES,
    node_selector_requirement,
    nodeclaim_manifest,
    nodepool_hash,
)
from controller.scheduling.requirements import Requirement, Requirements
from controller.state.cluster import is_provisionable


def _pod(**overrides):
    pod: dict = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": []},
           "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                          "reason": "Unschedulable"}]}}
    for path, value in overrides.items():
        section, key = path.split("__")
        pod[section][key] = value
    return pod


@pytest.mark.parametrize(("overrides", "expected"), [
    ({}, True),
    ({"spec__nodeName": "n1"}, False),
    ({"status__nominatedNodeName": "n1"}, False),
    ({"status__phase": "Failed"}, False),
    ({"metadata__deletionTimestamp": "2026-01-01T00:00:00Z"}, False),
    ({"metadata__ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d",
                                     "controller": True}]}, False),
    ({"metadata__annotations": {"kubernetes.io/config.mirror": "x"}}, False),
    ({"status__conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}]}, False),
    ({"status__conditions": []}, False),
])
def test_provisionable_pods_as_karpenter_defines_them(overrides, expected):
    assert is_provisionable(_pod(**overrides)) is expected


def test_batcher_waits_for_idle_then_closes():
    stop = threading.Event()
    b = Batcher(idle=0.2, maximum=5.0)
    b.trigger()
    started = time.monotonic()
    assert b.wait(stop) is True
    assert time.monotonic() - started >= 0.19
    assert not b.pending()


def test_batcher_max_window_caps_a_steady_stream():
    stop = threading.Event()
    b = Batcher(idle=0.2, maximum=0.6)
    done = threading.Event()

    def stream():
        while not done.is_set():
            b.trigger()
            time.sleep(0.05)

    t = threading.Thread(target=stream, daemon=True)
    b.trigger()
    started = time.monotonic()
    t.start()
    try:
        assert b.wait(stop) is True
        assert time.monotonic() - started >= 0.59  # the window did not close while triggers kept coming
    finally:
        done.set()
        t.join()


def test_batcher_returns_false_on_stop():
    stop = threading.Event()
    stop.set()
    assert Batcher().wait(stop) is False


def _nodepool(**spec):
    template_spec = {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": [{"key": L.CAPACITY_TYPE, "operator": "In", "values": ["spot"]}]}
    template_spec.update(spec)
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general", "uid": "np-uid"},
            "spec": {"template": {"metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
                                  "spec": template_spec}}}


def _it(name):
    return InstanceType(name, {L.INSTANCE_TYPE: name}, {"cpu": 2000}, offerings=[Offering("us-east-1a", "spot", 0.1)])


def test_nodeclaim_manifest_shape():
    reqs = Requirements([Requirement(L.NODEPOOL, False, frozenset(["general"])),
                         Requirement(L.CAPACITY_TYPE, False, frozenset(["spot"])),
                         Requirement(L.HOSTNAME, False, frozenset(["general-00001"])),
                         Requirement(L.INSTANCE_TYPE, True, frozenset(), min_values=2)])
    pool = _nodepool(taints=[{"key": "a", "effect": "NoSchedule"}], expireAfter="720h",
                     terminationGracePeriod="1h", startupTaints=[{"key": "b", "effect": "NoSchedule"}])
    types = [_it(f"t{i}") for i in range(MAX_INSTANCE_TYPES + 5)]
    m = nodeclaim_manifest(pool, reqs, types, {"cpu": 1500, "memory": 2 * 1024**3})
    meta, spec = m["metadata"], m["spec"]
    assert meta["generateName"] == "general-"
    assert meta["labels"] == {"team": "a", L.NODEPOOL: "general", L.EC2NODECLASS: "default"}
    assert meta["annotations"]["note"] == "x"
    assert meta["annotations"][L.NODEPOOL_HASH] == nodepool_hash(pool)
    assert meta["annotations"][L.NODEPOOL_HASH_VERSION] == "karpy-v1"
    assert meta["ownerReferences"] == [{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": "general",
                                        "uid": "np-uid", "blockOwnerDeletion": True}]
    keys = [r["key"] for r in spec["requirements"]]
    assert L.HOSTNAME not in keys
    it_req = next(r for r in spec["requirements"] if r["key"] == L.INSTANCE_TYPE)
    assert it_req["values"] == [f"t{i}" for i in range(MAX_INSTANCE_TYPES)]  # price order kept, capped
    assert it_req["minValues"] == 2
    assert spec["resources"]["requests"] == {"cpu": "1500m", "memory": "2Gi"}
    assert spec["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    assert spec["taints"] == [{"key": "a", "effect": "NoSchedule"}]
    assert spec["startupTaints"] == [{"key": "b", "effect": "NoSchedule"}]
    assert spec["expireAfter"] == "720h" and spec["terminationGracePeriod"] == "1h"


def test_nodepool_hash_ignores_requirements_but_not_taints():
    base = nodepool_hash(_nodepool())
    assert nodepool_hash(_nodepool(requirements=[])) == base
    assert nodepool_hash(_nodepool(taints=[{"key": "a", "effect": "NoSchedule"}])) != base


@pytest.mark.parametrize(("req", "expected"), [
    (Requirement.new("k", "In", ["b", "a"]), {"key": "k", "operator": "In", "values": ["a", "b"]}),
    (Requirement.new("k", "NotIn", ["a"]), {"key": "k", "operator": "NotIn", "values": ["a"]}),
    (Requirement.new("k", "Exists"), {"key": "k", "operator": "Exists"}),
    (Requirement.new("k", "DoesNotExist"), {"key": "k", "operator": "DoesNotExist"}),
    (Requirement.new("k", "Gt", ["4"]), {"key": "k", "operator": "Gt", "values": ["4"]}),
    (Requirement.new("k", "Lt", ["9"]), {"key": "k", "operator": "Lt", "values": ["9"]}),
    (Requirement.new("k", "In", ["a"], min_values=1), {"key": "k", "operator": "In", "values": ["a"], "minValues": 1}),
])
def test_requirements_render_in_the_api_form(req, expected):
    assert node_selector_requirement(req) == expected


def test_single_valued_requirements_become_node_labels():
    claim = {"spec": {"requirements": [{"key": L.ZONE, "operator": "In", "values": ["us-east-1a"]},
                                       {"key": L.INSTANCE_TYPE, "operator": "In", "values": ["a", "b"]},
                                       {"key": "x", "operator": "NotIn", "values": ["y"]}]}}
    assert requirement_labels(claim) == {L.ZONE: "us-east-1a"}


def _node(ready="True", taints=(), allocatable=None):
    return {"spec": {"taints": list(taints)},
            "status": {"conditions": [{"type": "Ready", "status": ready}],
                       "allocatable": allocatable or {"cpu": "2", "memory": "4Gi", "pods": "110"}}}


@pytest.mark.parametrize(("claim_spec", "node", "why"), [
    ({}, _node(), ""),
    ({}, _node(ready="False"), "Node not ready"),
    ({"startupTaints": [{"key": "s", "effect": "NoSchedule"}]}, _node(taints=[{"key": "s", "effect": "NoSchedule"}]),
     'StartupTaint "s:NoSchedule" still exists'),
    ({}, _node(taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]),
     'KnownEphemeralTaint "node.kubernetes.io/not-ready:NoSchedule" still exists'),
    ({"resources": {"requests": {"nvidia.com/gpu": "1"}}}, _node(),
     'Resource "nvidia.com/gpu" was requested but not registered'),
    ({"resources": {"requests": {"nvidia.com/gpu": "1"}}},
     _node(allocatable={"cpu": "2", "nvidia.com/gpu": "1"}), ""),
])
def test_initialization_rules(claim_spec, node, why):
    lc = LifecycleController.__new__(LifecycleController)
    assert lc._not_initialized({"spec": claim_spec}, node) == why


def test_preference_policy_ignore_drops_preferences_up_front():
    from controller.provisioning.inputs import scheduling_pod
    from controller.provisioning.provisioner import without_preferences

    raw = {"metadata": {"name": "p", "namespace": "default", "labels": {"app": "a"}},
           "spec": {"containers": [{"name": "c"}],
                    "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "preference": {"matchExpressions": [
                            {"key": L.ZONE, "operator": "In", "values": ["us-east-1a"]}]}}]}},
                    "topologySpreadConstraints": [
                        {"maxSkew": 1, "topologyKey": L.ZONE, "whenUnsatisfiable": "ScheduleAnyway",
                         "labelSelector": {"matchLabels": {"app": "a"}}},
                        {"maxSkew": 1, "topologyKey": L.HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
                         "labelSelector": {"matchLabels": {"app": "a"}}}]}}
    pod = scheduling_pod(raw)
    assert pod.preferred_node and len(pod.spread) == 2
    ignored = without_preferences(pod)
    assert ignored.preferred_node == () and [c.topology_key for c in ignored.spread] == [L.HOSTNAME]
    assert ignored.class_key != pod.class_key  # pods with and without preferences are not one class


def test_min_values_best_effort_relaxes_and_says_so():
    from controller.provisioning import inputs
    from controller.provisioning.provisioner import min_values_relaxed, relax_min_values
    from controller.scheduling.scheduler import Scheduler

    def it(name: str, family: str) -> InstanceType:
        return InstanceType(name, {L.INSTANCE_TYPE: name, "karpenter.k8s.aws/instance-family": family,
                                   L.ARCH: "amd64", L.OS: "linux"},
                            {"cpu": 4000, "memory": 16 * 1024**3, "pods": 110},
                            offerings=[Offering("us-east-1a", "on-demand", 0.1)])

    types = [it("m5.xlarge", "m5"), it("c5.xlarge", "c5")]
    nodepool = _nodepool(requirements=[{"key": "karpenter.k8s.aws/instance-family", "operator": "Exists",
                                        "minValues": 3}])
    pool = inputs.node_pool(nodepool, types, {})
    pod = inputs.scheduling_pod({"metadata": {"name": "p", "namespace": "default"},
                                 "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}})
    strict = Scheduler([pool], [], []).solve([pod])
    assert strict.unschedulable  # Strict: two families cannot satisfy minValues 3
    relaxed = Scheduler([relax_min_values(pool)], [], []).solve([pod])
    assert not relaxed.unschedulable and len(relaxed.node_claims) == 1
    assert min_values_relaxed(nodepool, relaxed.node_claims[0].instance_type_options)
    assert not min_values_relaxed(_nodepool(), types)


def test_nodeclaims_pass_the_nodeclaim_crd():
    """A pool's Gte 0 is the bound Gt -1 internally; the NodeClaim carries it as Gte 0, which the CRD's CEL rule
    (single non-negative integer) admits on an apiserver that enforces it."""
    from controller.api.crdeval import CRDEvaluator
    from controller.api.crds import crd_manifests

    evaluator = next(CRDEvaluator(c) for c in crd_manifests() if c["spec"]["names"]["kind"] == "NodeClaim")
    reqs = Requirements([Requirement(L.NODEPOOL, False, frozenset(["general"])),
                         Requirement.new(L.INSTANCE_CPU, "Gte", ["0"]),
                         Requirement.new(L.INSTANCE_MEMORY, "Gte", ["0"]).intersect(
                             Requirement.new(L.INSTANCE_MEMORY, "Lte", ["4096"]))])
    m = nodeclaim_manifest(_nodepool(), reqs, [_it("t0")], {"cpu": 1000})
    m["metadata"]["name"] = "general-abcde"
    assert {"key": L.INSTANCE_CPU, "operator": "Gte", "values": ["0"]} in m["spec"]["requirements"]
    assert evaluator.create(m)[1] == []


# ---- the running controllers over an in-memory apiserver -----------------------------------------------------------

from controller import metrics as M  # noqa: E402
from controller.api import conditions as C  # noqa: E402
from controller.api.nodeclasshash import EC2NODECLASS_HASH_VERSION, ec2nodeclass_hash  # noqa: E402
from controller.cloud.errors import InsufficientCapacityError  # noqa: E402
from controller.cloud.provider import LaunchedNode  # noqa: E402
from controller.kube import resources as R  # noqa: E402
from controller.nodeclass.hash import reconcile_hash  # noqa: E402
from controller.nodepool.status import NodePoolStatusController  # noqa: E402
from controller.provisioning.provisioner import Provisioner, Results  # noqa: E402
from tests.unit.kubefake import FakeKube, FakeRecorder, stamp  # noqa: E402

GI = 1024**3


def _type(name: str, price: float, cpus: int) -> InstanceType:
    return InstanceType(name, {L.INSTANCE_TYPE: name, L.ARCH: "amd64", L.OS: "linux"},
                        {"cpu": cpus * 1000, "memory": cpus * 4 * GI, "pods": 110},
                        offerings=[Offering("us-east-1a", "on-demand", price)])


class StubCloud:
    """Instance types in the order given (not by price); launches recorded, or refused for capacity."""

    def __init__(self, types: list[InstanceType]) -> None:
        self.types = types
        self.created: list[str] = []
        self.ice = False
        self.unavailable: list[tuple[str, str, str]] = []

    def get_instance_types(self, nodeclass):
        return list(self.types)

    def create(self, request, nodeclass):
        name = request.name
        it_req = request.requirements.get(L.INSTANCE_TYPE)
        # the cheapest type the request allows, as CreateFleet's lowest-price strategy picks
        it = min((t for t in self.types if it_req.has(t.name)), key=lambda t: t.cheapest_price())
        if self.ice:
            # as the AWS provider does on an ICE: the offering is remembered as unavailable, then the error
            self.unavailable.append((it.name, "us-east-1a", "on-demand"))
            raise InsufficientCapacityError(f"InsufficientInstanceCapacity for {name}")
        self.created.append(name)
        return LaunchedNode(provider_id=f"aws:///us-east-1a/i-{len(self.created):04d}", instance_type=it.name,
                            zone="us-east-1a", capacity_type="on-demand", image_id="ami-1",
                            capacity=dict(it.capacity), allocatable=it.allocatable)


NODECLASS_SPEC = {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                  "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
                  "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}]}


def _world(types: list[InstanceType] | None = None, limits: dict | None = None, pools=("general",)):
    kube = FakeKube()
    kube.add(R.EC2NODECLASSES, {"metadata": {"name": "default"}, "spec": dict(NODECLASS_SPEC),
                                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]}})
    for name in pools:
        spec: dict = {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": L.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}]}}}
        if limits is not None:
            spec["limits"] = limits
        kube.add(R.NODEPOOLS, {"apiVersion": "karpenter.sh/v1", "metadata": {"name": name}, "spec": spec})
    cloud = StubCloud(types if types is not None else [_type("m.4x", 0.8, 16), _type("m.1x", 0.2, 4),
                                                       _type("m.2x", 0.4, 8)])
    recorder = FakeRecorder()
    triggered: list[bool] = []
    prov = Provisioner(kube.cluster, kube, cloud, recorder)
    lifecycle = LifecycleController(kube.cluster, kube, cloud, recorder,
                                    on_deleted=lambda: triggered.append(True), clock=lambda: kube.now)
    return SimpleNamespace(kube=kube, cloud=cloud, recorder=recorder, prov=prov, lifecycle=lifecycle,
                           triggered=triggered)


def _pending(kube: FakeKube, name: str, cpu: str = "1", **spec) -> dict:
    return kube.add(R.PODS, {"metadata": {"name": name, "namespace": "default"},
                             "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}], **spec},
                             "status": {"phase": "Pending", "conditions": [
                                 {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}})


def _claims(kube: FakeKube) -> list[dict]:
    return [o for (p, _, _), o in kube.objects.items() if p == "nodeclaims"]


def _sample(metric: str, **labels: str) -> float | None:
    return M.REGISTRY.get_sample_value(metric, labels)


# ---- 1. the EC2NodeClass hash ----

def test_ec2nodeclass_hash_covers_what_karpenter_hashes_and_nothing_else():
    base = {"spec": dict(NODECLASS_SPEC, tags={"team": "a"}, userData="echo hi")}
    h = ec2nodeclass_hash(base)
    assert h == ec2nodeclass_hash(copy.deepcopy(base))
    # ignored: selector terms and ipPrefixCount; zero values are absent values; amiFamily is the resolved family
    for change in ({"subnetSelectorTerms": [{"id": "subnet-1"}]}, {"securityGroupSelectorTerms": [{"id": "sg-1"}]},
                   {"capacityReservationSelectorTerms": [{"id": "cr-1"}]}, {"ipPrefixCount": 3},
                   {"amiFamily": "AL2023"}, {"detailedMonitoring": False}, {"context": ""},
                   {"amiSelectorTerms": [{"alias": "al2023@v20240807"}]}):
        assert ec2nodeclass_hash({"spec": {**base["spec"], **change}}) == h, change
    # hashed: everything else, lists as sets
    hashed: tuple[dict[str, Any], ...] = (
        {"userData": "echo bye"}, {"tags": {"team": "b"}}, {"role": "Other"}, {"kubelet": {"maxPods": 20}},
        {"detailedMonitoring": True}, {"amiFamily": "Bottlerocket"}, {"metadataOptions": {"httpTokens": "optional"}})
    for change in hashed:
        assert ec2nodeclass_hash({"spec": {**base["spec"], **change}}) != h, change
    bdm = [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi"}}, {"deviceName": "/dev/xvdb",
                                                                        "ebs": {"volumeSize": "50Gi"}}]
    assert ec2nodeclass_hash({"spec": {**base["spec"], "blockDeviceMappings": bdm}}) == ec2nodeclass_hash(
        {"spec": {**base["spec"], "blockDeviceMappings": bdm[::-1]}})
    # karpy's own function: stable across processes and releases until the hash version changes
    assert ec2nodeclass_hash({"spec": {"role": "R", "amiSelectorTerms": [{"alias": "al2023@latest"}]}}) == \
        "5489248911897840784"
    assert EC2NODECLASS_HASH_VERSION == "karpy-v1"


def test_the_nodeclass_and_its_launched_nodeclaims_carry_the_hash():
    w = _world()
    nodeclass = w.kube.cluster.nodeclass("default")
    # a NodeClaim launched by an older karpy (no hash version) is re-stamped, one of the current version is not
    w.kube.add(R.NODECLAIMS, {"metadata": {"name": "old", "annotations": {L.EC2NODECLASS_HASH: "1"}},
                              "spec": {"nodeClassRef": {"name": "default"}}})
    w.kube.add(R.NODECLAIMS, {"metadata": {"name": "current", "annotations": {
        L.EC2NODECLASS_HASH: "2", L.EC2NODECLASS_HASH_VERSION: EC2NODECLASS_HASH_VERSION}},
        "spec": {"nodeClassRef": {"name": "default"}}})
    written = reconcile_hash(w.kube, w.kube.cluster, nodeclass)
    want = {L.EC2NODECLASS_HASH: ec2nodeclass_hash(nodeclass), L.EC2NODECLASS_HASH_VERSION: "karpy-v1"}
    assert {k: written["metadata"]["annotations"][k] for k in want} == want
    assert {k: w.kube.get(R.NODECLAIMS, "old")["metadata"]["annotations"][k] for k in want} == want
    assert w.kube.get(R.NODECLAIMS, "current")["metadata"]["annotations"][L.EC2NODECLASS_HASH] == "2"
    before = len(w.kube.writes)
    reconcile_hash(w.kube, w.kube.cluster, w.kube.cluster.nodeclass("default"))
    assert len(w.kube.writes) == before  # nothing to change: no write

    for name in ("old", "current"):
        w.kube.objects.pop(("nodeclaims", "", name))
    _pending(w.kube, "p1")
    created = w.prov.schedule().created
    assert len(created) == 1
    for _ in range(3):
        w.lifecycle.reconcile(created[0])
    claim = w.kube.get(R.NODECLAIMS, created[0])
    assert C.is_true(claim["status"], "Launched")
    assert {k: claim["metadata"]["annotations"][k] for k in want} == want


# ---- 2. pods of nodes going away ----

def _node_with_pods(kube: FakeKube, name: str, pods: int, *, deleting: bool = False, disrupted: bool = False,
                    claim_deleting: bool = False) -> None:
    pid = f"aws:///us-east-1a/i-{name}"
    taints = [{"key": L.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}] if disrupted else []
    kube.add(R.NODES, {"metadata": {"name": name, "finalizers": [L.TERMINATION_FINALIZER],
                                    "labels": {L.NODEPOOL: "general", L.INSTANCE_TYPE: "m.4x", L.ARCH: "amd64",
                                               L.OS: "linux", L.ZONE: "us-east-1a", L.HOSTNAME: name}},
                       "spec": {"providerID": pid, "taints": taints},
                       "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                                  "conditions": [{"type": "Ready", "status": "True"}]}})
    kube.add(R.NODECLAIMS, {"metadata": {"name": f"claim-{name}", "finalizers": [L.TERMINATION_FINALIZER],
                                         "labels": {L.NODEPOOL: "general"}},
                            "spec": {"nodeClassRef": {"name": "default"}},
                            "status": {"providerID": pid, "nodeName": name,
                                       "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"}}})
    for i in range(pods):
        kube.add(R.PODS, {"metadata": {"name": f"{name}-p{i}", "namespace": "default", "uid": f"{name}-{i}"},
                          "spec": {"nodeName": name, "containers": [
                              {"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
                          "status": {"phase": "Running"}})
    kube.add(R.PODS, {"metadata": {"name": f"{name}-ds", "namespace": "default", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds", "controller": True}]},
        "spec": {"nodeName": name, "containers": [{"name": "c"}]}, "status": {"phase": "Running"}})
    if deleting:
        kube.delete(R.NODES, name)
    if claim_deleting:
        kube.delete(R.NODECLAIMS, f"claim-{name}")


@pytest.mark.parametrize("how", ["deleting", "disrupted", "claim_deleting"])
def test_pods_of_a_node_going_away_get_their_replacement_while_it_drains(how):
    w = _world()
    _node_with_pods(w.kube, "old", 3, **{how: True})
    _node_with_pods(w.kube, "full", 0)  # a healthy node, but too small for anything once its pods are counted
    w.kube.add(R.PODS, {"metadata": {"name": "hog", "namespace": "default"},
                        "spec": {"nodeName": "full", "containers": [{"name": "c", "resources": {
                            "requests": {"cpu": "15500m"}}}]}, "status": {"phase": "Running"}})
    _pending(w.kube, "new")
    # an evicted pod that is still terminating is not rescheduled: its replacement is (or will be) pending
    w.kube.add(R.PODS, {"metadata": {"name": "old-leaving", "namespace": "default", "deletionTimestamp": stamp(0),
                                     "finalizers": ["x"]},
                        "spec": {"nodeName": "old", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}})
    res = w.prov.schedule()
    assert len(res.created) == 1  # the deleting node is not capacity: one new NodeClaim for all four pods
    assert sorted(res.nominated) == ["default/new", "default/old-p0", "default/old-p1", "default/old-p2"]
    assert all(v == res.created[0] for v in res.nominated.values())
    claim = w.kube.get(R.NODECLAIMS, res.created[0])
    assert claim["spec"]["resources"]["requests"]["cpu"] == "4"  # each pod counted once, DaemonSet pods not at all
    # the next batch finds them a place on the in-flight NodeClaim instead of launching again
    again = w.prov.schedule()
    assert again.created == [] and set(again.nominated.values()) == {res.created[0]}


def test_a_healthy_node_is_capacity_and_its_pods_stay():
    w = _world()
    _node_with_pods(w.kube, "n1", 2)
    _pending(w.kube, "new")
    res = w.prov.schedule()
    assert res.created == [] and res.nominated == {"default/new": "n1"}


# ---- 5. what exists, tested through the controllers ----

def test_the_instance_type_list_on_the_nodeclaim_is_ordered_by_price():
    w = _world()  # the cloud lists m.4x (0.8), m.1x (0.2), m.2x (0.4)
    _pending(w.kube, "p1")
    [name] = w.prov.schedule().created
    claim = w.kube.get(R.NODECLAIMS, name)
    it_req = next(r for r in claim["spec"]["requirements"] if r["key"] == L.INSTANCE_TYPE)
    assert it_req["values"] == ["m.1x", "m.2x", "m.4x"]


def test_limits_count_launched_capacity_and_in_flight_nodeclaims():
    w = _world(limits={"cpu": "20"})
    w.kube.add(R.NODECLAIMS, {"metadata": {"name": "launched", "labels": {L.NODEPOOL: "general"}},
                              "spec": {"nodeClassRef": {"name": "default"}},
                              "status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"}}})
    assert w.prov._usage("general", w.cloud.types)["cpu"] == 16000
    _pending(w.kube, "p1")
    # 16 used of 20: a 4-CPU node still fits the limit
    first = w.prov.schedule()
    assert len(first.created) == 1
    claim = w.kube.get(R.NODECLAIMS, first.created[0])
    assert next(r for r in claim["spec"]["requirements"] if r["key"] == L.INSTANCE_TYPE)["values"] == ["m.1x"]
    # in flight (no capacity yet), it counts as its largest option: 20 of 20, nothing more can launch
    assert w.prov._usage("general", w.cloud.types) == {"nodes": 2, "cpu": 20000, "memory": 80 * GI, "pods": 220}
    _pending(w.kube, "p2", cpu="4")  # p1 and p2 do not both fit the in-flight node, and no other may launch
    second = w.prov.schedule()
    assert second.created == []
    [(_, why)] = second.unschedulable.items()
    assert why.startswith('nodepool "general": limits exceeded'), why


def test_nodepool_status_resources_and_nodes_follow_its_nodeclaims():
    w = _world()
    ctl = NodePoolStatusController(w.kube.cluster, w.kube)
    ctl.reconcile("general")
    status = w.kube.get(R.NODEPOOLS, "general")["status"]
    assert status["nodes"] == 0 and status["resources"] == {}
    assert C.is_true(status, "Ready") and C.is_true(status, "NodeClassReady")
    for name, cpu in (("a", "4"), ("b", "8")):  # launched: a provider ID and the instance's capacity
        w.kube.add(R.NODECLAIMS, {"metadata": {"name": name, "labels": {L.NODEPOOL: "general"}}, "spec": {},
                                  "status": {"providerID": f"aws:///us-east-1a/i-{name}",
                                             "capacity": {"cpu": cpu, "memory": f"{int(cpu) * 4}Gi", "pods": "110"}}})
    ctl.reconcile("general")
    status = w.kube.get(R.NODEPOOLS, "general")["status"]
    assert status["nodes"] == 2 and status["resources"] == {"cpu": "12", "memory": "48Gi", "pods": "220"}
    w.kube.objects.pop(("nodeclaims", "", "a"))
    w.kube.cluster.nodeclaims_informer._apply("DELETED", {"metadata": {"name": "a"}})
    ctl.reconcile("general")
    status = w.kube.get(R.NODEPOOLS, "general")["status"]
    assert status["nodes"] == 1 and status["resources"] == {"cpu": "8", "memory": "32Gi", "pods": "110"}
    writes = len(w.kube.writes)
    ctl.reconcile("general")
    assert len(w.kube.writes) == writes  # nothing changed: no write


def test_insufficient_capacity_deletes_the_nodeclaim_and_provisions_again():
    w = _world()
    w.cloud.ice = True
    _pending(w.kube, "p1")
    [name] = w.prov.schedule().created
    w.lifecycle.reconcile(name)  # finalizer
    w.lifecycle.reconcile(name)  # launch: ICE
    assert w.cloud.unavailable == [("m.1x", "us-east-1a", "on-demand")]  # the provider remembered the offering
    assert w.kube.get(R.NODECLAIMS, name)["metadata"].get("deletionTimestamp")
    assert w.triggered == [True]  # the provisioner is asked for a new batch
    assert [(e[0], e[2]) for e in w.recorder.events if e[1] == "Warning"] == [(name, "InsufficientCapacityError")]


def test_failed_scheduling_says_why_for_each_nodepool():
    w = _world(pools=("general", "tainted", "broken"))
    w.kube.patch(R.NODEPOOLS, "tainted", {"spec": {"template": {"spec": {"taints": [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}}})
    w.kube.patch(R.NODEPOOLS, "broken", {"spec": {"template": {"spec": {"nodeClassRef": {"name": "missing"}}}}})
    _pending(w.kube, "huge", cpu="64")
    res = w.prov.schedule()
    assert res.created == []
    [(name, type_, _, message)] = [e for e in w.recorder.events if e[2] == "FailedScheduling"]
    assert (name, type_) == ("huge", "Warning")
    assert message.startswith("Failed to schedule pod, ")
    for pool, why in (("general", "no instance type has room"),
                      ("tainted", "taint dedicated=gpu:NoSchedule not tolerated"),
                      ("broken", 'EC2NodeClass "missing"')):
        assert f'nodepool "{pool}": {why}' in message, (pool, message)


def test_nothing_is_decided_until_this_process_sees_its_own_nodeclaims():
    w = _world()
    cluster = w.kube.cluster
    assert cluster.synced()
    cluster.mark_created("general-x")
    assert not cluster.synced()  # created here, not seen by the informer yet
    w.kube.add(R.NODECLAIMS, {"metadata": {"name": "general-x"}, "spec": {}})
    assert cluster.synced()
    # the provisioner's loop waits (no pass) while unsynced
    cluster.mark_created("general-y")
    passes: list[int] = []

    def counted() -> Results:
        passes.append(1)
        return Results()

    w.prov.schedule = counted
    w.prov.batcher = Batcher(idle=0.01, maximum=0.05)
    stop = threading.Event()
    t = threading.Thread(target=w.prov.run, args=(stop,), daemon=True)
    w.prov.trigger()
    t.start()
    time.sleep(0.5)
    assert passes == []
    w.kube.add(R.NODECLAIMS, {"metadata": {"name": "general-y"}, "spec": {}})
    deadline = time.monotonic() + 3
    while not passes and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    t.join(3)
    assert passes  # synced again: the batch runs
    # a NodeClaim the informer never shows is given up on after a minute
    clock = [1000.0]
    cluster.clock = lambda: clock[0]
    cluster.mark_created("general-never")
    assert not cluster.synced()
    clock[0] += 61
    assert cluster.synced()


def _launched_claim(w, *, created: float, launched: float | None, registered_since: float | None) -> str:
    conditions = []
    if launched is not None:
        conditions.append({"type": "Launched", "status": "True", "reason": "Launched",
                           "lastTransitionTime": stamp(launched)})
    else:
        conditions.append({"type": "Launched", "status": "Unknown", "reason": "AwaitingReconciliation",
                           "lastTransitionTime": stamp(created)})
    if registered_since is not None:
        conditions.append({"type": "Registered", "status": "Unknown", "reason": "AwaitingReconciliation",
                           "lastTransitionTime": stamp(registered_since)})
    status: dict = {"conditions": conditions}
    if launched is not None:
        status["providerID"] = "aws:///us-east-1a/i-0001"
    w.kube.now = created
    return w.kube.add(R.NODECLAIMS, {"metadata": {"name": "c", "finalizers": [L.TERMINATION_FINALIZER],
                                                  "labels": {L.NODEPOOL: "general"}},
                                     "spec": {"nodeClassRef": {"name": "default"}, "requirements": [
                                         {"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m.1x"]}]},
                                     "status": status})["metadata"]["name"]


def test_liveness_launch_timeout_is_five_minutes_from_launcheds_transition():
    w = _world()
    w.kube.patch(R.EC2NODECLASSES, "default", {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "SubnetsNotFound"}]}})  # cannot launch: it waits
    t0 = 1_700_000_000.0
    name = _launched_claim(w, created=t0, launched=None, registered_since=None)
    w.kube.now = t0 + 299
    assert w.lifecycle.reconcile(name).requeue_after == 5.0
    assert not w.kube.get(R.NODECLAIMS, name)["metadata"].get("deletionTimestamp")
    w.kube.now = t0 + 301
    w.lifecycle.reconcile(name)
    assert w.kube.get(R.NODECLAIMS, name)["metadata"].get("deletionTimestamp")
    assert w.triggered == [True]


def test_liveness_registration_timeout_is_fifteen_minutes_from_registereds_transition():
    w = _world()
    t0 = 1_700_000_000.0
    # Registered has been Unknown since creation; the launch came 4 minutes later: the clock runs from creation
    name = _launched_claim(w, created=t0, launched=t0 + 240, registered_since=t0)
    w.kube.now = t0 + 899
    assert w.lifecycle.reconcile(name).requeue_after == 15.0
    assert not w.kube.get(R.NODECLAIMS, name)["metadata"].get("deletionTimestamp")
    w.kube.now = t0 + 901
    w.lifecycle.reconcile(name)
    assert w.kube.get(R.NODECLAIMS, name)["metadata"].get("deletionTimestamp")


def test_a_launch_stamps_registered_unknown_since_creation():
    w = _world()
    t0 = 1_700_000_000.0
    _pending(w.kube, "p1")
    w.kube.now = t0
    [name] = w.prov.schedule().created
    w.kube.now = t0 + 120  # launched two minutes after creation
    w.lifecycle.clock = lambda: w.kube.now
    w.lifecycle.reconcile(name)
    w.lifecycle.reconcile(name)
    claim = w.kube.get(R.NODECLAIMS, name)
    assert C.is_true(claim["status"], "Launched")
    assert (C.get(claim["status"], "Registered") or {}).get("lastTransitionTime") == stamp(t0)


def test_a_pod_waiting_for_a_held_reservation_is_deferred_not_failed():
    """Karpenter's provisioner decides strictly: a reservation of one free instance backs one NodeClaim (narrowed to
    capacity type reserved and the reservation); the second pod, which would need another, gets no FailedScheduling
    event and is not counted unschedulable: a later pass decides it."""
    reserved = _type("m.1x", 0.2, 4)
    reserved.offerings.append(Offering("us-east-1a", "reserved", 0.2 / 10_000_000, reservation_id="cr-1",
                                       reservation_capacity=1, reservation_type="default"))
    w = _world([reserved, _type("m.2x", 0.4, 8)])
    w.kube.patch(R.NODEPOOLS, "general", {"spec": {"template": {"spec": {"requirements": [
        {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["reserved", "on-demand"]}]}}}})
    _pending(w.kube, "p1", cpu="3")
    _pending(w.kube, "p2", cpu="3")
    res = w.prov.schedule()
    [name] = res.created
    reqs = {r["key"]: r["values"] for r in w.kube.get(R.NODECLAIMS, name)["spec"]["requirements"]}
    assert reqs[L.CAPACITY_TYPE] == ["reserved"] and reqs[L.CAPACITY_RESERVATION_ID] == ["cr-1"]
    assert reqs[L.INSTANCE_TYPE] == ["m.1x"]
    assert not res.unschedulable and not [e for e in w.recorder.events if e[2] == "FailedScheduling"]
    assert _sample("karpenter_scheduler_unschedulable_pods_count", controller="provisioner") == 0
