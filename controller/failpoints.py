"""Named crash points for fault-injection tests: `KARPY_FAILPOINTS=lifecycle.after-create` makes the process die
(as a SIGKILL would) the first time it passes that point. Unset, a failpoint costs one set lookup."""

from __future__ import annotations

import os
import sys

_ACTIVE = frozenset(p.strip() for p in os.environ.get("KARPY_FAILPOINTS", "").split(",") if p.strip())


def failpoint(name: str) -> None:
    """Exit at once with status 137, without cleanup, when this failpoint is armed."""
    if name in _ACTIVE:
        sys.stderr.write(f"failpoint {name}: exiting\n")
        sys.stderr.flush()
        os._exit(137)
