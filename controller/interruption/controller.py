"""The interruption controller, as Karpenter's: typed events from the interruption queue act on the NodeClaims of the
instances they name.

Spot interruption warning: the offering (instance type, zone, spot) is marked unavailable and the NodeClaim deleted
(the termination controller cordons and drains it; its pods are provisioned anew). Capacity-reservation interruption:
the NodeClaim's reservation is marked as having no room (its replacement goes elsewhere) and the NodeClaim deleted.
Scheduled change and instance stopping/stopped/shutting-down/terminated: the NodeClaim is deleted.
Rebalance recommendation: an event only (with karpy's RebalanceRecommendationDrift gate, also Drifted/
RebalanceRecommendation on the NodeClaim, replaced by the disruption loop within the Drifted budget). Events carry
Karpenter's reasons and messages. Instance ids are validated before anything is looked up; an event for an instance
no NodeClaim has is counted and its message deleted.
Only the leader receives from the queue.
"""

from __future__ import annotations

import copy
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from controller import metrics as M
from controller.api import conditions as C
from controller.api import labels as L
from controller.cloud.aws.interruption import (
    CAPACITY_RESERVATION_INTERRUPTED,
    INSTANCE_STOPPED,
    INSTANCE_TERMINATED,
    NO_OP,
    REBALANCE_RECOMMENDATION,
    SCHEDULED_CHANGE,
    SPOT_INTERRUPTED,
    InterruptionQueue,
    message_type,
)
from controller.cloud.aws.messages import Action, Event, action_for
from controller.cloud.aws.unavailable import UnavailableOfferings
from controller.cloud.provider import CloudProvider
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import ConflictError, NotFoundError
from controller.kube.events import Recorder
from controller.state.cluster import Cluster
from controller.state.views import NodeClaimView

log = logging.getLogger("karpy.interruption")

INSTANCE_ID = re.compile(r"i-(?:[0-9a-f]{8}|[0-9a-f]{17})")
_PROVIDER_ID = re.compile(r"aws:///[^/]*/(i-[0-9a-f]+)")

# message type -> (event type, reason, message) published on the NodeClaim and its Node (Karpenter's events.go)
NOTIFICATIONS: dict[str, tuple[str, str, str]] = {
    SPOT_INTERRUPTED: ("Warning", "SpotInterrupted", "Spot interruption warning was triggered"),
    REBALANCE_RECOMMENDATION: ("Normal", "SpotRebalanceRecommendation", "Spot rebalance recommendation was triggered"),
    SCHEDULED_CHANGE: ("Warning", "InstanceUnhealthy", "An unhealthy warning was triggered for the instance"),
    INSTANCE_STOPPED: ("Warning", "InstanceStopping", "Instance is stopping"),
    INSTANCE_TERMINATED: ("Warning", "InstanceTerminating", "Instance is terminating"),
    CAPACITY_RESERVATION_INTERRUPTED: ("Warning", "CapacityReservationInstanceInterrupted",
                                       "Capacity Reservation interruption warning was triggered"),
}
TERMINATING_ON_INTERRUPTION = "TerminatingOnInterruption"

# counts of what the handler found (keys bounded: these names)
INVALID_INSTANCE_ID = "invalid_instance_id"
UNKNOWN_INSTANCE = "unknown_instance"
NODECLAIMS_DELETED = "nodeclaims_deleted"
OFFERINGS_MARKED = "offerings_marked_unavailable"


def valid_instance_id(value: str) -> bool:
    """An EC2 instance id: `i-` and 8 or 17 lower-case hex digits."""
    return isinstance(value, str) and INSTANCE_ID.fullmatch(value) is not None


def instance_id_of(provider_id: str) -> str:
    """The instance id in an AWS providerID (aws:///<zone>/<id>), "" when it is not one."""
    m = _PROVIDER_ID.fullmatch(provider_id or "")
    return m.group(1) if m else ""


def _labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


