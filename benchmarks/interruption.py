"""Interruption messages handled per second against LocalStack's SQS.

    python benchmarks/interruption.py --endpoint http://127.0.0.1:4566 --messages 1000

Fills a queue with real-shaped interruption events, then drains it twice: with karpy's consumer (receive 10, parse,
DeleteMessageBatch) and with a baseline measured in the same run (receive 1, parse, DeleteMessage), and prints
messages/second for each and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import boto3

from controller.cloud.aws.interruption import InterruptionQueue
from controller.cloud.aws.messages import parse_message
from infra.events import INTERRUPTION_RULES, sample_event


def _fill(sqs: Any, url: str, n: int) -> None:
    kinds = list(INTERRUPTION_RULES)
    for start in range(0, n, 10):
        sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i),
             "MessageBody": json.dumps(sample_event(kinds[(start + i) % len(kinds)], f"i-{start + i:017x}"))}
            for i in range(min(10, n - start))])


def _karpy(sqs: Any, url: str, n: int) -> float:
    handled = 0

    def count(_: object) -> None:
        nonlocal handled
        handled += 1

    q = InterruptionQueue(sqs, url, count, wait_seconds=1)
    start = time.perf_counter()
    while handled < n:
        q.poll_once()
    return time.perf_counter() - start


def _baseline(sqs: Any, url: str, n: int) -> float:
    handled = 0
    start = time.perf_counter()
    while handled < n:
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, WaitTimeSeconds=1).get("Messages", []):
            parse_message(m["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            handled += 1
    return time.perf_counter() - start


def main() -> None:
    """Run both consumers over the same number of messages and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", default=os.environ.get("KARPY_LOCALSTACK_ENDPOINT", "http://127.0.0.1:4566"))
    ap.add_argument("--messages", type=int, default=1000)
    a = ap.parse_args()
    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=a.endpoint, aws_access_key_id="test",
                       aws_secret_access_key="test")
    url = sqs.create_queue(QueueName=f"karpy-bench-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    try:
        _fill(sqs, url, a.messages)
        ours = _karpy(sqs, url, a.messages)
        _fill(sqs, url, a.messages)
        base = _baseline(sqs, url, a.messages)
    finally:
        sqs.delete_queue(QueueUrl=url)
    print(json.dumps({"messages": a.messages, "karpySeconds": round(ours, 3),
                      "karpyMessagesPerSecond": round(a.messages / ours, 1), "baselineSeconds": round(base, 3),
                      "baselineMessagesPerSecond": round(a.messages / base, 1), "speedup": round(base / ours, 2),
                      "baseline": "receive 1 + DeleteMessage per message"}, indent=2))


if __name__ == "__main__":
    main()
