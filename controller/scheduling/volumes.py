"""Zonal volume topology: the node requirements a pod inherits from its persistent volumes.

A PVC bound to a PersistentVolume pins the pod to the PV's spec.nodeAffinity (an EBS volume lives in one zone). An
unbound PVC whose StorageClass has allowedTopologies restricts the pod to those zones (WaitForFirstConsumer binds it
where the pod lands). Missing claims make the pod unschedulable, as the scheduler would keep it pending.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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


def volume_requirements(pod: Mapping[str, Any], pvcs: Mapping[tuple[str, str], Mapping[str, Any]],
                        pvs: Mapping[str, Mapping[str, Any]],
                        storage_classes: Mapping[str, Mapping[str, Any]]) -> Requirements | None:
    """The requirements the pod's PVC-backed volumes impose (None when they impose none)."""
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    out = Requirements()
    found = False
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
        if not claim:
            continue
        pvc = pvcs.get((namespace, claim))
        if pvc is None:
            raise VolumeError(f"volume {vol.get('name')!r}: PersistentVolumeClaim {namespace}/{claim} not found")
        pvc_spec = pvc.get("spec") or {}
        pv = pvs.get(pvc_spec.get("volumeName") or "")
        if pv is not None:
            terms = (((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}).get(
                "nodeSelectorTerms") or []
            if terms:
                # a PV's terms are ORed; EBS PVs carry one term, which is what karpy supports exactly
                out = out.intersect(Requirements.from_node_selector_requirements(terms[0].get("matchExpressions")
                                                                                 or []))
                found = True
            continue
        sc = storage_classes.get(pvc_spec.get("storageClassName") or "")
        for topo in (sc or {}).get("allowedTopologies") or []:
            for expr in topo.get("matchLabelExpressions") or []:
                out.add(Requirement(str(expr["key"]), False, frozenset(str(v) for v in expr.get("values") or [])))
                found = True
    return out if found else None
