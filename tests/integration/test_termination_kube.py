"""Termination against a real control plane: the NodeClaim finalizer and node termination are driven pass by pass
(as their work queues would) while the test plays kubelet, finishing pods the drain deleted. The cloud is a small
in-test fake that records deletes: these tests are about the Kubernetes side (taint, tiers, PDBs, do-not-disrupt, the
grace-period deadline, conditions, finalizers); the end-to-end tests run the whole controller against LocalStack."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from controller.api import labels as L
from controller.cloud.errors import NodeClaimNotFoundError
from controller.cloud.provider import LaunchedNode
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import NotFoundError
from controller.kube.events import Recorder
from controller.kube.workqueue import Result
from controller.nodeclaim.termination import NodeClaimTerminationController
from controller.state.cluster import Cluster
from controller.termination import drain as D
from controller.termination.controller import TerminationController
from tests.integration.kubelet import FakeKubelet
from tests.kubetest import install_crds

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

Obj = dict[str, Any]


class FakeCloud:
    """The cloud, faked: instances are provider IDs; delete records the call; an instance lingers for `linger`
    lookups after its delete (as a shutting-down instance does) before get says it is gone."""

    def __init__(self, linger: int = 0) -> None:
        self.instances: set[str] = set()
        self.deleted: list[str] = []
        self.linger = linger
        self._lingering: dict[str, int] = {}

    def get(self, provider_id: str) -> LaunchedNode:
        if provider_id in self._lingering:
            if self._lingering[provider_id] <= 0:
                del self._lingering[provider_id]
                self.instances.discard(provider_id)
            else:
                self._lingering[provider_id] -= 1
        if provider_id not in self.instances:
            raise NodeClaimNotFoundError(provider_id)
        return LaunchedNode(provider_id=provider_id, instance_type="m5.large", zone="us-east-1a",
                            capacity_type="on-demand", image_id="ami-0123456789abcdef0")

    def delete(self, provider_id: str) -> None:
        if provider_id not in self.instances or provider_id in self._lingering:
            raise NodeClaimNotFoundError(provider_id)
        self.deleted.append(provider_id)
        self._lingering[provider_id] = self.linger


class CapturingRecorder(Recorder):
    """The real Recorder (Events are published), also keeping what it was asked to publish for assertions."""

    def __init__(self, client: KubeClient) -> None:
        super().__init__(client)
        self.captured: list[tuple[str, str, str, str]] = []

    def publish(self, obj: dict, type_: str, reason: str, message: str, dedupe_values: tuple[str, ...] | None = None,
                dedupe_seconds: float | None = None) -> None:
        self.captured.append((str(obj.get("kind") or ""), str((obj.get("metadata") or {}).get("name")), reason,
                               message))
        super().publish(obj, type_, reason, message, dedupe_values, dedupe_seconds)

    def reasons(self, name: str) -> list[str]:
        return [r for _, n, r, _ in self.captured if n == name]

    def messages(self, name: str, reason: str) -> list[str]:
        return [m for _, n, r, m in self.captured if n == name and r == reason]


@dataclass
class World:
    client: KubeClient
    cluster: Cluster
    recorder: CapturingRecorder
    kubelet: FakeKubelet
    api: Any
    cleanups: list[Callable[[], None]] = field(default_factory=list)


@pytest.fixture(scope="module")
def world(kubeconfig: str, kube_api: Any) -> Iterator[World]:
    install_crds(kube_api)
    kube = KubeClient.from_environment(kubeconfig)
    cluster = Cluster(kube)
    stop = threading.Event()
    cluster.start(stop)
    assert cluster.wait_synced(stop, timeout=60)
    recorder = CapturingRecorder(kube)
    recorder.start(stop)
    try:
        yield World(kube, cluster, recorder, FakeKubelet(kube_api), kube_api)
    finally:
        stop.set()


@pytest.fixture
def ns(world: World) -> Iterator[str]:
    """A namespace of its own per test, removed with everything in it afterwards."""
    name = f"term-{uuid.uuid4().hex[:6]}"
    world.recorder.captured.clear()
    world.client.create(R.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        for cleanup in reversed(world.cleanups):
            with contextlib.suppress(Exception):
                cleanup()
        world.cleanups.clear()
        pods, _ = world.client.list(R.PODS, namespace=name)
        for p in pods:
            with contextlib.suppress(NotFoundError):
                world.client.delete(R.PODS, p["metadata"]["name"], name, grace_period_seconds=0)
        with contextlib.suppress(NotFoundError):
            world.client.delete(R.NAMESPACES, name)


@dataclass
class Termination:
    """Both finalizers' controllers, as `karpy controller` runs them: the NodeClaim's and the Node's."""

    claims: NodeClaimTerminationController
    nodes: TerminationController

    @property
    def evictions(self) -> Any:
        return self.nodes.evictions

    def one_pass(self, claim: str, node: str) -> Result:
        """One pass of each (the NodeClaim's first, as its deletion comes first); the sooner of their requeues."""
        results = [self.claims.reconcile(claim), self.nodes.reconcile(node) if node else Result()]
        waits = [r.requeue_after for r in results if r.requeue_after is not None]
        return Result(requeue_after=min(waits) if waits else None)


