"""Prometheus metrics with Karpenter's names, label names and help texts (Karpenter v1.14), in one registry `REGISTRY`
served at :METRICS_PORT/metrics (controller.health).

prometheus_client appends `_total` to counter names itself, so counters are declared without it. The metric classes
here take labels by keyword leniently: a label the metric declares but the caller leaves out is "" (or its
documented default), and a label that another Karpenter version has on the same metric (KNOWN_LABELS) is dropped, so
a metric call never fails a reconcile; a label name nobody knows is still a ValueError. Label values must come from
bounded sets: pass free text through `bounded`.
"""

from __future__ import annotations

import contextlib
import contextvars
import platform
import re
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from importlib import metadata
from typing import Any, TypeVar

import prometheus_client
from prometheus_client import CollectorRegistry

from controller.api import labels as L

# Karpenter's exposition has no `<name>_created` series
prometheus_client.disable_created_metrics()
REGISTRY = CollectorRegistry()
prometheus_client.ProcessCollector(registry=REGISTRY)
prometheus_client.PlatformCollector(registry=REGISTRY)
prometheus_client.GCCollector(registry=REGISTRY)

# controller-runtime's buckets plus Karpenter's longer ones (pkg/metrics/constants.go DurationBuckets)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
                    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60, 120,
                    150, 300, 450, 600)
# client_golang's DefBuckets, for histograms Karpenter declares without buckets
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_HOUR, _DAY = 3600.0, 86400.0
LIFETIME_BUCKETS = (900.0, 1800.0, 2700.0, _HOUR, 2 * _HOUR, 4 * _HOUR, 6 * _HOUR, 8 * _HOUR, 10 * _HOUR, 12 * _HOUR,
                    16 * _HOUR, 20 * _HOUR, _DAY, 2 * _DAY, 3 * _DAY, 5 * _DAY, 10 * _DAY, 15 * _DAY, 20 * _DAY,
                    25 * _DAY, 30 * _DAY)


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """client_golang's ExponentialBuckets."""
    return tuple(start * factor**i for i in range(count))


# Label names Karpenter uses on some metric in some version: passed to a metric that does not declare them, they are
# dropped instead of failing the call.
KNOWN_LABELS = frozenset({
    "reason", "nodepool", "capacity_type", "zone", "min_values_relaxed", "consolidation_policy", "termination_mode",
    "resource_type", "controller", "method", "provider", "error", "message_type", "category", "code", "scheduling_id",
    "name", "namespace", "owner", "node", "scheduled", "arch", "instance_type", "phase", "ready", "managed",
    "version", "goversion", "goarch", "commit", "decision", "consolidation_type"})
# defaults for declared labels the caller leaves out (Karpenter writes "false" when min values were not relaxed)
LABEL_DEFAULTS: dict[str, dict[str, str]] = {"karpenter_nodeclaims_created": {"min_values_relaxed": "false"}}

M = TypeVar("M", bound="prometheus_client.metrics.MetricWrapperBase")


def _fit(metric: Any, given: Mapping[str, Any]) -> dict[str, str]:
    names: tuple[str, ...] = tuple(metric._labelnames)
    unknown = [k for k in given if k not in names and k not in KNOWN_LABELS]
    if unknown:
        raise ValueError(f"{metric._name} has no label {', '.join(unknown)} (labels: {', '.join(names)})")
    defaults = LABEL_DEFAULTS.get(metric._name, {})
    return {n: str(given[n]) if n in given and given[n] is not None else defaults.get(n, "") for n in names}


class _LenientLabels(prometheus_client.metrics.MetricWrapperBase):
    """labels(**kw) that fills left-out labels and drops other versions' labels (see the module doc)."""

    def labels(self: M, *labelvalues: Any, **labelkwargs: Any) -> M:
        if labelkwargs and not labelvalues:
            labelkwargs = _fit(self, labelkwargs)
        return super().labels(*labelvalues, **labelkwargs)


class Counter(_LenientLabels, prometheus_client.Counter):
    """A Counter with lenient keyword labels."""


