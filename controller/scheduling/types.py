"""Scheduler inputs: NodePools as the scheduler sees them, taints, and nodes that already exist."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.catalog.types import InstanceType
from controller.scheduling.pod import Pod, Toleration
from controller.scheduling.requirements import Requirements


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"

    def tolerated_by(self, tolerations: tuple[Toleration, ...]) -> bool:
        """Whether any toleration matches this taint (Kubernetes' matching rules)."""
        for t in tolerations:
            if t.effect and t.effect != self.effect:
                continue
            if t.operator == "Exists":
                if not t.key or t.key == self.key:
                    return True
            elif t.key == self.key and (t.value or "") == self.value:
                return True
        return False


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
