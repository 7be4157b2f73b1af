"""EC2's description of an instance type (DescribeInstanceTypes) -> karpy's InstanceType, as Karpenter's AWS
provider derives it: the karpenter.k8s.aws/* labels, capacity (less the VM memory overhead) and allocatable."""

from __future__ import annotations

import re
from typing import Any

from controller.api import labels as L
from controller.api.quantity import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, to_canonical
from controller.catalog.allocatable import (
    DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
    eni_limited_max_pods,
    overhead,
    vm_memory_capacity,
)
from controller.catalog.types import InstanceType, Offering

ARCHITECTURES = {"x86_64": "amd64", "arm64": "arm64"}
DEFAULT_ROOT_VOLUME = "20Gi"
NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
NEURON = "aws.amazon.com/neuron"
EFA = "vpc.amazonaws.com/efa"
_FAMILY = re.compile(r"^([a-z]+)(\d+)([a-z0-9-]*)$")


def supported(info: dict[str, Any]) -> bool:
    """Whether Karpenter would offer this type: an x86_64 or arm64 HVM type (no Mac hosts)."""
    archs = (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []
    virt = info.get("SupportedVirtualizationTypes") or ["hvm"]
    return any(a in ARCHITECTURES for a in archs) and "hvm" in virt


# The EC2 fields instance_type_from_ec2 and the price model read. DescribeInstanceTypes answers carry five times as
# much (~15 KiB a type as parsed dicts); keeping only these keeps snapshot files small and the controller's cache of
# ~900 types a few MiB instead of ~15.
KEPT_FIELDS = ("InstanceType", "ProcessorInfo", "VCpuInfo", "MemoryInfo", "Hypervisor", "BareMetal", "NetworkInfo",
               "EbsInfo", "InstanceStorageInfo", "GpuInfo", "NeuronInfo", "InferenceAcceleratorInfo",
               "SupportedUsageClasses", "SupportedVirtualizationTypes", "BurstablePerformanceSupported")
_NETWORK_FIELDS = ("MaximumNetworkInterfaces", "Ipv4AddressesPerInterface", "EncryptionInTransitSupported",
                   "EfaSupported", "EfaInfo", "NetworkCards")


def trim_info(info: dict[str, Any]) -> dict[str, Any]:
    """The fields of one DescribeInstanceTypes entry that karpy reads (KEPT_FIELDS); idempotent."""
    out = {k: info[k] for k in KEPT_FIELDS if k in info}
    if "NetworkInfo" in out:
        out["NetworkInfo"] = {k: v for k, v in out["NetworkInfo"].items() if k in _NETWORK_FIELDS}
        out["NetworkInfo"]["NetworkCards"] = [{"BaselineBandwidthInGbps": c.get("BaselineBandwidthInGbps")}
                                              for c in out["NetworkInfo"].get("NetworkCards", [])
                                              if c.get("BaselineBandwidthInGbps")]
    if "EbsInfo" in out:
        bw = (out["EbsInfo"].get("EbsOptimizedInfo") or {}).get("MaximumBandwidthInMbps")
        out["EbsInfo"] = {"EbsOptimizedInfo": {"MaximumBandwidthInMbps": bw}} if bw else {}
    return out


DESCRIBE_CHUNK = 100  # DescribeInstanceTypes takes at most 100 names a call


def describe_instance_data(ec2: Any) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """DescribeInstanceTypes (the types Karpenter supports, trimmed to the fields karpy reads) and the zones each is
    offered in, from an EC2 client.

    The offerings come first; the types offered in the region are then described by name, 100 a call, so no answer
    holds more than 100 types whatever page size an endpoint uses (LocalStack answers one page of ~1,200 types, a
    30 MiB peak to parse)."""
    zones: dict[str, list[str]] = {}
    for page in ec2.get_paginator("describe_instance_type_offerings").paginate(LocationType="availability-zone"):
        for o in page["InstanceTypeOfferings"]:
            zones.setdefault(o["InstanceType"], []).append(o["Location"])
    names = sorted(zones)
    infos: list[dict[str, Any]] = []
    for i in range(0, len(names), DESCRIBE_CHUNK):
        chunk = names[i:i + DESCRIBE_CHUNK]
        for page in ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=chunk):
            infos.extend(trim_info(t) for t in page["InstanceTypes"])
    return [i for i in infos if supported(i)], {k: sorted(v) for k, v in zones.items()}


