"""What capacity reservations cost the scheduler: one NodePool of Karpenter's 400 benchmark instance types, N plain
pods (requests drawn as benchmarks/scheduling.py draws them), solved by the provisioner's strict mode without
reservations and with R reservations (of `count` free instances each, on the R cheapest types that hold a pod, one
zone), in the same run.

    python benchmarks/reserved.py --pods 2000 --reservations 20 --count 10

Prints the solve's seconds and CPU seconds for both, their ratio, the NodeClaims launched into reservations (never
more than R x count) and the pods deferred to a later pass.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from controller.api import labels as L
from controller.catalog.synthetic import benchmark_instance_types
from controller.catalog.types import InstanceType, Offering
from controller.scheduling.pod import Pod, pod_from_dict
from controller.scheduling.requirements import Requirements
from controller.scheduling.reservations import STRICT
from controller.scheduling.scheduler import Scheduler
from controller.scheduling.types import SchedNodePool

CPUS = (100, 250, 500, 1000, 1500)
MEMS = (100, 256, 512, 1024, 2048, 4096)


def pods(n: int, seed: int = 7) -> list[Pod]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        req = {"cpu": f"{rnd.choice(CPUS)}m", "memory": f"{rnd.choice(MEMS)}Mi"}
        out.append(pod_from_dict({"metadata": {"name": f"p{i}", "namespace": "default"},
                                  "spec": {"containers": [{"name": "c", "resources": {"requests": req}}]}}))
    return out


def with_reservations(types: list[InstanceType], reservations: int, count: int) -> list[InstanceType]:
    chosen = {it.name for it in sorted(types, key=lambda it: it.cheapest_price())[:reservations]}
    out = []
    for it in types:
        if it.name in chosen:
            od = min(o.price for o in it.offerings if o.capacity_type == L.CAPACITY_TYPE_ON_DEMAND)
            zone = sorted({o.zone for o in it.offerings})[0]
            it = dataclasses.replace(it, offerings=[*it.offerings, Offering(
                zone, L.CAPACITY_TYPE_RESERVED, od / 10_000_000, reservation_id=f"cr-{it.name}",
                reservation_capacity=count, reservation_type="default")])
        out.append(it)
    return out


def solve(types: list[InstanceType], workload: list[Pod]) -> dict[str, float]:
    pool = SchedNodePool("default", 0, Requirements(), [], [], {}, None, {}, types)
    start, cpu = time.perf_counter(), time.process_time()
    plan = Scheduler([pool], reserved_mode=STRICT).solve(workload)
    return {"seconds": round(time.perf_counter() - start, 3), "cpuSeconds": round(time.process_time() - cpu, 3),
            "nodeclaims": len(plan.node_claims),
            "reservedNodeclaims": sum(c.capacity_type == L.CAPACITY_TYPE_RESERVED for c in plan.node_claims),
            "deferred": len(plan.deferred), "unschedulable": len(plan.unschedulable)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--reservations", type=int, default=20)
    ap.add_argument("--count", type=int, default=10)
    args = ap.parse_args()
    types = benchmark_instance_types(400)
    workload = pods(args.pods)
    plain = solve(types, workload)
    reserved = solve(with_reservations(types, args.reservations, args.count), workload)
    print(json.dumps({"pods": args.pods, "reservations": args.reservations, "count": args.count,
                      "without": plain, "with": reserved,
                      "cpuRatio": round(reserved["cpuSeconds"] / max(plain["cpuSeconds"], 1e-9), 2),
                      "loadavg1m": round(os.getloadavg()[0], 2)}, indent=1))


if __name__ == "__main__":
    main()
