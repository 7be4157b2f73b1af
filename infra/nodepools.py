"""NodePools and EC2NodeClasses as code: validated at synth time with the controller's own validation (a bad pool
fails `synth` naming the field path) and rendered, defaults filled in, as kubernetes_manifest resources. The dicts
come from infra/manifests.py, the same ones `karpy render` writes."""

from __future__ import annotations

from typing import Any

from infra.cdk import Construct, KubernetesProvider, Manifest
from infra.deployment import manifest_id
from infra.manifests import InvalidKarpenterResources, pool_manifests, validated_manifests

__all__ = ["InvalidKarpenterResources", "KarpenterResources", "validated_manifests"]


class KarpenterResources(Construct):
    """The environment's NodePools and EC2NodeClasses in the cluster."""

    def __init__(self, scope: Construct, id: str, documents: list[dict[str, Any]], provider: KubernetesProvider,
                 source: str, node_role_name: str) -> None:
        super().__init__(scope, id)
        self.manifests = pool_manifests(documents, source, node_role_name)
        for m in self.manifests:
            Manifest(self, manifest_id(m), manifest=m, provider=provider)
