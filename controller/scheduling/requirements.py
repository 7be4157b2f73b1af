"""Karpenter's requirements algebra: node selector requirements as (possibly complemented) value sets with bounds.

A Requirement is either a finite set of allowed values (In, DoesNotExist = the empty set) or the complement of a finite
set (NotIn, Exists = complement of nothing), narrowed by integer bounds (Gt/Lt/Gte/Lte). Intersection of two
requirements stays in that form, which is what lets NodePool, pod and instance-type constraints be combined exactly.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.api.labels import WELL_KNOWN_LABELS

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")


def _as_int(value: str) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Requirement:
    """Allowed values of one label key."""

    key: str
    complement: bool
    values: frozenset[str]
    gt: int | None = None  # value must be > gt
    lt: int | None = None  # value must be < lt
    min_values: int | None = None

    @classmethod
    def new(cls, key: str, operator: str, values: Iterable[str] = (), min_values: int | None = None) -> Requirement:
        """Build from a Kubernetes operator and values (Gte/Lte become Gt/Lt bounds)."""
        vals = [str(v) for v in values]
        if operator == "In":
            return cls(key, False, frozenset(vals), min_values=min_values)
        if operator == "NotIn":
            return cls(key, True, frozenset(vals), min_values=min_values)
        if operator == "Exists":
            return cls(key, True, frozenset(), min_values=min_values)
        if operator == "DoesNotExist":
            return cls(key, False, frozenset(), min_values=min_values)
        if operator in ("Gt", "Lt", "Gte", "Lte"):
            if len(vals) != 1 or _as_int(vals[0]) is None:
                raise ValueError(f"{key}: {operator} takes exactly one integer, got {vals}")
            n = int(vals[0])
            if operator == "Gt":
                return cls(key, True, frozenset(), gt=n, min_values=min_values)
            if operator == "Gte":
                return cls(key, True, frozenset(), gt=n - 1, min_values=min_values)
            if operator == "Lt":
                return cls(key, True, frozenset(), lt=n, min_values=min_values)
            return cls(key, True, frozenset(), lt=n + 1, min_values=min_values)
        raise ValueError(f"{key}: unknown operator {operator!r} (expected one of {', '.join(OPERATORS)})")

    def _in_bounds(self, value: str) -> bool:
        if self.gt is None and self.lt is None:
            return True
        n = _as_int(value)
        if n is None:
            return False
        return (self.gt is None or n > self.gt) and (self.lt is None or n < self.lt)

    def has(self, value: str) -> bool:
        """Whether a node labelled key=value satisfies this requirement."""
        if self.complement:
            return value not in self.values and self._in_bounds(value)
        return value in self.values and self._in_bounds(value)

    def allows_absent(self) -> bool:
        """Whether a node without this label satisfies it (NotIn and DoesNotExist do; In, Exists, Gt, Lt don't)."""
        if self.complement:
            return bool(self.values) and self.gt is None and self.lt is None
        return not self.values

    def is_empty(self) -> bool:
        """No value satisfies it (and absence was not asked for)."""
        if self.complement:
            if self.gt is not None and self.lt is not None:
                return self.lt - self.gt <= 1
            return False
        return not self.values

    def intersect(self, other: Requirement) -> Requirement:
        """The values allowed by both."""
        gt = max((b for b in (self.gt, other.gt) if b is not None), default=None)
        lt = min((b for b in (self.lt, other.lt) if b is not None), default=None)
        mv = max((m for m in (self.min_values, other.min_values) if m is not None), default=None)
        if self.complement and other.complement:
            return Requirement(self.key, True, self.values | other.values, gt, lt, mv)
        if self.complement:
            vals = other.values - self.values
        elif other.complement:
            vals = self.values - other.values
        else:
            vals = self.values & other.values
        probe = Requirement(self.key, False, frozenset(), gt, lt)
        return Requirement(self.key, False, frozenset(v for v in vals if probe._in_bounds(v)), None, None, mv)

    def describe(self) -> str:
        """Human form, e.g. `karpenter.k8s.aws/instance-family In [c5 m5]`."""
        if not self.complement:
            return f"{self.key} In [{' '.join(sorted(self.values))}]" if self.values else f"{self.key} DoesNotExist"
        parts = []
        if self.values:
            parts.append(f"NotIn [{' '.join(sorted(self.values))}]")
        if self.gt is not None:
            parts.append(f"Gt {self.gt}")
        if self.lt is not None:
            parts.append(f"Lt {self.lt}")
        return f"{self.key} {' '.join(parts) or 'Exists'}"

    def any_value(self) -> str | None:
        """A concrete value that satisfies it, for labelling a node (None for complements without a bound)."""
        if not self.complement:
            return min(self.values) if self.values else None
        if self.gt is not None:
            candidate = self.gt + 1
            return str(candidate) if self._in_bounds(str(candidate)) else None
        return None


@functools.lru_cache(maxsize=65536)
def _label_requirement(key: str, value: str) -> Requirement:
    """`key In [value]`, built once per label."""
    return Requirement(key, False, frozenset((value,)))


class Requirements:
    """A conjunction of requirements, one per key."""

    __slots__ = ("_describe", "_key", "_reqs")

    def __init__(self, reqs: Iterable[Requirement] = ()) -> None:
        self._reqs: dict[str, Requirement] = {}
        # describe() and key(), kept until the requirements change: the scheduler uses them as cache keys
        self._describe: str | None = None
        self._key: tuple[Requirement, ...] | None = None
        for r in reqs:
            self.add(r)

    @classmethod
    def from_node_selector_requirements(cls, items: Iterable[Mapping[str, Any]]) -> Requirements:
        """From `[{key, operator, values, minValues}]` (NodePool requirements, node affinity expressions)."""
        return cls(Requirement.new(str(i["key"]), str(i["operator"]), i.get("values") or (), i.get("minValues"))
                   for i in items)

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> Requirements:
        """Each label as `key In [value]` (keys are unique, so nothing to intersect; the immutable per-label
        requirements are shared, as every node of a cluster repeats most of its labels)."""
        out = cls()
        out._reqs = {k: _label_requirement(k, str(v)) for k, v in labels.items()}
        return out

    def add(self, req: Requirement) -> None:
        """Narrow by one more requirement (intersecting with any on the same key)."""
        cur = self._reqs.get(req.key)
        self._reqs[req.key] = req if cur is None else cur.intersect(req)
        self._describe = self._key = None

    def copy(self) -> Requirements:
        """A shallow copy (requirements themselves are immutable)."""
        out = Requirements()
        out._reqs = dict(self._reqs)
        out._describe = self._describe
        out._key = self._key
        return out

    def intersect(self, other: Requirements) -> Requirements:
        """Both sets of requirements at once."""
        out = self.copy()
        for r in other:
            out.add(r)
        return out

    def key(self) -> tuple[Requirement, ...]:
        """The requirements as a hashable value (in the order their keys were added): equal keys, equal
        requirements."""
        if self._key is None:
            self._key = tuple(self._reqs.values())
        return self._key

    def get(self, key: str) -> Requirement | None:
        """The requirement on key, if any."""
        return self._reqs.get(key)

    def keys(self) -> list[str]:
        """Keys constrained."""
        return list(self._reqs)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._reqs.values())

    def __len__(self) -> int:
        return len(self._reqs)

    def __contains__(self, key: str) -> bool:
        return key in self._reqs

    def incompatibility(self, other: Requirements, allow_undefined: frozenset[str] = WELL_KNOWN_LABELS) -> str | None:
        """Why a node meeting self cannot also meet other (a pod's needs), naming the key; None when it can.

        A key other requires that self does not define is fine when absence satisfies it or the key is one Karpenter
        can satisfy by choosing an instance type (well-known labels); a custom label must be defined by the NodePool.
        """
        for req in other:
            mine = self._reqs.get(req.key)
            if mine is None:
                if req.allows_absent() or req.key in allow_undefined:
                    continue
                return f"label {req.key} is not defined by the nodepool (requirement {req.describe()})"
            both = mine.intersect(req)
            if both.is_empty() and not (mine.allows_absent() and req.allows_absent()):
                return f"{req.describe()} conflicts with {mine.describe()}"
        return None

    def labels(self) -> dict[str, str]:
        """Labels a node created for these requirements gets: keys pinned to exactly one value."""
        out = {}
        for r in self._reqs.values():
            if not r.complement and len(r.values) == 1:
                out[r.key] = next(iter(r.values))
        return out

    def describe(self) -> str:
        """All requirements in human form."""
        if self._describe is None:
            self._describe = ", ".join(r.describe() for r in self._reqs.values())
        return self._describe

    def __repr__(self) -> str:
        return f"Requirements({self.describe()})"
