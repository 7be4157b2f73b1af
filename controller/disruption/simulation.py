"""The disruption scheduling simulation (Karpenter's SimulateScheduling): the candidates' reschedulable pods, with the
cluster's pending pods and those of nodes already going away, placed by the provisioner's own scheduler over every
other node and in-flight NodeClaim. The translation from a Snapshot to the scheduler's inputs is built once per pass
(pods converted once, nodes once) and each simulation only leaves the candidates out."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.api.quantity import QuantityError, resources_from_dict
from controller.disruption.candidates import CandidateSet, is_reschedulable
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
    """The pass's scheduler inputs from the snapshot, through the provisioner's translation (inputs.scheduler_inputs):
    errors kept, never raised (a pool, node or pod that cannot be read is left out and named in `errors` /
    `pod_errors`). Nodes going away are not capacity: their reschedulable pods are always rescheduled, with the
    cluster's provisionable pending pods."""
    alloc_by_type: dict[str, dict[str, int]] = {}
    for types in snapshot.instance_types.values():
        for it in types:
            alloc_by_type.setdefault(it.name, it.allocatable)
    nodes: list[inputs.NodeSource] = []
    always: list[Obj] = []
    for s in cands.all_nodes:
        if s.deleting(snapshot.disrupting):
            always += [raw for raw in s.pods if is_reschedulable(raw)]
        elif s.node is None and s.nodeclaim is not None:
            nodes.append(inputs.NodeSource(node=None, nodeclaim=s.nodeclaim,
                                           allocatable=_allocatable(s.nodeclaim, alloc_by_type),
                                           uninitialized=f"nodeclaim/{s.nodeclaim_name}"))
        elif s.node is not None:
            waiting = s.nodeclaim is not None and not s.initialized()
            nodes.append(inputs.NodeSource(node=s.node, nodeclaim=s.nodeclaim, pods=list(s.pods),
                                           uninitialized=f"nodeclaim/{s.nodeclaim_name}, node/{s.name}"
                                           if waiting else ""))
    always += [raw for raw in cands.pending if is_provisionable(raw)]
    usage = inputs.nodepool_usage([s.node for s in cands.all_nodes if s.node is not None],
                                  [s.nodeclaim for s in cands.all_nodes if s.nodeclaim is not None])

    def pools() -> list[inputs.PoolSource]:
        # static NodePools are sized by replicas, never by pods
        return [inputs.PoolSource(np_, snapshot.instance_types.get(name, []), usage.get(name, {}),
                                  snapshot.nodepool_not_ready.get(name, ""))
                for name, np_ in cands.nodepools.items() if ((np_.get("spec") or {}).get("replicas")) is None]

    built = inputs.scheduler_inputs(
        nodes=nodes, pods=[(raw, "") for raw in always], pools=pools,
        daemonsets=[(ds, "") for ds in snapshot.daemonsets],
        live_daemonset_pod=inputs.live_daemonset_pods(snapshot.pods), volumes=snapshot.volumes,
        namespace_labels=snapshot.namespace_labels, ignore_dra_requests=options.ignore_dra_requests, screen=False,
        known=snapshot.converted)
    sim = Simulation(options=options, pools=built.pools, existing=built.existing, daemonsets=built.daemonsets,
                     pods=built.converted, uninitialized=built.uninitialized)
    sim.pod_errors = {k: v[:300] for k, v in built.pod_issues().items()}
    sim.errors = [str(i)[:300] for i in built.issues if i.kind != "Pod"]
    seen: set[str] = set()
    for pod in built.pods:  # a pod listed twice (pending and on a deleting node) is rescheduled once
        if pod.key not in seen:
            seen.add(pod.key)
            sim.always.append(pod)
    sim.always_keys = seen
    return sim
