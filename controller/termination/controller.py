"""Node termination, as Karpenter's node.termination controller (pkg/controllers/node/termination/controller.go):
the finalizer karpenter.sh/termination of a deleted Node. In Karpenter's order, each pass:

1. deletes the Node's NodeClaim if nobody has (its finalizer, controller/nodeclaim/termination.py, waits for the Node);
2. lets a Node go at once when it is not Ready and the cloud no longer has its instance;
3. reads the NodeClaim's terminationGracePeriod deadline (karpenter.sh/nodeclaim-termination-timestamp) and taints
   the Node karpenter.sh/disrupted:NoSchedule;
4. drains it (controller/termination/terminator.py, evictions through controller/termination/eviction.py), holding
   Drained Unknown for at least 5 s so pods bound before the taint was seen are caught;
5. waits for its VolumeAttachments to go (those of pods the drain leaves excepted), until the deadline;
6. terminates the instance and waits until the cloud says it is gone;
7. writes the NodeClaim's conditions (Drained, VolumesDetached, InstanceTerminating) and drops the Node's finalizer.

Every pass starts from fresh reads of the Node and the NodeClaim and only moves forward, so a crash anywhere and a
rerun continue where the last pass stopped; the NodeClaim's conditions are written once per pass.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from controller import metrics as M
from controller.api import conditions as C
from controller.api import labels as L
from controller.cloud.provider import CloudProvider
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import ConflictError, NotFoundError
from controller.kube.events import Recorder
from controller.kube.workqueue import Result
from controller.logs import pretty_names
from controller.state.cluster import Cluster
from controller.state.views import NodeClaimView, NodeView, ObjectView
from controller.termination import drain as D
from controller.termination.eviction import EvictionQueue
from controller.termination.instance import (
    DISRUPTION_REASON,
    DRAINED,
    VOLUMES_DETACHED,
    instance_gone,
    terminate_instance,
    write_conditions,
)
from controller.termination.terminator import Terminator

log = logging.getLogger("karpy.termination")

Obj = dict[str, Any]
V = TypeVar("V", bound=ObjectView)


def read(client: KubeClient, res: R.Resource, name: str, view: type[V]) -> V | None:
    """A fresh read of a cluster-scoped object as its typed view (None when it is gone): every pass starts from the
    API's copy, not the informer's."""
    try:
        return view.of(client.get(res, name))
    except NotFoundError:
        return None


def eviction_reason(claim: Mapping[str, Any] | None) -> str:
    """Why pods are evicted, for the Evicted event and pods_drained_total: the NodeClaim's DisruptionReason, else
    Karpenter's "Forceful Termination"."""
    cond = NodeClaimView.of(claim).condition(DISRUPTION_REASON) if claim is not None else None
    if cond is not None and cond.get("status") == "True" and cond.get("reason"):
        return str(cond["reason"])
    return "Forceful Termination"


