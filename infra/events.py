"""The EventBridge rules that feed Karpenter's interruption queue: defined by the AWS provider
(controller/cloud/aws/events.py, whose consumer parses these events) and re-exported here for the stacks."""

from __future__ import annotations

from controller.cloud.aws.events import (
    CAPACITY_RESERVATION_INTERRUPTION,
    HEALTH,
    INTERRUPTION_RULES,
    REBALANCE,
    SPOT_INTERRUPTION,
    STATE_CHANGE,
    interruption_event_patterns,
    put_events_entry,
    sample_event,
)

__all__ = ["CAPACITY_RESERVATION_INTERRUPTION", "HEALTH", "INTERRUPTION_RULES", "REBALANCE", "SPOT_INTERRUPTION",
           "STATE_CHANGE", "interruption_event_patterns", "put_events_entry", "sample_event"]
