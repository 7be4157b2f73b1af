"""The interruption queue consumer: long-polls SQS, parses each message, hands typed events to a handler, deletes.

Every message is dealt with on its own: a bad one (not JSON, foreign or unknown event, unparsable for any reason) is
logged, counted and deleted; a handler that raises leaves only its own message on the queue, so SQS redelivers it
after the visibility timeout; a failed batch delete falls back to deleting message by message. Nothing one message
does costs the rest of its batch.

Counts use Karpenter's message types (a bounded set): received per type, deleted, and the time a handled message
spent on the queue; into controller.metrics when that module is there, and always into `metrics` here.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from controller import metrics as M
from controller.cloud.aws.messages import (
    STOPPING_STATES,
    CapacityReservationInterruption,
    Event,
    MessageError,
    RebalanceRecommendation,
    ScheduledChange,
    SpotInterruption,
    StateChange,
    parse_message,
)

log = logging.getLogger("karpy.interruption")

RECEIVED = "karpenter_interruption_received_messages_total"
DELETED = "karpenter_interruption_deleted_messages_total"
FAILED = "karpy_interruption_handler_errors_total"
DELETE_FAILED = "karpy_interruption_delete_errors_total"  # handled, but SQS refused the delete: it comes back

# Karpenter's message kinds (the message_type label), plus "unknown" for messages that are no interruption event
SPOT_INTERRUPTED = "spot_interrupted"
REBALANCE_RECOMMENDATION = "rebalance_recommendation"
SCHEDULED_CHANGE = "scheduled_change"
INSTANCE_STOPPED = "instance_stopped"
INSTANCE_TERMINATED = "instance_terminated"
CAPACITY_RESERVATION_INTERRUPTED = "capacity_reservation_interrupted"
NO_OP = "no_op"
UNKNOWN = "unknown"
MESSAGE_TYPES = (SPOT_INTERRUPTED, REBALANCE_RECOMMENDATION, SCHEDULED_CHANGE, INSTANCE_STOPPED, INSTANCE_TERMINATED,
                 CAPACITY_RESERVATION_INTERRUPTED, NO_OP, UNKNOWN)


def message_type(event: Event | None) -> str:
    """Karpenter's kind of a typed event (None: not an interruption event); always one of MESSAGE_TYPES."""
    if event is None:
        return UNKNOWN
    if isinstance(event, SpotInterruption):
        return SPOT_INTERRUPTED
    if isinstance(event, RebalanceRecommendation):
        return REBALANCE_RECOMMENDATION
    if isinstance(event, ScheduledChange):
        return SCHEDULED_CHANGE
    if isinstance(event, CapacityReservationInterruption):
        return CAPACITY_RESERVATION_INTERRUPTED
    if isinstance(event, StateChange):
        state = event.state.lower()
        if state not in STOPPING_STATES:
            return NO_OP  # pending, running: nothing Karpenter acts on
        return INSTANCE_STOPPED if state in ("stopping", "stopped") else INSTANCE_TERMINATED
    return NO_OP


