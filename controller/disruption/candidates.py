"""Disruption candidates (Karpenter's state nodes, NewCandidate and BuildDisruptionBudgetMapping), pure over a
Snapshot: which nodes a method may disrupt, why the others may not, what each costs to disrupt, and how many
disruptions each NodePool's budgets allow per reason."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from controller.api import conditions as C
from controller.api import labels as L
from controller.api.pods import owned_by, owned_by_daemonset
from controller.catalog.types import InstanceType
from controller.disruption import budgets
from controller.disruption.types import Blocked, BudgetMapping, Candidate, Obj, Snapshot
from controller.scheduling.pod import LabelSelector, PodError, _selector
from controller.state.cluster import is_mirror, is_terminal
from controller.state.views import NodeClaimView, NodeView, PodView
from controller.termination.drain import (
    do_not_disrupt_active,
    is_static,
    tolerates_disrupted_taint,
)

# Karpenter's eviction cost terms (pkg/utils/disruption)
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
PER_NODE_BASE_DISRUPTION_COST = 1.0


def sentence(text: str) -> str:
    """Karpenter's pretty.Sentence: the first letter upper-cased."""
    return text[:1].upper() + text[1:]


def _meta(obj: Obj | None) -> Obj:
    return (obj or {}).get("metadata") or {}


def _name(obj: Obj | None) -> str:
    return str(_meta(obj).get("name") or "")


def _key(pod: Obj) -> str:
    meta = _meta(pod)
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def is_active(pod: Obj) -> bool:
    """Neither terminal nor terminating."""
    return not is_terminal(pod) and not _meta(pod).get("deletionTimestamp")


def is_reschedulable(pod: Obj) -> bool:
    """Karpenter's IsReschedulable: active (or a terminating StatefulSet pod), not a DaemonSet's nor a static pod."""
    terminating_sts = bool(_meta(pod).get("deletionTimestamp")) and owned_by(pod, "apps/v1", "StatefulSet")
    return ((is_active(pod) or terminating_sts) and not owned_by_daemonset(pod) and not is_static(pod)
            and not is_mirror(pod))


def eviction_cost(pod: Obj) -> float:
    """Karpenter's EvictionCost: 1 + deletion-cost/2^27 + priority/2^25, clamped to [-10, 10]."""
    cost = 1.0
    raw = (_meta(pod).get("annotations") or {}).get(DELETION_COST_ANNOTATION)
    if raw is not None:
        try:
            value = float(raw)
            if math.isfinite(value):
                cost += value / 2 ** 27
        except (TypeError, ValueError):
            pass  # Karpenter logs and ignores an unparseable deletion cost
    priority = (pod.get("spec") or {}).get("priority")
    if isinstance(priority, int) and not isinstance(priority, bool):
        cost += priority / 2 ** 25
    return min(10.0, max(-10.0, cost))


def lifetime_remaining(nodeclaim: Obj, now: float) -> float:
    """Karpenter's LifetimeRemaining: the fraction of spec.expireAfter still ahead, 1 without one."""
    from controller.nodeclaim.disruption import DisruptionRuleError, parse_go_duration

    after = (nodeclaim.get("spec") or {}).get("expireAfter")
    if after is None:
        return 1.0
    try:
        total = parse_go_duration(after, "spec.expireAfter")
    except DisruptionRuleError:
        return 1.0
    created = C.parse_time(_meta(nodeclaim).get("creationTimestamp"))
    if total is None or total <= 0 or created is None:
        return 1.0
    return min(1.0, max(0.0, (total - (now - created)) / total))


@dataclass
class PDB:
    """A PodDisruptionBudget as candidate checks need it: its namespace, selector and disruptionsAllowed."""

    key: str
    namespace: str
    selector: LabelSelector
    allowed: int
    unhealthy_always: bool


