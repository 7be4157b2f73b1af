"""Try `karpy controller` without AWS: LocalStack stands in for EC2/IAM/SQS, the test control plane (etcd,
kube-apiserver, kube-scheduler, kube-controller-manager) for EKS, and a small kubelet stand-in registers a Node for
every instance the controller launches so the real scheduler binds pods to it.

    .venv/bin/python scripts/try-controller.py            # world + controller; Ctrl-C stops everything
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


def main() -> int:
    """Start the world and the controller; stop everything on Ctrl-C."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", type=int, default=0, metavar="PODS", help="also create a Deployment of PODS pods")
    a = ap.parse_args()
    import boto3
    from kubernetes import client, config

    from tests.e2e.harness import KubeletSim
    from tests.e2e.world import create_aws_world, create_nodeclass, install_crds

    run = Path(tempfile.mkdtemp(prefix="karpy-try-"))
    pids: list[int] = []
    controller: subprocess.Popen[bytes] | None = None
    sim = None
    try:
        subprocess.run(["bash", str(ROOT / "scripts" / "start-kube-control-plane.sh"), str(run / "kube")],
                       check=True)
        pids += [int(p) for p in (run / "kube" / "pids").read_text().split()]
        port = _free_port()
        subprocess.run(["bash", str(ROOT / "scripts" / "start-localstack.sh"), str(run / "localstack"), str(port)],
                       check=True)
        pids.append(int((run / "localstack" / "pid").read_text()))
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
    except KeyboardInterrupt:
        return 0
    finally:
        if controller is not None and controller.poll() is None:
            controller.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                controller.wait(30)
        if sim is not None:
            sim.stop()
        for pid in reversed(pids):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)


if __name__ == "__main__":
    raise SystemExit(main())
