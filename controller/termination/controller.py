"""Termination of NodeClaims and their Nodes, as Karpenter does it: taint the node karpenter.sh/disrupted:NoSchedule,
drain it through the Eviction API tier by tier (PDBs honoured, do-not-disrupt pods waited on, everything deleted at
the terminationGracePeriod deadline), wait for volumes to detach, terminate the instance, then drop the finalizers.

The evictions themselves go through the eviction queue (controller/termination/eviction.py), the pure decisions
live in controller/termination/drain.py.

Every pass starts from fresh reads of the NodeClaim and the Node and only moves forward, so a crash anywhere and a
rerun continue where the last pass stopped; NodeClaim conditions are written once per pass to the status subresource.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from controller import metrics as M
from controller.api import labels as L
from controller.cloud.aws.errors import NodeClaimNotFoundError
from controller.cloud.provider import CloudProvider
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import ConflictError, InvalidError, NotFoundError
from controller.kube.events import Recorder
from controller.kube.workqueue import Result
from controller.state.cluster import Cluster
from controller.state.views import NodeClaimView, NodeView, PodView
from controller.termination import drain as D
from controller.termination.eviction import EvictionQueue, pod_key

log = logging.getLogger("karpy.termination")

Obj = dict[str, Any]

DRAINED = "Drained"
VOLUMES_DETACHED = "VolumesDetached"
INSTANCE_TERMINATING = "InstanceTerminating"
DISRUPTION_REASON = "DisruptionReason"
_LOCK_STRIPES = 64


def _pretty_names(names: list[str], limit: int = 5) -> str:
    """Up to `limit` names, then how many more (as Karpenter's pretty.Slice)."""
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} other(s)"


