"""`karpy simulate`: validate the documents, build the scheduler's inputs from them and a catalog, and solve.

The scheduler's inputs come from controller.provisioning.inputs, the builder the controller uses, so the dry run
decides as the controller would."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller.api import labels as L
from controller.api import parse_ec2nodeclass, parse_nodepool, validate_document
from controller.api.documents import Document
from controller.api.models import EC2NodeClass
from controller.api.shapes import shape_errors
from controller.catalog.snapshot import Catalog, load_catalog
from controller.catalog.types import InstanceType
from controller.provisioning import inputs
from controller.scheduling.pod import Pod
from controller.scheduling.policies import solve
from controller.scheduling.reservations import STRICT
from controller.scheduling.scheduler import Plan
from controller.scheduling.types import ExistingNode, SchedNodePool
from controller.simulate.workloads import SimulationInputs, classify

MAX_ERRORS_SHOWN = 20


class SimulationError(ValueError):
    """Input the simulation cannot run on; the message names every document and field at fault."""


def errors_message(errors: list[str]) -> str:
    """One line for one error; for several, a count then one line each (at most MAX_ERRORS_SHOWN)."""
    if len(errors) == 1:
        return errors[0]
    shown = errors[:MAX_ERRORS_SHOWN]
    more = [f"... and {len(errors) - len(shown)} more"] if len(errors) > len(shown) else []
    return "\n".join([f"{len(errors)} errors in the input:", *shown, *more])


@dataclass
class SimulationResult:
    """A plan with what it was computed from."""

    plan: Plan
    catalog: Catalog
    nodepools: list[str]
    pods: list[Pod]
    existing_nodes: list[ExistingNode]
    notes: list[str] = field(default_factory=list)


def _instance_types(catalog: Catalog, nodeclass: EC2NodeClass | None) -> list[InstanceType]:
    """The catalog's instance types as a NodeClass with this AMI family and kubelet configuration sees them."""
    if nodeclass is None:
        return catalog.instance_types
    family = nodeclass.ami_family
    return catalog.instance_types_for(ami_family=family if family != "custom" else "al2023",
                                      kubelet=nodeclass.kubelet or None)


def _price(by_name: dict[str, InstanceType], labels: dict[str, str]) -> float:
    """What an existing node costs per hour, from its instance type, capacity type and zone labels."""
    it = by_name.get(labels.get(L.INSTANCE_TYPE, ""))
    if it is None:
        return 0.0
    ct = labels.get(L.CAPACITY_TYPE, L.CAPACITY_TYPE_ON_DEMAND)
    zone = labels.get(L.ZONE)
    prices = [o.price for o in it.offerings if o.capacity_type == ct and (zone is None or o.zone == zone)]
    return min(prices) if prices else 0.0


def _node_pools(docs: list[Document], catalog: Catalog, nodeclasses: dict[str, EC2NodeClass] | None,
                usage: dict[str, dict[str, int]], nodeclass_docs: dict[str, Document] | None = None
                ) -> list[SchedNodePool]:
    """NodePools with their NodeClass's instance types; a pool whose NodeClass is missing is not ready, and so is one
    whose status (or its NodeClass's), when the document carries one, says it is not Ready."""
    pools = []
    for doc in docs:
        model = parse_nodepool(doc)
        nodeclass = None
        not_ready = inputs.nodepool_not_ready(doc.raw)
        if nodeclasses is not None:
            nodeclass = nodeclasses.get(model.node_class_ref.name)
            if nodeclass is None:
                not_ready = f'EC2NodeClass "{model.node_class_ref.name}" not found, so the NodePool is not ready'
            else:
                nc_doc = (nodeclass_docs or {}).get(model.node_class_ref.name)
                if nc_doc is not None and (nc_doc.raw.get("status") or {}).get("conditions"):
                    not_ready = not_ready or inputs.nodeclass_not_ready(nc_doc.raw, model.node_class_ref.name)
        try:
            pools.append(inputs.node_pool(model.manifest, _instance_types(catalog, nodeclass),
                                          usage.get(model.name, {}), not_ready))
        except inputs.InputError as e:
            raise SimulationError(f"{doc.source}: {e}") from None
    return pools


