"""Interruption messages: every kind parses to its typed event and action; bad messages say what is wrong."""

from __future__ import annotations

import json

import pytest

from controller.cloud.aws.events import INTERRUPTION_RULES, interruption_event_patterns, sample_event
from controller.cloud.aws.messages import (
    Action,
    CapacityReservationInterruption,
    MessageError,
    RebalanceRecommendation,
    ScheduledChange,
    SpotInterruption,
    StateChange,
    action_for,
    parse_message,
)


def test_sample_events_match_their_rule_patterns():
    for kind, pattern in INTERRUPTION_RULES.items():
        e = sample_event(kind, "i-1")
        assert e["source"] in pattern["source"] and e["detail-type"] in pattern["detail-type"]
    patterns = interruption_event_patterns()
    patterns["Rebalance"]["source"].append("x")
    assert INTERRUPTION_RULES["Rebalance"]["source"] == ["aws.ec2"]


@pytest.mark.parametrize(("state", "action"), [("stopping", Action.CORDON_AND_DRAIN), ("stopped",
                                                Action.CORDON_AND_DRAIN), ("shutting-down", Action.CORDON_AND_DRAIN),
                                               ("terminated", Action.CORDON_AND_DRAIN), ("running", Action.NO_ACTION),
                                               ("pending", Action.NO_ACTION)])
def test_state_changes(state, action):
    event = parse_message(json.dumps(sample_event("InstanceStateChange", "i-1", state=state)))
    assert isinstance(event, StateChange) and event.state == state and action_for(event) == action


@pytest.mark.parametrize(("body", "message"), [
    ("not json", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({"source": "my.app", "detail-type": "X", "detail": {}}), "foreign source 'my.app'"),
    (json.dumps({"source": "aws.ec2", "detail-type": "EC2 Something New", "detail": {}}),
     "unknown detail-type 'EC2 Something New'"),
    (json.dumps({"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning", "detail": {}}),
     "missing field 'detail.instance-id'"),
    (json.dumps({"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning"}),
     "missing field 'detail'"),
    (json.dumps({"source": "aws.health", "detail-type": "AWS Health Event",
                 "detail": {"service": "RDS", "eventTypeCategory": "scheduledChange"}}), "not an EC2 scheduled change"),
])
def test_bad_messages_name_the_problem(body, message):
    with pytest.raises(MessageError, match=message):
        parse_message(body)


def test_health_event_with_several_instances():
    e = sample_event("ScheduledChange", "i-1")
    e["detail"]["affectedEntities"].append({"entityValue": "i-2"})
    event = parse_message(json.dumps(e))
    assert isinstance(event, ScheduledChange)
    assert event.instance_ids == ("i-1", "i-2")
    assert event.event_type_code == "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"


