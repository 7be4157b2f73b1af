"""Pure decisions of node termination, as Karpenter makes them: which pods a drain waits on, evicts or deletes and in
which tier, the terminationGracePeriod deadline, the per-pod eviction backoff and the status conditions' shape."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from controller.api import conditions as C
from controller.api import labels as L
from controller.api.durations import parse_go_duration
from controller.api.pods import owned_by, owned_by_daemonset
from controller.api.taints import Taint, toleration_from_dict
from controller.state.views import NodeView

Obj = dict[str, Any]

DISRUPTED_TAINT: Obj = {"key": L.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}
EXCLUDE_LB_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
EXCLUDE_LB_VALUE = "karpenter"
CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})

MIN_DRAIN_TIME = 5.0  # Drained stays Unknown this long, to catch pods bound just before the taint was seen
STUCK_TERMINATING = 60.0  # a pod terminating this long past its deletionTimestamp no longer blocks the drain
DRAIN_REQUEUE = 1.0
INSTANCE_POLL = 5.0
EVICTION_BASE_DELAY = 0.1
EVICTION_MAX_DELAY = 10.0

# Karpenter's groupPodsByPriority tiers: the next starts only once every pod of the previous one is gone
TIER_NONCRITICAL = 0
TIER_NONCRITICAL_DAEMON = 1
TIER_CRITICAL = 2
TIER_CRITICAL_DAEMON = 3
TIER_NAMES = ("non-critical", "non-critical daemon", "critical", "critical daemon")



# ---- time ------------------------------------------------------------------------------------------------------

parse_time = C.parse_time  # RFC 3339 -> epoch seconds (None when absent or malformed; no zone read as UTC)
format_time = C.format_time  # epoch seconds as RFC 3339 in UTC, second precision (as Go's time.RFC3339 writes)


def termination_timestamp(nodeclaim: Obj) -> str | None:
    """The value of karpenter.sh/nodeclaim-termination-timestamp for a deleted NodeClaim: deletionTimestamp +
    spec.terminationGracePeriod (None without either, or when the period is not a duration)."""
    deleted = parse_time((nodeclaim.get("metadata") or {}).get("deletionTimestamp"))
    tgp = (nodeclaim.get("spec") or {}).get("terminationGracePeriod")
    if deleted is None or not isinstance(tgp, str) or not tgp:
        return None
    try:
        return format_time(deleted + parse_go_duration(tgp))
    except ValueError:
        return None


def termination_deadline(nodeclaim: Obj | None) -> float | None:
    """The instant every pod left on the node is deleted, from the NodeClaim's annotation (None when it has none)."""
    if nodeclaim is None:
        return None
    value = ((nodeclaim.get("metadata") or {}).get("annotations") or {}).get(L.NODECLAIM_TERMINATION_TIMESTAMP)
    return parse_time(value)


# ---- pods ------------------------------------------------------------------------------------------------------

def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def is_static(pod: Obj) -> bool:
    """A static pod's mirror: owned by its Node or annotated as a mirror; the API cannot evict or delete it."""
    return owned_by(pod, "v1", "Node") or "kubernetes.io/config.mirror" in (_meta(pod).get("annotations") or {})


