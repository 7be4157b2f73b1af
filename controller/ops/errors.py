"""The one error type of the ops commands: a one-line message and the exit code (1 runtime, 2 usage)."""

from __future__ import annotations


class OpsError(Exception):
    """Something the operator must fix, said in one line."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(" ".join(message.split())[:400])
        self.code = code


def did_you_mean(name: str, choices: list[str]) -> str:
    """` (did you mean X?)` for the closest choice, or the list of choices when none is close."""
    import difflib

    close = difflib.get_close_matches(name, choices, n=1)
    if close:
        return f" (did you mean {close[0]}?)"
    return f" (one of: {', '.join(choices)})" if choices else ""
