"""Termination through the running controller: a user deletes a Node; a drain held by a PodDisruptionBudget."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.e2e.conftest import World, nodepool_name, settle
from tests.e2e.harness import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.localstack]


def _gone(fn, *args) -> bool:
    try:
        fn(*args)
        return False
    except client.ApiException as e:
        return e.status == 404


def _state(world: World, provider_id: str) -> str:
    return world.instance(provider_id)["State"]["Name"]


def test_user_deletes_a_node(world: World, kubelet, start_controller):
    pool = nodepool_name("delnode")
    world.nodepool(pool)
    ns = world.namespace()
    controller = start_controller()
    world.deployment(ns, "app", 2, pool)
    wait_for("pods bound", lambda: len(world.bound_pods(ns, "app")) == 2, timeout=120)
    claim = world.nodeclaims(pool)[0]
    node_name, pid = claim["status"]["nodeName"], claim["status"]["providerID"]
    world.core.delete_node(node_name)
    # the NodeClaim goes with its Node; the instance is terminated and both finalizers are released
    wait_for("NodeClaim gone", lambda: _gone(world.custom.get_cluster_custom_object, "karpenter.sh", "v1",
                                             "nodeclaims", claim["metadata"]["name"]), timeout=90)
    wait_for("Node gone", lambda: _gone(world.core.read_node, node_name), timeout=30)
    assert _state(world, pid) in ("shutting-down", "terminated")
    # the evicted pods are provisioned for again
    wait_for("pods bound again", lambda: len([p for p in world.bound_pods(ns, "app")
                                              if p.spec.node_name != node_name]) == 2, timeout=120)
    assert "deleted nodeclaim" in controller.messages()


def test_drain_waits_for_a_pdb(world: World, kubelet, start_controller):
    pool = nodepool_name("pdb")
    world.nodepool(pool)
    ns = world.namespace()
    start_controller()
    world.deployment(ns, "db", 2, pool)
    wait_for("pods bound", lambda: len(world.bound_pods(ns, "db")) == 2, timeout=120)
    # the client has no policy/v1beta1 API class any more: the PDB (1.20 serves only v1beta1) through plain REST
    pdbs = ("policy", "v1beta1", ns, "poddisruptionbudgets")
    world.custom.create_namespaced_custom_object(*pdbs, {
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "db"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "db"}}}})
    # the eviction API lets Pending pods go whatever the budget: wait until both run and the budget counts them
    wait_for("PDB observed with both pods healthy", lambda: (
        world.custom.get_namespaced_custom_object(*pdbs, "db").get("status") or {}).get("currentHealthy") == 2,
        timeout=60)
    claims = world.nodeclaims(pool)
    name = claims[0]["metadata"]["name"]
    node_name = claims[0]["status"]["nodeName"]
    world.custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", name)
    # the node is tainted and the PDB holds the drain
    wait_for("disrupted taint", lambda: any(t.key == "karpenter.sh/disrupted" for t in
                                            world.core.read_node(node_name).spec.taints or []), timeout=60)
    settle(5)
    # Karpenter's order: the NodeClaim's finalizer deleted the Node at once; the Node's own finalizer holds it
    held = world.core.read_node(node_name)
    assert held.metadata.deletion_timestamp is not None and "karpenter.sh/termination" in held.metadata.finalizers
    assert len([p for p in world.bound_pods(ns, "db") if p.spec.node_name == node_name]) >= 1
    assert not _gone(world.custom.get_cluster_custom_object, "karpenter.sh", "v1", "nodeclaims", name)
    events = [e for e in world.core.list_namespaced_event("default").items if e.reason == "FailedDraining"]
    assert events, "no FailedDraining event while the PDB blocks"
    # the budget allows it now: the drain completes and the NodeClaim goes
    world.custom.patch_namespaced_custom_object(*pdbs, "db", {"spec": {"maxUnavailable": 2}})
    wait_for("NodeClaim gone", lambda: _gone(world.custom.get_cluster_custom_object, "karpenter.sh", "v1",
                                             "nodeclaims", name), timeout=120)
