"""`karpy controller` scales a Deployment up on the real control plane and LocalStack: NodeClaims created, instances
launched with Karpenter's tags, Nodes registered and initialized, pods bound by the real kube-scheduler."""

from __future__ import annotations

import functools
import urllib.request

import pytest

from tests.e2e.conftest import World, nodepool_name
from tests.e2e.harness import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.localstack]


def _claim_ready(world: World, name: str) -> bool:
    return _ready(world.custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", name))


def _ready(claim: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (claim.get("status") or {}).get("conditions")
               or [])


def test_scale_up_deployment_to_bound_pods(world: World, kubelet, start_controller):
    pool = nodepool_name("scale")
    world.nodepool(pool)
    ns = world.namespace()
    controller = start_controller()
    world.deployment(ns, "web", 6, pool, cpu="1", memory="1Gi")
    world.deployment(ns, "huge", 1, pool, cpu="5000")  # no instance type is that big
    wait_for("all 6 pods bound", lambda: len(world.bound_pods(ns, "web")) == 6, timeout=120)
    claims = world.nodeclaims(pool)
    assert claims, "no NodeClaim for the pool"
    for claim in claims:
        name = claim["metadata"]["name"]
        wait_for(f"{name} Ready", functools.partial(_claim_ready, world, name), timeout=60)
    claim = world.custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claims[0]["metadata"]["name"])
    meta, spec, status = claim["metadata"], claim["spec"], claim["status"]
    # shaped as Karpenter's NodeClaims
    assert meta["name"].startswith(f"{pool}-")
    assert meta["ownerReferences"][0]["kind"] == "NodePool" and meta["ownerReferences"][0]["name"] == pool
    assert meta["labels"]["karpenter.sh/nodepool"] == pool
    assert "karpenter.sh/nodepool-hash" in meta["annotations"]
    nodeclass = world.custom.get_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", world.nodeclass)
    for key in ("karpenter.k8s.aws/ec2nodeclass-hash", "karpenter.k8s.aws/ec2nodeclass-hash-version"):
        assert meta["annotations"][key] == nodeclass["metadata"]["annotations"][key], key
    assert "karpenter.sh/termination" in meta["finalizers"]
    types = next(r for r in spec["requirements"] if r["key"] == "node.kubernetes.io/instance-type")
    assert types["operator"] == "In" and types["values"]
    assert spec["resources"]["requests"]["cpu"]
    assert status["providerID"].startswith("aws:///us-east-1")
    assert status["imageID"].startswith("ami-")
    assert status["capacity"]["cpu"] and status["allocatable"]["memory"]
    # the instance carries Karpenter's tags
    tags = {t["Key"]: t["Value"] for t in world.instance(status["providerID"]).get("Tags", [])}
    assert tags["karpenter.sh/nodepool"] == pool
    assert tags["karpenter.sh/nodeclaim"] == meta["name"]
    assert tags["karpenter.k8s.aws/ec2nodeclass"] == world.nodeclass
    assert tags[f"kubernetes.io/cluster/{world.cluster}"] == "owned"
    assert tags["eks:eks-cluster-name"] == world.cluster
    assert "Name" in tags
    # the Node was registered and initialized by the controller
    node = world.core.read_node(status["nodeName"])
    assert node.metadata.labels["karpenter.sh/initialized"] == "true"
    assert node.metadata.labels["karpenter.sh/registered"] == "true"
    assert "karpenter.sh/termination" in node.metadata.finalizers
    assert node.metadata.owner_references[0].kind == "NodeClaim"
    assert not any(t.key == "karpenter.sh/unregistered" for t in node.spec.taints or [])
    # logs, events and metrics as Karpenter's
    messages = controller.messages()
    for message in ("found provisionable pod(s)", "created nodeclaim", "launched nodeclaim", "registered nodeclaim",
                    "initialized nodeclaim"):
        assert message in messages, message
    events = world.core.list_namespaced_event(ns).items
    assert any(e.reason == "Nominated" for e in events)
    failed = wait_for("FailedScheduling for the huge pod", lambda: [
        e for e in world.core.list_namespaced_event(ns).items
        if e.reason == "FailedScheduling" and e.source.component == "karpenter"
        and e.involved_object.name.startswith("huge-")], timeout=30)
    assert f'nodepool "{pool}": ' in failed[0].message, failed[0].message
    body = urllib.request.urlopen(f"http://127.0.0.1:{controller.env['METRICS_PORT']}/metrics", timeout=5).read()
    text = body.decode()
    assert "karpenter_nodeclaims_created_total{" in text
    assert f'nodepool="{pool}"' in text
    assert "karpenter_cluster_state_synced 1.0" in text
    assert ('karpenter_cloudprovider_duration_seconds_count{controller="nodeclaim.lifecycle",method="Create",'
            'provider="aws"}') in text
    assert 'karpenter_pods_state{' in text and f'namespace="{ns}"' in text
    assert controller.stop() == 0


def test_startup_taints_hold_initialization(world: World, kubelet, start_controller):
    pool = nodepool_name("startup")
    world.nodepool(pool, startupTaints=[{"key": "example.com/agent-not-ready", "effect": "NoSchedule"}])
    ns = world.namespace()
    start_controller()
    world.deployment(ns, "agent", 1, pool)
    claim = wait_for("a registered NodeClaim", lambda: next(
        (c for c in world.nodeclaims(pool) if (c.get("status") or {}).get("nodeName")), None), timeout=90)
    node_name = claim["status"]["nodeName"]
    node = world.core.read_node(node_name)
    assert any(t.key == "example.com/agent-not-ready" for t in node.spec.taints or [])

    def initialized() -> bool:
        c = world.custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim["metadata"]["name"])
        return any(x["type"] == "Initialized" and x["status"] == "True" for x in c["status"].get("conditions", []))

    def reason() -> str:
        c = world.custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim["metadata"]["name"])
        return next((x.get("message", "") for x in c["status"].get("conditions", []) if x["type"] == "Initialized"), "")

    assert "example.com/agent-not-ready" in wait_for("Initialized held by the startup taint", reason, timeout=30)
    assert not initialized()
    assert world.bound_pods(ns, "agent") == []
    # the node's agent removes its startup taint (a JSON patch naming the entry, as an agent would do it)
    taints = world.core.read_node(node_name).spec.taints or []
    i = next(i for i, t in enumerate(taints) if t.key == "example.com/agent-not-ready")
    world.core.patch_node(node_name, [{"op": "test", "path": f"/spec/taints/{i}/key",
                                       "value": "example.com/agent-not-ready"},
                                      {"op": "remove", "path": f"/spec/taints/{i}"}])
    wait_for("Initialized", initialized, timeout=60)
    wait_for("pod bound", lambda: len(world.bound_pods(ns, "agent")) == 1, timeout=60)
    # one node was enough: the startup taint did not make karpy launch a second one
    assert len(world.nodeclaims(pool)) == 1