def pdbs_from(snapshot: Snapshot) -> tuple[list[PDB], list[str]]:
    """The snapshot's PDBs (policy/v1 and v1beta1 alike), and errors naming the ones that cannot be read (skipped:
    a PDB the API server would not have admitted)."""
    out: list[PDB] = []
    errors: list[str] = []
    for raw in snapshot.pdbs:
        meta = _meta(raw)
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        spec = raw.get("spec") or {}
        try:
            sel = _selector(spec.get("selector"), f"PodDisruptionBudget/{key}: spec.selector")
        except (PodError, AttributeError, TypeError) as e:
            errors.append(str(e)[:300])
            continue
        if spec.get("selector") is None:
            sel = LabelSelector(nothing=True)  # policy/v1: a null selector matches no pod
        allowed = (raw.get("status") or {}).get("disruptionsAllowed", 0)
        out.append(PDB(key=key, namespace=str(meta.get("namespace") or "default"), selector=sel,
                       allowed=allowed if isinstance(allowed, int) else 0,
                       unhealthy_always=spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow"))
    return out, errors


def _evictable(pod: Obj, now: float) -> bool:
    """Karpenter's IsEvictable: PDBs matter only for pods the drain would evict."""
    return (is_active(pod) and not tolerates_disrupted_taint(pod) and not is_static(pod)
            and not do_not_disrupt_active(pod, now))


def pdb_block(pod: Obj, pdbs_by_ns: dict[str, list[PDB]], now: float) -> str | None:
    """Why the pod's PDBs block its eviction now (Karpenter's messages), None when they do not."""
    if not pdbs_by_ns or not _evictable(pod, now):
        return None
    meta = _meta(pod)
    ns = str(meta.get("namespace") or "default")
    labels = meta.get("labels") or {}
    matching = [p for p in pdbs_by_ns.get(ns, ()) if p.selector.matches(labels)]
    if len(matching) > 1:
        keys = ", ".join(p.key for p in matching)
        return f"eviction does not support multiple PDBs (PodDisruptionBudget(s)=[{keys}])"
    for p in matching:
        if p.unhealthy_always and PodView.of(pod).unhealthy:
            return None
        if p.allowed <= 0:
            return f"pdb prevents pod evictions (PodDisruptionBudget=[{p.key}])"
    return None


@dataclass
class StateNode:
    """A NodeClaim and its Node (either may be missing), and the pods bound to the Node."""

    nodeclaim: NodeClaimView | None
    node: NodeView | None
    pods: list[Obj] = field(default_factory=list)

    @property
    def name(self) -> str:
        return (self.node.name if self.node is not None else "") or self.nodeclaim_name

    @property
    def nodeclaim_name(self) -> str:
        return self.nodeclaim.name if self.nodeclaim is not None else ""

    @property
    def labels(self) -> dict[str, str]:
        source = self.node if self.node is not None else self.nodeclaim
        return dict(source.labels) if source is not None else {}

    @property
    def nodepool(self) -> str:
        return self.labels.get(L.NODEPOOL, "")

    def deleting(self, disrupting: set[str]) -> bool:
        """Deleted, tainted karpenter.sh/disrupted, or held by an earlier command (Karpenter's MarkedForDeletion)."""
        return ((self.nodeclaim is not None and (self.nodeclaim.deleting or self.nodeclaim_name in disrupting))
                or (self.node is not None and (self.node.deleting or self.node.disrupted)))

    def initialized(self) -> bool:
        """The NodeClaim Initialized (or, for a bare Node, the karpenter.sh/initialized label)."""
        if self.nodeclaim is not None:
            return self.nodeclaim.is_true("Initialized")
        return self.labels.get(L.INITIALIZED) == "true"

    def ready(self) -> bool:
        """The Node's Ready condition is True."""
        return self.node is not None and self.node.ready


def state_nodes(snapshot: Snapshot) -> tuple[list[StateNode], list[Obj]]:
    """NodeClaims joined to their Nodes (by providerID, else status.nodeName), bare Nodes, the pods bound to each;
    and the pods bound nowhere (pending)."""
    nodes_by_pid: dict[str, NodeView] = {}
    nodes_by_name: dict[str, NodeView] = {}
    for raw in snapshot.nodes:
        if not isinstance(raw, dict):
            continue
        view = NodeView.of(raw)
        nodes_by_name[view.name] = view
        if view.provider_id:
            nodes_by_pid[view.provider_id] = view
    out: list[StateNode] = []
    claimed: set[str] = set()
    for raw in snapshot.nodeclaims:
        if not isinstance(raw, dict):
            continue
        claim = NodeClaimView.of(raw)
        node = nodes_by_pid.get(claim.provider_id) if claim.provider_id else None
        if node is None:
            node = nodes_by_name.get(claim.node_name)
        if node is not None:
            claimed.add(node.name)
        out.append(StateNode(claim, node))
    for name, bare in nodes_by_name.items():
        if name not in claimed:
            out.append(StateNode(None, bare))
    by_node = {s.name: s for s in out if s.node is not None}
    pending: list[Obj] = []
    for pod in snapshot.pods:
        if not isinstance(pod, dict):
            continue
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            s = by_node.get(str(bound))
            if s is not None:
                s.pods.append(pod)
        else:
            pending.append(pod)
    return out, pending


def price_of(it: InstanceType | None, zone: str, capacity_type: str) -> float | None:
    """The offering price for the zone and capacity type (Karpenter's OfferingPrice), None when not offered."""
    if it is None:
        return None
    for o in it.offerings:
        if o.zone == zone and o.capacity_type == capacity_type:
            return o.price
    return None


@dataclass
class CandidateSet:
    """The candidates of one pass, with those that may disrupt only for eventual methods (drift) when their
    pods block eviction but the NodeClaim has a terminationGracePeriod, and the blocked ones."""

    graceful: list[Candidate] = field(default_factory=list)
    eventual_only: list[Candidate] = field(default_factory=list)
    blocked: list[Blocked] = field(default_factory=list)
    all_nodes: list[StateNode] = field(default_factory=list)
    pending: list[Obj] = field(default_factory=list)
    nodepools: dict[str, Obj] = field(default_factory=dict)
    pdb_errors: list[str] = field(default_factory=list)


def _block(out: CandidateSet, s: StateNode, reason: str) -> None:
    out.blocked.append(Blocked(nodeclaim=s.nodeclaim_name, node=_name(s.node), reason=sentence(reason)[:500]))


def build_candidates(snapshot: Snapshot) -> CandidateSet:
    """Every state node checked as Karpenter's NewCandidate does, in its order; the first failed check is the
    node's reason. Nodes already being disrupted are skipped silently (Karpenter's queue check)."""
    nodes, pending = state_nodes(snapshot)
    out = CandidateSet(all_nodes=nodes, pending=pending)
    for np_ in snapshot.nodepools:
        if isinstance(np_, dict) and _name(np_) and not _meta(np_).get("deletionTimestamp"):
            out.nodepools[_name(np_)] = np_
    pdbs, out.pdb_errors = pdbs_from(snapshot)
    pdbs_by_ns: dict[str, list[PDB]] = {}
    for p in pdbs:
        pdbs_by_ns.setdefault(p.namespace, []).append(p)
    types_by_pool: dict[str, dict[str, InstanceType]] = {
        pool: {it.name: it for it in types} for pool, types in snapshot.instance_types.items()}
    now = snapshot.now
    for s in nodes:
        if s.nodeclaim is None:
            continue  # not managed by Karpenter: no NodeClaim to report on
        if s.nodeclaim_name in snapshot.disrupting:
            continue  # already being disrupted
        if s.node is None:
            _block(out, s, "nodeclaim does not have an associated node")
            continue
        if not s.initialized():
            _block(out, s, "node isn't initialized")
            continue
        if s.deleting(snapshot.disrupting):
            _block(out, s, "node is deleting or marked for deletion")
            continue
        if (_meta(s.node).get("annotations") or {}).get(L.DO_NOT_DISRUPT) == "true":
            _block(out, s, f'disruption is blocked through the "{L.DO_NOT_DISRUPT}" annotation')
            continue
        labels = s.labels
        pool_name = labels.get(L.NODEPOOL)
        if not pool_name:
            _block(out, s, f"node doesn't have required label (label={L.NODEPOOL})")
            continue
        nodepool = out.nodepools.get(pool_name)
        type_map = types_by_pool.get(pool_name)
        if nodepool is None or type_map is None:
            _block(out, s, f"NodePool not found (NodePool={pool_name})")
            continue
        pod_block = None
        for pod in s.pods:
            if is_active(pod) and do_not_disrupt_active(pod, now):
                pod_block = f'pod has "{L.DO_NOT_DISRUPT}" annotation (Pod={_key(pod)})'
                break
        if pod_block is None:
            for pod in s.pods:
                pod_block = pdb_block(pod, pdbs_by_ns, now)
                if pod_block:
                    break
        reschedulable = [p for p in s.pods if is_reschedulable(p)]
        it = type_map.get(labels.get(L.INSTANCE_TYPE, ""))
        zone = labels.get(L.ZONE, "")
        ct = labels.get(L.CAPACITY_TYPE, "")
        price = price_of(it, zone, ct)
        cand = Candidate(
            nodeclaim=s.nodeclaim, node=s.node, nodepool=pool_name, instance_type=it.name if it else "",
            capacity_type=ct, zone=zone, price=price if price is not None and math.isfinite(price) else 0.0,
            disruption_cost=sum(eviction_cost(p) for p in reschedulable) * lifetime_remaining(s.nodeclaim, now),
            reschedulable_pods=reschedulable,
            reschedule_disruption_cost=PER_NODE_BASE_DISRUPTION_COST + sum(
                max(0.0, eviction_cost(p)) for p in reschedulable),
            instance=it)
        if pod_block is not None:
            if (s.nodeclaim.get("spec") or {}).get("terminationGracePeriod") is not None:
                out.eventual_only.append(cand)
            _block(out, s, pod_block)
            continue
        out.graceful.append(cand)
    return out


def budget_mapping(snapshot: Snapshot, cands: CandidateSet, reason: str) -> BudgetMapping:
    """Karpenter's BuildDisruptionBudgetMapping: per NodePool, what its budgets allow for the reason over the
    pool's nodes, less the nodes already NotReady or being disrupted (never below 0)."""
    total: dict[str, int] = {}
    disrupting: dict[str, int] = {}
    for s in cands.all_nodes:
        if s.node is None or s.nodeclaim is None or not s.initialized():
            continue  # Karpenter counts managed, initialized nodes (a new replacement is not healthy capacity yet)
        if C.is_true(s.nodeclaim.get("status"), "InstanceTerminating"):
            continue
        pool = s.nodepool
        if not pool:
            continue
        total[pool] = total.get(pool, 0) + 1
        if not s.ready() or s.deleting(snapshot.disrupting):
            disrupting[pool] = disrupting.get(pool, 0) + 1
    out = BudgetMapping()
    for name, np_ in cands.nodepools.items():
        allowed = budgets.allowed_disruptions(np_, reason, snapshot.now, total.get(name, 0))
        out.remaining[name] = max(0, allowed - disrupting.get(name, 0))
        out.allowed[name] = allowed
        out.consuming[name] = disrupting.get(name, 0)
        out.nodes[name] = total.get(name, 0)
    return out
