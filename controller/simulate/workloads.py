"""Sort a pile of Kubernetes documents by role and expand workloads into pods (the offline part of `karpy simulate`).

Accepts what `kubectl get ... -o yaml` prints and what teams keep in git: NodePools, EC2NodeClasses, Pods,
Deployments/ReplicaSets/StatefulSets/Jobs/CronJobs (expanded into the pods their controllers would create),
DaemonSets (per-node overhead) and existing Nodes with the pods bound to them. `document_inputs` hands the sorted
objects, with the typed NodePools and EC2NodeClasses, to controller.provisioning.inputs.scheduler_inputs, the
translation the controller uses; `karpy disruption` reads its documents through the same functions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.api import labels as L
from controller.api.documents import Document
from controller.api.models import EC2NodeClass, NodePool
from controller.api.pods import owned_by_daemonset
from controller.api.shapes import MAX_PODS, pod_count
from controller.catalog.snapshot import Catalog
from controller.catalog.types import InstanceType
from controller.provisioning import inputs
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
            elif owned_by_daemonset(pod):
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


# ---- documents -> the scheduler's inputs (for `karpy simulate` and `karpy disruption`) -------------------------------

def nodeclass_instance_types(catalog: Catalog, nodeclass: EC2NodeClass | None) -> list[InstanceType]:
    """The catalog's instance types as a NodeClass with this AMI family and kubelet configuration sees them (all of
    them, with default kubelet settings, when no EC2NodeClass was given)."""
    if nodeclass is None:
        return catalog.instance_types
    family = nodeclass.ami_family
    return catalog.instance_types_for(ami_family=family if family != "custom" else "al2023",
                                      kubelet=nodeclass.kubelet or None)


def pool_not_ready(pool: NodePool, nodeclasses: Mapping[str, EC2NodeClass] | None) -> str:
    """Why a NodePool from documents cannot launch ("" when it can): its own Ready condition when its status has one;
    its EC2NodeClass missing (when EC2NodeClasses were given at all) or, when the class carries status, not Ready. A
    manifest from git has no status and is taken as ready."""
    not_ready = inputs.nodepool_not_ready(pool.manifest)
    if nodeclasses is None:
        return not_ready
    ref = pool.node_class_ref.name
    nodeclass = nodeclasses.get(ref)
    if nodeclass is None:
        return f'EC2NodeClass "{ref}" not found, so the NodePool is not ready'
    if nodeclass.conditions:
        return not_ready or inputs.nodeclass_not_ready(nodeclass.manifest, ref)
    return not_ready


def _price(by_name: dict[str, InstanceType], labels: dict[str, str]) -> float:
    """What an existing node costs per hour, from its instance type, capacity type and zone labels."""
    it = by_name.get(labels.get(L.INSTANCE_TYPE, ""))
    if it is None:
        return 0.0
    ct = labels.get(L.CAPACITY_TYPE, L.CAPACITY_TYPE_ON_DEMAND)
    zone = labels.get(L.ZONE)
    prices = [o.price for o in it.offerings if o.capacity_type == ct and (zone is None or o.zone == zone)]
    return min(prices) if prices else 0.0


def document_inputs(sim: SimulationInputs, catalog: Catalog, nodepools: list[tuple[NodePool, str]],
                    nodeclasses: Mapping[str, EC2NodeClass] | None) -> inputs.SchedulerInputs:
    """The scheduler's inputs from sorted documents: Nodes with their bound pods (priced from the catalog), the
    pending pods, the NodePools (`(pool, file)`) with their NodeClass's instance types, readiness and what their
    nodes hold, and each DaemonSet's overhead (a live pod of it among the documents, else its template)."""
    issues: list[inputs.InputIssue] = []
    nodes = []
    for doc in sim.nodes:
        try:
            inputs.nodepool_usage([doc.raw])  # a bad capacity is reported with its file
        except InputError as e:
            issues.append(inputs.InputIssue("Node", doc.name, doc.source, str(e)))
            continue
        nodes.append(inputs.NodeSource(node=doc.raw, pods=sim.bound_pods.get(doc.name, []), where=doc.source))
    usage = inputs.nodepool_usage([s.node for s in nodes if s.node is not None])

    def pools() -> list[inputs.PoolSource]:
        return [inputs.PoolSource(pool.manifest, nodeclass_instance_types(catalog, (nodeclasses or {}).get(
            pool.node_class_ref.name)), usage.get(pool.name, {}), pool_not_ready(pool, nodeclasses), where)
            for pool, where in nodepools]

    bound = [p for pods in sim.bound_pods.values() for p in pods]
    built = inputs.scheduler_inputs(
        nodes=nodes, pods=zip(sim.pending_pods, sim.pending_refs, strict=True), pools=pools,
        daemonsets=[(d.raw, d.source) for d in sim.daemonsets], live_daemonset_pod=inputs.live_daemonset_pods(bound),
        volumes=sim.volumes, namespace_labels=sim.namespaces,
        convert_bound=lambda raw: inputs.scheduling_pod(raw, None, sim.namespaces))
    built.issues[:0] = issues
    by_name = {it.name: it for it in catalog.instance_types}
    for node in built.existing:
        node.price = _price(by_name, node.labels)
    return built
