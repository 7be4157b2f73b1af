"""Memory and load of the provisioning path: a burst of pending pods on a large cluster, then steady pod churn.

    python benchmarks/load.py --pods 20000 --nodes 5000 -o json          # the issue's figures (10 minutes of churn)
    python benchmarks/load.py --pods 2000 --nodes 500 --churn-minutes 1  # a quick run

What runs is the controller's own code, in this process: the Cluster's informers (their list+watch threads, the
compact pod transform, the indexes), the Provisioner with its Batcher, its run loop and its 10 s requeue loop, the
event Recorder and the in-memory cloud (CLOUD_PROVIDER=fake's). The apiserver is an in-process stand-in that serves
list and watch from queues of encoded JSON, decoded in the informers' threads as the client decodes a watch stream,
and keeps no decoded copy of what it sends, so the process's RSS is the controller's (plus the stand-in's few bytes of
bookkeeping per pod). Not `karpy controller` as a process: the real control plane would need minutes of CPU to hold 25k
pods and 5k nodes on this shared 2-core machine, and its etcd and apiserver would compete with the controller for the
cores whose time is being measured. A kube-scheduler stand-in binds each pod where the Nominated event says, and
turns a NodeClaim into a registered Node (as the lifecycle and kubelet would) when a pod is nominated onto it.

The world: N existing Karpenter nodes (m5.large, each with its NodeClaim and one bound 1-CPU pod, so about three
more 250m pods fit on each), then P pending pods (10 workloads of 250m/256Mi, each pod carrying what a Deployment's
pod carries: env, probes, mounts, the token volume, kubectl's last-applied annotation) arriving at once; some fit the
existing nodes, the rest need new NodeClaims. Then C pods churned per minute (the oldest bound pods deleted, as many
new pending ones created, in 10 steps a minute) for --churn-minutes.

Printed: nominatedSeconds (from the first pod of the burst sent to the last one's Nominated event), its target
(<= 30 s), the longest provisioning pass and the ratio between them (the baseline: the pass's own share);
baselineRssMiB (the controller's code imported, no objects), peakRssMiB (VmHWM) against its target (<= 500 MiB) and
perObjectKiB; over the churn, rssStartMiB, rssEndMiB, rssDriftPercent (end against start, target within +-10 %),
and the longest pass during churn.
"""

from __future__ import annotations

import argparse
import gc
import json
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.api import labels as L  # noqa: E402
from controller.cloud.fake.provider import FakeCloudProvider  # noqa: E402
from controller.kube import resources as R  # noqa: E402
from controller.kube.events import Recorder  # noqa: E402
from controller.provisioning.batcher import Batcher  # noqa: E402
from controller.provisioning.provisioner import Provisioner  # noqa: E402
from controller.state.cluster import Cluster  # noqa: E402

Obj = dict[str, Any]
NODE_TYPE = "m5.large"
ZONE = "us-east-1a"
POOL = "general"
NOMINATED_TARGET = 30.0
RSS_TARGET_MIB = 500.0
DRIFT_TARGET_PERCENT = 10.0
STEPS_PER_MINUTE = 10


