"""The settings of `karpy controller`, by Karpenter's environment variable names (flags mirror them).

Precedence per setting: flag > env > legacy ConfigMap (`karpenter-global-settings`, `config-logging` in the system
namespace, as pre-v1 Karpenter installs still carry them) > default. Every bad or missing value is a `SettingsError`
whose text is one line naming the setting; a bad value in a legacy ConfigMap is only a warning (defaults stay), so an
old ConfigMap never stops the controller.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from controller.api.durations import parse_go_duration as parse_duration  # the name settings callers know

GLOBAL_SETTINGS = "karpenter-global-settings"
CONFIG_LOGGING = "config-logging"
ZAP_LOGGER_CONFIG = "zap-logger-config"
LOGLEVEL_CONTROLLER = "loglevel.controller"

FLAG = "flag"
ENV = "env"
DEFAULT = "default"
FROM_GLOBAL_SETTINGS = f"configmap {GLOBAL_SETTINGS}"
FROM_CONFIG_LOGGING = f"configmap {CONFIG_LOGGING}"

# Karpenter's feature gates and their defaults (v1.14), in Karpenter's order.
FEATURE_GATE_DEFAULTS: dict[str, bool] = {
    "NodeRepair": False,
    "ReservedCapacity": True,
    "SpotToSpotConsolidation": False,
    "NodeOverlay": False,
    "StaticCapacity": False,
    "CapacityBuffer": False,
    # karpy's own gates, beyond Karpenter (off by default, so the defaults decide exactly as Karpenter does):
    # an EC2 rebalance recommendation marks the NodeClaim Drifted (reason RebalanceRecommendation), replaced within
    # the Drifted budget
    "RebalanceRecommendationDrift": False,
    # multi-node consolidation may replace N candidates with M < N cheaper NodeClaims (Karpenter: N -> 1)
    "ManyToManyConsolidation": False,
}
# Karpenter's gates whose feature karpy's controller does not have: enabling one is refused when the controller starts
# (--check-config shows it as a warning), so a gate never silently does nothing
UNSUPPORTED_FEATURE_GATES: dict[str, str] = {
    "NodeOverlay": "NodeOverlays",
    "CapacityBuffer": "capacity buffers",
}
REMOVED_FEATURE_GATES = {"Drift": "Drift is always on since Karpenter v1 (control it with disruption budgets)"}

LOG_LEVELS = ("debug", "info", "warn", "error")
LOG_ENCODINGS = ("json", "console")
PREFERENCE_POLICIES = ("Respect", "Ignore")
MIN_VALUES_POLICIES = ("Strict", "BestEffort")
CLOUD_PROVIDERS = ("aws", "fake")
SHOWN_VALUE_CHARS = 60


class SettingsError(ValueError):
    """A missing or bad setting; str() is one line naming the setting and the (truncated) bad value."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name

    def __str__(self) -> str:
        return " ".join(str(self.args[0]).split())


def show_value(value: str, limit: int = SHOWN_VALUE_CHARS) -> str:
    """A raw value quoted for a one-line message: control characters and newlines escaped, at most `limit` chars."""
    text = json.dumps(value, ensure_ascii=False)[1:-1]
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f'"{text}"'


