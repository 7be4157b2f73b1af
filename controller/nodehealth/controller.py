"""Node repair (feature gate NodeRepair), as Karpenter's node health controller (pkg/controllers/node/health): a
managed Node whose condition matches a repair policy for longer than the policy tolerates has its NodeClaim deleted
forcefully (the termination timestamp set to now, so the drain deletes pods at once), unless more than 20 % of its
NodePool's nodes (of the cluster's, for a NodeClaim without a NodePool) are unhealthy: then NodeRepairBlocked."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from controller import metrics as M
from controller.api import conditions as C
from controller.api import labels as L
from controller.cloud.repair import RepairPolicy
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import NotFoundError
from controller.kube.events import Recorder
from controller.kube.workqueue import Result
from controller.state.cluster import Cluster
from controller.state.views import NodeClaimView, NodeView

log = logging.getLogger("karpy.node.health")

Obj = dict[str, Any]

ALLOWED_UNHEALTHY_PERCENT = 20
BLOCKED_REQUEUE = 5 * 60.0


def _condition(node: Obj, type_: str) -> Obj | None:
    return next((c for c in (node.get("status") or {}).get("conditions") or []
                 if isinstance(c, dict) and c.get("type") == type_), None)


def unhealthy_condition(node: Obj, policies: Sequence[RepairPolicy]) -> tuple[Obj, float] | None:
    """The matching condition whose toleration ends first, and the instant it ends (None when healthy)."""
    found: tuple[Obj, float] | None = None
    for policy in policies:
        cond = _condition(node, policy.condition_type)
        if cond is None or cond.get("status") != policy.condition_status:
            continue
        since = C.parse_time(cond.get("lastTransitionTime"))
        ends = (since or 0.0) + policy.toleration
        if found is None or ends < found[1]:
            found = (cond, ends)
    return found


def healthy_enough(nodes: Sequence[Obj], policies: Sequence[RepairPolicy]) -> bool:
    """Whether at most 20 % (rounded up) of the nodes match a repair policy, as Karpenter's areNodesHealthy."""
    unhealthy = sum(1 for n in nodes if unhealthy_condition(n, policies) is not None)
    return unhealthy <= math.ceil(len(nodes) * ALLOWED_UNHEALTHY_PERCENT / 100)


class NodeHealthController:
    """Reconciles one Node by name (queued on Node changes)."""

    def __init__(self, cluster: Cluster, client: KubeClient, recorder: Recorder, policies: Sequence[RepairPolicy],
                 clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self.client = client
        self.recorder = recorder
        self.policies = tuple(policies)
        self.clock = clock

    def reconcile(self, name: str) -> Result:
        """One pass: requeue until an unhealthy condition outlasts its toleration, then repair or report blocked."""
        node = self.cluster.node(name)
        if node is None:
            return Result()
        claim = self.cluster.nodeclaim_for_node(node)
        if claim is None or claim.deleting:
            return Result()
        found = unhealthy_condition(node, self.policies)
        if found is None:
            return Result()
        cond, ends = found
        now = self.clock()
        if now < ends:
            return Result(requeue_after=ends - now)
        pool = claim.nodepool
        if pool:
            peers = [n for n in self.cluster.nodes() if n.nodepool == pool]
            if not healthy_enough(peers, self.policies):
                message = f"more than {ALLOWED_UNHEALTHY_PERCENT}% nodes are unhealthy in the nodepool"
                for obj in (node, claim, self.cluster.nodepool(pool)):
                    if obj is not None:
                        self.recorder.publish(obj, "Warning", "NodeRepairBlocked", message)
                return Result(requeue_after=BLOCKED_REQUEUE)
        elif not healthy_enough(self.cluster.nodes(), self.policies):
            message = f"more then {ALLOWED_UNHEALTHY_PERCENT}% nodes are unhealthy in the cluster"
            for obj in (node, claim):
                self.recorder.publish(obj, "Warning", "NodeRepairBlocked", message)
            return Result(requeue_after=BLOCKED_REQUEUE)
        self._repair(claim, node, cond, now)
        return Result()

    def _repair(self, claim: NodeClaimView, node: NodeView, cond: Obj, now: float) -> None:
        """Forceful deletion: the termination timestamp set to now (unless one already passed), then delete."""
        stamped = C.parse_time(claim.annotations.get(L.NODECLAIM_TERMINATION_TIMESTAMP))
        try:
            if stamped is None or stamped > now:
                self.client.patch(R.NODECLAIMS, claim.name, {"metadata": {
                    "annotations": {L.NODECLAIM_TERMINATION_TIMESTAMP: C.format_time(now)}}})
            self.client.delete(R.NODECLAIMS, claim.name, uid=claim.uid or None)
        except NotFoundError:
            return
        log.info("deleting unhealthy node", extra={"controller": "node.health", "NodeClaim": {"name": claim.name},
                                                  "Node": {"name": node.name},
                                                  "condition": cond.get("type")})
        M.nodeclaim_disrupted(claim, "unhealthy")
