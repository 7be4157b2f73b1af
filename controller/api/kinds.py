"""The schemas of karpenter.sh/v1 NodePool and NodeClaim and karpenter.k8s.aws/v1 EC2NodeClass: every field Karpenter's
current CRDs serve, with Karpenter's defaults, enums, bounds, patterns and CEL rules (each rule carries Karpenter's
message and the Python predicate `karpy validate` runs for it)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from controller.api import labels as L
from controller.api.schema import A, B, Field, I, M, O, Q, Rule, S

LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_QUALIFIED = re.compile(rf"^({DNS_SUBDOMAIN}/)?{LABEL_NAME}$")
_LABEL_VALUE = re.compile(rf"^({LABEL_NAME})?$")
# Karpenter's CRD patterns
QUALIFIED_KEY_PATTERN = rf"^({DNS_SUBDOMAIN}(\/))?{LABEL_NAME}$"
LABEL_VALUE_PATTERN = rf"^({LABEL_NAME})?$"
DURATION_OR_NEVER_PATTERN = r"^(([0-9]+(s|m|h))+|Never)$"
DURATION_PATTERN = r"^([0-9]+(s|m|h))+$"
BUDGET_DURATION_PATTERN = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"
BUDGET_NODES_PATTERN = r"^((100|[0-9]{1,2})%|[0-9]+)$"
SCHEDULE_PATTERN = r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
# EBS volume sizes: 1-59000Gi, 1-64000G, 1-58Ti, 1-64T (Karpenter's pattern, empty alternatives included)
VOLUME_SIZE_PATTERN = (r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}"
                       r"|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$")
CONDITION_TYPE_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                          r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
CONSOLIDATION_POLICIES = ("WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced")
DISRUPTION_REASONS = ("Underutilized", "Empty", "Drifted")
AMI_ALIAS_FAMILIES = ("al2", "al2023", "bottlerocket", "windows2019", "windows2022", "windows2025")
AMI_FAMILIES = ("AL2", "AL2023", "Bottlerocket", "Custom", "Windows2019", "Windows2022", "Windows2025")
WINDOWS_ALIAS_FAMILIES = ("windows2019", "windows2022", "windows2025")
EVICTION_SIGNALS = ("memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available",
                    "imagefs.inodesFree", "pid.available")
RESERVED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pid")
# The top-level fields of the upstream kubelet KubeletConfiguration (kubelet.config.k8s.io/v1beta1): Karpenter passes
# any of them through spec.kubelet and refuses the rest.
KUBELET_CONFIGURATION_FIELDS: frozenset[str] = frozenset({
    "address", "allowedUnsafeSysctls", "apiVersion", "authentication", "authorization", "cgroupDriver", "cgroupRoot",
    "cgroupsPerQOS", "clusterDNS", "clusterDomain", "configMapAndSecretChangeDetectionStrategy",
    "containerLogMaxFiles", "containerLogMaxSize", "containerLogMaxWorkers", "containerLogMonitorInterval",
    "containerRuntimeEndpoint", "contentType", "cpuCFSQuota", "cpuCFSQuotaPeriod", "cpuManagerPolicy",
    "cpuManagerPolicyOptions", "cpuManagerReconcilePeriod", "crashLoopBackOff", "defaultPodSysctls",
    "enableContentionProfiling", "enableControllerAttachDetach", "enableDebugFlagsHandler",
    "enableDebuggingHandlers", "enableProfilingHandler", "enableServer", "enableSystemLogHandler",
    "enableSystemLogQuery", "enforceNodeAllocatable", "eventBurst", "eventRecordQPS", "evictionHard",
    "evictionMaxPodGracePeriod", "evictionMinimumReclaim", "evictionPressureTransitionPeriod", "evictionSoft",
    "evictionSoftGracePeriod", "failCgroupV1", "failSwapOn", "featureGates", "fileCheckFrequency", "hairpinMode",
    "healthzBindAddress", "healthzPort", "httpCheckFrequency", "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent", "imageMaximumGCAge", "imageMinimumGCAge", "imagePullCredentialsVerificationPolicy",
    "imageServiceEndpoint", "iptablesDropBit", "iptablesMasqueradeBit", "kernelMemcgNotification", "kind",
    "kubeAPIBurst", "kubeAPIQPS", "kubeReserved", "kubeReservedCgroup", "kubeletCgroups",
    "localStorageCapacityIsolation", "logging", "makeIPTablesUtilChains", "maxOpenFiles", "maxParallelImagePulls",
    "maxPods", "memoryManagerPolicy", "memoryReservationPolicy", "memorySwap", "memoryThrottlingFactor",
    "mergeDefaultEvictionSettings", "nodeLeaseDurationSeconds", "nodeStatusMaxImages", "nodeStatusReportFrequency",
    "nodeStatusUpdateFrequency", "oomScoreAdj", "podCIDR", "podLogsDir", "podPidsLimit", "podsPerCore", "port",
    "preloadedImagesVerificationAllowlist", "protectKernelDefaults", "providerID", "qosReserved", "readOnlyPort",
    "registerNode", "registerWithTaints", "registryBurst", "registryPullQPS", "reservedMemory", "reservedSystemCPUs",
    "resolvConf", "rotateCertificates", "runOnce", "runtimeRequestTimeout", "seccompDefault", "serializeImagePulls",
    "serverTLSBootstrap", "showHiddenMetricsForVersion", "shutdownGracePeriod", "shutdownGracePeriodByPodPriority",
    "shutdownGracePeriodCriticalPods", "singleProcessOOMKill", "staticPodPath", "staticPodURL", "staticPodURLHeader",
    "streamingConnectionIdleTimeout", "syncFrequency", "systemCgroups", "systemReserved", "systemReservedCgroup",
    "tlsCertFile", "tlsCipherSuites", "tlsCurvePreferences", "tlsMinVersion", "tlsPrivateKeyFile",
    "topologyManagerPolicy", "topologyManagerPolicyOptions", "topologyManagerScope", "tracing", "userNamespaces",
    "volumePluginDir", "volumeStatsAggPeriod",
})


def qualified_name(value: Any) -> str | None:
    """A Kubernetes label/taint key: optional DNS prefix of at most 253 characters, then a name of at most 63."""
    if not isinstance(value, str):
        return None
    prefix, _, name = value.rpartition("/")
    if not _QUALIFIED.match(value) or len(name) > 63 or len(prefix) > 253:
        return (f"{value[:80]!r} is not a qualified name (optional DNS subdomain prefix of at most 253 characters "
                "and '/', then at most 63 of [A-Za-z0-9-_.] starting and ending alphanumeric)")
    return None


def label_value(value: Any) -> str | None:
    """A Kubernetes label value: empty, or at most 63 of [A-Za-z0-9-_.] starting and ending alphanumeric."""
    if not isinstance(value, str):
        return None
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        return f"{value[:80]!r} is not a valid label value (at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends)"
    return None


def cron_schedule(value: Any) -> str | None:
    """A five-field cron expression or one of the @macros (Karpenter parses it when the budget is evaluated)."""
    if not isinstance(value, str) or value in CRON_MACROS:
        return None
    if value.startswith("@") or len(value.split()) != 5:
        return None  # the schema pattern reports it
    from croniter import croniter

    if not croniter.is_valid(value):
        return f"{value!r} is not a valid cron schedule"
    return None


# --- label key rules, as Karpenter's CRDs write them -------------------------------------------------------------

def _cel_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def _domain_of(key: str) -> str:
    """What CEL's key.find("^([^/]+)") returns: everything before the first '/', the whole key when it has none."""
    m = re.match(r"[^/]+", key)
    return m.group(0) if m else ""