# ---- recorded AWS event bodies, as AWS's documentation prints them ---------------------------------------------------
# EC2 User Guide, "Spot Instance interruption notices" (EC2 Spot Instance Interruption Warning event)
AWS_SPOT_INTERRUPTION = """{
    "version": "0",
    "id": "12345678-1234-1234-1234-123456789012",
    "detail-type": "EC2 Spot Instance Interruption Warning",
    "source": "aws.ec2",
    "account": "123456789012",
    "time": "yyyy-mm-ddThh:mm:ssZ",
    "region": "us-east-2",
    "resources": ["arn:aws:ec2:us-east-2:123456789012:instance/i-1234567890abcdef0"],
    "detail": {
        "instance-id": "i-1234567890abcdef0",
        "instance-action": "action"
    }
}"""
# EC2 User Guide, "EC2 instance rebalance recommendations" (EC2 Instance Rebalance Recommendation event)
AWS_REBALANCE = """{
    "version": "0",
    "id": "12345678-1234-1234-1234-123456789012",
    "detail-type": "EC2 Instance Rebalance Recommendation",
    "source": "aws.ec2",
    "account": "123456789012",
    "time": "yyyy-mm-ddThh:mm:ssZ",
    "region": "us-east-2",
    "resources": ["arn:aws:ec2:us-east-2:123456789012:instance/i-1234567890abcdef0"],
    "detail": {
        "instance-id": "i-1234567890abcdef0"
    }
}"""
# EventBridge User Guide, example event "EC2 Instance State-change Notification"
AWS_STATE_CHANGE = """{
   "id":"7bf73129-1428-4cd3-a780-95db273d1602",
   "detail-type":"EC2 Instance State-change Notification",
   "source":"aws.ec2",
   "account":"123456789012",
   "time":"2019-11-11T21:29:54Z",
   "region":"us-east-1",
   "resources":[
      "arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111"
   ],
   "detail":{
      "instance-id":"i-abcd1111",
      "state":"stopping"
   }
}"""
# AWS Health User Guide, "AWS Health events Amazon EventBridge schema": sample payload of an EC2 scheduled change
AWS_HEALTH_SCHEDULED_CHANGE = """{
  "version": "0",
  "id": "7fb65329-1628-4cf3-a740-95fg457h1402",
  "detail-type": "AWS Health Event",
  "source": "aws.health",
  "account": "123456789012",
  "time": "2023-01-26T01:43:21Z",
  "region": "us-east-1",
  "resources": ["i-abcd1111"],
  "detail": {
    "eventArn": "arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/ABC123-DEF456",
    "service": "EC2",
    "eventScopeCode": "ACCOUNT_SPECIFIC",
    "communicationId": "1234abc01232a4012345678-1",
    "lastUpdatedTime": "Thu, 26 Jan 2023 19:01:55 GMT",
    "statusCode": "upcoming",
    "eventRegion": "us-east-1",
    "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
    "eventTypeCategory": "scheduledChange",
    "startTime": "Thu, 26 Jan 2023 13:19:03 GMT",
    "endTime": "Thu, 26 Jan 2023 14:19:03 GMT",
    "eventDescription": [{
      "language": "en_US",
      "latestDescription": "EC2 has detected degradation of the underlying hardware hosting your instance."
    }],
    "affectedEntities": [
      {"entityValue": "i-abcd1111", "lastUpdatedTime": "Thu, 26 Jan 2023 19:01:55 GMT", "statusCode": "PENDING"},
      {"entityValue": "i-0123456789abcdef0", "statusCode": "PENDING"}
    ],
    "affectedAccount": "123456789012"
  }
}"""

# EC2 User Guide, "Monitor Capacity Blocks using EventBridge": EC2 Capacity Reservation Instance Interruption Warning.
# The page prints the envelope key as "detail_type" (a typo there: EventBridge delivers "detail-type", which is also
# what the rule pattern matches); the placeholders are filled with values of the documented form.
AWS_CAPACITY_RESERVATION_INTERRUPTION = """{
    "version": "0",
    "id": "12345678-1234-1234-1234-123456789012",
    "detail-type": "EC2 Capacity Reservation Instance Interruption Warning",
    "source": "aws.ec2",
    "account": "123456789012",
    "time": "2026-11-22T11:50:00Z",
    "region": "us-east-1",
    "resources": [
        "arn:aws:ec2:us-east-1:123456789012:instance/i-1234567890abcdef0"
    ],
    "detail": {
        "instance-id": "i-1234567890abcdef0",
        "instance-action": "terminate",
        "instance-termination-time": "2026-11-22T12:00:00Z",
        "availability-zone-id": "use1-az1",
        "instance-lifecycle": "capacity-block"
    }
}"""
RECORDED = {"SpotInterruption": AWS_SPOT_INTERRUPTION, "Rebalance": AWS_REBALANCE,
            "InstanceStateChange": AWS_STATE_CHANGE, "ScheduledChange": AWS_HEALTH_SCHEDULED_CHANGE,
            "CapacityReservationInterruption": AWS_CAPACITY_RESERVATION_INTERRUPTION}


