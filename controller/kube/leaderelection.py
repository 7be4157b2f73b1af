"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's timings and semantics: acquire when the Lease
is free or its holder has not renewed within the lease duration (judged by local observation, not the holder's clock),
renew every retry period, step down when renewal fails for the renew deadline, release on shutdown."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import ConflictError, KubeError, NotFoundError

log = logging.getLogger("karpy.leaderelection")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """One candidate for the Lease namespace/name."""

    def __init__(self, client: KubeClient, name: str, namespace: str, identity: str, lease_duration: float = 15,
                 renew_deadline: float = 10, retry_period: float = 2) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._leader = threading.Event()
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0

    def is_leader(self) -> bool:
        """Whether this candidate holds the Lease now."""
        return self._leader.is_set()

    def _spec(self, lease: dict[str, Any] | None, transitions: int) -> dict[str, Any]:
        spec = dict((lease or {}).get("spec") or {})
        now = _now()
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = transitions
        spec.update({"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_duration),
                     "renewTime": now})
        return spec

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this candidate holds the Lease afterwards."""
        try:
            lease = self.client.get(R.LEASES, self.name, self.namespace)
        except NotFoundError:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace}, "spec": self._spec(None, 0)}
            try:
                self.client.create(R.LEASES, body, self.namespace)
                return True
            except KubeError:
                return False
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        observed = (holder, str(spec.get("renewTime") or ""))
        if observed != self._observed:
            self._observed, self._observed_at = observed, time.monotonic()
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        expired = time.monotonic() > self._observed_at + duration
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (1 if holder != self.identity else 0)
        lease["spec"] = self._spec(lease, transitions)
        try:
            self.client.update(R.LEASES, lease)
            return True
        except ConflictError:
            return False
        except KubeError as e:
            log.info("lease update failed", extra={"error": str(e)[:200]})
            return False

    def release(self) -> None:
        """Give the Lease up at once: holder cleared, so a standby need not wait for it to expire."""
        try:
            lease = self.client.get(R.LEASES, self.name, self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"].update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": _now()})
            self.client.update(R.LEASES, lease)
            log.info("released the leader lease", extra={"lease": f"{self.namespace}/{self.name}"})
        except KubeError as e:
            log.warning("releasing the leader lease failed", extra={"error": str(e)[:200]})

    def run(self, stop: threading.Event, on_started: Callable[[], None], on_stopped: Callable[[], None],
            release: bool = True) -> None:
        """Campaign until stop; lead while holding the Lease; release it when stopping as leader (or, with
        release=False, leave that to the caller, who first waits for the leader's work to stop: a release before
        then lets a standby lead while this process still writes)."""
        log.info("attempting to acquire leader lease", extra={"lease": f"{self.namespace}/{self.name}"})
        while not stop.is_set():
            if self.try_acquire_or_renew():
                break
            stop.wait(self.retry_period)
        if stop.is_set():
            return
        log.info("successfully acquired lease", extra={"lease": f"{self.namespace}/{self.name}"})
        self._leader.set()
        on_started()
        last_renew = time.monotonic()
        while not stop.wait(self.retry_period):
            if self.try_acquire_or_renew():
                last_renew = time.monotonic()
            elif time.monotonic() - last_renew > self.renew_deadline:
                log.error("failed to renew lease", extra={"lease": f"{self.namespace}/{self.name}"})
                self._leader.clear()
                on_stopped()
                return
        self._leader.clear()
        on_stopped()
        if release:
            self.release()
