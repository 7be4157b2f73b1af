"""Start-up time of the test world: LocalStack and the Kubernetes control plane, each started N times from the
project's own scripts on free ports and stopped again.

    python benchmarks/startup.py --runs 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    time.sleep(1)


def localstack_once() -> float:
    """Seconds from launch until LocalStack answers its health endpoint."""
    with tempfile.TemporaryDirectory() as run:
        start = time.perf_counter()
        subprocess.run(["bash", str(ROOT / "scripts" / "start-localstack.sh"), run, str(_free_port())], check=True,
                       capture_output=True)
        took = time.perf_counter() - start
        _stop([int(Path(run, "pid").read_text())])
    return took


def kube_once() -> float:
    """Seconds from launch until kube-apiserver is ready and the scheduler and controller-manager are started."""
    with tempfile.TemporaryDirectory() as run:
        start = time.perf_counter()
        subprocess.run(["bash", str(ROOT / "scripts" / "start-kube-control-plane.sh"), run], check=True,
                       capture_output=True)
        took = time.perf_counter() - start
        _stop([int(p) for p in Path(run, "pids").read_text().split()])
    return took


def main() -> None:
    """Start each server --runs times and print the seconds to ready."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    ls = [round(localstack_once(), 2) for _ in range(a.runs)]
    kube = [round(kube_once(), 2) for _ in range(a.runs)]
    print(json.dumps({"localstackSeconds": ls, "kubeControlPlaneSeconds": kube}, indent=2))


if __name__ == "__main__":
    main()
