"""The end-to-end world: LocalStack (EC2, IAM, SQS) and the real control plane with karpy's CRDs, one cluster's AWS
resources, and `karpy controller` run as a process against both.

Each test gets its own NodePool (and pods pinned to it), so nodes a previous test left behind never absorb its pods;
the NodePools and namespaces a test made are deleted after it, so no earlier test's pods keep a later test's controller
launching for them (a failpoint armed at launch must fire on the later test's own NodeClaim).
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.harness import ControllerProcess, KubeletSim, wait_for
from tests.e2e.world import create_aws_world, create_nodeclass, install_crds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class World:
    """One cluster's worth of AWS resources on LocalStack, and clients for both servers."""

    cluster: str
    endpoint: str
    kubeconfig: str
    api: Any
    ec2: Any
    sqs: Any
    queue_name: str
    queue_url: str
    nodeclass: str
    made: list[tuple[str, str]] = field(default_factory=list)

    def env(self, **extra: str) -> dict[str, str]:
        """The controller's environment: Karpenter's settings pointing at this world."""
        env = {"CLUSTER_NAME": self.cluster, "CLUSTER_ENDPOINT": "https://127.0.0.1:6443",
               "AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test",
               "AWS_SECRET_ACCESS_KEY": "test", "KUBECONFIG": self.kubeconfig, "INTERRUPTION_QUEUE": self.queue_name,
               "METRICS_PORT": str(free_port()), "HEALTH_PROBE_PORT": str(free_port()), "LOG_LEVEL": "info",
               "BATCH_IDLE_DURATION": "1s", "BATCH_MAX_DURATION": "10s"}
        env.update(extra)
        return env

    @property
    def custom(self) -> Any:
        return client.CustomObjectsApi(self.api)

    @property
    def core(self) -> Any:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> Any:
        return client.AppsV1Api(self.api)

    def nodepool(self, name: str, **template_spec: Any) -> dict[str, Any]:
        """Create a NodePool on this world's EC2NodeClass (amd64, on-demand and spot)."""
        spec = {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": self.nodeclass},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                                 {"key": "karpenter.k8s.aws/instance-category", "operator": "In",
                                  "values": ["c", "m"]}],
                "expireAfter": "Never"}
        spec.update(template_spec)
        body = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
                "spec": {"template": {"spec": spec}}}
        made = self.custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", body)
        self.made.append(("nodepools", name))
        return made

    def nodeclaims(self, nodepool: str | None = None) -> list[dict[str, Any]]:
        items = self.custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]
        return [c for c in items if nodepool is None
                or (c["metadata"].get("labels") or {}).get("karpenter.sh/nodepool") == nodepool]

    def deployment(self, namespace: str, name: str, replicas: int, nodepool: str, cpu: str = "500m",
                   memory: str = "256Mi", annotations: dict[str, str] | None = None, **pod_spec: Any) -> None:
        """A Deployment whose pods request cpu/memory and are pinned to the nodepool (annotations: the pods')."""
        spec = {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                                "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
                "nodeSelector": {"karpenter.sh/nodepool": nodepool}, "terminationGracePeriodSeconds": 0}
        spec.update(pod_spec)
        body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}, "annotations": annotations or {}},
                                      "spec": spec}}}
        self.apps.create_namespaced_deployment(namespace, body)

    def namespace(self) -> str:
        name = f"e2e-{uuid.uuid4().hex[:6]}"
        self.core.create_namespace({"metadata": {"name": name}})
        self.made.append(("namespaces", name))
        wait_for("default service account", lambda: self._sa(name), 30)
        return name

    def tidy(self) -> None:
        """Delete what the last test made: its namespaces (so its pods stop asking for nodes) and its NodePools (their
        NodeClaims follow through their owner reference and are terminated by the next running controller)."""
        while self.made:
            kind, name = self.made.pop()
            try:
                if kind == "namespaces":
                    self.core.delete_namespace(name)
                else:
                    self.custom.delete_cluster_custom_object("karpenter.sh", "v1", kind, name)
            except client.ApiException as e:
                if e.status != 404:
                    raise

    def _sa(self, namespace: str) -> bool:
        try:
            self.core.read_namespaced_service_account("default", namespace)
            return True
        except client.ApiException:
            return False

    def bound_pods(self, namespace: str, app: str) -> list[Any]:
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"app={app}").items
        return [p for p in pods if p.spec.node_name]

    def instance(self, provider_id: str) -> dict[str, Any]:
        instance_id = provider_id.rsplit("/", 1)[-1]
        return self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]


@pytest.fixture(scope="session")
def world(localstack_endpoint: str, aws_client: Any, kubeconfig: str, kube_api: Any) -> World:
    """VPC, two discovery-tagged subnets, a security group, a node role, an interruption queue, karpy's CRDs and an
    EC2NodeClass selecting them (the AMI by id: LocalStack has no public SSM parameters for aliases)."""
    ec2, iam, sqs = aws_client("ec2"), aws_client("iam"), aws_client("sqs")
    cluster = f"e2e{uuid.uuid4().hex[:8]}"
    made = create_aws_world(ec2, iam, sqs, cluster)
    install_crds(kube_api)
    create_nodeclass(client.CustomObjectsApi(kube_api), cluster, made)
    queue_name, queue_url = made["queue_name"], made["queue_url"]
    return World(cluster=cluster, endpoint=localstack_endpoint, kubeconfig=kubeconfig, api=kube_api, ec2=ec2,
                 sqs=sqs, queue_name=queue_name, queue_url=queue_url, nodeclass=cluster)


@pytest.fixture(autouse=True)
def _tidy_world(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that used the world (its controllers already stopped), delete what it made."""
    yield
    if "world" in request.fixturenames:
        request.getfixturevalue("world").tidy()


@pytest.fixture
def kubelet(world: World) -> Iterator[KubeletSim]:
    sim = KubeletSim(world.api).start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def start_controller(world: World, tmp_path: Path) -> Iterator[Any]:
    """Starts `karpy controller` processes; every one still running is stopped (SIGTERM) at the end."""
    started: list[ControllerProcess] = []

    def start(log_name: str = "controller.log", args: tuple[str, ...] = (), unset: tuple[str, ...] = (),
              **env: str) -> ControllerProcess:
        full = world.env(**env)
        for key in unset:
            full.pop(key, None)
        proc = ControllerProcess(full, tmp_path / log_name, args).start()
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            if proc.running:
                proc.stop()


def nodepool_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def settle(seconds: float) -> None:
    """Let the controller act (used only where a test checks that something does NOT happen)."""
    time.sleep(seconds)
