"""Kubernetes quantities into canonical integers."""

import pytest

from controller.api.quantity import QuantityError, format_quantity, parse_quantity, to_canonical


@pytest.mark.parametrize(("res", "raw", "want"), [
    ("cpu", "100m", 100), ("cpu", "1", 1000), ("cpu", "1.5", 1500), ("cpu", 2, 2000), ("cpu", "0.1", 100),
    ("memory", "1Gi", 2**30), ("memory", "512Mi", 512 * 2**20), ("memory", "1G", 10**9), ("memory", "1e3", 1000),
    ("memory", "1.5Ki", 1536), ("pods", "110", 110), ("cpu", "250u", 1),
])
def test_canonical(res, raw, want):
    assert to_canonical(res, raw) == want


@pytest.mark.parametrize("raw", ["abc", "1.2.3", "", "10 Gi", "1Zi", True])
def test_rejects_non_quantities(raw):
    with pytest.raises(QuantityError):
        parse_quantity(raw)


def test_format_round_trips():
    assert format_quantity("cpu", 1500) == "1500m"
    assert format_quantity("cpu", 2000) == "2"
    assert format_quantity("memory", 3 * 2**30) == "3Gi"
    assert to_canonical("memory", format_quantity("memory", 12345)) == 12345


# ---- found by mutation testing: limits, units and messages the tests above left open -------------------------------
from decimal import Decimal  # noqa: E402

from controller.api.quantity import (  # noqa: E402
    MAX_QUANTITY,
    add,
    fits,
    resources_from_dict,
    subtract,
    to_canonical_non_negative,
)


@pytest.mark.parametrize(("raw", "want"), [
    ("1Ki", 2**10), ("1Mi", 2**20), ("1Gi", 2**30), ("1Ti", 2**40), ("1Pi", 2**50), ("1Ei", 2**60),
    ("1n", Decimal("1e-9")), ("1u", Decimal("1e-6")), ("1m", Decimal("0.001")), ("1k", 10**3), ("1M", 10**6),
    ("1G", 10**9), ("1T", 10**12), ("1P", 10**15), ("1E", 10**18), ("2e3", 2000), ("2E-3", Decimal("0.002")),
    (" 5 ", 5), ("+.5", Decimal("0.5")), ("-1", -1), (3, 3), (1.5, Decimal("1.5")),
])
def test_every_suffix_scales_exactly(raw, want):
    assert parse_quantity(raw) == want


def test_int64_is_the_largest_quantity():
    assert parse_quantity(str(2**63 - 1)) == MAX_QUANTITY
    assert parse_quantity(2**63 - 1) == MAX_QUANTITY
    with pytest.raises(QuantityError, match=r"^'9223372036854775808' is too large a quantity \(at most 9\.223e\+18\)$"):
        parse_quantity(str(2**63))
    with pytest.raises(QuantityError, match=r"^9223372036854775808 is too large a quantity"):
        parse_quantity(2**63)
    assert parse_quantity("1e18") == 10**18
    assert parse_quantity("1e-30") == Decimal("1e-30")
    with pytest.raises(QuantityError, match="too large"):
        parse_quantity("1e31")
    with pytest.raises(QuantityError, match="too large"):
        parse_quantity("1e-31")  # the exponent is bounded either way: no 10**-999999999 either
    with pytest.raises(QuantityError, match=r"^'4611686018427387904' is too large a cpu quantity$"):
        to_canonical("cpu", str(2**62))  # fits int64 as cores, not as millicores


@pytest.mark.parametrize(("raw", "message"), [
    (float("nan"), "nan is not a finite quantity"), (float("inf"), "inf is not a finite quantity"),
    (None, "None is not a quantity"), (True, "True is not a quantity"), ([1], r"\[1\] is not a quantity"),
    ("x" * 100, "'" + "x" * 63 + "…" + r" is not a quantity \(expected e.g. 100m, 512Mi, 2\)"),
    ("1" * 65, "." + "1" * 63 + "… is not a quantity"),  # longer than any quantity: not even matched
])
def test_bad_values_are_quoted_short(raw, message):
    with pytest.raises(QuantityError, match=f"^{message}"):
        parse_quantity(raw)


def test_canonical_amounts_round_up_and_refuse_negatives():
    assert to_canonical("memory", "1.5") == 2 and to_canonical("cpu", "1.0001") == 1001
    assert to_canonical("memory", "-1.5") == -1
    assert to_canonical_non_negative("memory", "0") == 0
    assert to_canonical_non_negative("cpu", "1.5") == 1500
    with pytest.raises(QuantityError, match=r"^'-1' is negative$"):
        to_canonical_non_negative("memory", "-1")
    with pytest.raises(QuantityError, match=r"^'-0\.1m' is negative$"):
        to_canonical_non_negative("cpu", "-0.1m")  # rounds to 0 millicores, still negative


def test_resource_lists():
    assert resources_from_dict(None) == {} and resources_from_dict({}) == {}
    assert resources_from_dict({"cpu": "1", "memory": "1Ki", "nvidia.com/gpu": 2}) == {
        "cpu": 1000, "memory": 1024, "nvidia.com/gpu": 2}
    assert add({"cpu": 1, "pods": 2}, {"cpu": 3, "memory": 4}) == {"cpu": 4, "pods": 2, "memory": 4}
    assert subtract({"cpu": 5}, {"cpu": 3, "memory": 4}) == {"cpu": 2, "memory": -4}
    assert fits({"cpu": 2, "memory": 0, "gpu": -1}, {"cpu": 2}) is True
    assert fits({"cpu": 3}, {"cpu": 2}) is False and fits({"memory": 1}, {}) is False


@pytest.mark.parametrize(("res", "amount", "text"), [
    ("cpu", 0, "0"), ("cpu", 1000, "1"), ("cpu", 1001, "1001m"), ("memory", 0, "0"), ("memory", 2**30, "1Gi"),
    ("memory", 3 * 2**20, "3Mi"), ("memory", 5 * 2**10, "5Ki"), ("memory", 1000, "1000"),
    ("ephemeral-storage", 2**31, "2Gi"), ("hugepages-2Mi", 2**21, "2Mi"), ("pods", 2**20, "1048576"),
])
def test_format_quantity(res, amount, text):
    assert format_quantity(res, amount) == text