_KSH_ALLOWED = (L.CAPACITY_TYPE, L.NODEPOOL)
_AWS_ALLOWED = tuple(sorted(L.AWS_UNRESTRICTED_LABELS))


def _key_rules(var: str | None, nodepool: bool) -> tuple[Rule, ...]:
    """Restricted-key rules over one key (var None: `self`) or over every key of a map (var: `self.all(var, ...)`)."""
    k = var or "self"

    def wrap(expr: str) -> str:
        return f"self.all({var}, {expr})" if var else expr

    def each(pred: Any) -> Any:
        return (lambda m: all(pred(x) for x in m)) if var else pred

    ksh = Rule(wrap(f'{k} in {_cel_list(_KSH_ALLOWED)} || !{k}.find("^([^/]+)").endsWith("{L.GROUP}")'),
               f'label domain "{L.GROUP}" is restricted',
               each(lambda x: x in _KSH_ALLOWED or not _domain_of(x).endswith(L.GROUP)))
    aws = Rule(wrap(f'{k} in {_cel_list(_AWS_ALLOWED)} || !{k}.find("^([^/]+)").endsWith("{L.AWS_GROUP}")'),
               f'label domain "{L.AWS_GROUP}" is restricted',
               each(lambda x: x in _AWS_ALLOWED or not _domain_of(x).endswith(L.AWS_GROUP)))
    nodepool_rule = Rule(wrap(f'{k} != "{L.NODEPOOL}"'), f'label "{L.NODEPOOL}" is restricted',
                         each(lambda x: x != L.NODEPOOL))
    hostname = Rule(wrap(f'{k} != "{L.HOSTNAME}"'), f'label "{L.HOSTNAME}" is restricted',
                    each(lambda x: x != L.HOSTNAME))
    return (ksh, aws, nodepool_rule, hostname) if nodepool else (ksh, hostname, aws)


