"""Instance health without an interruption queue, as Karpenter's interruption.instancestatus controller.

Every minute, EC2 DescribeInstanceStatus is asked for instances whose instance or system status check is impaired and
for instances with a scheduled event (instance or system reboot, system maintenance, instance retirement, instance
stop). A failed status check older than two minutes means the machine is broken: its NodeClaim is annotated with a
termination timestamp of now (no graceful drain to wait for) and deleted. A scheduled event means the host is going
away: the NodeClaim is deleted, so it is cordoned and drained as any interruption. EBS status checks are ignored (a
failing volume may be a pod's, not the node's). Each (instance, category) is counted once while it stays unhealthy in
karpenter_interruption_instance_status_unhealthy_total, and the NodeClaim and Node get Karpenter's InstanceUnhealthy
event.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from controller import metrics
from controller.api import labels as L
from controller.interruption.controller import TERMINATING_ON_INTERRUPTION, instance_id_of
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import ConflictError, NotFoundError
from controller.kube.events import Recorder
from controller.state.cluster import Cluster
from controller.state.views import NodeClaimView

log = logging.getLogger("karpy.interruption.instancestatus")

INTERVAL_SECONDS = 60.0
UNHEALTHY_THRESHOLD_SECONDS = 120.0
INSTANCE_STATUS, SYSTEM_STATUS, EVENT_STATUS = "InstanceStatus", "SystemStatus", "EventStatus"
# the category's message kind: the reason NodeClaims disrupted for it are counted under
KINDS = {INSTANCE_STATUS: "instance_status", SYSTEM_STATUS: "system_status", EVENT_STATUS: "event_status"}
FORCEFUL = frozenset({INSTANCE_STATUS, SYSTEM_STATUS})
SCHEDULED_EVENTS = ("instance-reboot", "system-reboot", "system-maintenance", "instance-retirement", "instance-stop")
# DescribeInstanceStatus ANDs filters of different names: one call per condition ORs them
FILTER_SETS = (
    [{"Name": "instance-status.status", "Values": ["impaired"]}],
    [{"Name": "system-status.status", "Values": ["impaired"]}],
    [{"Name": "event.code", "Values": list(SCHEDULED_EVENTS)}],
)
UNHEALTHY_EVENT = ("Warning", "InstanceUnhealthy", "An unhealthy warning was triggered for the instance")


@dataclass(frozen=True)
class HealthStatus:
    """An instance found unhealthy and in which categories (failed checks past the threshold, scheduled events)."""

    instance_id: str
    categories: tuple[str, ...]
    details: tuple[str, ...] = field(default=())  # check or event names, for the log


def _since(value: Any, now: dt.datetime) -> float:
    """Seconds since an ImpairedSince; a missing one counts as just now."""
    if not isinstance(value, dt.datetime):
        return 0.0
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return (now - value).total_seconds()


def unhealthy(statuses: list[dict[str, Any]], now: dt.datetime,
              threshold: float = UNHEALTHY_THRESHOLD_SECONDS) -> list[HealthStatus]:
    """The unhealthy instances among DescribeInstanceStatus entries: a status check failed for at least `threshold`
    seconds, or any scheduled event (acted on at once, whatever its date, as Karpenter does). Entries of one
    instance (from several listings) are read together."""
    found: dict[str, tuple[list[str], list[str]]] = {}
    for s in statuses:
        if not s.get("InstanceId"):
            continue
        categories, names = found.setdefault(str(s["InstanceId"]), ([], []))
        for category, key in ((INSTANCE_STATUS, "InstanceStatus"), (SYSTEM_STATUS, "SystemStatus")):
            for d in (s.get(key) or {}).get("Details") or []:
                if d.get("Status") == "failed" and _since(d.get("ImpairedSince"), now) >= threshold:
                    if category not in categories:
                        categories.append(category)
                    names.append(f"{category}/{d.get('Name', '')}")
        for e in s.get("Events") or []:
            if e.get("Code") in SCHEDULED_EVENTS:
                if EVENT_STATUS not in categories:
                    categories.append(EVENT_STATUS)
                names.append(f"{EVENT_STATUS}/{e.get('Code')}")
    return [HealthStatus(iid, tuple(categories), tuple(dict.fromkeys(names)))
            for iid, (categories, names) in found.items() if categories]


def describe_unhealthy(ec2: Any, now: dt.datetime) -> list[HealthStatus]:
    """Every unhealthy instance of the region (one DescribeInstanceStatus listing per condition)."""
    statuses: list[dict[str, Any]] = []
    for filters in FILTER_SETS:
        for page in ec2.get_paginator("describe_instance_status").paginate(Filters=filters):
            statuses.extend(page.get("InstanceStatuses", []))
    return unhealthy(statuses, now)


class InstanceStatusController:
    """Polls DescribeInstanceStatus (leader only) and acts on the NodeClaims of unhealthy instances."""

    def __init__(self, cluster: Cluster, client: KubeClient, ec2: Any, recorder: Recorder, *,
                 is_leader: Callable[[], bool] = lambda: True,
                 now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
                 interval: float = INTERVAL_SECONDS, dry_run: bool = False) -> None:
        self.cluster, self.client, self.ec2, self.recorder = cluster, client, ec2, recorder
        self.is_leader, self.now, self.interval, self.dry_run = is_leader, now, interval, dry_run
        self._seen: set[tuple[str, str]] = set()  # (instance, category) counted while it stays unhealthy
        self.enabled = True

    def reconcile_once(self) -> int:
        """One poll: act on every unhealthy instance that has a NodeClaim; returns the NodeClaims deleted."""
        try:
            found = describe_unhealthy(self.ec2, self.now())
        except ClientError as e:
            if e.response["Error"]["Code"] in ("UnauthorizedOperation", "AccessDenied", "AccessDeniedException"):
                log.error("ec2:DescribeInstanceStatus permission is not allowed, update the IAM policy and restart "
                          "the Karpenter deployment to enable instance status health checks",
                          extra={"controller": "interruption.instancestatus"})
                self.enabled = False
                return 0
            raise
        by_instance: dict[str, list[NodeClaimView]] = {}
        for claim in self.cluster.nodeclaims():
            iid = instance_id_of(str((claim.get("status") or {}).get("providerID") or ""))
            if iid:
                by_instance.setdefault(iid, []).append(claim)
        current: set[tuple[str, str]] = set()
        deleted = 0
        for status in found:
            claims = by_instance.get(status.instance_id, [])
            if not claims:
                continue
            for category in status.categories:
                key = (status.instance_id, category)
                current.add(key)
                if key not in self._seen:
                    self._seen.add(key)
                    log.info("detected unhealthy instance owned by cluster", extra={
                        "controller": "interruption.instancestatus", "instanceID": status.instance_id,
                        "category": category, "details": list(status.details)[:10]})
                    metrics.INTERRUPTION_INSTANCE_STATUS_UNHEALTHY.labels(category=category).inc()
            if self.dry_run:
                continue
            forceful = any(c in FORCEFUL for c in status.categories)
            kind = KINDS[next((c for c in status.categories if c in FORCEFUL), status.categories[0])]
            for claim in claims:
                deleted += self._act(claim, kind, forceful)
        self._seen &= current  # an instance unhealthy again later is counted again
        return deleted

    def _act(self, claim: dict[str, Any], kind: str, forceful: bool) -> int:
        name = claim["metadata"]["name"]
        node = self.cluster.node_for_provider_id(str((claim.get("status") or {}).get("providerID") or ""))
        self._publish(claim, node, *UNHEALTHY_EVENT)
        if claim["metadata"].get("deletionTimestamp"):
            return 0
        try:
            if forceful and L.NODECLAIM_TERMINATION_TIMESTAMP not in (claim["metadata"].get("annotations") or {}):
                # a broken machine: the termination controller does not wait on a graceful drain
                stamp = self.now().strftime("%Y-%m-%dT%H:%M:%SZ")
                self.client.patch(R.NODECLAIMS, name, {"metadata": {
                    "annotations": {L.NODECLAIM_TERMINATION_TIMESTAMP: stamp}}})
            self.client.delete(R.NODECLAIMS, name, uid=claim["metadata"].get("uid"))
        except (NotFoundError, ConflictError):
            return 0
        log.info("initiating delete from interruption message", extra={
            "controller": "interruption.instancestatus", "messageKind": kind,
            "action": "ForcefulTermination" if forceful else "CordonAndDrain", "NodeClaim": {"name": name}})
        self._publish(claim, node, "Warning", TERMINATING_ON_INTERRUPTION,
                      "Interruption triggered termination for the NodeClaim")
        labels = claim["metadata"].get("labels") or {}
        metrics.NODECLAIMS_DISRUPTED.labels(reason=kind, nodepool=labels.get(L.NODEPOOL, ""),
                                            capacity_type=labels.get(L.CAPACITY_TYPE, "")).inc()
        return 1

    def _publish(self, claim: dict[str, Any], node: dict[str, Any] | None, type_: str, reason: str,
                 message: str) -> None:
        self.recorder.publish(claim, type_, reason, message)
        if node is not None:
            self.recorder.publish(node, type_, reason, message.replace("NodeClaim", "Node"))

    def run(self, stop: threading.Event) -> None:
        """Poll every minute while leading; errors wait for the next poll, never end the loop."""
        while not stop.is_set() and self.enabled:
            if self.is_leader():
                try:
                    self.reconcile_once()
                except Exception as e:
                    log.error("polling instance statuses failed; retrying", extra={
                        "controller": "interruption.instancestatus", "error": str(e)[:300]})
            stop.wait(self.interval)
