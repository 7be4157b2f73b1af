"""The CloudProvider protocol: what the controller needs from a cloud, whatever the cloud."""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller.catalog.types import InstanceType


@dataclass(frozen=True)
class LaunchedNode:
    """What a launch produced, for the NodeClaim's status and the Node's labels."""

    provider_id: str
    instance_type: str
    zone: str
    capacity_type: str
    image_id: str
    labels: dict[str, str] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)
    allocatable: dict[str, int] = field(default_factory=dict)
    # when the machine was launched (epoch seconds; None when the cloud does not say) and its cloud state
    launch_time: float | None = None
    state: str = ""
    # the NodeClaim the machine was launched for (the karpenter.sh/nodeclaim tag), for garbage collection
    nodeclaim: str = ""


class CloudProvider(Protocol):
    """Launch, look up, list and delete the machines behind NodeClaims; list instance types for a node class."""

    def create(self, nodeclaim: dict[str, Any], nodeclass: dict[str, Any]) -> LaunchedNode:
        """Launch (idempotently) the machine for a NodeClaim manifest with its EC2NodeClass manifest."""
        ...

    def get(self, provider_id: str) -> LaunchedNode:
        """The machine behind a providerID (NodeClaimNotFoundError when gone)."""
        ...

    def list(self) -> list[LaunchedNode]:
        """Every machine this cluster's karpy launched (for garbage collection)."""
        ...

    def delete(self, provider_id: str) -> None:
        """Terminate the machine (NodeClaimNotFoundError when already gone)."""
        ...

    def get_instance_types(self, nodeclass: dict[str, Any]) -> builtins.list[InstanceType]:
        """Instance types with offerings as seen through a node class's kubelet settings."""
        ...
