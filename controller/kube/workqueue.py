"""client-go's work queue and a reconciler loop over it.

A key is queued at most once, never processed by two workers at once, and a key added while it is being processed is
processed again after done(). Failures back off per key exponentially (base * 2^n, capped); Result.requeue_after
schedules the next pass.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from controller.kube.errors import ConflictError, is_permanent, is_temporary, reason_of
from controller.metrics import controller_context

log = logging.getLogger("karpy.controller")
PERMANENT_RETRY = 300.0  # seconds before a permanent error is tried again (unless the object changes first)
CONFLICT_REREADS = 5  # conflicts in a row re-read at once before they back off


def linear_scale_reconciles(cpu_requests_millis: int, min_workers: int, max_workers: int) -> int:
    """Karpenter's LinearScaleReconciles: min_workers at 1 core of CPU_REQUESTS, max_workers at 60 cores, linear
    between (cores rounded up), clamped."""
    cores = math.ceil(cpu_requests_millis / 1000.0)
    slope = (max_workers - min_workers) / 59.0
    return max(min_workers, min(max_workers, int(slope * (cores - 1)) + min_workers))


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for next: nothing, or another pass after requeue_after seconds."""

    requeue_after: float | None = None


class WorkQueue:
    """A deduplicating, delaying, rate-limited queue of keys."""

    def __init__(self, name: str, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self.name = name
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._cond = threading.Condition()
        self._queue: list[str] = []
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()  # added while processing
        self._delayed: list[tuple[float, int, str]] = []
        self._seq = 0
        self._failures: dict[str, int] = {}
        self._shutdown = False

    def add(self, key: str) -> None:
        """Queue key (no-op if queued; re-queued after done() if being processed)."""
        with self._cond:
            if self._shutdown:
                return
            if key in self._processing:
                self._dirty.add(key)
                return
            if key not in self._queued:
                self._queued.add(key)
                self._queue.append(key)
                self._cond.notify()

    def add_after(self, key: str, delay: float) -> None:
        """Queue key after delay seconds."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            self._seq += 1
            heapq.heappush(self._delayed, (time.monotonic() + delay, self._seq, key))
            self._cond.notify()

    def _backoff(self, failures: int) -> float:
        return float(min(self.base_delay * (2 ** min(failures, 40)), self.max_delay))

    def next_backoff(self, key: str) -> float:
        """The delay the next add_rate_limited(key) waits: base * 2^failures, capped at max_delay."""
        with self._cond:
            return self._backoff(self._failures.get(key, 0))

    def add_rate_limited(self, key: str) -> None:
        """Queue key after its backoff: base * 2^failures, capped at max_delay."""
        with self._cond:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        self.add_after(key, self._backoff(n))

    def failures(self, key: str) -> int:
        """How many times in a row key has been rate-limited."""
        with self._cond:
            return self._failures.get(key, 0)

    def add_now(self, key: str) -> None:
        """Queue key at once, counting it as a failure (so a caller can back off after a few)."""
        with self._cond:
            self._failures[key] = self._failures.get(key, 0) + 1
        self.add(key)

    def forget(self, key: str) -> None:
        """Reset key's backoff."""
        with self._cond:
            self._failures.pop(key, None)

    def _promote(self) -> float | None:
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            if key in self._processing:
                self._dirty.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._queue.append(key)
        return self._delayed[0][0] - now if self._delayed else None

    def get(self, timeout: float | None = None) -> str | None:
        """The next key to process (None on timeout or shutdown); call done(key) after."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._shutdown:
                    return None
                next_delay = self._promote()
                if self._queue:
                    key = self._queue.pop(0)
                    self._queued.discard(key)
                    self._processing.add(key)
                    return key
                waits = [w for w in (next_delay, None if deadline is None else deadline - time.monotonic())
                         if w is not None]
                wait = min(waits) if waits else None
                if wait is not None and wait <= 0 and deadline is not None and time.monotonic() >= deadline:
                    return None
                self._cond.wait(wait if wait is None or wait > 0 else 0.001)

    def done(self, key: str) -> None:
        """Processing of key finished; re-queue it if it was added meanwhile."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                if key not in self._queued:
                    self._queued.add(key)
                    self._queue.append(key)
                    self._cond.notify()

    def shutdown(self) -> None:
        """Wake every waiting worker; get() returns None from now on."""
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._delayed)


class EventPublisher(Protocol):
    """The part of events.Recorder a Controller uses."""

    def publish(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Publish one Event about obj."""


class Controller:
    """A named reconciler run by worker threads over a WorkQueue; never a hot loop, never a dead thread.

    Errors follow Karpenter's habits: a conflict (someone else wrote first) is re-read at once, a few times before it
    backs off; a temporary error (throttling, 5xx, no connection) and an unknown one back off exponentially; a
    permanent one (invalid, forbidden) publishes a Warning Event on the object, with the error's reason, and is
    retried only after PERMANENT_RETRY (or when the object changes and its informer queues it again)."""

    def __init__(self, name: str, reconcile: Callable[[str], Result | None], workers: int = 1,
                 queue: WorkQueue | None = None, recorder: EventPublisher | None = None,
                 lookup: Callable[[str], dict[str, Any] | None] | None = None) -> None:
        self.name = name
        self.reconcile = reconcile
        self.workers = workers
        self.queue = queue or WorkQueue(name)
        self.recorder = recorder
        self.lookup = lookup  # key -> the object, for the Event of a permanent error

    def process_one(self, key: str) -> None:
        """Reconcile key once and queue what the outcome asks for."""
        try:
            with controller_context(self.name):  # the controller label of the cloud calls it makes
                result = self.reconcile(key)
        except ConflictError:
            # someone else wrote first: read again now, unless it keeps happening
            if self.queue.failures(key) < CONFLICT_REREADS:
                self.queue.add_now(key)
            else:
                self.queue.add_rate_limited(key)
        except Exception as e:
            if is_permanent(e):
                log.error("reconciler error", extra={"controller": self.name, "key": key, "error": str(e)[:300],
                                                     "permanent": True})
                self._publish(key, e)
                self.queue.add_after(key, PERMANENT_RETRY)
                return
            temporary = is_temporary(e)
            log.log(logging.INFO if temporary else logging.ERROR, "reconciler error", exc_info=not temporary,
                    extra={"controller": self.name, "key": key, "error": str(e)[:300]})
            self.queue.add_rate_limited(key)
        else:
            self.queue.forget(key)
            if result is not None and result.requeue_after is not None:
                self.queue.add_after(key, result.requeue_after)

    def _publish(self, key: str, e: BaseException) -> None:
        """A Warning Event on the object the permanent error is about (best effort)."""
        if self.recorder is None or self.lookup is None:
            return
        try:
            obj = self.lookup(key)
        except Exception:  # an Event is never worth a second failure
            return
        if obj is not None:
            self.recorder.publish(obj, "Warning", reason_of(e), f"{self.name}: {str(e)[:400]}")

    def _work(self, stop: threading.Event) -> None:
        while not stop.is_set():
            key = self.queue.get(timeout=0.5)
            if key is None:
                continue
            try:
                self.process_one(key)
            finally:
                self.queue.done(key)

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        """Start the workers; they end when stop is set."""
        threads = []
        for i in range(self.workers):
            t = threading.Thread(target=self._work, args=(stop,), name=f"{self.name}-{i}", daemon=True)
            t.start()
            threads.append(t)
        return threads