# ---------------------------------------------------------------------------------------------------------- parsing
def _fraction(value: int, unit: int) -> str:
    whole, frac = divmod(value, unit)
    digits = str(frac).rjust(len(str(unit)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)


def format_duration(seconds: float) -> str:
    """A duration as Go's Duration.String() writes it: "1s", "500ms", "1m30s", "1h0m0s", "0s"."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u < 1000:
        out = f"{u}ns"
    elif u < 10**6:
        out = _fraction(u, 1000) + "µs"
    elif u < 10**9:
        out = _fraction(u, 10**6) + "ms"
    else:
        hours, rest = divmod(u, 3600 * 10**9)
        minutes, rest = divmod(rest, 60 * 10**9)
        out = f"{hours}h" if hours else ""
        out += f"{minutes}m" if hours or minutes else ""
        out += _fraction(rest, 10**9) + "s"
    return sign + out


def parse_bool(text: str) -> bool:
    """A boolean as Go's strconv.ParseBool reads it (1, t, true, 0, f, false in any of Go's casings)."""
    s = text.strip()
    if s in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if s in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise ValueError("want true or false")


def _parse_int(text: str) -> int:
    s = text.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        raise ValueError("want an integer")
    return int(s)


def _parse_float(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("want a number") from None
    if not math.isfinite(value):
        raise ValueError("want a finite number")
    return value


def parse_feature_gates(text: str, known: Mapping[str, bool] = FEATURE_GATE_DEFAULTS) -> dict[str, bool]:
    """The gates named in `A=true,B=false` (only those named; defaults are merged by the caller). An unknown gate or a
    value that is not a boolean is a ValueError naming it."""
    out: dict[str, bool] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq:
            raise ValueError(f"missing bool value for {name}")
        if name not in known:
            why = REMOVED_FEATURE_GATES.get(name)
            raise ValueError(f"unknown feature gate {name}" + (f": {why}" if why else
                                                               f"; known: {', '.join(known)}"))
        try:
            out[name] = parse_bool(value)
        except ValueError:
            raise ValueError(f"invalid value {show_value(value.strip(), 20)} for feature gate {name}") from None
    return out


def unsupported_feature_gates(gates: Mapping[str, bool]) -> list[str]:
    """One line per enabled gate whose feature karpy does not implement (empty when every enabled gate works)."""
    return [f"FEATURE_GATES: {name}=true is not supported by karpy ({what}); remove it or set {name}=false"
            for name, what in UNSUPPORTED_FEATURE_GATES.items() if gates.get(name)]


def format_feature_gates(gates: Mapping[str, bool]) -> str:
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in gates.items())


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _namespace(text: str) -> str:
    s = text.strip()
    if len(s) > 63 or not _DNS_LABEL.fullmatch(s):
        raise ValueError("want a namespace name (RFC 1123 label)")
    return s


def _lease_name(text: str) -> str:
    s = text.strip()
    if len(s) > 253 or not _DNS_SUBDOMAIN.fullmatch(s):
        raise ValueError("want a Lease name (RFC 1123 subdomain)")
    return s


def _nonempty(text: str) -> str:
    s = text.strip()
    if not s:
        raise ValueError("must not be empty")
    return s


def _endpoint(text: str) -> str:
    s = text.strip()
    url = urlparse(s)
    if not url.scheme or not url.hostname:
        raise ValueError("want an absolute URL such as https://ABC.gr7.us-west-2.eks.amazonaws.com")
    return s


def _ca_bundle(text: str) -> str:
    s = "".join(text.split())
    try:
        base64.b64decode(s, validate=True)
    except (ValueError, binascii.Error):
        raise ValueError("want the base64 of a PEM CA bundle") from None
    return s


def _duration(text: str) -> float:
    try:
        value = parse_duration(text)
    except ValueError:
        raise ValueError("want a Go duration such as 1s, 500ms or 1m30s") from None
    if value < 0:
        raise ValueError("must not be negative")
    return value


def _port(text: str) -> int:
    value = _parse_int(text)
    if not 0 <= value <= 65535:
        raise ValueError("want a port number 0-65535")
    return value


def _positive_int(text: str) -> int:
    value = _parse_int(text)
    if value <= 0:
        raise ValueError("must be greater than 0")
    return value


def _non_negative_int(text: str) -> int:
    value = _parse_int(text)
    if value < 0:
        raise ValueError("must not be negative")
    return value


def _percent(text: str) -> float:
    value = _parse_float(text)
    if not 0 <= value <= 1:
        raise ValueError("want a fraction between 0 and 1 (0.075 is 7.5%)")
    return value


def _refresh_interval(text: str) -> float:
    """AMI_REFRESH_INTERVAL / SUBNET_REFRESH_INTERVAL: a Go duration of at least 1m, as Karpenter validates them."""
    value = _duration(text)
    if value < 60:
        raise ValueError("must be at least 1m")
    return value


def _ignore_dra(text: str) -> bool:
    """IGNORE_DRA_REQUESTS: true (Karpenter's default) refuses pods that claim devices; false asks Karpenter to
    simulate device allocation over ResourceSlices, which karpy does not do, so it is refused at start."""
    if not parse_bool(text):
        raise ValueError("false is not supported: karpy does not simulate Dynamic Resource Allocation")
    return True


def _choice(choices: tuple[str, ...], fold: bool = False) -> Callable[[str], str]:
    def parse(text: str) -> str:
        s = text.strip()
        for c in choices:
            if s == c or (fold and s.lower() == c):
                return c
        raise ValueError(f"want one of {', '.join(choices)}")

    return parse


def _paths(text: str) -> tuple[str, ...]:
    paths = tuple(p.strip() for p in text.split(",") if p.strip())
    if not paths:
        raise ValueError("want comma-separated paths (stdout, stderr or files)")
    return paths


def _gates(text: str) -> dict[str, bool]:
    return parse_feature_gates(text)


def _optional(text: str) -> str | None:
    return text.strip() or None


# ------------------------------------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Spec:
    """One setting: its env name (the key in sources), its attribute, how a raw string is read and shown."""

    name: str
    attr: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    flag: str | None = None
    bool_flag: bool = False
    show: Callable[[Any], str] = str

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.lower().replace("_", "-")


def _show_bool(v: Any) -> str:
    return "true" if v else "false"


def _show_bundle(v: Any) -> str:
    return f"<{len(v)} base64 chars>" if v else ""


def _show_optional(v: Any) -> str:
    return "" if v is None else str(v)


def _show_float(v: Any) -> str:
    return repr(float(v)).removesuffix(".0")


SPECS: tuple[Spec, ...] = (
    Spec("CLUSTER_NAME", "cluster_name", _nonempty, None,
         "[REQUIRED] The kubernetes cluster name for resource discovery."),
    Spec("CLUSTER_ENDPOINT", "cluster_endpoint", _endpoint, "",
         "The external kubernetes cluster endpoint for new nodes to connect with; discovered with EKS "
         "DescribeCluster when empty."),
    Spec("CLUSTER_CA_BUNDLE", "cluster_ca_bundle", _ca_bundle, "",
         "The cluster CA bundle (base64 PEM) for nodes; taken from EKS DescribeCluster or the kube client's TLS "
         "configuration when empty.", show=_show_bundle),
    Spec("INTERRUPTION_QUEUE", "interruption_queue", _nonempty, "",
         "The name of the SQS queue of interruption events from EC2; interruption handling is off when empty."),
    Spec("BATCH_IDLE_DURATION", "batch_idle_duration", _duration, 1.0,
         "The time with no new pending pods that ends the current batching window (Go duration).",
         show=format_duration),
    Spec("BATCH_MAX_DURATION", "batch_max_duration", _duration, 10.0,
         "The maximum length of a batching window (Go duration).", show=format_duration),
    Spec("LOG_LEVEL", "log_level", _choice(LOG_LEVELS, fold=True), "info",
         "Log verbosity: debug, info, warn or error."),
    Spec("LOG_ENCODING", "log_encoding", _choice(LOG_ENCODINGS, fold=True), "json",
         "Log encoding: json or console (Karpenter reads it from the config-logging ConfigMap)."),
    Spec("LOG_OUTPUT_PATHS", "log_output_paths", _paths, ("stdout",),
         "Comma-separated paths for log output (stdout, stderr or files).", show=",".join),
    Spec("LOG_ERROR_OUTPUT_PATHS", "log_error_output_paths", _paths, ("stderr",),
         "Comma-separated paths for the logger's own errors.", show=",".join),
    Spec("METRICS_PORT", "metrics_port", _port, 8080, "The port the metrics endpoint (/metrics) binds to."),
    Spec("HEALTH_PROBE_PORT", "health_probe_port", _port, 8081,
         "The port the health probe endpoints (/healthz, /readyz) bind to."),
    Spec("DISABLE_LEADER_ELECTION", "disable_leader_election", parse_bool, False,
         "Disable leader election (run one replica only).", bool_flag=True, show=_show_bool),
    Spec("LEADER_ELECTION_NAME", "leader_election_name", _lease_name, "karpenter-leader-election",
         "The name of the leader election Lease."),
    Spec("LEADER_ELECTION_NAMESPACE", "leader_election_namespace", _namespace, None,
         "The namespace of the leader election Lease (default: SYSTEM_NAMESPACE)."),
    Spec("SYSTEM_NAMESPACE", "system_namespace", _namespace, "kube-system",
         "The namespace karpy runs in; the legacy ConfigMaps are read from it."),
    Spec("FEATURE_GATES", "feature_gates", _gates, FEATURE_GATE_DEFAULTS,
         "Feature gates as Gate=true,Gate=false; gates: " + ", ".join(FEATURE_GATE_DEFAULTS) + ".",
         show=format_feature_gates),
    Spec("PREFERENCE_POLICY", "preference_policy", _choice(PREFERENCE_POLICIES), "Respect",
         "How the scheduler treats preferences: Respect or Ignore."),
    Spec("MIN_VALUES_POLICY", "min_values_policy", _choice(MIN_VALUES_POLICIES), "Strict",
         "Min values policy for scheduling: Strict or BestEffort."),
    Spec("IGNORE_DRA_REQUESTS", "ignore_dra_requests", _ignore_dra, True,
         "Refuse to provision for pods with Dynamic Resource Allocation requests (only true is supported).",
         bool_flag=True, show=_show_bool),
    Spec("VM_MEMORY_OVERHEAD_PERCENT", "vm_memory_overhead_percent", _percent, 0.075,
         "The VM memory overhead as a fraction subtracted from every instance type's memory.", show=_show_float),
    Spec("RESERVED_ENIS", "reserved_enis", _non_negative_int, 0,
         "ENIs left out of the max-pods and kube-reserved calculations (VPC CNI custom networking)."),
    Spec("ISOLATED_VPC", "isolated_vpc", parse_bool, False,
         "Assume AWS services without a VPC endpoint (the Pricing API) are unreachable.", bool_flag=True,
         show=_show_bool),
    Spec("DISABLE_DRY_RUN", "disable_dry_run", parse_bool, False,
         "Skip the dry-run validation of EC2NodeClasses (ValidationSucceeded is then set without calling EC2).",
         bool_flag=True, show=_show_bool),
    Spec("AMI_REFRESH_INTERVAL", "ami_refresh_interval", _refresh_interval, 60.0,
         "How often EC2NodeClass AMIs are resolved again from EC2 (Go duration, at least 1m).", show=format_duration),
    Spec("SUBNET_REFRESH_INTERVAL", "subnet_refresh_interval", _refresh_interval, 60.0,
         "How often EC2NodeClass subnets are resolved again from EC2 (Go duration, at least 1m).",
         show=format_duration),
    Spec("CPU_REQUESTS", "cpu_requests", _positive_int, 1000,
         "The CPU requests of the controller's container in millicores; reconcile worker counts scale with it."),
    Spec("KUBE_CLIENT_QPS", "kube_client_qps", _positive_int, 200, "The smoothed rate of queries to kube-apiserver."),
    Spec("KUBE_CLIENT_BURST", "kube_client_burst", _positive_int, 300,
         "The maximum burst of queries to kube-apiserver."),
    Spec("AWS_REGION", "aws_region", _nonempty, "",
         "The AWS region (also read from AWS_DEFAULT_REGION, then the AWS config file)."),
    Spec("AWS_ENDPOINT_URL", "aws_endpoint_url", _optional, None,
         "An endpoint URL for every AWS API (a VPC endpoint, or LocalStack).", show=_show_optional),
    Spec("KUBECONFIG", "kubeconfig", _optional, None,
         "The kubeconfig file when not running in a cluster (default ~/.kube/config).", flag="--kubeconfig",
         show=_show_optional),
    Spec("CLOUD_PROVIDER", "cloud_provider", _choice(CLOUD_PROVIDERS), "aws",
         "The cloud provider: aws, or fake (in memory, for trying karpy and for benchmarks)."),
)
SPECS_BY_NAME: dict[str, Spec] = {s.name: s for s in SPECS}


@dataclass(frozen=True)
class Settings:
    """The resolved settings, one attribute per Karpenter env name (snake case). Durations are seconds."""

    cluster_name: str
    cluster_endpoint: str = ""
    cluster_ca_bundle: str = ""
    interruption_queue: str = ""
    batch_idle_duration: float = 1.0
    batch_max_duration: float = 10.0
    log_level: str = "info"
    log_encoding: str = "json"
    log_output_paths: tuple[str, ...] = ("stdout",)
    log_error_output_paths: tuple[str, ...] = ("stderr",)
    metrics_port: int = 8080
    health_probe_port: int = 8081
    disable_leader_election: bool = False
    leader_election_name: str = "karpenter-leader-election"
    leader_election_namespace: str = "kube-system"
    system_namespace: str = "kube-system"
    feature_gates: dict[str, bool] = field(default_factory=lambda: dict(FEATURE_GATE_DEFAULTS), hash=False)
    preference_policy: str = "Respect"
    min_values_policy: str = "Strict"
    ignore_dra_requests: bool = True
    vm_memory_overhead_percent: float = 0.075
    reserved_enis: int = 0
    isolated_vpc: bool = False
    disable_dry_run: bool = False
    ami_refresh_interval: float = 60.0
    subnet_refresh_interval: float = 60.0
    cpu_requests: int = 1000
    kube_client_qps: int = 200
    kube_client_burst: int = 300
    aws_region: str = ""
    aws_endpoint_url: str | None = None
    kubeconfig: str | None = None
    cloud_provider: str = "aws"

    @property
    def health_port(self) -> int:
        """HEALTH_PROBE_PORT under its short name."""
        return self.health_probe_port

    def feature_gate(self, name: str) -> bool:
        """A gate's value by Karpenter's name (KeyError for a gate Karpenter does not have)."""
        return self.feature_gates[name]


# ------------------------------------------------------------------------------------------------ legacy ConfigMaps
@dataclass(frozen=True)
class LegacyConfig:
    """What the legacy ConfigMaps say, already checked: raw values by setting name, where each came from, and the
    feature gates they set."""

    namespace: str = "kube-system"
    values: dict[str, str] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    feature_gates: dict[str, bool] = field(default_factory=dict)
    present: tuple[str, ...] = ()  # names of the ConfigMaps that exist


GLOBAL_SETTINGS_KEYS: dict[str, str] = {
    "aws.clusterName": "CLUSTER_NAME",
    "aws.clusterEndpoint": "CLUSTER_ENDPOINT",
    "aws.interruptionQueueName": "INTERRUPTION_QUEUE",
    "aws.isolatedVPC": "ISOLATED_VPC",
    "aws.vmMemoryOverheadPercent": "VM_MEMORY_OVERHEAD_PERCENT",
    "aws.reservedENIs": "RESERVED_ENIS",
    "batchIdleDuration": "BATCH_IDLE_DURATION",
    "batchMaxDuration": "BATCH_MAX_DURATION",
}
# pre-v1 keys with no v1 setting: said once, then ignored
RETIRED_GLOBAL_SETTINGS_KEYS: dict[str, str] = {
    "aws.defaultInstanceProfile": "set role or instanceProfile on the EC2NodeClass",
    "aws.enablePodENI": "no v1 setting",
    "aws.enableENILimitedPodDensity": "no v1 setting (use kubelet maxPods on the EC2NodeClass)",
    "aws.nodeNameConvention": "no v1 setting",
    "aws.tags": "set tags on the EC2NodeClass",
    "aws.assumeRoleARN": "no v1 setting",
    "aws.assumeRoleDuration": "no v1 setting",
    "featureGates.driftEnabled": "Drift is always on since Karpenter v1 (control it with disruption budgets)",
}


def _where(namespace: str, configmap: str, key: str) -> str:
    return f"ConfigMap {namespace}/{configmap} key {key}"


def _gate_from_key(key: str) -> str:
    camel = key.removeprefix("featureGates.")
    return camel[:1].upper() + camel[1:]


def parse_legacy_configmaps(namespace: str, global_settings: Mapping[str, str] | None,
                            config_logging: Mapping[str, str] | None) -> tuple[LegacyConfig, list[str]]:
    """The settings in the data of the two legacy ConfigMaps (None: that ConfigMap does not exist), and one warning
    line per malformed, unknown or retired key. A malformed value is dropped, so the default stays."""
    values: dict[str, str] = {}
    origins: dict[str, str] = {}
    gates: dict[str, bool] = {}
    warnings: list[str] = []
    present = tuple(n for n, d in ((GLOBAL_SETTINGS, global_settings), (CONFIG_LOGGING, config_logging))
                    if d is not None)

    def take(name: str, raw: str, origin: str, where: str) -> None:
        try:
            SPECS_BY_NAME[name].parse(raw)
        except ValueError as e:
            warnings.append(f"{where}: invalid value {show_value(raw)} ({e}); ignored, the default stays")
            return
        values[name] = raw.strip()
        origins[name] = origin

    for key, raw in sorted((global_settings or {}).items()):
        raw = "" if raw is None else str(raw)
        where = _where(namespace, GLOBAL_SETTINGS, key)
        if key in GLOBAL_SETTINGS_KEYS:
            if raw.strip():
                take(GLOBAL_SETTINGS_KEYS[key], raw, FROM_GLOBAL_SETTINGS, where)
        elif key in RETIRED_GLOBAL_SETTINGS_KEYS:
            warnings.append(f"{where} is not used by karpy: {RETIRED_GLOBAL_SETTINGS_KEYS[key]}; ignored")
        elif key.startswith("featureGates."):
            gate = _gate_from_key(key)
            if gate not in FEATURE_GATE_DEFAULTS:
                warnings.append(f"{where}: unknown feature gate {gate}; ignored")
                continue
            try:
                gates[gate] = parse_bool(raw)
            except ValueError:
                warnings.append(f"{where}: invalid value {show_value(raw)} (want true or false); ignored, the "
                                "default stays")
        else:
            warnings.append(f"{where} is not a Karpenter setting; ignored")

    if config_logging is not None:
        zap_raw = config_logging.get(ZAP_LOGGER_CONFIG)
        if zap_raw is not None and str(zap_raw).strip():
            where = _where(namespace, CONFIG_LOGGING, ZAP_LOGGER_CONFIG)
            try:
                zap = json.loads(str(zap_raw))
                if not isinstance(zap, dict):
                    raise ValueError("not a JSON object")
            except ValueError as e:
                reason = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
                pos = f" at line {e.lineno} column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
                warnings.append(f"{where} is not valid JSON ({reason}{pos}; comments are not allowed in JSON); "
                                "ignored, the defaults stay")
                zap = {}
            for field_, name in (("level", "LOG_LEVEL"), ("encoding", "LOG_ENCODING")):
                if field_ in zap:
                    take(name, str(zap[field_]), FROM_CONFIG_LOGGING, f"{where} field {field_}")
            for field_, name in (("outputPaths", "LOG_OUTPUT_PATHS"), ("errorOutputPaths", "LOG_ERROR_OUTPUT_PATHS")):
                if field_ not in zap:
                    continue
                paths = zap[field_]
                if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
                    warnings.append(f"{where} field {field_}: want a list of paths; ignored, the default stays")
                    continue
                take(name, ",".join(paths), FROM_CONFIG_LOGGING, f"{where} field {field_}")
        level = config_logging.get(LOGLEVEL_CONTROLLER)
        if level is not None and str(level).strip():  # knative's per-component override wins over the zap level
            take("LOG_LEVEL", str(level), FROM_CONFIG_LOGGING, _where(namespace, CONFIG_LOGGING, LOGLEVEL_CONTROLLER))
    return LegacyConfig(namespace, values, origins, gates, present), warnings


def _reason(e: BaseException) -> str:
    """A short, one-line reason for a failed connection or a failed kubeconfig load."""
    text = " ".join(str(getattr(e, "reason", None) or e).split())
    m = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if m:
        return m.group(1).strip()
    if "timed out" in text.lower():
        return "timed out"
    return (text or type(e).__name__)[:120]


def read_legacy_configmaps(namespace: str, kubeconfig: str | None,
                           timeout: float = 3.0) -> tuple[LegacyConfig | None, list[str]]:
    """Read `karpenter-global-settings` and `config-logging` from `namespace` with karpy's own client (in-cluster
    config when KUBERNETES_SERVICE_HOST is set, else the kubeconfig), with short timeouts and no retries. When no
    cluster can be reached: None and one warning line saying env alone is used. (The kubernetes package's generated
    CoreV1Api would cost the controller ~20 MiB of modules for two GETs.)"""
    import logging
    import warnings as pywarnings

    from kubernetes.config.config_exception import ConfigException

    from controller.kube import resources as R
    from controller.kube.client import KubeClient
    from controller.kube.errors import KubeError, NotFoundError, UnavailableError

    fallback = "legacy ConfigMaps not read, using env and flags alone"
    try:
        client = KubeClient.from_environment(kubeconfig if not os.environ.get("KUBERNETES_SERVICE_HOST") else None)
    except (ConfigException, OSError, ValueError, TypeError) as e:
        return None, [f"no cluster configuration ({_reason(e)}): {fallback}"]
    # the read is quiet: urllib3's TLS chatter must not reach a one-line stderr (levels restored after)
    quiet = {name: logging.getLogger(name).level for name in ("urllib3", "kubernetes")}
    data: dict[str, dict[str, str] | None] = {}
    warnings: list[str] = []
    try:
        for name in quiet:
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
        with pywarnings.catch_warnings():
            pywarnings.simplefilter("ignore")
            for name in (GLOBAL_SETTINGS, CONFIG_LOGGING):
                path = R.CONFIGMAPS.path(namespace, name)
                try:
                    cm = client.request("GET", path, timeout=timeout)
                    raw = cm.get("data") if isinstance(cm, dict) else None
                    data[name] = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
                except NotFoundError:
                    data[name] = None
                except UnavailableError as e:  # connection refused, DNS, TLS, timeouts: no cluster to read from
                    return None, [f"no cluster reachable at {client.host} ({_reason(e)}): {fallback}"]
                except KubeError as e:
                    data[name] = None
                    warnings.append(f"ConfigMap {namespace}/{name} not read ({e.status} {e.reason}); ignored")
    finally:
        for name, level in quiet.items():
            logging.getLogger(name).setLevel(level)
        client.pool.clear()
    legacy, parse_warnings = parse_legacy_configmaps(namespace, data.get(GLOBAL_SETTINGS), data.get(CONFIG_LOGGING))
    return legacy, warnings + parse_warnings


# ------------------------------------------------------------------------------------------------------- resolution
def _given(values: Mapping[str, str | None], name: str) -> str | None:
    value = values.get(name)
    if value is None or not str(value).strip():
        return None
    return str(value)


def _aws_config_region(env: Mapping[str, str]) -> str | None:
    """The region of the shared AWS config file (AWS_CONFIG_FILE, else ~/.aws/config; profile AWS_PROFILE, else
    default), as boto3 would read it; no network call."""
    import configparser

    path = _given(env, "AWS_CONFIG_FILE") or os.path.join(_given(env, "HOME") or os.path.expanduser("~"), ".aws",
                                                          "config")
    profile = _given(env, "AWS_PROFILE") or "default"
    parser = configparser.RawConfigParser()
    try:
        parser.read(os.path.expanduser(path))
    except configparser.Error:  # a broken AWS config is boto3's to report when clients are made
        return None
    section = "default" if profile == "default" else f"profile {profile}"
    region = parser.get(section, "region", fallback=None) if parser.has_section(section) else None
    return region.strip() if region and region.strip() else None


class Sources(dict[str, str]):
    """Where each setting came from, by env name; `overridden` maps the settings a flag or env took over a legacy
    ConfigMap's value to that ConfigMap's source ("configmap karpenter-global-settings"), so the log can say which
    source won."""

    def __init__(self, items: Mapping[str, str], overridden: Mapping[str, str] | None = None) -> None:
        super().__init__(items)
        self.overridden = dict(overridden or {})


def log_sources(log: Any, settings: Settings, sources: Mapping[str, str]) -> None:
    """One info line per setting a legacy ConfigMap decided, and one per setting where env or a flag won over the
    ConfigMap's value (naming both), as the issue asks: the log says which source won."""
    overridden: Mapping[str, str] = getattr(sources, "overridden", {})
    for name, source in sources.items():
        if source.startswith("configmap "):
            log.info("using setting from ConfigMap", extra={
                "setting": name, "value": value_text(settings, name),
                "ConfigMap": {"name": source.removeprefix("configmap "), "namespace": settings.system_namespace}})
        elif name in overridden:
            log.info("using setting from %s over ConfigMap", source, extra={
                "setting": name, "value": value_text(settings, name), "source": source,
                "ConfigMap": {"name": overridden[name].removeprefix("configmap "),
                              "namespace": settings.system_namespace}})


