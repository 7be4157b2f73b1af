"""The NodeClaim finalizer karpenter.sh/termination: Karpenter's nodeclaim.lifecycle finalize
(pkg/controllers/nodeclaim/lifecycle/controller.go), run here as its own nodeclaim.termination controller (as Karpenter
ran it before the finalizer moved into lifecycle) beside controller/lifecycle/, which is the launch side. Each pass:

1. annotates karpenter.sh/nodeclaim-termination-timestamp = deletionTimestamp + spec.terminationGracePeriod (once);
2. when the NodeClaim is Registered, deletes its Node(s) and waits until they are gone: the Node's own finalizer
   (node termination, controller/termination/controller.py) taints, drains, waits for volumes and terminates the
   instance;
3. asks the cloud to terminate the instance (InstanceTerminating) and waits until it is gone;
4. drops the finalizer, counted in karpenter_nodeclaims_terminated_total.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller import metrics as M
from controller.api import labels as L
from controller.cloud.provider import CloudProvider
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import ConflictError, InvalidError, NotFoundError
from controller.kube.events import Recorder
from controller.kube.workqueue import Result
from controller.state.cluster import Cluster
from controller.state.views import NodeClaimView, NodeView
from controller.termination import drain as D
from controller.termination.controller import read
from controller.termination.instance import (
    DISRUPTION_REASON,
    INSTANCE_TERMINATING,
    terminate_instance,
    write_conditions,
)

log = logging.getLogger("karpy.termination")

Obj = dict[str, Any]


@dataclass
class NodeClaimTerminationController:
    """Finalizes deleted NodeClaims: their Nodes first, then their instance, then the finalizer."""

    client: KubeClient
    cluster: Cluster
    cloud: CloudProvider
    recorder: Recorder
    clock: Callable[[], float] = time.time

    def reconcile(self, name: str) -> Result:
        """One pass over a NodeClaim: nothing unless it is deleted and still carries the termination finalizer."""
        claim = read(self.client, R.NODECLAIMS, name, NodeClaimView)
        if claim is None or not claim.deleting or L.TERMINATION_FINALIZER not in claim.finalizers:
            return Result()
        extra: Obj = {"controller": "nodeclaim.termination", "NodeClaim": {"name": name}}
        annotated = self._ensure_termination_timestamp(claim, extra)
        if annotated is None:  # another writer (node repair, instance health) moved first: look again
            return Result(requeue_after=0.1)
        claim = annotated
        pid = claim.provider_id
        # Nodes are deleted only once the NodeClaim is Registered, as Karpenter does (a Node deleted before it has
        # the termination finalizer could leak its lease); the instance's termination removes an unregistered one
        if claim.is_true("Registered"):
            nodes = self._nodes(claim, pid)
            for node in nodes:
                if not node.deleting:
                    try:
                        self.client.delete(R.NODES, node.name)
                    except NotFoundError:
                        continue
            if nodes:
                return Result()  # the Node's deletion (watched) brings the NodeClaim back here
        if pid:
            stored = copy.deepcopy(dict(claim.status))
            status = copy.deepcopy(stored)
            now = self.clock()
            gone = terminate_instance(self.cloud, pid, status, now, claim.metadata.get("generation"))
            if status != stored:
                patched = write_conditions(self.client, claim, status)
                if patched is None:
                    return Result()
                if isinstance(patched, Result):
                    return patched
                claim = patched
            if not gone:
                return Result(requeue_after=D.INSTANCE_POLL)
            # from InstanceTerminating's transition until the cloud says the instance is gone
            began = D.parse_time((D.get_condition(status, INSTANCE_TERMINATING) or {}).get("lastTransitionTime"))
            if began is not None:
                M.NODECLAIMS_INSTANCE_TERMINATION_DURATION.labels(nodepool=claim.nodepool).observe(
                    max(now - began, 0.0))
        return Result() if self._remove_finalizer(claim, extra) else Result(requeue_after=0.1)

    def _ensure_termination_timestamp(self, claim: NodeClaimView, extra: Obj) -> NodeClaimView | None:
        """Annotate a deleted NodeClaim with deletionTimestamp + terminationGracePeriod (once; the deadline never
        moves afterwards), locked on the resourceVersion read so a deadline another controller set meanwhile (node
        repair's "now") is never overwritten; None on such a conflict."""
        if L.NODECLAIM_TERMINATION_TIMESTAMP in claim.annotations:
            return claim
        value = D.termination_timestamp(claim)
        if value is None:
            return claim
        try:
            patched = NodeClaimView.of(self.client.patch(R.NODECLAIMS, claim.name, {"metadata": {
                "annotations": {L.NODECLAIM_TERMINATION_TIMESTAMP: value},
                "resourceVersion": claim.resource_version or None}}))
        except NotFoundError:
            return claim
        except ConflictError:
            return None
        log.info("annotated nodeclaim", extra={**extra, L.NODECLAIM_TERMINATION_TIMESTAMP: value})
        self.recorder.publish(patched, "Warning", "TerminationGracePeriodExpiring",
                              f"All pods will be deleted by {value}")
        return patched

    def _nodes(self, claim: NodeClaimView, pid: str) -> list[NodeView]:
        """Every Node of the NodeClaim (by providerID: by status.nodeName and from the cache), read fresh."""
        if not pid:
            return []
        names = {claim.node_name}
        cached = self.cluster.node_for_provider_id(pid)
        if cached is not None:
            names.add(cached.name)
        nodes = [read(self.client, R.NODES, n, NodeView) for n in sorted(names - {""})]
        return [n for n in nodes if n is not None and n.provider_id == pid]

    def _remove_finalizer(self, claim: NodeClaimView, extra: Obj) -> bool:
        """Drop karpenter.sh/termination from the NodeClaim with a JSON patch that tests the entry it removes, so a
        finalizer someone else added meanwhile is never lost; False when the list kept changing under us."""
        for _ in range(3):
            finalizers = claim.finalizers
            if L.TERMINATION_FINALIZER not in finalizers:
                return True
            i = finalizers.index(L.TERMINATION_FINALIZER)
            patch = [{"op": "test", "path": f"/metadata/finalizers/{i}", "value": L.TERMINATION_FINALIZER},
                     {"op": "remove", "path": f"/metadata/finalizers/{i}"}]
            try:
                self.client.patch(R.NODECLAIMS, claim.name, patch, patch_type="json")
            except NotFoundError:
                return True
            except InvalidError:  # the list changed under us: read it again
                fresh = read(self.client, R.NODECLAIMS, claim.name, NodeClaimView)
                if fresh is None:
                    return True
                claim = fresh
                continue
            log.info("deleted nodeclaim", extra=extra)
            labels = claim.labels
            reason = claim.condition(DISRUPTION_REASON) or {}
            M.NODECLAIMS_TERMINATED.labels(
                nodepool=claim.nodepool, capacity_type=labels.get(L.CAPACITY_TYPE, ""), zone=labels.get(L.ZONE, ""),
                reason=str(reason.get("reason") or "") if reason.get("status") == "True" else "").inc()
            deleted = claim.deletion_timestamp
            if deleted is not None:
                M.NODECLAIMS_TERMINATION_DURATION.labels(nodepool=claim.nodepool).observe(
                    max(self.clock() - deleted, 0.0))
            return True
        return False
