"""Karpenter's overhead formulas, EC2 label derivation, the bundled snapshot and the price-estimate model."""

import pytest

from controller.api import labels as L
from controller.catalog.allocatable import (
    eni_limited_max_pods,
    kube_reserved_cpu,
    kube_reserved_memory,
    vm_memory_capacity,
)
from controller.catalog.ec2 import instance_type_from_ec2, supported
from controller.catalog.pricing import estimate_on_demand, spot_fraction
from controller.catalog.snapshot import load_catalog
from controller.catalog.synthetic import benchmark_instance_types

MIB = 2**20

M5_LARGE = {  # recorded DescribeInstanceTypes shape (fields karpy reads)
    "InstanceType": "m5.large", "Hypervisor": "nitro", "BareMetal": False,
    "ProcessorInfo": {"SupportedArchitectures": ["x86_64"], "SustainedClockSpeedInGhz": 3.1, "Manufacturer": "Intel"},
    "VCpuInfo": {"DefaultVCpus": 2}, "MemoryInfo": {"SizeInMiB": 8192},
    "NetworkInfo": {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10,
                    "EncryptionInTransitSupported": False, "NetworkCards": [{"BaselineBandwidthInGbps": 0.75}]},
    "EbsInfo": {"EbsOptimizedInfo": {"MaximumBandwidthInMbps": 4750}},
    "SupportedUsageClasses": ["on-demand", "spot"], "SupportedVirtualizationTypes": ["hvm"],
}
G5_XLARGE = {
    "InstanceType": "g5.xlarge", "Hypervisor": "nitro",
    "ProcessorInfo": {"SupportedArchitectures": ["x86_64"], "Manufacturer": "AMD"},
    "VCpuInfo": {"DefaultVCpus": 4}, "MemoryInfo": {"SizeInMiB": 16384},
    "NetworkInfo": {"MaximumNetworkInterfaces": 4, "Ipv4AddressesPerInterface": 15},
    "GpuInfo": {"Gpus": [{"Name": "A10G", "Manufacturer": "NVIDIA", "Count": 1, "MemoryInfo": {"SizeInMiB": 24576}}]},
    "InstanceStorageInfo": {"TotalSizeInGB": 250, "NvmeSupport": "required"},
}
C7G_XLARGE = {
    "InstanceType": "c7g.xlarge", "Hypervisor": "nitro",
    "ProcessorInfo": {"SupportedArchitectures": ["arm64"], "Manufacturer": "AWS"},
    "VCpuInfo": {"DefaultVCpus": 4}, "MemoryInfo": {"SizeInMiB": 8192},
    "NetworkInfo": {"MaximumNetworkInterfaces": 4, "Ipv4AddressesPerInterface": 15,
                    "EncryptionInTransitSupported": True},
}


def test_cpu_reservation_steps():
    assert kube_reserved_cpu(1000) == 60
    assert kube_reserved_cpu(2000) == 70
    assert kube_reserved_cpu(4000) == 80
    assert kube_reserved_cpu(8000) == 90  # 60 + 10 + 10 + 4 x 2.5
    assert kube_reserved_cpu(96000) == 310


def test_memory_and_pods_formulas():
    assert kube_reserved_memory(29) == (11 * 29 + 255) * MIB
    assert eni_limited_max_pods(3, 10) == 29  # m5.large
    assert eni_limited_max_pods(15, 50) == 737  # m5.24xlarge
    assert vm_memory_capacity(8192) == 7577 * MIB  # 8192 x 0.925, floored


def test_m5_large_allocatable_is_exact():
    it = instance_type_from_ec2(M5_LARGE, [], region="us-east-1")
    assert it.capacity["pods"] == 29
    assert it.allocatable["cpu"] == 1930
    assert it.allocatable["memory"] == 7577 * MIB - (11 * 29 + 255) * MIB - 100 * MIB
    assert it.allocatable["ephemeral-storage"] == 20 * 2**30 - 2**30 - 2 * 2**30  # 1Gi reserved, 10% eviction