class Gauge(_LenientLabels, prometheus_client.Gauge):
    """A Gauge with lenient keyword labels."""


class Histogram(_LenientLabels, prometheus_client.Histogram):
    """A Histogram with lenient keyword labels."""


class Summary(_LenientLabels, prometheus_client.Summary):
    """A Summary with lenient keyword labels (prometheus_client exposes _count and _sum, no quantiles)."""


# ---- nodeclaims (pkg/metrics/metrics.go, pkg/controllers/nodeclaim/lifecycle/metrics.go) ----------------------------
NODECLAIMS_CREATED = Counter(
    "karpenter_nodeclaims_created",
    "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created, the owning "
    "nodepool, and if min values was relaxed for this nodeclaim.",
    ["reason", "nodepool", "min_values_relaxed"], registry=REGISTRY)
NODECLAIMS_TERMINATED = Counter(
    "karpenter_nodeclaims_terminated",
    "Number of nodeclaims terminated in total by Karpenter. Labeled by the owning nodepool, capacity type, and zone.",
    ["nodepool", "capacity_type", "zone"], registry=REGISTRY)
NODECLAIMS_DISRUPTED = Counter(
    "karpenter_nodeclaims_disrupted",
    "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason the nodeclaim was disrupted and the "
    "owning nodepool, the capacity type, the consolidation policy, and the termination mode.",
    ["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"], registry=REGISTRY)
NODECLAIMS_TERMINATION_DURATION = Histogram(
    "karpenter_nodeclaims_termination_duration_seconds", "Duration of NodeClaim termination in seconds.",
    ["nodepool"], buckets=exponential_buckets(1, 2, 12), registry=REGISTRY)
NODECLAIMS_INSTANCE_TERMINATION_DURATION = Histogram(
    "karpenter_nodeclaims_instance_termination_duration_seconds",
    "Duration of CloudProvider Instance termination in seconds.",
    ["nodepool"], buckets=exponential_buckets(1, 2, 11), registry=REGISTRY)

# ---- nodes (pkg/metrics/metrics.go, pkg/controllers/node/termination/metrics.go) -----------------------------------
NODES_CREATED = Counter(
    "karpenter_nodes_created", "Number of nodes created in total by Karpenter. Labeled by owning nodepool and zone.",
    ["nodepool", "zone"], registry=REGISTRY)
NODES_TERMINATED = Counter(
    "karpenter_nodes_terminated",
    "Number of nodes terminated in total by Karpenter. Labeled by owning nodepool and zone.",
    ["nodepool", "zone"], registry=REGISTRY)
NODES_DRAINED = Counter(
    "karpenter_nodes_drained", "The total number of nodes drained by Karpenter", ["nodepool"], registry=REGISTRY)
NODES_TERMINATION_DURATION = Summary(
    "karpenter_nodes_termination_duration_seconds",
    "The time taken between a node's deletion request and the removal of its finalizer", ["nodepool"],
    registry=REGISTRY)
NODES_LIFETIME_DURATION = Histogram(
    "karpenter_nodes_lifetime_duration_seconds", "The lifetime duration of the nodes since creation.",
    ["nodepool"], buckets=LIFETIME_BUCKETS, registry=REGISTRY)

# ---- pods (pkg/controllers/metrics/pod, pkg/controllers/node/termination/terminator/metrics.go) --------------------
PODS_STATE = Gauge(
    "karpenter_pods_state",
    "Pod state is the current state of pods. This metric can be used several ways as it is labeled by the pod name, "
    "namespace, owner, node, nodepool name, zone, architecture, capacity type, instance type, pod phase, and pod "
    "readiness.",
    ["name", "namespace", "owner", "node", "scheduled", "nodepool", "zone", "arch", "capacity_type", "instance_type",
     "phase", "ready", "managed"], registry=REGISTRY)
PODS_STARTUP_DURATION = Summary(
    "karpenter_pods_startup_duration_seconds", "The time from pod creation until the pod is running.",
    registry=REGISTRY)
