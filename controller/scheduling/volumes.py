"""Zonal volume topology: the node requirements a pod inherits from its persistent volumes (Karpenter's
VolumeTopology).

A PVC bound to a PersistentVolume pins the pod to the PV's spec.nodeAffinity (an EBS volume lives in one zone; its
terms are alternatives). An unbound PVC whose StorageClass has allowedTopologies restricts the pod to those
(WaitForFirstConsumer binds it where the pod lands). Generic ephemeral volumes are read through the claim Kubernetes
creates for them. Missing claims, volumes and StorageClasses make the pod unschedulable, as Karpenter reports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.api.labels import HOSTNAME
from controller.scheduling.requirements import Requirement, Requirements


@dataclass
class VolumeTopology:
    """What a pod's persistent volumes pin it to: claims by (namespace, name), volumes and StorageClasses by name
    (plain dicts for documents, views of the informers' caches in the controller)."""

    pvcs: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    pvs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    storage_classes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


class VolumeError(ValueError):
    """A pod whose volumes cannot be resolved, naming the claim."""


def claim_name(pod: Mapping[str, Any], volume: Mapping[str, Any]) -> str:
    """The PVC behind a pod volume: a persistentVolumeClaim's claimName, or for a generic ephemeral volume the claim
    Kubernetes names <pod>-<volume>; "" for volumes without a claim (emptyDir, hostPath, ...)."""
    claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
    if claim:
        return str(claim)
    if volume.get("ephemeral") is not None:
        return f"{(pod.get('metadata') or {}).get('name')}-{volume.get('name')}"
    return ""


def _pv_alternatives(obj: Mapping[str, Any]) -> list[Requirements]:
    """A PersistentVolume's node affinity terms, each an alternative (they are ORed). Local and hostPath volumes'
    hostname requirements are dropped (a rescheduled pod cannot keep its node); a term left empty by that is an
    unconstrained alternative."""
    spec = obj.get("spec") or {}
    terms = ((spec.get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms") or []
    node_bound = spec.get("local") is not None or spec.get("hostPath") is not None
    out = []
    for term in terms:
        exprs = list(term.get("matchExpressions") or [])
        if node_bound:
            kept = [e for e in exprs if e.get("key") != HOSTNAME]
            if exprs and not kept:
                out.append(Requirements())
                continue
            exprs = kept
        if exprs:
            out.append(Requirements.from_node_selector_requirements(exprs))
    return out


def _storage_class_alternatives(obj: Mapping[str, Any]) -> list[Requirements]:
    """A StorageClass's allowedTopologies, each an alternative."""
    out = []
    for topo in obj.get("allowedTopologies") or []:
        exprs = topo.get("matchLabelExpressions") or []
        if exprs:
            out.append(Requirements([Requirement(str(e["key"]), False, frozenset(str(v) for v in e.get("values") or []))
                                     for e in exprs]))
    return out


def _merge(alternatives: list[Requirements | None], volume: list[Requirements]) -> list[Requirements | None]:
    """Every compatible pairing of the alternatives so far with a volume's; when none is compatible, every pairing
    (the pod is then unschedulable, and says why)."""
    def pair(a: Requirements | None, b: Requirements) -> Requirements:
        return b.copy() if a is None else a.intersect(b)

    compatible: list[Requirements | None] = [
        pair(a, b) for a in alternatives for b in volume
        if a is None or all(not r.is_empty() for r in a.intersect(b))]
    return compatible or [pair(a, b) for a in alternatives for b in volume]


def volume_alternatives(pod: Mapping[str, Any], pvcs: Mapping[tuple[str, str], Mapping[str, Any]],
                        pvs: Mapping[str, Mapping[str, Any]],
                        storage_classes: Mapping[str, Mapping[str, Any]]) -> list[Requirements] | None:
    """The node requirements the pod's claims impose, as alternatives (any one will do), as Karpenter's
    VolumeTopology computes them; None when they impose none. A claim that is missing or being deleted, or a volume
    or StorageClass it names that does not exist, raises VolumeError naming it."""
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    alternatives: list[Requirements | None] = [None]
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        claim = claim_name(pod, vol)
        if not claim:
            continue
        pvc = pvcs.get((namespace, claim))
        if pvc is None:
            raise VolumeError(f"volume {vol.get('name')!r}: PersistentVolumeClaim {namespace}/{claim} not found")
        if (pvc.get("metadata") or {}).get("deletionTimestamp"):
            raise VolumeError(f"volume {vol.get('name')!r}: PersistentVolumeClaim {namespace}/{claim} is being "
                              "deleted")
        pvc_spec = pvc.get("spec") or {}
        if pvc_spec.get("volumeName"):
            kind, name, objects, read = "PersistentVolume", pvc_spec["volumeName"], pvs, _pv_alternatives
        elif pvc_spec.get("storageClassName"):
            kind, name, objects, read = ("StorageClass", pvc_spec["storageClassName"], storage_classes,
                                         _storage_class_alternatives)
        else:
            continue
        obj = objects.get(str(name))
        if obj is None:
            raise VolumeError(f"volume {vol.get('name')!r}: {kind} {name} of PersistentVolumeClaim "
                              f"{namespace}/{claim} not found")
        found = read(obj)
        if found:
            alternatives = _merge(alternatives, found)
    if alternatives == [None]:
        return None
    return [a if a is not None else Requirements() for a in alternatives]