# --- shared pieces -------------------------------------------------------------------------------------------------

def _has(obj: Any, name: str) -> bool:
    return isinstance(obj, dict) and obj.get(name) is not None


_KEY_SYNTAX = ("is not a qualified name (optional DNS subdomain prefix and '/', then [A-Za-z0-9-_.] starting and "
               "ending alphanumeric)")
_VALUE_SYNTAX = "is not a valid label value (at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends)"


def _taint() -> Field:
    return O("A node taint.", required=("key", "effect"),
             key=S("Taint key.", min_length=1, pattern=QUALIFIED_KEY_PATTERN, pattern_message=_KEY_SYNTAX,
                   check=qualified_name),
             value=S("Taint value.", pattern=QUALIFIED_KEY_PATTERN, pattern_message=_KEY_SYNTAX),
             effect=S("Taint effect.", enum=TAINT_EFFECTS),
             timeAdded=S("Time the taint was added (NoExecute).", format="date-time"))


_COMPARISONS = ("Gt", "Lt", "Gte", "Lte")
_INT = re.compile(r"^[+-]?[0-9]+$")


def _single_non_negative_int(values: Any) -> bool:
    return len(values) == 1 and bool(_INT.match(values[0])) and int(values[0]) >= 0


REQUIREMENT_RULES = (
    Rule("self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
         "requirements with operator 'In' must have a value defined",
         lambda reqs: all(len(x["values"]) != 0 for x in reqs if x.get("operator") == "In")),
    Rule("self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? "
         "(x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
         "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
         lambda reqs: all(_single_non_negative_int(x["values"]) for x in reqs if x.get("operator") in _COMPARISONS)),
    Rule("self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
         "requirements with 'minValues' must have at least that many values specified in the 'values' field",
         lambda reqs: all(len(x["values"]) >= x["minValues"] for x in reqs
                          if x.get("operator") == "In" and _has(x, "minValues"))),
)


def _requirements(nodepool: bool) -> Field:
    item = O("A node selector requirement with an optional minimum number of distinct values.",
             required=("key", "operator"),
             key=S("Label key.", max_length=316, pattern=QUALIFIED_KEY_PATTERN, pattern_message=_KEY_SYNTAX,
                   check=qualified_name,
                   rules=_key_rules(None, nodepool)),
             operator=S("Operator.", enum=OPERATORS),
             values=A(S(max_length=63, pattern=LABEL_VALUE_PATTERN, pattern_message=_VALUE_SYNTAX),
                      "Values (no cap: a NodeClaim lists every instance-type option).", list_type="atomic"),
             minValues=I("Minimum distinct values the scheduler must keep for this key.", minimum=1, maximum=50))
    return A(item, "Requirements that constrain instance types and offerings.", max_items=100, list_type="atomic",
             rules=REQUIREMENT_RULES)


def _node_class_ref(immutable: bool) -> Field:
    rules = (Rule("self.group == oldSelf.group", "nodeClassRef.group is immutable", transition=True),
             Rule("self.kind == oldSelf.kind", "nodeClassRef.kind is immutable", transition=True)) if immutable else ()
    return O("The node class the NodeClaims of this pool use.", required=("group", "kind", "name"),
             group=S("API group of the node class.", pattern=r"^[^/]*$",
                     rules=(Rule("self != ''", "group may not be empty", lambda v: v != ""),)),
             kind=S("Kind of the node class.", rules=(Rule("self != ''", "kind may not be empty", lambda v: v != ""),)),
             name=S("Name of the node class.", rules=(Rule("self != ''", "name may not be empty", lambda v: v != ""),)),
             rules=rules)


def _conditions() -> Field:
    return A(O("A status condition.", required=("type", "status"),
               type=S(max_length=316, pattern=CONDITION_TYPE_PATTERN), status=S(enum=("True", "False", "Unknown")),
               reason=S(max_length=1024, pattern=r"^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$"),
               message=S(max_length=32768), lastTransitionTime=S(format="date-time"),
               observedGeneration=I(minimum=0, format="int64")),
             "Conditions (Ready and its dependents).", list_type="map", list_map_keys=("type",))


def _metadata() -> Field:
    f = O("Object metadata.")
    f.preserve_unknown = True
    f.fields = {"name": S(), "namespace": S(), "labels": M(S()), "annotations": M(S()), "uid": S(),
                "generation": I(), "resourceVersion": S(), "creationTimestamp": S(), "finalizers": A(S())}
    return f


