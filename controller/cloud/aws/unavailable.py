"""Offerings EC2 recently refused for lack of capacity (ICE): (instance type, zone, capacity type) -> until when.

Karpenter marks an offering unavailable for 3 minutes after an insufficient-capacity error so the next launch tries
other offerings; the instance-type provider reports such offerings as unavailable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_TTL_SECONDS = 180.0


class UnavailableOfferings:
    """A thread-safe TTL cache of offerings that failed with insufficient capacity."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[tuple[str, str, str], tuple[float, str]] = {}
        self._lock = threading.Lock()
        self.generation = 0  # bumps on every change, so caches built on availability know to rebuild

    def mark_unavailable(self, instance_type: str, zone: str, capacity_type: str,
                         ttl_seconds: float = DEFAULT_TTL_SECONDS, reason: str = "") -> None:
        """Refuse this offering for ttl_seconds."""
        with self._lock:
            self._until[(instance_type, zone, capacity_type)] = (self._clock() + ttl_seconds, reason)
            self.generation += 1

    def is_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> bool:
        """Whether the offering is still within its unavailable window."""
        with self._lock:
            entry = self._until.get((instance_type, zone, capacity_type))
            if entry is None:
                return False
            if entry[0] <= self._clock():
                del self._until[(instance_type, zone, capacity_type)]
                self.generation += 1
                return False
            return True
