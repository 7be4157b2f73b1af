"""An in-memory CloudProvider over a bundled catalog: the cloud for benchmarks and for trying the controller without
AWS (`CLOUD_PROVIDER=fake`), as Karpenter's KWOK provider is. Launches are instant and idempotent per NodeClaim;
offerings can be made to fail with insufficient capacity."""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from controller.api import labels as L
from controller.catalog.snapshot import load_catalog
from controller.catalog.types import InstanceType
from controller.cloud.errors import InsufficientCapacityError, NodeClaimNotFoundError
from controller.cloud.provider import LaunchedNode, LaunchRequest, NodeClass
from controller.scheduling.instancetypes import OfferingFilter, compatible_offerings

# the capacity types in the order a launch prefers them (the AWS provider's, controller.cloud.aws.fleet)
LAUNCH_ORDER = (L.CAPACITY_TYPE_RESERVED, L.CAPACITY_TYPE_SPOT, L.CAPACITY_TYPE_ON_DEMAND)


class FakeCloudProvider:
    """Instances in a dict; the catalog's instance types and prices."""

    def __init__(self, catalog: str = "aws-us-east-1", clock: Callable[[], float] = time.time) -> None:
        self.catalog = load_catalog(catalog)
        self.clock = clock
        self.instances: dict[str, LaunchedNode] = {}
        self.by_nodeclaim: dict[str, str] = {}
        self.insufficient: set[tuple[str, str, str]] = set()  # (type, zone, capacity type) refused
        self.create_calls = 0
        self._types: tuple[frozenset[tuple[str, str, str]], builtins.list[InstanceType]] | None = None
        self._lock = threading.Lock()

    def get_instance_types(self, nodeclass: NodeClass) -> builtins.list[InstanceType]:
        """The catalog's instance types, with the offerings refused for insufficient capacity unavailable (as the AWS
        provider reports ICE'd offerings, so the next plan avoids them)."""
        with self._lock:
            refused = frozenset(self.insufficient)
            if self._types is None or self._types[0] != refused:
                types = self.catalog.instance_types
                if refused:
                    types = [dataclasses.replace(it, offerings=[
                        dataclasses.replace(o, available=False)
                        if (it.name, o.zone, o.capacity_type) in refused else o for o in it.offerings])
                        for it in types]
                self._types = (refused, types)
            return self._types[1]

    def is_drifted(self, nodeclaim: Mapping[str, Any], nodeclass: Mapping[str, Any] | None) -> str:
        """The node class side of drift from what the fake machine knows: its image (no subnets or security
        groups here)."""
        from controller.cloud.drift import nodeclass_drift

        return nodeclass_drift(dict(nodeclaim), dict(nodeclass) if nodeclass is not None else None)

    def create(self, request: LaunchRequest, nodeclass: NodeClass) -> LaunchedNode:
        """The cheapest offering the NodeClaim's requirements allow (reserved, then spot, then on-demand, as the AWS
        provider chooses)."""
        name = request.name
        with self._lock:
            self.create_calls += 1
            known = self.by_nodeclaim.get(name)
            if known is not None and known in self.instances:
                return self.instances[known]
            reqs = request.requirements
            allowed = OfferingFilter(reqs)
            best: tuple[int, float, InstanceType, str, str] | None = None
            for it in self.catalog.instance_types:
                for o in compatible_offerings(it, reqs, allowed):
                    if (it.name, o.zone, o.capacity_type) in self.insufficient:
                        continue
                    rank = LAUNCH_ORDER.index(o.capacity_type) if o.capacity_type in LAUNCH_ORDER else len(LAUNCH_ORDER)
                    if best is None or (rank, o.price) < best[:2]:
                        best = (rank, o.price, it, o.zone, o.capacity_type)
            if best is None:
                raise InsufficientCapacityError(f"no offering left for NodeClaim {name}")
            _, _, it, zone, ct = best
            instance_id = "i-" + hashlib.sha256(f"{name}/{self.clock()}".encode()).hexdigest()[:17]
            labels = dict(it.labels)
            labels.update({L.ZONE: zone, L.CAPACITY_TYPE: ct, L.INSTANCE_TYPE: it.name})
            labels.update({k: v for k, v in request.labels.items() if k in (L.NODEPOOL, L.EC2NODECLASS)})
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