def _duration(description: str, never: bool, default: str | None = None) -> Field:
    pattern = DURATION_OR_NEVER_PATTERN if never else DURATION_PATTERN
    hint = " (s, m and h only, e.g. 720h or 1h30m" + (", or Never)" if never else ")")
    return S(description, default=default, pattern=pattern, pattern_message="is not a duration" + hint)


# --- NodePool ------------------------------------------------------------------------------------------------------

def _static_limits_ok(spec: dict[str, Any]) -> bool:
    limits = spec.get("limits")
    return not _has(spec, "replicas") or not limits or (len(limits) == 1 and "nodes" in limits)


NODEPOOL_SPEC = O(
    "NodePool: the constraints and limits of the nodes Karpenter creates for pending pods.",
    required=("template",),
    template=O("Template of the NodeClaims this pool creates.", required=("spec",),
               metadata=O("Labels and annotations put on the nodes.",
                          labels=M(S(max_length=63, pattern=LABEL_VALUE_PATTERN, pattern_message=_VALUE_SYNTAX),
                                   "Node labels.", max_properties=100,
                                   rules=_key_rules("x", nodepool=True)),
                          annotations=M(S(), "Node annotations.")),
               spec=O("NodeClaim template spec.", required=("nodeClassRef", "requirements"),
                      taints=A(_taint(), "Taints on every node.", list_type="atomic"),
                      startupTaints=A(_taint(), "Taints expected to be removed by a daemon after startup.",
                                      list_type="atomic"),
                      requirements=_requirements(nodepool=True),
                      nodeClassRef=_node_class_ref(immutable=True),
                      expireAfter=_duration("How long a node lives before it is replaced (or Never).", True,
                                            default="720h"),
                      terminationGracePeriod=_duration("How long draining may take before the node is forced down.",
                                                       False))),
    disruption=O("How and when Karpenter may disrupt nodes of this pool.",
                 consolidateAfter=_duration("How long a node must be consolidatable first (or Never); ignored when "
                                            "replicas is set.", True, default="0s"),
                 consolidationPolicy=S("Which nodes consolidation considers; ignored when replicas is set.",
                                       default="WhenEmptyOrUnderutilized", enum=CONSOLIDATION_POLICIES),
                 budgets=A(O("A disruption budget.", required=("nodes",),
                             nodes=S("Nodes that may be disrupted at once: a count or a percentage.", default="10%",
                                     pattern=BUDGET_NODES_PATTERN,
                                     pattern_message="must be a non-negative integer or a percentage from 0% to 100%"),
                             schedule=S("When the budget applies (cron, UTC).", pattern=SCHEDULE_PATTERN,
                                        pattern_message="is not a cron schedule (five fields, or one of "
                                                        + ", ".join(CRON_MACROS) + ")", check=cron_schedule),
                             duration=S("How long after each schedule tick it applies.",
                                        pattern=BUDGET_DURATION_PATTERN,
                                        pattern_message="is not a budget duration (hours and minutes only, e.g. 8h or "
                                                        "1h30m)"),
                             reasons=A(S(enum=DISRUPTION_REASONS), "Disruption reasons it covers.", max_items=50,
                                       list_type="set")),
                           "Disruption budgets.", default=[{"nodes": "10%"}], max_items=50, list_type="atomic",
                           rules=(Rule("self.all(x, has(x.schedule) == has(x.duration))",
                                       "'schedule' must be set with 'duration'",
                                       lambda bs: all(_has(b, "schedule") == _has(b, "duration") for b in bs)),)),
                 default={"consolidateAfter": "0s"}),
    limits=M(Q(), "Resource limits of the pool (cpu, memory, nvidia.com/gpu, ...); only nodes when replicas is set."),
    weight=I("Priority among pools (higher first); not with replicas.", minimum=1, maximum=100, format="int32"),
    replicas=I("Static node count: the pool keeps exactly this many nodes (static capacity).", minimum=0,
               format="int64"),
    rules=(
        Rule("has(self.replicas) == has(oldSelf.replicas)", "Cannot transition NodePool between static (replicas set) "
             "and dynamic (replicas unset) provisioning modes", transition=True),
        Rule("!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && "
             "'nodes' in self.limits))", "only 'limits.nodes' is supported on static NodePools", _static_limits_ok),
        Rule("!has(self.replicas) || !has(self.weight)", "'weight' is not supported on static NodePools",
             lambda spec: not (_has(spec, "replicas") and _has(spec, "weight"))),
    ),
)
NODEPOOL_STATUS = O("Observed state.", resources=M(Q()), nodes=I(default=0, format="int64"), conditions=_conditions(),
                    nodeClassObservedGeneration=I(format="int64"))

# --- NodeClaim -----------------------------------------------------------------------------------------------------

