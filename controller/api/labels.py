"""Karpenter's label, annotation, taint and tag names (karpenter.sh and karpenter.k8s.aws), in one place."""

from __future__ import annotations

GROUP = "karpenter.sh"
AWS_GROUP = "karpenter.k8s.aws"

# Kubernetes well-known labels
HOSTNAME = "kubernetes.io/hostname"
ARCH = "kubernetes.io/arch"
OS = "kubernetes.io/os"
WINDOWS_BUILD = "node.kubernetes.io/windows-build"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"

# Karpenter core labels
NODEPOOL = "karpenter.sh/nodepool"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
INITIALIZED = "karpenter.sh/initialized"
REGISTERED = "karpenter.sh/registered"
CAPACITY_TYPE_SPOT = "spot"
CAPACITY_TYPE_ON_DEMAND = "on-demand"
CAPACITY_TYPE_RESERVED = "reserved"

# Karpenter annotations
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
NODEPOOL_HASH = "karpenter.sh/nodepool-hash"
NODEPOOL_HASH_VERSION = "karpenter.sh/nodepool-hash-version"
NODECLAIM_TERMINATION_TIMESTAMP = "karpenter.sh/nodeclaim-termination-timestamp"
NODECLAIM_MIN_VALUES_RELAXED = "karpenter.sh/nodeclaim-min-values-relaxed"
EC2NODECLASS_HASH = "karpenter.k8s.aws/ec2nodeclass-hash"
EC2NODECLASS_HASH_VERSION = "karpenter.k8s.aws/ec2nodeclass-hash-version"

# Taints Karpenter places
DISRUPTED_TAINT_KEY = "karpenter.sh/disrupted"
UNREGISTERED_TAINT_KEY = "karpenter.sh/unregistered"

TERMINATION_FINALIZER = "karpenter.sh/termination"

# AWS provider labels
EC2NODECLASS = "karpenter.k8s.aws/ec2nodeclass"
ZONE_ID = "topology.k8s.aws/zone-id"
INSTANCE_HYPERVISOR = "karpenter.k8s.aws/instance-hypervisor"
INSTANCE_ENCRYPTION_IN_TRANSIT = "karpenter.k8s.aws/instance-encryption-in-transit-supported"
INSTANCE_CATEGORY = "karpenter.k8s.aws/instance-category"
INSTANCE_FAMILY = "karpenter.k8s.aws/instance-family"
INSTANCE_GENERATION = "karpenter.k8s.aws/instance-generation"
INSTANCE_LOCAL_NVME = "karpenter.k8s.aws/instance-local-nvme"
INSTANCE_SIZE = "karpenter.k8s.aws/instance-size"
INSTANCE_CPU = "karpenter.k8s.aws/instance-cpu"
INSTANCE_CPU_MANUFACTURER = "karpenter.k8s.aws/instance-cpu-manufacturer"
INSTANCE_CPU_SUSTAINED_CLOCK_SPEED = "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz"
INSTANCE_MEMORY = "karpenter.k8s.aws/instance-memory"
INSTANCE_EBS_BANDWIDTH = "karpenter.k8s.aws/instance-ebs-bandwidth"
INSTANCE_NETWORK_BANDWIDTH = "karpenter.k8s.aws/instance-network-bandwidth"
INSTANCE_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
INSTANCE_GPU_MANUFACTURER = "karpenter.k8s.aws/instance-gpu-manufacturer"
INSTANCE_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
INSTANCE_GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"
INSTANCE_ACCELERATOR_NAME = "karpenter.k8s.aws/instance-accelerator-name"
INSTANCE_ACCELERATOR_MANUFACTURER = "karpenter.k8s.aws/instance-accelerator-manufacturer"
INSTANCE_ACCELERATOR_COUNT = "karpenter.k8s.aws/instance-accelerator-count"
INSTANCE_CAPABILITY_FLEX = "karpenter.k8s.aws/instance-capability-flex"
CAPACITY_RESERVATION_ID = "karpenter.k8s.aws/capacity-reservation-id"
CAPACITY_RESERVATION_TYPE = "karpenter.k8s.aws/capacity-reservation-type"
CAPACITY_RESERVATION_INTERRUPTIBLE = "karpenter.k8s.aws/capacity-reservation-interruptible"
INSTANCE_TENANCY = "karpenter.k8s.aws/instance-tenancy"
NITRO_SANDBOX = "karpenter.k8s.aws/nitro-sandbox"
PLACEMENT_GROUP_ID = "karpenter.k8s.aws/placement-group-id"
PLACEMENT_GROUP_PARTITION = "karpenter.k8s.aws/placement-group-partition"

