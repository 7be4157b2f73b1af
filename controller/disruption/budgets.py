"""NodePool disruption budgets (Karpenter's Budget/NodePool methods in pkg/apis/v1/nodepool.go).

How many of a NodePool's nodes may be disrupted for a reason right now: the minimum over the active budgets that name
the reason (no `reasons` = every reason) of `nodes`, a count or a percentage of the NodePool's nodes rounded up.
A budget with `schedule` + `duration` is active when a schedule hit lies in (now - duration, now]. A budget that
cannot be read makes the whole NodePool allow 0 (fail closed), as Karpenter's MustGetAllowedDisruptions does.

Schedules are 5-field cron (robfig/cron's standard syntax: names, ranges, steps, `?`, OR of day-of-month and
day-of-week when both are restricted) or @yearly/@annually/@monthly/@weekly/@daily/@midnight/@hourly, in UTC as
Karpenter evaluates them. Beyond Karpenter, a `CRON_TZ=<IANA zone> ` or `TZ=<zone> ` prefix evaluates the schedule in
that zone (Karpenter itself fails closed on such a schedule: it allows 0). Daylight-saving transitions, decided as
Vixie cron does:
- a wall time skipped by a spring-forward (02:30 on a day that jumps 02:00 -> 03:00) fires at the jump (03:00 local);
- a wall time repeated by a fall-back (01:30 on a day that goes 02:00 -> 01:00) fires once, at its first occurrence,
  unless the hour field is a wildcard (`*`, `*/n`): then it fires at both occurrences, so a frequent schedule keeps
  its window open through the repeated hour.
"""

from __future__ import annotations

import calendar
import datetime as dt
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from controller.api.durations import parse_go_duration

UNBOUNDED = 2**31 - 1  # Karpenter's math.MaxInt32: no active budget limits this reason
DEFAULT_BUDGETS: tuple[dict[str, str], ...] = ({"nodes": "10%"},)  # the CRD's default for spec.disruption.budgets
KNOWN_REASONS = ("Empty", "Drifted", "Underutilized")
MAX_ERROR_CHARS = 300  # a message quotes at most this much of the value at fault
_SCAN_DAYS = 5 * 366 + 2  # as robfig/cron, a schedule is searched at most five years back

_MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
           "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_MONTHS = {n.lower(): i for i, n in enumerate(calendar.month_abbr) if n}
_DAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day-of-month", 1, 31, {}), ("month", 1, 12, _MONTHS),
    ("day-of-week", 0, 6, _DAYS))
_NODES_INT = re.compile(r"^\d+$")
_NODES_PCT = re.compile(r"^(\d+)%$")


class BudgetError(ValueError):
    """A budget field that cannot be read; the message names the field."""


def _clip(value: Any) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "..."