NODECLAIM_SPEC = O(
    "NodeClaim: a request for one node.", required=("nodeClassRef", "requirements"),
    taints=A(_taint(), list_type="atomic"), startupTaints=A(_taint(), list_type="atomic"),
    requirements=_requirements(nodepool=False),
    resources=O("Resources the node must provide.", requests=M(Q())),
    nodeClassRef=_node_class_ref(immutable=False),
    terminationGracePeriod=_duration("How long draining may take before the node is forced down.", False),
    expireAfter=_duration("How long the node lives before it is replaced (or Never).", True, default="720h"),
    rules=(Rule("self == oldSelf", "spec is immutable", transition=True),),
)
NODECLAIM_STATUS = O("Observed state.", nodeName=S(), providerID=S(), imageID=S(), capacity=M(Q()),
                     allocatable=M(Q()), conditions=_conditions(), lastPodEventTime=S(format="date-time"))

# --- EC2NodeClass --------------------------------------------------------------------------------------------------


def _tags_selector() -> Field:
    return M(S(), "Tags to match (value * matches any value).", max_properties=20,
             rules=(Rule("self.all(k, k != '' && self[k] != '')", "empty tag keys or values aren't supported",
                         lambda m: all(k != "" and v != "" for k, v in m.items())),))


def _not_all_combined(field: str, others: tuple[str, ...]) -> Callable[[Any], bool]:
    """Karpenter's `!self.all(x, has(x.field) && (has(x.other) || ...))`."""
    return lambda ts: not all(_has(t, field) and any(_has(t, o) for o in others) for t in ts)


def _selector_rules(kind: str, fields: tuple[str, ...], exclusive: dict[str, tuple[str, ...]],
                    noun: str) -> tuple[Rule, ...]:
    """Karpenter's rules for a list of selector terms: not empty, each term sets one field, and `id` (or `name`)
    alone in its term. Karpenter writes the exclusivity as `!self.all(...)`, which only fires when every term
    breaks it; the Python predicate mirrors that so karpy and the CRD give the same verdict."""
    rules = []
    if kind:
        rules.append(Rule("self.size() != 0", f"{kind} cannot be empty", lambda ts: len(ts) != 0))
    rules.append(Rule("self.all(x, " + " || ".join(f"has(x.{f})" for f in fields) + ")",
                      "expected at least one, got none, [" + ", ".join(f"'{f}'" for f in fields) + "]",
                      lambda ts: all(any(_has(t, f) for f in fields) for t in ts)))
    for field, others in exclusive.items():
        joined = " || ".join(f"has(x.{o})" for o in others)
        cond = f"({joined})" if len(others) > 1 else joined
        rules.append(Rule(f"!self.all(x, has(x.{field}) && {cond})",
                          f"'{field}' is mutually exclusive, cannot be set with a combination of other fields in "
                          f"{noun}", _not_all_combined(field, others)))
    return tuple(rules)


def _alias_family(alias: str) -> str:
    return alias.split("@")[0]


def _alias_version(alias: str) -> str:
    return alias.split("@")[1]


AMI_TERM_RULES = (
    Rule("self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))",
         "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
         lambda ts: all(any(_has(t, f) for f in ("tags", "id", "name", "alias", "ssmParameter")) for t in ts)),
    Rule("!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))",
         "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
         lambda ts: not any(_has(t, "id") and any(_has(t, o) for o in ("alias", "tags", "name", "owner")) for t in ts)),
    Rule("!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))",
         "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
         lambda ts: not any(_has(t, "alias") and any(_has(t, o) for o in ("id", "tags", "name", "owner"))
                            for t in ts)),
    Rule("!(self.exists(x, has(x.alias)) && self.size() != 1)",
         "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
         lambda ts: not (any(_has(t, "alias") for t in ts) and len(ts) != 1)),
)
_ALIAS_FAMILIES_CEL = "[" + ",".join(f"'{f}'" for f in AMI_ALIAS_FAMILIES) + "]"
_WINDOWS_CEL = "[" + ",".join(f"'{f}'" for f in WINDOWS_ALIAS_FAMILIES) + "]"
ALIAS_RULES = (
    Rule("self.matches('^[a-zA-Z0-9]+@.+$')",
         "'alias' is improperly formatted, must match the format 'family@version'",
         lambda a: re.search(r"^[a-zA-Z0-9]+@.+$", a) is not None),
    Rule(f"self.split('@')[0] in {_ALIAS_FAMILIES_CEL}",
         "family is not supported, must be one of the following: " + ", ".join(f"'{f}'" for f in AMI_ALIAS_FAMILIES),
         lambda a: _alias_family(a) in AMI_ALIAS_FAMILIES),
    Rule(f"self.split('@')[0] in {_WINDOWS_CEL} ? self.split('@')[1] == 'latest' : true",
         "windows families may only specify version 'latest'",
         lambda a: _alias_family(a) not in WINDOWS_ALIAS_FAMILIES or _alias_version(a) == "latest"),
)


