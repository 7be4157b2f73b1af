"""Status conditions in the Kubernetes shape Karpenter writes (type, status, reason, message, lastTransitionTime,
observedGeneration): set one in a status copy, keeping the transition time when nothing changed."""

from __future__ import annotations

import datetime as dt
from typing import Any

MAX_MESSAGE = 1024


def now_rfc3339() -> str:
    """The current time as the API writes timestamps."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_time(epoch: float) -> str:
    """Epoch seconds as the API writes timestamps."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def get(status: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """The condition of that type in a status dict."""
    for c in (status or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == type_:
            return c
    return None


def set_condition(status: dict[str, Any], type_: str, value: bool | None, reason: str = "", message: str = "",
                  generation: int | None = None, now: float | None = None) -> bool:
    """Set a condition in status (True/False/Unknown for None), stamped `now` (epoch seconds; default the current
    time) when it changes; returns whether anything changed."""
    text = "Unknown" if value is None else ("True" if value else "False")
    reason = reason or (type_ if value else f"Not{type_}" if value is False else "AwaitingReconciliation")
    message = message[:MAX_MESSAGE]
    conditions = status.setdefault("conditions", [])
    current = get(status, type_)
    if current is not None and current.get("status") == text and current.get("reason") == reason \
            and current.get("message", "") == message and (generation is None
                                                           or current.get("observedGeneration") == generation):
        return False
    # an empty message is left out: a 1.20 apiserver turns "" into null in a merge-patched custom resource
    cond: dict[str, Any] = {"type": type_, "status": text, "reason": reason,
                            **({"message": message} if message else {}),
                            "lastTransitionTime": now_rfc3339() if now is None else format_time(now)}
    if current is not None and current.get("status") == text:
        cond["lastTransitionTime"] = current.get("lastTransitionTime") or cond["lastTransitionTime"]
    if generation is not None:
        cond["observedGeneration"] = generation
    if current is None:
        conditions.append(cond)
    else:
        conditions[conditions.index(current)] = cond
    return True


def is_true(status: dict[str, Any] | None, type_: str) -> bool:
    """Whether the condition is True."""
    c = get(status, type_)
    return c is not None and c.get("status") == "True"


def node_ready(node: dict[str, Any] | None) -> bool:
    """Whether a Node's Ready condition is True (the one readiness check for Nodes)."""
    return is_true((node or {}).get("status"), "Ready")


def parse_time(value: Any) -> float | None:
    """An RFC 3339 timestamp as epoch seconds (None when absent, not a string or malformed; one without a zone is
    read as UTC, as the API writes every time)."""
    if not value or not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)).timestamp()
