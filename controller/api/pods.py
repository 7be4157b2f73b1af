"""Pod ownership as Karpenter's pod utilities read it: one place for "is this a DaemonSet's pod"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def owned_by(pod: Mapping[str, Any], api_version: str, kind: str) -> bool:
    """Whether any owner reference of the pod is of that apiVersion and kind (Karpenter's podutil.IsOwnedBy)."""
    return any(isinstance(r, dict) and r.get("apiVersion") == api_version and r.get("kind") == kind
               for r in (pod.get("metadata") or {}).get("ownerReferences") or [])


def owned_by_daemonset(pod: Mapping[str, Any]) -> bool:
    """Whether an apps/v1 DaemonSet owns the pod (any owner reference, as Karpenter's IsOwnedByDaemonSet checks)."""
    return owned_by(pod, "apps/v1", "DaemonSet")
