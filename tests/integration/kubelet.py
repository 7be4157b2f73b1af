"""Plays kubelet for nodes karpy launches: registers the Node, reports status and renews its Lease.

The test control plane has no kubelet, so a test registers Nodes with the providerID of the instance it launched and
the real kube-scheduler then binds pods to them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubernetes import client


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class FakeKubelet:
    """Registers Nodes and keeps them Ready, as a kubelet would."""

    def __init__(self, api_client: Any) -> None:
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.nodes: set[str] = set()

    def register(self, name: str, provider_id: str, labels: dict[str, str] | None = None,
                 capacity: dict[str, str] | None = None, allocatable: dict[str, str] | None = None,
                 taints: list[dict[str, str]] | None = None) -> None:
        """Create the Node, then report its status (capacity, allocatable, Ready) and its first Lease."""
        capacity = capacity or {"cpu": "4", "memory": "16Gi", "pods": "110"}
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})}
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                "spec": {"providerID": provider_id, "taints": taints or []}}
        self.core.create_node(body)
        self.nodes.add(name)
        self._status(name, capacity, allocatable or capacity, ready=True)
        self.heartbeat(name)

    def _status(self, name: str, capacity: dict[str, str], allocatable: dict[str, str], ready: bool) -> None:
        now = _now().isoformat()
        status = {
            "capacity": capacity, "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "reason": "KubeletReady" if ready else "KubeletNotReady",
                            "message": "karpy test kubelet", "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.10"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "containerd://1.7.0",
                         "kernelVersion": "6.1.0", "kubeProxyVersion": "v1.20.2", "kubeletVersion": "v1.20.2",
                         "machineID": name, "operatingSystem": "linux", "osImage": "karpy test", "systemUUID": name},
        }
        self.core.patch_node_status(name, {"status": status})

    def set_ready(self, name: str, ready: bool) -> None:
        """Flip the Ready condition (keeping capacity and allocatable)."""
        node = self.core.read_node(name)
        self._status(name, dict(node.status.capacity), dict(node.status.allocatable), ready)

    def heartbeat(self, name: str | None = None) -> None:
        """Renew the Lease in kube-node-lease of one node, or of every registered node."""
        for n in [name] if name else sorted(self.nodes):
            lease = {"metadata": {"name": n, "namespace": "kube-node-lease"},
                     "spec": {"holderIdentity": n, "leaseDurationSeconds": 40,
                              "renewTime": _now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}
            try:
                self.coordination.patch_namespaced_lease(n, "kube-node-lease", {"spec": lease["spec"]})
            except client.ApiException as e:
                if e.status != 404:
                    raise
                self.coordination.create_namespaced_lease("kube-node-lease", lease)

    def delete(self, name: str) -> None:
        """Remove the Node and its Lease."""
        self.core.delete_node(name)
        try:
            self.coordination.delete_namespaced_lease(name, "kube-node-lease")
        except client.ApiException as e:
            if e.status != 404:
                raise
        self.nodes.discard(name)