def test_kubelet_overrides_win():
    it = instance_type_from_ec2(M5_LARGE, [], region="us-east-1", kubelet={
        "maxPods": 110, "kubeReserved": {"cpu": "200m"}, "systemReserved": {"memory": "100Mi"},
        "evictionHard": {"memory.available": "5%"}})
    assert it.capacity["pods"] == 110
    assert it.overhead.kube_reserved["cpu"] == 200
    assert it.overhead.kube_reserved["memory"] == (11 * 110 + 255) * MIB
    assert it.overhead.system_reserved == {"memory": 100 * MIB}
    assert it.overhead.eviction_threshold["memory"] == int(7577 * MIB * 0.05)
    per_core = instance_type_from_ec2(M5_LARGE, [], region="us-east-1", kubelet={"podsPerCore": 4})
    assert per_core.capacity["pods"] == 8


def test_labels_follow_karpenter():
    m5 = instance_type_from_ec2(M5_LARGE, [], region="us-east-1").labels
    assert m5[L.INSTANCE_CATEGORY] == "m" and m5[L.INSTANCE_FAMILY] == "m5" and m5[L.INSTANCE_GENERATION] == "5"
    assert m5[L.INSTANCE_SIZE] == "large" and m5[L.INSTANCE_CPU] == "2" and m5[L.INSTANCE_MEMORY] == "8192"
    assert m5[L.ARCH] == "amd64" and m5[L.INSTANCE_CPU_MANUFACTURER] == "intel"
    assert m5[L.INSTANCE_CPU_SUSTAINED_CLOCK_SPEED] == "3100" and m5[L.INSTANCE_NETWORK_BANDWIDTH] == "750"
    g5 = instance_type_from_ec2(G5_XLARGE, [], region="us-east-1")
    assert g5.labels[L.INSTANCE_GPU_NAME] == "a10g" and g5.labels[L.INSTANCE_GPU_COUNT] == "1"
    assert g5.labels[L.INSTANCE_GPU_MANUFACTURER] == "nvidia" and g5.labels[L.INSTANCE_GPU_MEMORY] == "24576"
    assert g5.labels[L.INSTANCE_LOCAL_NVME] == "250" and g5.capacity["nvidia.com/gpu"] == 1
    c7g = instance_type_from_ec2(C7G_XLARGE, [], region="us-east-1").labels
    assert c7g[L.ARCH] == "arm64" and c7g[L.INSTANCE_CPU_MANUFACTURER] == "aws"
    assert c7g[L.INSTANCE_ENCRYPTION_IN_TRANSIT] == "true"
    assert not supported({"ProcessorInfo": {"SupportedArchitectures": ["x86_64_mac"]}})


def test_windows_families_target_windows_nodes():
    """Karpenter's types for a Windows EC2NodeClass: os windows on amd64 (no OS elsewhere), the family's
    windows-build, and the VPC resource controller's private IPv4 addresses as capacity."""
    linux = instance_type_from_ec2(M5_LARGE, [], region="us-east-1")
    assert linux.labels[L.OS] == "linux" and L.WINDOWS_BUILD not in linux.labels
    assert "vpc.amazonaws.com/PrivateIPv4Address" not in linux.capacity
    m5 = instance_type_from_ec2(M5_LARGE, [], region="us-east-1", ami_family="windows2022")
    assert m5.labels[L.OS] == "windows" and m5.labels[L.WINDOWS_BUILD] == "10.0.20348"
    assert m5.capacity["vpc.amazonaws.com/PrivateIPv4Address"] == 9
    assert instance_type_from_ec2(M5_LARGE, [], region="us-east-1",
                                  ami_family="windows2019").labels[L.WINDOWS_BUILD] == "10.0.17763"
    arm = instance_type_from_ec2(C7G_XLARGE, [], region="us-east-1", ami_family="windows2025")
    assert arm.labels[L.OS] == "" and arm.labels[L.WINDOWS_BUILD] == "10.0.26100"


def test_price_model_is_sane():
    assert estimate_on_demand(M5_LARGE) == pytest.approx(0.096, rel=0.01)
    bigger = dict(M5_LARGE, InstanceType="m5.xlarge", VCpuInfo={"DefaultVCpus": 4}, MemoryInfo={"SizeInMiB": 16384})
    assert estimate_on_demand(bigger) > estimate_on_demand(M5_LARGE)
    assert estimate_on_demand(G5_XLARGE) > estimate_on_demand(C7G_XLARGE)
    assert 0.30 <= spot_fraction("m5.large", "us-east-1a") <= 0.45
    assert spot_fraction("m5.large", "us-east-1a") != spot_fraction("m5.large", "us-east-1b")


