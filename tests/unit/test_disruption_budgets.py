"""NodePool disruption budgets: Karpenter's budget cases (pkg/apis/v1/nodepool_budgets_test.go), cron syntax,
fail-closed parsing, and karpy's time-zone prefix across daylight-saving transitions."""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from controller.disruption import budgets as B
from controller.disruption.budgets import (
    UNBOUNDED,
    allowed_by_reason,
    allowed_disruptions,
    budget_errors,
    is_active,
    parse_duration,
    parse_schedule,
)

UTC = dt.UTC
NY = ZoneInfo("America/New_York")


def ts(*args: int, tz: dt.tzinfo = UTC, fold: int = 0) -> float:
    return dt.datetime(*args, tzinfo=tz, fold=fold).timestamp()  # type: ignore[misc]


NOW = ts(2000, 6, 15, 12, 30, 30)  # Karpenter's test clock


def budget(nodes: str, schedule: str | None = "* * * * *", duration: str | None = "1h",
           reasons: list[str] | None = None) -> dict[str, Any]:
    fields = {"nodes": nodes, "schedule": schedule, "duration": duration, "reasons": reasons}
    return {k: v for k, v in fields.items() if v is not None}


def pool(*budgets: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"disruption": {"budgets": list(budgets)}}}


def karpenter_budgets() -> list[dict[str, Any]]:
    return [budget("10"), budget("100"), budget("100%"), budget("15", reasons=["Drifted", "Underutilized"]),
            budget("5", reasons=["Drifted"]), budget("0", "@weekly", reasons=["Underutilized", "Drifted", "Empty"])]


def test_zero_for_all_reasons_when_a_budget_for_all_reasons_is_active() -> None:
    bs = karpenter_budgets()
    bs[5]["schedule"] = "* * * * *"
    assert allowed_by_reason(pool(*bs), NOW, 100) == {"Empty": 0, "Drifted": 0, "Underutilized": 0}


def test_unbounded_when_no_budget_is_active() -> None:
    bs = karpenter_budgets()
    for b in bs:
        b["schedule"] = "@yearly"
    assert set(allowed_by_reason(pool(*bs), NOW, 100).values()) == {UNBOUNDED}


def test_reason_budgets_ignored_when_inactive() -> None:
    bs = karpenter_budgets()
    bs[3]["schedule"] = bs[4]["schedule"] = "@yearly"
    assert set(allowed_by_reason(pool(*bs), NOW, 100).values()) == {10}


def test_minimum_per_reason() -> None:
    bs = [*karpenter_budgets(), budget("4", reasons=["Empty"])]
    p = pool(*bs)
    assert allowed_disruptions(p, "Empty", NOW, 100) == 4
    assert allowed_disruptions(p, "Drifted", NOW, 100) == 5
    assert allowed_disruptions(p, "Underutilized", NOW, 100) == 10


def test_default_budget_is_ten_percent_rounded_up() -> None:
    p = {"spec": {"disruption": {"consolidationPolicy": "WhenEmpty"}}}
    assert allowed_disruptions(p, "Empty", NOW, 100) == 10
    assert allowed_disruptions(p, "Empty", NOW, 5) == 1  # 0.5 rounds up
    assert allowed_disruptions(p, "Empty", NOW, 0) == 0
    assert allowed_disruptions({"spec": {}}, "Drifted", NOW, 11) == 2
    assert allowed_disruptions(pool(budget("33%", None, None)), "Drifted", NOW, 10) == 4
    assert allowed_disruptions(pool(), "Drifted", NOW, 10) == UNBOUNDED  # an empty list limits nothing


