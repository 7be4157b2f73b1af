"""Interruption messages: every kind parses to its typed event and action; bad messages say what is wrong."""

from __future__ import annotations

import json

import pytest

from controller.interruption.messages import (
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
from infra.events import INTERRUPTION_RULES, interruption_event_patterns, sample_event


@pytest.mark.parametrize(("kind", "cls", "action"), [
    ("SpotInterruption", SpotInterruption, Action.CORDON_AND_DRAIN),
    ("Rebalance", RebalanceRecommendation, Action.NO_ACTION),
    ("InstanceStateChange", StateChange, Action.CORDON_AND_DRAIN),
    ("ScheduledChange", ScheduledChange, Action.CORDON_AND_DRAIN),
    ("CapacityReservationInterruption", CapacityReservationInterruption, Action.CORDON_AND_DRAIN),
])
def test_each_kind(kind, cls, action):
    event = parse_message(json.dumps(sample_event(kind, "i-0123456789abcdef0")))
    assert isinstance(event, cls)
    assert event.instance_ids == ("i-0123456789abcdef0",)
    assert action_for(event) == action


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
