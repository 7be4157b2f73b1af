"""The scheduler's inputs built from Kubernetes objects, shared by the provisioner and `karpy simulate`.

Both the controller (objects from informers) and the offline dry run (objects from files) turn NodePools, Pods,
DaemonSets, Nodes and in-flight NodeClaims into the scheduler's types through these functions, so the dry run and the
controller decide the same way. Every function takes the plain JSON dict of the object and raises InputError naming
the object and the field at fault; nothing here mutates its input.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.api import labels as L
from controller.api.pods import owned_by_daemonset
from controller.api.quantity import QuantityError, to_canonical
from controller.api.taints import is_known_ephemeral
from controller.catalog.types import InstanceType
from controller.scheduling.pod import Pod, PodError, pod_from_dict
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.types import ExistingNode, SchedNodePool, Taint
from controller.scheduling.volumes import VolumeError, volume_alternatives
from controller.scheduling.volumes import VolumeTopology as VolumeTopology  # re-exported
from controller.state import usage

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class InputError(ValueError):
    """An object the scheduler cannot use; the message names the object (Kind/namespace/name) and the field."""


def _map(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: must be an object, got {type(value).__name__}")
    return value


def _ref(kind: str, obj: Any, namespaced: bool = False) -> str:
    """Kind/namespace/name (Kind/name for cluster-scoped objects), for messages."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    ns, name = meta.get("namespace") or ("default" if namespaced else None), meta.get("name")
    return f"{kind}/{ns}/{name}" if ns else f"{kind}/{name}"


def _labels(meta: dict[str, Any], where: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in _map(meta.get("labels"), f"{where}: metadata.labels").items()}


def _resources(raw: Any, where: str) -> dict[str, int]:
    if raw is not None and not isinstance(raw, dict):
        raise InputError(f"{where}: must be a map of resource quantities")
    out = {}
    for name, value in (raw or {}).items():
        try:
            out[str(name)] = to_canonical(str(name), value)
        except (QuantityError, TypeError, ValueError) as e:
            raise InputError(f"{where}.{name}: {e}") from None
    return out


def _requirements(raw: Any, where: str) -> Requirements:
    """A NodePool's or NodeClaim's node selector requirements (with minValues) as the scheduler's Requirements."""
    raw = raw or []
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        raise InputError(f"{where}: must be a list of requirements")
    try:
        return Requirements.from_node_selector_requirements(raw)
    except (KeyError, ValueError, TypeError) as e:
        raise InputError(f"{where}: {e}") from None