def rss_mib() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MiB, from /proc/self/status."""
    cur = peak = 0.0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return cur, peak


class StandIn:
    """The KubeClient surface the informers, the provisioner and the recorder use: list returns what was queued for
    the first list (then forgets it), watch streams queued events, create stores NodeClaims only (their names) and
    counts Events."""

    def __init__(self) -> None:
        self._initial: dict[str, list[bytes]] = {}
        self._watch: dict[str, queue.Queue[tuple[str, bytes]]] = {}
        self._rv = 0
        self._lock = threading.Lock()
        self.closed = threading.Event()
        self.events = 0
        self.on_nodeclaim: Any = None  # called with each created NodeClaim

    def _q(self, plural: str) -> queue.Queue[tuple[str, bytes]]:
        with self._lock:
            return self._watch.setdefault(plural, queue.Queue())

    def rv(self) -> str:
        """The next resourceVersion."""
        with self._lock:
            self._rv += 1
            return str(self._rv)

    def seed(self, res: R.Resource, obj: Obj) -> None:
        """An object the first list returns."""
        obj["metadata"]["resourceVersion"] = self.rv()
        self._initial.setdefault(res.plural, []).append(json.dumps(obj).encode())

    def send(self, res: R.Resource, event: str, obj: Obj) -> None:
        """An event the watch delivers."""
        obj["metadata"]["resourceVersion"] = self.rv()
        self._q(res.plural).put((event, json.dumps(obj).encode()))

    def list(self, res: R.Resource, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[Obj], str]:
        """The seeded objects, once (decoded here, as the client decodes a list)."""
        return [json.loads(raw) for raw in self._initial.pop(res.plural, [])], "1"

    def watch(self, res: R.Resource, resource_version: str, timeout_seconds: int = 300,
              namespace: str | None = None) -> Iterator[tuple[str, Obj]]:
        """Queued events until closed, decoded here as the client decodes a watch stream (the informer's thread)."""
        q = self._q(res.plural)
        while not self.closed.is_set():
            try:
                event, raw = q.get(timeout=0.5)
            except queue.Empty:
                continue
            yield event, json.loads(raw)

    def create(self, res: R.Resource, body: Obj, namespace: str | None = None) -> Obj:
        """NodeClaims get a name and go out on the watch; Events are counted and dropped."""
        if res.plural == R.EVENTS.plural:
            self.events += 1
            return body
        meta = body.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName', 'x-')}{self.rv()}"
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        body.setdefault("kind", res.kind)
        body.setdefault("apiVersion", res.api_version)
        if self.on_nodeclaim is not None:
            self.on_nodeclaim(body)
        self.send(res, "ADDED", body)
        return body


def pod(name: str, app: str, node: str = "", cpu: str = "250m", memory: str = "256Mi") -> Obj:
    """A pod as the apiserver sends it: pending and marked Unschedulable, or bound and running."""
    cond = ({"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"} if node else
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/1 nodes are available", "lastTransitionTime": "2026-01-01T00:00:01Z"})
    # what a Deployment's pod carries in a real cluster: env, probes, mounts, the service-account token volume,
    # kubectl's last-applied annotation and managed fields
    container = {"name": "app", "image": f"registry.example/{app}:1.2.3", "imagePullPolicy": "IfNotPresent",
                 "command": ["/bin/server"], "args": ["--port=8080", "--log-level=info"],
                 "env": [{"name": f"SETTING_{k}", "value": f"value-{k}-{app}"} for k in range(8)],
                 "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                 "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}},
                 "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
                                    "periodSeconds": 10, "timeoutSeconds": 1},
                 "livenessProbe": {"httpGet": {"path": "/live", "port": 8080, "scheme": "HTTP"},
                                   "periodSeconds": 10, "timeoutSeconds": 1},
                 "volumeMounts": [{"name": "kube-api-access", "readOnly": True,
                                   "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
    spec: Obj = {"containers": [container],
                 "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                     {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                     {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
                 "restartPolicy": "Always", "schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 30,
                 "serviceAccountName": "default", "dnsPolicy": "ClusterFirst", "enableServiceLinks": True,
                 "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                  "effect": "NoExecute", "tolerationSeconds": 300}]}
    if node:
        spec["nodeName"] = node
    applied = json.dumps({"kind": "Deployment", "metadata": {"name": app}, "spec": {"template": {"spec": {
        "containers": [{k: container[k] for k in ("name", "image", "env", "resources")}]}}}})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "load", "uid": f"uid-{name}",
                         "labels": {"app": app, "pod-template-hash": "5d8f9c7b6"},
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": applied},
                         "creationTimestamp": "2026-01-01T00:00:00Z", "generateName": f"{app}-5d8f9c7b6-",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-rs",
                                              "uid": f"rs-{app}", "controller": True, "blockOwnerDeletion": True}],
                         "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                                            "apiVersion": "v1", "fieldsType": "FieldsV1",
                                            "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}}]},
            "spec": spec,
            "status": {"phase": "Running" if node else "Pending", "conditions": [cond],
                       "qosClass": "Burstable"}}


