"""Repair policies: which Node conditions make a node unhealthy and for how long they are tolerated before node repair
replaces it (Karpenter's cloudprovider.RepairPolicy; the AWS provider's list, kubelet and Node Monitoring Agent
conditions)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RepairPolicy:
    """A Node condition type and status that is unhealthy once it has held for toleration seconds."""

    condition_type: str
    condition_status: str
    toleration: float


AWS_REPAIR_POLICIES: tuple[RepairPolicy, ...] = (
    RepairPolicy("Ready", "False", 30 * 60.0),
    RepairPolicy("Ready", "Unknown", 30 * 60.0),
    RepairPolicy("AcceleratedHardwareReady", "False", 10 * 60.0),
    RepairPolicy("StorageReady", "False", 30 * 60.0),
    RepairPolicy("NetworkingReady", "False", 30 * 60.0),
    RepairPolicy("KernelReady", "False", 30 * 60.0),
    RepairPolicy("ContainerRuntimeReady", "False", 30 * 60.0),
)