PODS_BOUND_DURATION = Histogram(
    "karpenter_pods_bound_duration_seconds", "The time from pod creation until the pod is bound.",
    buckets=DURATION_BUCKETS, registry=REGISTRY)
PODS_SCHEDULING_DECISION_DURATION = Histogram(
    "karpenter_pods_scheduling_decision_duration_seconds",
    "The time it takes for Karpenter to first try to schedule a pod after it's been seen.",
    buckets=DURATION_BUCKETS, registry=REGISTRY)
PODS_DRAINED = Counter(
    "karpenter_pods_drained",
    "The total number of pods drained during node termination by Karpenter, labeled by reason",
    ["reason"], registry=REGISTRY)
EVICTION_REQUESTS = Counter(
    "karpenter_pods_eviction_requests",
    "The total number of pod eviction requests made by Karpenter, labeled by response code",
    ["code"], registry=REGISTRY)

# ---- scheduler (pkg/controllers/provisioning/scheduling/metrics.go) ------------------------------------------------
SCHEDULING_DURATION = Histogram(
    "karpenter_scheduler_scheduling_duration_seconds",
    "Duration of scheduling simulations used for deprovisioning and provisioning in seconds.",
    ["controller"], buckets=DURATION_BUCKETS, registry=REGISTRY)
SCHEDULER_QUEUE_DEPTH = Gauge(
    "karpenter_scheduler_queue_depth", "The number of pods currently waiting to be scheduled.",
    ["controller", "scheduling_id"], registry=REGISTRY)
# karpenter_scheduler_unfinished_work_seconds is not exported: a pass here is one synchronous solve, so no scrape can
# see work in progress that scheduling_duration_seconds has not observed yet
UNSCHEDULABLE_PODS = Gauge(
    "karpenter_scheduler_unschedulable_pods_count", "The number of unschedulable Pods.", ["controller"],
    registry=REGISTRY)
SCHEDULER_UNSCHEDULABLE_PODS = UNSCHEDULABLE_PODS
SCHEDULER_IGNORED_PODS = Gauge(
    "karpenter_scheduler_ignored_pods_count", "Number of pods ignored during scheduling by Karpenter",
    registry=REGISTRY)

# ---- nodepools (pkg/controllers/metrics/nodepool) -------------------------------------------------------------------
NODEPOOLS_USAGE = Gauge(
    "karpenter_nodepools_usage",
    "The amount of resources that have been provisioned for a nodepool. Labeled by nodepool name and resource type.",
    ["resource_type", "nodepool"], registry=REGISTRY)
NODEPOOLS_LIMIT = Gauge(
    "karpenter_nodepools_limit",
    "Limits specified on the nodepool that restrict the quantity of resources provisioned. Labeled by nodepool name "
    "and resource type.",
    ["resource_type", "nodepool"], registry=REGISTRY)

# ---- disruption (pkg/controllers/disruption/metrics.go) -------------------------------------------------------------
DISRUPTION_EVALUATION_DURATION = Histogram(
    "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
    "Duration of the disruption decision evaluation process in seconds. Labeled by method and consolidation type.",
    ["reason", "consolidation_type"], buckets=DURATION_BUCKETS, registry=REGISTRY)
DISRUPTION_DECISIONS = Counter(
    "karpenter_voluntary_disruption_decisions",
    "Number of disruption decisions performed. Labeled by disruption decision, reason, and consolidation type.",
    ["decision", "reason", "consolidation_type"], registry=REGISTRY)
DISRUPTION_DECISIONS_BY_NODEPOOL = Counter(
    "karpenter_voluntary_disruption_decisions_by_nodepool",
    "Number of disruption decisions performed by nodepool. Labeled by nodepool name, disruption decision, reason, "
    "and consolidation type.", ["nodepool", "decision", "reason", "consolidation_type"], registry=REGISTRY)
DISRUPTION_ELIGIBLE_NODES = Gauge(
    "karpenter_voluntary_disruption_eligible_nodes",
    "Number of nodes eligible for disruption by Karpenter. Labeled by disruption reason.", ["reason"],
    registry=REGISTRY)
