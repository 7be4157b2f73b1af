"""Go duration strings (time.ParseDuration's grammar) as seconds: one parser for settings, annotations and API
fields."""

from __future__ import annotations

import re

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS_NS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9,
                      "h": 3600 * 10**9}


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration string ("1s", "500ms", "1m30s", "1.5h"; "0" alone is allowed), as time.ParseDuration
    reads it. ValueError otherwise."""
    s = text.strip()
    sign = 1
    if s[:1] in ("+", "-"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError("empty duration")
    total_ns = 0.0
    pos = 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            raise ValueError(f"not a Go duration: {text!r}")
        total_ns += float(m.group(1)) * _DURATION_UNITS_NS[m.group(2)]
        pos = m.end()
    return sign * total_ns / 1e9
