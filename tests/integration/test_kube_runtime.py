"""The kube runtime against the real apiserver: typed errors, the rate limiter, informers (and their relist after a
410), the Eviction API under a PDB and with a UID precondition, Lease leader election and the event recorder."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import ConflictError, GoneError, NotFoundError, TooManyRequestsError
from controller.kube.events import Recorder
from controller.kube.informer import Informer
from controller.kube.leaderelection import LeaderElector
from tests.integration.kubelet import FakeKubelet

pytestmark = pytest.mark.kube


@pytest.fixture
def kube(kubeconfig: str, kube_api) -> KubeClient:
    return KubeClient.from_environment(kubeconfig)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _wait(probe, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_crud_and_typed_errors(kube: KubeClient):
    name = _name("cm")
    created = kube.create(R.CONFIGMAPS, {"metadata": {"name": name}, "data": {"a": "1"}}, "default")
    try:
        with pytest.raises(ConflictError) as exists:
            kube.create(R.CONFIGMAPS, {"metadata": {"name": name}}, "default")
        assert exists.value.reason == "AlreadyExists"
        kube.patch(R.CONFIGMAPS, name, {"data": {"a": "2"}}, "default")
        with pytest.raises(ConflictError):  # created's resourceVersion is stale now
            kube.update(R.CONFIGMAPS, {**created, "data": {"a": "3"}})
        assert kube.get(R.CONFIGMAPS, name, "default")["data"] == {"a": "2"}
    finally:
        kube.delete(R.CONFIGMAPS, name, "default")
    with pytest.raises(NotFoundError):
        kube.get(R.CONFIGMAPS, name, "default")


def test_rate_limiter_spaces_requests(kubeconfig: str, kube_api):
    slow = KubeClient.from_environment(kubeconfig, qps=5, burst=2)
    start = time.monotonic()
    for _ in range(6):
        slow.list(R.NAMESPACES)
    # a burst of 2, then 4 requests at 5 per second: at least 0.8 s
    assert time.monotonic() - start >= 0.75


class _ExpiringClient(KubeClient):
    """The real client, except that its first watch answers 410 Gone after one event (as a watch resumed from a
    compacted resourceVersion does), so the informer must relist."""

    expired = False

    def watch(self, res, resource_version, timeout_seconds=300, namespace=None) -> Iterator:
        if not self.expired:
            self.expired = True
            raise GoneError(410, "Expired", "too old resource version")
        yield from super().watch(res, resource_version, timeout_seconds, namespace)


def test_informer_sees_changes_and_converges_after_a_410(kube: KubeClient, kubeconfig: str):
    ns = _name("inf")
    kube.create(R.NAMESPACES, {"metadata": {"name": ns}})
    kube.create(R.CONFIGMAPS, {"metadata": {"name": "before"}}, ns)
    client = _ExpiringClient(kube.configuration)
    inf = Informer(client, R.CONFIGMAPS, namespace=ns)
    events: list[tuple[str, str]] = []
    inf.add_handler(lambda e, old, new: events.append((e, (new or old or {})["metadata"]["name"])))
    stop = threading.Event()
    inf.start(stop)
    try:
        _wait(inf.has_synced)
        kube.create(R.CONFIGMAPS, {"metadata": {"name": "a"}, "data": {"x": "1"}}, ns)
        kube.patch(R.CONFIGMAPS, "a", {"data": {"x": "2"}}, ns)
        kube.delete(R.CONFIGMAPS, "before", ns)
        _wait(lambda: inf.get(f"{ns}/before") is None and (inf.get(f"{ns}/a") or {}).get("data") == {"x": "2"})
        assert client.expired and inf.relists >= 2  # the 410 made it relist
        assert ("ADDED", "a") in events and ("DELETED", "before") in events
        assert "managedFields" not in (inf.get(f"{ns}/a") or {})["metadata"]
    finally:
        stop.set()
        kube.delete(R.NAMESPACES, ns)


def test_eviction_is_refused_by_a_pdb_until_it_allows(kube: KubeClient, kube_api):
    ns = _name("evict")
    node = _name("node")
    kube.create(R.NAMESPACES, {"metadata": {"name": ns}})
    kubelet = FakeKubelet(kube_api)
    kubelet.register(node, f"aws:///us-east-1a/i-{uuid.uuid4().hex[:17]}")
    try:
        pod = {"metadata": {"name": "p", "labels": {"app": "p"}},
               "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}
        kube.create(R.PODS, pod, ns)
        with pytest.raises(ConflictError):  # the UID precondition: a same-named successor is not evicted
            kube.evict(ns, "p", uid=str(uuid.uuid4()))
        assert not kube.get(R.PODS, "p", ns)["metadata"].get("deletionTimestamp")
        # a PDB counts only running, ready pods: report it as its kubelet would (minAvailable: the pod has no
        # controller, which maxUnavailable would need)
        kube.patch(R.PODS, "p", {"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}]}}, ns, subresource="status")
        pdbs = kube.resolve(R.PDBS)
        kube.create(pdbs, {"apiVersion": f"policy/{pdbs.version}", "kind": "PodDisruptionBudget",
                           "metadata": {"name": "p"},
                           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "p"}}}}, ns)
        _wait(lambda: (kube.get(pdbs, "p", ns).get("status") or {}).get("expectedPods") == 1)
        with pytest.raises(TooManyRequestsError):
            kube.evict(ns, "p")
        kube.patch(pdbs, "p", {"spec": {"minAvailable": 0}}, ns)
        _wait(lambda: (kube.get(pdbs, "p", ns).get("status") or {}).get("disruptionsAllowed") == 1)
        kube.evict(ns, "p", uid=kube.get(R.PODS, "p", ns)["metadata"]["uid"])
        _wait(lambda: not [p for p in kube.list(R.PODS, ns)[0] if not p["metadata"].get("deletionTimestamp")])
    finally:
        kube.delete(R.NAMESPACES, ns)
        kubelet.delete(node)


def test_leader_election_hands_over_on_release(kube: KubeClient):
    lease = _name("lease")
    a = LeaderElector(kube, lease, "default", "a", lease_duration=15, renew_deadline=10, retry_period=0.2)
    b = LeaderElector(kube, lease, "default", "b", lease_duration=15, renew_deadline=10, retry_period=0.2)
    stop_a, stop_b = threading.Event(), threading.Event()
    led: list[str] = []
    ta = threading.Thread(target=a.run, args=(stop_a, lambda: led.append("a"), lambda: None), daemon=True)
    ta.start()
    _wait(a.is_leader)
    tb = threading.Thread(target=b.run, args=(stop_b, lambda: led.append("b"), lambda: None), daemon=True)
    tb.start()
    time.sleep(1)
    assert not b.is_leader()
    stop_a.set()
    ta.join(5)
    assert kube.get(R.LEASES, lease, "default")["spec"]["holderIdentity"] in ("", "b")
    _wait(b.is_leader, timeout=5)  # a released Lease is taken at once, not after it expires
    assert led == ["a", "b"]
    stop_b.set()
    tb.join(5)
    kube.delete(R.LEASES, lease, "default")


def test_recorder_publishes_and_dedupes(kube: KubeClient):
    name = _name("ev")
    cm = kube.create(R.CONFIGMAPS, {"metadata": {"name": name}}, "default")
    rec = Recorder(kube)
    stop = threading.Event()
    rec.start(stop)
    try:
        for _ in range(3):
            rec.publish(cm, "Normal", "Nominated", "Pod should schedule on: nodeclaim/x")

        def mine() -> list[dict]:
            return [e for e in kube.list(R.EVENTS, "default")[0]
                    if e["involvedObject"].get("name") == name]

        _wait(lambda: len(mine()) >= 1)
        time.sleep(0.5)
        events = mine()
        assert len(events) == 1
        assert events[0]["reason"] == "Nominated" and events[0]["source"]["component"] == "karpenter"
    finally:
        stop.set()
        kube.delete(R.CONFIGMAPS, name, "default")