def resolve(env: Mapping[str, str], flags: Mapping[str, str | None],
            configmaps: LegacyConfig | None) -> tuple[Settings, dict[str, str]]:
    """The settings and, for each setting's env name, where its value came from ("flag", "env",
    "configmap karpenter-global-settings", "configmap config-logging", "default"). `flags` is keyed by env name
    (CLUSTER_NAME, ...). Precedence: flag > env > legacy ConfigMap > default. Raises SettingsError (one line)."""
    legacy = configmaps or LegacyConfig()
    kwargs: dict[str, Any] = {}
    sources: dict[str, str] = {}
    overridden: dict[str, str] = {}
    for spec in SPECS:
        if spec.name == "FEATURE_GATES":
            continue
        raw: str | None = None
        source = DEFAULT
        for candidate, origin in ((_given(flags, spec.name), FLAG), (_given(env, spec.name), ENV)):
            if candidate is not None:
                raw, source = candidate, origin
                break
        if raw is None and spec.name == "AWS_REGION" and _given(env, "AWS_DEFAULT_REGION") is not None:
            raw, source = _given(env, "AWS_DEFAULT_REGION"), ENV
        if spec.name in legacy.values:
            if raw is None:
                raw, source = legacy.values[spec.name], legacy.origins.get(spec.name, FROM_GLOBAL_SETTINGS)
            else:
                overridden[spec.name] = legacy.origins.get(spec.name, FROM_GLOBAL_SETTINGS)
        if raw is None:
            if spec.name == "CLUSTER_NAME":
                raise SettingsError(spec.name, f"missing CLUSTER_NAME: set the CLUSTER_NAME environment variable or "
                                    f"{spec.option} (or aws.clusterName in the {GLOBAL_SETTINGS} ConfigMap)")
            value = spec.default
            if spec.name == "LEADER_ELECTION_NAMESPACE":
                value = None  # filled from SYSTEM_NAMESPACE below
            elif spec.name == "AWS_REGION":
                region = _aws_config_region(env)
                if region:
                    value, source = region, "aws config file"
        else:
            try:
                value = spec.parse(raw)
            except ValueError as e:
                raise SettingsError(spec.name, f"invalid {spec.name} {show_value(raw)} from {source}: {e}") from None
        kwargs[spec.attr] = value
        sources[spec.name] = source
    if kwargs["leader_election_namespace"] is None:
        kwargs["leader_election_namespace"] = kwargs["system_namespace"]
    kwargs["feature_gates"], sources["FEATURE_GATES"] = _resolve_gates(env, flags, legacy)
    if legacy.feature_gates and sources["FEATURE_GATES"] in (ENV, FLAG):
        overridden["FEATURE_GATES"] = FROM_GLOBAL_SETTINGS
    return Settings(**kwargs), Sources({s.name: sources[s.name] for s in SPECS}, overridden)


