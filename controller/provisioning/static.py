"""Static NodePools (spec.replicas, feature gate StaticCapacity): NodeClaims to the replica count, whatever the pods,
as Karpenter's static provisioning controller makes them (pkg/controllers/static/provisioning).

The dynamic provisioner leaves these pools alone; this controller creates the NodeClaims a static pool lacks, within
its `nodes` limit, from the pool's template requirements alone (the cloud provider picks the instance type). Scaling
down and replacing disrupted NodeClaims are the disruption side's.
"""

from __future__ import annotations

import logging
from typing import Any

from controller import metrics as M
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.workqueue import Result
from controller.provisioning import inputs
from controller.provisioning.nodeclaimtemplate import nodeclaim_manifest
from controller.state.cluster import Cluster, is_true
from controller.state.views import NodeClaimView

log = logging.getLogger("karpy.static")
REQUEUE_SATISFIED = 60.0  # Karpenter looks again after a minute, so a missed event is caught
REQUEUE_LIMITED = 30.0  # and after 30 s when the node limit held it back
REQUEUE_UNSYNCED = 1.0


def node_limit(nodepool: dict[str, Any]) -> int | None:
    """The pool's `nodes` limit (None when it has none or it cannot be read)."""
    raw = ((nodepool.get("spec") or {}).get("limits") or {}).get("nodes")
    if raw is None:
        return None
    try:
        return int(str(raw))
    except ValueError:
        return None


class StaticProvisioner:
    """Reconciles a static NodePool by name: creates the NodeClaims it lacks."""

    def __init__(self, cluster: Cluster, client: KubeClient) -> None:
        self.cluster = cluster
        self.client = client

    def counts(self, name: str) -> tuple[int, int, int]:
        """(active, deleting, pending disruption) NodeClaims of the pool, as Karpenter's NodePoolState counts them:
        deleting ones have a deletionTimestamp; pending disruption ones are not deleted yet but their Node carries
        karpenter.sh/disrupted."""
        active = deleting = pending = 0
        for claim in self.cluster.nodeclaims_for_nodepool(name):
            if claim.deleting:
                deleting += 1
                continue
            node = self.cluster.node_for_provider_id(claim.provider_id) if claim.provider_id else None
            if node is not None and node.disrupted:
                pending += 1
            else:
                active += 1
        return active, deleting, pending

    def reconcile(self, name: str) -> Result:
        """One pass over a NodePool: nothing unless it is static, Ready and not being deleted."""
        nodepool = self.cluster.nodepool(name)
        if nodepool is None or (nodepool.get("metadata") or {}).get("deletionTimestamp"):
            return Result()
        replicas = (nodepool.get("spec") or {}).get("replicas")
        if replicas is None or not is_true(nodepool, "Ready"):
            return Result()
        if not self.cluster.synced():
            return Result(requeue_after=REQUEUE_UNSYNCED)  # counting from a partial view would over-provision
        active, deleting, pending = self.counts(name)
        desired = int(replicas)
        if active + pending >= desired:
            return Result(requeue_after=REQUEUE_SATISFIED)
        limit = node_limit(nodepool)
        room = desired - active
        if limit is not None:
            room = min(room, limit - (active + deleting + pending))
        if room <= 0:
            log.info("nodepool node limit reached", extra={"controller": "static.provisioning",
                                                           "NodePool": {"name": name}})
            return Result(requeue_after=REQUEUE_LIMITED)
        log.info("provisioning nodeclaims to satisfy replica count", extra={
            "controller": "static.provisioning", "NodePool": {"name": name}, "current": active, "desired": desired,
            "provision-count": room})
        pool = inputs.node_pool(nodepool, [], {})
        for _ in range(room):
            body = nodeclaim_manifest(nodepool, pool.requirements, None, {})
            created = self.client.create(R.NODECLAIMS, body)  # an error: the work queue backs off and tries again
            claim = created["metadata"]["name"]
            self.cluster.mark_created(claim)
            log.info("created nodeclaim", extra={"controller": "static.provisioning", "NodePool": {"name": name},
                                                 "NodeClaim": {"name": claim}})
            M.NODECLAIMS_CREATED.labels(reason="provisioned", nodepool=name, min_values_relaxed="false").inc()
        return Result(requeue_after=REQUEUE_SATISFIED)

    @staticmethod
    def is_static(nodepool: dict[str, Any] | None) -> bool:
        """Whether a NodePool is static (has spec.replicas)."""
        return nodepool is not None and (nodepool.get("spec") or {}).get("replicas") is not None

    def pool_of(self, claim: dict[str, Any]) -> str:
        """The static NodePool a NodeClaim belongs to ("" when none)."""
        pool = NodeClaimView.of(claim).nodepool  # an informer event's object (a view) or a manifest
        return pool if pool and self.is_static(self.cluster.nodepool(pool)) else ""
