"""The interruption path end to end on LocalStack: a queue with the stacks' queue policy (infra/policies.py) and the
stacks' EventBridge rules (infra/events.py) receives real-shaped events, and the consumer parses each into its typed
event, deletes it, and survives bad messages."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

import pytest

from controller.cloud.aws.events import INTERRUPTION_RULES, put_events_entry, sample_event
from controller.cloud.aws.interruption import DELETE_FAILED, DELETED, FAILED, RECEIVED, InterruptionQueue
from controller.cloud.aws.messages import Event
from infra.policies import queue_policy

pytestmark = pytest.mark.localstack


@pytest.fixture
def queue(aws_client):
    sqs, events = aws_client("sqs"), aws_client("events")
    name = f"karpy-interruption-{uuid.uuid4().hex[:8]}"
    url = sqs.create_queue(QueueName=name, Attributes={"MessageRetentionPeriod": "300"})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    # the queue policy and the rules come from the same functions the stacks use (LocalStack accepts the policy but
    # does not enforce resource policies: what it allows and denies is asserted in tests/unit/test_policies.py)
    rules, rule_arns = [], []
    for suffix, pattern in INTERRUPTION_RULES.items():
        rule = f"{name}-{suffix}"
        rule_arns.append(events.put_rule(Name=rule, EventPattern=json.dumps(pattern))["RuleArn"])
        events.put_targets(Rule=rule, Targets=[{"Id": "KarpenterInterruptionQueueTarget", "Arn": arn}])
        rules.append(rule)
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(
        queue_policy(arn, rule_arns, arn.split(":")[4]))})
    yield sqs, events, url
    for rule in rules:
        events.remove_targets(Rule=rule, Ids=["KarpenterInterruptionQueueTarget"])
        events.delete_rule(Name=rule)
    sqs.delete_queue(QueueUrl=url)


def _drain(consumer: InterruptionQueue, expect: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while sum(consumer.metrics[RECEIVED].values()) < expect and time.monotonic() < deadline:
        consumer.poll_once()


def test_every_rule_delivers_and_parses(queue):
    sqs, events, url = queue
    seen: list[Event] = []
    consumer = InterruptionQueue(sqs, url, seen.append, wait_seconds=1)
    ids = {kind: f"i-{uuid.uuid4().hex[:17]}" for kind in INTERRUPTION_RULES}
    entries = [put_events_entry(sample_event(kind, ids[kind])) for kind in INTERRUPTION_RULES]
    resp = events.put_events(Entries=entries)
    assert resp["FailedEntryCount"] == 0
    _drain(consumer, len(entries))
    by_instance = {e.instance_ids[0]: type(e).__name__ for e in seen}
    assert by_instance == {ids["ScheduledChange"]: "ScheduledChange", ids["SpotInterruption"]: "SpotInterruption",
                           ids["Rebalance"]: "RebalanceRecommendation", ids["InstanceStateChange"]: "StateChange",
                           ids["CapacityReservationInterruption"]: "CapacityReservationInterruption"}
    assert sum(consumer.metrics[DELETED].values()) == len(entries)
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages") is None


def test_bad_messages_are_counted_and_deleted_and_the_loop_goes_on(queue):
    sqs, events, url = queue
    seen: list[Event] = []
    consumer = InterruptionQueue(sqs, url, seen.append, wait_seconds=1)
    for body in ("not json", json.dumps({"source": "my.app", "detail-type": "Deploy", "detail": {}}),
                 json.dumps({"source": "aws.ec2", "detail-type": "EC2 AMI State Change", "detail": {}})):
        sqs.send_message(QueueUrl=url, MessageBody=body)
    events.put_events(Entries=[put_events_entry(sample_event("SpotInterruption", "i-0abc"))])
    _drain(consumer, 4)
    assert consumer.metrics[RECEIVED]["unknown"] == 3
    assert consumer.metrics[DELETED]["unknown"] == 3
    assert [e.instance_ids for e in seen] == [("i-0abc",)]


def test_a_failing_handler_leaves_the_message_for_redelivery(queue):
    sqs, events, url = queue
    calls: list[Event] = []

    def flaky(event: Event) -> None:
        calls.append(event)
        if len(calls) == 1:
            raise RuntimeError("kube-apiserver unavailable")

    consumer = InterruptionQueue(sqs, url, flaky, wait_seconds=1, visibility_timeout=1)
    events.put_events(Entries=[put_events_entry(sample_event("SpotInterruption", "i-0def"))])
    deadline = time.monotonic() + 20
    while len(calls) < 2 and time.monotonic() < deadline:
        consumer.poll_once()
    assert [e.instance_ids for e in calls] == [("i-0def",), ("i-0def",)]
    assert consumer.metrics[FAILED]["spot_interrupted"] == 1
    assert consumer.metrics[DELETED]["spot_interrupted"] == 1


def test_a_batch_mixing_aws_events_and_hostile_bodies_is_all_deleted_and_the_good_ones_acted_on(queue):
    """AWS's recorded event bodies (each with an instance id of its own) and hostile bodies share receive batches:
    every message is judged alone, every one is deleted, the events reach the handler and the rest are counted under
    the fixed "unknown" message type."""
    from controller import metrics
    from controller.cloud.aws.interruption import MESSAGE_TYPES, UNKNOWN
    from tests.unit.test_interruption_messages import (
        AWS_HEALTH_SCHEDULED_CHANGE,
        AWS_REBALANCE,
        AWS_SPOT_INTERRUPTION,
        AWS_STATE_CHANGE,
    )

    sqs, _, url = queue
    ids = [f"i-{uuid.uuid4().hex[:17]}" for _ in range(4)]
    good = [AWS_SPOT_INTERRUPTION.replace("i-1234567890abcdef0", ids[0]),
            AWS_REBALANCE.replace("i-1234567890abcdef0", ids[1]),
            AWS_STATE_CHANGE.replace("i-abcd1111", ids[2]),
            AWS_HEALTH_SCHEDULED_CHANGE.replace("i-abcd1111", ids[3]).replace("i-0123456789abcdef0", ids[3])]
    hostile = ['{"source": "aws.ec2", "detail": ' + "[" * 50_000 + "]" * 50_000 + "}",
               '{"source": "aws.ec2", "detail-type": "x", "id": ' + "9" * 50_000 + "}",
               json.dumps({"source": "com.example", "detail-type": "Deploy", "detail": {}}),
               json.dumps({"source": "aws.ec2", "detail-type": ["EC2 Spot Instance Interruption Warning"],
                           "detail": {"instance-id": ids[0]}}),
               json.dumps({"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning",
                           "detail": {"instance-id": {"$ne": None}}}),
               "not json at all"]
    bodies = good + hostile
    order = list(range(len(bodies)))
    order = order[::2] + order[1::2]  # good and hostile interleaved on the queue
    for i in order:
        sqs.send_message(QueueUrl=url, MessageBody=bodies[i])
    before = {t: metrics.INTERRUPTION_RECEIVED.labels(message_type=t)._value.get() for t in MESSAGE_TYPES}
    seen: list[Event] = []
    consumer = InterruptionQueue(sqs, url, seen.append, wait_seconds=1)
    _drain(consumer, len(bodies))
    assert sorted(e.instance_ids[0] for e in seen) == sorted(ids)
    assert consumer.metrics[RECEIVED][UNKNOWN] == len(hostile)
    assert sum(consumer.metrics[DELETED].values()) == len(bodies)
    assert consumer.metrics[DELETED][UNKNOWN] == len(hostile)
    after = {t: metrics.INTERRUPTION_RECEIVED.labels(message_type=t)._value.get() for t in MESSAGE_TYPES}
    assert after[UNKNOWN] - before[UNKNOWN] == len(hostile)
    assert sum(after.values()) - sum(before.values()) == len(bodies)
    # the counter's label values stay within the known set, whatever the bodies said
    labels = {s.labels.get("message_type") for m in metrics.REGISTRY.collect()
              if m.name == "karpenter_interruption_received_messages" for s in m.samples}
    assert labels <= set(MESSAGE_TYPES)
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                                                   "ApproximateNumberOfMessagesNotVisible"])
    assert attrs["Attributes"] == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


def test_receives_ask_for_10_and_a_refused_delete_leaves_only_that_message(queue, caplog):
    """Every receive asks SQS for 10 messages; when DeleteMessageBatch reports one entry Failed (here a receipt handle
    LocalStack really refuses, so the one-by-one retry fails too), the others are deleted, the refusal is counted
    and logged, and exactly that message comes back after its visibility timeout."""
    sqs, _, url = queue
    ids = [f"i-{uuid.uuid4().hex[:17]}" for _ in range(3)]
    for iid in ids:
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(sample_event("SpotInterruption", iid)))
    receives: list[dict[str, Any]] = []
    batches: list[dict[str, Any]] = []
    spoiled: dict[str, str] = {}

    def record(params, **kwargs):
        receives.append(dict(params))

    def spoil_one_handle(parsed, **kwargs):
        for m in parsed.get("Messages", []):
            if not spoiled and ids[1] in m["Body"]:
                spoiled[m["MessageId"]] = m["ReceiptHandle"]
                m["ReceiptHandle"] = "not-a-receipt-handle"

    def record_batch(parsed, **kwargs):
        batches.append(parsed)

    sqs.meta.events.register("provide-client-params.sqs.ReceiveMessage", record)
    sqs.meta.events.register("after-call.sqs.ReceiveMessage", spoil_one_handle)
    sqs.meta.events.register("after-call.sqs.DeleteMessageBatch", record_batch)
    seen: list[Event] = []
    consumer = InterruptionQueue(sqs, url, seen.append, wait_seconds=1, visibility_timeout=2)
    with caplog.at_level(logging.WARNING, logger="karpy.interruption"):
        _drain(consumer, 3)
    assert sorted(e.instance_ids[0] for e in seen) == sorted(ids)
    assert receives and all(r["MaxNumberOfMessages"] == 10 for r in receives)
    failed_entries = [f for b in batches for f in b.get("Failed", [])]
    assert len(failed_entries) == 1  # LocalStack itself refused the spoiled handle, within the batch
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "in the batch" in r.getMessage()]
    assert [getattr(r, "code", None) for r in warned] == [failed_entries[0]["Code"]]
    assert consumer.metrics[DELETED]["spot_interrupted"] == 2
    assert dict(consumer.metrics[DELETE_FAILED]) == {"spot_interrupted": 1}
    (message_id,) = spoiled
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [getattr(r, "message-id", None) for r in errors] == [message_id]
    # redelivered: exactly the message whose delete was refused, and nothing else
    sqs.meta.events.unregister("after-call.sqs.ReceiveMessage", spoil_one_handle)
    back: list[dict[str, Any]] = []
    deadline = time.monotonic() + 15
    while not back and time.monotonic() < deadline:
        back = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
    assert [m["MessageId"] for m in back] == [message_id]
    assert ids[1] in back[0]["Body"]