@pytest.mark.parametrize(("kind", "cls", "action", "kind_label", "instance_ids"), [
    ("SpotInterruption", SpotInterruption, Action.CORDON_AND_DRAIN, "spot_interrupted", ("i-1234567890abcdef0",)),
    ("Rebalance", RebalanceRecommendation, Action.NO_ACTION, "instance_rebalance_recommended",
     ("i-1234567890abcdef0",)),
    ("InstanceStateChange", StateChange, Action.CORDON_AND_DRAIN, "instance_stopping", ("i-abcd1111",)),
    ("ScheduledChange", ScheduledChange, Action.CORDON_AND_DRAIN, "scheduled_change",
     ("i-abcd1111", "i-0123456789abcdef0")),
    ("CapacityReservationInterruption", CapacityReservationInterruption, Action.CORDON_AND_DRAIN,
     "capacity_reservation_interrupted", ("i-1234567890abcdef0",)),
])
def test_each_kind(kind, cls, action, kind_label, instance_ids):
    """Each of the five kinds, parsed from the body AWS documents (not from the production module's sample_event)."""
    event = parse_message(RECORDED[kind])
    assert type(event) is cls
    assert event.instance_ids == instance_ids
    assert event.kind == kind_label
    assert event.id == json.loads(RECORDED[kind])["id"]
    assert action_for(event) == action


def test_each_recorded_body_matches_exactly_its_own_rule():
    """The stacks' rules route every documented event to the queue, each through one rule only."""
    for kind, body in RECORDED.items():
        doc = json.loads(body)
        matching = [name for name, pattern in INTERRUPTION_RULES.items()
                    if doc["source"] in pattern["source"] and doc["detail-type"] in pattern["detail-type"]]
        assert matching == [kind]


def test_sample_events_parse_like_the_recorded_ones():
    """`karpy interrupt` and the integration tests send sample_event: it must read as AWS's own body does."""
    for kind, body in RECORDED.items():
        recorded = parse_message(body)
        sampled = parse_message(json.dumps(sample_event(kind, "i-0123456789abcdef0", state="stopping")))
        assert (type(sampled), sampled.kind, action_for(sampled)) == (type(recorded), recorded.kind,
                                                                       action_for(recorded))


def test_recorded_aws_bodies_parse_to_karpenters_events() -> None:
    spot = parse_message(AWS_SPOT_INTERRUPTION)
    assert type(spot) is SpotInterruption and spot.instance_ids == ("i-1234567890abcdef0",)
    assert spot.id == "12345678-1234-1234-1234-123456789012" and action_for(spot) == Action.CORDON_AND_DRAIN
    rebalance = parse_message(AWS_REBALANCE)
    assert type(rebalance) is RebalanceRecommendation and rebalance.instance_ids == ("i-1234567890abcdef0",)
    assert action_for(rebalance) == Action.NO_ACTION
    state = parse_message(AWS_STATE_CHANGE)
    assert type(state) is StateChange and state.instance_ids == ("i-abcd1111",) and state.state == "stopping"
    assert action_for(state) == Action.CORDON_AND_DRAIN
    health = parse_message(AWS_HEALTH_SCHEDULED_CHANGE)
    assert type(health) is ScheduledChange and health.instance_ids == ("i-abcd1111", "i-0123456789abcdef0")
    assert health.event_type_code == "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"
    assert action_for(health) == Action.CORDON_AND_DRAIN
    reservation = parse_message(AWS_CAPACITY_RESERVATION_INTERRUPTION)
    assert type(reservation) is CapacityReservationInterruption
    assert reservation.instance_ids == ("i-1234567890abcdef0",) and action_for(reservation) == Action.CORDON_AND_DRAIN


def _with(body: str, path: tuple[str, ...], value: object) -> str:
    doc = json.loads(body)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return json.dumps(doc)


