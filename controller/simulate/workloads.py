"""Sort a pile of Kubernetes documents by role and expand workloads into pods (the offline part of `karpy simulate`).

Accepts what `kubectl get ... -o yaml` prints and what teams keep in git: NodePools, EC2NodeClasses, Pods,
Deployments/ReplicaSets/StatefulSets/Jobs/CronJobs (expanded into the pods their controllers would create),
DaemonSets (per-node overhead) and existing Nodes with the pods bound to them. Turning the sorted objects into the
scheduler's inputs is controller.provisioning.inputs' job, shared with the controller.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from controller.api.documents import Document
from controller.api.shapes import MAX_PODS, pod_count
from controller.provisioning.inputs import InputError, VolumeTopology, template_pod

# kind -> where the pod template lives and how many pods the controller makes
WORKLOAD_KINDS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "Job", "CronJob", "ReplicationController"})
KARPENTER_V1_KINDS = frozenset({"NodePool", "NodeClaim", "EC2NodeClass"})
IGNORED_KINDS = frozenset({
    "Namespace", "Service", "ConfigMap", "Secret", "ServiceAccount", "Role", "RoleBinding", "ClusterRole",
    "ClusterRoleBinding", "PodDisruptionBudget", "HorizontalPodAutoscaler", "Ingress", "NetworkPolicy",
    "CustomResourceDefinition", "PriorityClass",
    "Event", "Endpoints", "EndpointSlice", "Lease", "ControllerRevision",
})


@dataclass
class SimulationInputs:
    """Documents sorted by role, workloads already expanded into pod manifests."""

    nodepools: list[Document] = field(default_factory=list)
    nodeclasses: list[Document] = field(default_factory=list)
    pending_pods: list[dict[str, Any]] = field(default_factory=list)
    pending_refs: list[str] = field(default_factory=list)  # the document each pending pod comes from
    bound_pods: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # node name -> pods on it
    daemonsets: list[Document] = field(default_factory=list)
    nodes: list[Document] = field(default_factory=list)
    volumes: VolumeTopology = field(default_factory=VolumeTopology)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)  # Namespace documents' labels, by name
    notes: list[str] = field(default_factory=list)


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _suffixes(seed: str, count: int) -> list[str]:
    """count distinct 5-character suffixes, stable for a seed. Five hex characters collide within a few thousand
    replicas (a birthday bound), and two pods of one name would count as one, so a taken suffix is drawn again."""
    out: list[str] = []
    taken: set[str] = set()
    for i in range(count):
        attempt = 0
        while True:
            suffix = _short_hash(f"{seed}{i}" + (f"/{attempt}" if attempt else ""))[:5]
            if suffix not in taken:
                break
            attempt += 1
        taken.add(suffix)
        out.append(suffix)
    return out


def _template_pod(doc: Document, template: Any, name: str, path: str) -> dict[str, Any]:
    """A Pod manifest from a workload's pod template, labelled and owned the way its controller would do it."""
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise InputError(f"{doc.ref}: {path}: a pod template with a spec is required")
    return template_pod(doc.raw, template, name, path)


def _int_field(doc: Document, spec: dict[str, Any], key: str, default: int, path: str) -> int:
    value = spec.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{doc.ref}: {path}.{key}: must be a non-negative integer, got {value!r}")
    return value


def expand_workload(doc: Document) -> list[dict[str, Any]]:
    """The pods a workload controller would create for this document right now."""
    spec = doc.raw.get("spec")
    if not isinstance(spec, dict):
        raise InputError(f"{doc.ref}: spec: required")
    kind = doc.kind
    if kind == "CronJob":
        job_spec = (spec.get("jobTemplate") or {}).get("spec")
        if not isinstance(job_spec, dict):
            raise InputError(f"{doc.ref}: spec.jobTemplate.spec: required")
        template, prefix = job_spec.get("template"), "spec.jobTemplate.spec"
        count = min(_int_field(doc, job_spec, "parallelism", 1, prefix),
                    _int_field(doc, job_spec, "completions", 1, prefix) or 1)
        base = f"{doc.name}-{_short_hash(doc.name)[:8]}"
        return [_template_pod(doc, template, f"{base}-{i}", f"{prefix}.template") for i in range(count)]
    template = spec.get("template")
    if kind == "Job":
        parallelism = _int_field(doc, spec, "parallelism", 1, "spec")
        completions = spec.get("completions")
        count = parallelism if completions is None else min(parallelism,
                                                            _int_field(doc, spec, "completions", 1, "spec"))
        return [_template_pod(doc, template, f"{doc.name}-{suffix}", "spec.template")
                for suffix in _suffixes(doc.name, count)]
    replicas = _int_field(doc, spec, "replicas", 1, "spec")
    if kind == "StatefulSet":
        pods = [_template_pod(doc, template, f"{doc.name}-{i}", "spec.template") for i in range(replicas)]
        for i, pod in enumerate(pods):
            for t in spec.get("volumeClaimTemplates") or []:
                name = (t.get("metadata") or {}).get("name")
                pod["spec"].setdefault("volumes", []).append(
                    {"name": name, "persistentVolumeClaim": {"claimName": statefulset_claim(name, doc.name, i)}})
        return pods
    rs_hash = _short_hash(repr(template))[:10]
    return [_template_pod(doc, template, f"{doc.name}-{rs_hash}-{suffix}", "spec.template")
            for suffix in _suffixes("", replicas)]


