"""Karpenter's capacityreservation.capacitytype and capacityreservation.expiration controllers (AWS provider,
pkg/controllers/capacityreservation), each a singleton pass every minute on the leader.

capacitytype: EC2 is asked what each instance is (CloudProvider.list: reserved only while it runs in the reservation it
was launched into). A NodeClaim labelled `reserved` whose instance EC2 now reports as on-demand (the reservation
ended or was cancelled and the instance kept running) is relabelled on-demand and loses the capacity reservation
labels, and so is its registered Node: scheduling and consolidation then see it at its on-demand price. Deleting
NodeClaims are left alone; on-demand never becomes reserved.

expiration: the reservations of reserved NodeClaims are described by ID; a NodeClaim whose reservation is a capacity
block within 40 minutes of its end (`expiring`, as the EC2NodeClass status says it) is deleted, so its pods move
before EC2 reclaims the instances (10 minutes later), with Karpenter's log line.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from controller.api import labels as L
from controller.cloud.aws import capacityreservations
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import NotFoundError
from controller.state.cluster import Cluster

log = logging.getLogger("karpy.capacityreservation")
INTERVAL_SECONDS = 60.0
RESERVATION_LABELS = (L.CAPACITY_RESERVATION_ID, L.CAPACITY_RESERVATION_TYPE, L.CAPACITY_RESERVATION_INTERRUPTIBLE)
Obj = dict[str, Any]


def _demoted(labels: Mapping[str, str]) -> dict[str, str | None]:
    """The merge-patch labels of a reserved object become on-demand: capacity type on-demand, reservation labels
    removed."""
    return {L.CAPACITY_TYPE: L.CAPACITY_TYPE_ON_DEMAND, **{k: None for k in RESERVATION_LABELS if k in labels}}


def _run(name: str, once: Callable[[], Any], stop: threading.Event, interval: float, synced: Callable[[], bool]
         ) -> None:
    """Call once() every interval until stop (after the cluster is synced); an error is logged and retried."""
    while not stop.is_set():
        try:
            if synced():
                once()
        except Exception as e:  # the next pass tries again
            log.error("reconciling failed", extra={"controller": name, "error": str(e)[:300]})
        stop.wait(interval)


class CapacityTypeController:
    """Relabels reserved NodeClaims (and their Nodes) EC2 now reports as on-demand."""

    name = "capacityreservation.capacitytype"

    def __init__(self, cluster: Cluster, client: KubeClient, cloud: Any) -> None:
        self.cluster = cluster
        self.client = client
        self.cloud = cloud

    def run(self, stop: threading.Event, interval: float = INTERVAL_SECONDS) -> None:
        """A pass every interval until stop."""
        _run(self.name, self.run_once, stop, interval, self.cluster.synced)

    def run_once(self) -> list[str]:
        """One pass; the NodeClaims updated."""
        capacity = {m.provider_id: m.capacity_type for m in self.cloud.list()}
        updated: list[str] = []
        for claim in self.cluster.nodeclaims():
            if claim.deleting or capacity.get(claim.provider_id) != L.CAPACITY_TYPE_ON_DEMAND:
                continue
            changed = False
            if claim.labels.get(L.CAPACITY_TYPE) == L.CAPACITY_TYPE_RESERVED:
                try:
                    self.client.patch(R.NODECLAIMS, claim.name, {"metadata": {"labels": _demoted(claim.labels)}})
                    changed = True
                except NotFoundError:
                    continue
            node = self.cluster.node_for_provider_id(claim.provider_id)
            # a Node not registered yet gets the NodeClaim's labels at registration: the next pass sees it
            if node is not None and not node.deleting and node.labels.get(L.REGISTERED) == "true" \
                    and node.labels.get(L.CAPACITY_TYPE) == L.CAPACITY_TYPE_RESERVED:
                try:
                    self.client.patch(R.NODES, node.name, {"metadata": {"labels": _demoted(node.labels)}})
                    changed = True
                except NotFoundError:
                    pass
            if changed:
                updated.append(claim.name)
        if updated:
            log.info("updated capacity type for nodeclaims", extra={"controller": self.name,
                                                                     "NodeClaims": ", ".join(updated[:20])})
        return updated


class ExpirationController:
    """Deletes NodeClaims whose capacity block is about to end."""

    name = "capacityreservation.expiration"

    def __init__(self, cluster: Cluster, client: KubeClient, ec2: Any,
                 now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> None:
        self.cluster = cluster
        self.client = client
        self.ec2 = ec2
        self.now = now

    def run(self, stop: threading.Event, interval: float = INTERVAL_SECONDS) -> None:
        """A pass every interval until stop."""
        _run(self.name, self.run_once, stop, interval, self.cluster.synced)

    def run_once(self) -> list[str]:
        """One pass; the NodeClaims deleted."""
        claims = [c for c in self.cluster.nodeclaims() if c.labels.get(L.CAPACITY_RESERVATION_ID) and not c.deleting]
        if not claims:
            return []
        ids = sorted({c.labels[L.CAPACITY_RESERVATION_ID] for c in claims})
        now = self.now()
        expiring = {e["id"] for e in capacityreservations.resolve(self.ec2, [{"id": i} for i in ids], now)
                    if e["state"] == "expiring"}
        deleted: list[str] = []
        for c in claims:
            rid = c.labels[L.CAPACITY_RESERVATION_ID]
            if rid not in expiring:
                continue
            try:
                self.client.delete(R.NODECLAIMS, c.name)
            except NotFoundError:
                continue
            deleted.append(c.name)
            log.info("initiating delete for capacity block expiration", extra={
                "controller": self.name, "NodeClaim": {"name": c.name},
                "capacity-reservation-id": rid})
        return deleted
