"""Karpenter's scheduling-benchmark catalog: 400 instance types where type i has i+1 vCPU, 2(i+1) GiB, 10(i+1) pods
and costs 0.1 x vCPU + 0.1 x GiB per hour; spot in test-zone-1 and -2, on-demand in test-zone-1..3."""

from __future__ import annotations

from controller.api import labels as L
from controller.api.quantity import CPU, EPHEMERAL_STORAGE, MEMORY, PODS
from controller.catalog.types import InstanceType, Offering, Overhead

GIB = 2**30
SPOT_ZONES = ("test-zone-1", "test-zone-2")
ON_DEMAND_ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")


def benchmark_instance_types(count: int = 400) -> list[InstanceType]:
    """The synthetic types, with a small fixed overhead (100m cpu, 10Mi memory) like Karpenter's fake provider."""
    out = []
    for i in range(count):
        vcpu, gib = i + 1, 2 * (i + 1)
        price = round(0.1 * vcpu + 0.1 * gib, 6)
        name = f"fake-it-{i}"
        offerings = [Offering(z, L.CAPACITY_TYPE_SPOT, price) for z in SPOT_ZONES]
        offerings += [Offering(z, L.CAPACITY_TYPE_ON_DEMAND, price) for z in ON_DEMAND_ZONES]
        out.append(InstanceType(
            name=name,
            labels={L.INSTANCE_TYPE: name, L.ARCH: "amd64", L.OS: "linux", L.INSTANCE_CPU: str(vcpu),
                    L.INSTANCE_MEMORY: str(gib * 1024), L.INSTANCE_FAMILY: "fake", L.INSTANCE_SIZE: str(i)},
            capacity={CPU: vcpu * 1000, MEMORY: gib * GIB, PODS: 10 * vcpu, EPHEMERAL_STORAGE: 20 * GIB},
            overhead=Overhead(kube_reserved={CPU: 100, MEMORY: 10 * 2**20}),
            offerings=offerings,
        ))
    return out
