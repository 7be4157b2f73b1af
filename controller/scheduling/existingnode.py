"""A node already in the cluster, or a NodeClaim in flight, as a place pods go before any new NodeClaim is opened
(Karpenter's scheduling.ExistingNode): fixed allocatable, its labels as requirements, the pods bound to it."""

from __future__ import annotations

import numpy as np

from controller.scheduling.instancetypes import fit_count
from controller.scheduling.nodeclaim import Bin
from controller.scheduling.pod import Pod
from controller.scheduling.requirements import Requirements
from controller.scheduling.types import ExistingNode

NO_UNDEFINED: frozenset[str] = frozenset()  # an existing node's labels are final: no label can be added later


class ExistingNodeBin(Bin):
    """An existing node during a solve: what its bound pods use, and the pods the plan adds."""

    def __init__(self, node: ExistingNode, used: np.ndarray, allocatable: np.ndarray) -> None:
        super().__init__(node.name, Requirements.from_labels(node.labels), node.taints, used)
        self.node = node
        self.alloc = allocatable
        self.pods.extend(node.pods)
        self.anti_terms.extend(t for p in node.pods for t in p.anti_affinity)
        for p in node.pods:
            self.host_ports |= p.host_ports
        self.maxfree = self.free_upper_bound()

    def free_upper_bound(self) -> np.ndarray:
        return self.alloc - self.used

    def labels(self) -> dict[str, str]:
        return self.node.labels

    def incompatibility(self, reqs: Requirements) -> str | None:
        return self.requirements.incompatibility(reqs, NO_UNDEFINED)

    def room(self, reqs: Requirements, req: np.ndarray, want: int,
             ports: frozenset[tuple[str, str, int]] = frozenset()) -> int:
        return min(want, int(fit_count(self.alloc - self.used, req)[0]))

    def possible(self, key: str) -> list[str]:
        value = self.node.labels.get(key)
        return [] if value is None else [value]

    def new_pods(self) -> list[Pod]:
        """Pods the plan puts here (after those already bound)."""
        return self.pods[len(self.node.pods):]
