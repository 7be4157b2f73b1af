"""Typed views at the informer's edge: the cluster stores NodeClaims, Nodes and Pods as views that read through typed
properties, stay the API's JSON for writes, and cannot be changed in place by one controller under another."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from controller.api import labels as L
from controller.kube import resources as R
from controller.state.views import NodeClaimView, NodeView, PodView
from tests.unit.kubefake import FakeKube


def _world() -> FakeKube:
    kube = FakeKube()
    kube.add(R.NODECLAIMS, {"metadata": {"name": "c1", "labels": {L.NODEPOOL: "general"}, "finalizers": ["f"]},
                            "spec": {"nodeClassRef": {"name": "default"}, "requirements": [
                                {"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m.1x", "m.2x"]}],
                                "startupTaints": [{"key": "s", "effect": "NoSchedule"}]},
                            "status": {"providerID": "aws:///us-east-1a/i-1", "nodeName": "n1",
                                       "capacity": {"cpu": "4", "memory": "16Gi"},
                                       "conditions": [{"type": "Launched", "status": "True"}]}})
    kube.add(R.NODES, {"metadata": {"name": "n1", "labels": {L.NODEPOOL: "general", L.REGISTERED: "true"},
                                    "managedFields": [{"manager": "kubelet"}]},
                       "spec": {"providerID": "aws:///us-east-1a/i-1",
                                "taints": [{"key": L.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}]},
                       "status": {"capacity": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]}})
    kube.add(R.PODS, {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "ownerReferences": [
                          {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds-1",
                           "controller": True}]},
                      "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "big"}]},
                      "status": {"phase": "Running", "podIP": "10.0.0.1"}})
    return kube


def test_the_informers_store_typed_views_read_through_properties():
    cluster = _world().cluster
    claim, node, pod = cluster.nodeclaim("c1"), cluster.node("n1"), cluster.pod("ns/p")
    assert isinstance(claim, NodeClaimView) and isinstance(node, NodeView) and isinstance(pod, PodView)
    assert (claim.name, claim.nodepool, claim.provider_id, claim.node_name, claim.nodeclass_name) == (
        "c1", "general", "aws:///us-east-1a/i-1", "n1", "default")
    assert claim.instance_type_options == ["m.1x", "m.2x"] and claim.launched and not claim.deleting
    assert claim.capacity == {"cpu": 4000, "memory": 16 * 2**30} and claim.finalizers == ["f"]
    assert [t["key"] for t in claim.startup_taints] == ["s"]
    assert node.ready and node.registered and not node.initialized and node.disrupted
    assert "managedFields" not in node.metadata  # stripped at the edge
    assert (pod.key, pod.node_name, pod.phase, pod.daemonset_uid, pod.terminal) == ("ns/p", "n1", "Running", "ds-1",
                                                                                    False)
    assert "podIP" not in pod.status and pod.spec["containers"] == [{"name": "c"}]  # compacted at the edge
    assert cluster.nodeclaim_for_node(node) is claim and cluster.pods_on_node("n1") == [pod]


def test_a_view_is_the_json_for_writes_and_read_only_in_place():
    node = _world().cluster.node("n1")
    assert node is not None and node.raw is node
    assert json.loads(json.dumps(node)) == node  # sent as it is
    assert yaml.safe_load(yaml.safe_dump({"node": node}))["node"] == node  # and shown as it is
    with pytest.raises(TypeError, match=r"NodeView 'n1' is shared read-only"):
        node["spec"] = {}
    with pytest.raises(TypeError):
        node.setdefault("status", {})
    changed = copy.deepcopy(node)  # a copy is a plain dict to change and send
    assert type(changed) is dict and changed == node
    changed["metadata"]["labels"]["x"] = "y"
    assert "x" not in node.labels
    assert type(copy.copy(node)) is dict and type(dict(node)) is dict


def test_views_of_manifests_read_absent_and_malformed_fields_as_empty():
    pod = PodView.of({"metadata": {"ownerReferences": ["not an object"]}, "spec": None})
    assert (pod.name, pod.node_name, pod.owner_references, pod.controller_ref, pod.labels) == ("", "", [], None, {})
    assert NodeView.of({}).provider_id == "" and NodeView.of({}).condition("Ready") is None
    view = NodeClaimView.of({"metadata": {"name": "x"}})
    assert NodeClaimView.of(view) is view