class InterruptionQueue:
    """Consumes Karpenter's interruption queue."""

    def __init__(self, sqs: Any, queue_url: str, handler: Callable[[Event], None], wait_seconds: int = 20,
                 visibility_timeout: int | None = None, clock: Callable[[], float] = time.time) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.handler = handler
        self.wait_seconds = wait_seconds
        self.visibility_timeout = visibility_timeout
        self.clock = clock
        # metric name -> {message type -> count}; the label is the message type, as Karpenter's metrics are
        self.metrics: dict[str, Counter[str]] = {RECEIVED: Counter(), DELETED: Counter(), FAILED: Counter(),
                                                 DELETE_FAILED: Counter()}

    def poll_once(self, proceed: Callable[[], bool] | None = None) -> int:
        """Receive up to 10 messages, handle them, delete the handled and the malformed; returns messages received.

        `proceed` is asked after the receive: when it says no (no longer the leader, shutting down) nothing is
        handled or deleted, and the messages come back after their visibility timeout."""
        kwargs: dict[str, Any] = {"QueueUrl": self.queue_url, "MaxNumberOfMessages": 10,
                                  "WaitTimeSeconds": self.wait_seconds, "AttributeNames": ["SentTimestamp"]}
        if self.visibility_timeout is not None:
            kwargs["VisibilityTimeout"] = self.visibility_timeout
        messages = self.sqs.receive_message(**kwargs).get("Messages", [])
        if not messages or (proceed is not None and not proceed()):
            return len(messages)
        done: list[tuple[str, dict[str, Any]]] = []
        for m in messages:
            kind = self._handle(m)
            if kind is not None:
                done.append((kind, m))
        self._delete(done)
        return len(messages)

    def _handle(self, m: dict[str, Any]) -> str | None:
        """The message's type when it is to be deleted (handled, or bad); None when it stays for redelivery."""
        try:
            event = parse_message(m.get("Body", ""))
        except Exception as e:  # MessageError, or anything a malformed body provokes: never the batch's problem
            reason = str(e) if isinstance(e, MessageError) else f"{type(e).__name__}: {e}"
            log.warning("dropping interruption message", extra={"controller": "interruption",
                                                                "message-id": m.get("MessageId"),
                                                                "error": reason[:300]})
            self.metrics[RECEIVED][UNKNOWN] += 1
            M.INTERRUPTION_RECEIVED.labels(message_type=UNKNOWN).inc()
            return UNKNOWN
        kind = message_type(event)
        self.metrics[RECEIVED][kind] += 1
        M.INTERRUPTION_RECEIVED.labels(message_type=kind).inc()
        try:
            self.handler(event)
        except Exception as e:
            log.error("handling interruption message failed; it stays for redelivery", extra={
                "controller": "interruption", "messageKind": kind, "message-id": m.get("MessageId"),
                "instance-ids": ",".join(event.instance_ids)[:300], "error": str(e)[:300]}, exc_info=True)
            self.metrics[FAILED][kind] += 1
            return None
        sent = (m.get("Attributes") or {}).get("SentTimestamp")
        if sent:
            with contextlib.suppress(ValueError):
                M.INTERRUPTION_MESSAGE_QUEUE_DURATION.observe(
                    max(0.0, self.clock() - int(sent) / 1000.0))
        return kind

    def _delete(self, done: list[tuple[str, dict[str, Any]]]) -> None:
        """Delete in batches of 10; a batch call that fails is retried message by message."""
        done = [(k, m) for k, m in done if m.get("ReceiptHandle")]
        for start in range(0, len(done), 10):
            batch = done[start:start + 10]
            try:
                resp = self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, (_, m) in enumerate(batch)])
                failed = {f["Id"] for f in resp.get("Failed", [])}
                for f in resp.get("Failed", []):
                    log.warning("SQS did not delete an interruption message in the batch; deleting it alone",
                                extra={"controller": "interruption", "code": str(f.get("Code"))[:100],
                                       "error": str(f.get("Message"))[:300]})
            except Exception as e:
                log.warning("deleting interruption messages in a batch failed; deleting one by one",
                            extra={"controller": "interruption", "error": str(e)[:300]})
                failed = {str(i) for i in range(len(batch))}
            for i, (kind, m) in enumerate(batch):
                if str(i) in failed:
                    try:
                        self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])
                    except Exception as e:
                        log.error("deleting interruption message failed; it will be redelivered", extra={
                            "controller": "interruption", "message-id": m.get("MessageId"), "error": str(e)[:300]})
                        self.metrics[DELETE_FAILED][kind] += 1
                        continue
                self.metrics[DELETED][kind] += 1
                M.INTERRUPTION_DELETED.inc()

    def run(self, stop: threading.Event) -> None:
        """Poll until stop is set; an error talking to SQS is logged and retried after a pause."""
        while not stop.is_set():
            try:
                self.poll_once(proceed=lambda: not stop.is_set())
            except Exception:
                log.exception("polling the interruption queue failed; retrying")
                stop.wait(5)
