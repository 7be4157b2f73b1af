"""The interruption queue consumer: long-polls SQS, parses each message, hands typed events to a handler, deletes.

Bad messages (not JSON, unknown or foreign events) are logged, counted and deleted: they never stop the loop. A handler
that raises leaves its message on the queue, so SQS redelivers it after the visibility timeout.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from controller.interruption.messages import Event, MessageError, parse_message

log = logging.getLogger("karpy.interruption")

RECEIVED = "karpenter_interruption_received_messages_total"
DELETED = "karpenter_interruption_deleted_messages_total"
FAILED = "karpy_interruption_handler_errors_total"


class InterruptionQueue:
    """Consumes Karpenter's interruption queue."""

    def __init__(self, sqs: Any, queue_url: str, handler: Callable[[Event], None], wait_seconds: int = 20,
                 visibility_timeout: int | None = None) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.handler = handler
        self.wait_seconds = wait_seconds
        self.visibility_timeout = visibility_timeout
        # metric name -> {label value -> count}; label is the message type, as Karpenter's metrics are
        self.metrics: dict[str, Counter[str]] = {RECEIVED: Counter(), DELETED: Counter(), FAILED: Counter()}

    def poll_once(self) -> int:
        """Receive up to 10 messages, handle them, delete the handled and the malformed; returns messages received."""
        kwargs: dict[str, Any] = {"QueueUrl": self.queue_url, "MaxNumberOfMessages": 10,
                                  "WaitTimeSeconds": self.wait_seconds}
        if self.visibility_timeout is not None:
            kwargs["VisibilityTimeout"] = self.visibility_timeout
        messages = self.sqs.receive_message(**kwargs).get("Messages", [])
        done = []
        for m in messages:
            try:
                event = parse_message(m.get("Body", ""))
            except MessageError as e:
                log.warning("dropping interruption message %s: %s", m.get("MessageId"), e)
                self.metrics[RECEIVED]["unknown"] += 1
                done.append(("unknown", m))
                continue
            self.metrics[RECEIVED][event.kind] += 1
            try:
                self.handler(event)
            except Exception:
                log.exception("handling %s for %s failed; the message stays for redelivery", event.kind,
                              ",".join(event.instance_ids))
                self.metrics[FAILED][event.kind] += 1
                continue
            done.append((event.kind, m))
        for start in range(0, len(done), 10):
            batch = done[start:start + 10]
            resp = self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, (_, m) in enumerate(batch)])
            failed = {f["Id"] for f in resp.get("Failed", [])}
            for i, (kind, _) in enumerate(batch):
                if str(i) not in failed:
                    self.metrics[DELETED][kind] += 1
        return len(messages)

    def run(self, stop: threading.Event) -> None:
        """Poll until stop is set; an error talking to SQS is logged and retried after a pause."""
        while not stop.is_set():
            try:
                self.poll_once()
            except Exception:
                log.exception("polling the interruption queue failed; retrying")
                stop.wait(5)
