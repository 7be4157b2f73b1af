"""What the end-to-end tests need around `karpy controller`: the process itself, a kubelet for the instances it
launches, and helpers to wait on the real control plane.

The test control plane has no kubelet. `KubeletSim` plays one for every launched NodeClaim the way a node's bootstrap
would: it registers a Node with the instance's providerID, the NodeClaim's labels and the `karpenter.sh/unregistered`
taint, reports capacity and Ready, and renews its Lease; the real kube-scheduler then binds pods to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client

from tests.integration.kubelet import FakeKubelet
from tests.kubetest import wait_for

__all__ = ["ControllerProcess", "KubeletSim", "wait_for"]

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


class ControllerProcess:
    """`karpy controller` as a child process, its JSON log lines kept in a file."""

    def __init__(self, env: dict[str, str], log_path: Path, args: tuple[str, ...] = ()) -> None:
        self.env = env
        self.log_path = log_path
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ControllerProcess:
        full = {k: v for k, v in os.environ.items() if not k.startswith(("KARPY_", "CLUSTER_", "INTERRUPTION_"))}
        full.update(self.env)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        cmd = os.environ.get("KARPY_E2E_COMMAND")
        argv = cmd.split() if cmd else [sys.executable, "-c", "import cli; cli.main()", "controller", *self.args]
        self.proc = subprocess.Popen(argv,
                                     cwd=ROOT, env=full, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait; returns the exit code (SIGKILL after timeout, which fails the caller's check)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()
        return int(self.proc.returncode)

    def kill(self) -> None:
        """SIGKILL: a crash."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def logs(self) -> list[dict[str, Any]]:
        """The JSON log lines (anything else is skipped)."""
        out = []
        for line in self.text().splitlines():
            with contextlib.suppress(ValueError):
                obj = json.loads(line)
                if isinstance(obj, dict):
                    out.append(obj)
        return out

    def messages(self) -> list[str]:
        return [str(entry.get("message")) for entry in self.logs()]

    def wait_log(self, message: str, timeout: float = 60.0) -> dict[str, Any]:
        return wait_for(f"log line {message!r}", lambda: next(
            (e for e in self.logs() if e.get("message") == message), None), timeout)


class KubeletSim:
    """Registers a Node for every launched NodeClaim and keeps it Ready (see the module docstring)."""

    def __init__(self, api: Any, register: bool = True,
                 labels_for: Callable[[dict[str, Any]], dict[str, str] | None] | None = None) -> None:
        """`labels_for(claim)`: the labels the node's bootstrap gives kubelet (None: not known yet, retried); by
        default the NodeClaim's labels."""
        self.api = api
        self.labels_for = labels_for
        self.custom = client.CustomObjectsApi(api)
        self.kubelet = FakeKubelet(api)
        self.registered: dict[str, str] = {}  # providerID -> node name
        self.register_enabled = register
        self.hold: set[str] = set()  # providerIDs not to register (an instance that never joins)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet-sim", daemon=True)
        self.errors: list[str] = []

    def start(self) -> KubeletSim:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        beat = 0.0
        while not self._stop.wait(0.3):
            try:
                self._pass()
                if time.monotonic() - beat > 10:
                    beat = time.monotonic()
                    for name in list(self.kubelet.nodes):
                        with contextlib.suppress(client.ApiException):
                            self.kubelet.heartbeat(name)
            except Exception as e:  # keep playing kubelet; the test reads errors if it cares
                self.errors.append(str(e)[:300])

    def _pass(self) -> None:
        self._run_pods()
        if not self.register_enabled:
            return
        listed: Any = self.custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")
        claims: list[dict[str, Any]] = listed["items"]
        for claim in claims:
            status = claim.get("status") or {}
            pid = status.get("providerID")
            if not pid or pid in self.registered or pid in self.hold or claim["metadata"].get("deletionTimestamp"):
                continue
            name = pid.rsplit("/", 1)[-1]
            labels = dict(claim["metadata"].get("labels") or {}) if self.labels_for is None else \
                self.labels_for(claim)
            if labels is None:
                continue
            taints = [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]
            taints += [dict(t) for t in (claim.get("spec") or {}).get("startupTaints") or []]
            capacity = dict(status.get("capacity") or {"cpu": "2", "memory": "4Gi", "pods": "110"})
            allocatable = dict(status.get("allocatable") or capacity)
            try:
                self.kubelet.register(name, pid, labels=labels, capacity=capacity, allocatable=allocatable,
                                      taints=taints)
            except client.ApiException as e:
                if e.status != 409:
                    raise
            self.registered[pid] = name

    def _run_pods(self) -> None:
        """Report pods bound to our nodes as Running and Ready, as their kubelet would (PDBs count only those)."""
        mine = set(self.registered.values())
        if not mine:
            return
        for pod in self.kubelet.core.list_pod_for_all_namespaces(field_selector="status.phase=Pending").items:
            if str(pod.spec.node_name) in mine and not pod.metadata.deletion_timestamp:
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                ready = [{"type": t, "status": "True", "lastTransitionTime": now}
                         for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")]
                with contextlib.suppress(client.ApiException):
                    self.kubelet.core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {
                        "status": {"phase": "Running", "conditions": ready, "startTime": now}})
