"""Provisioning latency of `karpy controller` on the real control plane: N pending pods (10 Deployments) -> NodeClaims.

    python benchmarks/provisioning.py --pods 1000,5000 --cloud fake,localstack

For each cloud (the in-memory one, and AWS on LocalStack) and size, a fresh control plane is started, the controller
runs as a process, 10 Deployments of N/10 pods are created, and watches record when each pod appears (its creation,
as the watch delivers it), when it is first marked Unschedulable by kube-scheduler, and when each NodeClaim appears.
Printed per run, as the issue defines the figure: nodeclaims; latencySeconds = last NodeClaim created - last pod
created - BATCH_IDLE_DURATION (the window Karpenter waits by design), next to its target (<= 0.2 s at 1k pods, i.e.
all NodeClaims within idle + 0.2 s of the pods); the controller's peak RSS next to its target (<= 150 MiB at 1k
pods); 5k pods are reported without a target. Also printed: afterUnschedulableSeconds (the same end, measured from the
last pod turning Unschedulable, which leaves out kube-scheduler's share), and a baseline: the same pods solved
in-process by the same scheduler and input builder, with no API round trips (ratio = latency / in-process solve).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import urllib3  # noqa: E402
from kubernetes import client, config, watch  # noqa: E402

# the test control plane's kubeconfig skips TLS verification on loopback; say nothing about it per request
urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

from tests.e2e.world import create_aws_world, create_nodeclass, install_crds  # noqa: E402

IDLE = 1.0
CPU, MEMORY = "250m", "256Mi"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(pids: list[int]) -> None:
    for pid in reversed(pids):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    time.sleep(1)


def start_control_plane(run: Path) -> list[int]:
    """A fresh control plane from the project's script into run/ (kubeconfig there); its process ids."""
    subprocess.run(["bash", str(ROOT / "scripts" / "start-kube-control-plane.sh"), str(run)], check=True,
                   capture_output=True)
    return [int(p) for p in (run / "pids").read_text().split()]


def connect(run: Path) -> tuple[str, Any, Any]:
    """(kubeconfig, ApiClient, CoreV1Api) of the control plane started in run/, once pods can be created there and
    karpy's CRDs are installed."""
    kubeconfig = str(run / "kubeconfig")
    api = config.new_client_from_config(config_file=kubeconfig)
    core = client.CoreV1Api(api)
    wait_default_service_account(core)
    install_crds(api)
    return kubeconfig, api, core


def wait_default_service_account(core: Any, timeout: float = 60.0) -> None:
    """Until the controller-manager has created the default ServiceAccount (pods can be created then)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            core.read_namespaced_service_account("default", "default")
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Recorder:
    """Watches pods and NodeClaims, noting when each pod first turned Unschedulable and each NodeClaim appeared."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.created: dict[str, float] = {}
        self.unschedulable: dict[str, float] = {}
        self.nodeclaims: dict[str, float] = {}
        self.stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._pods, daemon=True).start()
        threading.Thread(target=self._claims, daemon=True).start()

    def _pods(self) -> None:
        core = client.CoreV1Api(self.api)
        while not self.stop.is_set():
            w = watch.Watch()
            for ev in w.stream(core.list_namespaced_pod, self.namespace, timeout_seconds=30,
                               _preload_content=False):
                obj = ev["raw_object"]
                name = obj["metadata"]["name"]
                self.created.setdefault(name, time.monotonic())  # the pod's first event: its creation
                conds = (obj.get("status") or {}).get("conditions") or []
                if name not in self.unschedulable and any(
                        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds):
                    self.unschedulable[name] = time.monotonic()
                if self.stop.is_set():
                    break

    def _claims(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        while not self.stop.is_set():
            w = watch.Watch()
            for ev in w.stream(custom.list_cluster_custom_object, "karpenter.sh", "v1", "nodeclaims",
                               timeout_seconds=30):
                name = ev["object"]["metadata"]["name"]
                self.nodeclaims.setdefault(name, time.monotonic())
                if self.stop.is_set():
                    break


def _pod_spec(pool: str) -> dict[str, Any]:
    return {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                            "resources": {"requests": {"cpu": CPU, "memory": MEMORY}}}],
            "nodeSelector": {"karpenter.sh/nodepool": pool}}


