"""Scheduler inputs: NodePools as the scheduler sees them, taints (controller.api.taints.Taint, re-exported here),
and nodes that already exist."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.api.taints import Taint
from controller.catalog.types import InstanceType
from controller.scheduling.pod import Pod, Toleration
from controller.scheduling.requirements import Requirements

__all__ = ["ExistingNode", "SchedNodePool", "Taint", "untolerated"]


def untolerated(taints: list[Taint], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first taint the tolerations do not cover. As in Karpenter's scheduler, PreferNoSchedule taints count too:
    a pod avoids them until its last relaxation adds a toleration for them."""
    for taint in taints:
        if not taint.tolerated_by(tolerations):
            return taint
    return None


@dataclass(slots=True)
class SchedNodePool:
    """A NodePool reduced to what scheduling needs. `used` is what its existing nodes already consume of `limits`."""

    name: str
    weight: int
    requirements: Requirements
    taints: list[Taint]
    startup_taints: list[Taint]
    labels: dict[str, str]
    limits: dict[str, int] | None
    used: dict[str, int]
    instance_types: list[InstanceType]
    not_ready_reason: str = ""


@dataclass(slots=True)
class ExistingNode:
    """A node already in the cluster (or a NodeClaim in flight) that pods may be placed on first."""

    name: str
    labels: dict[str, str]
    taints: list[Taint]
    allocatable: dict[str, int]
    pods: list[Pod] = field(default_factory=list)
    node_pool: str | None = None
    price: float = 0.0
    in_flight: bool = False