def node(name: str, instance_type: str, allocatable: dict[str, int], zone: str = ZONE) -> tuple[Obj, Obj]:
    """A registered Karpenter Node and its NodeClaim."""
    pid = f"fake:///{zone}/i-{name}"
    alloc = {"cpu": f"{allocatable['cpu']}m", "memory": str(allocatable["memory"]),
             "pods": str(allocatable.get("pods", 110))}
    labels = {L.NODEPOOL: POOL, L.INSTANCE_TYPE: instance_type, L.ARCH: "amd64", L.OS: "linux", L.ZONE: zone,
              L.CAPACITY_TYPE: "on-demand", L.HOSTNAME: name, L.REGISTERED: "true", L.INITIALIZED: "true"}
    n = {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": name, "labels": labels, "finalizers": [L.TERMINATION_FINALIZER]},
         "spec": {"providerID": pid},
         "status": {"allocatable": alloc, "capacity": alloc,
                    "conditions": [{"type": "Ready", "status": "True"}]}}
    claim = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
             "metadata": {"name": f"claim-{name}", "labels": {L.NODEPOOL: POOL, L.INSTANCE_TYPE: instance_type},
                          "finalizers": [L.TERMINATION_FINALIZER]},
             "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                      "requirements": [{"key": L.INSTANCE_TYPE, "operator": "In", "values": [instance_type]}]},
             "status": {"providerID": pid, "nodeName": name, "capacity": alloc, "allocatable": alloc,
                        "conditions": [{"type": t, "status": "True"}
                                       for t in ("Launched", "Registered", "Initialized", "Ready")]}}
    return n, claim


class NominationRecorder(Recorder):
    """The controller's Recorder, noting when each pod is first nominated and handing the nomination to the
    kube-scheduler stand-in."""

    def __init__(self, client: StandIn, binder: queue.Queue[tuple[str, str]]) -> None:
        super().__init__(client)  # type: ignore[arg-type]  # the stand-in serves the surface it uses
        self.binder = binder
        self.waiting: set[str] = set()  # burst pods not yet nominated
        self.last_nominated = 0.0

    def publish(self, obj: Obj, type_: str, reason: str, message: str, dedupe_values: tuple[str, ...] | None = None,
                dedupe_seconds: float | None = None) -> None:
        """Publish, and for a Nominated event note the time and queue the binding."""
        super().publish(obj, type_, reason, message, dedupe_values, dedupe_seconds)
        if reason != "Nominated":
            return
        name = str(obj["metadata"]["name"])
        if name in self.waiting:
            self.waiting.discard(name)
            self.last_nominated = time.monotonic()
        self.binder.put((name, message.rsplit(": ", 1)[-1]))


