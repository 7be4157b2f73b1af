"""NodePools and EC2NodeClasses as code: validated at synth time with the controller's own validation (a bad pool
fails `synth` naming the field path) and rendered, defaults filled in, as kubernetes_manifest resources."""

from __future__ import annotations

import copy
from typing import Any

from controller.api import Document, parse_ec2nodeclass, parse_nodepool, validate_document
from infra.cdk import Construct, KubernetesProvider, Manifest


class InvalidKarpenterResources(ValueError):
    """Pools or node classes that Karpenter would reject; the message lists every error."""


def validated_manifests(documents: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """The v1 manifests with Karpenter's defaults, or InvalidKarpenterResources naming every field at fault."""
    docs = []
    for i, raw in enumerate(documents):
        meta = raw.get("metadata") or {}
        docs.append(Document(source, i, str(raw.get("apiVersion", "")), str(raw.get("kind", "")),
                             str(meta.get("name", "(unnamed)")), None, raw))
    errors = [str(e) for d in docs for e in validate_document(d)]
    unknown = [f"{d.ref}: kind must be NodePool or EC2NodeClass" for d in docs
               if d.kind not in ("NodePool", "EC2NodeClass")]
    if errors or unknown:
        raise InvalidKarpenterResources("\n".join(errors + unknown))
    out = []
    for d in docs:
        model = parse_nodepool(d) if d.kind == "NodePool" else parse_ec2nodeclass(d)
        manifest = model.to_dict()
        manifest.pop("status", None)
        out.append(manifest)
    return out


class KarpenterResources(Construct):
    """The environment's NodePools and EC2NodeClasses in the cluster."""

    def __init__(self, scope: Construct, id: str, documents: list[dict[str, Any]], provider: KubernetesProvider,
                 source: str, node_role_name: str) -> None:
        super().__init__(scope, id)
        documents = copy.deepcopy(documents)
        for raw in documents:
            spec = raw.get("spec")
            # an EC2NodeClass without role or instanceProfile gets the node role this stack creates (a reference)
            if raw.get("kind") == "EC2NodeClass" and isinstance(spec, dict) and not (
                    spec.get("role") or spec.get("instanceProfile")):
                spec["role"] = node_role_name
        self.manifests = validated_manifests(documents, source)
        for m in self.manifests:
            Manifest(self, f"{m['kind'].lower()}-{m['metadata']['name']}", manifest=m, provider=provider)
