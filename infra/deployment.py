"""The controller in the cluster as kubernetes_manifest resources: the dicts of infra/manifests.py (the same ones
`karpy render` writes), with the values other constructs produce (role ARN, queue name) as Terraform references."""

from __future__ import annotations

from infra.cdk import Construct, KubernetesProvider, Manifest
from infra.manifests import DeploymentProps, controller_manifests

__all__ = ["ControllerDeployment", "DeploymentProps", "manifest_id"]


def manifest_id(m: dict[str, object]) -> str:
    """The construct id of one object: kind and name (unique among the objects of one stack)."""
    meta = m["metadata"]
    assert isinstance(meta, dict)
    return f"{str(m['kind']).lower()}-{meta['name']}"


class ControllerDeployment(Construct):
    """CRDs, Namespace (if not kube-system), ServiceAccount, RBAC, Deployment and PodDisruptionBudget."""

    def __init__(self, scope: Construct, id: str, props: DeploymentProps, provider: KubernetesProvider) -> None:
        super().__init__(scope, id)
        self.manifests = controller_manifests(props)
        for m in self.manifests:
            Manifest(self, manifest_id(m), manifest=m, provider=provider)
