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
