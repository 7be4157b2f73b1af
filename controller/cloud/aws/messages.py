"""Interruption messages: the EventBridge JSON that arrives on the queue -> typed events -> the action Karpenter takes.

Pure: no boto3. Anything that is not a well-formed interruption event raises MessageError naming what is wrong, so
the consumer can count and delete it without stopping.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from controller.cloud.aws.events import (
    CAPACITY_RESERVATION_INTERRUPTION,
    HEALTH,
    REBALANCE,
    SPOT_INTERRUPTION,
    STATE_CHANGE,
)

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


# bounds on what one message may make karpy do: SQS bodies are at most 256 KiB; no EC2 identifier or number in an
# interruption event is longer than these
MAX_BODY = 256 * 1024
MAX_FIELD = 128
MAX_INSTANCES = 1000
MAX_DIGITS = 20


def _short(value: Any, limit: int = 60) -> str:
    if isinstance(value, str):
        text = repr(value[:limit + 1])
    elif isinstance(value, dict | list):
        text = f"<{type(value).__name__} of {len(value)}>"
    else:
        text = repr(value) if not isinstance(value, int) or abs(value) < 10**limit else "<huge int>"
    return text if len(text) <= limit else text[:limit] + "…"


def _constant(name: str) -> Any:
    raise MessageError(f"{name} is not a JSON number")


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise MessageError(f"number with more than {MAX_DIGITS} digits")
    return int(text)


def _string(d: dict[str, Any], key: str, path: str) -> str:
    """A required string field, at most MAX_FIELD characters."""
    value = d.get(key)
    if value in (None, "", []):
        raise MessageError(f"missing field '{path}{key}'")
    if not isinstance(value, str):
        raise MessageError(f"field '{path}{key}' must be a string, got {type(value).__name__} {_short(value)}")
    if len(value) > MAX_FIELD:
        raise MessageError(f"field '{path}{key}' is longer than {MAX_FIELD} characters: {_short(value)}")
    return value


def _load(body: Any) -> dict[str, Any]:
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError:
            raise MessageError("not UTF-8") from None
    if not isinstance(body, str):
        raise MessageError(f"not a message body: {type(body).__name__}")
    if len(body) > MAX_BODY:
        raise MessageError(f"body of {len(body)} characters is larger than SQS allows ({MAX_BODY})")
    try:
        msg = json.loads(body, parse_constant=_constant, parse_int=_int)
    except json.JSONDecodeError as e:
        raise MessageError(f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise MessageError("not JSON karpy reads: nested too deeply") from None
    except ValueError as e:  # e.g. a number too long for int()
        raise MessageError(f"not JSON karpy reads: {str(e)[:80]}") from None
    if not isinstance(msg, dict):
        raise MessageError(f"not a JSON object: {type(msg).__name__}")
    return msg


def parse_message(body: str) -> Event:
    """One SQS message body -> a typed event; MessageError says why it is not one (never anything else, whatever
    the body: a message is untrusted input, judged on its own)."""
    msg = _load(body)
    source = msg.get("source")
    detail_type = msg.get("detail-type")
    if source not in ("aws.ec2", "aws.health"):
        raise MessageError(f"foreign source {_short(source)}")
    if not isinstance(detail_type, str):
        raise MessageError(f"detail-type must be a string, got {_short(detail_type)}")
    detail = msg.get("detail")
    if not isinstance(detail, dict):
        raise MessageError("missing field 'detail'")
    raw_id = msg.get("id")
    event_id = raw_id[:MAX_FIELD] if isinstance(raw_id, str) else ""
    if detail_type == SPOT_INTERRUPTION:
        return SpotInterruption(event_id, (_string(detail, "instance-id", "detail."),), "spot_interrupted")
    if detail_type == REBALANCE:
        return RebalanceRecommendation(event_id, (_string(detail, "instance-id", "detail."),),
                                       "instance_rebalance_recommended")
    if detail_type == STATE_CHANGE:
        state = _string(detail, "state", "detail.")  # a state karpy does not know is a no-op, as in Karpenter
        return StateChange(event_id, (_string(detail, "instance-id", "detail."),), f"instance_{state}", state)
    if detail_type == CAPACITY_RESERVATION_INTERRUPTION:
        return CapacityReservationInterruption(event_id, (_string(detail, "instance-id", "detail."),),
                                               "capacity_reservation_interrupted")
    if detail_type == HEALTH:
        if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
            raise MessageError(f"AWS Health event for {_short(detail.get('service'))}/"
                               f"{_short(detail.get('eventTypeCategory'))} is not an EC2 scheduled change")
        entities = detail.get("affectedEntities")
        if not isinstance(entities, list) or not entities:
            raise MessageError("missing field 'detail.affectedEntities'")
        if len(entities) > MAX_INSTANCES:
            raise MessageError(f"field 'detail.affectedEntities' lists more than {MAX_INSTANCES} entities")
        ids = tuple(_string(e, "entityValue", "detail.affectedEntities[].") for e in entities
                    if isinstance(e, dict) and e.get("entityValue"))
        if not ids:
            raise MessageError("missing field 'detail.affectedEntities[].entityValue'")
        code = detail.get("eventTypeCode")
        return ScheduledChange(event_id, ids, "scheduled_change", code[:MAX_FIELD] if isinstance(code, str) else "")
    raise MessageError(f"unknown detail-type {_short(detail_type)}")


def action_for(event: Event) -> Action:
    """Karpenter's response: drain and replace on interruption, scheduled change, capacity-reservation end and
    instances going away; only record a rebalance recommendation."""
    if isinstance(event, RebalanceRecommendation):
        return Action.NO_ACTION
    if isinstance(event, StateChange):
        return Action.CORDON_AND_DRAIN if event.state in STOPPING_STATES else Action.NO_ACTION
    return Action.CORDON_AND_DRAIN
