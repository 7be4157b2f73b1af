"""client-go's work-queue semantics and the reconciler loop over it."""

from __future__ import annotations

import threading
import time

import pytest

from controller.kube.errors import (
    ConflictError,
    InvalidError,
    KubeError,
    NotFoundError,
    TooManyRequestsError,
    UnavailableError,
    is_permanent,
    is_temporary,
)
from controller.kube.workqueue import CONFLICT_REREADS, PERMANENT_RETRY, Controller, Result, WorkQueue


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


class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def publish(self, obj: dict, type_: str, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], type_, reason, message))


def _delay_of(q: WorkQueue, key: str) -> float | None:
    """Seconds until key's delayed entry is due (None when it is not delayed)."""
    due = [at for at, _, k in q._delayed if k == key]
    return min(due) - time.monotonic() if due else None


def _controller(error: BaseException) -> tuple[Controller, _Recorder]:
    recorder = _Recorder()

    def reconcile(key: str) -> Result | None:
        raise error

    objects = {"c1": {"metadata": {"name": "c1", "uid": "u1"}}}
    return Controller("nodeclaim.lifecycle", reconcile, recorder=recorder, lookup=objects.get), recorder


def test_a_permanent_error_is_an_event_on_the_object_and_no_hot_loop():
    c, recorder = _controller(InvalidError(422, "Invalid", "spec.requirements: too many"))
    c.process_one("c1")
    assert recorder.events == [("c1", "Warning", "Invalid", "nodeclaim.lifecycle: 422 Invalid: spec.requirements: "
                                                            "too many")]
    assert c.queue._queue == []  # not queued now
    assert _delay_of(c.queue, "c1") == pytest.approx(PERMANENT_RETRY, abs=1)
    forbidden, rec2 = _controller(KubeError(403, "Forbidden", "nodes is forbidden"))
    forbidden.process_one("c1")
    assert [e[2] for e in rec2.events] == ["Forbidden"]


def test_aws_errors_are_sorted_by_their_code():
    class ClientError(Exception):
        def __init__(self, code: str, status: int) -> None:
            super().__init__(code)
            self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}

    assert is_permanent(ClientError("UnauthorizedOperation", 403)) and not is_temporary(
        ClientError("UnauthorizedOperation", 403))
    assert is_temporary(ClientError("RequestLimitExceeded", 503)) and not is_permanent(
        ClientError("RequestLimitExceeded", 503))
    c, recorder = _controller(ClientError("UnauthorizedOperation", 403))
    c.process_one("c1")
    assert [e[2] for e in recorder.events] == ["UnauthorizedOperation"]


def test_temporary_and_unknown_errors_back_off_exponentially_without_an_event():
    for error in (UnavailableError(503, "ServiceUnavailable", "etcd"), RuntimeError("boom")):
        c, recorder = _controller(error)
        c.queue.base_delay = 1.0
        for n in range(3):
            c.process_one("c1")
            assert c.queue.failures("c1") == n + 1
        assert _delay_of(c.queue, "c1") == pytest.approx(1.0, abs=0.1)  # the first retry's delay is the earliest
        assert max(at for at, _, _ in c.queue._delayed) - time.monotonic() == pytest.approx(4.0, abs=0.1)
        assert recorder.events == []


def test_a_conflict_is_read_again_at_once_a_few_times_then_backs_off():
    c, recorder = _controller(ConflictError(409, "Conflict", "the object has been modified"))
    for _ in range(CONFLICT_REREADS):
        c.process_one("c1")
        assert c.queue.get(timeout=0) == "c1"  # queued again immediately
        c.queue.done("c1")
    c.process_one("c1")
    assert c.queue.get(timeout=0) is None  # now it waits its backoff
    assert _delay_of(c.queue, "c1") is not None
    assert recorder.events == []


def test_the_lease_is_released_only_after_the_leaders_workers_have_stopped():
    from controller.main import Runtime, stop_leading

    events: list[str] = []
    started = threading.Event()

    def reconcile(key: str) -> Result | None:
        started.set()
        time.sleep(0.5)  # a pass in progress when the shutdown comes
        events.append("reconcile finished")
        return None

    class Elector:
        def release(self) -> None:
            events.append("lease released")

    rt = Runtime(cluster=None)
    c = Controller("nodeclaim.lifecycle", reconcile, workers=2)
    rt.threads.extend(c.start(rt.lead_stop))
    c.queue.add("c1")
    assert started.wait(2)
    began = time.monotonic()
    assert stop_leading(rt, Elector(), timeout=5) == []
    assert events == ["reconcile finished", "lease released"]
    assert time.monotonic() - began < 2


def test_a_worker_that_will_not_stop_does_not_hold_the_release_past_the_timeout():
    from controller.main import Runtime, stop_leading

    released: list[float] = []
    hang = threading.Event()
    rt = Runtime(cluster=None)
    rt.threads.append(threading.Thread(target=hang.wait, name="interruption", daemon=True))
    rt.threads[0].start()

    class Elector:
        def release(self) -> None:
            released.append(time.monotonic())

    began = time.monotonic()
    try:
        assert stop_leading(rt, Elector(), timeout=0.3) == ["interruption"]
    finally:
        hang.set()
    assert len(released) == 1 and released[0] - began < 1.0


def test_worker_counts_scale_with_cpu_requests_as_karpenters_linear_scale_reconciles() -> None:
    from controller.kube.workqueue import linear_scale_reconciles

    # Karpenter's lifecycle bounds (1000 at 1 core, 5000 at 60 cores), its formula's own examples
    assert linear_scale_reconciles(1000, 1000, 5000) == 1000
    assert linear_scale_reconciles(500, 1000, 5000) == 1000  # below a core: the minimum
    assert linear_scale_reconciles(2000, 1000, 5000) == 1067  # int(4000/59 * 1) + 1000
    assert linear_scale_reconciles(1500, 1000, 5000) == 1067  # cores rounded up
    assert linear_scale_reconciles(60000, 1000, 5000) == 5000
    assert linear_scale_reconciles(200000, 1000, 5000) == 5000  # clamped
