"""`karpy controller` held to Karpenter's provisioning behaviours on the real control plane and LocalStack: a pod
whose claim is bound to a zonal volume gets its node in the volume's zone (the PV controller binds the claim, the real
scheduler binds the pod), and a static NodePool gets its replicas. (namespaceSelector is tested offline: the 1.20
apiserver here predates it and drops the field.)"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import World, nodepool_name
from tests.e2e.harness import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.localstack]

ZONE = "topology.kubernetes.io/zone"


def _pod(name: str, pool: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": spec.pop("labels", {})},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                                     "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}}],
                     "nodeSelector": {"karpenter.sh/nodepool": pool}, "terminationGracePeriodSeconds": 0, **spec}}


def _zone_requirement(claim: dict[str, Any]) -> list[str] | None:
    return next((r.get("values") for r in claim["spec"]["requirements"] if r["key"] == ZONE), None)


def test_a_pod_bound_to_a_zonal_volume_gets_a_node_in_that_zone(world: World, kubelet, start_controller):
    pool = nodepool_name("volume")
    world.nodepool(pool)
    ns = world.namespace()
    pv = f"{ns}-data"
    world.core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
                 "hostPath": {"path": "/tmp/karpy-e2e"},
                 "claimRef": {"namespace": ns, "name": "data"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [
                     {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["us-east-1b"]}]}]}}}})
    world.core.create_namespaced_persistent_volume_claim(ns, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "manual", "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}}})
    wait_for("the claim bound to the volume", lambda: world.core.read_namespaced_persistent_volume_claim(
        "data", ns).status.phase == "Bound", timeout=60)
    start_controller()
    world.core.create_namespaced_pod(ns, _pod("db", pool, volumes=[
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]))
    claim = wait_for("a NodeClaim", lambda: next(iter(world.nodeclaims(pool)), None), timeout=90)
    assert _zone_requirement(claim) == ["us-east-1b"]
    node_name = wait_for("the pod bound", lambda: world.core.read_namespaced_pod("db", ns).spec.node_name,
                         timeout=120)
    assert world.core.read_node(node_name).metadata.labels[ZONE] == "us-east-1b"
    world.core.delete_persistent_volume(pv)


def test_a_static_nodepool_gets_its_replicas(world: World, kubelet, start_controller):
    pool = nodepool_name("static")
    body = world.nodepool(pool)
    world.custom.patch_cluster_custom_object("karpenter.sh", "v1", "nodepools", body["metadata"]["name"],
                                             {"spec": {"replicas": 2}})
    start_controller(FEATURE_GATES="StaticCapacity=true")
    wait_for("two NodeClaims", lambda: len(world.nodeclaims(pool)) == 2, timeout=90)
    wait_for("both launched", lambda: all((c.get("status") or {}).get("providerID")
                                          for c in world.nodeclaims(pool)), timeout=90)
    claim = world.nodeclaims(pool)[0]
    assert not any(r["key"] == "node.kubernetes.io/instance-type" for r in claim["spec"]["requirements"])
    # the NodePool scaled down to nothing is the disruption side's; here: one more replica, one more NodeClaim
    world.custom.patch_cluster_custom_object("karpenter.sh", "v1", "nodepools", pool, {"spec": {"replicas": 3}})
    wait_for("three NodeClaims", lambda: len(world.nodeclaims(pool)) == 3, timeout=90)
    world.custom.patch_cluster_custom_object("karpenter.sh", "v1", "nodepools", pool, {"spec": {"replicas": 0}})


def test_daemonset_overhead_comes_from_its_live_pod(world: World, kubelet, start_controller):
    """A LimitRange gives the DaemonSet's pods 1500m that its template does not ask for: once a DaemonSet pod runs,
    karpy sizes new nodes for the live pod's requests (Karpenter's GetDaemonSetPod), so a 1-cpu pod that would fit a
    2-vCPU type beside the template's nothing gets a type with room for both."""
    pool = nodepool_name("dsover")
    world.nodepool(pool)
    ns = world.namespace()
    world.core.create_namespaced_limit_range(ns, {
        "apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults"},
        "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "1500m", "memory": "64Mi"},
                             "default": {"cpu": "2", "memory": "128Mi"}}]}})
    world.apps.create_namespaced_daemon_set(ns, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
            "metadata": {"labels": {"app": "agent"}},
            "spec": {"nodeSelector": {"karpenter.sh/nodepool": pool}, "terminationGracePeriodSeconds": 0,
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "a", "image": "registry.k8s.io/pause:3.9"}]}}}})
    start_controller()
    world.core.create_namespaced_pod(ns, _pod("first", pool))
    wait_for("the first pod bound", lambda: world.core.read_namespaced_pod("first", ns).spec.node_name, timeout=120)

    def live_agent() -> Any:
        pods = world.core.list_namespaced_pod(ns, label_selector="app=agent").items
        return next((p for p in pods if p.spec.node_name), None)

    agent = wait_for("a DaemonSet pod bound", live_agent, timeout=120)
    assert agent.spec.containers[0].resources.requests["cpu"] == "1500m"
    before = {c["metadata"]["name"] for c in world.nodeclaims(pool)}
    second = _pod("second", pool)
    second["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    world.core.create_namespaced_pod(ns, second)
    claim = wait_for("a second NodeClaim", lambda: next(
        (c for c in world.nodeclaims(pool) if c["metadata"]["name"] not in before), None), timeout=90)
    types = next(r["values"] for r in claim["spec"]["requirements"] if r["key"] == "node.kubernetes.io/instance-type")
    assert types and not [t for t in types if t.endswith(".large")], types[:10]  # no 2-vCPU type holds 1 + 1.5


def test_pods_that_will_not_move_off_a_deleting_node_are_not_provisioned_for(world: World, kubelet,
                                                                             start_controller):
    """A NodeClaim is deleted while it holds a Deployment's pod and a do-not-disrupt pod: the replacement capacity is
    sized for the pod that will move (Karpenter's IsCurrentlyReschedulable), not for the one that stays."""
    pool = nodepool_name("resched")
    world.nodepool(pool)
    ns = world.namespace()
    start_controller()
    world.deployment(ns, "free", 1, pool, cpu="250m", memory="128Mi")
    pinned = _pod("pinned", pool)
    pinned["metadata"]["annotations"] = {"karpenter.sh/do-not-disrupt": "true"}
    pinned["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
    world.core.create_namespaced_pod(ns, pinned)
    wait_for("both pods bound", lambda: len(world.bound_pods(ns, "free")) == 1
             and world.core.read_namespaced_pod("pinned", ns).spec.node_name, timeout=120)
    first = {c["metadata"]["name"] for c in world.nodeclaims(pool)}
    node = world.core.read_namespaced_pod("pinned", ns).spec.node_name
    claim = next(c for c in world.nodeclaims(pool) if (c.get("status") or {}).get("nodeName") == node)
    world.custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim["metadata"]["name"])
    replacement = wait_for("a replacement NodeClaim", lambda: next(
        (c for c in world.nodeclaims(pool) if c["metadata"]["name"] not in first), None), timeout=90)
    assert replacement["spec"]["resources"]["requests"]["cpu"] == "250m"
    wait_for("the Deployment's pod bound on the replacement", lambda: [
        p for p in world.bound_pods(ns, "free") if p.spec.node_name != node], timeout=120)
    assert world.core.read_namespaced_pod("pinned", ns).spec.node_name == node  # it stays, and so does its node
    world.core.delete_namespaced_pod("pinned", ns, grace_period_seconds=0)  # let the node's termination finish
