"""`karpy simulate`: validate the documents, build the scheduler's inputs from them and a catalog, and solve."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller.api import labels as L
from controller.api import parse_ec2nodeclass, parse_nodepool, validate_document
from controller.api.documents import Document
from controller.api.models import ami_family
from controller.api.quantity import QuantityError, resources_from_dict
from controller.catalog.snapshot import Catalog, load_catalog
from controller.catalog.types import InstanceType
from controller.scheduling.pod import Pod, PodError, pod_from_dict
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.simulator import Plan, Scheduler
from controller.scheduling.types import ExistingNode, SchedNodePool, Taint
from controller.scheduling.volumes import VolumeError, volume_requirements
from controller.simulate.inputs import InputError, SimulationInputs, classify


class SimulationError(ValueError):
    """Input the simulation cannot run on; the message names every document and field at fault."""


@dataclass
class SimulationResult:
    """A plan with what it was computed from."""

    plan: Plan
    catalog: Catalog
    nodepools: list[str]
    pods: list[Pod]
    existing_nodes: list[ExistingNode]
    notes: list[str] = field(default_factory=list)


def _taints(items: list[dict[str, Any]] | None) -> list[Taint]:
    return [Taint(str(t["key"]), str(t.get("value") or ""), str(t.get("effect") or "NoSchedule")) for t in items or []]


def _instance_types(catalog: Catalog, nodeclass: dict[str, Any] | None) -> list[InstanceType]:
    if nodeclass is None:
        return catalog.instance_types
    family = ami_family(nodeclass)
    return catalog.instance_types_for(ami_family=family if family != "custom" else "al2023",
                                      kubelet=nodeclass.get("kubelet") or None)


def _node_pool(manifest: dict[str, Any], catalog: Catalog, nodeclasses: dict[str, dict[str, Any]] | None,
               used: dict[str, int]) -> SchedNodePool:
    name = manifest["metadata"]["name"]
    spec = manifest["spec"]
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    labels = {str(k): str(v) for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()}
    reqs = Requirements.from_node_selector_requirements(tspec.get("requirements") or [])
    reqs = reqs.intersect(Requirements.from_labels(labels))
    reqs.add(Requirement(L.NODEPOOL, False, frozenset([name])))
    ref = tspec.get("nodeClassRef") or {}
    nodeclass = None
    not_ready = ""
    if nodeclasses is not None:
        nodeclass = nodeclasses.get(str(ref.get("name")))
        if nodeclass is None:
            not_ready = f'EC2NodeClass "{ref.get("name")}" not found, so the NodePool is not ready'
    limits = resources_from_dict(spec.get("limits")) if spec.get("limits") else None
    return SchedNodePool(name=name, weight=int(spec.get("weight") or 0), requirements=reqs,
                         taints=_taints(tspec.get("taints")), startup_taints=_taints(tspec.get("startupTaints")),
                         labels=labels, limits=limits, used=used,
                         instance_types=_instance_types(catalog, nodeclass), not_ready_reason=not_ready)


def _price(catalog: Catalog, labels: dict[str, str]) -> float:
    by_name = {it.name: it for it in catalog.instance_types}
    it = by_name.get(labels.get(L.INSTANCE_TYPE, ""))
    if it is None:
        return 0.0
    ct = labels.get(L.CAPACITY_TYPE, L.CAPACITY_TYPE_ON_DEMAND)
    zone = labels.get(L.ZONE)
    prices = [o.price for o in it.offerings if o.capacity_type == ct and (zone is None or o.zone == zone)]
    return min(prices) if prices else 0.0


def _pod(raw: dict[str, Any], where: str) -> Pod:
    try:
        return pod_from_dict(raw)
    except (PodError, QuantityError, ValueError, TypeError, AttributeError) as e:
        meta = raw.get("metadata") or {}
        raise SimulationError(f"{where}: Pod/{meta.get('namespace', 'default')}/{meta.get('name')}: {e}") from None


def _with_volumes(raw: dict[str, Any], inputs: SimulationInputs) -> Pod:
    """The pod with the zone requirements of its persistent volumes folded into its node affinity."""
    pod = _pod(raw, "input")
    try:
        reqs = volume_requirements(raw, inputs.pvcs, inputs.pvs, inputs.storage_classes)
    except VolumeError as e:
        raise SimulationError(f"Pod/{pod.namespace}/{pod.name}: {e}") from None
    if reqs is not None:
        pod.node_terms = tuple(t.intersect(reqs) for t in pod.node_terms) or (reqs,)
        pod.class_key = None
        pod.__post_init__()
    return pod


def _existing_nodes(inputs: SimulationInputs, catalog: Catalog) -> tuple[list[ExistingNode], dict[str, dict[str, int]]]:
    nodes = []
    used_by_pool: dict[str, dict[str, int]] = {}
    for doc in inputs.nodes:
        raw = doc.raw
        labels = {str(k): str(v) for k, v in ((raw.get("metadata") or {}).get("labels") or {}).items()}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        try:
            allocatable = resources_from_dict(status.get("allocatable"))
            capacity = resources_from_dict(status.get("capacity"))
        except QuantityError as e:
            raise SimulationError(f"{doc.ref}: status: {e}") from None
        taints = _taints(spec.get("taints"))
        if spec.get("unschedulable"):
            taints.append(Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"))
        pool = labels.get(L.NODEPOOL)
        if pool:
            used = used_by_pool.setdefault(pool, {})
            for k, v in capacity.items():
                used[k] = used.get(k, 0) + v
        pods = [_pod(p, doc.source) for p in inputs.bound_pods.get(doc.name, [])]
        nodes.append(ExistingNode(name=doc.name, labels=labels, taints=taints, allocatable=allocatable, pods=pods,
                                  node_pool=pool, price=_price(catalog, labels)))
    return nodes, used_by_pool


def simulate_documents(documents: list[Document], catalog: str = "aws-us-east-1") -> SimulationResult:
    """Run the simulation on parsed documents against a catalog (bundled name or snapshot path)."""
    errors = [str(e) for d in documents for e in validate_document(d)]
    if errors:
        raise SimulationError("invalid input:\n" + "\n".join(errors))
    try:
        inputs = classify(documents)
    except InputError as e:
        raise SimulationError(str(e)) from None
    try:
        cat = load_catalog(catalog)
    except ValueError as e:
        raise SimulationError(str(e)) from None
    notes = list(inputs.notes)
    nodeclasses: dict[str, dict[str, Any]] | None = None
    if inputs.nodeclasses:
        nodeclasses = {d.name: parse_ec2nodeclass(d).to_dict()["spec"] for d in inputs.nodeclasses}
    elif inputs.nodepools:
        notes.append("no EC2NodeClass given: NodePools are assumed ready, with default kubelet settings")
    existing, used_by_pool = _existing_nodes(inputs, cat)
    pools = [_node_pool(parse_nodepool(d).to_dict(), cat, nodeclasses, used_by_pool.get(d.name, {}))
             for d in inputs.nodepools]
    if not pools:
        notes.append("no NodePool given: only existing nodes can take pods")
    pods = [_with_volumes(p, inputs) for p in inputs.pending_pods]
    daemonsets = [_pod(p, "DaemonSet") for p in inputs.daemonsets]
    plan = Scheduler(pools, existing, daemonsets).solve(pods)
    return SimulationResult(plan=plan, catalog=cat, nodepools=[p.name for p in pools], pods=pods,
                            existing_nodes=existing, notes=notes)