def _labels(info: dict[str, Any], region: str) -> dict[str, str]:
    name = info["InstanceType"]
    family, _, size = name.partition(".")
    proc = info.get("ProcessorInfo") or {}
    arch = next((ARCHITECTURES[a] for a in proc.get("SupportedArchitectures") or [] if a in ARCHITECTURES), "amd64")
    out = {
        L.INSTANCE_TYPE: name, L.ARCH: arch, L.OS: "linux", L.REGION: region,
        L.INSTANCE_FAMILY: family, L.INSTANCE_SIZE: size,
        L.INSTANCE_CPU: str(info["VCpuInfo"]["DefaultVCpus"]),
        L.INSTANCE_MEMORY: str(info["MemoryInfo"]["SizeInMiB"]),
        L.INSTANCE_HYPERVISOR: str(info.get("Hypervisor") or ""),
        L.INSTANCE_ENCRYPTION_IN_TRANSIT: str(bool((info.get("NetworkInfo") or {}).get(
            "EncryptionInTransitSupported"))).lower(),
    }
    m = _FAMILY.match(family)
    if m:
        out[L.INSTANCE_CATEGORY] = m.group(1)
        out[L.INSTANCE_GENERATION] = m.group(2)
    else:
        out[L.INSTANCE_CATEGORY] = family.split("-")[0]
    if proc.get("Manufacturer"):
        out[L.INSTANCE_CPU_MANUFACTURER] = str(proc["Manufacturer"]).lower()
    if proc.get("SustainedClockSpeedInGhz"):
        out[L.INSTANCE_CPU_SUSTAINED_CLOCK_SPEED] = str(round(float(proc["SustainedClockSpeedInGhz"]) * 1000))
    ebs = ((info.get("EbsInfo") or {}).get("EbsOptimizedInfo") or {}).get("MaximumBandwidthInMbps")
    if ebs:
        out[L.INSTANCE_EBS_BANDWIDTH] = str(int(ebs))
    cards = (info.get("NetworkInfo") or {}).get("NetworkCards") or []
    baseline = sum(float(c.get("BaselineBandwidthInGbps") or 0) for c in cards)
    if baseline:
        out[L.INSTANCE_NETWORK_BANDWIDTH] = str(round(baseline * 1000))
    nvme = (info.get("InstanceStorageInfo") or {}).get("TotalSizeInGB")
    if nvme and (info.get("InstanceStorageInfo") or {}).get("NvmeSupport") != "unsupported":
        out[L.INSTANCE_LOCAL_NVME] = str(int(nvme))
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    if gpus:
        gpu = gpus[0]
        out[L.INSTANCE_GPU_NAME] = str(gpu.get("Name", "")).lower()
        out[L.INSTANCE_GPU_MANUFACTURER] = str(gpu.get("Manufacturer", "")).lower()
        out[L.INSTANCE_GPU_COUNT] = str(sum(int(g.get("Count", 0)) for g in gpus))
        out[L.INSTANCE_GPU_MEMORY] = str(int((gpu.get("MemoryInfo") or {}).get("SizeInMiB", 0)))
    accel = (info.get("NeuronInfo") or {}).get("NeuronDevices") or (
        (info.get("InferenceAcceleratorInfo") or {}).get("Accelerators") or [])
    if accel:
        a = accel[0]
        out[L.INSTANCE_ACCELERATOR_NAME] = str(a.get("Name", "")).lower()
        out[L.INSTANCE_ACCELERATOR_MANUFACTURER] = str(a.get("Manufacturer", "aws")).lower()
        out[L.INSTANCE_ACCELERATOR_COUNT] = str(sum(int(x.get("Count", 0)) for x in accel))
    return out