def _alias_prefix(alias: str) -> str:
    """What CEL's alias.find('^[^@]+') returns."""
    m = re.match(r"[^@]+", alias)
    return m.group(0) if m else ""


def _alias_family_matches(family: str, article: str) -> Rule:
    alias = family.lower()

    def check(spec: dict[str, Any]) -> bool:
        if not _has(spec, "amiFamily"):
            return True
        uses = any(_has(t, "alias") and _alias_prefix(t["alias"]) == alias for t in spec["amiSelectorTerms"])
        return not uses or spec["amiFamily"] in ("Custom", family)

    return Rule(f"!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == "
                f"'{alias}') ? (self.amiFamily == 'Custom' || self.amiFamily == '{family}') : true)",
                f"if set, amiFamily must be '{family}' or 'Custom' when using {article} {family} alias", check)


NODECLASS_RULES = (
    Rule("(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))",
         "must specify exactly one of ['role', 'instanceProfile']",
         lambda spec: _has(spec, "role") != _has(spec, "instanceProfile")),
    _alias_family_matches("AL2", "an"), _alias_family_matches("AL2023", "an"),
    _alias_family_matches("Bottlerocket", "a"), _alias_family_matches("Windows2019", "a"),
    _alias_family_matches("Windows2022", "a"), _alias_family_matches("Windows2025", "a"),
    Rule("self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)",
         "must specify amiFamily if amiSelectorTerms does not contain an alias",
         lambda spec: any(_has(t, "alias") for t in spec["amiSelectorTerms"]) or _has(spec, "amiFamily")),
)
_RESTRICTED_TAG_RULES = (
    Rule("self.all(k, k != '')", "empty tag keys aren't supported", lambda m: all(k != "" for k in m)),
    Rule("self.all(k, k !='eks:eks-cluster-name')", "tag contains a restricted tag matching eks:eks-cluster-name",
         lambda m: all(k != "eks:eks-cluster-name" for k in m)),
    Rule("self.all(k, !k.startsWith('kubernetes.io/cluster') )",
         "tag contains a restricted tag matching kubernetes.io/cluster/",
         lambda m: all(not k.startswith("kubernetes.io/cluster") for k in m)),
    Rule("self.all(k, k != 'karpenter.sh/nodepool')", "tag contains a restricted tag matching karpenter.sh/nodepool",
         lambda m: all(k != "karpenter.sh/nodepool" for k in m)),
    Rule("self.all(k, k !='karpenter.sh/nodeclaim')", "tag contains a restricted tag matching karpenter.sh/nodeclaim",
         lambda m: all(k != "karpenter.sh/nodeclaim" for k in m)),
    Rule("self.all(k, k !='karpenter.k8s.aws/ec2nodeclass')",
         "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
         lambda m: all(k != "karpenter.k8s.aws/ec2nodeclass" for k in m)),
)


def _network_interfaces_unique(nis: list[dict[str, Any]]) -> bool:
    for x in nis:
        card = [y for y in nis if y["networkCardIndex"] == x["networkCardIndex"]]
        same = [y for y in card if y["deviceIndex"] == x["deviceIndex"]]
        efa = [y for y in card if y["interfaceType"] == "efa-only"]
        if len(same) != 1 or (x["interfaceType"] == "efa-only" and len(efa) != 1):
            return False
    return True


def _kubelet() -> Field:
    """Karpenter serves spec.kubelet as an open map (any upstream KubeletConfiguration field passes through); karpy
    types the fields Karpenter reads and checks them as Karpenter's controller does."""
    f = O("Kubelet configuration for the nodes: any upstream KubeletConfiguration field; the ones Karpenter reads "
          "are typed.",
          clusterDNS=A(S()), maxPods=Field("int-or-string"), podsPerCore=I(), systemReserved=M(S()),
          kubeReserved=M(S()), evictionHard=M(S()), evictionSoft=M(S()), evictionSoftGracePeriod=M(S()),
          evictionMaxPodGracePeriod=I(), imageGCHighThresholdPercent=I(), imageGCLowThresholdPercent=I(),
          cpuCFSQuota=B())
    f.preserve_unknown = True
    f.open_crd = True
    return f


