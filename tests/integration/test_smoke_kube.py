"""The control plane is real: the controller-manager makes a Deployment's pods and the scheduler binds them to a Node
that the test kubelet registered; a pod too big for any node stays Pending as Unschedulable."""

from __future__ import annotations

import time
import uuid

import pytest
from kubernetes import client

from tests.integration.kubelet import FakeKubelet

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


def _wait(predicate, timeout: float = 60.0, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


def test_deployment_pods_are_bound_by_the_real_scheduler(kube_api):
    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    kubelet = FakeKubelet(kube_api)
    node = f"ip-10-0-0-{uuid.uuid4().hex[:6]}.ec2.internal"
    kubelet.register(node, "aws:///us-east-1a/i-0123456789abcdef0",
                     labels={"topology.kubernetes.io/zone": "us-east-1a"},
                     capacity={"cpu": "4", "memory": "16Gi", "pods": "110"})
    ns = f"smoke-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
              "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "web", "image": "nginx",
                                                             "resources": {"requests": {"cpu": "500m"}}}]}}}}
    apps.create_namespaced_deployment(ns, deploy)

    def bound():
        pods = core.list_namespaced_pod(ns, label_selector="app=web").items
        return pods if len(pods) == 3 and all(p.spec.node_name for p in pods) else None

    pods = _wait(bound)
    assert {p.spec.node_name for p in pods} == {node}
    assert all(p.metadata.owner_references[0].kind == "ReplicaSet" for p in pods)

    big = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "too-big"},
           "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "64"}}}]}}
    core.create_namespaced_pod(ns, big)

    def unschedulable():
        p = core.read_namespaced_pod("too-big", ns)
        conds = {c.type: c for c in p.status.conditions or []}
        c = conds.get("PodScheduled")
        return c if c is not None and c.status == "False" and c.reason == "Unschedulable" else None

    _wait(unschedulable)
    assert core.read_namespaced_pod("too-big", ns).spec.node_name is None
    kubelet.heartbeat()
    lease = client.CoordinationV1Api(kube_api).read_namespaced_lease(node, "kube-node-lease")
    assert lease.spec.holder_identity == node