def is_terminal(pod: Obj) -> bool:
    """Succeeded or Failed."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_terminating(pod: Obj) -> bool:
    """Deleted, waiting for its containers to stop."""
    return bool(_meta(pod).get("deletionTimestamp"))


def is_active(pod: Obj) -> bool:
    """Neither terminal nor terminating."""
    return not is_terminal(pod) and not is_terminating(pod)


def is_stuck_terminating(pod: Obj, now: float) -> bool:
    """Terminating for more than a minute past its deletionTimestamp: the drain stops waiting on it."""
    deleted = parse_time(_meta(pod).get("deletionTimestamp"))
    return deleted is not None and now - deleted > STUCK_TERMINATING


def is_critical(pod: Obj) -> bool:
    """Priority class system-cluster-critical or system-node-critical."""
    return _spec(pod).get("priorityClassName") in CRITICAL_PRIORITY_CLASSES


def tolerates(tolerations: Iterable[Obj] | None, taint: Obj) -> bool:
    """Whether any toleration (API form) tolerates the taint (API form), by the shared Kubernetes matcher."""
    node_taint = Taint.from_dict(taint)
    return node_taint.tolerated_by(toleration_from_dict(t) for t in tolerations or [] if isinstance(t, dict))


def tolerates_disrupted_taint(pod: Obj) -> bool:
    """Pods that tolerate karpenter.sh/disrupted:NoSchedule would come straight back: Karpenter leaves them."""
    return tolerates(_spec(pod).get("tolerations"), DISRUPTED_TAINT)


def do_not_disrupt_active(pod: Obj, now: float) -> bool:
    """karpenter.sh/do-not-disrupt: "true" protects the pod; a positive duration protects it for that long after it
    started (always while its start time is unknown); any other value is ignored."""
    value = (_meta(pod).get("annotations") or {}).get(L.DO_NOT_DISRUPT)
    if value is None:
        return False
    if value == "true":
        return True
    try:
        protected = parse_go_duration(value)
    except ValueError:
        return False
    if protected <= 0:
        return False
    started = parse_time((pod.get("status") or {}).get("startTime"))
    return started is None or now - started < protected


def is_drainable(pod: Obj, now: float) -> bool:
    """A pod the drain must see gone: not tolerating the disrupted taint, not stuck terminating, not static."""
    return not tolerates_disrupted_taint(pod) and not is_stuck_terminating(pod, now) and not is_static(pod)


def is_waiting_eviction(pod: Obj, now: float) -> bool:
    """A pod the node still waits on: drainable and not terminal."""
    return not is_terminal(pod) and is_drainable(pod, now)


def is_evictable(pod: Obj, now: float) -> bool:
    """A pod to send an Eviction for now: active, not tolerating the taint, not static, no active do-not-disrupt."""
    return (is_active(pod) and not tolerates_disrupted_taint(pod) and not is_static(pod)
            and not do_not_disrupt_active(pod, now))


def needs_force_delete(pod: Obj, deadline: float | None, now: float) -> bool:
    """Whether the pod must be deleted (bypassing PDBs and do-not-disrupt) rather than evicted: its grace period
    would outlast the node's deadline, i.e. now is past deadline - terminationGracePeriodSeconds; a terminating pod
    qualifies when its own deletionTimestamp lies beyond the deadline."""
    if deadline is None:
        return False
    if is_terminating(pod):
        deleted = parse_time(_meta(pod).get("deletionTimestamp"))
        return deleted is not None and deleted > deadline
    tgps = _spec(pod).get("terminationGracePeriodSeconds")
    if tgps is None:
        return False
    return now > deadline - float(tgps)


def force_delete_grace(deadline: float, now: float) -> int:
    """The grace period of a forced deletion: what is left until the deadline, at least 1 s (0 would remove the pod
    from etcd before its containers stop)."""
    return max(int(deadline - now), 1)


def tier(pod: Obj) -> int:
    """The drain tier: non-critical, then non-critical DaemonSet, then critical, then critical DaemonSet pods."""
    if owned_by_daemonset(pod):
        return TIER_CRITICAL_DAEMON if is_critical(pod) else TIER_NONCRITICAL_DAEMON
    return TIER_CRITICAL if is_critical(pod) else TIER_NONCRITICAL


@dataclass
class DrainPlan:
    """One drain pass: pods to delete now (past their deadline, every tier), pods to evict now (the current tier),
    and every pod the node still waits on."""

    delete: list[Obj] = field(default_factory=list)
    evict: list[Obj] = field(default_factory=list)
    waiting: list[Obj] = field(default_factory=list)
    tier: int | None = None

    @property
    def drained(self) -> bool:
        """Nothing left to wait on."""
        return not self.waiting


def plan_drain(pods: Iterable[Obj], deadline: float | None, now: float) -> DrainPlan:
    """Decide a drain pass: pods whose grace period would outlast the deadline are deleted whatever their tier; of
    the rest, only the first tier with pods left is worked on, its active evictable pods evicted, its terminating
    and do-not-disrupt pods waited on; later tiers wait for it to be gone."""
    plan = DrainPlan()
    graceful: list[list[Obj]] = [[], [], [], []]
    for pod in pods:
        if not is_waiting_eviction(pod, now):
            continue
        plan.waiting.append(pod)
        if needs_force_delete(pod, deadline, now):
            plan.delete.append(pod)
        else:
            graceful[tier(pod)].append(pod)
    for index, group in enumerate(graceful):
        if group:
            plan.tier = index
            plan.evict = [p for p in group if is_evictable(p, now)]
            break
    return plan


def undrainable_pod_claims(pods: Iterable[Obj], now: float) -> list[tuple[str, str]]:
    """(namespace, PVC name) of the volumes of pods the drain does not wait on: their VolumeAttachments do not
    block instance termination (generic ephemeral volumes are named <pod>-<volume>)."""
    out: list[tuple[str, str]] = []
    for pod in pods:
        if is_drainable(pod, now):
            continue
        meta = _meta(pod)
        for v in _spec(pod).get("volumes") or []:
            if not isinstance(v, dict):
                continue
            if isinstance(v.get("persistentVolumeClaim"), dict) and v["persistentVolumeClaim"].get("claimName"):
                out.append((str(meta.get("namespace") or ""), str(v["persistentVolumeClaim"]["claimName"])))
            elif isinstance(v.get("ephemeral"), dict):
                out.append((str(meta.get("namespace") or ""), f"{meta.get('name')}-{v.get('name')}"))
    return out


def blocking_volume_attachments(attachments: Iterable[Obj], node_name: str, ignored_volumes: set[str]) -> list[Obj]:
    """VolumeAttachments on the node that hold instance termination back: those of a PersistentVolume that no
    undrainable pod uses."""
    out = []
    for va in attachments:
        spec = _spec(va)
        if spec.get("nodeName") != node_name:
            continue
        pv = (spec.get("source") or {}).get("persistentVolumeName")
        if not pv or pv in ignored_volumes:
            continue
        out.append(va)
    return out


# ---- nodes -----------------------------------------------------------------------------------------------------

def has_disrupted_taint(node: Obj) -> bool:
    """Whether the node carries karpenter.sh/disrupted:NoSchedule (the Node view's rule)."""
    return NodeView.of(node).disrupted


# ---- conditions ------------------------------------------------------------------------------------------------

get_condition = C.get


def set_condition(status: Obj, type_: str, value: str, reason: str, message: str, now: float,
                  generation: int | None = None) -> bool:
    """controller.api.conditions.set_condition with the status given as "True", "False" or "Unknown"."""
    return C.set_condition(status, type_, {"True": True, "False": False}.get(value), reason, message, generation, now)


# ---- eviction backoff ------------------------------------------------------------------------------------------

@dataclass
class PodBackoff:
    """Per-pod exponential backoff of refused evictions: 100 ms doubling to 10 s, as Karpenter's eviction queue."""

    base: float = EVICTION_BASE_DELAY
    cap: float = EVICTION_MAX_DELAY
    _failures: dict[str, int] = field(default_factory=dict)
    _next: dict[str, float] = field(default_factory=dict)

    def ready(self, key: str, now: float) -> bool:
        """Whether the pod may be tried now."""
        return now >= self._next.get(key, 0.0)

    def failed(self, key: str, now: float) -> float:
        """Record a refusal; returns the delay before the next try."""
        n = self._failures.get(key, 0)
        delay = min(self.base * (2 ** n), self.cap)
        self._failures[key] = n + 1
        self._next[key] = now + delay
        return delay

    def forget(self, key: str) -> None:
        """The pod went through (or is gone): start over next time."""
        self._failures.pop(key, None)
        self._next.pop(key, None)

    def next_try(self, keys: Iterable[str], now: float) -> float | None:
        """Seconds until the earliest of these pods may be tried again (None when none is backing off)."""
        waits = [self._next[k] - now for k in keys if k in self._next]
        return max(min(waits), 0.0) if waits else None