EC2NODECLASS_SPEC = O(
    "EC2NodeClass: how nodes are launched on EC2.", required=("subnetSelectorTerms", "securityGroupSelectorTerms",
                                                            "amiSelectorTerms"),
    kubelet=_kubelet(),
    subnetSelectorTerms=A(O("Subnets by tags or id.", tags=_tags_selector(), id=S(pattern=r"subnet-[0-9a-z]+")),
                          max_items=30,
                          rules=_selector_rules("subnetSelectorTerms", ("tags", "id"), {"id": ("tags",)},
                                                "a subnet selector term")),
    securityGroupSelectorTerms=A(O("Security groups by tags, id or name.", tags=_tags_selector(),
                                   id=S(pattern=r"sg-[0-9a-z]+"), name=S()),
                                 max_items=30,
                                 rules=_selector_rules("securityGroupSelectorTerms", ("tags", "id", "name"),
                                                       {"id": ("tags", "name"), "name": ("tags", "id")},
                                                       "a security group selector term")),
    capacityReservationSelectorTerms=A(
        O("Capacity reservations by id, or by tags/instanceMatchCriteria with an optional owner.",
          tags=_tags_selector(), id=S(pattern=r"^cr-[0-9a-z]+$"), ownerID=S(pattern=r"^[0-9]{12}$"),
          instanceMatchCriteria=S(enum=("open", "targeted"))),
        max_items=30,
        rules=(_selector_rules("", ("tags", "id", "instanceMatchCriteria"), {}, "")[0],
               Rule("!self.all(x, has(x.id) && (has(x.tags) || has(x.ownerID) || has(x.instanceMatchCriteria)))",
                    "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation "
                    "selector term",
                    lambda ts: not all(_has(t, "id") and any(_has(t, o) for o in ("tags", "ownerID",
                                                                                   "instanceMatchCriteria"))
                                       for t in ts)))),
    placementGroupSelector=O("The placement group to launch into, by name or id.",
                             id=S(pattern=r"^pg-[0-9a-z]+$"), name=S(min_length=1),
                             rules=(Rule("has(self.name) || has(self.id)", "expected at least one, got none, ['name', "
                                         "'id']", lambda p: _has(p, "name") or _has(p, "id")),
                                    Rule("!(has(self.name) && has(self.id))", "'name' and 'id' are mutually exclusive",
                                         lambda p: not (_has(p, "name") and _has(p, "id"))))),
    associatePublicIPAddress=B(),
    amiSelectorTerms=A(O("AMIs by alias, tags, id, name, owner or SSM parameter.",
                         alias=S(max_length=30, rules=ALIAS_RULES), tags=_tags_selector(),
                         id=S(pattern=r"ami-[0-9a-z]+"), name=S(), owner=S(), ssmParameter=S()),
                       min_items=1, max_items=30, rules=AMI_TERM_RULES),
    amiFamily=S("AMI family (with an alias: only that family or Custom).", enum=AMI_FAMILIES),
    userData=S("User data merged with what Karpenter generates."),
    role=S("IAM role of the nodes (Karpenter manages the instance profile).",
           rules=(Rule("self != ''", "role cannot be empty", lambda v: v != ""),)),
    instanceProfile=S("An existing instance profile (instead of role).",
                      rules=(Rule("self != ''", "instanceProfile cannot be empty", lambda v: v != ""),)),
    tags=M(S(), "Tags on instances, volumes, network interfaces and launch templates.", rules=_RESTRICTED_TAG_RULES),
    blockDeviceMappings=A(
        O("A block device.", deviceName=S(),
          ebs=O("EBS settings.", deleteOnTermination=B(), encrypted=B(), iops=I(format="int64"), kmsKeyID=S(),
                snapshotID=S(), throughput=I(format="int64"),
                volumeInitializationRate=I(minimum=100, maximum=300, format="int32"),
                volumeSize=S("Volume size: 1-64T (or 1-58Ti, 1-64000G, 1-59000Gi).", pattern=VOLUME_SIZE_PATTERN,
                             pattern_message="must be a size from 1G/1Gi up to 64T/58Ti with unit G, Gi, T or Ti"),
                volumeType=S(enum=("standard", "io1", "io2", "gp2", "sc1", "st1", "gp3")),
                rules=(Rule("has(self.snapshotID) || has(self.volumeSize)", "snapshotID or volumeSize must be defined",
                            lambda e: _has(e, "snapshotID") or _has(e, "volumeSize")),
                       Rule("!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')",
                            "snapshotID must be set when volumeInitializationRate is set",
                            lambda e: not _has(e, "volumeInitializationRate") or (_has(e, "snapshotID")
                                                                                  and e["snapshotID"] != "")))),
          rootVolume=B()),
        max_items=50,
        rules=(Rule("self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1",
                    "must have only one blockDeviceMappings with rootVolume",
                    lambda bs: sum(1 for b in bs if isinstance(b, dict) and b.get("rootVolume") is True) <= 1),)),
    instanceStorePolicy=S(enum=("RAID0",)),
    detailedMonitoring=B(),
    ipPrefixCount=I("IPv4 prefixes assigned to the primary network interface.", minimum=0, format="int32"),
    networkInterfaces=A(
        O("A network interface of the instance.", required=("deviceIndex", "interfaceType", "networkCardIndex"),
          deviceIndex=I(minimum=0, format="int32"), networkCardIndex=I(minimum=0, format="int32"),
          interfaceType=S(enum=("interface", "efa-only"))),
        max_items=150,
        rules=(Rule("self.size() == 0 || self.exists(x, x.deviceIndex == 0 && x.networkCardIndex == 0 && "
                    "x.interfaceType == 'interface')",
                    "networkInterfaces must include a primary interface with interfaceType='interface'",
                    lambda nis: len(nis) == 0 or any(x["deviceIndex"] == 0 and x["networkCardIndex"] == 0
                                                     and x["interfaceType"] == "interface" for x in nis)),
               Rule("self.all(x, self.filter(y, x.networkCardIndex == y.networkCardIndex && x.deviceIndex == "
                    "y.deviceIndex).size() == 1 && (x.interfaceType != 'efa-only' || self.filter(y, "
                    "x.networkCardIndex == y.networkCardIndex && y.interfaceType == 'efa-only').size() == 1))",
                    "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at "
                    "most one efa device per network card", _network_interfaces_unique))),
    connectionTracking=O("Connection tracking timeouts of the network interfaces.",
                         tcpEstablishedTimeout=I(minimum=60, maximum=432000, format="int32"),
                         udpStreamTimeout=I(minimum=60, maximum=180, format="int32"),
                         udpTimeout=I(minimum=30, maximum=60, format="int32"),
                         rules=(Rule("has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || "
                                     "has(self.udpTimeout)", "at least one of tcpEstablishedTimeout, udpStreamTimeout, "
                                     "or udpTimeout must be set",
                                     lambda c: any(_has(c, f) for f in ("tcpEstablishedTimeout", "udpStreamTimeout",
                                                                        "udpTimeout"))),)),
    cpuOptions=O("CPU options of the instances.", nestedVirtualization=S(enum=("enabled", "disabled"))),
    metadataOptions=O("Instance metadata service options.",
                      httpEndpoint=S(default="enabled", enum=("enabled", "disabled")),
                      httpProtocolIPv6=S(default="disabled", enum=("enabled", "disabled")),
                      httpPutResponseHopLimit=I(default=1, minimum=1, maximum=64, format="int64"),
                      httpTokens=S(default="required", enum=("required", "optional")),
                      default={"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
                               "httpPutResponseHopLimit": 1, "httpTokens": "required"}),
    context=S("Reserved for EC2 launch context."),
    rules=NODECLASS_RULES,
)
EC2NODECLASS_STATUS = O(
    "Resolved resources.",
    subnets=A(O(required=("id", "zone"), id=S(), zone=S(), zoneID=S())),
    securityGroups=A(O(required=("id",), id=S(), name=S())),
    capacityReservations=A(O(required=("availabilityZone", "id", "instanceMatchCriteria", "instanceType", "ownerID"),
                             id=S(pattern=r"^cr-[0-9a-z]+$"), availabilityZone=S(), instanceType=S(),
                             ownerID=S(pattern=r"^[0-9]{12}$"), instanceMatchCriteria=S(enum=("open", "targeted")),
                             interruptible=B(), endTime=S(format="date-time"),
                             reservationType=S(default="default", enum=("default", "capacity-block")),
                             state=S(default="active", enum=("active", "expiring")))),
    amis=A(O(required=("id", "requirements"), id=S(), name=S(), deprecated=B(),
             requirements=A(O(required=("key", "operator"), key=S(), operator=S(),
                              values=A(S(), list_type="atomic"))))),
    instanceProfile=S(), conditions=_conditions())


def document_schema(spec: Field, status: Field, spec_required: bool = True) -> Field:
    """A whole object: apiVersion, kind, metadata, spec, status."""
    return O("", required=("spec",) if spec_required else (), apiVersion=S(), kind=S(), metadata=_metadata(),
             spec=spec, status=status)


KINDS: dict[tuple[str, str], Field] = {
    ("karpenter.sh/v1", "NodePool"): document_schema(NODEPOOL_SPEC, NODEPOOL_STATUS),
    ("karpenter.sh/v1", "NodeClaim"): document_schema(NODECLAIM_SPEC, NODECLAIM_STATUS),
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): document_schema(EC2NODECLASS_SPEC, EC2NODECLASS_STATUS),
}
