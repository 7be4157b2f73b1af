"""Logging as Karpenter's zap logger writes it, for the `karpy` logger tree.

JSON encoding: one object a line with `level` (DEBUG, INFO, WARN, ERROR), `time` (RFC 3339 UTC, milliseconds),
`logger` ("controller", or "controller.<suffix>" for `karpy.<suffix>`), `message`, `commit`, `controller`, object
references (`NodeClaim`, `NodePool`, `Node`, `Pod`, `EC2NodeClass` as {"name", "namespace"}) and any other field passed
through `extra=`. An exception is an `error` field; its traceback is added (as `stacktrace`) at debug level only.
Console encoding: zap's console line, `time<TAB>LEVEL<TAB>logger<TAB>message<TAB>{fields}`.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

ROOT_LOGGER = "karpy"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "warning": logging.WARNING,
          "error": logging.ERROR}
LEVEL_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN", logging.ERROR: "ERROR",
               logging.CRITICAL: "FATAL"}
OBJECT_KINDS = ("NodeClaim", "NodePool", "Node", "Pod", "EC2NodeClass")
LIBRARY_LOGGERS = ("urllib3", "botocore", "boto3", "s3transfer", "kubernetes")
ERROR_CHARS = 1000

# attributes every LogRecord has; anything else on a record came through `extra=` and is a structured field
_RECORD_KEYS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime",
                                                                                       "taskName"}


@functools.lru_cache(maxsize=1)
def revision() -> str:
    """The git commit karpy runs from (7 characters, as Karpenter logs it), or "unknown" outside a checkout."""
    git = Path(__file__).resolve().parent.parent / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head[:7] or "unknown"
        ref = head[5:]
        if (git / ref).exists():
            return (git / ref).read_text().strip()[:7]
        for line in (git / "packed-refs").read_text().splitlines():
            sha, _, name = line.partition(" ")
            if name.strip() == ref:
                return sha[:7]
    except OSError:
        pass
    return "unknown"


def logger_name(name: str) -> str:
    """Karpenter's logger name for a Python logger: karpy and karpy.controller -> "controller", karpy.provisioner ->
    "controller.provisioner"; loggers outside karpy keep their name."""
    if name != ROOT_LOGGER and not name.startswith(ROOT_LOGGER + "."):
        return name
    parts = name.split(".")[1:]
    if parts and parts[0] == "controller":
        parts = parts[1:]
    return ".".join(["controller", *parts])


def object_ref(value: Any) -> Any:
    """An object reference as Karpenter logs it: {"name", "namespace"} (namespace only when set). Takes such a dict,
    a whole object (its metadata is used) or a "namespace/name" / "name" string; anything else is kept as it is."""
    if isinstance(value, dict):
        meta: dict[str, Any] = value["metadata"] if isinstance(value.get("metadata"), dict) else value
        if "name" in meta or "namespace" in meta:
            ref = {"name": str(meta.get("name") or "")}
            if meta.get("namespace"):
                ref["namespace"] = str(meta["namespace"])
            return ref
        return value
    if isinstance(value, str):
        namespace, _, name = value.rpartition("/")
        return {"name": name, "namespace": namespace} if namespace else {"name": name}
    return value


def _error_text(exc: BaseException) -> str:
    text = str(exc)
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return " ".join(text.split())[:ERROR_CHARS]


def _time(record: logging.LogRecord) -> str:
    stamp = dt.datetime.fromtimestamp(record.created, dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def record_fields(record: logging.LogRecord, debug: bool = False, commit: str | None = None) -> dict[str, Any]:
    """The structured fields of a record in Karpenter's order: commit, controller, object references, the other
    `extra=` fields, then error (and stacktrace at debug level)."""
    extra = {k: v for k, v in record.__dict__.items() if k not in _RECORD_KEYS and not k.startswith("_")}
    out: dict[str, Any] = {}
    if debug:
        out["caller"] = f"{Path(record.pathname).parent.name}/{record.filename}:{record.lineno}"
    commit = revision() if commit is None else commit
    if commit and commit != "unknown":
        out["commit"] = commit
    if "controller" in extra:
        out["controller"] = extra.pop("controller")
    for kind in OBJECT_KINDS:
        if kind in extra:
            out[kind] = object_ref(extra.pop(kind))
    out.update(extra)
    if record.exc_info and record.exc_info[1] is not None:
        out.setdefault("error", _error_text(record.exc_info[1]))
        if debug:
            out["stacktrace"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
    elif isinstance(out.get("error"), BaseException):
        out["error"] = _error_text(out["error"])
    return out


class JSONFormatter(logging.Formatter):
    """Karpenter's zap JSON line."""

    def __init__(self, debug: bool = False, commit: str | None = None) -> None:
        super().__init__()
        self.debug = debug
        self.commit = commit

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"level": LEVEL_NAMES.get(record.levelno, record.levelname), "time": _time(record),
                               "logger": logger_name(record.name), "message": record.getMessage()}
        for key, value in record_fields(record, self.debug, self.commit).items():
            out.setdefault(key, value)
        return json.dumps(out, default=str, ensure_ascii=False, separators=(",", ":"))


