"""A very large legal manifest file: N pods (default 20,000) written one document each, as `kubectl get pods -o yaml`
users keep them, then read and simulated the way `karpy simulate -f` does. Reading is timed against PyYAML's own
libyaml loader (CSafeLoader with its constructor) in the same run, so the ratio holds on a loaded machine.

    python benchmarks/large_file.py --pods 20000

Times are wall and CPU seconds: CPU is the figure to compare on a machine others share.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
NODEPOOL = """apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand, spot]}
"""


def write_file(path: Path, pods: int, apps: int = 50) -> None:
    """NodePool + `pods` Pod documents of `apps` applications (requests, namespace and labels per application)."""
    parts = [NODEPOOL]
    for i in range(pods):
        app = i % apps  # pods of one app share namespace, requests and constraints, as replicas do
        parts.append(f"""---
apiVersion: v1
kind: Pod
metadata:
  name: app-{app}-{i}
  namespace: team-{app % 7}
  labels: {{app: app-{app}, tier: web}}
spec:
  containers:
  - name: main
    image: registry.example.com/app-{app}:1.{i % 13}
    resources:
      requests: {{cpu: {100 + (app % 8) * 250}m, memory: {128 * (1 + app % 6)}Mi}}
      limits: {{memory: {128 * (1 + app % 6)}Mi}}
    env:
    - {{name: POD_INDEX, value: "{i}"}}
  tolerations:
  - {{key: dedicated, operator: Equal, value: web, effect: NoSchedule}}
""")
    path.write_text("".join(parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20_000)
    parser.add_argument("--apps", type=int, default=50, help="distinct applications (pod classes)")
    parser.add_argument("--catalog", default="aws-us-east-1")
    args = parser.parse_args()

    from controller.api.documents import load_documents
    from controller.simulate.run import simulate_documents

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pods.yaml"
        write_file(path, args.pods, args.apps)
        size = path.stat().st_size
        text = path.read_text()
        baseline = _timed(lambda: list(yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))))
        load = _timed(lambda: load_documents([str(path)]))
        docs = load_documents([str(path)])
        holder: dict[str, Any] = {}
        simulate = _timed(lambda: holder.setdefault("result", simulate_documents(docs, catalog=args.catalog)))
        result = holder["result"]
        # the whole command as a user runs it, in its own process: wall time and the CPU it used
        started = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([sys.executable, "-m", "cli", "simulate", "-f", str(path), "--catalog", args.catalog,
                               "-o", "json"], capture_output=True, cwd=ROOT, check=False)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cli_wall = time.perf_counter() - started
        cli_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps({
        "pods": args.pods, "apps": args.apps, "file_mib": round(size / 2**20, 1),
        "pyyaml_csafeloader": baseline, "karpy_load": load,
        "load_cpu_ratio_vs_pyyaml": round(load["cpu_s"] / baseline["cpu_s"], 2),
        "simulate_documents": simulate,
        "cli_simulate": {"exit": proc.returncode, "wall_s": round(cli_wall, 2), "cpu_s": round(cli_cpu, 2)},
        "nodeclaims": len(result.plan.node_claims), "unschedulable": len(result.plan.unschedulable),
        "load_average": os.getloadavg()[0],
    }, indent=2))


def _timed(fn: Callable[[], Any]) -> dict[str, float]:
    """Wall and CPU seconds of one call (CPU is what holds on a machine others share)."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return {"wall_s": round(time.perf_counter() - wall, 2), "cpu_s": round(time.process_time() - cpu, 2)}


if __name__ == "__main__":
    main()
