"""The NodeClaim finalizer against a real control plane, in Karpenter's order: a Registered NodeClaim's Node is deleted
first and the instance is left to the Node's finalizer; an unregistered one goes straight to its instance; one never
launched just lets go. The cloud is the small in-test fake of test_termination_kube.py (it records deletes)."""

from __future__ import annotations

import pytest

from controller.api import labels as L
from controller.kube import resources as R
from controller.kube.workqueue import Result
from controller.termination import drain as D
from tests.integration import test_termination_kube as termination_kube
from tests.integration.test_termination_kube import (
    FakeCloud,
    World,
    conditions,
    drive,
    get,
    make_pod,
    node_and_claim,
    termination,
    wait_for,
    wait_pods_cached,
)

world = termination_kube.world  # the same fixtures: a cache over the control plane, a namespace per test
ns = termination_kube.ns

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


def test_a_registered_nodeclaim_waits_for_its_node_before_the_instance(world: World, ns: str) -> None:
    cloud = FakeCloud()
    node, claim, pid = node_and_claim(world, cloud)
    make_pod(world, ns, "app", node, tgps=30)
    wait_pods_cached(world, node, 1)
    world.client.delete(R.NODECLAIMS, claim)
    term = termination(world, cloud)
    assert term.claims.reconcile(claim) == Result()
    # the Node is deleted but held by its own finalizer; nothing is drained or terminated by the NodeClaim's
    deleting = world.client.get(R.NODES, node)
    assert deleting["metadata"].get("deletionTimestamp")
    assert L.TERMINATION_FINALIZER in deleting["metadata"]["finalizers"]
    assert not D.has_disrupted_taint(deleting)
    wait_for(lambda: (world.cluster.node(node) or {}).get("metadata", {}).get("deletionTimestamp"),
             "the cache to see the Node deleting")
    assert term.claims.reconcile(claim) == Result()
    assert cloud.deleted == []
    assert get(world, R.PODS, "app", ns) is not None
    stored = world.client.get(R.NODECLAIMS, claim)
    assert L.TERMINATION_FINALIZER in stored["metadata"]["finalizers"]
    assert "InstanceTerminating" not in conditions(stored)

    def kubelet() -> None:
        pod = get(world, R.PODS, "app", ns)
        if pod is not None and pod["metadata"].get("deletionTimestamp"):
            world.client.delete(R.PODS, "app", ns, grace_period_seconds=0)

    # the Node's finalizer goes first, then the NodeClaim's
    drive(world, lambda: term.nodes.reconcile(node), lambda: get(world, R.NODES, node) is None, timeout=60,
          each=kubelet, node=node)
    assert get(world, R.NODECLAIMS, claim) is not None
    assert cloud.deleted == [pid]
    drive(world, lambda: term.claims.reconcile(claim), lambda: get(world, R.NODECLAIMS, claim) is None, timeout=30)
    assert cloud.deleted == [pid]


def test_an_unregistered_nodeclaim_terminates_its_instance_and_leaves_the_node(world: World, ns: str) -> None:
    cloud = FakeCloud(linger=1)
    node, claim, pid = node_and_claim(world, cloud)
    stored = world.client.get(R.NODECLAIMS, claim)
    world.client.patch(R.NODECLAIMS, claim, {"status": {"conditions": [
        c for c in stored["status"]["conditions"] if c["type"] != "Registered"]}}, subresource="status")
    world.client.delete(R.NODECLAIMS, claim)
    term = termination(world, cloud)
    drive(world, lambda: term.claims.reconcile(claim), lambda: get(world, R.NODECLAIMS, claim) is None, timeout=30)
    assert cloud.deleted == [pid]
    left = world.client.get(R.NODES, node)
    assert not left["metadata"].get("deletionTimestamp")  # as Karpenter: only a Registered NodeClaim's Node is deleted


def test_a_nodeclaim_never_launched_just_lets_go(world: World, ns: str) -> None:
    cloud = FakeCloud()
    _, claim, _ = node_and_claim(world, cloud, launched=False)
    world.client.delete(R.NODECLAIMS, claim)
    assert termination(world, cloud).claims.reconcile(claim) == Result()
    assert get(world, R.NODECLAIMS, claim) is None
    assert cloud.deleted == []