@pytest.mark.parametrize("field,value,fragment", [
    ("schedule", "@wrongly", "schedule: unrecognized descriptor"),
    ("nodes", "1000a%", "nodes: "),
    ("schedule", "0 0 * * tue-mon", "beginning of range (2) beyond end of range (1)"),
    ("schedule", "0 0 * *", "expected exactly 5 fields"),
    ("schedule", "61 * * * *", "values must be within 0-59"),
    ("schedule", "*/0 * * * *", "step must be a positive integer"),
    ("duration", "1d", "duration: duration '1d'"),
    ("schedule", "TZ=Mars/Olympus 0 0 * * *", "unknown time zone"),
])
def test_unreadable_budget_fails_closed_and_is_named(field: str, value: str, fragment: str) -> None:
    bad = budget("10", reasons=["Empty"])
    bad[field] = value
    p = pool(budget("50%"), bad)
    # fails closed for every reason, not only the reasons the bad budget names (MustGetAllowedDisruptions)
    assert allowed_by_reason(p, NOW, 100) == {"Empty": 0, "Drifted": 0, "Underutilized": 0}
    errors = budget_errors(p)
    assert len(errors) == 1 and errors[0].startswith("spec.disruption.budgets[1]: ")
    assert fragment in errors[0]


def test_errors_are_bounded_and_cover_shapes() -> None:
    p = pool(budget("x" * 5000))
    assert len(budget_errors(p)[0]) < 500
    assert budget_errors({"spec": {"disruption": {"budgets": "10%"}}}) == ["spec.disruption.budgets: not a list"]
    assert "schedule and duration" in budget_errors(pool(budget("1", "@daily", None)))[0]
    assert "not an object" in budget_errors(pool("10%"))[0]
    assert budget_errors(pool(*karpenter_budgets())) == []


def test_is_active_uses_utc_not_the_callers_zone() -> None:
    # June 0 2000 00:00 at UTC+1 is May 30 23:00 UTC; @daily for 30m is over
    now = dt.datetime(2000, 5, 31, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=1))).timestamp()
    assert not is_active(parse_schedule("@daily"), 1800, now)


def test_is_active_karpenter_cases() -> None:
    assert is_active(parse_schedule("* * * * *"), 3600, NOW)
    assert not is_active(parse_schedule("@yearly"), 3600, NOW)
    assert is_active(parse_schedule("@yearly"), 86400, ts(1000, 1, 1, 12))  # hit in the middle of the duration
    assert is_active(parse_schedule("@daily"), 48 * 3600, ts(2024, 1, 7))  # duration longer than the recurrence
    assert not is_active(parse_schedule("30 6 * * SUN"), 6 * 3600, ts(2024, 1, 7))


def test_window_bounds_are_half_open() -> None:
    s = parse_schedule("0 9 * * *")
    assert is_active(s, 3600, ts(2024, 1, 2, 9, 0))  # the hit itself
    assert is_active(s, 3600, ts(2024, 1, 2, 9, 59, 59))
    assert not is_active(s, 3600, ts(2024, 1, 2, 10, 0))  # Next(now - duration) is strictly after it
    assert not is_active(s, 3600, ts(2024, 1, 2, 8, 59))


def test_cron_syntax() -> None:
    s = parse_schedule("0/15 8-17/2 ? jan,Jul MON-fri")
    assert s.minutes == {0, 15, 30, 45} and s.hours == {8, 10, 12, 14, 16}
    assert s.months == {1, 7} and s.weekdays == {1, 2, 3, 4, 5} and s.day_star
    # day-of-month and day-of-week both restricted: either matches (robfig/cron, Vixie cron)
    either = parse_schedule("0 0 13 * 5")
    assert either.day_matches(dt.date(2024, 9, 13)) and either.day_matches(dt.date(2024, 9, 6))
    assert either.day_matches(dt.date(2024, 9, 13)) and not either.day_matches(dt.date(2024, 9, 7))
    # a stepped star is a restriction in robfig/cron: "*/10" days OR Mondays (2024-09-02 is a Monday, the 11th a
    # Wednesday and day 11 of "*/10")
    stepped = parse_schedule("0 0 */10 * 1")
    assert stepped.day_matches(dt.date(2024, 9, 2)) and stepped.day_matches(dt.date(2024, 9, 11))
    assert not stepped.day_matches(dt.date(2024, 9, 12))
    both = parse_schedule("0 0 * * 5")
    assert not both.day_matches(dt.date(2024, 9, 13 + 1))
    assert parse_schedule("@hourly").minutes == {0} and len(parse_schedule("@hourly").hours) == 24
    assert not is_active(parse_schedule("0 0 31 2 *"), 3600, NOW)  # never fires


