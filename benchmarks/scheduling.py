"""Karpenter's scheduling benchmark, reproduced: one NodePool, 400 synthetic instance types, N pods.

    python benchmarks/scheduling.py --pods 10000 --mix diverse -o json
    python benchmarks/scheduling.py --sizes 100,1000,10000,20000 --mix diverse

Prints per size: pods, nodes, seconds (wall time of Scheduler.solve alone: the figure the scheduling targets apply
to), cpuSeconds (the process's CPU time over the same solve: what a machine shared with other work still measures
fairly; wall well above CPU means the machine was busy), podsPerSecond, costPerHour, then the LP lower bound timed
apart from the solve (lowerBoundPerHour, gap, lowerBoundSeconds, lowerBoundCpuSeconds: the bound is computed for
reports, not by the controller's solves), and peakRssMiB (each size runs in its own process so peak RSS is honest);
the 1-minute load average when the run started; then a baseline measured in the same run: the same simulator with
equivalence classes disabled (every pod its own class), on min(2,000, largest size) pods, as a speed ratio of the
solves.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from controller.catalog.synthetic import benchmark_instance_types
from controller.scheduling.pod import Pod, pod_from_dict
from controller.scheduling.requirements import Requirements
from controller.scheduling.scheduler import Scheduler
from controller.scheduling.types import SchedNodePool

CPUS = (100, 250, 500, 1000, 1500)
MEMS = (100, 256, 512, 1024, 2048, 4096)
KINDS = ("plain", "zone-spread", "hostname-spread", "zone-affinity", "hostname-anti-affinity")
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def make_pods(n: int, mix: str, seed: int = 42) -> list[dict[str, Any]]:
    """Pod manifests as the benchmark draws them: seeded requests, five equal constraint kinds (or plain only)."""
    rnd = random.Random(seed)
    kinds = KINDS if mix == "diverse" else ("plain",)
    pods = []
    for i in range(n):
        kind = kinds[i * len(kinds) // n] if n >= len(kinds) else kinds[i % len(kinds)]
        labels = {"bench": kind}
        spec: dict[str, Any] = {"containers": [{"name": "app", "resources": {"requests": {
            "cpu": f"{rnd.choice(CPUS)}m", "memory": f"{rnd.choice(MEMS)}Mi"}}}]}
        selector = {"matchLabels": labels}
        if kind == "zone-spread":
            spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": ZONE,
                                                  "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}]
        elif kind == "hostname-spread":
            spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": HOST,
                                                  "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}]
        elif kind == "zone-affinity":
            spec["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": ZONE, "labelSelector": selector}]}}
        elif kind == "hostname-anti-affinity":
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": HOST, "labelSelector": selector}]}}
        pods.append({"metadata": {"name": f"pod-{i}", "namespace": "default", "labels": labels}, "spec": spec})
    return pods


def run_once(n: int, mix: str, classes: bool = True) -> dict[str, Any]:
    """Build the inputs, time Scheduler.solve alone, then the lower bound apart, and report the figures."""
    pool = SchedNodePool("default", 0, Requirements(), [], [], {}, None, {}, benchmark_instance_types())
    pods: list[Pod] = [pod_from_dict(d) for d in make_pods(n, mix)]
    if not classes:
        for i, p in enumerate(pods):
            p.class_key = i
    import controller.scheduling.lower_bound  # noqa: F401  scipy's import is start-up cost, not solve time
    scheduler = Scheduler([pool])
    start, cpu = time.perf_counter(), time.process_time()
    plan = scheduler.solve(pods)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    start, bound_cpu = time.perf_counter(), time.process_time()
    plan.lower_bound_per_hour = scheduler.lower_bound(plan)
    bound_seconds, bound_cpu = time.perf_counter() - start, time.process_time() - bound_cpu
    return {"pods": n, "mix": mix, "nodes": len(plan.node_claims), "unschedulable": len(plan.unschedulable),
            "seconds": round(seconds, 3), "cpuSeconds": round(cpu, 3), "podsPerSecond": round(n / seconds, 1),
            "costPerHour": round(plan.cost_per_hour, 2), "lowerBoundPerHour": round(plan.lower_bound_per_hour, 2),
            "gap": round(plan.gap, 4), "lowerBoundSeconds": round(bound_seconds, 3),
            "lowerBoundCpuSeconds": round(bound_cpu, 3),
            "peakRssMiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    """Run the requested sizes, each in a fresh process, then the in-run baseline."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=None)
    ap.add_argument("--sizes", default="100,1000,5000,10000,20000")
    ap.add_argument("--mix", choices=("diverse", "plain"), default="diverse")
    ap.add_argument("-o", "--output", choices=("json", "table"), default="table")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--_no_classes", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._child:
        print(json.dumps(run_once(a.pods, a.mix, classes=not a._no_classes)))
        return
    sizes = [a.pods] if a.pods else [int(s) for s in a.sizes.split(",")]

    def child(n: int, no_classes: bool = False) -> dict[str, Any]:
        cmd = [sys.executable, __file__, "--_child", "--pods", str(n), "--mix", a.mix]
        out = subprocess.run(cmd + (["--_no_classes"] if no_classes else []), check=True, capture_output=True,
                             text=True)
        return dict(json.loads(out.stdout))

    load = round(os.getloadavg()[0], 2)
    results = [child(n) for n in sizes]
    for r in results:
        r["loadAverage1m"] = load
    report: dict[str, Any] = {"results": results, "loadAverage1m": load}
    if not a.no_baseline:
        n = min(max(sizes), 2000)  # big enough for classes to matter, small enough for the slow path
        base = child(n, no_classes=True)
        ours = next((r for r in results if r["pods"] == n), None) or child(n)
        report["baseline"] = {"pods": n, "description": "same simulator, equivalence classes disabled",
                              "seconds": base["seconds"], "karpySeconds": ours["seconds"],
                              "speedup": round(base["seconds"] / max(ours["seconds"], 1e-9), 2)}
    if a.output == "json":
        print(json.dumps(report if len(results) > 1 or "baseline" in report else results[0], indent=2))
        return
    cols = ("pods", "nodes", "unschedulable", "seconds", "cpuSeconds", "podsPerSecond", "costPerHour",
            "lowerBoundPerHour", "gap", "lowerBoundSeconds", "lowerBoundCpuSeconds", "peakRssMiB")
    print(f"mix: {a.mix}  (load average at start: {load}; seconds and cpuSeconds are the solve alone)")
    print("  ".join(f"{c:>14}" for c in cols))
    for r in results:
        print("  ".join(f"{r[c]!s:>14}" for c in cols))
    if "baseline" in report:
        b = report["baseline"]
        print(f"baseline ({b['description']}, {b['pods']} pods): {b['seconds']} s vs {b['karpySeconds']} s "
              f"-> {b['speedup']}x")


if __name__ == "__main__":
    main()