def termination(world: World, cloud: FakeCloud) -> Termination:
    return Termination(NodeClaimTerminationController(world.client, world.cluster, cloud, world.recorder),
                       TerminationController(world.client, world.cluster, cloud, world.recorder))


# ---- building blocks -----------------------------------------------------------------------------------------

def _strip_finalizers(world: World, res: R.Resource, name: str) -> None:
    try:
        world.client.patch(res, name, {"metadata": {"finalizers": None}})
        world.client.delete(res, name)
    except NotFoundError:
        pass


def node_and_claim(world: World, cloud: FakeCloud, *, tgp: str | None = None, ready: bool = True,
                   launched: bool = True) -> tuple[str, str, str]:
    """A registered Node (with the termination finalizer) and its launched NodeClaim; (node, nodeclaim, providerID)."""
    suffix = uuid.uuid4().hex[:8]
    claim_name, node_name = f"default-{suffix}", f"ip-10-0-{suffix}.ec2.internal"
    pid = f"aws:///us-east-1a/i-0{suffix}abcdef"
    world.cleanups.append(lambda: _strip_finalizers(world, R.NODECLAIMS, claim_name))
    spec: Obj = {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": [{"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]}]}
    if tgp:
        spec["terminationGracePeriod"] = tgp
    claim = world.client.create(R.NODECLAIMS, {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": claim_name, "labels": {L.NODEPOOL: "default", L.ZONE: "us-east-1a",
                                                     L.CAPACITY_TYPE: "on-demand"},
                     "finalizers": [L.TERMINATION_FINALIZER]},
        "spec": spec})
    if not launched:
        return "", claim_name, ""
    cloud.instances.add(pid)
    world.cleanups.append(lambda: _strip_finalizers(world, R.NODES, node_name))
    world.kubelet.register(node_name, pid, labels={L.NODEPOOL: "default", L.ZONE: "us-east-1a"})
    world.client.patch(R.NODES, node_name, {"metadata": {"finalizers": [L.TERMINATION_FINALIZER]}})
    if not ready:
        world.kubelet.set_ready(node_name, False)
    now = D.format_time(time.time())
    world.client.patch(R.NODECLAIMS, claim_name, {"status": {
        "providerID": pid, "nodeName": node_name,
        "conditions": [{"type": t, "status": "True", "reason": t, "lastTransitionTime": now,
                        "observedGeneration": claim["metadata"]["generation"]}
                       for t in ("Launched", "Registered", "Initialized", "Ready")]}}, subresource="status")
    wait_for(lambda: world.cluster.nodeclaim_for_provider_id(pid) is not None
             and world.cluster.node_for_provider_id(pid) is not None, "the cache to see the NodeClaim and Node")
    return node_name, claim_name, pid


def make_pod(world: World, ns: str, name: str, node: str, *, tgps: int = 0, critical: bool = False,
             owner: Obj | None = None, annotations: dict[str, str] | None = None,
             tolerations: list[Obj] | None = None, labels: dict[str, str] | None = None) -> Obj:
    spec: Obj = {"nodeName": node, "terminationGracePeriodSeconds": tgps,
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}
    if critical:
        spec["priorityClassName"] = "system-cluster-critical"
    if tolerations:
        spec["tolerations"] = tolerations
    meta: Obj = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    return world.client.create(R.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec},
                               namespace=ns)