@dataclass(frozen=True)
class Schedule:
    """A parsed cron schedule: the allowed values of each field, and the zone it is evaluated in."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    day_star: bool  # day-of-month is * or ? (no step): days match as AND with weekdays, else OR (robfig)
    weekday_star: bool
    hour_wild: bool  # the hour field is a wildcard: repeated wall times fire twice on a fall-back day
    zone: dt.tzinfo

    def day_matches(self, day: dt.date) -> bool:
        """Whether the schedule fires on this local date."""
        if day.month not in self.months:
            return False
        dom = day.day in self.days
        dow = (day.weekday() + 1) % 7 in self.weekdays
        if self.day_star or self.weekday_star:
            return dom and dow
        return dom or dow


def _field(text: str, name: str, lo: int, hi: int, names: dict[str, int]) -> tuple[frozenset[int], bool]:
    """One cron field's values and whether it is a star: a part `*` or `?` without a step above 1 (robfig/cron's
    getField/getRange: `*/2` in day-of-month is a restriction, so it ORs with day-of-week)."""
    out: set[int] = set()
    star = False
    for part in text.split(","):
        if not part:
            raise BudgetError(f"{name} field {_clip(text)!r}: empty list item")
        rng, slash, step_s = part.partition("/")
        if rng in ("*", "?"):
            start, end = lo, hi
        else:
            a, dash, b = rng.partition("-")
            start = _value(a, name, names)
            end = _value(b, name, names) if dash else start
        if slash:
            if not step_s.isdigit() or int(step_s) == 0:
                raise BudgetError(f"{name} field {_clip(text)!r}: step must be a positive integer")
            step = int(step_s)
            if rng not in ("*", "?") and "-" not in rng:
                end = hi  # "a/n" means a..max stepping n
        else:
            step = 1
        star = star or (rng in ("*", "?") and step == 1)
        if start < lo or end > hi:
            raise BudgetError(f"{name} field {_clip(text)!r}: values must be within {lo}-{hi}")
        if start > end:
            raise BudgetError(f"{name} field {_clip(text)!r}: beginning of range ({start}) beyond end of range "
                              f"({end})")
        out.update(range(start, end + 1, step))
    return frozenset(out), star


def _value(text: str, name: str, names: dict[str, int]) -> int:
    if text.lower() in names:
        return names[text.lower()]
    if not text.isdigit():
        raise BudgetError(f"{name} field: {_clip(text)!r} is not a number" + (" or a name" if names else ""))
    return int(text)


@functools.lru_cache(maxsize=1024)  # a pass evaluates the same few schedules for every NodePool and reason
def parse_schedule(text: str) -> Schedule:
    """A budget's schedule: optional `CRON_TZ=`/`TZ=` zone prefix, then a macro or five cron fields."""
    spec = " ".join(str(text).split())
    zone: dt.tzinfo = dt.UTC
    if spec.startswith(("CRON_TZ=", "TZ=")):
        prefix, _, spec = spec.partition(" ")
        zname = prefix.partition("=")[2]
        try:
            zone = ZoneInfo(zname)
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise BudgetError(f"unknown time zone {_clip(zname)!r}") from e
    if spec.startswith("@"):
        if spec not in _MACROS:
            raise BudgetError(f"unrecognized descriptor {_clip(spec)!r} (one of {', '.join(_MACROS)})")
        spec = _MACROS[spec]
    fields = spec.split(" ")
    if len(fields) != 5:
        raise BudgetError(f"expected exactly 5 fields (minute hour day-of-month month day-of-week), found "
                          f"{len(fields) if spec else 0}: {_clip(spec)!r}")
    parsed = [_field(f, name, lo, hi, names) for f, (name, lo, hi, names) in zip(fields, _FIELDS, strict=True)]
    return Schedule(minutes=parsed[0][0], hours=parsed[1][0], days=parsed[2][0], months=parsed[3][0],
                    weekdays=parsed[4][0], day_star=parsed[2][1], weekday_star=parsed[4][1],
                    hour_wild=fields[1].startswith(("*", "?")), zone=zone)


def parse_duration(text: str) -> float:
    """A Go duration string (`1h`, `30m`, `1h30m0s`) in seconds, by the one Go duration parser; never negative."""
    try:
        total = parse_go_duration(str(text))
    except ValueError:
        total = -1.0
    if total < 0:
        raise BudgetError(f"duration {_clip(text)!r} is not a duration such as 1h, 30m or 1h30m")
    return total


def _instants(sched: Schedule, day: dt.date, hour: int, minute: int) -> list[float]:
    """The instants (epoch seconds) at which a local wall time fires (see the module doc on DST)."""
    wall = dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=sched.zone)
    t0 = wall.replace(fold=0).timestamp()
    t1 = wall.replace(fold=1).timestamp()
    if t0 == t1:
        return [t0]
    if t0 < t1:  # repeated by a fall-back: first occurrence, both for wildcard hours
        return [t0, t1] if sched.hour_wild else [t0]
    lo, hi = t1, t0  # skipped by a spring-forward: the jump lies between the two readings
    before = dt.datetime.fromtimestamp(lo, sched.zone).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) / 2
        if dt.datetime.fromtimestamp(mid, sched.zone).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return [float(int(hi))]


