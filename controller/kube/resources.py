"""The Kubernetes resources karpy reads and writes, with their REST paths."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    """A resource kind: API group and version, plural, and whether it lives in namespaces."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """`group/version`, or `version` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The REST path of the collection, or of one object (and its subresource)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


PODS = Resource("", "v1", "pods", "Pod", True)
NODES = Resource("", "v1", "nodes", "Node", False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
SERVICES = Resource("", "v1", "services", "Service", True)
EVENTS = Resource("", "v1", "events", "Event", True)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
PERSISTENTVOLUMECLAIMS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True)
PERSISTENTVOLUMES = Resource("", "v1", "persistentvolumes", "PersistentVolume", False)
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet", True)
STORAGECLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False)
VOLUMEATTACHMENTS = Resource("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
# policy/v1 from Kubernetes 1.21; the client falls back to v1beta1 on older servers (see KubeClient.resolve)
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True)
NODECLAIMS = Resource("karpenter.sh", "v1", "nodeclaims", "NodeClaim", False)
NODEPOOLS = Resource("karpenter.sh", "v1", "nodepools", "NodePool", False)
EC2NODECLASSES = Resource("karpenter.k8s.aws", "v1", "ec2nodeclasses", "EC2NodeClass", False)