def statefulset_claim(template: str | None, statefulset: str, ordinal: int) -> str:
    """The PVC name the StatefulSet controller gives replica `ordinal` for a volumeClaimTemplate."""
    return f"{template}-{statefulset}-{ordinal}"


def _owned_by(pod: dict[str, Any], kind: str) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("kind") == kind for r in refs)


def classify(documents: list[Document]) -> SimulationInputs:
    """Sort documents into the simulator's roles; unknown kinds are reported as notes, never dropped silently."""
    out = SimulationInputs()
    # claims a StatefulSet will create; a PersistentVolumeClaim document of the same name wins
    templates: dict[tuple[str, str], dict[str, Any]] = {}
    pvcs: dict[tuple[str, str], dict[str, Any]] = {}
    pvs: dict[str, dict[str, Any]] = {}
    storage_classes: dict[str, dict[str, Any]] = {}
    pods = 0
    for doc in documents:  # counted before anything is expanded
        count = pod_count(doc)
        if pods + count > MAX_PODS:
            field_ = "" if doc.kind == "Pod" else " (spec.replicas, parallelism or completions)"
            raise InputError(f"{doc.ref}: {count} pod(s){field_} make more than {MAX_PODS} pods in this run, the "
                             "most karpy simulate expands; simulate a sample")
        pods += count
    for doc in documents:
        kind = doc.kind
        if kind == "NodePool":
            out.nodepools.append(doc)
        elif kind == "EC2NodeClass":
            out.nodeclasses.append(doc)
        elif kind == "Node":
            out.nodes.append(doc)
        elif kind == "Pod":
            pod = doc.raw
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                continue
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name:
                out.bound_pods.setdefault(str(node_name), []).append(pod)
            elif _owned_by(pod, "DaemonSet"):
                continue  # accounted for through its DaemonSet
            else:
                out.pending_pods.append(pod)
                out.pending_refs.append(doc.ref)
        elif kind in WORKLOAD_KINDS:
            expanded = expand_workload(doc)
            out.pending_pods.extend(expanded)
            out.pending_refs.extend([doc.ref] * len(expanded))
            if kind == "StatefulSet":
                spec = doc.raw.get("spec") or {}
                for i in range(int(spec.get("replicas", 1) or 0)):
                    for t in spec.get("volumeClaimTemplates") or []:
                        claim = statefulset_claim((t.get("metadata") or {}).get("name"), doc.name, i)
                        templates[(doc.namespace or "default", claim)] = t
        elif kind == "DaemonSet":
            spec = doc.raw.get("spec")
            if not isinstance(spec, dict):
                raise InputError(f"{doc.ref}: spec: required")
            _template_pod(doc, spec.get("template"), f"{doc.name}-ds", "spec.template")  # checked here, by file
            out.daemonsets.append(doc)
        elif kind == "PersistentVolumeClaim":
            pvcs[(doc.namespace or "default", doc.name)] = doc.raw
        elif kind == "PersistentVolume":
            pvs[doc.name] = doc.raw
        elif kind == "StorageClass":
            storage_classes[doc.name] = doc.raw
        elif kind == "NodeClaim":
            out.notes.append(f"{doc.ref}: NodeClaims are not simulated; their Nodes are")
        elif kind == "Namespace":
            labels = (doc.raw.get("metadata") or {}).get("labels") or {}
            out.namespaces[doc.name] = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
        elif kind in IGNORED_KINDS:
            continue
        else:
            out.notes.append(f"{doc.ref}: kind {kind} is not used by the simulation")
    for key, template in templates.items():
        pvcs.setdefault(key, template)
    out.volumes = VolumeTopology(pvcs, pvs, storage_classes)
    return out
