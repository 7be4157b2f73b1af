"""The interruption path end to end on LocalStack: a queue with the stacks' queue policy (infra/policies.py) and the
stacks' EventBridge rules (infra/events.py) receives real-shaped events, and the consumer parses each into its typed
event, deletes it, and survives bad messages."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from controller.cloud.aws.interruption import DELETED, FAILED, RECEIVED, InterruptionQueue
from controller.interruption.messages import Event
from infra.events import INTERRUPTION_RULES, put_events_entry, sample_event
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
