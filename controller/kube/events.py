"""Kubernetes Events with Karpenter's reasons, published from a background thread: publish() never blocks or raises,
and repeats of the same (object, reason, message) within the dedupe window are dropped, as Karpenter's recorder does."""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from controller.kube import resources as R
from controller.kube.client import KubeClient

log = logging.getLogger("karpy.events")
MAX_MESSAGE = 1024
DEDUPE_SECONDS = 120.0
QUEUE_SIZE = 10000


class Recorder:
    """Publishes core/v1 Events as the `karpenter` component."""

    def __init__(self, client: KubeClient | None, component: str = "karpenter", dedupe_seconds: float = DEDUPE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.component = component
        self.dedupe_seconds = dedupe_seconds
        self.clock = clock
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(QUEUE_SIZE)
        self._seen: dict[tuple[str, ...], float] = {}  # dedupe key -> until when repeats are dropped
        self._lock = threading.Lock()
        self.dropped = 0
        self.published: list[tuple[str, str, str]] = []  # (object key, reason, message), the last few, for tests

    def publish(self, obj: dict[str, Any], type_: str, reason: str, message: str,
                dedupe_values: tuple[str, ...] | None = None, dedupe_seconds: float | None = None) -> None:
        """Queue an Event about obj, dropped when one with the same object, reason and dedupe values (the message,
        unless the event names its own, as Karpenter's events do) was published within its dedupe window."""
        meta = obj.get("metadata") or {}
        message = message[:MAX_MESSAGE]
        key = (str(meta.get("uid") or meta.get("name")), reason, *(dedupe_values if dedupe_values is not None
                                                                    else (message,)))
        now = self.clock()
        with self._lock:
            until = self._seen.get(key)
            if until is not None and now < until:
                return
            self._seen[key] = now + (self.dedupe_seconds if dedupe_seconds is None else dedupe_seconds)
            if len(self._seen) > 50000:
                self._seen = {k: v for k, v in self._seen.items() if v > now}
            self.published.append((f"{meta.get('namespace', '')}/{meta.get('name')}", reason, message))
            del self.published[:-200]
        if self.client is None:
            return
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace = meta.get("namespace") or "default"
        event = {"apiVersion": "v1", "kind": "Event",
                 # named as client-go names events (the object's name, the time in hex ns): no entropy to read
                 "metadata": {"name": f"{meta.get('name', 'object')}.{time.time_ns():x}",
                              "namespace": namespace},
                 "involvedObject": {k: v for k, v in {
                     "apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta.get("name"),
                     "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                     "resourceVersion": meta.get("resourceVersion")}.items() if v},
                 "reason": reason, "message": message, "type": type_, "count": 1,
                 "firstTimestamp": stamp, "lastTimestamp": stamp, "source": {"component": self.component},
                 "reportingComponent": self.component}
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1

    def _run(self, stop: threading.Event) -> None:
        assert self.client is not None
        while not stop.is_set() or not self._queue.empty():
            try:
                event = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self.client.create(R.EVENTS, event, event["metadata"]["namespace"])
            except Exception as e:  # an event is best effort: never let it hurt the caller
                log.debug("publishing event failed", extra={"reason": event["reason"], "error": str(e)[:200]})

    def start(self, stop: threading.Event) -> threading.Thread:
        """Publish queued events in a daemon thread until stop (then drain what is queued)."""
        t = threading.Thread(target=self._run, args=(stop,), name="events", daemon=True)
        if self.client is not None:
            t.start()
        return t