class TerminationController:
    """Finalizes deleted karpy Nodes (finalizer karpenter.sh/termination), with or without a NodeClaim."""

    def __init__(self, client: KubeClient, cluster: Cluster, cloud: CloudProvider, recorder: Recorder,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.cluster = cluster
        self.cloud = cloud
        self.recorder = recorder
        self.clock = clock
        self.terminator = Terminator(client, cluster.pods_on_node, recorder)

    @property
    def evictions(self) -> EvictionQueue:
        """The eviction queue every drain pass shares."""
        return self.terminator.evictions

    def reconcile(self, name: str) -> Result:
        """One pass over a Node: nothing unless it is deleted and still carries the termination finalizer."""
        node = read(self.client, R.NODES, name, NodeView)
        if node is None or not node.deleting or L.TERMINATION_FINALIZER not in node.finalizers:
            return Result()
        extra: Obj = {"controller": "node.termination", "Node": {"name": name}}
        pid = node.provider_id
        claim = self._nodeclaim(pid)
        if claim is not None:
            extra["NodeClaim"] = {"name": claim.name}
            if not claim.deleting:
                with contextlib.suppress(NotFoundError):
                    self.client.delete(R.NODECLAIMS, claim.name)
                claim = self._nodeclaim(pid)
        # the kubelet is not running and the instance is gone: nothing is left to drain or terminate
        if not node.ready and pid and instance_gone(self.cloud, pid):
            self._remove_finalizer(node, extra)
            return Result()
        deadline = D.termination_deadline(claim)
        if claim is not None and deadline is not None:
            expiring = claim.annotations.get(L.NODECLAIM_TERMINATION_TIMESTAMP)
            self.recorder.publish(node, "Warning", "TerminationGracePeriodExpiring",
                                  f"All pods will be deleted by {expiring}")
        try:
            node = self.terminator.taint(node, extra)
        except NotFoundError:
            return Result()
        except ConflictError:  # the Node changed since we read it: look again
            return Result(requeue_after=0.1)

        now = self.clock()
        stored = copy.deepcopy(dict(claim.status)) if claim is not None else {}
        status = copy.deepcopy(stored)
        generation = claim.metadata.get("generation") if claim is not None else None
        result = self._await_drain(node, claim, status, deadline, now, extra)
        if result is None:
            result = self._await_volume_detachment(node, claim is not None, status, deadline, now, generation)
        if result is None and claim is not None and pid \
                and not terminate_instance(self.cloud, pid, status, now, generation):
            result = Result(requeue_after=D.INSTANCE_POLL)
        if claim is not None and status != stored:
            patched = write_conditions(self.client, claim, status)
            if isinstance(patched, Result):
                return patched
            # counted once, after the condition that says so is written (never for a Node without a NodeClaim)
            if not C.is_true(stored, DRAINED) and C.is_true(status, DRAINED):
                M.NODES_DRAINED.labels(nodepool=node.nodepool).inc()
        if result is not None:
            return result
        self._remove_finalizer(node, extra)
        return Result()

    # ---- the steps, in Karpenter's order -----------------------------------------------------------------------
    def _await_drain(self, node: NodeView, claim: NodeClaimView | None, status: Obj, deadline: float | None,
                     now: float, extra: Obj) -> Result | None:
        """One drain pass; None once the node is drained (and, with a NodeClaim, Drained has been Unknown for the
        minimum drain time), else when to look again."""
        generation = claim.metadata.get("generation") if claim is not None else None
        if claim is not None and D.get_condition(status, DRAINED) is None:
            D.set_condition(status, DRAINED, "Unknown", "Draining", "Draining", now, generation)
        drain = self.terminator.drain(node, deadline, now, eviction_reason(claim), extra)
        if not drain.drained:
            self.recorder.publish(node, "Warning", "FailedDraining",
                                  f"Failed to drain node, {drain.waiting} pods are waiting to be evicted")
            delay = D.DRAIN_REQUEUE if drain.retry_in is None else min(max(drain.retry_in, 0.05), D.DRAIN_REQUEUE)
            return Result(requeue_after=delay)
        if claim is None:
            return None
        cond = D.get_condition(status, DRAINED) or {}
        if cond.get("status") == "Unknown":
            since = D.parse_time(cond.get("lastTransitionTime"))
            elapsed = now - since if since is not None else D.MIN_DRAIN_TIME
            if elapsed < D.MIN_DRAIN_TIME:  # pods bound just before the taint was seen get their chance
                return Result(requeue_after=min(D.DRAIN_REQUEUE, D.MIN_DRAIN_TIME - elapsed))
        D.set_condition(status, DRAINED, "True", DRAINED, "", now, generation)
        return None

    def _await_volume_detachment(self, node: NodeView, has_claim: bool, status: Obj, deadline: float | None, now: float,
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
            if has_claim:
                D.set_condition(status, VOLUMES_DETACHED, "True", VOLUMES_DETACHED, "", now, generation)
            return None
        if deadline is None or now <= deadline:
            self.recorder.publish(node, "Normal", "AwaitingVolumeDetachment",
                                  "Awaiting deletion of bound volumeattachments "
                                  f"({pretty_names([ObjectView.of(va).name for va in blocking])})")
            if has_claim:
                D.set_condition(status, VOLUMES_DETACHED, "Unknown", "AwaitingVolumeDetachment",
                                "AwaitingVolumeDetachment", now, generation)
            return Result(requeue_after=D.DRAIN_REQUEUE)
        if has_claim:
            D.set_condition(status, VOLUMES_DETACHED, "False", "TerminationGracePeriodElapsed",
                            "TerminationGracePeriodElapsed", now, generation)
        return None

    def _remove_finalizer(self, node: NodeView, extra: Obj) -> None:
        """Drop karpenter.sh/termination from the Node (a strategic merge patch removes just that entry), then log
        and count it: its termination took from its deletion until now."""
        try:
            self.client.patch(R.NODES, node.name,
                              {"metadata": {"$deleteFromPrimitiveList/finalizers": [L.TERMINATION_FINALIZER]}},
                              patch_type="strategic")
        except NotFoundError:  # someone else let it go
            return
        now = self.clock()
        M.NODES_TERMINATED.labels(nodepool=node.nodepool, zone=node.labels.get(L.ZONE, "")).inc()
        deleted = node.deletion_timestamp
        if deleted is not None:
            M.NODES_TERMINATION_DURATION.labels(nodepool=node.nodepool).observe(max(now - deleted, 0.0))
        created = node.created
        if created is not None:
            M.NODES_LIFETIME_DURATION.labels(nodepool=node.nodepool).observe(max(now - created, 0.0))
        log.info("deleted node", extra=extra)

    # ---- plumbing ----------------------------------------------------------------------------------------------
    def _nodeclaim(self, pid: str) -> NodeClaimView | None:
        """The Node's NodeClaim, found by providerID in the cache and read fresh."""
        cached = self.cluster.nodeclaim_for_provider_id(pid) if pid else None
        if cached is None:
            return None
        claim = read(self.client, R.NODECLAIMS, cached.name, NodeClaimView)
        if claim is None or claim.provider_id not in ("", pid):
            return None
        return claim
