"""Node repair (feature gate NodeRepair) through the running controller: a Node whose condition matches one of the
AWS provider's repair policies for longer than it tolerates has its NodeClaim deleted and its pods land on a new one.

The condition's lastTransitionTime is written an hour in the past, as a node that has been unhealthy that long
reports it; the control plane's node lifecycle controller leaves such a condition alone (it owns only Ready)."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.e2e.conftest import World, nodepool_name
from tests.e2e.harness import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.localstack]


def _claim_names(world: World, pool: str) -> set[str]:
    return {c["metadata"]["name"] for c in world.nodeclaims(pool) if not c["metadata"].get("deletionTimestamp")}


def test_a_node_unhealthy_past_its_toleration_is_repaired(world: World, kubelet, start_controller):
    pool = nodepool_name("repair")
    world.nodepool(pool)
    ns = world.namespace()
    controller = start_controller(FEATURE_GATES="NodeRepair=true")
    world.deployment(ns, "app", 1, pool)
    wait_for("pod bound", lambda: len(world.bound_pods(ns, "app")) == 1, timeout=120)
    claim = world.nodeclaims(pool)[0]
    name, node = claim["metadata"]["name"], claim["status"]["nodeName"]
    since = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    # KernelReady=False tolerated 30 minutes (the AWS provider's policy): an hour is past it
    world.core.patch_node_status(node, {"status": {"conditions": [{
        "type": "KernelReady", "status": "False", "reason": "KernelDeadlock", "message": "task hung",
        "lastHeartbeatTime": since, "lastTransitionTime": since}]}})
    wait_for("the unhealthy node's NodeClaim deleted", lambda: name not in _claim_names(world, pool), timeout=150)
    assert controller.wait_log("deleting unhealthy node", timeout=30), "deleted by node repair, not another loop"
    wait_for("the pod on a new node", lambda: [p.spec.node_name for p in world.bound_pods(ns, "app")
                                               if p.spec.node_name != node], timeout=180)
    assert controller.running
