"""PodDisruptionBudget limits and Karpenter's reschedulable-pod rules (Karpenter's pkg/utils/pdb and pod helpers).

Pods on a node that is going away are provisioned for only when they will move: a pod with an active
karpenter.sh/do-not-disrupt or under a PDB that never allows an eviction stays where it is, so capacity launched for it
would sit empty. A terminating StatefulSet pod is provisioned for, since its replacement cannot be created until it is
gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from controller.scheduling.pod import PodError, label_selector
from controller.state.views import PodView
from controller.termination.drain import (
    do_not_disrupt_active,
    is_active,
    is_evictable,
    is_static,
    is_terminating,
    owned_by_daemonset,
)

Obj = dict[str, Any]


def _owned_by_statefulset(pod: Obj) -> bool:
    return any(isinstance(r, dict) and r.get("apiVersion") == "apps/v1" and r.get("kind") == "StatefulSet"
               for r in (pod.get("metadata") or {}).get("ownerReferences") or [])


def is_reschedulable(pod: Obj) -> bool:
    """Karpenter's IsReschedulable: active (or a terminating StatefulSet pod, whose replacement waits for it to go),
    and neither a DaemonSet's nor a static pod."""
    return ((is_active(pod) or (_owned_by_statefulset(pod) and is_terminating(pod)))
            and not owned_by_daemonset(pod) and not is_static(pod))


def is_disruptable(pod: Obj, now: float) -> bool:
    """Karpenter's IsDisruptable: not active, or no active do-not-disrupt."""
    return not is_active(pod) or not do_not_disrupt_active(pod, now)


def _int_or_percent(value: Any) -> tuple[str, Any]:
    """An IntOrString as ("int", n) or ("str", text)."""
    return ("str", value) if isinstance(value, str) else ("int", value)


@dataclass(frozen=True)
class _Budget:
    namespace: str
    name: str
    selector: Any
    fully_blocking: bool
    always_evict_unhealthy: bool


class PdbLimits:
    """The cluster's PDBs as Karpenter's pdb.Limits reads them: which pods a budget would never let go."""

    def __init__(self, pdbs: Iterable[Obj]) -> None:
        self._budgets: list[_Budget] = []
        for pdb in pdbs:
            meta = pdb.get("metadata") or {}
            spec = pdb.get("spec") or {}
            try:
                selector = label_selector(spec.get("selector"), "spec.selector")  # none selects no pod
            except PodError:
                continue  # a selector the apiserver would have refused matches nothing
            max_u = _int_or_percent(spec.get("maxUnavailable")) if spec.get("maxUnavailable") is not None else None
            min_a = _int_or_percent(spec.get("minAvailable")) if spec.get("minAvailable") is not None else None
            fully = max_u in (("int", 0), ("str", "0%")) or min_a == ("str", "100%")
            self._budgets.append(_Budget(str(meta.get("namespace") or "default"), str(meta.get("name") or ""),
                                         selector, fully,
                                         spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow"))

    def fully_blocked(self, pod: Obj, now: float) -> list[str]:
        """The PDBs (namespace/name) that will never let this pod be evicted: one that allows no disruption at all
        (maxUnavailable 0 or 0%, minAvailable 100%), or more than one (the Eviction API refuses a pod with two).
        Pods the drain does not evict are never blocked."""
        if not is_evictable(pod, now):
            return []
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        matching = [b for b in self._budgets if b.namespace == namespace and b.selector.matches(labels)]
        if len(matching) > 1:
            return [f"{b.namespace}/{b.name}" for b in matching]
        for b in matching:
            if b.always_evict_unhealthy and PodView.of(pod).unhealthy:
                return []
            if b.fully_blocking:
                return [f"{b.namespace}/{b.name}"]
        return []

    def is_currently_reschedulable(self, pod: Obj, now: float) -> bool:
        """Karpenter's IsCurrentlyReschedulable: reschedulable, disruptable, and not fully blocked by a PDB."""
        return is_reschedulable(pod) and is_disruptable(pod, now) and not self.fully_blocked(pod, now)
