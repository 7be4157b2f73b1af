"""Karpenter's node overhead model: what the kubelet reserves, so allocatable = capacity - overhead.

Defaults follow Karpenter's AWS provider (the same numbers as the EKS AMI bootstrap):
- kube-reserved cpu: 6% of the first core, 1% of the second, 0.5% of cores three and four, 0.25% of every core
  above four;
- kube-reserved memory: 11 MiB per pod the node may run (maxPods) plus 255 MiB;
- kube-reserved ephemeral-storage: 1 GiB;
- eviction threshold: memory.available 100 MiB, nodefs.available 10% of the root volume;
- system-reserved: nothing unless the EC2NodeClass's kubelet sets it.
Values the user sets in `spec.kubelet` (kubeReserved, systemReserved, evictionHard) replace the defaults per resource.
"""

from __future__ import annotations

from controller.api.quantity import CPU, EPHEMERAL_STORAGE, MEMORY, parse_quantity, to_canonical
from controller.catalog.types import Overhead

MIB = 2**20
GIB = 2**30
DEFAULT_VM_MEMORY_OVERHEAD_PERCENT = 0.075
DEFAULT_EVICTION_MEMORY = 100 * MIB
DEFAULT_EVICTION_NODEFS_PERCENT = 10
# Karpenter's CPU reservation steps: (first core index, last core index exclusive, fraction reserved per core)
_CPU_STEPS = ((0, 1, 0.06), (1, 2, 0.01), (2, 4, 0.005), (4, 1 << 30, 0.0025))


def eni_limited_max_pods(max_enis: int, ipv4_per_eni: int) -> int:
    """Pods the VPC CNI can address without prefix delegation: ENIs x (IPs per ENI - 1) + 2 host-network pods."""
    return max(0, max_enis * (ipv4_per_eni - 1) + 2)


def vm_memory_capacity(reported_mib: int, overhead_percent: float = DEFAULT_VM_MEMORY_OVERHEAD_PERCENT) -> int:
    """Memory the kubelet will report, in bytes: EC2's figure less the hypervisor's share, floored to whole MiB."""
    return int(reported_mib * (1 - overhead_percent)) * MIB


def kube_reserved_cpu(cpu_millicores: int) -> int:
    """Karpenter's stepped kube-reserved CPU in millicores for a node with that many millicores."""
    cores = cpu_millicores / 1000
    reserved = 0.0
    for start, end, fraction in _CPU_STEPS:
        if cores > start:
            reserved += (min(cores, end) - start) * 1000 * fraction
    return int(reserved)


def kube_reserved_memory(max_pods: int) -> int:
    """Karpenter's kube-reserved memory in bytes: 11 MiB per pod plus 255 MiB."""
    return (11 * max_pods + 255) * MIB


def _resources(raw: dict[str, str] | None) -> dict[str, int]:
    return {k: to_canonical(k, v) for k, v in (raw or {}).items()}


def _eviction(raw: dict[str, str] | None, capacity: dict[str, int]) -> dict[str, int]:
    """Eviction thresholds as amounts: evictionHard signals (memory.available, nodefs.available) in bytes or %."""
    signals = {"memory.available": f"{DEFAULT_EVICTION_MEMORY}",
               "nodefs.available": f"{DEFAULT_EVICTION_NODEFS_PERCENT}%"}
    signals.update(raw or {})
    out: dict[str, int] = {}
    for signal, resource in (("memory.available", MEMORY), ("nodefs.available", EPHEMERAL_STORAGE)):
        value = str(signals.get(signal, "0"))
        if value.endswith("%"):
            out[resource] = int(capacity.get(resource, 0) * float(parse_quantity(value[:-1])) / 100)
        else:
            out[resource] = to_canonical(resource, value)
    return out


def overhead(capacity: dict[str, int], *, max_pods: int, ami_family: str = "al2023",
             kube_reserved: dict[str, str] | None = None, system_reserved: dict[str, str] | None = None,
             eviction_hard: dict[str, str] | None = None) -> Overhead:
    """The kube-reserved, system-reserved and eviction overhead Karpenter assumes for a node of this capacity."""
    reserved = {
        CPU: kube_reserved_cpu(capacity.get(CPU, 0)),
        MEMORY: kube_reserved_memory(max_pods),
        EPHEMERAL_STORAGE: GIB,
    }
    reserved.update(_resources(kube_reserved))
    return Overhead(kube_reserved=reserved, system_reserved=_resources(system_reserved),
                    eviction_threshold=_eviction(eviction_hard, capacity))
