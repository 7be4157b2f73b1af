"""scripts/try-controller.py stops everything it started, whichever way it is stopped: Ctrl-C (SIGINT) once the
world and the controller run, or SIGTERM while the control plane is still starting; and its kubelet stand-in talks
to the apiserver through its CA (no InsecureRequestWarning)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kubetest import wait_for

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "try-controller.py"


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.split(") ", 1)[1][:1] != "Z"


def _started(run: Path) -> list[int]:
    pids = []
    for f in (run / "kube" / "pids", run / "localstack" / "pid"):
        if f.exists():
            pids += [int(p) for p in f.read_text().split() if p.isdigit()]
    return pids


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[object]:
    """Start the script with its output in a file; whatever it leaves running is killed at teardown."""
    runs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(*args: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
        out = tmp_path / f"try-{len(runs)}.log"
        with open(out, "wb") as log:
            proc = subprocess.Popen([sys.executable, str(SCRIPT), *args], cwd=ROOT, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        m = wait_for("the run dir line", lambda: re.search(r"run dir:\s+(\S+)", out.read_text(errors="replace")),
                     120)
        run = Path(m.group(1))
        runs.append((proc, run))
        return proc, run, out

    yield start
    for proc, run in runs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for pid in _started(run):
            if _alive(pid):
                os.killpg(pid, signal.SIGKILL)


def _check_world_installed() -> None:
    cache = Path.home() / ".cache"
    if not (cache / "kube-control-plane" / "bin" / "kube-apiserver").exists() \
            or not (cache / "karpy" / "localstack-venv").exists():
        pytest.fail("the test world is not installed: run scripts/test.sh")


def test_sigint_once_running_stops_the_world_and_no_tls_warning(launch) -> None:
    _check_world_installed()
    proc, run, out = launch("--demo", "2")
    wait_for("the world and the controller", lambda: "queue:" in out.read_text(errors="replace"), 600)
    wait_for("a node registered by the kubelet stand-in",
             lambda: "registered nodeclaim" in out.read_text(errors="replace"), 300)
    started = _started(run)
    assert len(started) == 5  # etcd, apiserver, scheduler, controller-manager, LocalStack
    proc.send_signal(signal.SIGINT)
    assert proc.wait(180) == 0
    assert [p for p in started if _alive(p)] == []
    text = out.read_text(errors="replace")
    assert "stopped" in text.splitlines()[-1]
    assert "InsecureRequestWarning" not in text


def test_sigterm_while_the_control_plane_starts_stops_what_it_started(launch) -> None:
    _check_world_installed()
    proc, run, _out = launch()
    # the apiserver is up (its pid written) but the start script has not finished
    wait_for("the apiserver's pid", lambda: len(_started(run)) >= 2, 120, interval=0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(180) == 0
    started = _started(run)
    assert len(started) >= 2
    assert [p for p in started if _alive(p)] == []
