"""Karpenter's provisioning batcher: a window that opens on the first trigger, stays open while triggers keep coming
within the idle duration, and closes at the max duration at the latest."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Batcher:
    """Coalesces triggers (a provisionable pod appeared, a node went away) into one scheduling pass."""

    def __init__(self, idle: float = 1.0, maximum: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle = idle
        self.maximum = maximum
        self.clock = clock
        self._cond = threading.Condition()
        self._first: float | None = None
        self._last = 0.0

    def trigger(self) -> None:
        """Open the window, or extend it."""
        with self._cond:
            now = self.clock()
            if self._first is None:
                self._first = now
            self._last = now
            self._cond.notify_all()

    def pending(self) -> bool:
        """Whether a window is open."""
        with self._cond:
            return self._first is not None

    def wait(self, stop: threading.Event, poll: float = 0.5) -> bool:
        """Block until a window opens and closes (idle or max reached); False when stop was set first."""
        with self._cond:
            while self._first is None:
                if stop.is_set():
                    return False
                self._cond.wait(poll)
            while not stop.is_set():
                now = self.clock()
                idle_end = self._last + self.idle
                max_end = self._first + self.maximum
                end = min(idle_end, max_end)
                if now >= end:
                    break
                self._cond.wait(min(end - now, poll))
            self._first = None
            return not stop.is_set()
