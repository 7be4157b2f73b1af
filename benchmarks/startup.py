"""Start-up times: the test world's servers, and the controller's cold start.

    python benchmarks/startup.py --runs 2                 # LocalStack and the Kubernetes control plane
    python benchmarks/startup.py --controller --runs 3    # karpy controller: pods -> first NodeClaim, from cold

The servers are each started N times from the project's own scripts on free ports and stopped again.

--controller starts a fresh control plane per run (LocalStack once), the EC2NodeClass and a NodePool, then
`karpy controller` on AWS (LocalStack, which does not serve the Pricing API: the on-demand prices are unreachable as in
an isolated VPC). As soon as it answers /readyz, 5 pods are created. Printed per run: firstNodeClaimAfterPodsSeconds
(the first NodeClaim's appearance - the last pod's creation, both as watches deliver them) next to its target,
BATCH_IDLE_DURATION + 1 s; and firstNodeClaimAfterLaunchSeconds (from starting the process).
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
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    time.sleep(1)


def localstack_once() -> float:
    """Seconds from launch until LocalStack answers its health endpoint."""
    with tempfile.TemporaryDirectory() as run:
        start = time.perf_counter()
        subprocess.run(["bash", str(ROOT / "scripts" / "start-localstack.sh"), run, str(_free_port())], check=True,
                       capture_output=True)
        took = time.perf_counter() - start
        _stop([int(Path(run, "pid").read_text())])
    return took


def kube_once() -> float:
    """Seconds from launch until kube-apiserver is ready and the scheduler and controller-manager are started."""
    with tempfile.TemporaryDirectory() as run:
        start = time.perf_counter()
        subprocess.run(["bash", str(ROOT / "scripts" / "start-kube-control-plane.sh"), run], check=True,
                       capture_output=True)
        took = time.perf_counter() - start
        _stop([int(p) for p in Path(run, "pids").read_text().split()])
    return took


COLD_PODS = 5
TARGET_AFTER_IDLE = 1.0  # first NodeClaim within BATCH_IDLE_DURATION + 1 s of the pods


def controller_cold_start(endpoint: str, octet: int, log_dir: str | None = None) -> dict[str, Any]:
    """One cold start of `karpy controller` on a fresh control plane: seconds from the pods to the first NodeClaim."""
    import boto3
    from kubernetes import client

    from benchmarks.provisioning import IDLE, Recorder, _nodepool_spec, _pod_spec, connect, start_control_plane
    from tests.e2e.world import create_aws_world, create_nodeclass

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        pids = start_control_plane(run / "kube")
        proc: subprocess.Popen[bytes] | None = None
        try:
            kubeconfig, api, core = connect(run / "kube")
            cluster = f"cold{uuid.uuid4().hex[:6]}"
            custom = client.CustomObjectsApi(api)
            kw: dict[str, Any] = {"region_name": "us-east-1", "endpoint_url": endpoint,
                                  "aws_access_key_id": "test", "aws_secret_access_key": "test"}
            made = create_aws_world(boto3.client("ec2", **kw), boto3.client("iam", **kw), boto3.client("sqs", **kw),
                                    cluster, octet=octet)
            create_nodeclass(custom, cluster, made)
            pool = "cold"
            custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", {
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": pool},
                "spec": {"template": {"spec": _nodepool_spec(cluster)}}})
            ns = "cold"
            namespace: Any = {"metadata": {"name": ns}}
            core.create_namespace(namespace)
            rec = Recorder(api, ns)
            rec.start()
            health = _free_port()
            env = {**os.environ, "CLUSTER_NAME": cluster, "KUBECONFIG": kubeconfig,
                   "DISABLE_LEADER_ELECTION": "true", "BATCH_IDLE_DURATION": f"{IDLE:g}s",
                   "METRICS_PORT": str(_free_port()), "HEALTH_PROBE_PORT": str(health),
                   "CLUSTER_ENDPOINT": "https://127.0.0.1:6443", "LOG_LEVEL": "info",
                   "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test",
                   "AWS_SECRET_ACCESS_KEY": "test"}
            log = open(run / "controller.log", "wb")  # noqa: SIM115 - closed with the process
            launched = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-c", "import cli; cli.main()", "controller"], cwd=ROOT, env=env,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + 120
            while True:
                with contextlib.suppress(OSError):
                    if urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=1).status == 200:
                        break
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"controller not ready: {(run / 'controller.log').read_text()[-2000:]}")
                time.sleep(0.05)
            ready = time.monotonic()
            for i in range(COLD_PODS):
                pod: Any = {"metadata": {"name": f"p{i}", "labels": {"app": "cold"}}, "spec": _pod_spec(pool)}
                core.create_namespaced_pod(ns, pod)
            deadline = time.monotonic() + 120
            while not rec.nodeclaims and time.monotonic() < deadline:
                time.sleep(0.05)
            rec.stop.set()
            if not rec.nodeclaims:
                raise RuntimeError(f"no NodeClaim in 120 s: {(run / 'controller.log').read_text()[-2000:]}")
            first = min(rec.nodeclaims.values())
            after_pods = first - max(rec.created.values())
            return {"firstNodeClaimAfterPodsSeconds": round(after_pods, 3),
                    "target": f"<= {IDLE + TARGET_AFTER_IDLE:g} (BATCH_IDLE_DURATION {IDLE:g} s + "
                              f"{TARGET_AFTER_IDLE:g} s)",
                    "meetsTarget": after_pods <= IDLE + TARGET_AFTER_IDLE,
                    "readySeconds": round(ready - launched, 3),
                    "firstNodeClaimAfterLaunchSeconds": round(first - launched, 3)}
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(30)
                if log_dir:
                    Path(log_dir, f"controller-{octet}.log").write_bytes((run / "controller.log").read_bytes())
            _stop(pids)


def controller_main(runs: int, log_dir: str | None = None) -> None:
    """--controller: LocalStack once (or KARPY_LOCALSTACK_ENDPOINT), then `runs` cold starts."""
    endpoint = os.environ.get("KARPY_LOCALSTACK_ENDPOINT")
    pids: list[int] = []
    tmp = tempfile.mkdtemp()
    if endpoint is None:
        port = _free_port()
        subprocess.run(["bash", str(ROOT / "scripts" / "start-localstack.sh"), tmp, str(port)], check=True,
                       capture_output=True)
        pids.append(int(Path(tmp, "pid").read_text()))
        endpoint = f"http://127.0.0.1:{port}"
    results = []
    try:
        for i in range(runs):
            r = controller_cold_start(endpoint, octet=100 + i, log_dir=log_dir)
            results.append(r)
            print(json.dumps(r), flush=True)
    finally:
        _stop(pids)
    print(json.dumps({"coldStarts": results}, indent=2))


def main() -> None:
    """Start each server --runs times and print the seconds to ready (or, with --controller, cold starts)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--controller", action="store_true", help="measure the controller's cold start instead")
    ap.add_argument("--log-dir", help="keep each cold start's controller log there")
    a = ap.parse_args()
    if a.controller:
        controller_main(a.runs, a.log_dir)
        return
    ls = [round(localstack_once(), 2) for _ in range(a.runs)]
    kube = [round(kube_once(), 2) for _ in range(a.runs)]
    print(json.dumps({"localstackSeconds": ls, "kubeControlPlaneSeconds": kube}, indent=2))


if __name__ == "__main__":
    main()