def _resolve_gates(env: Mapping[str, str], flags: Mapping[str, str | None],
                   legacy: LegacyConfig) -> tuple[dict[str, bool], str]:
    """Gates merged one by one: defaults < ConfigMap < env < flag; the source is the strongest that named any gate."""
    gates = dict(FEATURE_GATE_DEFAULTS)
    source = DEFAULT
    if legacy.feature_gates:
        gates.update(legacy.feature_gates)
        source = FROM_GLOBAL_SETTINGS
    for raw, origin in ((_given(env, "FEATURE_GATES"), ENV), (_given(flags, "FEATURE_GATES"), FLAG)):
        if raw is None:
            continue
        try:
            named = parse_feature_gates(raw)
        except ValueError as e:
            raise SettingsError("FEATURE_GATES", f"invalid FEATURE_GATES {show_value(raw)} from {origin}: {e}") \
                from None
        gates.update(named)
        source = origin
    return gates, source


def value_text(settings: Settings, name: str) -> str:
    """A setting's value as --check-config shows it (Go durations, true/false, Gate=true,...)."""
    spec = SPECS_BY_NAME[name]
    return str(spec.show(getattr(settings, spec.attr)))


def describe(settings: Settings, sources: Mapping[str, str]) -> list[str]:
    """`NAME=value (source)` lines, one per setting, in the table's order."""
    return [f"{spec.name}={value_text(settings, spec.name)} ({sources.get(spec.name, DEFAULT)})" for spec in SPECS]