def is_active(schedule: Schedule, duration: float, now: float) -> bool:
    """Whether a schedule hit lies in (now - duration, now] (Karpenter's Budget.IsActive)."""
    start = now - duration
    tz = schedule.zone
    first = dt.datetime.fromtimestamp(start, tz).date() - dt.timedelta(days=1)
    day = dt.datetime.fromtimestamp(now, tz).date() + dt.timedelta(days=1)
    first = max(first, day - dt.timedelta(days=_SCAN_DAYS))
    while day >= first:
        if schedule.day_matches(day):
            for hour in sorted(schedule.hours, reverse=True):
                for minute in sorted(schedule.minutes, reverse=True):
                    if any(start < t <= now for t in _instants(schedule, day, hour, minute)):
                        return True
        day -= dt.timedelta(days=1)
    return False


def _budgets(nodepool: dict[str, Any]) -> list[Any]:
    disruption = (nodepool.get("spec") or {}).get("disruption") or {}
    if not isinstance(disruption, dict):
        raise BudgetError("spec.disruption: not an object")
    budgets = disruption.get("budgets")
    if budgets is None:
        return [dict(b) for b in DEFAULT_BUDGETS]
    if not isinstance(budgets, list):
        raise BudgetError("spec.disruption.budgets: not a list")
    return budgets


def _nodes(value: Any, total: int) -> int:
    text = str(value).strip()
    if _NODES_INT.match(text):
        return int(text)
    m = _NODES_PCT.match(text)
    if m:
        return (int(m.group(1)) * max(total, 0) + 99) // 100  # rounded up, as PDBs' maxUnavailable
    raise BudgetError(f"nodes {_clip(value)!r} is not a count or a percentage such as 10%")


def _budget_value(budget: Any, now: float, total: int) -> tuple[int, list[str] | None]:
    """(allowed, reasons) of one budget; UNBOUNDED when inactive. Raises BudgetError naming the field."""
    if not isinstance(budget, dict):
        raise BudgetError("not an object")
    reasons = budget.get("reasons")
    if reasons is not None and (not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons)):
        raise BudgetError("reasons: not a list of reasons")
    schedule, duration = budget.get("schedule"), budget.get("duration")
    if (schedule is None) != (duration is None):
        raise BudgetError("schedule and duration must be set together")
    try:
        nodes = _nodes(budget.get("nodes", "10%"), total)
    except BudgetError as e:
        raise BudgetError(f"nodes: {e}") from e
    if schedule is not None:
        try:
            sched = parse_schedule(str(schedule))
        except BudgetError as e:
            raise BudgetError(f"schedule: {e}") from e
        try:
            seconds = parse_duration(str(duration))
        except BudgetError as e:
            raise BudgetError(f"duration: {e}") from e
        if not is_active(sched, seconds, now):
            return UNBOUNDED, reasons
    return nodes, reasons


def budget_errors(nodepool: dict[str, Any], now: float = 0.0) -> list[str]:
    """One line per budget that cannot be read, naming its index and field (for a NodePool event)."""
    try:
        budgets = _budgets(nodepool)
    except BudgetError as e:
        return [str(e)]
    errors = []
    for i, budget in enumerate(budgets):
        try:
            _budget_value(budget, now, 0)
        except BudgetError as e:
            errors.append(f"spec.disruption.budgets[{i}]: {e}")
    return errors


def allowed_by_reason(nodepool: dict[str, Any], now: float, total: int,
                      reasons: Iterable[str] = KNOWN_REASONS) -> dict[str, int]:
    """Disruptions allowed per reason right now; every reason gets 0 when any budget cannot be read."""
    wanted = list(reasons)
    out = dict.fromkeys(wanted, UNBOUNDED)
    try:
        for budget in _budgets(nodepool):
            value, names = _budget_value(budget, now, total)
            for reason in wanted:
                if names is None or reason in names:
                    out[reason] = min(out[reason], value)
    except BudgetError:
        return dict.fromkeys(wanted, 0)
    return out


def allowed_disruptions(nodepool: dict[str, Any], reason: str, now: float, total: int) -> int:
    """How many of the NodePool's `total` nodes may be disrupted for `reason` at `now` (epoch seconds)."""
    return allowed_by_reason(nodepool, now, total, (reason,))[reason]
