"""Try `karpy controller` without AWS: LocalStack stands in for EC2/IAM/SQS, the test control plane (etcd,
kube-apiserver, kube-scheduler, kube-controller-manager) for EKS, and a small kubelet stand-in registers a Node for
every instance the controller launches so the real scheduler binds pods to it.

    .venv/bin/python scripts/try-controller.py            # world + controller; Ctrl-C (or SIGTERM) stops everything
    .venv/bin/python scripts/try-controller.py --demo 8   # and a Deployment of 8 pods to provision for

It prints the kubeconfig and the settings it runs the controller with; the controller's JSON logs follow on stdout.
Needs scripts/build-kube-control-plane.sh and scripts/install-localstack.sh to have run (scripts/test.sh runs both).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Stopped(Exception):
    """SIGTERM or SIGHUP: stop everything, as on Ctrl-C."""


def _stop_on_signal(signum: int, frame: Any) -> None:
    raise Stopped(signal.Signals(signum).name)


def _started_pids(run: Path) -> list[int]:
    """Every process group the start scripts launched so far (read at stop time: a stop during a start script still
    finds what it had started)."""
    pids: list[int] = []
    for f in (run / "kube" / "pids", run / "localstack" / "pid"):
        with contextlib.suppress(OSError):
            pids += [int(p) for p in f.read_text().split() if p.isdigit()]
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is gone for our purposes: it only waits for its parent to read its status
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    return True


def stop_all(pids: list[int], grace: float = 30.0) -> list[int]:
    """SIGTERM each process group, SIGKILL what outlives grace; the pids still alive (none unless unkillable)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)  # not a group leader after all
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        pids = [p for p in pids if _alive(p)]
        if not pids:
            break
    return pids


def main() -> int:
    """Start the world and the controller; stop everything on Ctrl-C, SIGTERM or SIGHUP, or when it fails."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", type=int, default=0, metavar="PODS", help="also create a Deployment of PODS pods")
    a = ap.parse_args()
    import boto3
    from kubernetes import client, config

    from tests.e2e.harness import KubeletSim
    from tests.e2e.world import create_aws_world, create_nodeclass, install_crds

    run = Path(tempfile.mkdtemp(prefix="karpy-try-"))
    print(f"run dir:    {run}", flush=True)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_on_signal)
    controller: subprocess.Popen[bytes] | None = None
    sim = None
    try:
        subprocess.run(["bash", str(ROOT / "scripts" / "start-kube-control-plane.sh"), str(run / "kube")],
                       check=True)
        port = _free_port()
        subprocess.run(["bash", str(ROOT / "scripts" / "start-localstack.sh"), str(run / "localstack"), str(port)],
                       check=True)
        endpoint = f"http://127.0.0.1:{port}"
        kubeconfig = str(run / "kube" / "kubeconfig")
        api = config.new_client_from_config(config_file=kubeconfig)
        for _ in range(300):
            with contextlib.suppress(Exception):
                client.CoreV1Api(api).read_namespaced_service_account("default", "default")
                break
            time.sleep(0.2)
        install_crds(api)
        cluster = f"try-{uuid.uuid4().hex[:6]}"
        kw: dict[str, Any] = {"region_name": "us-east-1", "endpoint_url": endpoint, "aws_access_key_id": "test",
              "aws_secret_access_key": "test"}
        made = create_aws_world(boto3.client("ec2", **kw), boto3.client("iam", **kw), boto3.client("sqs", **kw),
                                cluster)
        custom = client.CustomObjectsApi(api)
        create_nodeclass(custom, cluster, made)
        custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", {
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": cluster},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}}}})
        env = {**os.environ, "CLUSTER_NAME": cluster, "CLUSTER_ENDPOINT": "https://127.0.0.1:6443",
               "KUBECONFIG": kubeconfig, "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
               "INTERRUPTION_QUEUE": made["queue_name"], "DISABLE_LEADER_ELECTION": "true"}
        print(f"\nkubeconfig: {kubeconfig}\nLocalStack: {endpoint}\ncluster:    {cluster}\n"
              f"queue:      {made['queue_name']}\n", flush=True)
        sim = KubeletSim(api).start()
        controller = subprocess.Popen([sys.executable, "-c", "import cli; cli.main()", "controller"], cwd=ROOT,
                                      env=env)
        if a.demo:
            demo: Any = {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "demo"},
                "spec": {"replicas": a.demo, "selector": {"matchLabels": {"app": "demo"}},
                         "template": {"metadata": {"labels": {"app": "demo"}}, "spec": {"containers": [{
                             "name": "app", "image": "registry.k8s.io/pause:3.9",
                             "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}}
            client.AppsV1Api(api).create_namespaced_deployment("default", demo)
        return controller.wait()
    except (KeyboardInterrupt, Stopped):
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        if controller is not None and controller.poll() is None:
            controller.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                controller.wait(30)
        if controller is not None and controller.poll() is None:
            controller.kill()
        if sim is not None:
            sim.stop()
        left = stop_all(list(reversed(_started_pids(run))))
        print(f"stopped{'; still running: ' + ' '.join(map(str, left)) if left else ''}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