def baseline_seconds(pods: int, pool: str) -> float:
    """The same pods solved in-process: the provisioner's input builder and scheduler on the bundled catalog."""
    from controller.catalog.snapshot import load_catalog
    from controller.provisioning import inputs
    from controller.scheduling.scheduler import Scheduler

    catalog = load_catalog()
    nodepool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": pool},
                "spec": {"template": {"spec": _nodepool_spec("x")}}}
    raw = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "bench",
                                                            "labels": {"app": f"app{i % 10}"}},
            "spec": _pod_spec(pool)} for i in range(pods)]
    start = time.perf_counter()
    sched_pods = [inputs.scheduling_pod(p) for p in raw]
    pool_in = inputs.node_pool(nodepool, catalog.instance_types, {})
    Scheduler([pool_in], [], []).solve(sched_pods)
    return time.perf_counter() - start


def _nodepool_spec(nodeclass: str) -> dict[str, Any]:
    return {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass},
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                             {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]}]}


def run_once(pods: int, cloud: str, localstack: str | None) -> dict[str, Any]:
    """One size on one cloud, on a fresh control plane."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        pids = start_control_plane(run / "kube")
        proc = None
        try:
            kubeconfig, api, core = connect(run / "kube")
            cluster = f"bench{uuid.uuid4().hex[:6]}"
            custom = client.CustomObjectsApi(api)
            env = {**os.environ, "CLUSTER_NAME": cluster, "KUBECONFIG": kubeconfig,
                   "DISABLE_LEADER_ELECTION": "true", "BATCH_IDLE_DURATION": f"{IDLE:g}s",
                   "METRICS_PORT": str(_free_port()), "HEALTH_PROBE_PORT": str(_free_port()),
                   "CLUSTER_ENDPOINT": "https://127.0.0.1:6443", "LOG_LEVEL": "info"}
            if cloud == "fake":
                env["CLOUD_PROVIDER"] = "fake"
                custom.create_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", {
                    "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": cluster},
                    "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                             "subnetSelectorTerms": [{"id": "subnet-1"}],
                             "securityGroupSelectorTerms": [{"id": "sg-1"}]}})
            else:
                import boto3

                assert localstack is not None
                kw: dict[str, Any] = {"region_name": "us-east-1", "endpoint_url": localstack,
                                      "aws_access_key_id": "test", "aws_secret_access_key": "test"}
                made = create_aws_world(boto3.client("ec2", **kw), boto3.client("iam", **kw),
                                        boto3.client("sqs", **kw), cluster, octet=90)
                create_nodeclass(custom, cluster, made)
                env.update({"AWS_ENDPOINT_URL": localstack, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test",
                            "AWS_SECRET_ACCESS_KEY": "test"})
            pool = "bench"
            custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", {
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": pool},
                "spec": {"template": {"spec": _nodepool_spec(cluster)}}})
            log = open(run / "controller.log", "wb")  # noqa: SIM115 - closed with the process
            proc = subprocess.Popen([sys.executable, "-c", "import cli; cli.main()", "controller"], cwd=ROOT, env=env,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            ready = f"http://127.0.0.1:{env['HEALTH_PROBE_PORT']}/readyz"
            deadline = time.monotonic() + 90
            while True:
                with contextlib.suppress(OSError):
                    if urllib.request.urlopen(ready, timeout=1).status == 200:
                        break
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"controller not ready: {(run / 'controller.log').read_text()[-2000:]}")
                time.sleep(0.2)
            time.sleep(3)  # the NodeClass is marked ready and NodePool status settles
            ns = "bench"
            namespace: Any = {"metadata": {"name": ns}}
            core.create_namespace(namespace)
            rec = Recorder(api, ns)
            rec.start()
            apps = client.AppsV1Api(api)
            for d in range(10):
                deployment: Any = {
                    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"app{d}"},
                    "spec": {"replicas": pods // 10, "selector": {"matchLabels": {"app": f"app{d}"}},
                             "template": {"metadata": {"labels": {"app": f"app{d}"}}, "spec": _pod_spec(pool)}}}
                apps.create_namespaced_deployment(ns, deployment)
            deadline = time.monotonic() + 600
            while len(rec.unschedulable) < pods and time.monotonic() < deadline:
                time.sleep(0.2)
            # quiet: no new NodeClaim for 10 s after the last pod turned unschedulable and the window closed
            while time.monotonic() < deadline:
                last = max([*rec.nodeclaims.values(), max(rec.unschedulable.values(), default=0) + IDLE])
                if time.monotonic() - last > 10:
                    break
                time.sleep(0.5)
            rec.stop.set()
            hwm = 0
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        hwm = int(line.split()[1]) // 1024
            last_created = max(rec.created.values(), default=float("nan"))
            last_unsched = max(rec.unschedulable.values(), default=float("nan"))
            last_claim = max(rec.nodeclaims.values(), default=float("nan"))
            latency = round(last_claim - last_created - IDLE, 3)
            figures: dict[str, Any] = {
                "cloud": cloud, "pods": pods, "podsCreated": len(rec.created),
                "podsUnschedulable": len(rec.unschedulable), "nodeclaims": len(rec.nodeclaims),
                "latencySeconds": latency, "afterUnschedulableSeconds": round(last_claim - last_unsched - IDLE, 3),
                "controllerPeakRssMiB": hwm}
            return {**figures, **targets(pods, latency, hwm)}
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(30)
            _stop(pids)


# the issue's targets at 1k pods: all NodeClaims within BATCH_IDLE_DURATION + 0.2 s of the pods, and 150 MiB
TARGET_PODS = 1000
TARGET_LATENCY_SECONDS = 0.2
TARGET_RSS_MIB = 150


def targets(pods: int, latency: float, rss_mib: int) -> dict[str, Any]:
    """The targets printed next to the figures, and whether the run meets them (sizes other than 1k: reported)."""
    if pods != TARGET_PODS:
        return {"target": "none (reported)"}
    return {"targetLatencySeconds": f"<= {TARGET_LATENCY_SECONDS} (idle {IDLE:g} s + {TARGET_LATENCY_SECONDS} s)",
            "targetRssMiB": f"<= {TARGET_RSS_MIB}",
            "meetsLatency": latency <= TARGET_LATENCY_SECONDS, "meetsRss": 0 < rss_mib <= TARGET_RSS_MIB}


def main() -> None:
    """Run every size on every cloud and print the figures as JSON."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", default="1000,5000")
    ap.add_argument("--cloud", default="fake,localstack")
    a = ap.parse_args()
    sizes = [int(x) for x in a.pods.split(",")]
    clouds = a.cloud.split(",")
    localstack_pid: int | None = None
    endpoint = os.environ.get("KARPY_LOCALSTACK_ENDPOINT")
    tmp = tempfile.mkdtemp()
    if "localstack" in clouds and endpoint is None:
        port = _free_port()
        subprocess.run(["bash", str(ROOT / "scripts" / "start-localstack.sh"), tmp, str(port)], check=True,
                       capture_output=True)
        localstack_pid = int(Path(tmp, "pid").read_text())
        endpoint = f"http://127.0.0.1:{port}"
    results = []
    try:
        for cloud in clouds:
            for n in sizes:
                r = run_once(n, cloud, endpoint)
                base = baseline_seconds(n, "bench")
                r["inProcessSolveSeconds"] = round(base, 3)
                r["ratioToInProcess"] = round(r["latencySeconds"] / base, 2) if base > 0 else None
                results.append(r)
                print(json.dumps(r), flush=True)
    finally:
        if localstack_pid is not None:
            _stop([localstack_pid])
    print(json.dumps({"runs": results}, indent=2))


if __name__ == "__main__":
    main()
