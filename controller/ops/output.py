"""Output shared by the commands: tables and text that fit the terminal, JSON/YAML with an apiVersion and kind so the
shape can evolve, and a progress line on a TTY for anything slow."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

import yaml

API_VERSION = "karpy.sh/v1alpha1"
FORMATS = ("table", "json", "yaml")
PROGRESS_AFTER = 2.0  # seconds: anything quicker shows no progress line
ELLIPSIS = "…"


def terminal_width(default: int = 80) -> int:
    """Columns of the terminal (COLUMNS when set), 80 when stdout is not one; never below 40."""
    return max(40, shutil.get_terminal_size((default, 24)).columns)


def machine(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """A machine-readable document: apiVersion and kind first, then the body."""
    return {"apiVersion": API_VERSION, "kind": kind, **body}


def dump(doc: dict[str, Any], fmt: str) -> str:
    """JSON (indented) or YAML text of a document, ending in a newline."""
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    if fmt == "yaml":
        return str(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    raise ValueError(f"unknown output format {fmt!r} (one of {', '.join(FORMATS)})")


def truncate(text: str, width: int) -> str:
    """text cut to width characters, the cut marked with an ellipsis."""
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + ELLIPSIS if width > 0 else ""


def table(header: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None, gap: int = 3,
          shrink: Sequence[int] = ()) -> list[str]:
    """Aligned columns (kubectl's style) no wider than width. While too wide, the columns in shrink (names, free
    text) are cut first, down to 7 characters, then whichever column has most to spare; a cut ends in an ellipsis
    and no column goes below its header's width."""
    width = terminal_width() if width is None else width
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]
    floor = [len(h) for h in header]

    def too_wide() -> bool:
        return sum(widths) + gap * (len(widths) - 1) > width

    for i in shrink:
        while too_wide() and widths[i] > max(floor[i], 7):
            widths[i] -= 1
    while too_wide():
        i = max(range(len(widths)), key=lambda j: widths[j] - floor[j])
        if widths[i] <= floor[i]:
            break
        widths[i] -= 1
    pad = " " * gap

    def line(values: Sequence[str]) -> str:
        return pad.join(truncate(v, w).ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    return [line(header), *(line(r) for r in cells)]


def wrap(text: str, width: int | None = None, indent: str = "", subsequent: str | None = None) -> list[str]:
    """text wrapped to width, the first line prefixed with indent and the rest with subsequent (indent + 2 spaces)."""
    width = terminal_width() if width is None else width
    rest = indent + "  " if subsequent is None else subsequent
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=rest,
                         break_long_words=True, break_on_hyphens=False) or [indent.rstrip()]


def age(seconds: float) -> str:
    """kubectl's short age: 45s, 12m, 5h, 3d (and 2m30s / 3h10m below 10 of the larger unit)."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 10:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    return f"{h // 24}d"


class Progress:
    """A one-line spinner with the elapsed time on stderr, shown only on a TTY and only once the work has taken longer
    than PROGRESS_AFTER; cleared when done, so it never mixes with the command's output."""

    FRAMES = "|/-\\"

    def __init__(self, message: str, stream: IO[str] | None = None, after: float = PROGRESS_AFTER,
                 interval: float = 0.2) -> None:
        self.message = message
        self.stream = stream if stream is not None else sys.stderr
        self.after = after
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = False
        self._lock = threading.Lock()

    def update(self, message: str) -> None:
        """Change the message (e.g. a phase or a count)."""
        with self._lock:
            self.message = message

    def _run(self, start: float) -> None:
        if self._stop.wait(self.after):
            return
        frame = 0
        while not self._stop.is_set():
            with self._lock:
                text = f"{self.FRAMES[frame % 4]} {self.message} ({time.monotonic() - start:.0f}s)"
            width = terminal_width()
            self.stream.write("\r" + truncate(text, width - 1).ljust(width - 1))
            self.stream.flush()
            self._shown = True
            frame += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> Progress:
        if getattr(self.stream, "isatty", lambda: False)():
            self._thread = threading.Thread(target=self._run, args=(time.monotonic(),), daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            if self._shown:
                self.stream.write("\r" + " " * (terminal_width() - 1) + "\r")
                self.stream.flush()


@contextmanager
def progress(message: str) -> Iterator[Progress]:
    """`with progress("simulating 60000 pods"):` — see Progress."""
    with Progress(message) as p:
        yield p
