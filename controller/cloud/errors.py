"""Errors every CloudProvider raises, so controllers can tell "gone" from "no capacity" from "broken" without knowing
the cloud."""

from __future__ import annotations


class NodeClaimNotFoundError(Exception):
    """The instance behind a NodeClaim does not exist (any more)."""


class InsufficientCapacityError(Exception):
    """Every allowed offering was refused for lack of capacity."""


class NodeClassNotReadyError(Exception):
    """The node class cannot be launched from yet (its status is not resolved)."""
