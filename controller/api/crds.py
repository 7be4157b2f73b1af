"""CustomResourceDefinitions for NodePool, NodeClaim and EC2NodeClass, generated from the schemas the validator uses,
with status subresources and Karpenter's printer columns."""

from __future__ import annotations

from typing import Any

import yaml

from controller.api.kinds import KINDS
from controller.api.schema import openapi

_CRDS: tuple[tuple[str, str, str, str, str, list[str], list[dict[str, Any]]], ...] = (
    ("karpenter.sh", "v1", "NodePool", "nodepools", "nodepool", [], [
        {"name": "NodeClass", "type": "string", "jsonPath": ".spec.template.spec.nodeClassRef.name"},
        {"name": "Nodes", "type": "string", "jsonPath": ".status.nodes"},
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Weight", "type": "integer", "jsonPath": ".spec.weight", "priority": 1},
        {"name": "CPU", "type": "string", "jsonPath": ".status.resources.cpu", "priority": 1},
        {"name": "Memory", "type": "string", "jsonPath": ".status.resources.memory", "priority": 1},
    ]),
    ("karpenter.sh", "v1", "NodeClaim", "nodeclaims", "nodeclaim", [], [
        {"name": "Type", "type": "string", "jsonPath": '.metadata.labels.node\\.kubernetes\\.io/instance-type'},
        {"name": "Capacity", "type": "string", "jsonPath": '.metadata.labels.karpenter\\.sh/capacity-type'},
        {"name": "Zone", "type": "string", "jsonPath": '.metadata.labels.topology\\.kubernetes\\.io/zone'},
        {"name": "Node", "type": "string", "jsonPath": ".status.nodeName"},
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "ImageID", "type": "string", "jsonPath": ".status.imageID", "priority": 1},
        {"name": "ID", "type": "string", "jsonPath": ".status.providerID", "priority": 1},
        {"name": "NodePool", "type": "string", "jsonPath": '.metadata.labels.karpenter\\.sh/nodepool', "priority": 1},
        {"name": "NodeClass", "type": "string", "jsonPath": ".spec.nodeClassRef.name", "priority": 1},
        {"name": "Drifted", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Drifted")].status',
         "priority": 1},
    ]),
    ("karpenter.k8s.aws", "v1", "EC2NodeClass", "ec2nodeclasses", "ec2nodeclass", ["ec2nc", "ec2ncs"], [
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Role", "type": "string", "jsonPath": ".spec.role", "priority": 1},
    ]),
)


def crd_manifests() -> list[dict[str, Any]]:
    """The three CRDs as apiextensions.k8s.io/v1 objects (cluster-scoped, status subresource)."""
    out = []
    for group, version, kind, plural, singular, short, columns in _CRDS:
        schema = KINDS[(f"{group}/{version}", kind)]
        body = openapi(schema)
        body["properties"]["metadata"] = {"type": "object"}
        names: dict[str, Any] = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": singular,
                                 "categories": ["karpenter"]}
        if short:
            names["shortNames"] = short
        subresources: dict[str, Any] = {"status": {}}
        if kind == "NodePool":  # static pools scale through spec.replicas, as Karpenter's CRD serves it
            subresources["scale"] = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"}
        out.append({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "names": names, "scope": "Cluster", "versions": [{
                "name": version, "served": True, "storage": True, "subresources": subresources,
                "additionalPrinterColumns": columns, "schema": {"openAPIV3Schema": body}}]},
        })
    return out


def render_crds() -> str:
    """The CRDs as multi-document YAML (`karpy crds`)."""
    return str(yaml.safe_dump_all(crd_manifests(), sort_keys=False))