class InterruptionController:
    """Receives from the interruption queue (leader only) and acts on each event."""

    def __init__(self, cluster: Cluster, client: KubeClient, cloud: CloudProvider, sqs: Any, queue_name: str,
                 recorder: Recorder, is_leader: Callable[[], bool], *,
                 unavailable: UnavailableOfferings | None = None, queue_url: str | None = None,
                 wait_seconds: int = 20, visibility_timeout: int | None = 20, follower_poll: float = 1.0,
                 error_pause: float = 5.0, rebalance_drift: bool = False) -> None:
        """`queue_name` is Karpenter's INTERRUPTION_QUEUE (a name; its URL is looked up once); `unavailable` defaults
        to the cloud provider's offerings cache."""
        self.cluster = cluster
        self.client = client
        self.cloud = cloud
        self.sqs = sqs
        self.queue_name = queue_name
        self.recorder = recorder
        self.is_leader = is_leader
        self.unavailable = unavailable if unavailable is not None else getattr(cloud, "unavailable", None)
        self.queue_url = queue_url
        self.wait_seconds = wait_seconds
        self.visibility_timeout = visibility_timeout
        self.follower_poll = follower_poll
        self.error_pause = error_pause
        # karpy's RebalanceRecommendationDrift gate: a rebalance recommendation marks the NodeClaim Drifted
        self.rebalance_drift = rebalance_drift
        self.counts: Counter[str] = Counter()
        self.consumer: InterruptionQueue | None = None

    # ---- the queue ---------------------------------------------------------------------------------------------
    def _consumer(self) -> InterruptionQueue:
        if self.consumer is None:
            url = self.queue_url or self.sqs.get_queue_url(QueueName=self.queue_name)["QueueUrl"]
            log.info("watching interruption queue", extra={"controller": "interruption", "queue": self.queue_name})
            self.consumer = InterruptionQueue(self.sqs, url, self.handle, wait_seconds=self.wait_seconds,
                                              visibility_timeout=self.visibility_timeout)
        return self.consumer

    def poll_once(self, stop: threading.Event | None = None) -> int:
        """One receive-and-handle round if this process leads (0 without touching the queue otherwise)."""
        if not self.is_leader():
            return 0
        return self._consumer().poll_once(
            proceed=lambda: self.is_leader() and (stop is None or not stop.is_set()))

    def run(self, stop: threading.Event) -> None:
        """Poll while not stopped; a follower waits without receiving; errors pause the loop, never end it."""
        while not stop.is_set():
            if not self.is_leader():
                stop.wait(self.follower_poll)
                continue
            try:
                self.poll_once(stop)
            except Exception as e:
                log.error("polling the interruption queue failed; retrying", extra={
                    "controller": "interruption", "queue": self.queue_name, "error": str(e)[:300]})
                stop.wait(self.error_pause)

    # ---- events ------------------------------------------------------------------------------------------------
    def nodeclaims_for_instance(self, instance_id: str) -> list[NodeClaimView]:
        """NodeClaims whose status.providerID names the instance."""
        return [c for c in self.cluster.nodeclaims() if instance_id_of(c.provider_id) == instance_id]

    def handle(self, event: Event) -> None:
        """Act on one typed event; raises (leaving the message for redelivery) only when an action failed."""
        kind = message_type(event)
        if kind == NO_OP:
            return
        action = action_for(event)
        errors: list[BaseException] = []
        for instance_id in event.instance_ids:
            if not valid_instance_id(instance_id):
                self.counts[INVALID_INSTANCE_ID] += 1
                log.warning("ignoring interruption event with an invalid instance id", extra={
                    "controller": "interruption", "messageKind": kind, "instance-id": str(instance_id)[:40]})
                continue
            claims = self.nodeclaims_for_instance(instance_id)
            if not claims:
                self.counts[UNKNOWN_INSTANCE] += 1
                log.info("no nodeclaim for interrupted instance", extra={
                    "controller": "interruption", "messageKind": kind, "instance-id": instance_id})
                continue
            for claim in claims:
                try:
                    self._handle_nodeclaim(kind, action, claim)
                except Exception as e:
                    errors.append(e)
        if errors:
            raise errors[0]

    def _handle_nodeclaim(self, kind: str, action: Action, claim: NodeClaimView) -> None:
        pid = claim.provider_id
        node = self.cluster.node_for_provider_id(pid)
        name = claim.name
        extra: dict[str, Any] = {"controller": "interruption", "messageKind": kind, "action": action.value,
                                 "NodeClaim": {"name": name}}
        if node is not None:
            extra["Node"] = {"name": node.name}
        type_, reason, message = NOTIFICATIONS[kind]
        self._publish(claim, node, type_, reason, message, message)
        if kind == SPOT_INTERRUPTED:
            self._mark_unavailable(claim, node, pid, extra)
        rid = (claim["metadata"].get("labels") or {}).get(L.CAPACITY_RESERVATION_ID)
        reservations = getattr(self.cloud, "reservations", None)
        if kind == CAPACITY_RESERVATION_INTERRUPTED and rid and reservations is not None:
            reservations.mark_unavailable(rid)  # Karpenter's markUnavailableOfferings for reservations
        if kind == REBALANCE_RECOMMENDATION and self.rebalance_drift:
            self._mark_drifted(claim, extra)
        if action != Action.CORDON_AND_DRAIN or claim.deleting:
            return
        try:
            self.client.delete(R.NODECLAIMS, name, uid=claim.uid or None)
        except (NotFoundError, ConflictError):
            return  # already gone (or replaced by another of that name)
        self.counts[NODECLAIMS_DELETED] += 1
        log.info("initiating delete from interruption message", extra=extra)
        self._publish(claim, node, "Warning", TERMINATING_ON_INTERRUPTION,
                      "Interruption triggered termination for the NodeClaim",
                      "Interruption triggered termination for the Node")
        M.nodeclaim_disrupted(claim, kind)

    def _mark_drifted(self, claim: NodeClaimView, extra: dict[str, Any]) -> None:
        """Drifted/RebalanceRecommendation on the NodeClaim (kept by the disruption conditions controller while the
        gate is on), so the disruption loop replaces it within the Drifted budget."""
        if claim.deleting:
            return
        status = copy.deepcopy(dict(claim.status))
        if not C.set_condition(status, "Drifted", True, reason="RebalanceRecommendation",
                               message="RebalanceRecommendation"):
            return
        try:  # with the resourceVersion: the conditions list is replaced whole, a concurrent write must not be lost
            self.client.patch(R.NODECLAIMS, claim.name, {
                "metadata": {"resourceVersion": claim.resource_version or None},
                "status": {"conditions": status["conditions"]}}, subresource="status")
        except NotFoundError:
            return
        log.info("marking drifted", extra={**extra, "reason": "RebalanceRecommendation"})

    def _publish(self, claim: dict[str, Any], node: dict[str, Any] | None, type_: str, reason: str,
                 claim_message: str, node_message: str) -> None:
        self.recorder.publish(claim, type_, reason, claim_message)
        if node is not None:
            self.recorder.publish(node, type_, reason, node_message)

    def _mark_unavailable(self, claim: dict[str, Any], node: dict[str, Any] | None, pid: str,
                          extra: dict[str, Any]) -> None:
        """The interrupted spot offering is refused for a while, so the replacement lands elsewhere."""
        if self.unavailable is None:
            return
        labels = {**_labels(node), **_labels(claim)}
        zone = labels.get(L.ZONE) or (pid.split("/")[3] if pid.count("/") >= 4 else "")
        instance_type = labels.get(L.INSTANCE_TYPE, "")
        if not zone or not instance_type:
            return
        self.unavailable.mark_unavailable(instance_type, zone, L.CAPACITY_TYPE_SPOT, reason=SPOT_INTERRUPTED)
        self.counts[OFFERINGS_MARKED] += 1
        log.info("marked offering unavailable", extra={**extra, "instance-type": instance_type, "zone": zone,
                                                       "capacity-type": L.CAPACITY_TYPE_SPOT})
