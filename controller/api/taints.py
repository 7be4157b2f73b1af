"""One node Taint type and one toleration matcher (Kubernetes' rules), shared by the API models, the scheduler and the
drain, so a taint is tolerated by the same rule wherever karpy asks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.api.labels import UNREGISTERED_TAINT_KEY


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration (the scheduler's and the drain's)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


def toleration_from_dict(t: Mapping[str, Any]) -> Toleration:
    """A toleration in the API's form (key, operator, value, effect)."""
    return Toleration(str(t.get("key") or ""), str(t.get("operator") or "Equal"), str(t.get("value") or ""),
                       str(t.get("effect") or ""))


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes' ToleratesTaint: an effect, if given, must match; Exists with no key tolerates every taint, Exists
    with a key every taint of that key; Equal (the default) needs the key and the value to match."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    operator = toleration.operator or "Equal"
    if not toleration.key:
        return operator == "Exists"
    if toleration.key != taint.key:
        return False
    return operator == "Exists" or (operator == "Equal" and (toleration.value or "") == taint.value)


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint: key, value (may be empty) and effect (NoSchedule, PreferNoSchedule, NoExecute)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"

    @classmethod
    def from_dict(cls, t: Mapping[str, Any]) -> Taint:
        """A taint in the API's form."""
        return cls(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))

    def to_dict(self) -> dict[str, str]:
        """The API's form (an empty value left out)."""
        return {"key": self.key, **({"value": self.value} if self.value else {}), "effect": self.effect}

    def tolerated_by(self, tolerations: Iterable[Toleration]) -> bool:
        """Whether any of the tolerations tolerates this taint."""
        return any(tolerates(t, self) for t in tolerations)

    def matches(self, other: Taint) -> bool:
        """Kubernetes' MatchTaint: the same key and effect (the value is not compared)."""
        return self.key == other.key and self.effect == other.effect


# karpenter.sh/unregistered:NoExecute: a node registers with it and registration removes it once the Node is synced
# (Karpenter's UnregisteredNoExecuteTaint, matched by key and effect wherever it is looked for)
UNREGISTERED_TAINT = Taint(UNREGISTERED_TAINT_KEY, "", "NoExecute")

# Taints a node carries while it starts (Karpenter's scheduling.KnownEphemeralTaints): on its own nodes Karpenter
# ignores them until the node is initialized, and initialization waits for them to be gone
KNOWN_EPHEMERAL_TAINTS = (
    Taint("node.kubernetes.io/not-ready", "", "NoSchedule"),
    Taint("node.kubernetes.io/not-ready", "", "NoExecute"),
    Taint("node.kubernetes.io/unreachable", "", "NoSchedule"),
    Taint("node.cloudprovider.kubernetes.io/uninitialized", "true", "NoSchedule"),
    UNREGISTERED_TAINT,
)
# key prefixes of taint families that are ephemeral too (the Node Readiness Controller's readiness.k8s.io/<rule>)
KNOWN_EPHEMERAL_TAINT_KEY_PREFIXES = ("readiness.k8s.io/",)


def is_known_ephemeral(taint: Taint) -> bool:
    """Karpenter's IsKnownEphemeralTaint: matches a known ephemeral taint (key and effect) or a known key prefix."""
    return any(t.matches(taint) for t in KNOWN_EPHEMERAL_TAINTS) or taint.key.startswith(
        KNOWN_EPHEMERAL_TAINT_KEY_PREFIXES)
