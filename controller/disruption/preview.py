"""`karpy disruption`'s run: the next pass over a snapshot and, with `--apply`, the drift preview of a proposal.

The preview puts the proposed NodePools/EC2NodeClasses in place of the snapshot's, finds every NodeClaim that would
drift, then runs the controller's passes one after another as the running controller would: within a pass, commands
are taken (each holding its nodes against the budgets, as the orchestration queue does) until the budgets allow no
more; then those commands complete (candidates gone, replacements up as initialized nodes, their pods placed by
the scheduler) and the next pass starts. A NodeClaim's pass number is the blast radius of the change over time:
pass 1 goes at once, pass 2 once pass 1's replacements are up, and so on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller.api import conditions as C
from controller.api import labels as L
from controller.api.documents import Document
from controller.api.nodeclasshash import hash_annotations
from controller.api.pods import owned_by_daemonset
from controller.api.quantity import format_quantity
from controller.disruption import documents
from controller.disruption.render import DisruptionResult, DriftEntry
from controller.disruption.types import Command, Obj, Options, Pass, Snapshot
from controller.provisioning import inputs
from controller.provisioning.nodeclaimtemplate import nodeclaim_manifest
from controller.scheduling.nodeclaim import PlannedNodeClaim
from controller.scheduling.policies import solve

ComputePass = Callable[[Snapshot, Options], Pass]
MAX_COMMANDS_PER_PASS = 10_000  # a bound on the inner loop (budgets end it far sooner)


class PassError(RuntimeError):
    """The pass could not be computed on this input; the message says what it tripped over."""


def _compute(compute: ComputePass, snapshot: Snapshot, options: Options) -> Pass:
    try:
        return compute(snapshot, options)
    except (inputs.InputError, ValueError, KeyError, TypeError) as e:
        raise PassError(f"the disruption pass failed on this input: {type(e).__name__}: "
                        f"{' '.join(str(e).split())[:300]}") from None


def default_compute() -> ComputePass:
    from controller.disruption.core import compute_pass

    return compute_pass


def plan(docs: list[Document], catalog: str = "aws-us-east-1", now: float | None = None,
         options: Options | None = None, proposed: list[Document] | None = None,
         compute: ComputePass | None = None, max_passes: int = 100,
         progress: Callable[[str], None] | None = None) -> DisruptionResult:
    """The next pass over these documents at `now`; with `proposed` documents, the pass over the proposal and the
    drift preview (at most max_passes passes), telling `progress` how far it is."""
    options = options or Options()
    base = documents.load(docs, catalog=catalog, now=now)
    changed = documents.propose(base, proposed) if proposed is not None else None
    compute = compute or default_compute()  # once the input is known good: the core's imports are the slow part
    if changed is None:
        first, notes = _first_pass(compute, base, options)
        return DisruptionResult(input=base, pass_=first, notes=notes)
    first, notes = _first_pass(compute, changed, options)
    drift, passes, more = preview(base, changed, options, compute, max_passes, progress)
    return DisruptionResult(input=changed, pass_=first, drift=drift, passes=passes, notes=notes + more)


def _first_pass(compute: ComputePass, inp: documents.DisruptionInput, options: Options) -> tuple[Pass, list[str]]:
    """The pass over the input; should it fail on the NodeClaims the input already blocks (a NodePool or Node
    missing, labels missing), the pass over the rest, saying so."""
    try:
        return _compute(compute, inp.snapshot, options), []
    except PassError as e:
        if not inp.blocked:
            raise
        first_error = e
    held = {b.nodeclaim for b in inp.blocked}
    snap = inp.snapshot
    nodes = {str((c.get("status") or {}).get("nodeName") or "") for c in snap.nodeclaims
             if documents.name_of(c) in held}
    rest = Snapshot(now=snap.now, nodepools=snap.nodepools, nodeclasses=snap.nodeclasses,
                    nodeclaims=[c for c in snap.nodeclaims if documents.name_of(c) not in held],
                    nodes=[n for n in snap.nodes if documents.name_of(n) not in nodes], pods=snap.pods,
                    pdbs=snap.pdbs, daemonsets=snap.daemonsets, instance_types=snap.instance_types,
                    nodepool_not_ready=snap.nodepool_not_ready, volumes=snap.volumes, drifted=snap.drifted,
                    disrupting=snap.disrupting - held)
    return _compute(compute, rest, options), [f"the pass left out the {len(held)} blocked NodeClaim(s) and their "
                                              f"Nodes ({str(first_error)[:200]})"]


def would_drift(base: documents.DisruptionInput, changed: documents.DisruptionInput) -> dict[str, str]:
    """NodeClaim -> drift reason under the proposal, for NodeClaims that are not drifted now (already drifted ones
    go whatever the proposal says)."""
    before = set(base.snapshot.drifted) | {documents.name_of(c) for c in base.snapshot.nodeclaims
                                           if C.is_true(c.get("status"), "Drifted")}
    return {name: why for name, why in changed.snapshot.drifted.items() if name not in before}


@dataclass
class _World:
    """The cluster as the preview evolves it: the proposal's snapshot, changed by each completed command."""

    snap: Snapshot
    nodepools: dict[str, Obj]
    nodeclasses: dict[str, Obj]
    created: int = 0
    taken: dict[str, tuple[int, str]] = field(default_factory=dict)  # NodeClaim -> (pass, method)