AWS_INSTANCE_LABELS: frozenset[str] = frozenset({
    INSTANCE_HYPERVISOR, INSTANCE_ENCRYPTION_IN_TRANSIT, INSTANCE_CATEGORY, INSTANCE_FAMILY, INSTANCE_GENERATION,
    INSTANCE_LOCAL_NVME, INSTANCE_SIZE, INSTANCE_CPU, INSTANCE_CPU_MANUFACTURER, INSTANCE_CPU_SUSTAINED_CLOCK_SPEED,
    INSTANCE_MEMORY, INSTANCE_EBS_BANDWIDTH, INSTANCE_NETWORK_BANDWIDTH, INSTANCE_GPU_NAME, INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_COUNT, INSTANCE_GPU_MEMORY, INSTANCE_ACCELERATOR_NAME, INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_COUNT, INSTANCE_CAPABILITY_FLEX, CAPACITY_RESERVATION_ID, CAPACITY_RESERVATION_TYPE,
    CAPACITY_RESERVATION_INTERRUPTIBLE, INSTANCE_TENANCY, NITRO_SANDBOX, PLACEMENT_GROUP_ID, PLACEMENT_GROUP_PARTITION,
    ZONE_ID, EC2NODECLASS,
})
# The karpenter.k8s.aws keys a NodePool or NodeClaim may name (every other key in that domain is Karpenter's own).
AWS_UNRESTRICTED_LABELS: frozenset[str] = frozenset(k for k in AWS_INSTANCE_LABELS if k.startswith(AWS_GROUP + "/"))

# Labels Karpenter knows how to satisfy by choosing an instance type / offering / NodePool.
WELL_KNOWN_LABELS: frozenset[str] = frozenset({
    NODEPOOL, ZONE, REGION, INSTANCE_TYPE, ARCH, OS, CAPACITY_TYPE, WINDOWS_BUILD,
}) | AWS_INSTANCE_LABELS

# Domains users may not set labels in, except for the well-known keys. Karpenter no longer restricts kubernetes.io
# or k8s.io: only kubernetes.io/hostname among them.
RESTRICTED_LABEL_DOMAINS: frozenset[str] = frozenset({GROUP, AWS_GROUP})
# Labels that may never appear in a NodePool's requirements or template labels.
RESTRICTED_LABELS: frozenset[str] = frozenset({HOSTNAME, NODEPOOL})
# Values Karpenter knows for a well-known label: an In requirement must keep at least one of them.
WELL_KNOWN_VALUES: dict[str, frozenset[str]] = {
    CAPACITY_TYPE: frozenset({CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_RESERVED}),
    INSTANCE_TENANCY: frozenset({"default", "dedicated"}),
}

# Labels whose value is an integer, so Gt/Lt/Gte/Lte make sense on them.
INTEGER_LABELS: frozenset[str] = frozenset({
    INSTANCE_GENERATION, INSTANCE_LOCAL_NVME, INSTANCE_CPU, INSTANCE_CPU_SUSTAINED_CLOCK_SPEED, INSTANCE_MEMORY,
    INSTANCE_EBS_BANDWIDTH, INSTANCE_NETWORK_BANDWIDTH, INSTANCE_GPU_COUNT, INSTANCE_GPU_MEMORY,
    INSTANCE_ACCELERATOR_COUNT,
})


def label_domain(key: str) -> str:
    """The DNS prefix of a label key ("" when it has none)."""
    return key.split("/", 1)[0] if "/" in key else ""


def is_restricted_label(key: str) -> bool:
    """True for keys a NodePool may not require or set, as Karpenter's runtime validation decides:
    kubernetes.io/hostname, karpenter.sh/nodepool and any key in a restricted domain (or a subdomain of one) that is
    not well known."""
    if key in RESTRICTED_LABELS:
        return True
    if key in WELL_KNOWN_LABELS:
        return False
    domain = label_domain(key)
    return any(domain == d or domain.endswith("." + d) for d in RESTRICTED_LABEL_DOMAINS)