def test_bundled_snapshot_loads_with_labelled_estimates():
    cat = load_catalog("aws-us-east-1")
    assert cat.region == "us-east-1" and len(cat.instance_types) > 900
    assert cat.price_source.startswith("estimated")
    m5 = next(it for it in cat.instance_types if it.name == "m5.large")
    assert m5.allocatable["cpu"] == 1930
    spot = [o for o in m5.offerings if o.capacity_type == "spot"]
    od = [o for o in m5.offerings if o.capacity_type == "on-demand"]
    assert spot and od and max(o.price for o in spot) < min(o.price for o in od)
    custom = cat.instance_types_for(kubelet={"maxPods": 50})
    assert next(it for it in custom if it.name == "m5.large").capacity["pods"] == 50


def test_unknown_catalog_lists_bundled_names():
    with pytest.raises(ValueError, match="aws-us-east-1, benchmark"):
        load_catalog("nope")


def test_benchmark_catalog_matches_karpenter():
    types = benchmark_instance_types()
    assert len(types) == 400
    t = types[9]
    assert t.capacity["cpu"] == 10000 and t.capacity["memory"] == 20 * 2**30 and t.capacity["pods"] == 100
    assert all(o.price == pytest.approx(3.0) for o in t.offerings)
    assert {(o.zone, o.capacity_type) for o in t.offerings} == {
        ("test-zone-1", "spot"), ("test-zone-2", "spot"), ("test-zone-1", "on-demand"), ("test-zone-2", "on-demand"),
        ("test-zone-3", "on-demand")}


def test_vm_memory_overhead_and_reserved_enis_shape_capacity():
    from controller.catalog.ec2 import instance_type_from_ec2

    info = {"InstanceType": "m5.large", "VCpuInfo": {"DefaultVCpus": 2}, "MemoryInfo": {"SizeInMiB": 8192},
            "NetworkInfo": {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10},
            "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]}}
    default = instance_type_from_ec2(info, [], region="us-east-1")
    tuned = instance_type_from_ec2(info, [], region="us-east-1", vm_memory_overhead_percent=0.1, reserved_enis=1)
    assert default.capacity["pods"] == 3 * 9 + 2  # Karpenter's ENI-limited max pods
    assert tuned.capacity["pods"] == 2 * 9 + 2  # one ENI kept out for custom networking
    assert default.capacity["memory"] == int(8192 * 0.925) * 1024**2
    assert tuned.capacity["memory"] == int(8192 * 0.9) * 1024**2


WINDOWS_DOCS = """\
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: win}
spec:
  role: r
  amiSelectorTerms: [{alias: windows2022@latest}]
  subnetSelectorTerms: [{tags: {a: b}}]
  securityGroupSelectorTerms: [{tags: {a: b}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: win}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: win}
      requirements: [{key: kubernetes.io/os, operator: In, values: [windows]}]
---
apiVersion: v1
kind: Pod
metadata: {name: iis, namespace: default}
spec:
  nodeSelector: {kubernetes.io/os: windows, node.kubernetes.io/windows-build: "10.0.20348"}
  containers: [{name: c, image: x, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"""


def test_a_windows_pod_gets_a_windows_nodeclaim(tmp_path) -> None:
    """`karpy simulate`: a pod selecting Windows Server 2022 lands on the windows2022 EC2NodeClass's types."""
    import json

    from click.testing import CliRunner

    from cli import main

    path = tmp_path / "win.yaml"
    path.write_text(WINDOWS_DOCS)
    result = CliRunner().invoke(main, ["simulate", "-f", str(path), "-o", "json"])
    assert result.exit_code == 0, result.output
    claims = json.loads(result.output)["nodeClaims"]
    assert len(claims) == 1 and claims[0]["nodePool"] == "win" and claims[0]["pods"] == ["default/iis"]
    arch = {it.name: it.labels[L.ARCH] for it in load_catalog().instance_types}
    assert {arch[name] for name in claims[0]["instanceTypeOptions"]} == {"amd64"}  # Windows runs on amd64 only