class Terminator:
    """Finalizes deleted NodeClaims and deleted karpy Nodes (finalizer karpenter.sh/termination)."""

    def __init__(self, client: KubeClient, cluster: Cluster, cloud: CloudProvider, recorder: Recorder,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.cluster = cluster
        self.cloud = cloud
        self.recorder = recorder
        self.clock = clock
        self._locks = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        self.evictions = EvictionQueue(client, recorder)

    # ---- entry points ------------------------------------------------------------------------------------------
    def reconcile_nodeclaim(self, name: str) -> Result:
        """One pass over a NodeClaim: nothing unless it is deleted and still carries the termination finalizer."""
        with self._lock(f"nodeclaim/{name}"):
            claim = self._get_claim(name)
            if claim is None or not claim.deleting or L.TERMINATION_FINALIZER not in claim.finalizers:
                return Result()
            return self._finalize_claim(claim, "nodeclaim.termination")

    def reconcile_node(self, name: str) -> Result:
        """One pass over a Node: a deleted Node with the termination finalizer deletes its NodeClaim and is then
        terminated with it; a Node without a NodeClaim is drained on its own and let go."""
        node = self._get_node(name)
        if node is None or not node.deleting or L.TERMINATION_FINALIZER not in node.finalizers:
            return Result()
        pid = node.provider_id
        claim = self.cluster.nodeclaim_for_provider_id(pid) if pid else None
        if claim is not None:
            claim_name = claim.name
            if not claim.deleting:
                with contextlib.suppress(NotFoundError):
                    self.client.delete(R.NODECLAIMS, claim_name)
            with self._lock(f"nodeclaim/{claim_name}"):
                fresh = self._get_claim(claim_name)
                if fresh is not None and fresh.deleting and L.TERMINATION_FINALIZER in fresh.finalizers \
                        and fresh.provider_id in ("", pid):
                    return self._finalize_claim(fresh, "node.termination")
        with self._lock(f"node/{name}"):
            node = self._get_node(name)
            if node is None or not node.deleting or L.TERMINATION_FINALIZER not in node.finalizers:
                return Result()
            return self._finalize_node(node)

    # ---- the NodeClaim flow ------------------------------------------------------------------------------------
    def _finalize_claim(self, claim: NodeClaimView, controller: str) -> Result:
        name = claim.name
        extra: Obj = {"controller": controller, "NodeClaim": {"name": name}}
        claim = self._ensure_termination_timestamp(claim, extra)
        deadline = D.termination_deadline(claim)
        pid = claim.provider_id
        if not pid:  # never launched: nothing to drain or terminate
            return Result() if self._remove_claim_finalizer(claim, extra) else Result(requeue_after=0.1)
        node = self._node_for_claim(claim, pid)
        if node is not None:
            extra["Node"] = {"name": node.name}
        generation = claim.metadata.get("generation")
        stored = copy.deepcopy(dict(claim.status))
        status = copy.deepcopy(stored)
        now = self.clock()
        result: Result | None = None
        gone = False
        drained_now = False
        if node is not None:
            if not node.ready and self._instance_gone(pid):
                gone = True  # the kubelet is not running and the instance is gone: nothing left to drain
            else:
                node = self._taint(node, extra)
                annotation = claim.annotations.get(L.NODECLAIM_TERMINATION_TIMESTAMP)
                if deadline is not None:
                    self.recorder.publish(node, "Warning", "TerminationGracePeriodExpiring",
                                          f"All pods will be deleted by {annotation}")
                result, drained_now = self._drain(node, claim, status, deadline, now, extra)
                if result is None:
                    result = self._await_volumes(node, status, deadline, now, generation)
        if result is None and not gone:
            result = self._terminate_instance(pid, status, now, generation)
            if result is None:
                # Karpenter: from InstanceTerminating's transition until the cloud says the instance is gone
                began = D.parse_time((D.get_condition(status, INSTANCE_TERMINATING) or {}).get("lastTransitionTime"))
                if began is not None:
                    M.NODECLAIMS_INSTANCE_TERMINATION_DURATION.labels(
                        nodepool=claim.labels.get(L.NODEPOOL, "")).observe(max(now - began, 0.0))
        if result is not None:
            if status != stored:
                patched = self._write_status(claim, status)
                if patched is None:
                    return Result()
                if isinstance(patched, Result):
                    return patched
            if drained_now:
                M.NODES_DRAINED.labels(nodepool=claim.labels.get(L.NODEPOOL, "")).inc()
            return result
        if drained_now:
            M.NODES_DRAINED.labels(nodepool=claim.labels.get(L.NODEPOOL, "")).inc()
        if node is not None:
            self._delete_node(node, extra, claim.deletion_timestamp)
        return Result() if self._remove_claim_finalizer(claim, extra) else Result(requeue_after=0.1)

    def _ensure_termination_timestamp(self, claim: NodeClaimView, extra: Obj) -> NodeClaimView:
        """Annotate a deleted NodeClaim with deletionTimestamp + terminationGracePeriod (once; the deadline never
        moves afterwards)."""
        if L.NODECLAIM_TERMINATION_TIMESTAMP in claim.annotations:
            return claim
        value = D.termination_timestamp(claim)
        if value is None:
            return claim
        try:
            patched = self.client.patch(R.NODECLAIMS, claim.name,
                                        {"metadata": {"annotations": {L.NODECLAIM_TERMINATION_TIMESTAMP: value}}})
        except NotFoundError:
            return claim
        log.info("annotated nodeclaim", extra={**extra, L.NODECLAIM_TERMINATION_TIMESTAMP: value})
        self.recorder.publish(patched, "Warning", "TerminationGracePeriodExpiring",
                              f"All pods will be deleted by {value}")
        return NodeClaimView.of(patched)

    def _node_for_claim(self, claim: NodeClaimView, pid: str) -> NodeView | None:
        """The NodeClaim's Node, read fresh: by status.nodeName, else by providerID from the cache."""
        name = claim.node_name
        if not name:
            cached = self.cluster.node_for_provider_id(pid)
            name = cached.name if cached is not None else ""
        if not name:
            return None
        node = self._get_node(name)
        if node is None or node.provider_id not in ("", pid):
            return None
        return node

    def _write_status(self, claim: NodeClaimView, status: Obj) -> Obj | Result | None:
        """Write the conditions to the status subresource, locked on the resourceVersion read at the start of the
        pass (a merge patch replaces the whole list); a conflict means another pass moved first: look again soon."""
        body = {"metadata": {"resourceVersion": (claim.resource_version or None)},
                "status": {"conditions": status.get("conditions") or []}}
        try:
            return self.client.patch(R.NODECLAIMS, claim.name, body, subresource="status")
        except NotFoundError:
            return None
        except ConflictError:
            return Result(requeue_after=0.1)

    def _remove_claim_finalizer(self, claim: NodeClaimView, extra: Obj) -> bool:
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
                fresh = self._get_claim(claim.name)
                if fresh is None:
                    return True
                claim = fresh
                continue
            log.info("deleted nodeclaim", extra=extra)
            labels = claim.labels
            reason = claim.condition(DISRUPTION_REASON) or {}
            M.NODECLAIMS_TERMINATED.labels(
                nodepool=labels.get(L.NODEPOOL, ""), capacity_type=labels.get(L.CAPACITY_TYPE, ""),
                zone=labels.get(L.ZONE, ""),
                reason=str(reason.get("reason") or "") if reason.get("status") == "True" else "").inc()
            deleted = claim.deletion_timestamp
            if deleted is not None:
                M.NODECLAIMS_TERMINATION_DURATION.labels(nodepool=labels.get(L.NODEPOOL, "")).observe(
                    max(self.clock() - deleted, 0.0))
            return True
        return False

    # ---- the Node flow -----------------------------------------------------------------------------------------
    def _finalize_node(self, node: NodeView) -> Result:
        """A deleted Node without a NodeClaim: drain it (no deadline), wait for its volumes, let it go."""
        extra: Obj = {"controller": "node.termination", "Node": {"name": node.name}}
        pid = node.provider_id
        if not (not node.ready and pid and self._instance_gone(pid)):
            node = self._taint(node, extra)
            now = self.clock()
            scratch: Obj = {}
            result, _ = self._drain(node, None, scratch, None, now, extra)
            if result is None:
                result = self._await_volumes(node, scratch, None, now, None)
            if result is not None:
                return result
        self._remove_node_finalizer(node, extra)
        return Result()

    def _taint(self, node: NodeView, extra: Obj) -> NodeView:
        """Idempotently taint karpenter.sh/disrupted:NoSchedule (replacing that key with another effect) and label
        node.kubernetes.io/exclude-from-external-load-balancers, in one patch."""
        need_label = node.labels.get(D.EXCLUDE_LB_LABEL) != D.EXCLUDE_LB_VALUE
        need_taint = not D.has_disrupted_taint(node)
        if not need_label and not need_taint:
            return node
        taints = [dict(t) for t in node.taints]
        same_key = [t for t in taints if t.get("key") == D.DISRUPTED_TAINT["key"]]
        label_patch = {D.EXCLUDE_LB_LABEL: D.EXCLUDE_LB_VALUE}
        if need_taint and same_key:
            # the key is there with another effect: replace the list, locked on the resourceVersion we read
            new_taints = [t for t in taints if t.get("key") != D.DISRUPTED_TAINT["key"]] + [dict(D.DISRUPTED_TAINT)]
            body: Obj = {"metadata": {"labels": label_patch, "resourceVersion": (node.resource_version or None)},
                         "spec": {"taints": new_taints}}
            patched = self.client.patch(R.NODES, node.name, body)
        else:
            body = {"metadata": {"labels": label_patch}}
            if need_taint:
                body["spec"] = {"taints": [dict(D.DISRUPTED_TAINT)]}  # strategic merge: keyed by taint key
            patched = self.client.patch(R.NODES, node.name, body, patch_type="strategic")
        if need_taint:
            log.info("tainted node", extra={**extra, "taint.Key": D.DISRUPTED_TAINT["key"], "taint.Value": "",
                                            "taint.Effect": D.DISRUPTED_TAINT["effect"]})
        return NodeView.of(patched)

    def _remove_node_finalizer(self, node: NodeView, extra: Obj, requested: float | None = None) -> None:
        """Drop karpenter.sh/termination from the Node (a strategic merge patch removes just that entry)."""
        try:
            self.client.patch(R.NODES, node.name,
                              {"metadata": {"$deleteFromPrimitiveList/finalizers": [L.TERMINATION_FINALIZER]}},
                              patch_type="strategic")
        except NotFoundError:  # someone else let it go
            return
        self._node_terminated(node, extra, requested)

    def _delete_node(self, node: NodeView, extra: Obj, requested: float | None = None) -> None:
        """The instance is gone: delete the Node if nobody has, and drop our finalizer so it goes."""
        if not node.deleting:
            try:
                self.client.delete(R.NODES, node.name)
            except NotFoundError:
                return
        if L.TERMINATION_FINALIZER in node.finalizers:
            self._remove_node_finalizer(node, extra, requested)
        else:
            self._node_terminated(node, extra, requested)

    def _node_terminated(self, node: NodeView, extra: Obj, requested: float | None = None) -> None:
        """Log and count a Node let go; its termination took from its deletion (or its NodeClaim's) until now."""
        log.info("deleted node", extra=extra)
        labels = node.labels
        M.NODES_TERMINATED.labels(nodepool=labels.get(L.NODEPOOL, ""), zone=labels.get(L.ZONE, "")).inc()
        since = node.deletion_timestamp or requested
        if since is not None:
            M.NODES_TERMINATION_DURATION.labels(nodepool=labels.get(L.NODEPOOL, "")).observe(
                max(self.clock() - since, 0.0))
        created = node.created
        if created is not None:
            M.NODES_LIFETIME_DURATION.labels(nodepool=labels.get(L.NODEPOOL, "")).observe(
                max(self.clock() - created, 0.0))

    # ---- drain -------------------------------------------------------------------------------------------------
    def _drain(self, node: NodeView, claim: NodeClaimView | None, status: Obj, deadline: float | None, now: float,
               extra: Obj) -> tuple[Result | None, bool]:
        """One drain pass; (None, whether Drained turned True now) once the node is drained, else a requeue."""
        generation = claim.metadata.get("generation") if claim is not None else None
        if claim is not None and D.get_condition(status, DRAINED) is None:
            D.set_condition(status, DRAINED, "Unknown", "Draining", "Draining", now, generation)
        pods = self.cluster.pods_on_node(node.name)
        plan = D.plan_drain(pods, deadline, now)
        reason = self._eviction_reason(claim)
        for pod in plan.delete:
            assert deadline is not None
            self._force_delete(pod, deadline, now, reason, extra)
        for pod in plan.evict:
            self.evictions.evict(pod, node, now, reason)
        if not plan.drained:
            self.recorder.publish(node, "Warning", "FailedDraining",
                                  f"Failed to drain node, {len(plan.waiting)} pods are waiting to be evicted")
            wait = self.evictions.next_try(plan.evict, now)
            delay = D.DRAIN_REQUEUE if wait is None else min(max(wait, 0.05), D.DRAIN_REQUEUE)
            return Result(requeue_after=delay), False
        if claim is None:
            return None, False
        cond = D.get_condition(status, DRAINED) or {}
        if cond.get("status") == "Unknown":
            since = D.parse_time(cond.get("lastTransitionTime"))
            elapsed = now - since if since is not None else D.MIN_DRAIN_TIME
            if elapsed < D.MIN_DRAIN_TIME:  # pods bound just before the taint was seen get their chance
                return Result(requeue_after=min(D.DRAIN_REQUEUE, D.MIN_DRAIN_TIME - elapsed)), False
        was_true = cond.get("status") == "True"
        D.set_condition(status, DRAINED, "True", DRAINED, "", now, generation)
        return None, not was_true

    def _eviction_reason(self, claim: NodeClaimView | None) -> str:
        """Why pods are evicted, for the Evicted event and pods_drained_total (Karpenter's wording)."""
        cond = claim.condition(DISRUPTION_REASON) if claim is not None else None
        if cond is not None and cond.get("status") == "True" and cond.get("reason"):
            return str(cond["reason"])
        return "Forceful Termination"

    def _force_delete(self, pod: Obj, deadline: float, now: float, reason: str, extra: Obj) -> None:
        """Delete a pod whose grace period would outlast the node's deadline, with what is left of it (bypassing its
        PDB and do-not-disrupt)."""
        key = pod_key(pod)
        view = PodView.of(pod)
        if self.evictions.acted_recently(key, now):
            return
        grace = D.force_delete_grace(deadline, now)
        tgps = view.spec.get("terminationGracePeriodSeconds")
        self.recorder.publish(pod, "Normal", "Disrupted",
                              f"Deleting the pod to accommodate the terminationTime {D.format_time(deadline)} of the "
                              f"node. The pod was granted {grace} seconds of grace-period of its {tgps} "
                              "terminationGracePeriodSeconds. This bypasses the PDB of the pod and the do-not-disrupt "
                              "annotation.")
        try:
            self.client.delete(R.PODS, view.name, view.namespace, grace_period_seconds=grace, uid=view.uid or None)
        except (NotFoundError, ConflictError):
            self.evictions.acted(key, now)
            return
        self.evictions.acted(key, now)
        log.debug("deleting pod", extra={**extra, "namespace": view.namespace, "name": view.name,
                                         "pod.terminationGracePeriodSeconds": tgps,
                                         "delete.gracePeriodSeconds": grace,
                                         "nodeclaim.terminationTime": D.format_time(deadline)})
        M.PODS_DRAINED.labels(reason=reason).inc()

    # ---- volumes and the instance ------------------------------------------------------------------------------
    def _await_volumes(self, node: NodeView, status: Obj, deadline: float | None, now: float,
                       generation: int | None) -> Result | None:
        """Wait for the node's VolumeAttachments to go (those of undrainable pods excepted), until the deadline."""
        node_name = node.name
        on_node = self.cluster.volume_attachments_on_node(node_name)  # an indexed informer, no list per pass
        ignored: set[str] = set()
        if on_node:
            for namespace, claim_name in D.undrainable_pod_claims(self.cluster.pods_on_node(node_name), now):
                pvc = self.cluster.persistent_volume_claim(namespace, claim_name)
                volume = ((pvc or {}).get("spec") or {}).get("volumeName")
                if volume:
                    ignored.add(str(volume))
        blocking = D.blocking_volume_attachments(on_node, node_name, ignored)
        if not blocking:
            D.set_condition(status, VOLUMES_DETACHED, "True", VOLUMES_DETACHED, "", now, generation)
            return None
        if deadline is None or now <= deadline:
            self.recorder.publish(node, "Normal", "AwaitingVolumeDetachment",
                                  "Awaiting deletion of bound volumeattachments "
                                  f"({_pretty_names([str(va['metadata']['name']) for va in blocking])})")
            D.set_condition(status, VOLUMES_DETACHED, "Unknown", "AwaitingVolumeDetachment",
                            "AwaitingVolumeDetachment", now, generation)
            return Result(requeue_after=D.DRAIN_REQUEUE)
        D.set_condition(status, VOLUMES_DETACHED, "False", "TerminationGracePeriodElapsed",
                        "TerminationGracePeriodElapsed", now, generation)
        return None

    def _instance_gone(self, pid: str) -> bool:
        """Whether the cloud no longer has the instance."""
        try:
            self.cloud.get(pid)
        except NodeClaimNotFoundError:
            return True
        return False

    def _terminate_instance(self, pid: str, status: Obj, now: float, generation: int | None) -> Result | None:
        """Terminate the instance once (InstanceTerminating), then poll every 5 s until the cloud says it is gone."""
        cond = D.get_condition(status, INSTANCE_TERMINATING)
        if cond is None or cond.get("status") != "True":
            with contextlib.suppress(NodeClaimNotFoundError):
                self.cloud.delete(pid)
            D.set_condition(status, INSTANCE_TERMINATING, "True", INSTANCE_TERMINATING, "", now, generation)
        if self._instance_gone(pid):
            return None
        return Result(requeue_after=D.INSTANCE_POLL)

    # ---- plumbing ----------------------------------------------------------------------------------------------
    def _get_claim(self, name: str) -> NodeClaimView | None:
        """The NodeClaim read fresh from the API (None when gone)."""
        try:
            return NodeClaimView(self.client.get(R.NODECLAIMS, name))
        except NotFoundError:
            return None

    def _get_node(self, name: str) -> NodeView | None:
        """The Node read fresh from the API (None when gone)."""
        try:
            return NodeView(self.client.get(R.NODES, name))
        except NotFoundError:
            return None

    def _lock(self, key: str) -> threading.Lock:
        """One of a fixed set of locks: passes over the same NodeClaim or Node never run at once."""
        return self._locks[hash(key) % _LOCK_STRIPES]
