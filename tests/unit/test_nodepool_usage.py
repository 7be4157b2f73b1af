"""NodePool usage by Karpenter's one rule (its cluster state's NodePoolResourcesFor), and the faces that show or use
it agreeing on one cluster: the NodePool's status, `karpy status`, the scheduler inputs of `karpy simulate` and the
disruption simulation, and the provisioner's limits."""

from __future__ import annotations

import pytest

from controller.api import labels as L
from controller.api.quantity import resources_from_dict
from controller.catalog.pricing import PriceTable
from controller.kube import resources as R
from controller.nodepool.status import NodePoolStatusController
from controller.ops.status import collect
from controller.provisioning import inputs
from controller.state.usage import UsageError, nodepool_usage
from tests.unit.kubefake import FakeKube, stamp
from tests.unit.test_provisioning import _world

GI = 2**30


def _claim(name: str, pid: str = "", capacity: dict | None = None, pool: str = "general", **meta) -> dict:
    return {"metadata": {"name": name, "labels": {L.NODEPOOL: pool}, **meta},
            "spec": {"nodeClassRef": {"name": "default"}, "requirements": [
                {"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m.1x", "m.2x"]}]},
            "status": {"providerID": pid, "capacity": capacity or {}}}


def _node(name: str, pid: str, capacity: dict, labels: dict | None = None, taints: list | None = None) -> dict:
    return {"metadata": {"name": name, "labels": {L.NODEPOOL: "general", L.INSTANCE_TYPE: "m.2x", **(labels or {})}},
            "spec": {"providerID": pid, "taints": taints or []}, "status": {"capacity": capacity}}


def _cluster(kube: FakeKube) -> None:
    """Every case of the rule in one NodePool, each counting (or not) differently."""
    ready = {L.REGISTERED: "true", L.INITIALIZED: "true"}
    # initialized: the Node's capacity, not the NodeClaim's
    kube.add(R.NODECLAIMS, _claim("a", "aws:///a", {"cpu": "4", "memory": "16Gi"}))
    kube.add(R.NODES, _node("node-a", "aws:///a", {"cpu": "4", "memory": "15Gi", "pods": "110"}, ready))
    # registered, not initialized: the kubelet's zeros filled from the NodeClaim
    kube.add(R.NODECLAIMS, _claim("b", "aws:///b", {"cpu": "8", "memory": "32Gi", "pods": "58"}))
    kube.add(R.NODES, _node("node-b", "aws:///b", {"cpu": "8", "memory": "0"}, {L.REGISTERED: "true"}))
    # launched, no Node yet: the NodeClaim's capacity
    kube.add(R.NODECLAIMS, _claim("c", "aws:///c", {"cpu": "2", "memory": "8Gi"}))
    # deleting, or its instance terminating, or its Node being replaced: nothing
    kube.add(R.NODECLAIMS, _claim("d", "aws:///d", {"cpu": "64"}, finalizers=["karpenter.sh/termination"],
                                  deletionTimestamp=stamp(kube.now)))
    terminating = _claim("t", "aws:///t", {"cpu": "64"})
    terminating["status"]["conditions"] = [{"type": "InstanceTerminating", "status": "True"}]
    kube.add(R.NODECLAIMS, terminating)
    kube.add(R.NODECLAIMS, _claim("g", "aws:///g", {"cpu": "64"}))
    kube.add(R.NODES, _node("node-g", "aws:///g", {"cpu": "64"}, ready,
                            [{"key": L.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}]))
    # a NodePool's Node without a NodeClaim: its own capacity
    kube.add(R.NODES, _node("node-e", "aws:///e", {"cpu": "1", "memory": "1Gi"}, ready))
    # not launched: not in Karpenter's state (the provisioner alone counts it, by its largest option)
    kube.add(R.NODECLAIMS, _claim("f"))
    # another pool's and no pool's
    kube.add(R.NODECLAIMS, _claim("o", "aws:///o", {"cpu": "3"}, pool="other"))
    kube.add(R.NODES, {"metadata": {"name": "plain"}, "spec": {"providerID": "aws:///p"},
                       "status": {"capacity": {"cpu": "96"}}})


EXPECTED = {"nodes": 4, "cpu": 15000, "memory": (15 + 32 + 8 + 1) * GI, "pods": 168}


def test_the_rule_counts_what_karpenters_cluster_state_counts():
    w = _world()
    _cluster(w.kube)
    usage = w.kube.cluster.nodepool_usage()
    assert usage == {"general": EXPECTED, "other": {"nodes": 1, "cpu": 3000}}


def test_the_four_faces_agree_on_one_cluster():
    w = _world()
    _cluster(w.kube)
    # the NodePool's status (and its usage gauge)
    NodePoolStatusController(w.kube.cluster, w.kube).reconcile("general")
    status = w.kube.get(R.NODEPOOLS, "general")["status"]
    assert {"nodes": status["nodes"], **resources_from_dict(status["resources"])} == EXPECTED
    # `karpy status`, from its own list calls
    w.kube.host = "https://cluster.test"
    [shown] = [p for p in collect(w.kube, PriceTable())["nodePools"] if p["name"] == "general"]
    assert resources_from_dict({k: v["used"] for k, v in shown["resources"].items()}) == EXPECTED
    # the scheduler inputs of `karpy simulate` and the disruption simulation, from the same objects
    nodes = [o for (p, _, _), o in w.kube.objects.items() if p == "nodes"]
    claims = [o for (p, _, _), o in w.kube.objects.items() if p == "nodeclaims"]
    assert inputs.nodepool_usage(nodes, claims)["general"] == EXPECTED
    # the provisioner's limits: the same, plus the NodeClaim not launched yet at its largest option (m.2x: 8 CPU)
    biggest = next(it for it in w.cloud.types if it.name == "m.2x").capacity
    assert w.prov._usage("general", w.cloud.types) == {
        k: EXPECTED.get(k, 0) + (1 if k == "nodes" else biggest.get(k, 0)) for k in {*EXPECTED, *biggest}}


def test_a_capacity_that_cannot_be_read_is_named_or_counted_as_the_node_alone():
    bad = _claim("x", "aws:///x", {"cpu": "many"})
    assert nodepool_usage([bad], []) == {"general": {"nodes": 1}}
    with pytest.raises(UsageError, match=r"NodeClaim/x: status.capacity"):
        nodepool_usage([bad], [], strict=True)
    with pytest.raises(inputs.InputError, match=r"Node/n: status.capacity"):
        inputs.nodepool_usage([_node("n", "aws:///n", {"cpu": "many"})])