def mark_running(world: World, ns: str, name: str) -> None:
    """What a kubelet reports for a started pod: Running and Ready (only such pods count as healthy for a PDB)."""
    now = D.format_time(time.time())
    world.client.patch(R.PODS, name, {"status": {
        "phase": "Running", "startTime": now,
        "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                       for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")]}},
        namespace=ns, subresource="status")


def create_pdb(world: World, ns: str, name: str, selector: dict[str, str], **spec: Any) -> Obj:
    return world.client.create(R.PDBS, {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
                                        "metadata": {"name": name},
                                        "spec": {"selector": {"matchLabels": selector}, **spec}}, namespace=ns)


def wait_for(cond: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def pods_on(world: World, ns: str, node: str) -> dict[str, Obj]:
    pods, _ = world.client.list(R.PODS, namespace=ns, field_selector=f"spec.nodeName={node}")
    return {p["metadata"]["name"]: p for p in pods}


def get(world: World, res: R.Resource, name: str, namespace: str | None = None) -> Obj | None:
    try:
        return world.client.get(res, name, namespace)
    except NotFoundError:
        return None


def finish_terminating(world: World, ns: str, node: str, keep: Callable[[Obj], bool] = lambda p: False) -> None:
    """Play kubelet: pods the drain deleted stop and are removed."""
    for p in pods_on(world, ns, node).values():
        if p["metadata"].get("deletionTimestamp") and not keep(p):
            with contextlib.suppress(NotFoundError):
                world.client.delete(R.PODS, p["metadata"]["name"], ns, grace_period_seconds=0)


def drive(world: World, reconcile: Callable[[], Result], done: Callable[[], bool], timeout: float,
          each: Callable[[], None] = lambda: None, node: str = "") -> int:
    """Call reconcile until done(), sleeping what it asks (at most 0.5 s so the test sees every step); returns the
    number of passes."""
    deadline = time.monotonic() + timeout
    passes, beat = 0, time.monotonic()
    while not done():
        assert time.monotonic() < deadline, f"not done after {passes} passes"
        result = reconcile()
        passes += 1
        each()
        if node and time.monotonic() - beat > 5:
            world.kubelet.heartbeat(node)
            beat = time.monotonic()
        time.sleep(min(result.requeue_after or 0.05, 0.5))
    return passes


def conditions(claim: Obj | None) -> dict[str, str]:
    return {c["type"]: c["status"] for c in ((claim or {}).get("status") or {}).get("conditions") or []}


def wait_pods_cached(world: World, node: str, count: int) -> None:
    wait_for(lambda: len(world.cluster.pods_on_node(node)) >= count, f"{count} pods cached on {node}")


# ---- tests ---------------------------------------------------------------------------------------------------

def test_drain_goes_tier_by_tier_then_the_instance_and_finalizers_go(world: World, ns: str) -> None:
    cloud = FakeCloud(linger=1)
    node, claim, pid = node_and_claim(world, cloud)
    ds = world.client.create(R.DAEMONSETS, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"nodeSelector": {"karpy.sh/never": "true"},
                                       "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}}},
        namespace=ns)
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": ds["metadata"]["uid"],
             "controller": False}
    node_uid = world.client.get(R.NODES, node)["metadata"]["uid"]
    make_pod(world, ns, "app", node, tgps=30)
    make_pod(world, ns, "critical-app", node, tgps=30, critical=True)
    make_pod(world, ns, "daemon", node, tgps=30, owner=owner)
    make_pod(world, ns, "critical-daemon", node, tgps=30, critical=True, owner=owner)
    make_pod(world, ns, "tolerant", node, tolerations=[{"key": L.DISRUPTED_TAINT_KEY, "operator": "Exists"}])
    make_pod(world, ns, "static", node, owner={"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid},
             annotations={"kubernetes.io/config.mirror": "abc"})
    make_pod(world, ns, "finished", node)
    world.client.patch(R.PODS, "finished", {"status": {"phase": "Succeeded"}}, namespace=ns, subresource="status")
    wait_pods_cached(world, node, 7)
    world.client.delete(R.NODECLAIMS, claim)

    order: list[list[str]] = []
    seen: set[str] = set()
    statuses: list[dict[str, str]] = []

    def kubelet() -> None:
        # note which pods the drain deleted in this pass, then let them go; once the Node is gone, the pods still
        # bound to it are kube-controller-manager's PodGC's to delete, not the drain's
        node_left = get(world, R.NODES, node) is not None
        deleted = sorted(n for n, p in pods_on(world, ns, node).items()
                         if p["metadata"].get("deletionTimestamp") and n not in seen)
        if deleted and node_left:
            order.append(deleted)
            seen.update(deleted)
        finish_terminating(world, ns, node)
        statuses.append(conditions(get(world, R.NODECLAIMS, claim)))

    # fresh controllers every pass: nothing is carried in memory between passes, as after a crash and restart
    def one_pass() -> Result:
        return termination(world, cloud).one_pass(claim, node)

    # Karpenter's order: the NodeClaim's finalizer deletes the Node; the Node's finalizer taints and drains it
    assert termination(world, cloud).claims.reconcile(claim) == Result()
    deleting = world.client.get(R.NODES, node)
    assert deleting["metadata"].get("deletionTimestamp")
    assert L.TERMINATION_FINALIZER in deleting["metadata"]["finalizers"]
    assert cloud.deleted == []
    termination(world, cloud).nodes.reconcile(node)
    tainted = world.client.get(R.NODES, node)
    assert {"key": L.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"} in tainted["spec"]["taints"]
    assert tainted["metadata"]["labels"][D.EXCLUDE_LB_LABEL] == "karpenter"
    drive(world, one_pass, lambda: get(world, R.NODECLAIMS, claim) is None, timeout=60, each=kubelet, node=node)

    # one tier at a time; the tolerant, static and finished pods were left alone
    assert order == [["app"], ["daemon"], ["critical-app"], ["critical-daemon"]]  # groupPodsByPriority
    assert get(world, R.NODES, node) is None
    assert cloud.deleted == [pid]
    # the conditions went Drained Unknown -> True, then VolumesDetached and InstanceTerminating while it shut down
    assert {"Drained": "Unknown"}.items() <= statuses[0].items()
    assert any(s.get("Drained") == "True" and s.get("VolumesDetached") == "True"
               and s.get("InstanceTerminating") == "True" for s in statuses)
    for pod in ("app", "critical-app", "daemon", "critical-daemon"):
        # (fresh controllers may evict a pod again while their cache still shows it running: harmless)
        assert set(world.recorder.messages(pod, "Evicted")) == {"Evicted pod: Forceful Termination"}
    for pod in ("tolerant", "static", "finished"):
        assert world.recorder.reasons(pod) == []
    # the Recorder published real Events
    wait_for(lambda: any(e["involvedObject"]["name"] == "app"
                         for e in world.client.list(R.EVENTS, namespace=ns)[0] if e.get("reason") == "Evicted"),
             "an Evicted event", timeout=10)


def test_a_pdb_blocks_eviction_until_it_allows_it(world: World, ns: str) -> None:
    cloud = FakeCloud()
    node, claim, pid = node_and_claim(world, cloud)
    world.client.create(R.Resource("apps", "v1", "replicasets", "ReplicaSet", True), {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"nodeSelector": {L.HOSTNAME: node}, "terminationGracePeriodSeconds": 0,
                                       "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}}},
        namespace=ns)
    originals = sorted(wait_for(lambda: len(pods_on(world, ns, node)) == 2 and pods_on(world, ns, node),
                                "the scheduler to bind 2 pods"))
    for name in originals:
        mark_running(world, ns, name)
    create_pdb(world, ns, "web", {"app": "web"}, maxUnavailable=0)
    wait_for(lambda: (((get(world, R.PDBS, "web", ns) or {}).get("status") or {}).get("currentHealthy") == 2),
             "the disruption controller to count 2 healthy pods")
    wait_pods_cached(world, node, 2)

    attempts: dict[str, list[float]] = {}
    evict = world.client.evict

    def counting_evict(namespace: str, name: str, grace_period_seconds: int | None = None,
                       uid: str | None = None) -> None:
        assert uid  # the eviction carries the pod's UID as a precondition
        attempts.setdefault(name, []).append(time.monotonic())
        evict(namespace, name, grace_period_seconds, uid)

    terminator = termination(world, cloud)
    terminator.evictions.client = _Proxy(world.client, evict=counting_evict)
    world.client.delete(R.NODECLAIMS, claim)
    until = time.monotonic() + 4
    drive(world, lambda: terminator.one_pass(claim, node), lambda: time.monotonic() > until, timeout=10)

    # refused (429) and retried with a per-pod backoff, nothing evicted
    assert set(pods_on(world, ns, node)) == set(originals)
    assert world.recorder.messages(node, "FailedDraining").count(
        "Failed to drain node, evicting pod violates a PDB") >= 1
    for name in originals:
        gaps = [b - a for a, b in zip(attempts[name], attempts[name][1:], strict=False)]
        assert len(attempts[name]) >= 3
        assert all(g >= 0.09 for g in gaps)
        assert gaps[-1] >= 0.7  # 0.1, 0.2, 0.4, 0.8 ... per pod
    assert conditions(get(world, R.NODECLAIMS, claim)).get("Drained") == "Unknown"
    assert cloud.deleted == []

    world.client.patch(R.PDBS, "web", {"spec": {"maxUnavailable": 2}}, namespace=ns)
    drive(world, lambda: terminator.one_pass(claim, node), lambda: get(world, R.NODECLAIMS, claim) is None,
          timeout=60, node=node)
    for name in originals:
        assert world.recorder.messages(name, "Evicted") == ["Evicted pod: Forceful Termination"]
        assert get(world, R.PODS, name, ns) is None
    assert cloud.deleted == [pid]
    assert get(world, R.NODES, node) is None


def test_do_not_disrupt_pods_wait_for_the_grace_period(world: World, ns: str) -> None:
    cloud = FakeCloud()
    node, claim, _ = node_and_claim(world, cloud, tgp="15s")
    make_pod(world, ns, "web", node)
    make_pod(world, ns, "batch", node, tgps=5, annotations={L.DO_NOT_DISRUPT: "true"})
    wait_pods_cached(world, node, 2)
    world.client.delete(R.NODECLAIMS, claim)
    terminator = termination(world, cloud)
    deleted_at: dict[str, float] = {}

    def kubelet() -> None:
        for n, p in pods_on(world, ns, node).items():
            if p["metadata"].get("deletionTimestamp"):
                deleted_at.setdefault(n, time.time())
        finish_terminating(world, ns, node)

    terminator.one_pass(claim, node)
    stamped = world.client.get(R.NODECLAIMS, claim)
    deadline = D.parse_time(stamped["metadata"]["annotations"][L.NODECLAIM_TERMINATION_TIMESTAMP])
    deleted = D.parse_time(stamped["metadata"]["deletionTimestamp"])
    assert deadline is not None and deleted is not None and deadline == deleted + 15
    drive(world, lambda: terminator.one_pass(claim, node), lambda: get(world, R.NODECLAIMS, claim) is None,
          timeout=60, each=kubelet, node=node)

    assert get(world, R.PODS, "web", ns) is None  # evicted at once
    assert world.recorder.messages("web", "Evicted")
    # the do-not-disrupt pod was never evicted, and deleted only at deadline - its 5 s grace period
    assert world.recorder.messages("batch", "Evicted") == []
    assert deadline is not None and deleted_at["batch"] >= deadline - 5 - 1
    assert world.recorder.messages("batch", "Disrupted")
    assert world.recorder.messages(node, "TerminationGracePeriodExpiring")


def test_the_grace_period_deadline_forces_deletion_past_a_pdb(world: World, ns: str) -> None:
    cloud = FakeCloud()
    node, claim, pid = node_and_claim(world, cloud, tgp="8s")
    make_pod(world, ns, "guarded", node, labels={"app": "guarded"})
    mark_running(world, ns, "guarded")
    make_pod(world, ns, "slow", node, tgps=300)
    create_pdb(world, ns, "guarded", {"app": "guarded"}, minAvailable=1)
    wait_for(lambda: (((get(world, R.PDBS, "guarded", ns) or {}).get("status") or {}).get("currentHealthy") == 1),
             "the disruption controller to count the healthy pod")
    wait_pods_cached(world, node, 2)
    world.client.delete(R.NODECLAIMS, claim)
    terminator = termination(world, cloud)
    deleted: dict[str, tuple[float, float | None]] = {}  # pod -> (seen at, its deletionTimestamp)

    def kubelet() -> None:
        for n, p in pods_on(world, ns, node).items():
            if p["metadata"].get("deletionTimestamp"):
                deleted.setdefault(n, (time.time(), D.parse_time(p["metadata"]["deletionTimestamp"])))
        finish_terminating(world, ns, node)

    drive(world, lambda: terminator.one_pass(claim, node), lambda: get(world, R.NODECLAIMS, claim) is None,
          timeout=60, each=kubelet, node=node)
    claim_events = world.recorder.messages(claim, "TerminationGracePeriodExpiring")
    assert len(claim_events) == 1
    deadline = D.parse_time(claim_events[0].removeprefix("All pods will be deleted by "))
    assert deadline is not None
    # the slow pod was deleted at once, with what was left of the deadline as its grace period (not its 300 s)
    slow_seen, slow_until = deleted["slow"]
    assert slow_seen < deadline - 3
    assert slow_until is not None and slow_until <= deadline + 1
    # the PDB held the guarded pod until the deadline, then it was deleted anyway
    assert world.recorder.messages(node, "FailedDraining").count(
        "Failed to drain node, evicting pod violates a PDB") >= 1
    assert deleted["guarded"][0] >= deadline - 1
    assert world.recorder.messages("guarded", "Disrupted") and world.recorder.messages("slow", "Disrupted")
    assert world.recorder.messages("guarded", "Evicted") == []
    assert cloud.deleted == [pid]


def test_a_user_deleting_the_node_terminates_its_nodeclaim(world: World, ns: str) -> None:
    cloud = FakeCloud(linger=1)
    node, claim, pid = node_and_claim(world, cloud)
    make_pod(world, ns, "app", node, tgps=10)
    wait_pods_cached(world, node, 1)
    world.client.delete(R.NODES, node)
    terminator = termination(world, cloud)
    seen: list[Obj | None] = []

    def kubelet() -> None:
        seen.append(get(world, R.NODECLAIMS, claim))
        finish_terminating(world, ns, node)

    drive(world, lambda: terminator.one_pass(claim, node),
          lambda: get(world, R.NODES, node) is None and get(world, R.NODECLAIMS, claim) is None, timeout=60,
          each=kubelet, node=node)
    assert seen[0] is not None and seen[0]["metadata"].get("deletionTimestamp")  # the NodeClaim was deleted
    assert any(conditions(c) == {"Launched": "True", "Registered": "True", "Initialized": "True", "Ready": "True",
                                 "Drained": "True", "VolumesDetached": "True", "InstanceTerminating": "True"}
               for c in seen)
    assert world.recorder.messages("app", "Evicted")
    assert cloud.deleted == [pid]
    assert terminator.nodes.reconcile(node) == Result()
    assert terminator.claims.reconcile(claim) == Result()


def test_a_not_ready_node_whose_instance_is_gone_is_let_go_without_a_drain(world: World, ns: str) -> None:
    cloud = FakeCloud()
    node, claim, pid = node_and_claim(world, cloud, ready=False)
    make_pod(world, ns, "app", node, tgps=30)
    wait_pods_cached(world, node, 1)
    cloud.instances.discard(pid)  # the instance went away behind our back
    world.client.delete(R.NODECLAIMS, claim)
    terminator = termination(world, cloud)
    drive(world, lambda: terminator.one_pass(claim, node), lambda: get(world, R.NODECLAIMS, claim) is None,
          timeout=20)
    assert get(world, R.NODES, node) is None
    app = get(world, R.PODS, "app", ns)
    assert app is not None and not app["metadata"].get("deletionTimestamp")  # never evicted
    assert world.recorder.messages("app", "Evicted") == []
    assert cloud.deleted == []


class _Proxy:
    """The KubeClient with some methods replaced."""

    def __init__(self, inner: KubeClient, **overrides: Callable[..., Any]) -> None:
        self._inner = inner
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        return self._overrides.get(name) or getattr(self._inner, name)
