"""The EC2NodeClass hash, as karpenter-provider-aws's EC2NodeClass.Hash() defines it: the spec without the fields
Karpenter leaves out (the selector terms, whose drift is judged from the resolved status instead, and ipPrefixCount),
with amiFamily replaced by the resolved family (so `amiFamily: AL2023` next to alias `al2023@latest` is no change),
lists compared as sets and zero values treated as absent.

The value is karpy's own (a SHA-256 over canonical JSON, printed as a decimal like Karpenter's), not Go's
hashstructure, so it differs from the value Karpenter writes for the same spec; it is stable across runs, processes
and versions of karpy until EC2NODECLASS_HASH_VERSION changes. The version is karpy's own, never Karpenter's ("v4"):
a NodeClaim stamped under another version (Karpenter's, or an older karpy's) is re-stamped, never drifted, and
Karpenter does the same with what karpy wrote, so moving a cluster between the two replaces no node.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from controller.api import labels as L

EC2NODECLASS_HASH_VERSION = "karpy-v1"
# spec fields tagged `hash:"ignore"` in Karpenter's EC2NodeClassSpec
HASH_IGNORED = ("subnetSelectorTerms", "securityGroupSelectorTerms", "capacityReservationSelectorTerms",
                "ipPrefixCount", "amiSelectorTerms", "amiFamily")
_FAMILIES = {"al2": "AL2", "al2023": "AL2023", "bottlerocket": "Bottlerocket", "windows2019": "Windows2019",
             "windows2022": "Windows2022"}


def ami_family(spec: dict[str, Any]) -> str:
    """spec.amiFamily, else the family of the alias term, else Custom (Karpenter's EC2NodeClass.AMIFamily())."""
    if spec.get("amiFamily"):
        return str(spec["amiFamily"])
    for term in spec.get("amiSelectorTerms") or []:
        if isinstance(term, dict) and term.get("alias"):
            family = str(term["alias"]).partition("@")[0].lower()
            return _FAMILIES.get(family, family)
    return "Custom"


def canonical(value: Any) -> Any:
    """Zero values dropped (IgnoreZeroValue, ZeroNil) and lists sorted by their members' canonical form
    (SlicesAsSets); None when nothing is left."""
    if isinstance(value, dict):
        out = {str(k): c for k, c in ((k, canonical(v)) for k, v in value.items()) if c is not None}
        return out or None
    if isinstance(value, list):
        items = [c for c in (canonical(v) for v in value) if c is not None]
        if not items:
            return None
        return sorted(items, key=lambda c: json.dumps(c, sort_keys=True, separators=(",", ":")))
    if value is None or value == "" or value is False or (isinstance(value, (int, float)) and value == 0):
        return None
    return value


def ec2nodeclass_hash(nodeclass: dict[str, Any]) -> str:
    """The hash of the EC2NodeClass's spec (see the module doc), a decimal string."""
    spec = dict(nodeclass.get("spec") or {})
    family = ami_family(spec)
    for key in HASH_IGNORED:
        spec.pop(key, None)
    doc = [canonical(spec), family]
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return str(int(digest[:16], 16))


def hash_annotations(nodeclass: dict[str, Any]) -> dict[str, str]:
    """The ec2nodeclass-hash and -hash-version annotations for this EC2NodeClass's current spec."""
    return {L.EC2NODECLASS_HASH: ec2nodeclass_hash(nodeclass), L.EC2NODECLASS_HASH_VERSION: EC2NODECLASS_HASH_VERSION}