HOSTILE_BODIES = [
    ("deeply nested", '{"source": "aws.ec2", "detail": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "not JSON karpy reads: nested too deeply"),
    ("huge integer", '{"source": "aws.ec2", "detail-type": "x", "id": ' + "9" * 100_000 + "}",
     "number with more than 20 digits"),
    ("NaN", '{"source": "aws.ec2", "detail-type": "x", "id": NaN}', "NaN is not a JSON number"),
    ("not JSON", "\x00\xff garbage", "not JSON: Expecting value at line 1 column 1"),
    ("empty", "", "not JSON: Expecting value"),
    ("JSON string", '"aws.ec2"', "not a JSON object: str"),
    ("too large", json.dumps({"source": "aws.ec2", "pad": "x" * 300_000}), "larger than SQS allows"),
    ("foreign source", _with(AWS_SPOT_INTERRUPTION, ("source",), "com.example.deploys"),
     "foreign source 'com.example.deploys'"),
    ("source of the wrong type", _with(AWS_SPOT_INTERRUPTION, ("source",), ["aws.ec2"]), "foreign source <list of 1>"),
    ("wrong detail-type", _with(AWS_SPOT_INTERRUPTION, ("detail-type",), "EC2 AMI State Change"),
     "unknown detail-type 'EC2 AMI State Change'"),
    ("detail-type of the wrong type", _with(AWS_SPOT_INTERRUPTION, ("detail-type",), {"a": 1}),
     "detail-type must be a string, got <dict of 1>"),
    ("detail a list", _with(AWS_SPOT_INTERRUPTION, ("detail",), [1, 2]), "missing field 'detail'"),
    ("instance id an object", _with(AWS_SPOT_INTERRUPTION, ("detail", "instance-id"), {"id": "i-1"}),
     "field 'detail.instance-id' must be a string, got dict <dict of 1>"),
    ("instance id a number", _with(AWS_REBALANCE, ("detail", "instance-id"), 12345678),
     "field 'detail.instance-id' must be a string, got int 12345678"),
    ("instance id huge", _with(AWS_STATE_CHANGE, ("detail", "instance-id"), "i-" + "a" * 100_000),
     "field 'detail.instance-id' is longer than 128 characters"),
    ("state a list", _with(AWS_STATE_CHANGE, ("detail", "state"), ["stopping"]),
     "field 'detail.state' must be a string, got list"),
    ("health for another service", _with(AWS_HEALTH_SCHEDULED_CHANGE, ("detail", "service"), "RDS"),
     "AWS Health event for 'RDS'/'scheduledChange' is not an EC2 scheduled change"),
    ("health entities not a list", _with(AWS_HEALTH_SCHEDULED_CHANGE, ("detail", "affectedEntities"), "i-abcd1111"),
     "missing field 'detail.affectedEntities'"),
    ("health entity value an object", _with(AWS_HEALTH_SCHEDULED_CHANGE, ("detail", "affectedEntities"),
                                            [{"entityValue": {"x": 1}}]),
     "field 'detail.affectedEntities[].entityValue' must be a string"),
    ("health with too many entities", _with(AWS_HEALTH_SCHEDULED_CHANGE, ("detail", "affectedEntities"),
                                            [{"entityValue": "i-abcd1111"}] * 1001),
     "lists more than 1000 entities"),
]


@pytest.mark.parametrize(("body", "message"), [(b, m) for _, b, m in HOSTILE_BODIES],
                         ids=[n for n, _, _ in HOSTILE_BODIES])
def test_hostile_bodies_are_a_message_error_with_a_short_reason(body: str, message: str) -> None:
    with pytest.raises(MessageError) as info:
        parse_message(body)
    assert message in str(info.value)
    assert len(str(info.value)) < 200


# ---- found by mutation testing: the bounds and encodings of a message body ---------------------------------------
from controller.cloud.aws.messages import MAX_BODY, MAX_DIGITS, MAX_FIELD, MAX_INSTANCES  # noqa: E402


def _spot(instance_id: object = "i-1234567890abcdef0", **envelope: object) -> str:
    doc = json.loads(AWS_SPOT_INTERRUPTION)
    doc["detail"]["instance-id"] = instance_id
    doc.update(envelope)
    return json.dumps(doc)


def test_bytes_bodies_are_read_as_utf8():
    event = parse_message(_spot().encode("utf-8"))
    assert type(event) is SpotInterruption and event.instance_ids == ("i-1234567890abcdef0",)
    with pytest.raises(MessageError, match=r"^not UTF-8$"):
        parse_message(b'{"source": "aws.ec2", "x": "\xff"}')
    with pytest.raises(MessageError, match=r"^not a message body: int$"):
        parse_message(5)


def test_body_size_limit_is_sqs_256_kib():
    body = _spot()
    assert parse_message(body + " " * (MAX_BODY - len(body))).instance_ids == ("i-1234567890abcdef0",)
    with pytest.raises(MessageError, match=f"^body of {MAX_BODY + 1} characters is larger than SQS allows"):
        parse_message(body + " " * (MAX_BODY + 1 - len(body)))


def test_numbers_are_bounded_in_digits():
    assert MAX_DIGITS == 20
    assert parse_message(_spot(extra=int("9" * 20))).kind == "spot_interrupted"
    assert parse_message(_spot(extra=-int("9" * 20))).kind == "spot_interrupted"
    with pytest.raises(MessageError, match=r"^not JSON karpy reads: number with more than 20 digits$"):
        parse_message(_spot(extra=int("9" * 21)))
    with pytest.raises(MessageError, match=r"^not JSON karpy reads: NaN is not a JSON number$"):
        parse_message('{"source": "aws.ec2", "n": NaN}')
    with pytest.raises(MessageError, match=r"^not JSON karpy reads: nested too deeply$"):
        parse_message("[" * 100_000 + "]" * 100_000)


def test_fields_are_bounded_and_quoted_short():
    assert parse_message(_spot("i-" + "0" * (MAX_FIELD - 2))).instance_ids == ("i-" + "0" * (MAX_FIELD - 2),)
    long_id = "i-" + "0" * (MAX_FIELD - 1)
    with pytest.raises(MessageError) as e:
        parse_message(_spot(long_id))
    assert str(e.value) == (f"field 'detail.instance-id' is longer than {MAX_FIELD} characters: "
                            f"'{long_id[:59]}…")
    with pytest.raises(MessageError, match=r"^field 'detail.instance-id' must be a string, got int 7$"):
        parse_message(_spot(7))
    with pytest.raises(MessageError, match=r"^field 'detail.instance-id' must be a string, got dict <dict of 1>$"):
        parse_message(_spot({"$ne": None}))
    with pytest.raises(MessageError, match=r"^missing field 'detail.instance-id'$"):
        parse_message(_spot(""))
    with pytest.raises(MessageError, match=r"^foreign source 'x{59}…$"):
        parse_message(_spot(source="x" * 500))
    with pytest.raises(MessageError, match=r"^detail-type must be a string, got <list of 1>$"):
        parse_message(json.dumps({"source": "aws.ec2", "detail-type": ["x"], "detail": {}}))


def test_event_ids_and_codes_are_kept_bounded_or_empty():
    assert parse_message(_spot(id="e" * 500)).id == "e" * MAX_FIELD
    assert parse_message(_spot(id=5)).id == ""
    doc = json.loads(AWS_HEALTH_SCHEDULED_CHANGE)
    doc["detail"]["eventTypeCode"] = "C" * 500
    event = parse_message(json.dumps(doc))
    assert isinstance(event, ScheduledChange) and event.event_type_code == "C" * MAX_FIELD
    assert event.id == "7fb65329-1628-4cf3-a740-95fg457h1402" and event.kind == "scheduled_change"
    doc["detail"]["eventTypeCode"] = 5
    assert parse_message(json.dumps(doc)).event_type_code == ""  # type: ignore[attr-defined]


def test_health_entities_are_bounded_and_junk_entries_skipped():
    doc = json.loads(AWS_HEALTH_SCHEDULED_CHANGE)
    doc["detail"]["affectedEntities"] = [{"entityValue": "i-1"}, "junk", {"other": 1}, {"entityValue": ""}]
    assert parse_message(json.dumps(doc)).instance_ids == ("i-1",)
    doc["detail"]["affectedEntities"] = ["junk", {"entityValue": None}]
    with pytest.raises(MessageError, match=r"^missing field 'detail.affectedEntities\[\].entityValue'$"):
        parse_message(json.dumps(doc))
    doc["detail"]["affectedEntities"] = []
    with pytest.raises(MessageError, match=r"^missing field 'detail.affectedEntities'$"):
        parse_message(json.dumps(doc))
    doc["detail"]["affectedEntities"] = [{"entityValue": f"i-{n}"} for n in range(MAX_INSTANCES)]
    assert len(parse_message(json.dumps(doc)).instance_ids) == MAX_INSTANCES
    doc["detail"]["affectedEntities"].append({"entityValue": "i-x"})
    with pytest.raises(MessageError, match=f"^field 'detail.affectedEntities' lists more than {MAX_INSTANCES}"):
        parse_message(json.dumps(doc))