def _existing_nodes(sim: SimulationInputs, catalog: Catalog) -> tuple[list[ExistingNode], dict[str, dict[str, int]]]:
    """Nodes from the documents with the pods bound to them, and what each NodePool's nodes hold (for limits)."""
    nodes = []
    by_name = {it.name: it for it in catalog.instance_types}
    for doc in sim.nodes:
        pods = [_pod(p, doc.source) for p in sim.bound_pods.get(doc.name, [])]
        try:
            inputs.nodepool_usage([doc.raw])  # a bad capacity is reported with its file
            node = inputs.existing_node(doc.raw, pods)
        except inputs.InputError as e:
            raise SimulationError(f"{doc.source}: {e}") from None
        node.price = _price(by_name, node.labels)
        nodes.append(node)
    return nodes, inputs.nodepool_usage([d.raw for d in sim.nodes])


def _pod(raw: dict[str, Any], where: str, volumes: inputs.VolumeTopology | None = None,
         namespace_labels: dict[str, dict[str, str]] | None = None) -> Pod:
    try:
        return inputs.scheduling_pod(raw, volumes, namespace_labels)
    except inputs.InputError as e:
        raise SimulationError(f"{where}: {e}" if where else str(e)) from None


def simulate_documents(documents: list[Document], catalog: str = "aws-us-east-1", preference_policy: str = "Respect",
                       min_values_policy: str = "Strict") -> SimulationResult:
    """Run the simulation on parsed documents against a catalog (bundled name or snapshot path), under the
    controller's PREFERENCE_POLICY and MIN_VALUES_POLICY (the same solve the provisioner runs)."""
    errors = [str(e) for d in documents for e in validate_document(d)]
    errors += [e for d in documents for e in shape_errors(d)]
    if errors:
        raise SimulationError(errors_message(errors))
    try:
        sim = classify(documents)
    except inputs.InputError as e:
        raise SimulationError(str(e)) from None
    try:
        cat = load_catalog(catalog)
    except ValueError as e:
        raise SimulationError(str(e)) from None
    notes = list(sim.notes)
    nodeclasses: dict[str, EC2NodeClass] | None = None
    if sim.nodeclasses:
        nodeclasses = {d.name: parse_ec2nodeclass(d) for d in sim.nodeclasses}
    elif sim.nodepools:
        notes.append("no EC2NodeClass given: NodePools are assumed ready, with default kubelet settings")
    existing, usage = _existing_nodes(sim, cat)
    pools = _node_pools(sim.nodepools, cat, nodeclasses, usage, {d.name: d for d in sim.nodeclasses})
    if not pools:
        notes.append("no NodePool given: only existing nodes can take pods")
    pods: list[Pod] = []
    refused: dict[str, str] = {}  # pods Karpenter refuses before scheduling, as the provisioner does
    for raw, ref in zip(sim.pending_pods, sim.pending_refs, strict=True):
        if inputs.excludes_karpenter(raw):
            notes.append(f"{ref}: pod {inputs.pod_key(raw)} is {inputs.KARPENTER_EXCLUDED}: not simulated")
        elif inputs.has_dra_requirements(raw):
            refused[inputs.pod_key(raw)] = inputs.DRA_UNSUPPORTED
        else:
            pods.append(_pod(raw, ref, sim.volumes, sim.namespaces))
    daemonsets = []
    for doc in sim.daemonsets:
        if inputs.has_dra_requirements((doc.raw.get("spec") or {}).get("template") or {}):
            continue  # Karpenter leaves DaemonSets that claim devices out of the overhead
        try:
            daemonsets.append(inputs.daemonset_pod(doc.raw))
        except inputs.InputError as e:
            raise SimulationError(f"{doc.source}: {e}") from None
    plan = solve(pools, existing, daemonsets, pods, preference_policy, min_values_policy, lower_bound=True,
                 reserved_mode=STRICT)
    # one pass only: a pod the controller would defer to a later pass (its reservation held by this plan) is shown
    # with why it waits
    plan.unschedulable.update({k: f"deferred to a later pass: {v}" for k, v in plan.deferred.items()})
    plan.unschedulable.update(refused)
    return SimulationResult(plan=plan, catalog=cat, nodepools=[p.name for p in pools], pods=pods,
                            existing_nodes=existing, notes=notes)
