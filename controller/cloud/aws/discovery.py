"""Subnets and security groups from EC2NodeClass selector terms.

Terms are ORed; the fields of one term are ANDed. A tag value of "*" matches any value of that key. For subnets,
Karpenter launches into the subnet with the most free IP addresses in each zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Subnet:
    """A subnet Karpenter may launch into."""

    id: str
    zone: str
    zone_id: str
    available_ips: int


@dataclass(frozen=True)
class SecurityGroup:
    """A security group for the nodes."""

    id: str
    name: str


def tag_filters(tags: dict[str, str]) -> list[dict[str, Any]]:
    """EC2 Describe* filters for a tag selector: `*` means the key with any value."""
    out = []
    for k, v in tags.items():
        if v == "*":
            out.append({"Name": "tag-key", "Values": [k]})
        else:
            out.append({"Name": f"tag:{k}", "Values": [v]})
    return out


def discover_subnets(ec2: Any, terms: list[dict[str, Any]]) -> list[Subnet]:
    """Every subnet any term selects (deduplicated)."""
    found: dict[str, Subnet] = {}
    for term in terms:
        filters = tag_filters(term.get("tags") or {})
        if term.get("id"):
            filters.append({"Name": "subnet-id", "Values": [term["id"]]})
        for page in ec2.get_paginator("describe_subnets").paginate(Filters=filters):
            for s in page["Subnets"]:
                found[s["SubnetId"]] = Subnet(s["SubnetId"], s["AvailabilityZone"], s.get("AvailabilityZoneId", ""),
                                              int(s.get("AvailableIpAddressCount", 0)))
    return sorted(found.values(), key=lambda s: s.id)


def subnets_by_zone(subnets: list[Subnet]) -> dict[str, Subnet]:
    """Per zone, the subnet with the most free IP addresses (ties: lowest id, for stable choices)."""
    best: dict[str, Subnet] = {}
    for s in sorted(subnets, key=lambda s: s.id):
        if s.zone not in best or s.available_ips > best[s.zone].available_ips:
            best[s.zone] = s
    return best


def discover_security_groups(ec2: Any, terms: list[dict[str, Any]]) -> list[SecurityGroup]:
    """Every security group any term selects, by tags, id or name."""
    found: dict[str, SecurityGroup] = {}
    for term in terms:
        filters = tag_filters(term.get("tags") or {})
        if term.get("id"):
            filters.append({"Name": "group-id", "Values": [term["id"]]})
        if term.get("name"):
            filters.append({"Name": "group-name", "Values": [term["name"]]})
        for page in ec2.get_paginator("describe_security_groups").paginate(Filters=filters):
            for g in page["SecurityGroups"]:
                found[g["GroupId"]] = SecurityGroup(g["GroupId"], g.get("GroupName", ""))
    return sorted(found.values(), key=lambda g: g.id)
