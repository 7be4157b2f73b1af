"""What `karpy version` reports: the package version, the source revision and Python's version."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Any

from controller.logs import revision


def version_info() -> dict[str, Any]:
    """version (the installed package's), revision (the git commit when run from a checkout, else None), python."""
    try:
        ours = package_version("karpy")
    except PackageNotFoundError:
        ours = "unknown"
    rev = revision()
    return {"version": ours, "revision": None if rev == "unknown" else rev, "python": platform.python_version()}


def version_line(info: dict[str, Any]) -> str:
    """`karpy 0.1.0 (revision abc1234), Python 3.11.7`."""
    rev = f" (revision {info['revision']})" if info["revision"] else ""
    return f"karpy {info['version']}{rev}, Python {info['python']}"
