"""An in-memory CloudProvider over a bundled catalog: the cloud for benchmarks and for trying the controller without
AWS (`CLOUD_PROVIDER=fake`), as Karpenter's KWOK provider is. Launches are instant and idempotent per NodeClaim;
offerings can be made to fail with insufficient capacity."""

from __future__ import annotations

import builtins
import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any

from controller.api import labels as L
from controller.catalog.snapshot import load_catalog
from controller.catalog.types import InstanceType
from controller.cloud.errors import InsufficientCapacityError, NodeClaimNotFoundError
from controller.cloud.provider import LaunchedNode
from controller.scheduling.requirements import Requirements


class FakeCloudProvider:
    """Instances in a dict; the catalog's instance types and prices."""

    def __init__(self, catalog: str = "aws-us-east-1", clock: Callable[[], float] = time.time) -> None:
        self.catalog = load_catalog(catalog)
        self.clock = clock
        self.instances: dict[str, LaunchedNode] = {}
        self.by_nodeclaim: dict[str, str] = {}
        self.insufficient: set[tuple[str, str, str]] = set()  # (type, zone, capacity type) refused
        self.create_calls = 0
        self._lock = threading.Lock()

    def get_instance_types(self, nodeclass: dict[str, Any]) -> builtins.list[InstanceType]:
        """The catalog's instance types."""
        return self.catalog.instance_types

    def create(self, nodeclaim: dict[str, Any], nodeclass: dict[str, Any]) -> LaunchedNode:
        """The cheapest offering the NodeClaim's requirements allow (spot first when allowed)."""
        name = nodeclaim["metadata"]["name"]
        with self._lock:
            self.create_calls += 1
            known = self.by_nodeclaim.get(name)
            if known is not None and known in self.instances:
                return self.instances[known]
            reqs = Requirements.from_node_selector_requirements((nodeclaim.get("spec") or {}).get("requirements")
                                                                or [])
            best: tuple[int, float, InstanceType, str, str] | None = None
            for it in self.catalog.instance_types:
                if any(r.key in it.labels and not r.has(it.labels[r.key]) for r in reqs
                       if r.key not in (L.ZONE, L.CAPACITY_TYPE)):
                    continue
                it_req = reqs.get(L.INSTANCE_TYPE)
                if it_req is not None and not it_req.has(it.name):
                    continue
                for o in it.offerings:
                    zr, cr = reqs.get(L.ZONE), reqs.get(L.CAPACITY_TYPE)
                    if not o.available or (zr is not None and not zr.has(o.zone)) or (
                            cr is not None and not cr.has(o.capacity_type)):
                        continue
                    if (it.name, o.zone, o.capacity_type) in self.insufficient:
                        continue
                    rank = 0 if o.capacity_type == L.CAPACITY_TYPE_SPOT else 1
                    if best is None or (rank, o.price) < best[:2]:
                        best = (rank, o.price, it, o.zone, o.capacity_type)
            if best is None:
                raise InsufficientCapacityError(f"no offering left for NodeClaim {name}")
            _, _, it, zone, ct = best
            instance_id = "i-" + hashlib.sha256(f"{name}/{self.clock()}".encode()).hexdigest()[:17]
            labels = dict(it.labels)
            labels.update({L.ZONE: zone, L.CAPACITY_TYPE: ct, L.INSTANCE_TYPE: it.name})
            labels.update({k: v for k, v in (nodeclaim["metadata"].get("labels") or {}).items()
                           if k in (L.NODEPOOL, L.EC2NODECLASS)})
            node = LaunchedNode(provider_id=f"aws:///{zone}/{instance_id}", instance_type=it.name, zone=zone,
                                capacity_type=ct, image_id="ami-fake", labels=labels, capacity=dict(it.capacity),
                                allocatable=it.allocatable)
            self.instances[node.provider_id] = node
            self.by_nodeclaim[name] = node.provider_id
            return node

    def get(self, provider_id: str) -> LaunchedNode:
        """The instance, or NodeClaimNotFoundError."""
        with self._lock:
            node = self.instances.get(provider_id)
        if node is None:
            raise NodeClaimNotFoundError(provider_id)
        return node

    def list(self) -> builtins.list[LaunchedNode]:
        """Every instance."""
        with self._lock:
            return builtins.list(self.instances.values())

    def delete(self, provider_id: str) -> None:
        """Remove the instance, or NodeClaimNotFoundError."""
        with self._lock:
            if self.instances.pop(provider_id, None) is None:
                raise NodeClaimNotFoundError(provider_id)
