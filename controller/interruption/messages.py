"""Interruption messages: the EventBridge JSON that arrives on the queue -> typed events -> the action Karpenter takes.

Pure: no boto3. Anything that is not a well-formed interruption event raises MessageError naming what is wrong, so
the consumer can count and delete it without stopping.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from infra.events import CAPACITY_RESERVATION_INTERRUPTION, HEALTH, REBALANCE, SPOT_INTERRUPTION, STATE_CHANGE

# the states in which the instance is going away (Karpenter acts on these, not on pending/running)
STOPPING_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


class MessageError(ValueError):
    """A message that is not an interruption event karpy understands."""


class Action(enum.Enum):
    """What to do with the affected nodes."""

    CORDON_AND_DRAIN = "CordonAndDrain"
    NO_ACTION = "NoAction"


@dataclass(frozen=True)
class Event:
    """Base of the typed events: the instances affected and the message's kind (a metric label)."""

    id: str
    instance_ids: tuple[str, ...]
    kind: str = ""


@dataclass(frozen=True)
class SpotInterruption(Event):
    """Two minutes' warning before EC2 reclaims a spot instance."""


@dataclass(frozen=True)
class RebalanceRecommendation(Event):
    """EC2's hint that a spot instance is at elevated risk of interruption."""


@dataclass(frozen=True)
class ScheduledChange(Event):
    """An AWS Health scheduled change (retirement, maintenance) for EC2 instances."""

    event_type_code: str = ""


@dataclass(frozen=True)
class StateChange(Event):
    """An instance changed state outside Karpenter (stopped, terminated, ...)."""

    state: str = ""


@dataclass(frozen=True)
class CapacityReservationInterruption(Event):
    """A capacity reservation (e.g. a Capacity Block) is ending and its instances will be terminated."""


def _require(d: dict[str, Any], key: str, path: str) -> Any:
    value = d.get(key)
    if value in (None, "", []):
        raise MessageError(f"missing field '{path}{key}'")
    return value


def parse_message(body: str) -> Event:
    """One SQS message body -> a typed event; MessageError says why it is not one."""
    try:
        msg = json.loads(body)
    except (json.JSONDecodeError, TypeError) as e:
        raise MessageError(f"not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise MessageError(f"not a JSON object: {type(msg).__name__}")
    source = msg.get("source")
    detail_type = msg.get("detail-type")
    if source not in ("aws.ec2", "aws.health"):
        raise MessageError(f"foreign source {source!r}")
    detail = msg.get("detail")
    if not isinstance(detail, dict):
        raise MessageError("missing field 'detail'")
    event_id = str(msg.get("id") or "")
    if detail_type == SPOT_INTERRUPTION:
        return SpotInterruption(event_id, (str(_require(detail, "instance-id", "detail.")),), "spot_interrupted")
    if detail_type == REBALANCE:
        return RebalanceRecommendation(event_id, (str(_require(detail, "instance-id", "detail.")),),
                                       "instance_rebalance_recommended")
    if detail_type == STATE_CHANGE:
        state = str(_require(detail, "state", "detail."))
        return StateChange(event_id, (str(_require(detail, "instance-id", "detail.")),), f"instance_{state}", state)
    if detail_type == CAPACITY_RESERVATION_INTERRUPTION:
        return CapacityReservationInterruption(event_id, (str(_require(detail, "instance-id", "detail.")),),
                                               "capacity_reservation_interrupted")
    if detail_type == HEALTH:
        if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
            raise MessageError(f"AWS Health event for {detail.get('service')!r}/{detail.get('eventTypeCategory')!r} "
                               "is not an EC2 scheduled change")
        entities = _require(detail, "affectedEntities", "detail.")
        ids = tuple(str(e.get("entityValue")) for e in entities if isinstance(e, dict) and e.get("entityValue"))
        if not ids:
            raise MessageError("missing field 'detail.affectedEntities[].entityValue'")
        return ScheduledChange(event_id, ids, "scheduled_change", str(detail.get("eventTypeCode") or ""))
    raise MessageError(f"unknown detail-type {detail_type!r}")


def action_for(event: Event) -> Action:
    """Karpenter's response: drain and replace on interruption, scheduled change, capacity-reservation end and
    instances going away; only record a rebalance recommendation."""
    if isinstance(event, RebalanceRecommendation):
        return Action.NO_ACTION
    if isinstance(event, StateChange):
        return Action.CORDON_AND_DRAIN if event.state in STOPPING_STATES else Action.NO_ACTION
    return Action.CORDON_AND_DRAIN
