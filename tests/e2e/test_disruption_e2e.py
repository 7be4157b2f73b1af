"""Disruption through the running controller against LocalStack and the real control plane: consolidation after a
scale-down, a drift rollout held to the NodePool's budget and a PodDisruptionBudget (watched continuously), expiration,
do-not-disrupt, and a crash in the middle of a command.

Timings are Karpenter's (a pass every 10 s, consolidation validated again after 15 s); consolidateAfter is 0s so
NodeClaims are consolidatable as soon as they are initialized.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client, watch

from controller.disruption.queue import REPLACEMENT_OF
from tests.e2e.conftest import World, nodepool_name
from tests.e2e.harness import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.localstack]

DISRUPTED = "karpenter.sh/disrupted"
LARGE_ONLY = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}]
LARGE_OR_XLARGE = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]}]
# on-demand only: a spot node is replaced by a cheaper spot node only behind SpotToSpotConsolidation (off by default)
ON_DEMAND = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]
PDBS = ("policy", "v1beta1")


def pool_with(world: World, prefix: str, requirements: list[dict[str, Any]], budget: str = "10%",
              consolidate_after: str = "0s", **template_spec: Any) -> str:
    """A NodePool limited to the given instance types, consolidating WhenEmptyOrUnderutilized after consolidateAfter."""
    name = nodepool_name(prefix)
    world.nodepool(name, requirements=requirements, **template_spec)
    world.custom.patch_cluster_custom_object("karpenter.sh", "v1", "nodepools", name, {"spec": {"disruption": {
        "consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": consolidate_after,
        "budgets": [{"nodes": budget}]}}})
    return name


def live_claims(world: World, pool: str) -> list[dict[str, Any]]:
    return [c for c in world.nodeclaims(pool) if not c["metadata"].get("deletionTimestamp")]


def tainted_nodes(world: World, pool: str) -> list[str]:
    nodes = world.core.list_node(label_selector=f"karpenter.sh/nodepool={pool}").items
    return [n.metadata.name for n in nodes if any(t.key == DISRUPTED for t in n.spec.taints or [])]


def ready_pods(world: World, ns: str, app: str) -> list[Any]:
    pods = world.core.list_namespaced_pod(ns, label_selector=f"app={app}").items
    return [p for p in pods if p.spec.node_name and not p.metadata.deletion_timestamp and any(
        c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))]


def scale(world: World, ns: str, name: str, replicas: int) -> None:
    world.apps.patch_namespaced_deployment_scale(name, ns, {"spec": {"replicas": replicas}})


def events(world: World, reason: str, name: str | None = None) -> list[Any]:
    return [e for e in world.core.list_event_for_all_namespaces().items
            if e.reason == reason and (name is None or e.involved_object.name == name)]


@dataclass
class Watched:
    """What a watch saw over a test: the fewest Ready pods of an app, and the most of a pool's NodeClaims being
    disrupted at once (tainted karpenter.sh/disrupted or deleted)."""

    min_ready: int = 1 << 30
    max_disrupting: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)


def watch_rollout(world: World, ns: str, app: str, pool: str) -> Watched:
    """Follow the app's pods and the pool's Nodes and NodeClaims with watches (every event, not samples)."""
    seen = Watched()
    ready: dict[str, bool] = {}
    disrupting_nodes: set[str] = set()
    deleting_claims: dict[str, str] = {}  # NodeClaim -> its node
    lock = threading.Lock()

    def count() -> None:
        seen.min_ready = min(seen.min_ready, sum(ready.values()))
        seen.max_disrupting = max(seen.max_disrupting, len(disrupting_nodes | set(deleting_claims.values())))

    def follow(list_fn: Callable[..., Any], on: Callable[[str, Any], None], **kw: Any) -> None:
        """List once (the state before any event), then watch on from that resourceVersion; relist on 410."""
        rv = ""
        while not seen._stop.is_set():
            if not rv:
                listed = list_fn(**kw)
                items = listed["items"] if isinstance(listed, dict) else listed.items
                with lock:
                    for obj in items:
                        on("ADDED", obj)
                    count()
                rv = listed["metadata"]["resourceVersion"] if isinstance(listed, dict) else \
                    listed.metadata.resource_version
            w = watch.Watch()
            try:
                for ev in w.stream(list_fn, resource_version=rv, timeout_seconds=5, **kw):
                    obj = ev["object"]
                    if ev["type"] == "ERROR":  # e.g. 410 Gone as an event: list again
                        rv = ""
                        break
                    rv = obj["metadata"]["resourceVersion"] if isinstance(obj, dict) else \
                        obj.metadata.resource_version
                    with lock:
                        on(ev["type"], obj)
                        count()
                    if seen._stop.is_set():
                        break
            except client.ApiException as e:
                if e.status == 410:
                    rv = ""
                seen.errors.append(str(e)[:200])
            except Exception as e:  # a dropped watch is followed again from where it was
                seen.errors.append(str(e)[:200])
            finally:
                w.stop()

    def on_pod(kind: str, pod: Any) -> None:
        key = pod.metadata.name
        ok = kind != "DELETED" and not pod.metadata.deletion_timestamp and bool(pod.spec.node_name) and any(
            c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
        ready[key] = ok

    def on_node(kind: str, node: Any) -> None:
        if kind != "DELETED" and any(t.key == DISRUPTED for t in node.spec.taints or []):
            disrupting_nodes.add(node.metadata.name)
        else:
            disrupting_nodes.discard(node.metadata.name)

    def on_claim(kind: str, claim: Any) -> None:
        meta = claim["metadata"]
        if kind != "DELETED" and meta.get("deletionTimestamp"):
            deleting_claims[meta["name"]] = (claim.get("status") or {}).get("nodeName") or meta["name"]
        elif kind == "DELETED":
            deleting_claims.pop(meta["name"], None)

    custom = world.custom
    for target in (lambda: follow(world.core.list_namespaced_pod, on_pod, namespace=ns, label_selector=f"app={app}"),
                   lambda: follow(world.core.list_node, on_node, label_selector=f"karpenter.sh/nodepool={pool}"),
                   lambda: follow(custom.list_cluster_custom_object, on_claim, group="karpenter.sh", version="v1",
                                  plural="nodeclaims", label_selector=f"karpenter.sh/nodepool={pool}")):
        t = threading.Thread(target=target, daemon=True)
        t.start()
        seen._threads.append(t)
    return seen


# ---- consolidation ---------------------------------------------------------------------------------------------

def test_scale_down_consolidates_onto_at_most_two_nodeclaims(world: World, kubelet, start_controller):
    pool = pool_with(world, "scale", LARGE_ONLY, budget="100%")  # Karpenter's default 10% takes one node a pass
    ns = world.namespace()
    controller = start_controller()
    world.deployment(ns, "web", 20, pool, cpu="700m")  # two to an m5.large
    wait_for("20 pods running", lambda: len(ready_pods(world, ns, "web")) == 20, timeout=150)
    assert len(live_claims(world, pool)) >= 10
    scale(world, ns, "web", 2)
    wait_for("at most 2 NodeClaims", lambda: len(world.nodeclaims(pool)) <= 2, timeout=170)
    wait_for("both pods Ready", lambda: len(ready_pods(world, ns, "web")) == 2, timeout=60)
    wait_for("no node left tainted", lambda: not tainted_nodes(world, pool) and len(world.nodeclaims(pool)) <= 2,
             timeout=90)
    assert "disrupting node(s)" in controller.messages()
    assert "command succeeded" in controller.messages()


def test_do_not_disrupt_pod_keeps_its_node(world: World, kubelet, start_controller):
    pool = pool_with(world, "dnd", LARGE_ONLY)
    ns = world.namespace()
    start_controller()
    world.deployment(ns, "keep", 1, pool, cpu="300m", annotations={"karpenter.sh/do-not-disrupt": "true"})
    wait_for("the annotated pod running", lambda: len(ready_pods(world, ns, "keep")) == 1 and ready_pods(
        world, ns, "keep")[0].metadata.annotations.get("karpenter.sh/do-not-disrupt") == "true", timeout=120)
    kept = ready_pods(world, ns, "keep")[0].spec.node_name
    # a second pod kept off that node: its node could take the first pod, so only do-not-disrupt holds the first
    world.deployment(ns, "other", 1, pool, cpu="300m", affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [kept]}]}]}}})
    wait_for("the other pod running", lambda: len(ready_pods(world, ns, "other")) == 1, timeout=120)
    wait_for("DisruptionBlocked on the kept node", lambda: [
        e for e in events(world, "DisruptionBlocked", kept) if "do-not-disrupt" in (e.message or "")], timeout=90)
    assert kept in {c["status"].get("nodeName") for c in live_claims(world, pool)}
    assert kept not in tainted_nodes(world, pool)
    # the annotation gone (a new pod), the node is consolidated away: the pod moves beside the other
    world.apps.patch_namespaced_deployment("keep", ns, {"spec": {"template": {"metadata": {"annotations": {
        "karpenter.sh/do-not-disrupt": "false"}}}}})
    wait_for("one NodeClaim left", lambda: len(world.nodeclaims(pool)) == 1, timeout=170)
    wait_for("both pods Ready", lambda: len(ready_pods(world, ns, "keep")) == 1
             and len(ready_pods(world, ns, "other")) == 1, timeout=60)


# ---- drift rollout under budgets -------------------------------------------------------------------------------

def test_template_change_replaces_every_nodeclaim_within_budgets(world: World, kubelet, start_controller):
    pool = pool_with(world, "drift", LARGE_ONLY, budget="1", consolidate_after="Never")
    ns = world.namespace()
    start_controller()
    world.deployment(ns, "db", 3, pool, cpu="1200m")  # one to a node
    wait_for("3 pods running", lambda: len(ready_pods(world, ns, "db")) == 3, timeout=150)
    world.custom.create_namespaced_custom_object(*PDBS, ns, "poddisruptionbudgets", {
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "db"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}}})
    wait_for("the PDB counts 3 healthy", lambda: (world.custom.get_namespaced_custom_object(
        *PDBS, ns, "poddisruptionbudgets", "db").get("status") or {}).get("currentHealthy") == 3, timeout=60)
    old = {c["metadata"]["name"] for c in world.nodeclaims(pool)}  # a replacement in flight may make it 4
    seen = watch_rollout(world, ns, "db", pool)
    try:
        world.custom.patch_cluster_custom_object("karpenter.sh", "v1", "nodepools", pool, {"spec": {"template": {
            "metadata": {"labels": {"rollout": "two"}}}}})
        wait_for("every NodeClaim replaced", lambda: not old & {c["metadata"]["name"] for c in world.nodeclaims(pool)}
                 and len(live_claims(world, pool)) == 3, timeout=175)
        wait_for("3 pods Ready again", lambda: len(ready_pods(world, ns, "db")) == 3, timeout=60)
    finally:
        seen.stop()
    assert seen.min_ready >= 2, f"the PDB's minAvailable 2 was broken: {seen.min_ready} Ready"
    assert seen.max_disrupting <= 1, f"{seen.max_disrupting} NodeClaims disrupted at once under a budget of 1"
    for claim in live_claims(world, pool):
        assert claim["metadata"]["labels"].get("rollout") == "two"


# ---- expiration ------------------------------------------------------------------------------------------------

def test_short_expire_after_replaces_the_node(world: World, kubelet, start_controller):
    pool = pool_with(world, "expire", LARGE_ONLY, consolidate_after="Never", expireAfter="45s")
    ns = world.namespace()
    start_controller()
    world.deployment(ns, "app", 1, pool, cpu="500m")
    wait_for("the pod running", lambda: len(ready_pods(world, ns, "app")) == 1, timeout=120)
    first = world.nodeclaims(pool)[0]["metadata"]["name"]
    wait_for("a new NodeClaim in place of the expired one", lambda: first not in {
        c["metadata"]["name"] for c in world.nodeclaims(pool)} and live_claims(world, pool), timeout=170)
    wait_for("the pod running on the new node", lambda: len(ready_pods(world, ns, "app")) == 1, timeout=90)


# ---- a crash in the middle of a command ------------------------------------------------------------------------

def test_restart_mid_command_leaks_no_replacement_and_leaves_no_taint(world: World, kubelet, start_controller):
    pool = pool_with(world, "crash", LARGE_OR_XLARGE + ON_DEMAND)
    ns = world.namespace()
    crashing = start_controller("crashing.log", KARPY_FAILPOINTS="disruption.after-launch")
    world.deployment(ns, "app", 3, pool, cpu="1000m")  # three to an m5.xlarge
    wait_for("3 pods running", lambda: len(ready_pods(world, ns, "app")) == 3, timeout=150)
    claims = world.nodeclaims(pool)
    assert len(claims) == 1
    original = claims[0]["metadata"]["name"]
    scale(world, ns, "app", 1)  # one pod left: an m5.large is cheaper, so the node is replaced
    wait_for("the controller to die at the failpoint", lambda: not crashing.running, timeout=150)
    assert crashing.proc is not None and crashing.proc.returncode == 137
    replacements = [c for c in world.nodeclaims(pool) if REPLACEMENT_OF in (c["metadata"].get("annotations") or {})]
    assert len(replacements) == 1, "the replacement was launched before the crash"
    leaked = replacements[0]["metadata"]["name"]
    assert tainted_nodes(world, pool), "the candidate was tainted before the crash"

    restarted = start_controller("restarted.log")
    wait_for("the unfinished command's replacement deleted", lambda: leaked not in {
        c["metadata"]["name"] for c in live_claims(world, pool)}, timeout=90)
    restarted.wait_log("removed taint from node", timeout=60)
    # the restarted process decides again and finishes: one m5.large left, nothing tainted, the pod Ready
    wait_for("the original replaced by one new NodeClaim", lambda: original not in {
        c["metadata"]["name"] for c in world.nodeclaims(pool)} and len(world.nodeclaims(pool)) == 1, timeout=170)
    final = world.nodeclaims(pool)[0]
    assert final["metadata"]["name"] != leaked
    assert REPLACEMENT_OF not in (final["metadata"].get("annotations") or {})
    assert not tainted_nodes(world, pool)
    wait_for("the pod Ready", lambda: len(ready_pods(world, ns, "app")) == 1, timeout=60)


# ---- karpy's RebalanceRecommendationDrift gate, through the interruption queue ----------------------------------

def rebalance_recommendation(instance_id: str) -> str:
    """An EC2 Instance Rebalance Recommendation as EventBridge delivers it (the shape in the EC2 User Guide)."""
    return json.dumps({
        "version": "0", "id": str(uuid.uuid4()), "detail-type": "EC2 Instance Rebalance Recommendation",
        "source": "aws.ec2", "account": "123456789012", "time": "2026-11-26T02:00:00Z", "region": "us-east-1",
        "resources": [f"arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}"],
        "detail": {"instance-id": instance_id}})


def test_rebalance_recommendation_drifts_and_replaces_under_the_gate(world: World, kubelet, start_controller):
    """With RebalanceRecommendationDrift on, the recommendation marks the NodeClaim Drifted/RebalanceRecommendation
    and the disruption loop replaces it (a new NodeClaim up before the old one goes), its pod moved along."""
    pool = pool_with(world, "rebalance", LARGE_ONLY, consolidate_after="Never")
    ns = world.namespace()
    start_controller(FEATURE_GATES="RebalanceRecommendationDrift=true")
    world.deployment(ns, "app", 1, pool, cpu="500m")
    wait_for("the pod running", lambda: len(ready_pods(world, ns, "app")) == 1, timeout=120)
    claim = world.nodeclaims(pool)[0]
    name = claim["metadata"]["name"]
    world.sqs.send_message(QueueUrl=world.queue_url,
                           MessageBody=rebalance_recommendation(claim["status"]["providerID"].rsplit("/", 1)[-1]))

    def drifted_reason() -> str:
        for c in world.nodeclaims(pool):
            if c["metadata"]["name"] == name:
                conditions = (c.get("status") or {}).get("conditions") or []
                cond: dict[str, Any] = next((x for x in conditions if x["type"] == "Drifted"), {})
                return str(cond.get("reason") or "") if cond.get("status") == "True" else ""
        return "gone"

    wait_for("the NodeClaim Drifted by the recommendation", lambda: drifted_reason() in (
        "RebalanceRecommendation", "gone"), timeout=120)
    wait_for("a replacement NodeClaim and the recommended one gone", lambda: name not in {
        c["metadata"]["name"] for c in world.nodeclaims(pool)} and live_claims(world, pool), timeout=240)
    wait_for("the pod running on the replacement", lambda: len(ready_pods(world, ns, "app")) == 1, timeout=120)
    assert "Disrupting NodeClaim: Drifted" in [e.message for e in events(world, "DisruptionTerminating", name)], \
        "replaced through the disruption queue as a drifted node"
