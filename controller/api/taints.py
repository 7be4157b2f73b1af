"""One node Taint type and one toleration matcher (Kubernetes' rules), shared by the API models, the scheduler and the
drain, so a taint is tolerated by the same rule wherever karpy asks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


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
