"""Expiration (Karpenter's nodeclaim/expiration): a NodeClaim past spec.expireAfter, counted from its creation, is
deleted at once: no budget, no replacement first. The graceful termination then drains it, honouring PDBs and
do-not-disrupt until terminationGracePeriod."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from controller import metrics as M
from controller.api import conditions as C
from controller.api import labels as L
from controller.api.pods import owned_by_daemonset
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import ConflictError, NotFoundError
from controller.kube.workqueue import Result
from controller.nodeclaim.disruption import DisruptionRuleError, parse_go_duration
from controller.state.cluster import Cluster
from controller.state.views import PodView

log = logging.getLogger("karpy.nodeclaim.expiration")

Obj = dict[str, Any]


def expires_at(nodeclaim: Obj) -> float | None:
    """When the NodeClaim expires (creation + spec.expireAfter, epoch seconds); None for Never, unset or no
    creation time. Raises DisruptionRuleError naming the field when expireAfter cannot be read."""
    after = (nodeclaim.get("spec") or {}).get("expireAfter")
    if after is None:
        return None
    seconds = parse_go_duration(after, "spec.expireAfter")
    created = C.parse_time((nodeclaim.get("metadata") or {}).get("creationTimestamp"))
    if seconds is None or created is None:
        return None
    return created + seconds


def termination_mode(nodeclaim: Obj) -> str:
    """Karpenter's termination_mode label: graceful without terminationGracePeriod, forceful at 0, else eventual."""
    grace = (nodeclaim.get("spec") or {}).get("terminationGracePeriod")
    if grace is None:
        return "graceful"
    try:
        seconds = parse_go_duration(grace, "spec.terminationGracePeriod")
    except DisruptionRuleError:
        return "graceful"
    return "forceful" if seconds is not None and seconds <= 0 else "eventual"


def reschedulable_pods(pods: Sequence[Mapping[str, Any]]) -> int:
    """Pods that would move: not DaemonSet-owned, not mirror pods, not terminal."""
    n = 0
    for raw in pods:
        pod = PodView.of(raw)
        if owned_by_daemonset(pod) or pod.mirror or pod.terminal:
            continue
        n += 1
    return n


class ExpirationController:
    """Deletes NodeClaims past expireAfter; requeues the others for the moment they expire."""

    def __init__(self, cluster: Cluster, client: KubeClient, clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self.client = client
        self.clock = clock
        # uids this process deleted: a pass on a cache copy from before the delete must not count it twice
        self._deleted: dict[str, float] = {}

    def reconcile(self, name: str) -> Result:
        """One pass over a NodeClaim."""
        claim = self.cluster.nodeclaim(name)
        if claim is None or claim.deleting:
            return Result()
        try:
            at = expires_at(claim)
        except DisruptionRuleError as e:
            log.error("cannot evaluate expiration", extra={"controller": "nodeclaim.expiration",
                                                           "NodeClaim": {"name": name}, "error": str(e)})
            return Result()
        if at is None:
            return Result()
        now = self.clock()
        if now < at:
            return Result(requeue_after=at - now)
        uid = claim.uid or name
        if uid in self._deleted:
            return Result()
        try:
            self.client.delete(R.NODECLAIMS, name, uid=claim.uid or None)
        except (NotFoundError, ConflictError):
            return Result()
        self._deleted = {u: t for u, t in self._deleted.items() if now - t < 600}
        self._deleted[uid] = now
        node_name = claim.node_name
        extra: dict[str, Any] = {"controller": "nodeclaim.expiration", "NodeClaim": {"name": name}}
        if node_name:
            extra["Node"] = {"name": node_name}
        log.info("deleting expired nodeclaim", extra=extra)
        labels = claim.labels
        values = {"reason": "expired", "nodepool": labels.get(L.NODEPOOL, ""),
                  "capacity_type": labels.get(L.CAPACITY_TYPE, ""), "consolidation_policy": "",
                  "termination_mode": termination_mode(claim)}
        M.NODECLAIMS_DISRUPTED.labels(**values).inc()
        M.NODES_DISRUPTED.labels(reason="expired", nodepool=values["nodepool"],
                                 capacity_type=values["capacity_type"]).inc()
        pods = self.cluster.pods_on_node(node_name) if node_name else []
        M.PODS_DISRUPTION_INITIATED.labels(**values).inc(reschedulable_pods(pods))
        return Result()
