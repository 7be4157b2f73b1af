"""`karpy status`, `drain`, `cordon`, `uncordon` against the real control plane. NodePools, NodeClaims (with their
status, as the controller would write it), Nodes and pods are created directly; for `drain --wait` the test plays
the controller's termination by removing the NodeClaim's finalizer once the CLI has deleted it."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from cli import main
from controller.api import labels as L
from controller.kube import resources as R
from controller.kube.errors import NotFoundError
from tests.kubetest import wait_for

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


def _now(offset: float = 0) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cond(type_: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason or type_, "message": message or type_,
            "lastTransitionTime": _now()}


@pytest.fixture(scope="module")
def world(kube, kubeconfig) -> Iterator[dict[str, Any]]:
    """A NodePool with limits, two NodeClaims (one Ready with its Node, one still launching), a pending pod with a
    FailedScheduling event."""
    kc, _, _ = kube
    suffix = uuid.uuid4().hex[:6]
    pool = f"ops-{suffix}"
    undo: list[Callable[[], Any]] = []  # run in reverse at the end whatever the tests did: nothing is left behind
    try:
        yield _world(kc, kubeconfig, suffix, pool, undo)
    finally:
        for step in reversed(undo):
            with contextlib.suppress(Exception):
                step()


def _release(kc: Any, name: str) -> None:
    """A NodeClaim deleted without a controller: its termination finalizer removed, then the object."""
    with contextlib.suppress(NotFoundError):
        kc.patch(R.NODECLAIMS, name, {"metadata": {"finalizers": None}})
    with contextlib.suppress(NotFoundError):
        kc.delete(R.NODECLAIMS, name)


def _world(kc: Any, kubeconfig: str, suffix: str, pool: str, undo: list[Callable[[], Any]]) -> dict[str, Any]:
    """The objects of `world`, each undo step registered as soon as its object exists."""
    undo.append(lambda: kc.delete(R.NODEPOOLS, pool))
    kc.create(R.NODEPOOLS, {
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": pool},
        "spec": {"limits": {"cpu": "100", "memory": "400Gi"}, "template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": L.CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}]}}}})
    kc.patch(R.NODEPOOLS, pool, {"status": {"conditions": [_cond("Ready", "False", "NodeClassNotReady",
                                                                   'EC2NodeClass "default" not found')]}},
             subresource="status")
    ready, launching, node = f"{pool}-ready", f"{pool}-launching", f"ip-10-9-0-{int(suffix, 16) % 250}.ec2.internal"
    provider_id = f"aws:///us-east-1a/i-0{suffix}0000000000"
    for name, labels, status in (
            (ready, {L.INSTANCE_TYPE: "m5.large", L.ZONE: "us-east-1a", L.CAPACITY_TYPE: "spot"},
             {"providerID": provider_id, "nodeName": node, "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
              "conditions": [_cond("Launched"), _cond("Registered"), _cond("Initialized"), _cond("Ready")]}),
            (launching, {}, {"conditions": [_cond("Launched", "Unknown", "Launching")]})):
        undo.append(functools.partial(_release, kc, name))
        kc.create(R.NODECLAIMS, {
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {L.NODEPOOL: pool, **labels}, "finalizers": [L.TERMINATION_FINALIZER]},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []}})
        kc.patch(R.NODECLAIMS, name, {"status": status}, subresource="status")
    claim = kc.get(R.NODECLAIMS, ready)
    undo.append(lambda: kc.delete(R.NODES, node))
    kc.create(R.NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": node, "labels": {L.NODEPOOL: pool, L.HOSTNAME: node},
        "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": ready,
                             "uid": claim["metadata"]["uid"]}]},
        "spec": {"providerID": provider_id}})
    ns = f"ops-{suffix}"
    undo.append(lambda: kc.delete(R.NAMESPACES, ns))
    kc.create(R.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    wait_for("the namespace's default ServiceAccount",
             lambda: _exists(kc, R.Resource("", "v1", "serviceaccounts", "ServiceAccount", True), "default", ns))
    # a real Deployment (its pods owned by a ReplicaSet, as the controller-manager makes them) nobody schedules
    kc.create(R.Resource("apps", "v1", "deployments", "Deployment", True), {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": ns},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]}}}})
    pods = wait_for("the Deployment's three pods", lambda: (lambda items: items if len(items) == 3 else None)(
        kc.list(R.PODS, namespace=ns)[0]))
    first = sorted(pods, key=lambda p: p["metadata"]["name"])[0]
    for offset, message in ((-60, "an older message"),
                            (0, "0/1 nodes are available: 1 node(s) had untolerated taint.")):
        kc.create(R.EVENTS, {
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": f"web-{uuid.uuid4().hex[:8]}", "namespace": ns},
            "involvedObject": {"kind": "Pod", "name": first["metadata"]["name"], "namespace": ns,
                               "uid": first["metadata"]["uid"]},
            "reason": "FailedScheduling", "message": message, "type": "Warning",
            "firstTimestamp": _now(offset), "lastTimestamp": _now(offset),
            "source": {"component": "default-scheduler"}})
    return {"kc": kc, "kubeconfig": kubeconfig, "pool": pool, "ready": ready, "launching": launching, "node": node,
            "ns": ns}


def _exists(kc, res, name, ns=None) -> bool:
    try:
        kc.get(res, name, ns)
        return True
    except NotFoundError:
        return False


def _karpy(world, *args: str):
    return CliRunner().invoke(main, [*args, "--kubeconfig", world["kubeconfig"]], prog_name="karpy")


def test_status_json_reports_pools_claims_and_pending_pods(world):
    res = _karpy(world, "status", "-o", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["apiVersion"].startswith("karpy.sh/") and doc["kind"] == "Status"
    pool = next(p for p in doc["nodePools"] if p["name"] == world["pool"])
    assert pool["ready"] is False and "not found" in pool["readyMessage"]
    assert pool["nodeClaims"] == 2
    assert pool["resources"]["cpu"] == {"used": "2", "limit": "100", "percent": 2.0}
    assert pool["resources"]["memory"]["used"] == "8Gi" and pool["resources"]["memory"]["limit"] == "400Gi"
    claims = {c["name"]: c for c in doc["nodeClaims"]}
    ready = claims[world["ready"]]
    assert ready["state"] == "Ready" and ready["node"] == world["node"] and ready["instanceType"] == "m5.large"
    assert ready["capacityType"] == "spot" and ready["zone"] == "us-east-1a"
    from controller.catalog.snapshot import load_prices

    assert ready["pricePerHour"] == load_prices().spot[("m5.large", "us-east-1a")]
    assert isinstance(ready["ageSeconds"], int) and 0 <= ready["ageSeconds"] < 600
    assert claims[world["launching"]]["state"] == "Launching" and claims[world["launching"]]["pricePerHour"] is None
    pending = [p for p in doc["pendingPods"] if p["namespace"] == world["ns"]]
    assert len(pending) == 3 and all(p["name"].startswith("web-") for p in pending)
    assert {p["owner"] for p in pending} == {"Deployment/web"}
    assert pending[0]["reason"] == "0/1 nodes are available: 1 node(s) had untolerated taint."  # the latest one
    assert pending[1]["reason"] is None and isinstance(pending[1]["ageSeconds"], int)


def test_status_table_fits_80_columns(world):
    res = _karpy(world, "status")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert any(line.startswith(world["pool"]) and "False" in line and "2/100" in line for line in lines)
    # the pod with an event and the two without are two groups of Deployment/web
    assert any("Deployment/web" in line and " 1 " in line for line in lines)
    assert any("Deployment/web" in line and " 2 " in line for line in lines)
    assert sum("untolerated taint" in line for line in lines) == 1


def test_cordon_and_uncordon_a_node(world):
    kc, node = world["kc"], world["node"]
    res = _karpy(world, "cordon", node)
    assert res.exit_code == 0 and res.output.strip() == f"node/{node} cordoned"
    assert kc.get(R.NODES, node)["spec"]["unschedulable"] is True
    assert _karpy(world, "cordon", node).output.strip() == f"node/{node} already cordoned"
    # a NodeClaim's name reaches its node
    res = _karpy(world, "uncordon", world["ready"])
    assert res.exit_code == 0 and res.output.strip() == f"node/{node} uncordoned"
    assert not kc.get(R.NODES, node)["spec"].get("unschedulable")
    res = _karpy(world, "cordon", "no-such-node")
    assert res.exit_code == 1 and res.output.startswith("error: unknown node 'no-such-node'")
    assert res.output.count("\n") == 1


def test_drain_unknown_names_fail_in_one_line(world):
    res = _karpy(world, "drain", world["ready"] + "x")
    assert res.exit_code == 1 and res.output.count("\n") == 1
    assert f"unknown NodeClaim or Node '{world['ready']}x' (did you mean {world['ready']}?)" in res.output
    # a node karpy did not launch is left to kubectl drain
    other = f"{world['pool']}-unmanaged"
    world["kc"].create(R.NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": other},
                                 "spec": {"providerID": "aws:///us-east-1b/i-0fffffffffffffff0"}})
    try:
        res = _karpy(world, "drain", other)
        assert res.exit_code == 1
        assert res.output == (f"error: node {other} has no NodeClaim (not launched by karpy); "
                              "drain it with kubectl drain\n")
        assert _exists(world["kc"], R.NODES, other)
    finally:
        world["kc"].delete(R.NODES, other)


def test_drain_by_node_name_deletes_its_nodeclaim_and_waits(world):
    kc = world["kc"]
    result: dict[str, Any] = {}

    def run() -> None:
        result["res"] = _karpy(world, "drain", world["node"], "--wait", "--timeout", "60")

    t = threading.Thread(target=run)
    t.start()
    claim = wait_for("the NodeClaim marked for deletion",
                     lambda: kc.get(R.NODECLAIMS, world["ready"])["metadata"].get("deletionTimestamp") and
                     kc.get(R.NODECLAIMS, world["ready"]), timeout=30)
    assert _exists(kc, R.NODES, world["node"])  # the node is the controller's to remove, not the CLI's
    # the controller's termination, played: the node goes, then the finalizer
    kc.delete(R.NODES, world["node"])
    kc.patch(R.NODECLAIMS, world["ready"], [{"op": "remove", "path": "/metadata/finalizers"}], patch_type="json")
    t.join(60)
    res = result["res"]
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == f"nodeclaim/{world['ready']} deleted (node {world['node']}): the controller drains it"
    assert lines[-1] == f"nodeclaim/{world['ready']} deleted"
    assert any("draining node" in line or "terminating the instance" in line for line in lines[1:-1])
    assert claim["metadata"]["name"] == world["ready"]


def test_drain_wait_times_out_in_one_line(world):
    res = _karpy(world, "drain", world["launching"], "--wait", "--timeout", "3")
    assert res.exit_code == 1
    assert res.stdout.startswith(f"nodeclaim/{world['launching']} deleted")
    assert "still there after 3s" in res.stderr and res.stderr.count("\n") == 1
    again = _karpy(world, "drain", world["launching"])
    assert again.exit_code == 0 and "already being deleted" in again.output
    world["kc"].patch(R.NODECLAIMS, world["launching"], [{"op": "remove", "path": "/metadata/finalizers"}],
                      patch_type="json")
