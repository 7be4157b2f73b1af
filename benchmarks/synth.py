"""Synth time and peak memory for every example environment (two stacks each) in one process (jsii and its
Node.js runtime included).

    python benchmarks/synth.py

Runs the synth in a child process and reports its wall time, the child's peak RSS and the peak RSS of the jsii Node.js
process it starts (getrusage of the descendants), and, as the baseline in the same run, one environment alone.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(__file__), "..")
CHILD = """
import resource, sys, time
sys.path.insert(0, {root!r})
start = time.perf_counter()
from pathlib import Path
from stacks.app import synth
synth({envs!r}, {out!r}, Path({root!r}))
took = time.perf_counter() - start
print(took)
"""


def run(envs: list[str] | None) -> dict[str, object]:
    """Synthesize envs (None = all) in a fresh interpreter; seconds and peak memory."""
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", CHILD.format(root=ROOT, envs=envs, out=out)],
                              capture_output=True, text=True, check=True)
        wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"environments": envs or "all", "seconds": round(wall, 2),
            "synthSeconds": round(float(proc.stdout.strip().splitlines()[-1]), 2),
            "peakRssMiB": round(usage.ru_maxrss / 1024, 1)}


def main() -> None:
    """One environment alone (the baseline), then all of them; the baseline runs first because the children's peak
    RSS that getrusage reports is a running maximum."""
    baseline = run(["dev"])
    everything = run(None)
    print(json.dumps({"all": everything, "baseline_one_environment": baseline}, indent=2))


if __name__ == "__main__":
    main()