# the Windows families' node.kubernetes.io/windows-build values (Karpenter's Windows2019/2022/2025 builds)
WINDOWS_BUILDS = {"windows2019": "10.0.17763", "windows2022": "10.0.20348", "windows2025": "10.0.26100"}
PRIVATE_IPV4_ADDRESS = "vpc.amazonaws.com/PrivateIPv4Address"


def default_max_pods(info: dict[str, Any], reserved_enis: int = 0) -> int:
    """ENI-limited pod density, Karpenter's default when the EC2NodeClass sets no maxPods; RESERVED_ENIS are ENIs the
    VPC CNI may not use for pods (custom networking)."""
    net = info.get("NetworkInfo") or {}
    enis = max(0, int(net.get("MaximumNetworkInterfaces") or 1) - reserved_enis)
    return eni_limited_max_pods(enis, int(net.get("Ipv4AddressesPerInterface") or 2))


def instance_type_from_ec2(info: dict[str, Any], offerings: list[Offering], *, region: str, max_pods: int | None = None,
                           ami_family: str = "al2023", kubelet: dict[str, Any] | None = None,
                           vm_memory_overhead_percent: float = DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
                           reserved_enis: int = 0) -> InstanceType:
    """One DescribeInstanceTypes item -> InstanceType with Karpenter's labels, capacity and overhead.

    `kubelet` is the EC2NodeClass's spec.kubelet (maxPods, podsPerCore, kubeReserved, systemReserved, evictionHard).
    """
    kubelet = kubelet or {}
    vcpus = int(info["VCpuInfo"]["DefaultVCpus"])
    pods = max_pods or kubelet.get("maxPods") or default_max_pods(info, reserved_enis)
    if kubelet.get("podsPerCore"):
        pods = min(pods, int(kubelet["podsPerCore"]) * vcpus)
    capacity: dict[str, int] = {
        CPU: vcpus * 1000,
        MEMORY: vm_memory_capacity(int(info["MemoryInfo"]["SizeInMiB"]), vm_memory_overhead_percent),
        PODS: int(pods),
        EPHEMERAL_STORAGE: to_canonical(EPHEMERAL_STORAGE, DEFAULT_ROOT_VOLUME),
    }
    for gpu in (info.get("GpuInfo") or {}).get("Gpus") or []:
        maker = str(gpu.get("Manufacturer", "")).lower()
        resource = NVIDIA_GPU if maker == "nvidia" else AMD_GPU if maker == "amd" else None
        if resource:
            capacity[resource] = capacity.get(resource, 0) + int(gpu.get("Count", 0))
    neuron = (info.get("NeuronInfo") or {}).get("NeuronDevices") or []
    if neuron:
        capacity[NEURON] = sum(int(d.get("Count", 0)) for d in neuron)
    efa = (info.get("NetworkInfo") or {}).get("EfaInfo") or {}
    if (info.get("NetworkInfo") or {}).get("EfaSupported") and efa.get("MaximumEfaInterfaces"):
        capacity[EFA] = int(efa["MaximumEfaInterfaces"])
    labels = _labels(info, region)
    build = WINDOWS_BUILDS.get(ami_family)
    if build is not None:
        # Windows AMIs run on amd64 only: any other architecture gets no OS (Karpenter's empty requirement), which
        # no workload's kubernetes.io/os selects; the build label targets one Windows Server release
        labels[L.OS] = "windows" if labels[L.ARCH] == "amd64" else ""
        labels[L.WINDOWS_BUILD] = build
        # the VPC resource controller's secondary IPv4 addresses, which Windows pods request
        ips = int((info.get("NetworkInfo") or {}).get("Ipv4AddressesPerInterface") or 1)
        capacity[PRIVATE_IPV4_ADDRESS] = max(0, ips - 1)
    return InstanceType(
        name=info["InstanceType"],
        labels=labels,
        capacity=capacity,
        overhead=overhead(capacity, max_pods=int(pods), ami_family=ami_family,
                          kube_reserved=kubelet.get("kubeReserved"), system_reserved=kubelet.get("systemReserved"),
                          eviction_hard=kubelet.get("evictionHard")),
        offerings=offerings,
    )