class ConsoleFormatter(logging.Formatter):
    """zap's console line: time, LEVEL, logger, message and the fields as JSON, tab separated, on one line (the
    traceback follows on its own lines at debug level only)."""

    def __init__(self, debug: bool = False, commit: str | None = None) -> None:
        super().__init__()
        self.debug = debug
        self.commit = commit

    def format(self, record: logging.LogRecord) -> str:
        fields = record_fields(record, self.debug, self.commit)
        stack = fields.pop("stacktrace", None)
        parts = [_time(record), LEVEL_NAMES.get(record.levelno, record.levelname), logger_name(record.name),
                 " ".join(record.getMessage().splitlines())]
        if fields:
            parts.append(json.dumps(fields, default=str, ensure_ascii=False, separators=(",", ":")))
        line = "\t".join(parts)
        return f"{line}\n{stack}" if stack else line


class _Output(logging.Handler):
    """Writes formatted lines to stdout, stderr (looked up at each write, so redirection works) or a file; a failed
    write is reported once per failure on the error outputs and never raises into the caller."""

    def __init__(self, path: str, error_paths: Sequence[str]) -> None:
        super().__init__()
        self.path = path
        self.error_paths = tuple(error_paths)
        self._file: IO[str] | None = None
        if path not in ("stdout", "stderr"):
            self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._karpy = True

    def _stream(self) -> IO[str]:
        if self._file is not None:
            return self._file
        return sys.stdout if self.path == "stdout" else sys.stderr

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = self._stream()
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception as e:
            self._report(e)

    def _report(self, e: BaseException) -> None:
        line = f"logging to {self.path} failed: {_error_text(e)}\n"
        for path in self.error_paths:
            try:
                if path in ("stdout", "stderr"):
                    stream = sys.stdout if path == "stdout" else sys.stderr
                    stream.write(line)
                    stream.flush()
                else:
                    with open(path, "a", encoding="utf-8") as f:
                        f.write(line)
            except Exception:  # nowhere left to say it
                continue

    def close(self) -> None:
        try:
            if self._file is not None:
                self._file.close()
                self._file = None
        finally:
            super().close()


def _remove_ours(logger: logging.Logger) -> None:
    for handler in list(logger.handlers):
        if getattr(handler, "_karpy", False):
            logger.removeHandler(handler)
            handler.close()


def configure(level: str, encoding: str = "json", output_paths: Sequence[str] = ("stdout",),
              error_output_paths: Sequence[str] = ("stderr",)) -> None:
    """Send the `karpy` logger tree at `level` (debug, info, warn, error) to `output_paths` (stdout, stderr or
    files) in Karpenter's JSON (or console) encoding. Library loggers (urllib3, botocore, kubernetes, ...) go to the
    same outputs from WARN up. `error_output_paths` receive the logger's own failures (as zap's do). Calling it again
    replaces the previous configuration."""
    numeric = LEVELS.get(level.strip().lower())
    if numeric is None:
        raise ValueError(f"invalid log level {level!r}: want one of debug, info, warn, error")
    if encoding not in ("json", "console"):
        raise ValueError(f"invalid log encoding {encoding!r}: want json or console")
    debug = numeric <= logging.DEBUG
    formatter: logging.Formatter = JSONFormatter(debug) if encoding == "json" else ConsoleFormatter(debug)
    root = logging.getLogger()
    karpy = logging.getLogger(ROOT_LOGGER)
    _remove_ours(root)
    _remove_ours(karpy)
    for path in list(output_paths) or ["stdout"]:
        handler = _Output(path, list(error_output_paths) or ["stderr"])
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(logging.WARNING)
    karpy.setLevel(numeric)
    karpy.propagate = True
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.captureWarnings(True)  # Python warnings become WARN lines in the same encoding
    logging.raiseExceptions = False  # a broken output must never stop a controller loop


def reset() -> None:
    """Undo `configure`: our handlers removed and closed, levels back to Python's defaults."""
    _remove_ours(logging.getLogger())
    _remove_ours(logging.getLogger(ROOT_LOGGER))
    logging.getLogger(ROOT_LOGGER).setLevel(logging.NOTSET)
    logging.captureWarnings(False)


def silence_libraries() -> None:
    """Nothing from the libraries' loggers or warnings (for one-shot commands whose stderr must stay one line)."""
    import warnings

    warnings.simplefilter("ignore")
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def pretty_names(names: Sequence[str], limit: int = 5) -> str:
    """Up to `limit` names, then how many more, as Karpenter's pretty.Slice prints a list in a message."""
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} other(s)"