class World:
    """The stand-in apiserver, kube-scheduler and kubelets around the controller's provisioning path."""

    def __init__(self, nodes: int, idle: float) -> None:
        self.kube = StandIn()
        self.cloud = FakeCloudProvider()
        self.types = {it.name: it for it in self.cloud.catalog.instance_types}
        self.binds: queue.Queue[tuple[str, str]] = queue.Queue()
        self.recorder = NominationRecorder(self.kube, self.binds)
        self.cluster = Cluster(self.kube)  # type: ignore[arg-type]  # the stand-in serves the surface it uses
        self.prov = Provisioner(self.cluster, self.kube, self.cloud, self.recorder,  # type: ignore[arg-type]
                                batcher=Batcher(idle=idle, maximum=10.0))
        self.cluster.pods_informer.add_handler(self.prov.on_pod)
        self.stop = threading.Event()
        self.pod_apps: dict[str, str] = {}  # pod name -> its workload (the stand-in's bookkeeping)
        self.bound: deque[str] = deque()  # bound pods, oldest first
        self.claims: dict[str, str] = {}  # NodeClaim name -> its first instance-type option
        self.registered: set[str] = set()
        self.passes: list[float] = []
        self.kube.on_nodeclaim = self._claimed
        self._seed(nodes)

    def _claimed(self, claim: Obj) -> None:
        reqs = claim["spec"]["requirements"]
        options: list[str] = next((r["values"] for r in reqs if r["key"] == L.INSTANCE_TYPE), [])
        self.claims[claim["metadata"]["name"]] = str(options[0]) if options else NODE_TYPE

    def _seed(self, nodes: int) -> None:
        alloc = self.types[NODE_TYPE].allocatable
        self.kube.seed(R.EC2NODECLASSES, {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                                          "metadata": {"name": "default"},
                                          "spec": {"role": "KarpenterNodeRole",
                                                   "amiSelectorTerms": [{"alias": "al2023@latest"}]},
                                          "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        self.kube.seed(R.NODEPOOLS, {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                                     "metadata": {"name": POOL},
                                     "spec": {"template": {"spec": {
                                         "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                          "name": "default"},
                                         "requirements": [
                                             {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                                             {"key": "karpenter.k8s.aws/instance-category", "operator": "In",
                                              "values": ["c", "m", "r"]}]}}},
                                     "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        self.kube.seed(R.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "load"}})
        for i in range(nodes):
            n, claim = node(f"node-{i}", NODE_TYPE, alloc)
            self.kube.seed(R.NODES, n)
            self.kube.seed(R.NODECLAIMS, claim)
            name = f"base-{i}"
            self.kube.seed(R.PODS, pod(name, "base", node=n["metadata"]["name"], cpu="1", memory="1Gi"))
            self.bound.append(name)
            self.pod_apps[name] = "base"

    def start(self) -> None:
        """The informers, the provisioner's loops, the recorder and the binder; returns once synced."""
        self.cluster.start(self.stop)
        self.recorder.start(self.stop)
        if not self.cluster.wait_synced(self.stop, timeout=600):
            raise RuntimeError("the informers did not sync")
        schedule = self.prov.schedule

        def timed() -> Any:
            started = time.perf_counter()
            try:
                return schedule()
            finally:
                self.passes.append(time.perf_counter() - started)

        self.prov.schedule = timed  # type: ignore[method-assign]  # the longest pass is one of the figures
        for target in (self.prov.run, self.prov.requeue_loop, self._bind_loop):
            threading.Thread(target=target, args=(self.stop,), daemon=True).start()

    def add_pending(self, name: str, app: str) -> None:
        """A new pending pod, as kube-scheduler leaves it when nothing fits."""
        self.pod_apps[name] = app
        self.kube.send(R.PODS, "ADDED", pod(name, app))

    def delete_bound(self) -> None:
        """The oldest bound pod goes away."""
        name = self.bound.popleft()
        app = self.pod_apps.pop(name)
        self.kube.send(R.PODS, "DELETED", pod(name, app))

    def _register(self, claim_name: str) -> str:
        """The NodeClaim launched and its Node registered, as the lifecycle and kubelet would leave them."""
        node_name = f"node-{claim_name}"
        if claim_name in self.registered:
            return node_name
        it = self.types.get(self.claims.get(claim_name, NODE_TYPE)) or self.types[NODE_TYPE]
        n, claim = node(node_name, it.name, it.allocatable)
        claim["metadata"]["name"] = claim_name
        self.kube.send(R.NODECLAIMS, "MODIFIED", claim)
        self.kube.send(R.NODES, "ADDED", n)
        self.registered.add(claim_name)
        return node_name

    def _bind_loop(self, stop: threading.Event) -> None:
        """kube-scheduler's part: bind each nominated pod where the event says."""
        while not stop.is_set():
            try:
                name, target = self.binds.get(timeout=0.5)
            except queue.Empty:
                continue
            app = self.pod_apps.get(name)
            if app is None:
                continue  # churned away meanwhile
            kind, _, where = target.partition("/")
            node_name = self._register(where) if kind == "nodeclaim" else where
            self.kube.send(R.PODS, "MODIFIED", pod(name, app, node=node_name))
            self.bound.append(name)


def wait_for(cond: Any, timeout: float, stop: threading.Event) -> bool:
    """Poll cond until true or timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        stop.wait(0.1)
    return bool(cond())


def run(pods: int, nodes: int, churn_minutes: float, churn_per_minute: int, idle: float) -> dict[str, Any]:
    """The burst, then the churn; the figures."""
    gc.collect()
    baseline, _ = rss_mib()
    w = World(nodes, idle)
    w.start()
    synced, _ = rss_mib()
    names = [f"burst-{i}" for i in range(pods)]
    w.recorder.waiting.update(names)
    sent = time.monotonic()
    for i, name in enumerate(names):
        w.add_pending(name, f"app-{i % 10}")
    arrived = time.monotonic() - sent
    ok = wait_for(lambda: not w.recorder.waiting, max(120.0, pods / 100), w.stop)
    nominated = w.recorder.last_nominated - sent if ok else float("nan")
    wait_for(lambda: bool(w.passes), 60.0, w.stop)  # the pass that nominated the last pod has returned
    burst_passes = list(w.passes)
    # the binder settles the burst before the churn starts
    wait_for(lambda: w.binds.empty() and not w.cluster.has_provisionable_pods(), 120.0, w.stop)
    _, peak_burst = rss_mib()
    gc.collect()
    start_rss, _ = rss_mib()
    samples = [start_rss]
    churn_start_passes = len(w.passes)
    steps = int(churn_minutes * STEPS_PER_MINUTE)
    per_step = churn_per_minute // STEPS_PER_MINUTE
    step_seconds = 60.0 / STEPS_PER_MINUTE
    seq = 0
    next_at = time.monotonic()
    for _ in range(steps):
        for _ in range(min(per_step, len(w.bound))):
            w.delete_bound()
        for _ in range(per_step):
            w.add_pending(f"churn-{seq}", f"app-{seq % 10}")
            seq += 1
        next_at += step_seconds
        while time.monotonic() < next_at:
            w.stop.wait(min(1.0, max(0.0, next_at - time.monotonic())))
            samples.append(rss_mib()[0])
    wait_for(lambda: w.binds.empty() and not w.cluster.has_provisionable_pods(), 120.0, w.stop)
    gc.collect()
    end_rss, peak = rss_mib()
    w.stop.set()
    w.kube.closed.set()
    churn_passes = w.passes[churn_start_passes:]
    longest = max(burst_passes, default=0.0)
    return {
        "pods": pods, "nodes": nodes, "churnMinutes": churn_minutes, "churnPerMinute": churn_per_minute,
        "apiserver": "in-process stand-in (list+watch queues)", "controller": "in-process (Cluster + Provisioner)",
        "burstSendSeconds": round(arrived, 3),
        "nominatedSeconds": round(nominated, 3), "nominatedTarget": f"<= {NOMINATED_TARGET:g}",
        "meetsNominatedTarget": nominated <= NOMINATED_TARGET,
        "burstPasses": len(burst_passes), "longestPassSeconds": round(longest, 3),
        "nominatedOverLongestPass": round(nominated / longest, 2) if longest else None,
        "nodeClaimsCreated": len(w.claims),
        "baselineRssMiB": round(baseline, 1), "syncedRssMiB": round(synced, 1),
        "peakRssMiB": round(peak, 1), "peakRssAfterBurstMiB": round(peak_burst, 1),
        "peakRssTarget": f"<= {RSS_TARGET_MIB:g}", "meetsRssTarget": peak <= RSS_TARGET_MIB,
        "perObjectKiB": round((peak_burst - baseline) * 1024 / (pods + 2 * nodes + nodes), 2),
        "rssStartMiB": round(start_rss, 1), "rssEndMiB": round(end_rss, 1),
        "rssMinMiB": round(min(samples), 1), "rssMaxMiB": round(max(samples), 1),
        "rssDriftPercent": round((end_rss - start_rss) * 100 / start_rss, 2) if steps else 0.0,
        "driftTarget": f"within +-{DRIFT_TARGET_PERCENT:g}",
        "churnPasses": len(churn_passes), "longestChurnPassSeconds": round(max(churn_passes, default=0.0), 3),
        "podsInCache": len(w.cluster.pods()), "provisionerPodCache": len(w.prov._pods),
        "eventsPublished": w.kube.events, "eventsDropped": w.recorder.dropped,
    }


def main() -> None:
    """Parse the flags, run once and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=20000, help="pending pods in the burst")
    ap.add_argument("--nodes", type=int, default=5000, help="existing nodes (each with its NodeClaim and one pod)")
    ap.add_argument("--churn-minutes", type=float, default=10.0)
    ap.add_argument("--churn-per-minute", type=int, default=1000)
    ap.add_argument("--idle", type=float, default=1.0, help="BATCH_IDLE_DURATION in seconds")
    ap.add_argument("-o", "--output", choices=("json", "text"), default="text")
    a = ap.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    result = run(a.pods, a.nodes, a.churn_minutes, a.churn_per_minute, a.idle)
    if a.output == "json":
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:28} {v}")


if __name__ == "__main__":
    main()
