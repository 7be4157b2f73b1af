"""The schemas of karpenter.sh/v1 NodePool and NodeClaim and karpenter.k8s.aws/v1 EC2NodeClass: every field, with
Karpenter's defaults, enums, bounds and formats."""

from __future__ import annotations

import re
from typing import Any

from controller.api.schema import A, B, Field, I, M, O, Q, S

LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_QUALIFIED = re.compile(rf"^({DNS_SUBDOMAIN}/)?{LABEL_NAME}$")
_LABEL_VALUE = re.compile(rf"^({LABEL_NAME})?$")
# Go durations as Karpenter accepts them (no days), optionally "Never"
DURATION = r"([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+"
_DURATION_OR_NEVER = re.compile(rf"^({DURATION}|Never)$")
_DURATION = re.compile(rf"^{DURATION}$")
_BUDGET_DURATION = re.compile(r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$")
_BUDGET_NODES = re.compile(r"^((100|[0-9]{1,2})%|[0-9]+)$")
CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
AMI_ALIAS_FAMILIES = ("al2", "al2023", "bottlerocket", "windows2019", "windows2022")
AMI_FAMILIES = ("AL2", "AL2023", "Bottlerocket", "Custom", "Windows2019", "Windows2022")
EVICTION_SIGNALS = ("memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available",
                    "imagefs.inodesFree", "pid.available")
RESERVED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pid")


def qualified_name(value: Any) -> str | None:
    """A Kubernetes label/taint key: optional DNS prefix, then a name of at most 63 characters."""
    if not isinstance(value, str):
        return None
    name = value.rsplit("/", 1)[-1]
    if not _QUALIFIED.match(value) or len(name) > 63 or len(value.split("/", 1)[0]) > 253:
        return f"{value!r} is not a valid label key (optional DNS prefix, then at most 63 of [A-Za-z0-9-_.])"
    return None


def label_value(value: Any) -> str | None:
    """A Kubernetes label value: empty, or at most 63 of [A-Za-z0-9-_.] starting and ending alphanumeric."""
    if not isinstance(value, str):
        return None
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        return f"{value!r} is not a valid label value"
    return None


def duration_or_never(value: Any) -> str | None:
    """A Go duration (e.g. 720h, 1h30m; no days) or Never."""
    if isinstance(value, str) and not _DURATION_OR_NEVER.match(value):
        return f"{value!r} is not a duration like 720h or 30m (Go durations have no 'd') or Never"
    return None


def duration(value: Any) -> str | None:
    """A Go duration (e.g. 48h, 10m)."""
    if isinstance(value, str) and not _DURATION.match(value):
        return f"{value!r} is not a duration like 48h or 10m (Go durations have no 'd')"
    return None


def budget_duration(value: Any) -> str | None:
    """A budget's duration: hours and/or minutes, e.g. 8h, 30m, 1h30m."""
    if isinstance(value, str) and not _BUDGET_DURATION.match(value):
        return f"{value!r} is not a budget duration (hours and minutes only, e.g. 8h or 1h30m)"
    return None


def budget_nodes(value: Any) -> str | None:
    """A budget's nodes: a non-negative integer or a percentage 0-100%."""
    if isinstance(value, str) and not _BUDGET_NODES.match(value):
        return f"{value!r} must be a non-negative integer or a percentage from 0% to 100%"
    return None


def cron_schedule(value: Any) -> str | None:
    """A five-field cron expression or one of the @macros."""
    if not isinstance(value, str):
        return None
    if value in CRON_MACROS:
        return None
    if value.startswith("@") or len(value.split()) != 5:
        return f"{value!r} is not a cron schedule (five fields, or one of {', '.join(CRON_MACROS)})"
    from croniter import croniter

    if not croniter.is_valid(value):
        return f"{value!r} is not a valid cron schedule"
    return None


def _taint() -> Field:
    return O("A node taint.", required=("key", "effect"),
             key=S("Taint key.", check=qualified_name), value=S("Taint value.", check=label_value),
             effect=S("Taint effect.", enum=TAINT_EFFECTS), timeAdded=S("Time the taint was added (NoExecute)."))


def _requirement() -> Field:
    return O("A node selector requirement with an optional minimum number of distinct values.",
             required=("key", "operator"),
             key=S("Label key.", check=qualified_name),
             operator=S("Operator.", enum=OPERATORS),
             values=A(S(check=label_value), "Values (no cap: a NodeClaim lists every instance-type option)."),
             minValues=I("Minimum distinct values the scheduler must keep for this key.", minimum=1, maximum=50))


def _node_class_ref() -> Field:
    return O("The node class the NodeClaims of this pool use.", required=("group", "kind", "name"),
             group=S("API group of the node class.", pattern=r"^[^/]*$"),
             kind=S("Kind of the node class.", pattern=r"^[^/]*$"),
             name=S("Name of the node class.", pattern=r"^[^/]+$"))


def _condition() -> Field:
    return O("A status condition.", required=("type", "status"),
             type=S(), status=S(enum=("True", "False", "Unknown")), reason=S(), message=S(),
             lastTransitionTime=S(), observedGeneration=I(minimum=0))


def _metadata() -> Field:
    f = O("Object metadata.")
    f.preserve_unknown = True
    f.fields = {"name": S(), "namespace": S(), "labels": M(S()), "annotations": M(S()), "uid": S(),
                "generation": I(), "resourceVersion": S(), "creationTimestamp": S(), "finalizers": A(S())}
    return f


NODEPOOL_SPEC = O(
    "NodePool: the constraints and limits of the nodes Karpenter creates for pending pods.",
    required=("template",),
    template=O("Template of the NodeClaims this pool creates.", required=("spec",),
               metadata=O("Labels and annotations put on the nodes.",
                          labels=M(S(check=label_value), "Node labels."), annotations=M(S(), "Node annotations.")),
               spec=O("NodeClaim template spec.", required=("nodeClassRef", "requirements"),
                      taints=A(_taint(), "Taints on every node."),
                      startupTaints=A(_taint(), "Taints expected to be removed by a daemon after startup."),
                      requirements=A(_requirement(), "Requirements that constrain instance types and offerings.",
                                     max_items=100),
                      nodeClassRef=_node_class_ref(),
                      expireAfter=S("How long a node lives before it is replaced (or Never).", default="720h",
                                    check=duration_or_never),
                      terminationGracePeriod=S("How long draining may take before the node is forced down.",
                                               check=duration))),
    disruption=O("How and when Karpenter may disrupt nodes of this pool.",
                 consolidateAfter=S("How long a node must be consolidatable first (or Never).", default="0s",
                                    check=duration_or_never),
                 consolidationPolicy=S("Which nodes consolidation considers.", default="WhenEmptyOrUnderutilized",
                                       enum=("WhenEmpty", "WhenEmptyOrUnderutilized")),
                 budgets=A(O("A disruption budget.",
                             nodes=S("Nodes that may be disrupted at once: a count or a percentage.", default="10%",
                                     check=budget_nodes),
                             schedule=S("When the budget applies (cron, UTC).", check=cron_schedule),
                             duration=S("How long after each schedule tick it applies.", check=budget_duration),
                             reasons=A(S(enum=("Underutilized", "Empty", "Drifted")), "Disruption reasons it covers.")),
                           "Disruption budgets.", default=[{"nodes": "10%"}], max_items=50),
                 default={}),
    limits=M(Q(), "Resource limits of the pool (cpu, memory, nvidia.com/gpu, ...)."),
    weight=I("Priority among pools (higher first).", minimum=1, maximum=100),
    replicas=I("Static node count (static capacity pools).", minimum=0),
)
NODEPOOL_STATUS = O("Observed state.", resources=M(Q()), nodes=I(minimum=0), conditions=A(_condition()),
                    nodeClassObservedGeneration=I(minimum=0))

NODECLAIM_SPEC = O(
    "NodeClaim: a request for one node.", required=("nodeClassRef", "requirements"),
    taints=A(_taint()), startupTaints=A(_taint()),
    requirements=A(_requirement(), max_items=100),
    resources=O("Resources the node must provide.", requests=M(Q())),
    nodeClassRef=_node_class_ref(),
    terminationGracePeriod=S(check=duration),
    expireAfter=S(default="720h", check=duration_or_never),
)
NODECLAIM_STATUS = O("Observed state.", nodeName=S(), providerID=S(), imageID=S(), capacity=M(Q()),
                     allocatable=M(Q()), conditions=A(_condition()), lastPodEventTime=S())

_TAGS = M(S(), "Tags to match (value * matches any value).")
EC2NODECLASS_SPEC = O(
    "EC2NodeClass: how nodes are launched on EC2.", required=("subnetSelectorTerms", "securityGroupSelectorTerms",
                                                            "amiSelectorTerms"),
    kubelet=O("Kubelet configuration for the nodes.",
              podsPerCore=I(minimum=0), maxPods=I(minimum=0),
              systemReserved=M(Q()), kubeReserved=M(Q()),
              evictionHard=M(S()), evictionSoft=M(S()), evictionSoftGracePeriod=M(S(check=duration)),
              evictionMaxPodGracePeriod=I(), imageGCHighThresholdPercent=I(minimum=0, maximum=100),
              imageGCLowThresholdPercent=I(minimum=0, maximum=100), cpuCFSQuota=B(), clusterDNS=A(S())),
    subnetSelectorTerms=A(O("Subnets by tags or id.", tags=_TAGS, id=S(pattern=r"^subnet-.+$")), min_items=1,
                          max_items=30),
    securityGroupSelectorTerms=A(O("Security groups by tags, id or name.", tags=_TAGS, id=S(pattern=r"^sg-.+$"),
                                   name=S()), min_items=1, max_items=30),
    capacityReservationSelectorTerms=A(O("Capacity reservations by tags, id or owner.", tags=_TAGS,
                                         id=S(pattern=r"^cr-.+$"), ownerID=S(pattern=r"^[0-9]{12}$")), max_items=30),
    associatePublicIPAddress=B(),
    amiSelectorTerms=A(O("AMIs by alias, tags, id, name, owner or SSM parameter.", alias=S(), tags=_TAGS,
                         id=S(pattern=r"^ami-.+$"), name=S(), owner=S(), ssmParameter=S()), min_items=1,
                       max_items=30),
    amiFamily=S("AMI family (only without an alias).", enum=AMI_FAMILIES),
    userData=S("User data merged with what Karpenter generates."),
    role=S("IAM role of the nodes (Karpenter manages the instance profile)."),
    instanceProfile=S("An existing instance profile (instead of role)."),
    tags=M(S(), "Tags on instances, volumes, network interfaces and launch templates."),
    blockDeviceMappings=A(O("A block device.", deviceName=S(),
                            ebs=O("EBS settings.", deleteOnTermination=B(), encrypted=B(), iops=I(minimum=0),
                                  kmsKeyID=S(), snapshotID=S(), throughput=I(minimum=0),
                                  volumeInitializationRate=I(minimum=100, maximum=300), volumeSize=Q(),
                                  volumeType=S(enum=("standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"))),
                            rootVolume=B()), max_items=50),
    instanceStorePolicy=S(enum=("RAID0",)),
    detailedMonitoring=B(),
    metadataOptions=O("Instance metadata service options.",
                      httpEndpoint=S(default="enabled", enum=("enabled", "disabled")),
                      httpProtocolIPv6=S(default="disabled", enum=("enabled", "disabled")),
                      httpPutResponseHopLimit=I(default=1, minimum=1, maximum=64),
                      httpTokens=S(default="required", enum=("required", "optional")),
                      default={}),
    context=S("Reserved for EC2 launch context."),
)
EC2NODECLASS_STATUS = O(
    "Resolved resources.",
    subnets=A(O(id=S(), zone=S(), zoneID=S())), securityGroups=A(O(id=S(), name=S())),
    capacityReservations=A(O(id=S(), availabilityZone=S(), instanceType=S(), ownerID=S(),
                             instanceMatchCriteria=S(), endTime=S(), reservationType=S(), state=S())),
    amis=A(O(id=S(), name=S(), deprecated=B(), requirements=A(_requirement()))),
    instanceProfile=S(), conditions=A(_condition()))


def document_schema(spec: Field, status: Field, spec_required: bool = True) -> Field:
    """A whole object: apiVersion, kind, metadata, spec, status."""
    return O("", required=("spec",) if spec_required else (), apiVersion=S(), kind=S(), metadata=_metadata(),
             spec=spec, status=status)


KINDS: dict[tuple[str, str], Field] = {
    ("karpenter.sh/v1", "NodePool"): document_schema(NODEPOOL_SPEC, NODEPOOL_STATUS),
    ("karpenter.sh/v1", "NodeClaim"): document_schema(NODECLAIM_SPEC, NODECLAIM_STATUS),
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): document_schema(EC2NODECLASS_SPEC, EC2NODECLASS_STATUS),
}
