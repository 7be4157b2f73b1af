"""client-go's work-queue semantics and the reconciler loop over it."""

from __future__ import annotations

import threading
import time

from controller.kube.errors import ConflictError, NotFoundError, TooManyRequestsError, is_temporary
from controller.kube.workqueue import Controller, Result, WorkQueue


def test_a_queued_key_is_queued_once():
    q = WorkQueue("t")
    for _ in range(3):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    assert q.get(0) == "a"
    assert q.get(0) == "b"
    assert q.get(0.01) is None


def test_a_key_added_while_processing_is_processed_again_after_done():
    q = WorkQueue("t")
    q.add("a")
    assert q.get(0) == "a"
    q.add("a")  # while being processed: not handed to a second worker
    assert q.get(0.01) is None
    q.done("a")
    assert q.get(0) == "a"


def test_add_after_orders_by_time():
    q = WorkQueue("t")
    q.add_after("late", 0.2)
    q.add_after("early", 0.05)
    assert q.get(1) == "early"
    assert q.get(1) == "late"


def test_rate_limit_grows_exponentially_and_is_capped_and_forgotten():
    q = WorkQueue("t", base_delay=0.01, max_delay=0.04)
    delays = []
    for _ in range(5):
        start = time.monotonic()
        q.add_rate_limited("k")
        assert q.get(1) == "k"
        delays.append(time.monotonic() - start)
        q.done("k")
    assert q.failures("k") == 5
    assert delays[1] >= 0.019 and delays[2] >= 0.039  # 0.01, 0.02, 0.04 ...
    assert max(delays) < 0.5  # capped at max_delay (generous bound for a loaded machine)
    q.forget("k")
    assert q.failures("k") == 0


def test_shutdown_wakes_waiters():
    q = WorkQueue("t")
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(q.get()))
    t.start()
    q.shutdown()
    t.join(2)
    assert got == [None]


def test_controller_requeues_errors_rate_limited_and_results_after_their_delay():
    calls: list[str] = []
    outcomes = iter([ConflictError(409, "Conflict", "stale"), RuntimeError("boom"), Result(requeue_after=0.05), None])

    def reconcile(key: str) -> Result | None:
        calls.append(key)
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    c = Controller("t", reconcile, queue=WorkQueue("t", base_delay=0.01))
    stop = threading.Event()
    threads = c.start(stop)
    c.queue.add("x")
    deadline = time.monotonic() + 5
    while len(calls) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join(2)
    assert calls == ["x"] * 4  # conflict retried, error retried, requeue_after honoured, then done
    assert c.queue.failures("x") == 0  # a success forgets the failures


def test_error_taxonomy():
    assert is_temporary(TooManyRequestsError(429))
    assert not is_temporary(NotFoundError(404))
    assert not is_temporary(ConflictError(409))
    assert is_temporary(ConnectionError())
