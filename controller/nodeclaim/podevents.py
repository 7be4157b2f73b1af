"""Pod events (Karpenter's nodeclaim/podevents): a NodeClaim's status.lastPodEventTime moves when a pod is bound to
its node, goes terminal or terminating there, or leaves it; consolidateAfter counts from it. Writes are deduplicated:
none within 10 seconds of the last one."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from controller.api import conditions as C
from controller.api.pods import owned_by_daemonset
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import NotFoundError
from controller.state.cluster import Cluster
from controller.state.views import PodView

log = logging.getLogger("karpy.nodeclaim.podevents")

Obj = dict[str, Any]
DEDUPE_SECONDS = 10.0


def pod_event_node(event: str, old: Obj | None, new: Obj | None) -> str:
    """The node whose NodeClaim this pod event touches ("" when none): a pod created bound or deleted from a node,
    newly bound, newly terminal or newly terminating on one. DaemonSet pods do not count."""
    raw = new if new is not None else old
    if raw is None or owned_by_daemonset(raw):
        return ""
    pod = PodView.of(raw)
    if not pod.node_name:
        return ""
    if event in ("ADDED", "DELETED") or old is None or new is None:
        return pod.node_name
    before, after = PodView.of(old), PodView.of(new)
    if not before.node_name or (not before.terminal and after.terminal) or (not before.deleting and after.deleting):
        return pod.node_name
    return ""


class PodEventsController:
    """Stamps the NodeClaim of a pod's node with the time of the pod event (at most one write per 10 seconds)."""

    def __init__(self, cluster: Cluster, client: KubeClient, clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self.client = client
        self.clock = clock
        self._written: dict[str, float] = {}  # NodeClaim -> our last stamp, ahead of the informer's copy

    def on_pod(self, event: str, old: Obj | None, new: Obj | None) -> None:
        """Informer handler; never raises (a missed stamp is made by the next event)."""
        node_name = pod_event_node(event, old, new)
        if not node_name:
            return
        try:
            self.stamp(node_name)
        except Exception as e:
            log.warning("recording a pod event on the nodeclaim failed", extra={
                "controller": "nodeclaim.podevents", "Node": {"name": node_name}, "error": str(e)[:300]})

    def stamp(self, node_name: str) -> bool:
        """Set status.lastPodEventTime on the node's NodeClaim unless it was set in the last 10 seconds; whether a
        write was made."""
        node = self.cluster.node(node_name)
        claim = self.cluster.nodeclaim_for_node(node) if node is not None else None
        if claim is None or claim.deleting:
            return False
        now = self.clock()
        name = claim.name
        seen = C.parse_time(claim.status.get("lastPodEventTime"))
        last = max(seen or 0.0, self._written.get(name, 0.0))
        if last and now - last < DEDUPE_SECONDS:
            return False
        if len(self._written) > 100_000:
            self._written.clear()  # a bound; at worst one extra write per NodeClaim
        self._written[name] = now
        try:
            self.client.patch(R.NODECLAIMS, name,
                              {"status": {"lastPodEventTime": C.format_time(now)}}, subresource="status")
        except NotFoundError:
            return False
        return True
