"""Garbage collection over the in-memory apiserver (its writes fed to a real Cluster's informers, which hand out typed
views) and a fake cloud: which instances are terminated, which NodeClaims and Nodes are deleted, and which are kept."""

from __future__ import annotations

from typing import Any

import pytest

from controller.cloud.errors import NodeClaimNotFoundError
from controller.cloud.provider import LaunchedNode
from controller.garbagecollection.controller import INSTANCES, NODECLAIMS, NODES, GarbageCollector
from controller.kube import resources as R
from tests.unit.kubefake import FakeKube, stamp

NOW = 1_700_000_000.0
OTHER_FINALIZER = "example.com/keep"


class FakeCloud:
    """The cloud's instances by providerID; delete terminates (the instance leaves the list)."""

    def __init__(self) -> None:
        self.instances: dict[str, LaunchedNode] = {}
        self.deleted: list[str] = []

    def launch(self, pid: str, *, launched: float, nodeclaim: str = "") -> None:
        self.instances[pid] = LaunchedNode(provider_id=pid, instance_type="m5.large", zone="us-east-1a",
                                           capacity_type="on-demand", image_id="ami-1",
                                           labels={"karpenter.sh/nodepool": "default"}, launch_time=launched,
                                           state="running", nodeclaim=nodeclaim)

    def list(self) -> list[LaunchedNode]:
        return list(self.instances.values())

    def get(self, pid: str) -> LaunchedNode:
        if pid not in self.instances:
            raise NodeClaimNotFoundError(pid)
        return self.instances[pid]

    def delete(self, pid: str) -> None:
        self.get(pid)
        del self.instances[pid]
        self.deleted.append(pid)


def _claim(kube: FakeKube, name: str, pid: str = "", *, launched_at: float | None = None) -> None:
    conditions = [] if launched_at is None else [
        {"type": "Launched", "status": "True", "reason": "Launched", "lastTransitionTime": stamp(launched_at)}]
    kube.add(R.NODECLAIMS, {"metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
                            "spec": {}, "status": {"providerID": pid, "conditions": conditions}})


def _node(kube: FakeKube, name: str, pid: str, *, ready: bool) -> None:
    kube.add(R.NODES, {"metadata": {"name": name, "finalizers": ["karpenter.sh/termination", OTHER_FINALIZER]},
                       "spec": {"providerID": pid},
                       "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}})


@pytest.fixture
def world() -> Any:
    kube, cloud = FakeKube(now=NOW), FakeCloud()
    return kube, cloud, GarbageCollector(kube.cluster, kube, cloud, clock=lambda: NOW)


def test_an_instance_no_nodeclaim_claims_is_terminated_and_its_node_let_go(world: Any) -> None:
    kube, cloud, gc = world
    cloud.launch("aws:///us-east-1a/i-orphan", launched=NOW - 60, nodeclaim="gone")
    _node(kube, "n-orphan", "aws:///us-east-1a/i-orphan", ready=True)
    gc.run_once()
    assert cloud.deleted == ["aws:///us-east-1a/i-orphan"]
    node = kube.get(R.NODES, "n-orphan")  # deleted, held only by the finalizer that is not ours
    assert node["metadata"]["deletionTimestamp"]
    assert node["metadata"]["finalizers"] == [OTHER_FINALIZER]
    assert gc.collected == {INSTANCES: 1, NODES: 1}


def test_an_instance_is_kept_within_the_grace_period_and_while_its_tagged_nodeclaim_may_adopt_it(world: Any) -> None:
    kube, cloud, gc = world
    cloud.launch("aws:///us-east-1a/i-young", launched=NOW - 10)
    cloud.launch("aws:///us-east-1a/i-adopt", launched=NOW - 60, nodeclaim="c-launching")
    _claim(kube, "c-launching")  # crashed between the launch and the status write: no providerID yet
    cloud.launch("aws:///us-east-1a/i-claimed", launched=NOW - 60)
    _claim(kube, "c-claimed", "aws:///us-east-1a/i-claimed", launched_at=NOW - 60)
    gc.run_once()
    assert cloud.deleted == []
    assert gc.collected == {}


def test_an_instance_whose_tagged_nodeclaim_claimed_another_is_terminated(world: Any) -> None:
    kube, cloud, gc = world
    cloud.launch("aws:///us-east-1a/i-first", launched=NOW - 60, nodeclaim="c1")
    cloud.launch("aws:///us-east-1a/i-second", launched=NOW - 60, nodeclaim="c1")
    _claim(kube, "c1", "aws:///us-east-1a/i-second", launched_at=NOW - 60)
    gc.run_once()
    assert cloud.deleted == ["aws:///us-east-1a/i-first"]
    assert gc.collected == {INSTANCES: 1}


def test_a_launched_nodeclaim_whose_instance_is_gone_is_deleted_with_its_not_ready_node(world: Any) -> None:
    kube, _, gc = world
    _claim(kube, "c-gone", "aws:///us-east-1a/i-gone", launched_at=NOW - 60)
    _node(kube, "n-gone", "aws:///us-east-1a/i-gone", ready=False)
    _claim(kube, "c-ready", "aws:///us-east-1a/i-ready", launched_at=NOW - 60)
    _node(kube, "n-ready", "aws:///us-east-1a/i-ready", ready=True)  # the kubelet runs: the cloud is not trusted yet
    _claim(kube, "c-new", "aws:///us-east-1a/i-new", launched_at=NOW - 5)  # the list may not show it yet
    gc.run_once()
    assert ("nodeclaims", "", "c-gone") not in kube.objects
    assert kube.get(R.NODES, "n-gone")["metadata"]["finalizers"] == [OTHER_FINALIZER]
    assert {n for _, _, n in kube.objects} == {"n-gone", "c-ready", "n-ready", "c-new"}
    assert not kube.get(R.NODES, "n-ready")["metadata"].get("deletionTimestamp")
    assert gc.collected == {NODECLAIMS: 1, NODES: 1}


def test_the_tagged_nodeclaim_is_read_from_the_api_not_the_cache(world: Any) -> None:
    """A launch that wrote its providerID after the cache was read: the API's copy says the instance is claimed."""
    kube, cloud, gc = world
    cloud.launch("aws:///us-east-1a/i-1", launched=NOW - 60, nodeclaim="c1")
    _claim(kube, "c1")
    kube.objects[("nodeclaims", "", "c1")]["status"]["providerID"] = "aws:///us-east-1a/i-1"  # not yet watched
    assert kube.cluster.nodeclaim_for_provider_id("aws:///us-east-1a/i-1") is None
    gc.run_once()
    assert cloud.deleted == []
