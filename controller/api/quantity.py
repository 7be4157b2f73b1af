"""Kubernetes resource quantities ("100m", "1.5Gi", "2e3") parsed into karpy's canonical integer units.

Canonical units keep the hot path on plain integers: cpu in millicores, every other resource (memory,
ephemeral-storage, hugepages, pods, extended resources) in whole units (bytes for storage), rounded up as the
kubelet and scheduler do.
"""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal(10**3),
            "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18)}
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|n|u|m|k|M|G|T|P|E)?$")

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"


# Kubernetes keeps a quantity's value in an int64; anything larger is no real resource (and a string such as
# 1e999999999 would otherwise cost minutes to turn into an integer). Canonical amounts stay within int64 too.
MAX_QUANTITY = Decimal(2**63 - 1)
_MAX_TEXT = 64


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def _short(value: object) -> str:
    text = repr(value[:_MAX_TEXT + 1]) if isinstance(value, str) else repr(value)
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "…"


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a Kubernetes quantity into an exact Decimal in base units (cores, bytes, counts); NaN, infinities and
    magnitudes past Kubernetes' int64 range are errors."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"{_short(value)} is not a quantity")
    if isinstance(value, float) and not math.isfinite(value):
        raise QuantityError(f"{_short(value)} is not a finite quantity")
    if isinstance(value, int | float):
        number = Decimal(str(value)) if abs(value) < 10**30 else None
        if number is None or abs(number) > MAX_QUANTITY:
            raise QuantityError(f"{_short(value)} is too large a quantity (at most {MAX_QUANTITY:.3e})")
        return number
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    """parse_quantity of a string, cached: a large file repeats a few request values thousands of times, each read
    by validation and by the scheduler's input (Decimal is immutable, errors are not cached)."""
    text = value.strip()
    m = _QUANTITY.match(text) if len(text) <= _MAX_TEXT else None
    if not m:
        raise QuantityError(f"{_short(value)} is not a quantity (expected e.g. 100m, 512Mi, 2)")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation as e:  # pragma: no cover - the regex already guards this
        raise QuantityError(f"{value!r} is not a quantity") from e
    suffix = m.group(2) or ""
    if suffix in _BINARY:
        q = number * _BINARY[suffix]
    elif suffix[:1] in ("e", "E") and len(suffix) > 1:  # a bare "E" is exa, not an exponent
        exponent = int(suffix[1:])
        if abs(exponent) > 30:
            raise QuantityError(f"{_short(value)} is too large a quantity (at most {MAX_QUANTITY:.3e})")
        q = number * (Decimal(10) ** exponent)
    else:
        q = number * _DECIMAL[suffix]
    if abs(q) > MAX_QUANTITY:
        raise QuantityError(f"{_short(value)} is too large a quantity (at most {MAX_QUANTITY:.3e})")
    return q


def to_canonical(resource: str, value: str | int | float) -> int:
    """A quantity in karpy's integer unit for that resource: millicores for cpu, whole units otherwise (rounded up)."""
    q = parse_quantity(value)
    if resource == CPU:
        q = q * 1000
        if abs(q) > MAX_QUANTITY:
            raise QuantityError(f"{_short(value)} is too large a cpu quantity")
    return math.ceil(q)


def to_canonical_non_negative(resource: str, value: str | int | float) -> int:
    """to_canonical for amounts that cannot be negative (requests, limits, capacity, reserved, volume sizes)."""
    amount = to_canonical(resource, value)
    if amount < 0 or parse_quantity(value) < 0:
        raise QuantityError(f"{_short(value)} is negative")
    return amount


def resources_from_dict(raw: dict[str, str | int | float] | None) -> dict[str, int]:
    """A Kubernetes ResourceList (requests, capacity, limits) in canonical units."""
    if not raw:
        return {}
    return {name: to_canonical(name, v) for name, v in raw.items()}


def format_quantity(resource: str, amount: int) -> str:
    """Render a canonical amount back as a Kubernetes quantity string (cpu as millicores or cores, bytes as Mi/Gi)."""
    if resource == CPU:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if resource in (MEMORY, EPHEMERAL_STORAGE) or resource.startswith("hugepages-"):
        for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount and amount % size == 0:
                return f"{amount // size}{suffix}"
        return str(amount)
    return str(amount)


def add(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    """Sum of two resource lists."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def subtract(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    """a - b, key by key (missing keys count as zero)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) - v
    return out


def fits(requests: dict[str, int], available: dict[str, int]) -> bool:
    """True when every requested resource is available in at least that amount."""
    return all(v <= available.get(k, 0) for k, v in requests.items() if v > 0)