DISRUPTION_CONSOLIDATION_TIMEOUTS = Counter(
    "karpenter_voluntary_disruption_consolidation_timeouts",
    "Number of times the Consolidation algorithm has reached a timeout. Labeled by consolidation type.",
    ["consolidation_type"], registry=REGISTRY)
DISRUPTION_FAILED_VALIDATIONS = Counter(
    "karpenter_voluntary_disruption_failed_validations",
    "Number of candidates that were selected for disruption but failed validation. Labeled by consolidation type.",
    ["consolidation_type"], registry=REGISTRY)
DISRUPTION_QUEUE_FAILURES = Counter(
    "karpenter_voluntary_disruption_queue_failures",
    "The number of times that an enqueued disruption decision failed. Labeled by disruption method.",
    ["decision", "reason", "consolidation_type"], registry=REGISTRY)
NODEPOOLS_ALLOWED_DISRUPTIONS = Gauge(
    "karpenter_nodepools_allowed_disruptions",
    "The number of nodes for a given NodePool that can be concurrently disrupting at a point in time. Labeled by "
    "NodePool. Note that allowed disruptions can change very rapidly, as new nodes may be created and others may be "
    "deleted at any point.", ["nodepool", "reason"], registry=REGISTRY)
NODEPOOLS_NODES_CONSUMING_BUDGETS = Gauge(
    "karpenter_nodepools_nodes_consuming_budgets",
    "The number of nodes consuming the budget of a nodepool at a point in time. Labeled by NodePool.",
    ["nodepool", "reason"], registry=REGISTRY)
NODES_DISRUPTED = Counter(
    "karpenter_nodes_disrupted",
    "Number of nodes disrupted in total by Karpenter. Labeled by reason the node was disrupted, the owning nodepool "
    "and the capacity type.", ["reason", "nodepool", "capacity_type"], registry=REGISTRY)
PODS_DISRUPTION_INITIATED = Counter(
    "karpenter_pods_disruption_initiated",
    "Number of pod disruptions initiated in total by Karpenter, incremented by the reschedulable pod count whenever "
    "the underlying nodeclaim is disrupted. Labeled by reason the nodeclaim was disrupted, the owning nodepool, the "
    "capacity type, the consolidation policy, and the termination mode. Pods owned by DaemonSets and mirror pods are "
    "excluded.", ["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"],
    registry=REGISTRY)

# ---- cluster state (pkg/controllers/state/metrics.go) --------------------------------------------------------------
CLUSTER_STATE_SYNCED = Gauge(
    "karpenter_cluster_state_synced",
    "Returns 1 if cluster state is synced and 0 otherwise. Synced checks that nodeclaims and nodes that are stored in "
    "the APIServer have the same representation as Karpenter's cluster state", registry=REGISTRY)
CLUSTER_STATE_NODE_COUNT = Gauge(
    "karpenter_cluster_state_node_count", "Current count of nodes in cluster state", registry=REGISTRY)
CLUSTER_STATE_UNSYNCED_TIME = Gauge(
    "karpenter_cluster_state_unsynced_time_seconds", "The time for which cluster state is not synced",
    registry=REGISTRY)

# ---- cloud provider (pkg/cloudprovider/metrics/cloudprovider.go) ---------------------------------------------------
CLOUDPROVIDER_DURATION = Histogram(
    "karpenter_cloudprovider_duration_seconds",
    "Duration of cloud provider method calls. Labeled by the controller, method name and provider.",
    ["controller", "method", "provider"], buckets=DEFAULT_BUCKETS, registry=REGISTRY)
CLOUDPROVIDER_ERRORS = Counter(
    "karpenter_cloudprovider_errors", "Total number of errors returned from CloudProvider calls.",
    ["controller", "method", "provider", "error"], registry=REGISTRY)
# Karpenter's well-known `error` label values ("" is an error of no known type)
CLOUDPROVIDER_ERROR_TYPES = frozenset({"NodeClaimNotFoundError", "NodeClassNotReadyError",
                                       "InsufficientCapacityError", ""})

