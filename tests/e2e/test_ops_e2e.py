"""The ops commands against the running controller, LocalStack and the control plane: `karpy interrupt` rehearses a
spot interruption end to end (the controller drains and replaces the node), `karpy drain NODE --wait` drains a node
through its NodeClaim until it is gone, and `karpy status` shows the NodeClaims the controller made."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cli import main
from tests.e2e.conftest import World, nodepool_name
from tests.e2e.harness import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.localstack,
              pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


def _karpy(*args: str):
    return CliRunner().invoke(main, list(args), prog_name="karpy")


def _claim_names(world: World, pool: str) -> set[str]:
    return {c["metadata"]["name"] for c in world.nodeclaims(pool)}


def test_interrupt_rehearses_a_spot_interruption(world: World, kubelet, start_controller):
    pool = nodepool_name("rehearse")
    world.nodepool(pool)
    ns = world.namespace()
    start_controller()
    world.deployment(ns, "svc", 2, pool)
    wait_for("pods bound", lambda: len(world.bound_pods(ns, "svc")) == 2, timeout=120)
    claim = world.nodeclaims(pool)[0]
    name, node = claim["metadata"]["name"], claim["status"]["nodeName"]
    status = _karpy("status", "--kubeconfig", world.kubeconfig, "-o", "json")
    assert status.exit_code == 0, status.output
    shown = {c["name"]: c for c in json.loads(status.stdout)["nodeClaims"]}
    assert shown[name]["state"] == "Ready" and shown[name]["node"] == node and shown[name]["pricePerHour"] > 0
    res = _karpy("interrupt", "--queue-url", world.queue_url, "--nodeclaim", name, "--kubeconfig", world.kubeconfig,
                 "--endpoint-url", world.endpoint, "--region", "us-east-1", "--cluster-name", world.cluster)
    assert res.exit_code == 0, res.output
    wait_for("interrupted NodeClaim gone", lambda: name not in _claim_names(world, pool), timeout=120)
    wait_for("pods on a replacement", lambda: len([p for p in world.bound_pods(ns, "svc")
                                                   if p.spec.node_name != node]) == 2, timeout=120)


def test_drain_a_node_and_wait(world: World, kubelet, start_controller):
    pool = nodepool_name("drain")
    world.nodepool(pool)
    ns = world.namespace()
    start_controller()
    world.deployment(ns, "app", 2, pool)
    wait_for("pods bound", lambda: len(world.bound_pods(ns, "app")) == 2, timeout=120)
    claim = world.nodeclaims(pool)[0]
    name, node, pid = claim["metadata"]["name"], claim["status"]["nodeName"], claim["status"]["providerID"]
    res = _karpy("drain", node, "--wait", "--timeout", "180", "--kubeconfig", world.kubeconfig)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == f"nodeclaim/{name} deleted (node {node}): the controller drains it"
    assert lines[-1] == f"nodeclaim/{name} deleted"
    assert name not in _claim_names(world, pool)
    assert world.instance(pid)["State"]["Name"] in ("shutting-down", "terminated")
    wait_for("pods on a replacement", lambda: len([p for p in world.bound_pods(ns, "app")
                                                   if p.spec.node_name != node]) == 2, timeout=120)
