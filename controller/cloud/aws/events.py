"""The EventBridge events that feed Karpenter's interruption queue, as plain data: their detail-types, the rule
patterns that route them to the queue, and real-shaped sample events.

They belong to the AWS provider (the consumer parses these detail-types); infra/ builds the stacks' rules from
INTERRUPTION_RULES, never the other way round. Pure: importable without cdktn or boto3.
"""

from __future__ import annotations

import copy
import datetime as dt
import uuid
from typing import Any

SPOT_INTERRUPTION = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"
CAPACITY_RESERVATION_INTERRUPTION = "EC2 Capacity Reservation Instance Interruption Warning"
HEALTH = "AWS Health Event"

# rule suffix -> event pattern
INTERRUPTION_RULES: dict[str, dict[str, Any]] = {
    "ScheduledChange": {"source": ["aws.health"], "detail-type": [HEALTH]},
    "SpotInterruption": {"source": ["aws.ec2"], "detail-type": [SPOT_INTERRUPTION]},
    "Rebalance": {"source": ["aws.ec2"], "detail-type": [REBALANCE]},
    "InstanceStateChange": {"source": ["aws.ec2"], "detail-type": [STATE_CHANGE]},
    "CapacityReservationInterruption": {"source": ["aws.ec2"], "detail-type": [CAPACITY_RESERVATION_INTERRUPTION]},
}


def interruption_event_patterns() -> dict[str, dict[str, Any]]:
    """A copy of the rule patterns, safe to modify."""
    return copy.deepcopy(INTERRUPTION_RULES)


def _detail(kind: str, instance_id: str, **kw: Any) -> tuple[str, str, dict[str, Any]]:
    """The source, detail-type and detail of one kind of event, shaped as AWS documents it."""
    if kind == "SpotInterruption":
        return "aws.ec2", SPOT_INTERRUPTION, {"instance-id": instance_id, "instance-action": "terminate"}
    if kind == "Rebalance":
        return "aws.ec2", REBALANCE, {"instance-id": instance_id}
    if kind == "InstanceStateChange":
        return "aws.ec2", STATE_CHANGE, {"instance-id": instance_id, "state": kw.get("state", "stopping")}
    if kind == "CapacityReservationInterruption":
        return "aws.ec2", CAPACITY_RESERVATION_INTERRUPTION, {
            "instance-id": instance_id, "instance-action": "terminate",
            "instance-termination-time": kw.get("time", "2026-11-22T12:00:00Z"),
            "availability-zone-id": kw.get("zone_id", "use1-az1"), "instance-lifecycle": "capacity-block"}
    if kind == "ScheduledChange":
        return "aws.health", HEALTH, {
            "eventArn": f"arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/{instance_id}",
            "service": "EC2", "eventTypeCode": kw.get("code", "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"),
            "eventTypeCategory": "scheduledChange",
            "startTime": "Sun, 22 Nov 2026 12:00:00 GMT", "endTime": "Sun, 22 Nov 2026 14:00:00 GMT",
            "affectedEntities": [{"entityValue": instance_id}]}
    raise ValueError(f"unknown interruption kind {kind!r} (one of {', '.join(INTERRUPTION_RULES)})")


def sample_event(kind: str, instance_id: str, **kw: Any) -> dict[str, Any]:
    """A real-shaped event of one kind, as EventBridge delivers it to the queue (the full envelope).

    `put_events_entry(event)` turns it into a PutEvents entry."""
    source, detail_type, detail = _detail(kind, instance_id, **kw)
    region = kw.get("region", "us-east-1")
    account = kw.get("account", "000000000000")
    return {"version": "0", "id": str(uuid.uuid4()), "detail-type": detail_type, "source": source,
            "account": account, "time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "region": region,
            "resources": [f"arn:aws:ec2:{region}:{account}:instance/{instance_id}"], "detail": detail}


def put_events_entry(event: dict[str, Any], bus: str = "default") -> dict[str, Any]:
    """The PutEvents entry that makes EventBridge deliver `event`."""
    import json

    return {"Source": event["source"], "DetailType": event["detail-type"], "Detail": json.dumps(event["detail"]),
            "Resources": event["resources"], "EventBusName": bus}
