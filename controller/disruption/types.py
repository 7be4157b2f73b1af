"""The disruption core's inputs and outputs (Karpenter's pkg/controllers/disruption/types.go).

A pass reads one Snapshot (built from informers by the running controller, or from documents by `karpy disruption`)
and returns a Pass: the commands of the first method that produced any, the NodeClaims past expireAfter, and the
nodes that could not be candidates with the reason. Nothing here does I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller.catalog.types import InstanceType
from controller.provisioning.inputs import VolumeTopology
from controller.scheduling.nodeclaim import PlannedNodeClaim
from controller.scheduling.pod import Pod

Obj = dict[str, Any]

# Methods, in Karpenter's order (controller.go), and the reasons they disrupt for (budgets' `reasons`).
EMPTINESS = "Emptiness"
STATIC_DRIFT = "StaticDrift"
DRIFT = "Drift"
MULTI_NODE_CONSOLIDATION = "MultiNodeConsolidation"
SINGLE_NODE_CONSOLIDATION = "SingleNodeConsolidation"
METHODS = (EMPTINESS, STATIC_DRIFT, DRIFT, MULTI_NODE_CONSOLIDATION, SINGLE_NODE_CONSOLIDATION)

REASON_EMPTY = "Empty"
REASON_DRIFTED = "Drifted"
REASON_UNDERUTILIZED = "Underutilized"
REASONS = (REASON_EMPTY, REASON_DRIFTED, REASON_UNDERUTILIZED)

DECISION_DELETE = "delete"
DECISION_REPLACE = "replace"

# karpy's own feature gates beyond Karpenter's (off by default, so defaults decide exactly as Karpenter does)
GATE_REBALANCE_DRIFT = "RebalanceRecommendationDrift"  # rebalance recommendation -> Drifted/RebalanceRecommendation
GATE_N_TO_M = "ManyToManyConsolidation"  # N candidates replaced by M < N cheaper NodeClaims (Karpenter: N -> 1)


@dataclass
class Options:
    """How a pass decides: the settings and gates that change it, and the clock its timeouts run on."""

    spot_to_spot: bool = False  # FEATURE_GATES SpotToSpotConsolidation
    many_to_many: bool = False  # karpy gate ManyToManyConsolidation
    preference_policy: str = "Respect"
    min_values_policy: str = "Strict"
    ignore_dra_requests: bool = True  # IGNORE_DRA_REQUESTS: DaemonSets that claim devices add no overhead
    multi_node_timeout: float = 60.0  # seconds; the best command found so far is returned
    single_node_timeout: float = 180.0
    clock: Callable[[], float] = time.monotonic  # for the timeouts only (budgets and ages use Snapshot.now)


@dataclass
class Snapshot:
    """The cluster as one pass sees it. Objects are the API's JSON dicts, read only.

    `instance_types` holds, per NodePool name, the instance types its NodeClass offers now (with offerings and
    prices): a candidate's price comes from its instance type, zone and capacity type, and replacements are chosen
    from them. `nodepool_not_ready` names the NodePools that cannot launch (their reason): they can still lose nodes
    to deletion but get no replacements. `drifted` adds drift reasons found outside the NodeClaims' own Drifted
    condition (the cloud provider's checks in the controller, karpy's own checks offline), by NodeClaim name.
    `disrupting` names NodeClaims an earlier command is already disrupting (not candidates, counted against budgets)."""

    now: float  # wall clock, epoch seconds: budgets' schedules, consolidateAfter, expireAfter
    nodepools: list[Obj] = field(default_factory=list)
    nodeclasses: dict[str, Obj] = field(default_factory=dict)
    nodeclaims: list[Obj] = field(default_factory=list)
    nodes: list[Obj] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)  # bound (spec.nodeName) and pending pods alike
    pdbs: list[Obj] = field(default_factory=list)
    daemonsets: list[Obj] = field(default_factory=list)
    instance_types: dict[str, list[InstanceType]] = field(default_factory=dict)
    nodepool_not_ready: dict[str, str] = field(default_factory=dict)
    volumes: VolumeTopology | None = None
    namespace_labels: dict[str, dict[str, str]] | None = None  # by Namespace name: resolves namespaceSelectors
    drifted: dict[str, str] = field(default_factory=dict)
    disrupting: set[str] = field(default_factory=set)
    # pods its builder already read into the scheduler's form (by namespace/name), so a pass converts them no more
    converted: dict[str, Pod] = field(default_factory=dict)


@dataclass
class Candidate:
    """A node a method may disrupt: its NodeClaim and Node, what it is and costs, and the pods that would move."""

    nodeclaim: Obj
    node: Obj
    nodepool: str
    instance_type: str
    capacity_type: str
    zone: str
    price: float  # per hour, from the NodePool's instance types
    disruption_cost: float
    reschedulable_pods: list[Obj] = field(default_factory=list)
    # 1 + the pods' eviction costs (no lifetime factor): Karpenter's RescheduleDisruptionCost, for emptiness,
    # the savings ratio and Balanced scoring
    reschedule_disruption_cost: float = 1.0
    instance: InstanceType | None = None  # the priced instance type (None when the NodePool does not offer it)

    @property
    def is_empty(self) -> bool:
        """No pod would have to move (Karpenter's IsEmpty)."""
        return self.reschedule_disruption_cost <= 1.0

    @property
    def savings_ratio(self) -> float:
        """Price per unit of disruption: consolidation tries the highest first (Karpenter's SavingsRatio)."""
        return self.price / self.reschedule_disruption_cost if self.reschedule_disruption_cost else 0.0

    @property
    def name(self) -> str:
        """The NodeClaim's name."""
        return str(self.nodeclaim["metadata"]["name"])

    @property
    def node_name(self) -> str:
        """The Node's name."""
        return str(self.node["metadata"]["name"])


@dataclass
class Replacement:
    """A NodeClaim a command launches before its candidates go; `planned` carries what NodeClaim creation needs
    (NodePool, requirements, instance-type options, pods for the requests)."""

    planned: PlannedNodeClaim

    @property
    def nodepool(self) -> str:
        return self.planned.node_pool

    @property
    def price(self) -> float:
        return self.planned.price_per_hour


@dataclass
class Command:
    """One decision: delete the candidates, or replace them with the replacements (launched and initialized first)."""

    method: str
    reason: str
    candidates: list[Candidate]
    replacements: list[Replacement] = field(default_factory=list)

    @property
    def decision(self) -> str:
        return DECISION_REPLACE if self.replacements else DECISION_DELETE

    @property
    def savings_per_hour(self) -> float:
        return sum(c.price for c in self.candidates) - sum(r.price for r in self.replacements)


@dataclass
class Blocked:
    """A node that is not a candidate, and why (Karpenter's DisruptionBlocked / Unconsolidatable messages)."""

    nodeclaim: str
    node: str
    reason: str
    unconsolidatable: bool = False  # an Unconsolidatable event rather than DisruptionBlocked


@dataclass
class Expired:
    """A NodeClaim past its expireAfter: deleted at once, without budgets or replacements."""

    nodeclaim: str
    node: str
    nodepool: str


@dataclass
class BudgetMapping:
    """One reason's budgets per NodePool (Karpenter's BuildDisruptionBudgetMapping): what they allow, how many of the
    pool's nodes already consume that (NotReady or being disrupted), what remains for this pass, the nodes counted."""

    allowed: dict[str, int] = field(default_factory=dict)
    consuming: dict[str, int] = field(default_factory=dict)
    remaining: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)


@dataclass
class Pass:
    """What one pass decided, and what the controller's events and metrics report about it."""

    method: str = ""  # the method whose commands these are ("" when none produced any)
    commands: list[Command] = field(default_factory=list)
    expired: list[Expired] = field(default_factory=list)
    blocked: list[Blocked] = field(default_factory=list)
    eligible: dict[str, int] = field(default_factory=dict)  # per method: candidates it could consider
    budgets: dict[str, BudgetMapping] = field(default_factory=dict)  # reason -> its budgets per NodePool
    timeouts: list[str] = field(default_factory=list)  # methods that hit their timeout this pass
    evaluation_seconds: dict[str, float] = field(default_factory=dict)  # per method

    @property
    def allowed(self) -> dict[tuple[str, str], int]:
        """(nodepool, reason) -> the disruptions its budgets still allow in this pass."""
        return {(pool, reason): n for reason, m in self.budgets.items() for pool, n in m.remaining.items()}