def bootstrap(env: Mapping[str, str], flags: Mapping[str, str | None]) -> tuple[str | None, str | None]:
    """The namespace to read the legacy ConfigMaps from (None: SYSTEM_NAMESPACE is bad; resolve will say so) and the
    kubeconfig, from flags and env alone."""
    raw = _given(flags, "SYSTEM_NAMESPACE") or _given(env, "SYSTEM_NAMESPACE") or "kube-system"
    try:
        namespace: str | None = _namespace(raw)
    except ValueError:
        namespace = None
    return namespace, _given(flags, "KUBECONFIG") or _given(env, "KUBECONFIG")


def load(env: Mapping[str, str], flags: Mapping[str, str | None], read_configmaps: bool = True,
         timeout: float = 3.0) -> tuple[Settings, dict[str, str], list[str]]:
    """Read the legacy ConfigMaps (unless told not to), then resolve: (settings, sources, warning lines). Raises
    SettingsError."""
    namespace, kubeconfig = bootstrap(env, flags)
    legacy: LegacyConfig | None = None
    warnings: list[str] = []
    if read_configmaps and namespace is not None:
        legacy, warnings = read_legacy_configmaps(namespace, kubeconfig, timeout)
    settings, sources = resolve(env, flags, legacy)
    return settings, sources, warnings
