"""The disruption scheduling simulation (Karpenter's SimulateScheduling): the candidates' reschedulable pods, with the
cluster's pending pods and those of nodes already going away, placed by the provisioner's own scheduler over every
other node and in-flight NodeClaim. The translation from a Snapshot to the scheduler's inputs is built once per pass
(pods converted once, nodes once) and each simulation only leaves the candidates out."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.api.quantity import QuantityError, resources_from_dict
from controller.disruption.candidates import CandidateSet, StateNode, is_reschedulable
from controller.disruption.types import Candidate, Obj, Options, Snapshot
from controller.provisioning import inputs
from controller.scheduling.pod import Pod
from controller.scheduling.policies import solve
from controller.scheduling.scheduler import Plan
from controller.scheduling.types import ExistingNode, SchedNodePool
from controller.state.cluster import is_provisionable


def _pod_key(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


@dataclass
class Simulation:
    """One pass's scheduler inputs: NodePools that may launch replacements, every node that may keep pods (by
    name, so candidates can be left out), DaemonSet overhead, and the pods that are always rescheduled."""

    options: Options
    pools: list[SchedNodePool] = field(default_factory=list)
    existing: list[ExistingNode] = field(default_factory=list)
    daemonsets: list[Pod] = field(default_factory=list)
    always: list[Pod] = field(default_factory=list)  # pending pods and pods of nodes being deleted
    always_keys: set[str] = field(default_factory=set)
    pods: dict[str, Pod] = field(default_factory=dict)  # every readable pod by namespace/name
    pod_errors: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    # existing capacity not initialized yet (NodeClaims in flight, Nodes before Initialized), by scheduler name:
    # a decision that relies on it is not made (Karpenter's UninitializedNodeError)
    uninitialized: dict[str, str] = field(default_factory=dict)

    def pod(self, raw: Obj) -> Pod | None:
        """The scheduler's view of a pod (None when it cannot be read: pod_errors says why)."""
        return self.pods.get(_pod_key(raw))

    def simulate(self, candidates: list[Candidate]) -> tuple[Plan | None, str]:
        """Place the candidates' reschedulable pods (with the always-rescheduled ones) with the candidates gone.
        Returns the plan, or None and why a candidate's pod cannot be placed (Karpenter's scheduling errors)."""
        names = {c.node_name for c in candidates} | {c.name for c in candidates}
        moving: list[Pod] = []
        keys: list[str] = []
        for c in candidates:
            for raw in c.reschedulable_pods:
                key = _pod_key(raw)
                pod = self.pods.get(key)
                if pod is None:
                    return None, f"pod {key} cannot be read: {self.pod_errors.get(key, 'unknown')}"[:500]
                if key not in self.always_keys:
                    moving.append(pod)
                    keys.append(key)
        existing = [e for e in self.existing if e.name not in names]
        plan = solve(self.pools, existing, self.daemonsets, [*moving, *self.always],
                     self.options.preference_policy, self.options.min_values_policy)
        failed = [(k, plan.unschedulable[k]) for k in keys if k in plan.unschedulable]
        if failed:
            shown = "; ".join(f'could not schedule pod "{k}": {why}' for k, why in failed[:3])
            more = f" and {len(failed) - 3} other(s)" if len(failed) > 3 else ""
            return None, (shown + more)[:500]
        moved = set(keys)
        for name, placed in plan.existing.items():
            if name in self.uninitialized and any(p.key in moved for p in placed):
                return None, f"would schedule against uninitialized {self.uninitialized[name]}"
        # only the candidates' pods decide: NodeClaims opened purely for pending pods are the provisioner's business
        plan.node_claims = [nc for nc in plan.node_claims if any(p.key in moved for p in nc.pods)]
        return plan, ""


def _allocatable(claim: Obj, types: dict[str, dict[str, int]]) -> dict[str, int]:
    """A NodeClaim in flight: its status.allocatable, else the smallest of its instance-type options'."""
    try:
        alloc = resources_from_dict((claim.get("status") or {}).get("allocatable"))
    except QuantityError:
        alloc = {}
    if alloc:
        return alloc
    options: list[str] = []
    for r in (claim.get("spec") or {}).get("requirements") or []:
        if isinstance(r, dict) and r.get("key") == "node.kubernetes.io/instance-type" and r.get("operator") == "In":
            options = [str(v) for v in r.get("values") or []]
    allocs = [types[o] for o in options if o in types]
    if not allocs:
        try:
            return resources_from_dict(((claim.get("spec") or {}).get("resources") or {}).get("requests"))
        except QuantityError:
            return {}
    keys = set().union(*allocs)
    return {k: min(a.get(k, 0) for a in allocs) for k in keys}


