"""A NodeClaim manifest from a NodePool and a planned node, shaped as Karpenter's NodeClaimTemplate.ToNodeClaim does."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from controller.api import labels as L
from controller.api.nodeclasshash import canonical
from controller.api.quantity import format_quantity
from controller.catalog.types import InstanceType
from controller.scheduling.requirements import Requirement, Requirements

# Karpenter's cap on the instance types one NodeClaim carries (the AWS provider narrows to 60 for CreateFleet)
MAX_INSTANCE_TYPES = 600
# karpy's own hash version, never Karpenter's ("v3"): each re-stamps a NodeClaim stamped by the other, no drift
NODEPOOL_HASH_VERSION = "karpy-v1"
# requirements are excluded from the static hash: their drift is computed separately, as Karpenter does
_HASH_IGNORED = ("requirements",)


def nodepool_hash(nodepool: dict[str, Any]) -> str:
    """A stable hash of the NodePool's template (less what Karpenter leaves out), for static drift detection."""
    template = json.loads(json.dumps((nodepool.get("spec") or {}).get("template") or {}))
    for key in _HASH_IGNORED:
        (template.get("spec") or {}).pop(key, None)
    # lists as sets, zero values as absent (Karpenter's SlicesAsSets, IgnoreZeroValue): reordering taints is no drift
    doc = canonical(template)
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return str(int(digest[:16], 16))


def _lower_bound(key: str, gt: int) -> dict[str, Any]:
    """Gt n, or Gte 0 for the bound a Gte 0 leaves (Gt -1): the NodeClaim CRD takes only non-negative values."""
    if gt < 0:
        return {"key": key, "operator": "Gte", "values": ["0"]}
    return {"key": key, "operator": "Gt", "values": [str(gt)]}


def node_selector_requirement(r: Requirement) -> dict[str, Any]:
    """One requirement in the API's form (key, operator, values, minValues)."""
    out: dict[str, Any]
    if not r.complement:
        out = {"key": r.key, "operator": "In", "values": sorted(r.values)} if r.values else {
            "key": r.key, "operator": "DoesNotExist"}
    elif r.gt is not None and not r.values and r.lt is None:
        out = _lower_bound(r.key, r.gt)
    elif r.lt is not None and not r.values and r.gt is None:
        out = {"key": r.key, "operator": "Lt", "values": [str(r.lt)]}
    elif r.values:
        out = {"key": r.key, "operator": "NotIn", "values": sorted(r.values)}
    else:
        out = {"key": r.key, "operator": "Exists"}
    if r.min_values:
        out["minValues"] = r.min_values
    return out


def node_selector_requirements(reqs: Requirements, instance_types: list[InstanceType] | None) -> list[dict[str, Any]]:
    """The NodeClaim's requirements: the simulated node's requirements with the instance-type list (cheapest first,
    at most MAX_INSTANCE_TYPES) in place of whatever the pool allowed; the placeholder hostname is dropped. Without
    instance types (a static NodePool's NodeClaim) the requirements are the pool's and the cloud provider chooses."""
    if instance_types is None:
        return [node_selector_requirement(r) for r in sorted(reqs, key=lambda r: r.key) if r.key != L.HOSTNAME]
    out = []
    names = [it.name for it in instance_types[:MAX_INSTANCE_TYPES]]
    for r in sorted(reqs, key=lambda r: r.key):
        if r.key == L.HOSTNAME:
            continue
        if r.key == L.INSTANCE_TYPE:
            continue
        if r.gt is not None and r.lt is not None:
            out.append(_lower_bound(r.key, r.gt))
            out.append({"key": r.key, "operator": "Lt", "values": [str(r.lt)]})
            continue
        out.append(node_selector_requirement(r))
    it_req: dict[str, Any] = {"key": L.INSTANCE_TYPE, "operator": "In", "values": names}
    existing = reqs.get(L.INSTANCE_TYPE)
    if existing is not None and existing.min_values:
        it_req["minValues"] = existing.min_values
    out.append(it_req)
    return out


def resource_list(resources: dict[str, int]) -> dict[str, str]:
    """Canonical integer resources as API quantities."""
    return {k: format_quantity(k, v) for k, v in sorted(resources.items()) if v}


def nodeclaim_manifest(nodepool: dict[str, Any], requirements: Requirements,
                       instance_types: list[InstanceType] | None, requests: dict[str, int]) -> dict[str, Any]:
    """The NodeClaim to create: generateName from the NodePool, owner reference, labels and hash annotations,
    requirements with the instance-type options ordered by price, resource requests, and the template's spec."""
    meta = nodepool["metadata"]
    name = meta["name"]
    template = (nodepool.get("spec") or {}).get("template") or {}
    tmeta = template.get("metadata") or {}
    tspec = template.get("spec") or {}
    labels = {str(k): str(v) for k, v in (tmeta.get("labels") or {}).items()}
    labels[L.NODEPOOL] = name
    ref = tspec.get("nodeClassRef") or {}
    if ref.get("kind", "EC2NodeClass") == "EC2NodeClass" and ref.get("name"):
        labels[L.EC2NODECLASS] = str(ref["name"])
    annotations = {str(k): str(v) for k, v in (tmeta.get("annotations") or {}).items()}
    annotations[L.NODEPOOL_HASH] = nodepool_hash(nodepool)
    annotations[L.NODEPOOL_HASH_VERSION] = NODEPOOL_HASH_VERSION
    spec: dict[str, Any] = {
        "requirements": node_selector_requirements(requirements, instance_types),
        "resources": {"requests": resource_list(requests)},
        "nodeClassRef": {"group": ref.get("group", L.AWS_GROUP), "kind": ref.get("kind", "EC2NodeClass"),
                         "name": ref.get("name", "")},
    }
    for key in ("taints", "startupTaints", "expireAfter", "terminationGracePeriod"):
        if tspec.get(key) not in (None, []):
            spec[key] = tspec[key]
    owner = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": name, "uid": meta.get("uid", ""),
             "blockOwnerDeletion": True}
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"generateName": f"{name}-", "labels": labels, "annotations": annotations,
                         "ownerReferences": [owner] if owner["uid"] else []},
            "spec": spec}
