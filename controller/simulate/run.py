"""`karpy simulate`: load the documents and a catalog, and solve.

Documents are validated, sorted and read into typed NodePools and EC2NodeClasses; the scheduler's inputs come from
controller.provisioning.inputs.scheduler_inputs (through simulate.workloads.document_inputs), the translation the
controller uses, so the dry run decides as the controller would."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.api import parse_ec2nodeclass, parse_nodepool, validate_document
from controller.api.documents import Document
from controller.api.models import EC2NodeClass
from controller.api.shapes import shape_errors
from controller.catalog.snapshot import Catalog, load_catalog
from controller.provisioning import inputs
from controller.scheduling.pod import Pod
from controller.scheduling.policies import solve
from controller.scheduling.reservations import STRICT
from controller.scheduling.scheduler import Plan
from controller.scheduling.types import ExistingNode
from controller.simulate.workloads import classify, document_inputs

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
        nodeclasses = {d.name: parse_ec2nodeclass(d, validated=True) for d in sim.nodeclasses}
    elif sim.nodepools:
        notes.append("no EC2NodeClass given: NodePools are assumed ready, with default kubelet settings")
    nodepools = [(parse_nodepool(d, validated=True), d.source) for d in sim.nodepools]
    if not nodepools:
        notes.append("no NodePool given: only existing nodes can take pods")
    built = document_inputs(sim, cat, nodepools, nodeclasses)
    if built.issues:
        raise SimulationError(errors_message([str(i) for i in built.issues]))
    notes += [f"{ref}: pod {inputs.pod_key(raw)} is {inputs.KARPENTER_EXCLUDED}: not simulated"
              for raw, ref in built.excluded]
    plan = solve(built.pools, built.existing, built.daemonsets, built.pods, preference_policy, min_values_policy,
                 lower_bound=True, reserved_mode=STRICT)
    # one pass only: a pod the controller would defer to a later pass (its reservation held by this plan) is shown
    # with why it waits
    plan.unschedulable.update({k: f"deferred to a later pass: {v}" for k, v in plan.deferred.items()})
    plan.unschedulable.update(built.refused)
    return SimulationResult(plan=plan, catalog=cat, nodepools=[p.name for p, _ in nodepools], pods=built.pods,
                            existing_nodes=built.existing, notes=notes)