def taints(items: list[dict[str, Any]] | None) -> list[Taint]:
    """Taints as the scheduler sees them from a `taints`/`startupTaints` list (effect defaults to NoSchedule)."""
    if items is None:
        return []
    if not isinstance(items, list):
        raise InputError(f"taints: must be a list, got {type(items).__name__}")
    out = []
    for i, t in enumerate(items):
        if not isinstance(t, dict) or not t.get("key"):
            raise InputError(f"taints[{i}].key: required")
        effect = str(t.get("effect") or "NoSchedule")
        if effect not in TAINT_EFFECTS:
            raise InputError(f"taints[{i}].effect: {effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
        out.append(Taint(str(t["key"]), str(t.get("value") or ""), effect))
    return out


def _taints(items: Any, where: str) -> list[Taint]:
    try:
        return taints(items)
    except InputError as e:
        raise InputError(f"{where}.{e}") from None


def _condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    status = obj.get("status")
    for c in (status.get("conditions") or [] if isinstance(status, Mapping) else []):
        if isinstance(c, Mapping) and c.get("type") == type_:
            return c
    return None


def nodeclass_not_ready(nodeclass: dict[str, Any] | None, ref_name: str) -> str:
    """Why an EC2NodeClass cannot be launched from ("" when Ready)."""
    if nodeclass is None:
        return f'EC2NodeClass "{ref_name}" not found'
    if (nodeclass.get("metadata") or {}).get("deletionTimestamp"):
        return f'EC2NodeClass "{ref_name}" is being deleted'
    cond = _condition(nodeclass, "Ready")
    if cond is None or cond.get("status") != "True":
        why = (cond or {}).get("message") or "status not resolved yet"
        return f'EC2NodeClass "{ref_name}" is not ready: {str(why)[:200]}'
    return ""


def nodepool_not_ready(nodepool: dict[str, Any]) -> str:
    """Why a NodePool is not Ready by its own status ("" when Ready, or before its status has a Ready condition, when
    its node class decides): Karpenter schedules only onto Ready NodePools."""
    cond = _condition(nodepool, "Ready")
    if cond is None or cond.get("status") == "True":
        return ""
    why = cond.get("message") or cond.get("reason") or "not ready"
    return f'NodePool "{(nodepool.get("metadata") or {}).get("name")}" is not ready: {str(why)[:200]}'


def node_pool(manifest: dict[str, Any], instance_types: list[InstanceType], used: dict[str, int],
              not_ready_reason: str = "") -> SchedNodePool:
    """A NodePool as the scheduler sees it: template requirements and labels (the pool's own name pinned), taints,
    weight, limits with `used` (what its nodes already hold, subtracted by the scheduler), and the instance types its
    NodeClass offers.

    `not_ready_reason` (e.g. the NodeClass is missing or not Ready) keeps the pool out of new NodeClaims and is the
    reason reported for pods only it could take. Defaults may be applied to the manifest or not."""
    meta = _map(manifest.get("metadata"), "NodePool: metadata")
    name = meta.get("name")
    if not name:
        raise InputError("NodePool: metadata.name: required")
    where = f"NodePool/{name}"
    spec = _map(manifest.get("spec"), f"{where}: spec")
    template = _map(spec.get("template"), f"{where}: spec.template")
    tspec = _map(template.get("spec"), f"{where}: spec.template.spec")
    labels = _labels(_map(template.get("metadata"), f"{where}: spec.template.metadata"), f"{where}: spec.template")
    reqs = _requirements(tspec.get("requirements"), f"{where}: spec.template.spec.requirements")
    reqs = reqs.intersect(Requirements.from_labels(labels))
    reqs.add(Requirement(L.NODEPOOL, False, frozenset([str(name)])))
    limits = _resources(spec.get("limits"), f"{where}: spec.limits") if spec.get("limits") else None
    weight = spec.get("weight") or 0
    if isinstance(weight, bool) or not isinstance(weight, int):
        raise InputError(f"{where}: spec.weight: must be an integer, got {weight!r}")
    return SchedNodePool(name=str(name), weight=weight, requirements=reqs,
                         taints=_taints(tspec.get("taints"), f"{where}: spec.template.spec"),
                         startup_taints=_taints(tspec.get("startupTaints"), f"{where}: spec.template.spec"),
                         labels=labels, limits=limits, used=dict(used), instance_types=instance_types,
                         not_ready_reason=not_ready_reason)


def scheduling_pod(raw: dict[str, Any], volumes: VolumeTopology | None = None,
                   namespace_labels: Mapping[str, Mapping[str, str]] | None = None) -> Pod:
    """A Pod manifest as the scheduler's Pod; with `volumes`, the zone requirements of its PersistentVolumeClaims are
    its volume terms (a bound EBS volume pins the pod to the volume's zone); `namespace_labels` resolves its affinity
    terms' namespaceSelectors."""
    try:
        pod = pod_from_dict(raw, namespace_labels)
    except (PodError, QuantityError, ValueError, TypeError, AttributeError, KeyError) as e:
        raise InputError(f"{_ref('Pod', raw, namespaced=True)}: {e}") from None
    if volumes is None:
        return pod
    try:
        alternatives = volume_alternatives(raw, volumes.pvcs, volumes.pvs, volumes.storage_classes)
    except VolumeError as e:
        raise InputError(f"Pod/{pod.namespace}/{pod.name}: {e}") from None
    except (ValueError, TypeError, AttributeError, KeyError) as e:
        raise InputError(f"Pod/{pod.namespace}/{pod.name}: volumes: {e}") from None
    if alternatives is not None:
        # where the node may be, kept apart from the pod's node affinity as Karpenter keeps volume requirements out
        # of topology spread counting
        pod.volume_terms = tuple(alternatives)
        pod.class_key = None
        pod.__post_init__()
    return pod


def pod_key(raw: Mapping[str, Any]) -> str:
    """namespace/name of a Pod manifest (namespace "default" when it has none)."""
    meta = raw.get("metadata") if isinstance(raw.get("metadata"), Mapping) else {}
    return f"{(meta or {}).get('namespace') or 'default'}/{(meta or {}).get('name')}"


DRA_UNSUPPORTED = "pod has Dynamic Resource Allocation requirements that are not yet supported by Karpenter"


def has_dra_requirements(raw: Mapping[str, Any]) -> bool:
    """Karpenter's HasDRARequirements: the pod, or one of its containers or init containers, claims resources."""
    spec = raw.get("spec")
    if not isinstance(spec, dict):
        return False
    if spec.get("resourceClaims"):
        return True
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if isinstance(c, dict) and ((c.get("resources") or {}).get("claims")):
            return True
    return False


KARPENTER_EXCLUDED = (f"configured to not run on a Karpenter provisioned node "
                      f"(requirement {L.NODEPOOL} DoesNotExist)")


def excludes_karpenter(raw: Mapping[str, Any]) -> bool:
    """Whether the pod asks not to run on a Karpenter node (karpenter.sh/nodepool DoesNotExist in its first required
    node selector term or its heaviest preference, the requirements Karpenter reads first): Karpenter ignores such
    pods without an event."""
    spec = raw.get("spec")
    if not isinstance(spec, dict):
        return False
    node_aff = (spec.get("affinity") or {}).get("nodeAffinity") if isinstance(spec.get("affinity"), dict) else None
    if not isinstance(node_aff, dict):
        return False
    terms = (node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    exprs = list((terms[0] or {}).get("matchExpressions") or []) if terms and isinstance(terms[0], dict) else []
    preferred = [p for p in node_aff.get("preferredDuringSchedulingIgnoredDuringExecution") or []
                 if isinstance(p, dict)]
    if preferred:
        heaviest = max(preferred, key=lambda p: int(p["weight"]) if isinstance(p.get("weight"), int) else 0)
        exprs += (heaviest.get("preference") or {}).get("matchExpressions") or []
    return any(isinstance(e, dict) and e.get("key") == L.NODEPOOL and e.get("operator") == "DoesNotExist"
               for e in exprs)


def template_pod(owner: dict[str, Any], template: Any, name: str, path: str = "spec.template") -> dict[str, Any]:
    """The Pod manifest a controller would create from `owner`'s pod template: named, namespaced, owned by it."""
    meta = owner.get("metadata") or {}
    kind = str(owner.get("kind") or "")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise InputError(f"{_ref(kind, owner, namespaced=True)}: {path}: a pod template with a spec is required")
    pod_meta = copy.deepcopy(_map(template.get("metadata"), f"{_ref(kind, owner, namespaced=True)}: {path}.metadata"))
    pod_meta["name"] = name
    pod_meta["namespace"] = meta.get("namespace") or pod_meta.get("namespace") or "default"
    pod_meta.setdefault("labels", {})
    pod_meta["ownerReferences"] = [{
        "apiVersion": owner.get("apiVersion"), "kind": kind, "name": meta.get("name"),
        "uid": meta.get("uid") or f"{kind}/{meta.get('namespace') or 'default'}/{meta.get('name')}",
        "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": copy.deepcopy(template["spec"])}


def newest_daemonset_pod(pods: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Of a DaemonSet's pods, the newest that is not terminal (the one whose requests size the overhead)."""
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    newest = max(live, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""), default=None)
    return dict(newest) if newest is not None else None


def live_daemonset_pods(pods: Iterable[Mapping[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    """For objects read from documents or a snapshot: a lookup of each DaemonSet's newest live pod among `pods`
    (those it controls, by the DaemonSet's uid)."""
    by_owner: dict[str, list[Mapping[str, Any]]] = {}
    for raw in pods:
        if not owned_by_daemonset(raw):
            continue
        for ref in (raw.get("metadata") or {}).get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("kind") == "DaemonSet" and ref.get("controller") and ref.get("uid"):
                by_owner.setdefault(str(ref["uid"]), []).append(raw)
    return lambda ds: newest_daemonset_pod(by_owner.get(str((ds.get("metadata") or {}).get("uid") or ""), []))


def _daemonset_pods(daemonsets: Iterable[tuple[dict[str, Any], str]],
                    live: Callable[[dict[str, Any]], dict[str, Any] | None],
                    ignore_dra_requests: bool) -> tuple[list[Pod], list[InputIssue]]:
    """Every DaemonSet's per-node pod (its newest live pod from `live`, else its template); DaemonSets that claim
    devices are left out while DRA requests are ignored, as Karpenter leaves them out."""
    pods: list[Pod] = []
    issues: list[InputIssue] = []
    for ds, where in daemonsets:
        pod = live(ds)
        template = (ds.get("spec") or {}).get("template") if isinstance(ds.get("spec"), dict) else None
        if ignore_dra_requests and has_dra_requirements(pod or (template if isinstance(template, dict) else {})):
            continue
        try:
            pods.append(daemonset_pod(ds, pod))
        except InputError as e:
            issues.append(InputIssue("DaemonSet", pod_key(ds), where, str(e)))
    return pods, issues


def daemonset_pod(daemonset: dict[str, Any], live: dict[str, Any] | None = None) -> Pod:
    """The pod a DaemonSet runs on each node (for per-node overhead): its newest live pod when there is one, as
    Karpenter takes it (LimitRanges and admission webhooks change requests), with the template's required node
    affinity in place of the one the DaemonSet controller pinned to that pod's node; else its pod template."""
    ref = _ref("DaemonSet", daemonset, namespaced=True)
    spec = daemonset.get("spec")
    if not isinstance(spec, dict):
        raise InputError(f"{ref}: spec: required")
    name = (daemonset.get("metadata") or {}).get("name")
    template = spec.get("template")
    if live is not None and isinstance(live.get("spec"), dict):
        manifest = copy.deepcopy(live)
        manifest["spec"].pop("nodeName", None)
        required = ((((template or {}).get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution") if isinstance(template, dict) else None
        node_affinity = ((manifest["spec"].get("affinity") or {}).get("nodeAffinity") or {})
        node_affinity.pop("requiredDuringSchedulingIgnoredDuringExecution", None)
        if required is not None:
            node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = copy.deepcopy(required)
        if node_affinity:
            manifest["spec"].setdefault("affinity", {})["nodeAffinity"] = node_affinity
        elif manifest["spec"].get("affinity"):
            manifest["spec"]["affinity"].pop("nodeAffinity", None)
        where = f"{ref}: pod {_ref('Pod', live, namespaced=True)}"
    else:
        manifest = template_pod(daemonset, template, f"{name}-ds")
        where = f"{ref}: spec.template"
    try:
        return pod_from_dict(manifest)
    except (PodError, QuantityError, ValueError, TypeError, AttributeError, KeyError) as e:
        raise InputError(f"{where}: {e}") from None


def _ephemeral(taint: Taint, startup: list[Taint]) -> bool:
    """Karpenter's match for taints it ignores on uninitialized nodes: a known ephemeral taint or a startup taint."""
    return is_known_ephemeral(taint) or any(t.matches(taint) for t in startup)


def existing_node(node: dict[str, Any], pods: list[Pod], price: float = 0.0, *,
                  nodeclaim: dict[str, Any] | None = None) -> ExistingNode:
    """A Node as a place pods can go: its labels (hostname defaulting to the node name), its taints (cordoned nodes
    carry node.kubernetes.io/unschedulable), status.allocatable, and the pods already bound to it.

    With the node's `nodeclaim` (a Karpenter-managed node) and the node not yet initialized, Karpenter's known
    ephemeral taints and the NodeClaim's startupTaints are ignored (they are expected to go away), and allocatable
    the kubelet has not reported yet is taken from the NodeClaim."""
    meta = _map(node.get("metadata"), "Node: metadata")
    name = meta.get("name")
    if not name:
        raise InputError("Node: metadata.name: required")
    where = f"Node/{name}"
    labels = _labels(meta, where)
    labels.setdefault(L.HOSTNAME, str(name))
    spec = _map(node.get("spec"), f"{where}: spec")
    status = _map(node.get("status"), f"{where}: status")
    allocatable = _resources(status.get("allocatable"), f"{where}: status.allocatable")
    node_taints = _taints(spec.get("taints"), f"{where}: spec")
    if spec.get("unschedulable"):
        node_taints.append(UNSCHEDULABLE_TAINT)
    if nodeclaim is not None and labels.get(L.INITIALIZED) != "true":
        ncref = _ref("NodeClaim", nodeclaim)
        ncspec = _map(nodeclaim.get("spec"), f"{ncref}: spec")
        startup = _taints(ncspec.get("startupTaints"), f"{ncref}: spec")
        node_taints = [t for t in node_taints if not _ephemeral(t, startup)]
        claimed = _resources(_map(nodeclaim.get("status"), f"{ncref}: status").get("allocatable"),
                             f"{ncref}: status.allocatable")
        for k, v in claimed.items():
            if not allocatable.get(k):
                allocatable[k] = v
    return ExistingNode(name=str(name), labels=labels, taints=node_taints, allocatable=allocatable, pods=list(pods),
                        node_pool=labels.get(L.NODEPOOL), price=price)


def in_flight_node(nodeclaim: dict[str, Any], allocatable: dict[str, int], pods: list[Pod]) -> ExistingNode:
    """A NodeClaim whose Node has not registered yet, as capacity pods can be nominated to (Karpenter counts it
    before it exists): labels from its metadata and its single-valued In requirements, its taints (startupTaints
    and ephemeral taints are not expected to stay), and the allocatable the caller expects (status.allocatable, else
    the cheapest instance-type option's)."""
    meta = _map(nodeclaim.get("metadata"), "NodeClaim: metadata")
    name = meta.get("name")
    if not name:
        raise InputError("NodeClaim: metadata.name: required")
    where = f"NodeClaim/{name}"
    spec = _map(nodeclaim.get("spec"), f"{where}: spec")
    labels = _labels(meta, where)
    reqs = _requirements(spec.get("requirements"), f"{where}: spec.requirements")
    for k, v in reqs.labels().items():
        labels.setdefault(k, v)
    labels.setdefault(L.HOSTNAME, str(name))
    claim_taints = [t for t in _taints(spec.get("taints"), f"{where}: spec") if not _ephemeral(t, [])]
    return ExistingNode(name=str(name), labels=labels, taints=claim_taints, allocatable=dict(allocatable),
                        pods=list(pods), node_pool=labels.get(L.NODEPOOL), in_flight=True)


def nodepool_usage(nodes: Iterable[Mapping[str, Any]], nodeclaims: Iterable[Mapping[str, Any]] = ()
                   ) -> dict[str, dict[str, int]]:
    """Per NodePool, the capacity its nodes (and launched NodeClaims) hold and how many there are ("nodes"): what
    counts against the pool's limits, by Karpenter's rule (controller.state.usage); a capacity that cannot be read is
    an InputError naming the object."""
    try:
        return usage.nodepool_usage(nodeclaims, nodes, strict=True)
    except usage.UsageError as e:
        raise InputError(str(e)) from None


# ---- the one translation: the objects every face reads -> the scheduler's inputs ----------------------------------

@dataclass
class PoolSource:
    """A NodePool with what its face knows of it: the instance types its NodeClass offers, what its nodes already
    hold (for limits) and why it cannot launch ("" when it can)."""

    manifest: dict[str, Any]
    instance_types: list[InstanceType]
    used: dict[str, int] = field(default_factory=dict)
    not_ready: str = ""
    where: str = ""


@dataclass
class NodeSource:
    """A place pods can go: a registered Node (with its NodeClaim when Karpenter manages it) and the pods bound to
    it, or, without a Node, a NodeClaim in flight with the allocatable expected of it. `uninitialized` names
    capacity not initialized yet (a decision relying on it waits); `where` prefixes messages about it."""

    node: dict[str, Any] | None
    nodeclaim: dict[str, Any] | None = None
    pods: list[dict[str, Any]] = field(default_factory=list)
    allocatable: dict[str, int] = field(default_factory=dict)
    uninitialized: str = ""
    where: str = ""


@dataclass(frozen=True)
class InputIssue:
    """An object the scheduler cannot use: its kind, namespace/name key, where it was read from, and why."""

    kind: str
    key: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


@dataclass
class SchedulerInputs:
    """What one scheduling simulation reads, and what was left out of it and why."""

    pools: list[SchedNodePool] = field(default_factory=list)
    existing: list[ExistingNode] = field(default_factory=list)
    daemonsets: list[Pod] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)  # to place, in the order given
    converted: dict[str, Pod] = field(default_factory=dict)  # every pod read (bound and to place), by key
    refused: dict[str, str] = field(default_factory=dict)  # pod key -> why Karpenter refuses it before scheduling
    excluded: list[tuple[dict[str, Any], str]] = field(default_factory=list)  # pods asking for other capacity
    uninitialized: dict[str, str] = field(default_factory=dict)  # existing name -> what is not initialized yet
    issues: list[InputIssue] = field(default_factory=list)

    def pod_issues(self) -> dict[str, str]:
        """Why each pod that could not be read was left out, by namespace/name."""
        return {i.key: i.message for i in self.issues if i.kind == "Pod"}


PodConverter = Callable[[dict[str, Any]], Pod]


def scheduler_inputs(*, nodes: Iterable[NodeSource], pods: Iterable[tuple[dict[str, Any], str]],
                     pools: Callable[[], Iterable[PoolSource]],
                     daemonsets: Iterable[tuple[dict[str, Any], str]] = (),
                     live_daemonset_pod: Callable[[dict[str, Any]], dict[str, Any] | None] = lambda ds: None,
                     volumes: VolumeTopology | None = None,
                     namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
                     ignore_dra_requests: bool = True, screen: bool = True,
                     convert_bound: PodConverter | None = None,
                     known: Mapping[str, Pod] | None = None) -> SchedulerInputs:
    """The scheduler's inputs from the objects a face read, the same way for the provisioner's cluster state,
    `karpy simulate`'s documents and the disruption snapshot. Nothing is raised: what cannot be read is left out and
    named in `issues`, in the order read (nodes with their pods, pods to place, pools, DaemonSets).

    `pods` (and `daemonsets`) come with where each was read from; with `screen`, those that ask not to run on
    Karpenter's nodes are set aside and those with DRA requests refused (while `ignore_dra_requests`), as the
    provisioner does before scheduling. `pools` is called once, after the pods, and only when some pod is to be
    placed or `screen` is off: a face's instance types may cost a cloud call. Pods in `known` (by namespace/name)
    were converted already by the face; other bound pods are converted by `convert_bound` (a face's cache) or as pods
    to place are."""
    out = SchedulerInputs()

    def convert(raw: dict[str, Any], where: str, bound: bool) -> Pod | None:
        key = pod_key(raw)
        pod = known.get(key) if known is not None else None
        if pod is not None:
            out.converted[key] = pod
            return pod
        try:
            pod = (convert_bound(raw) if bound and convert_bound is not None
                   else scheduling_pod(raw, volumes, namespace_labels))  # bound pods may move (disruption)
        except InputError as e:
            out.issues.append(InputIssue("Pod", key, where, str(e)))
            return None
        out.converted[key] = pod
        return pod

    for src in nodes:
        bound = [p for p in (convert(raw, src.where, True) for raw in src.pods
                             if (raw.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
                 if p is not None]
        try:
            if src.node is not None:
                node = existing_node(src.node, bound, nodeclaim=src.nodeclaim)
            elif src.nodeclaim is not None:
                node = in_flight_node(src.nodeclaim, src.allocatable, bound)
            else:
                continue
        except InputError as e:
            kind = "Node" if src.node is not None else "NodeClaim"
            obj = src.node if src.node is not None else src.nodeclaim
            out.issues.append(InputIssue(kind, str(((obj or {}).get("metadata") or {}).get("name")), src.where,
                                         str(e)))
            continue
        out.existing.append(node)
        if src.uninitialized:
            out.uninitialized[node.name] = src.uninitialized
    for raw, where in pods:
        if screen and excludes_karpenter(raw):
            out.excluded.append((raw, where))
        elif screen and ignore_dra_requests and has_dra_requirements(raw):
            out.refused[pod_key(raw)] = DRA_UNSUPPORTED
        else:
            pod = convert(raw, where, False)
            if pod is not None:
                out.pods.append(pod)
    if out.pods or not screen:
        for p in pools():
            try:
                out.pools.append(node_pool(p.manifest, p.instance_types, p.used, p.not_ready))
            except InputError as e:
                name = str((p.manifest.get("metadata") or {}).get("name"))
                out.issues.append(InputIssue("NodePool", name, p.where, str(e)))
        out.daemonsets, unreadable = _daemonset_pods(daemonsets, live_daemonset_pod, ignore_dra_requests)
        out.issues += unreadable
    return out
