"""The provisioner's pure parts: Karpenter's provisionable-pod rule, the batch window, NodeClaims shaped as
Karpenter's NodeClaimTemplate makes them, and the lifecycle's registration labels and initialization rules."""

from __future__ import annotations

import threading
import time

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
    ({"metadata__ownerReferences": [{"kind": "DaemonSet", "name": "d", "controller": True}]}, False),
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
    assert meta["annotations"][L.NODEPOOL_HASH_VERSION] == "v3"
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