def build(snapshot: Snapshot, cands: CandidateSet, options: Options) -> Simulation:
    """The pass's scheduler inputs from the snapshot (errors kept, never raised: a pool, node or pod that cannot be
    read is left out and named in `errors` / `pod_errors`)."""
    sim = Simulation(options=options)
    for raw in snapshot.pods:
        if not isinstance(raw, dict):
            continue
        try:
            sim.pods[_pod_key(raw)] = inputs.scheduling_pod(raw, snapshot.volumes, snapshot.namespace_labels)
        except inputs.InputError as e:
            sim.pod_errors[_pod_key(raw)] = str(e)[:300]
    usage = inputs.nodepool_usage([s.node for s in cands.all_nodes if s.node is not None])
    for name, np_ in cands.nodepools.items():
        if ((np_.get("spec") or {}).get("replicas")) is not None:
            continue  # static NodePools are sized by replicas, never by pods
        try:
            sim.pools.append(inputs.node_pool(np_, snapshot.instance_types.get(name, []), usage.get(name, {}),
                                              snapshot.nodepool_not_ready.get(name, "")))
        except inputs.InputError as e:
            sim.errors.append(str(e)[:300])
    # the DaemonSet overhead as the provisioner sizes it: each DaemonSet's newest live pod, else its template
    by_owner: dict[str, list[Obj]] = {}
    for raw in snapshot.pods:
        for ref in (raw.get("metadata") or {}).get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("kind") == "DaemonSet" and ref.get("controller") and ref.get("uid"):
                by_owner.setdefault(str(ref["uid"]), []).append(raw)
    sim.daemonsets, unreadable = inputs.daemonset_pods(
        snapshot.daemonsets,
        lambda ds: inputs.newest_daemonset_pod(by_owner.get(str((ds.get("metadata") or {}).get("uid") or ""), [])),
        options.ignore_dra_requests)
    sim.errors.extend(unreadable)
    alloc_by_type: dict[str, dict[str, int]] = {}
    for types in snapshot.instance_types.values():
        for it in types:
            alloc_by_type.setdefault(it.name, it.allocatable)
    for s in cands.all_nodes:
        _add_node(sim, snapshot, s, alloc_by_type)
    for raw in cands.pending:
        if is_provisionable(raw) and _pod_key(raw) in sim.pods:
            sim.always.append(sim.pods[_pod_key(raw)])
    sim.always_keys = {p.key for p in sim.always}
    return sim


def _add_node(sim: Simulation, snapshot: Snapshot, s: StateNode, alloc_by_type: dict[str, dict[str, int]]) -> None:
    """A node that keeps its pods (existing capacity), or one going away whose pods are rescheduled."""
    if s.deleting(snapshot.disrupting):
        for raw in s.pods:
            pod = sim.pod(raw)
            if pod is not None and is_reschedulable(raw):
                sim.always.append(pod)
        return
    if s.node is None:
        if s.nodeclaim is None:
            return
        try:
            sim.existing.append(inputs.in_flight_node(s.nodeclaim, _allocatable(s.nodeclaim, alloc_by_type), []))
            sim.uninitialized[sim.existing[-1].name] = f"nodeclaim/{s.nodeclaim_name}"
        except inputs.InputError as e:
            sim.errors.append(str(e)[:300])
        return
    bound = [p for p in (sim.pod(raw) for raw in s.pods
                         if (raw.get("status") or {}).get("phase") not in ("Succeeded", "Failed")) if p is not None]
    try:
        sim.existing.append(inputs.existing_node(s.node, bound, nodeclaim=s.nodeclaim))
        if s.nodeclaim is not None and not s.initialized():
            sim.uninitialized[sim.existing[-1].name] = f"nodeclaim/{s.nodeclaim_name}, node/{s.name}"
    except inputs.InputError as e:
        sim.errors.append(str(e)[:300])
