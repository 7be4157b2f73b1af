"""Errors of the AWS provider, typed so the controller can tell "gone" from "try elsewhere" from "broken"."""

from __future__ import annotations

from controller.cloud.errors import InsufficientCapacityError, NodeClaimNotFoundError

__all__ = ["INSUFFICIENT_CAPACITY_CODES", "INSUFFICIENT_FREE_ADDRESSES", "InsufficientCapacityError", "LaunchError",
           "LaunchTemplateNotFoundError",
           "NodeClaimNotFoundError"]

# CreateFleet error codes that mean "no capacity for this offering right now" (Karpenter's list)
INSUFFICIENT_CAPACITY_CODES = frozenset({
    "InsufficientInstanceCapacity", "InsufficientCapacity", "MaxSpotInstanceCountExceeded", "VcpuLimitExceeded",
    "UnfulfillableCapacity", "Unsupported", "InsufficientFreeAddressesInSubnet", "ReservationCapacityExceeded",
    "SpotMaxPriceTooLow",
})

# a subnet out of IP addresses: another subnet of the zone may still take the launch
INSUFFICIENT_FREE_ADDRESSES = "InsufficientFreeAddressesInSubnet"


class LaunchTemplateNotFoundError(Exception):
    """CreateFleet named a launch template that no longer exists (someone deleted it): recreate and retry."""


class LaunchError(Exception):
    """A launch failed for a reason other than capacity (the message carries EC2's code and text)."""
