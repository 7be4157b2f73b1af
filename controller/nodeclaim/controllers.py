"""Wiring of the NodeClaim disruption-side controllers into `karpy controller`: their work queues and the informer
events that feed them (a NodePool or EC2NodeClass change enqueues its NodeClaims; each NodeClaim is looked at again
at least every 5 minutes through its requeue)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller.kube.client import KubeClient
from controller.kube.events import Recorder
from controller.kube.workqueue import Controller
from controller.nodeclaim.disruption import NodeClaimDisruptionController, reconcile_nodepool_hash
from controller.nodeclaim.expiration import ExpirationController
from controller.nodeclaim.podevents import PodEventsController
from controller.state.cluster import Cluster

Obj = dict[str, Any]
GATE_REBALANCE_DRIFT = "RebalanceRecommendationDrift"


@dataclass
class NodeClaimControllers:
    """The controllers' queues and the informer handlers that feed them."""

    disruption: Controller
    expiration: Controller
    nodepool_hash: Controller
    podevents: PodEventsController
    controllers: list[Controller] = field(default_factory=list)

    def _enqueue(self, names: list[str]) -> None:
        for name in names:
            self.disruption.queue.add(name)

    def replay(self, cluster: Cluster) -> None:
        """Enqueue every NodeClaim and NodePool (on becoming the leader)."""
        for claim in cluster.nodeclaims():
            self.on_nodeclaim("MODIFIED", claim, claim)
        for pool in cluster.nodepools():
            self.nodepool_hash.queue.add(pool["metadata"]["name"])

    def on_nodeclaim(self, event: str, old: Obj | None, new: Obj | None) -> None:
        """A NodeClaim changed: look at its conditions and expiry again."""
        obj = new if new is not None else old
        if obj is None or event == "DELETED" or obj["metadata"].get("deletionTimestamp"):
            return
        self.disruption.queue.add(obj["metadata"]["name"])
        self.expiration.queue.add(obj["metadata"]["name"])

    def on_nodepool(self, cluster: Cluster, event: str, old: Obj | None, new: Obj | None) -> None:
        """A NodePool changed: its NodeClaims' drift and consolidateAfter may have."""
        obj = new if new is not None else old
        if obj is not None and event != "DELETED":
            self.nodepool_hash.queue.add(obj["metadata"]["name"])
            self._enqueue([c["metadata"]["name"] for c in cluster.nodeclaims_for_nodepool(obj["metadata"]["name"])])

    def on_nodeclass(self, cluster: Cluster, event: str, old: Obj | None, new: Obj | None) -> None:
        """An EC2NodeClass changed (spec or resolved status): its NodeClaims may have drifted."""
        obj = new if new is not None else old
        if obj is not None and event != "DELETED":
            self._enqueue([c["metadata"]["name"] for c in cluster.nodeclaims_for_nodeclass(obj["metadata"]["name"])])


def build(cluster: Cluster, client: KubeClient, cloud: Any, recorder: Recorder, feature_gates: dict[str, bool],
          is_leader: Callable[[], bool]) -> NodeClaimControllers:
    """The NodeClaim disruption, expiration and pod-events controllers, and their informer handlers registered (pod
    events are written by the leader only, as the queues run only there)."""
    conditions = NodeClaimDisruptionController(cluster, client, cloud,
                                               rebalance_drift=feature_gates.get(GATE_REBALANCE_DRIFT, False))
    out = NodeClaimControllers(
        disruption=Controller("nodeclaim.disruption", conditions.reconcile, workers=2, recorder=recorder,
                              lookup=cluster.nodeclaim),
        expiration=Controller("nodeclaim.expiration", ExpirationController(cluster, client).reconcile, workers=1,
                              recorder=recorder, lookup=cluster.nodeclaim),
        nodepool_hash=Controller("nodepool.hash", lambda name: reconcile_nodepool_hash(cluster, client, name),
                                 workers=1, recorder=recorder, lookup=cluster.nodepool),
        podevents=PodEventsController(cluster, client))
    out.controllers = [out.disruption, out.expiration, out.nodepool_hash]
    cluster.nodeclaims_informer.add_handler(out.on_nodeclaim)
    cluster.nodepools_informer.add_handler(lambda e, o, n: out.on_nodepool(cluster, e, o, n))
    cluster.nodeclasses_informer.add_handler(lambda e, o, n: out.on_nodeclass(cluster, e, o, n))

    def on_pod(event: str, old: Obj | None, new: Obj | None) -> None:
        if is_leader():
            out.podevents.on_pod(event, old, new)

    cluster.pods_informer.add_handler(on_pod)
    return out

