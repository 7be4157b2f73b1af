"""AWS partitions: which one a region belongs to, for the ARNs karpy writes (EKS clusters, IAM roles)."""

from __future__ import annotations


def partition_of(region: str) -> str:
    """The AWS partition a region belongs to."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    if region.startswith("us-iso-"):
        return "aws-iso"
    if region.startswith("us-isob-"):
        return "aws-iso-b"
    return "aws"