def preview(base: documents.DisruptionInput, changed: documents.DisruptionInput, options: Options,
            compute: ComputePass, max_passes: int = 100,
            progress: Callable[[str], None] | None = None) -> tuple[list[DriftEntry], int, list[str]]:
    """The drift entries of the proposal with the pass in which each goes, how many passes ran, and notes."""
    drifting = would_drift(base, changed)
    s = changed.snapshot
    world = _World(Snapshot(now=s.now, nodepools=s.nodepools, nodeclasses=s.nodeclasses,
                            nodeclaims=list(s.nodeclaims), nodes=list(s.nodes), pods=list(s.pods), pdbs=s.pdbs,
                            daemonsets=s.daemonsets, instance_types=s.instance_types,
                            nodepool_not_ready=s.nodepool_not_ready, volumes=s.volumes, drifted=dict(s.drifted),
                            disrupting=set(s.disrupting)),
                   changed.nodepools, changed.nodeclasses)
    notes: list[str] = []
    passes = 0
    while drifting and passes < max_passes and not set(drifting) <= set(world.taken):
        passes += 1
        if progress is not None:
            done = len(set(drifting) & set(world.taken))
            progress(f"drift preview: pass {passes}, {done} of {len(drifting)} drifted NodeClaims gone")
        commands, expired = _one_pass(world, options, compute, passes)
        if not commands and not expired:
            passes -= 1
            break
        _complete(world, commands, expired, options)
    node_of = {documents.name_of(c): str((c.get("status") or {}).get("nodeName") or "") for c in s.nodeclaims}
    pool_of = {documents.name_of(c): documents.labels_of(c).get(L.NODEPOOL, "") for c in s.nodeclaims}
    out = []
    for name, why in sorted(drifting.items(), key=lambda kv: (world.taken.get(kv[0], (10**9, ""))[0], kv[0])):
        number, method = world.taken.get(name, (0, ""))
        out.append(DriftEntry(nodeclaim=name, node=node_of.get(name, ""), nodepool=pool_of.get(name, ""),
                              reason=why, pass_number=number, method=method))
    left = sum(1 for d in out if not d.pass_number)
    if left:
        bound = f"within {max_passes} passes" if passes >= max_passes else "by any pass"
        notes.append(f"{left} drifted NodeClaim(s) not disrupted {bound} (blocked: see blocked[])")
    return out, passes, notes


def _one_pass(world: _World, options: Options, compute: ComputePass,
              number: int) -> tuple[list[Command], set[str]]:
    """Commands taken until the budgets allow no more, each holding its nodes as the queue does, and the NodeClaims
    past expireAfter (they go in the same pass, without budgets)."""
    taken: list[Command] = []
    expired: set[str] = set()
    for _ in range(MAX_COMMANDS_PER_PASS):
        result = _compute(compute, world.snap, options)
        fresh = [c for c in result.commands if not any(x.name in world.snap.disrupting for x in c.candidates)]
        late = [e.nodeclaim for e in result.expired if e.nodeclaim not in world.snap.disrupting]
        if not fresh and not late:
            break
        for name in late:
            expired.add(name)
            world.snap.disrupting.add(name)
            world.taken.setdefault(name, (number, "Expiration"))
        for cmd in fresh:
            taken.append(cmd)
            for c in cmd.candidates:
                world.snap.disrupting.add(c.name)
                world.taken.setdefault(c.name, (number, cmd.method))
    return taken, expired


def _remove(world: _World, claims: set[str]) -> list[Obj]:
    """Take the NodeClaims and their Nodes out; the pods they held come back unbound (DaemonSet pods go)."""
    snap = world.snap
    nodes = {str((c.get("status") or {}).get("nodeName") or "") for c in snap.nodeclaims
             if documents.name_of(c) in claims} - {""}
    snap.nodeclaims = [c for c in snap.nodeclaims if documents.name_of(c) not in claims]
    snap.nodes = [n for n in snap.nodes if documents.name_of(n) not in nodes]
    snap.disrupting -= claims
    for name in claims:
        snap.drifted.pop(name, None)
    kept, displaced = [], []
    for pod in snap.pods:
        if str((pod.get("spec") or {}).get("nodeName") or "") not in nodes:
            kept.append(pod)
        elif not owned_by_daemonset(pod):
            displaced.append({**pod, "spec": {k: v for k, v in pod["spec"].items() if k != "nodeName"}})
    snap.pods = kept
    return displaced


