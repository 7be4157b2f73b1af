"""Garbage collection, as Karpenter's instance and NodeClaim garbage collectors do it.

Instances: a live instance of this cluster tagged with a NodePool, launched more than 30 s ago, that no NodeClaim
claims is terminated. A NodeClaim claims an instance by its status.providerID, or, while it has no providerID yet
(a launch that crashed between CreateFleet and the status write), by the instance's `karpenter.sh/nodeclaim` tag:
the restarted launch then adopts that instance instead of leaking it or launching a second one.

NodeClaims: a launched NodeClaim whose instance is gone or terminated is deleted, unless its Node is still Ready
(the kubelet runs, so the cloud's answer is not trusted yet); a NotReady Node of such a NodeClaim loses its
termination finalizer and is deleted without a drain, as there is nothing left to drain.

Cadence: every 10 s for the first 20 successful runs, then every 2 minutes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from controller import metrics as M
from controller.api import conditions as C
from controller.api import labels as L
from controller.cloud.aws.errors import NodeClaimNotFoundError
from controller.cloud.provider import CloudProvider, LaunchedNode
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import ConflictError, NotFoundError
from controller.state.cluster import Cluster
from controller.state.views import NodeClaimView, NodeView

log = logging.getLogger("karpy.garbagecollection")

GRACE_SECONDS = 30.0
FAST_INTERVAL_SECONDS = 10.0
FAST_RUNS = 20
SLOW_INTERVAL_SECONDS = 120.0
INSTANCES = "instances"
NODECLAIMS = "nodeclaims"
NODES = "nodes"


class GarbageCollector:
    """Terminates orphan instances and deletes NodeClaims whose instance is gone (leader only: run it in the
    leader's threads)."""

    def __init__(self, cluster: Cluster, client: KubeClient, cloud: CloudProvider, *,
                 grace_seconds: float = GRACE_SECONDS, fast_interval: float = FAST_INTERVAL_SECONDS,
                 fast_runs: int = FAST_RUNS, slow_interval: float = SLOW_INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self.client = client
        self.cloud = cloud
        self.grace_seconds = grace_seconds
        self.fast_interval = fast_interval
        self.fast_runs = fast_runs
        self.slow_interval = slow_interval
        self.clock = clock
        self.successful_runs = 0
        # what this process collected: instances, nodeclaims, nodes
        self.collected: Counter[str] = Counter()
        self._first_seen: dict[str, float] = {}  # providerID -> when first listed (clouds without launch times)

    # ---- loop --------------------------------------------------------------------------------------------------
    def next_interval(self) -> float:
        """Karpenter's cadence: fast for the first runs after start, slow afterwards."""
        return self.fast_interval if self.successful_runs < self.fast_runs else self.slow_interval

    def run(self, stop: threading.Event, interval: float | None = None) -> None:
        """Collect until stop is set, every `interval` seconds if given, else at Karpenter's cadence."""
        while not stop.is_set():
            try:
                if self.cluster.synced():
                    self.run_once()
                    self.successful_runs += 1
            except Exception as e:
                log.error("garbage collection failed", extra={"controller": "garbagecollection",
                                                              "error": str(e)[:300]})
            stop.wait(interval if interval is not None else self.next_interval())

    def run_once(self) -> None:
        """One pass: the cloud is listed before the cluster is read, so a NodeClaim written during a slow list is
        still seen (Karpenter's order)."""
        machines = [m for m in self.cloud.list() if m.state not in ("shutting-down", "terminated")]
        self._collect_instances(machines)
        self._collect_nodeclaims({m.provider_id for m in machines})

    # ---- instances without NodeClaims --------------------------------------------------------------------------
    def _collect_instances(self, machines: list[LaunchedNode]) -> None:
        now = self.clock()
        seen = {m.provider_id for m in machines}
        for pid in [p for p in self._first_seen if p not in seen]:
            del self._first_seen[pid]
        claims = self.cluster.nodeclaims()
        claimed = {c.provider_id for c in claims}
        for m in machines:
            launched = m.launch_time if m.launch_time is not None else self._first_seen.setdefault(m.provider_id, now)
            if m.provider_id in claimed or now - launched <= self.grace_seconds:
                continue
            if self._claimed_by_tag(m):
                continue
            try:
                self.cloud.delete(m.provider_id)
            except NodeClaimNotFoundError:
                continue
            self.collected[INSTANCES] += 1
            log.info("garbage collected cloudprovider instance", extra={
                "controller": "instance.garbagecollection", "provider-id": m.provider_id,
                "nodeclaim": m.nodeclaim, "nodepool": m.labels.get(L.NODEPOOL, "")})
            node = self.cluster.node_for_provider_id(m.provider_id)
            if node is not None:
                self._delete_node(node)

    def _claimed_by_tag(self, m: LaunchedNode) -> bool:
        """Whether the NodeClaim named by the instance's tag still exists and has not claimed another instance (read
        from the API, not the cache, before anything is terminated)."""
        if not m.nodeclaim:
            return False
        try:
            claim = NodeClaimView.of(self.client.get(R.NODECLAIMS, m.nodeclaim))
        except NotFoundError:
            return False
        return claim.provider_id in ("", m.provider_id)

    # ---- NodeClaims without instances --------------------------------------------------------------------------
    def _collect_nodeclaims(self, live: set[str]) -> None:
        now = self.clock()
        for claim in self.cluster.nodeclaims():
            pid = claim.provider_id
            if not pid or pid in live or claim.deleting:
                continue
            launched = claim.condition("Launched")
            if launched is None or launched.get("status") != "True":
                continue
            since = C.parse_time(launched.get("lastTransitionTime"))
            if since is not None and now - since <= self.grace_seconds:
                continue  # the cloud's list may not show a just-launched instance yet
            node = self.cluster.node_for_provider_id(pid)
            if node is not None and node.ready:
                continue  # the kubelet is still running: wait until the Node says otherwise
            try:
                self.cloud.get(pid)
                continue  # the list missed it, the instance is there
            except NodeClaimNotFoundError:
                pass
            name = claim.name
            try:
                self.client.delete(R.NODECLAIMS, name, uid=claim.uid or None)
            except NotFoundError:
                continue
            except ConflictError:  # a different NodeClaim of that name now: not ours to delete
                continue
            self.collected[NODECLAIMS] += 1
            M.nodeclaim_disrupted(claim, "garbage_collected")
            log.info("garbage collecting nodeclaim with no cloudprovider representation", extra={
                "controller": "nodeclaim.garbagecollection", "NodeClaim": {"name": name},
                "Node": {"name": claim.node_name}, "provider-id": pid})
            if node is not None:
                self._delete_node(node)

    def _delete_node(self, node: NodeView) -> None:
        """Delete a Node whose instance is gone and drop its termination finalizer: there is nothing to drain."""
        name = node.name
        try:
            self.client.delete(R.NODES, name)
        except NotFoundError:
            return
        try:
            fresh = NodeView.of(self.client.get(R.NODES, name))
        except NotFoundError:
            self.collected[NODES] += 1
            return
        finalizers = fresh.finalizers
        if L.TERMINATION_FINALIZER in finalizers:
            finalizers.remove(L.TERMINATION_FINALIZER)
            try:
                self.client.patch(R.NODES, name, {"metadata": {
                    "finalizers": finalizers, "resourceVersion": fresh.resource_version or None}})
            except (NotFoundError, ConflictError):
                return  # gone already, or changed: the next pass looks again
        self.collected[NODES] += 1
        log.info("garbage collected node", extra={"controller": "nodeclaim.garbagecollection", "Node": {"name": name}})
