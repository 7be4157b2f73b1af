"""Disruption budgets evaluated per second: what one disruption pass spends on budgets.

    python benchmarks/budgets.py --nodepools 500

Each NodePool has Karpenter's default budget, a weekday business-hours budget for Drifted in a time zone, and a rare
schedule with a long window (the slowest case: many days searched back). Prints NodePools evaluated per second (all
three reasons each) for the mix and for each shape alone, and each shape's cost as a ratio to the default budget's,
measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from controller.disruption.budgets import allowed_by_reason

SHAPES: dict[str, list[dict[str, Any]]] = {
    "default": [{"nodes": "10%"}],
    "business-hours-tz": [{"nodes": "10%"}, {"nodes": "0", "reasons": ["Drifted"], "duration": "8h",
                                             "schedule": "CRON_TZ=Europe/Berlin 0 9 * * mon-fri"}],
    "rare-long-window": [{"nodes": "1", "schedule": "0 0 29 2 *", "duration": "8000h"}],
}


def _rate(budgets: list[list[dict[str, Any]]], now: float, seconds: float) -> float:
    pools = [{"spec": {"disruption": {"budgets": b}}} for b in budgets]
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for i, pool in enumerate(pools):
            allowed_by_reason(pool, now + i * 3600, 40)
        done += len(pools)
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodepools", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    now = time.time()
    shapes = list(SHAPES.values())
    mix = [shapes[i % len(shapes)] for i in range(args.nodepools)]
    print(f"mix of {args.nodepools} NodePools: {_rate(mix, now, args.seconds):,.0f} NodePools/s")
    base = _rate([SHAPES["default"]] * args.nodepools, now, args.seconds)
    for name, budgets in SHAPES.items():
        rate = base if name == "default" else _rate([budgets] * args.nodepools, now, args.seconds)
        print(f"{name:>20}: {rate:>12,.0f} NodePools/s  ({base / rate:.1f}x the default's cost)")


if __name__ == "__main__":
    main()