# ---- interruption, AWS (karpenter-provider-aws pkg/controllers/interruption/metrics.go) ----------------------------
INTERRUPTION_RECEIVED = Counter(
    "karpenter_interruption_received_messages",
    "Count of messages received from the SQS queue. Broken down by message type and whether the message was "
    "actionable.", ["message_type"], registry=REGISTRY)
INTERRUPTION_DELETED = Counter(
    "karpenter_interruption_deleted_messages", "Count of messages deleted from the SQS queue.", registry=REGISTRY)
INTERRUPTION_INSTANCE_STATUS_UNHEALTHY = Counter(
    "karpenter_interruption_instance_status_unhealthy",
    "Count of unique unhealthy instance statuses detected from EC2 DescribeInstanceStatus. Broken down by status "
    "check category.", ["category"], registry=REGISTRY)
INTERRUPTION_MESSAGE_QUEUE_DURATION = Histogram(
    "karpenter_interruption_message_queue_duration_seconds",
    "Amount of time an interruption message is on the queue before it is processed by karpenter.",
    buckets=DURATION_BUCKETS, registry=REGISTRY)

# ---- build (pkg/operator/operator.go) ------------------------------------------------------------------------------
BUILD_INFO = Gauge(
    "karpenter_build_info",
    "A metric with a constant '1' value labeled by version from which karpenter was built.",
    ["version", "goversion", "goarch", "commit"], registry=REGISTRY)

_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "i386": "386", "i686": "386"}


def build_labels() -> dict[str, str]:
    """karpenter_build_info's labels for this process, under Karpenter's label names: version = the karpy package
    version; goversion = the runtime's version ("python3.11.9", where Karpenter has "go1.22.5"); goarch = the machine
    in Go's spelling (amd64, arm64); commit = the git commit karpy runs from, "unknown" outside a checkout."""
    from controller.logs import revision

    try:
        version = metadata.version("karpy")
    except metadata.PackageNotFoundError:
        version = "unspecified"
    machine = platform.machine().lower()
    return {"version": version, "goversion": f"python{platform.python_version()}",
            "goarch": _GOARCH.get(machine, machine or sys.platform), "commit": revision()}


BUILD_INFO.labels(**build_labels()).set(1)


def bounded(value: str, allowed: frozenset[str], other: str = "other") -> str:
    """`value` when it is one of `allowed`, else `other`: keeps a label's cardinality bounded whatever the input."""
    return value if value in allowed else other


def nodeclaim_disrupted(claim: Mapping[str, Any], reason: str) -> None:
    """karpenter_nodeclaims_disrupted_total for a NodeClaim deleted for reason, labelled from the NodeClaim's labels."""
    labels = (claim.get("metadata") or {}).get("labels") or {}
    NODECLAIMS_DISRUPTED.labels(reason=reason, nodepool=labels.get(L.NODEPOOL, ""),
                                capacity_type=labels.get(L.CAPACITY_TYPE, ""), consolidation_policy="",
                                termination_mode="").inc()


@contextlib.contextmanager
def measure(histogram: Histogram | Summary, **labels: str) -> Iterator[None]:
    """Observe the seconds the block took into `histogram` (with `labels`), also when the block raises."""
    start = time.perf_counter()
    try:
        yield
    finally:
        target = histogram.labels(**labels) if labels else histogram
        target.observe(time.perf_counter() - start)


# ---- which controller makes a call (the metered cloud provider's controller label) ---------------------------------
_CONTROLLER: contextvars.ContextVar[str] = contextvars.ContextVar("karpy_controller", default="")
_WORKER_SUFFIX = re.compile(r"-\d+$")


@contextlib.contextmanager
def controller_context(name: str) -> Iterator[None]:
    """Calls made in the block are labelled controller=name (Karpenter takes it from the reconcile's context)."""
    token = _CONTROLLER.set(name)
    try:
        yield
    finally:
        _CONTROLLER.reset(token)


def controller_name() -> str:
    """The controller making the current call: the context's, else the thread's name without a worker number."""
    return _CONTROLLER.get() or _WORKER_SUFFIX.sub("", threading.current_thread().name)
