"""Offerings EC2 recently refused for lack of capacity (ICE): (instance type, zone, capacity type) -> reason.

Karpenter marks an offering unavailable for 3 minutes after an insufficient-capacity error so the next launch tries
other offerings; the instance-type provider reports such offerings as unavailable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cachetools import TTLCache

DEFAULT_TTL_SECONDS = 180.0
# far more offerings than a region has (about 800 types x 6 zones x 3 capacity types): never evicts a live entry
MAX_ENTRIES = 100_000


class UnavailableOfferings:
    """A thread-safe TTL cache of offerings that failed with insufficient capacity."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, ttl_seconds: float = DEFAULT_TTL_SECONDS) -> None:
        self._entries: TTLCache[tuple[str, str, str], str] = TTLCache(MAX_ENTRIES, ttl_seconds, timer=clock)
        self._lock = threading.Lock()
        self._changes = 0

    @property
    def generation(self) -> int:
        """A number that changes whenever the set of unavailable offerings does (a mark, or an entry expiring), so
        caches built on availability know to rebuild."""
        with self._lock:
            if self._entries.expire():
                self._changes += 1
            return self._changes

    def mark_unavailable(self, instance_type: str, zone: str, capacity_type: str, reason: str = "") -> None:
        """Refuse this offering for the cache's lifetime (3 minutes), counted from now."""
        with self._lock:
            self._entries[(instance_type, zone, capacity_type)] = reason
            self._changes += 1

    def is_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> bool:
        """Whether the offering is still within its unavailable window."""
        with self._lock:
            return (instance_type, zone, capacity_type) in self._entries