def test_duration_parsing() -> None:
    assert parse_duration("1h30m0s") == 5400 and parse_duration("10m") == 600
    with pytest.raises(B.BudgetError):
        parse_duration("")
    with pytest.raises(B.BudgetError):
        parse_duration("h")


def test_time_zone_prefix() -> None:
    # 09:00 in New York is 14:00 UTC in winter
    p = pool(budget("0", "CRON_TZ=America/New_York 0 9 * * *", "1h"))
    assert allowed_disruptions(p, "Drifted", ts(2024, 1, 10, 14, 30), 10) == 0
    assert allowed_disruptions(p, "Drifted", ts(2024, 1, 10, 9, 30), 10) == UNBOUNDED
    tz = pool(budget("0", "TZ=Asia/Tokyo 0 0 * * *", "2h"))
    assert allowed_disruptions(tz, "Empty", ts(2024, 1, 9, 16, 0), 10) == 0  # 01:00 in Tokyo


def test_spring_forward_skipped_time_fires_at_the_jump() -> None:
    # 2024-03-10 in New York: 02:00 EST jumps to 03:00 EDT (07:00 UTC); 02:30 never exists that day
    s = parse_schedule("CRON_TZ=America/New_York 30 2 * * *")
    jump = ts(2024, 3, 10, 7, 0)
    assert not is_active(s, 3600, jump - 1)
    assert is_active(s, 3600, jump)
    assert is_active(s, 3600, jump + 3599)
    assert not is_active(s, 3600, jump + 3600)
    # the next day it fires at 02:30 EDT again
    assert is_active(s, 60, ts(2024, 3, 11, 2, 30, tz=NY))


def test_fall_back_repeated_time_fires_once_unless_the_hour_is_a_wildcard() -> None:
    # 2024-11-03 in New York: 02:00 EDT falls back to 01:00 EST; 01:30 happens at 05:30 and 06:30 UTC
    first, second = ts(2024, 11, 3, 5, 30), ts(2024, 11, 3, 6, 30)
    fixed = parse_schedule("CRON_TZ=America/New_York 30 1 * * *")
    assert is_active(fixed, 1800, first + 60)
    assert not is_active(fixed, 1800, second + 60)
    wild = parse_schedule("CRON_TZ=America/New_York */30 * * * *")
    assert is_active(wild, 600, second + 60)
    assert is_active(wild, 600, first + 60)


def test_a_skipped_midnight_and_a_half_hour_shift() -> None:
    # Santiago jumps 00:00 -> 01:00 on 2024-09-08: @daily opens its window at 01:00 local that day
    santiago = ZoneInfo("America/Santiago")
    s = parse_schedule("CRON_TZ=America/Santiago @daily")
    opened = ts(2024, 9, 8, 1, 0, tz=santiago)
    assert not is_active(s, 600, opened - 1) and is_active(s, 600, opened)
    # Lord Howe moves 30 minutes (02:00 -> 02:30) on 2024-10-06: 02:15 fires at 02:30
    lord_howe = ZoneInfo("Australia/Lord_Howe")
    s = parse_schedule("CRON_TZ=Australia/Lord_Howe 15 2 * * *")
    jump = ts(2024, 10, 6, 2, 30, tz=lord_howe)
    assert not is_active(s, 60, jump - 1) and is_active(s, 60, jump)