def _complete(world: _World, commands: list[Command], expired: set[str], options: Options) -> None:
    """The pass's commands done: candidates deleted, replacements running, displaced pods placed where the
    scheduler puts them (on nodes, else on NodeClaims the provisioner would launch, else left pending)."""
    claims = {c.name for cmd in commands for c in cmd.candidates} | expired
    displaced = _remove(world, claims)
    for cmd in commands:
        for r in cmd.replacements:
            _launch(world, r.planned)
    if displaced:
        _place(world, displaced, options)


def _launch(world: _World, planned: PlannedNodeClaim) -> str:
    """A NodeClaim and its initialized Node for a planned one, as the controller creates them; returns the Node."""
    pool = world.nodepools.get(planned.node_pool)
    if pool is None or planned.instance_type is None:
        return ""
    world.created += 1
    name = f"{planned.node_pool}-preview-{world.created}"
    it = planned.instance_type
    requests: dict[str, int] = {}
    for p in planned.pods:
        for k, v in p.requests.items():
            requests[k] = requests.get(k, 0) + v
    claim = nodeclaim_manifest(pool, planned.requirements, planned.instance_type_options or [it], requests)
    meta = claim["metadata"]
    meta.pop("generateName", None)
    meta["name"] = name
    meta["creationTimestamp"] = C.format_time(world.snap.now)
    ref = str((claim["spec"].get("nodeClassRef") or {}).get("name", ""))
    nodeclass = world.nodeclasses.get(ref)
    if nodeclass is not None:
        meta["annotations"].update(hash_annotations(nodeclass))
    labels = {**meta["labels"], **it.labels, L.INSTANCE_TYPE: it.name, L.CAPACITY_TYPE: planned.capacity_type,
              L.ZONE: planned.zone, L.HOSTNAME: name, L.INITIALIZED: "true", L.REGISTERED: "true"}
    meta["labels"] = labels
    capacity = {k: format_quantity(k, v) for k, v in it.capacity.items() if v}
    allocatable = {k: format_quantity(k, v) for k, v in it.allocatable.items() if v}
    when = C.format_time(world.snap.now)
    claim["status"] = {"nodeName": name, "providerID": f"preview:///{planned.zone}/{name}", "capacity": capacity,
                       "allocatable": allocatable, "lastPodEventTime": when,
                       "conditions": [{"type": t, "status": "True", "reason": t, "lastTransitionTime": when}
                                      for t in ("Launched", "Registered", "Initialized", "Ready")]}
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels), "creationTimestamp": when},
            "spec": {"providerID": claim["status"]["providerID"],
                     "taints": list((pool.get("spec") or {}).get("template", {}).get("spec", {}).get("taints")
                                    or [])},
            "status": {"capacity": capacity, "allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": when}]}}
    world.snap.nodeclaims.append(claim)
    world.snap.nodes.append(node)
    return name


def _place(world: _World, pods: list[Obj], options: Options) -> None:
    """Bind displaced pods where the scheduler puts them: existing nodes first, then new NodeClaims from the
    NodePools (launched as the provisioner would); the rest stay pending."""
    snap = world.snap
    bound: dict[str, list[Any]] = {}
    for pod in snap.pods:
        on = str((pod.get("spec") or {}).get("nodeName") or "")
        if on:
            bound.setdefault(on, []).append(pod)
    claim_of = {str((c.get("status") or {}).get("nodeName") or ""): c for c in snap.nodeclaims}
    # what the scheduler cannot read was reported when the input was read: it is left out here
    built = inputs.scheduler_inputs(
        nodes=[inputs.NodeSource(node=node, nodeclaim=claim_of.get(documents.name_of(node)),
                                 pods=bound.get(documents.name_of(node), [])) for node in snap.nodes],
        pods=[(p, "") for p in pods], screen=False,
        pools=lambda: [inputs.PoolSource(pool, snap.instance_types.get(name, []), {}, snap.nodepool_not_ready.get(
            name, "")) for name, pool in world.nodepools.items()],
        daemonsets=[(d, "") for d in snap.daemonsets], live_daemonset_pod=inputs.live_daemonset_pods(snap.pods),
        volumes=snap.volumes, namespace_labels=snap.namespace_labels, ignore_dra_requests=options.ignore_dra_requests)
    by_key = {f"{(p.get('metadata') or {}).get('namespace') or 'default'}/{documents.name_of(p)}": p for p in pods}
    result = solve(built.pools, built.existing, built.daemonsets, built.pods, options.preference_policy,
                   options.min_values_policy)
    placed: dict[str, str] = {}
    for node_name, node_pods in result.existing.items():
        for sp in node_pods:
            placed[sp.key] = node_name
    for planned in result.node_claims:
        launched = _launch(world, planned)
        for sp in planned.pods:
            if launched:
                placed[sp.key] = launched
    for key, pod in by_key.items():
        target = placed.get(key)
        snap.pods.append({**pod, "spec": {**pod["spec"], "nodeName": target}} if target else pod)
