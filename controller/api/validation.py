"""Validation of Karpenter documents with Karpenter's v1 rules: the schema and its CEL rules (types, enums, bounds,
patterns, unknown fields, rules that span fields; controller.api.kinds) and the checks Karpenter's controllers make
at runtime (label syntax, restricted keys, known values, kubelet settings). Every error names the document and the
field path."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from controller.api.documents import Document
from controller.api.durations import parse_go_duration
from controller.api.kinds import (
    EVICTION_SIGNALS,
    KINDS,
    KUBELET_CONFIGURATION_FIELDS,
    RESERVED_RESOURCES,
    label_value,
    qualified_name,
)
from controller.api.labels import WELL_KNOWN_VALUES
from controller.api.quantity import QuantityError, parse_quantity
from controller.api.schema import ValidationIssue, validate

OLD_KARPENTER = {("karpenter.sh/v1beta1", "NodePool"), ("karpenter.k8s.aws/v1beta1", "EC2NodeClass"),
                 ("karpenter.sh/v1alpha5", "Provisioner"), ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate"),
                 ("karpenter.sh/v1beta1", "NodeClaim"), ("karpenter.sh/v1alpha5", "Machine")}


@dataclass(frozen=True)
class DocumentIssue:
    """One issue found in one document: a description (data), not an exception; InvalidDocument carries them."""

    document: str
    path: str
    message: str

    def __str__(self) -> str:
        # bounded: a path or message quoting a hostile key or value is cut, never printed whole
        path, message = _cut(self.path, 200), _cut(self.message, 300)
        return f"{self.document}: {path}: {message}" if path else f"{self.document}: {message}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


class InvalidDocument(Exception):
    """A document that failed validation, with all its errors."""

    def __init__(self, errors: list[DocumentIssue]) -> None:
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = errors


def _requirements(reqs: Any, path: str, out: list[ValidationIssue]) -> None:
    """Karpenter's runtime requirement check beyond the CRD: an In on a label with known values (capacity type,
    tenancy) must keep at least one known value (minValues of them). Restricted keys are the CRD's rules (its
    domain test covers the runtime one)."""
    if not isinstance(reqs, list):
        return
    for i, r in enumerate(reqs):
        if not isinstance(r, dict) or not isinstance(r.get("key"), str):
            continue
        p = f"{path}[{i}]"
        key, op, values = r["key"], r.get("operator"), r.get("values") or []
        known = WELL_KNOWN_VALUES.get(key)
        if known is None or op != "In" or not isinstance(values, list):
            continue
        valid = [v for v in values if v in known]
        if not valid:
            out.append(ValidationIssue(f"{p}.values", f"no valid values found in {values} for {key}, expected one of: "
                                                      f"{sorted(known)}"))
        elif isinstance(r.get("minValues"), int) and len(valid) < r["minValues"]:
            out.append(ValidationIssue(f"{p}.values", f"not enough valid values found in {values} for {key}, expected "
                                                      f"at least {r['minValues']} valid values from: {sorted(known)}"))


def _taints(spec: dict[str, Any], base: str, out: list[ValidationIssue]) -> None:
    """Taint values are qualified names at runtime, and one key/effect pair appears once across taints and
    startupTaints."""
    seen: set[tuple[str, str]] = set()
    for field in ("taints", "startupTaints"):
        taints = spec.get(field)
        if not isinstance(taints, list):
            continue
        for i, t in enumerate(taints):
            if not isinstance(t, dict):
                continue
            value = t.get("value")
            if isinstance(value, str) and value:
                msg = qualified_name(value)
                if msg:
                    out.append(ValidationIssue(f"{base}.{field}[{i}].value", msg))
            pair = (str(t.get("key")), str(t.get("effect")))
            if pair in seen:
                out.append(ValidationIssue(f"{base}.{field}[{i}]",
                                           f"duplicate taint Key/Effect pair {pair[0]}={pair[1]}"))
            seen.add(pair)


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _metadata(meta: Any, out: list[ValidationIssue]) -> None:
    """What the apiserver checks of any object's metadata: the name is a DNS subdomain, labels are qualified names
    with label values."""
    if not isinstance(meta, dict):
        return
    name = meta.get("name")
    if isinstance(name, str) and (len(name) > 253 or not _DNS_SUBDOMAIN.match(name)):
        out.append(ValidationIssue("metadata.name", f"{name[:80]!r} is not a DNS subdomain (lowercase alphanumerics, "
                                                    "'-' and '.', at most 253 characters)"))
    labels = meta.get("labels")
    if isinstance(labels, dict):
        for k, v in labels.items():
            msg = qualified_name(str(k)) or label_value(v)
            if msg:
                out.append(ValidationIssue(f"metadata.labels[{k}]", msg))


def _nodepool(raw: dict[str, Any], out: list[ValidationIssue]) -> None:
    spec = raw.get("spec") or {}
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    if isinstance(tspec, dict):
        _requirements(tspec.get("requirements"), "spec.template.spec.requirements", out)
        _taints(tspec, "spec.template.spec", out)
    labels = (template.get("metadata") or {}).get("labels") or {}
    if isinstance(labels, dict):
        for k in labels:
            p = f"spec.template.metadata.labels[{k}]"
            msg = qualified_name(str(k))
            if msg:
                out.append(ValidationIssue(p, msg))


def _nodeclaim(raw: dict[str, Any], out: list[ValidationIssue]) -> None:
    """A NodeClaim has only the CRD's rules (Karpenter creates them from a validated NodePool)."""


def _quantity_sign(value: str) -> int | None:
    try:
        return (parse_quantity(value) > 0) - (parse_quantity(value) < 0)
    except QuantityError:
        return None


def _kubelet(kubelet: dict[str, Any], out: list[ValidationIssue]) -> None:
    """Karpenter's controller-side checks of spec.kubelet (the CRD admits any map), with its messages."""
    p = "spec.kubelet"
    for name in sorted(set(kubelet) - KUBELET_CONFIGURATION_FIELDS):
        hint = difflib.get_close_matches(str(name), sorted(KUBELET_CONFIGURATION_FIELDS), n=1, cutoff=0.7)
        out.append(ValidationIssue(p, f"unknown field {name!r}, not a KubeletConfiguration field"
                                      + (f'; did you mean "{hint[0]}"?' if hint else "")))
    if isinstance(kubelet.get("maxPods"), str):
        out.append(ValidationIssue(f"{p}.maxPods", f"{kubelet['maxPods']!r}: maxPods expressions are not supported "
                                                   "by karpy; give an integer"))
    if "registerWithTaints" in kubelet:
        out.append(ValidationIssue(f"{p}.registerWithTaints", "can't be set, Karpenter sets it from the NodeClaim's "
                                                              "taints so the node registers unschedulable until it's "
                                                              "ready"))
    for field in ("evictionHard", "evictionSoft", "evictionSoftGracePeriod", "evictionMinimumReclaim"):
        signals = kubelet.get(field)
        if not isinstance(signals, dict):
            continue
        for key in sorted(signals):
            value = signals[key]
            if key not in EVICTION_SIGNALS:
                out.append(ValidationIssue(f"{p}.{field}", f"{key!r} isn't a valid eviction signal, must be one of "
                                                           f"{', '.join(EVICTION_SIGNALS)}"))
            if not isinstance(value, str):
                out.append(ValidationIssue(f"{p}.{field}[{key}]", f"{value!r} must be a string"))
            elif field == "evictionSoftGracePeriod":
                seconds = _go_duration(value)
                if seconds is None:
                    out.append(ValidationIssue(f"{p}.{field}[{key}]", f"{value!r} must be a duration"))
                elif seconds < 0:
                    out.append(ValidationIssue(f"{p}.{field}[{key}]", f"{value!r} can't be a negative duration"))
            elif value.endswith("%"):
                try:
                    pct = float(value[:-1])
                except ValueError:
                    pct = -1.0
                if not 0 <= pct <= 100:
                    out.append(ValidationIssue(f"{p}.{field}[{key}]", f"{value!r} must be a percentage or a resource "
                                                                      "quantity"))
            else:
                sign = _quantity_sign(value)
                if sign is None:
                    out.append(ValidationIssue(f"{p}.{field}[{key}]", f"{value!r} must be a percentage or a resource "
                                                                      "quantity"))
                elif sign < 0:
                    out.append(ValidationIssue(f"{p}.{field}[{key}]", f"{value!r} can't be a negative resource "
                                                                      "quantity"))
    soft, grace = kubelet.get("evictionSoft"), kubelet.get("evictionSoftGracePeriod")
    soft, grace = (soft if isinstance(soft, dict) else {}), (grace if isinstance(grace, dict) else {})
    for signal in sorted(set(soft) - set(grace)):
        out.append(ValidationIssue(f"{p}.evictionSoft[{signal}]", "has no matching evictionSoftGracePeriod"))
    for signal in sorted(set(grace) - set(soft)):
        out.append(ValidationIssue(f"{p}.evictionSoftGracePeriod[{signal}]", "has no matching evictionSoft"))
    for field in ("kubeReserved", "systemReserved"):
        reserved = kubelet.get(field)
        if not isinstance(reserved, dict):
            continue
        for key in sorted(reserved):
            if key not in RESERVED_RESOURCES:
                out.append(ValidationIssue(f"{p}.{field}", f"{key!r} isn't a reservable resource, must be one of "
                                                           f"{', '.join(RESERVED_RESOURCES)}"))
            value = reserved[key]
            if not isinstance(value, str):
                continue  # the schema reports it
            if value.startswith("-"):
                out.append(ValidationIssue(f"{p}.{field}[{key}]", f"{value!r} can't be a negative resource quantity"))
            elif _quantity_sign(value) is None:
                out.append(ValidationIssue(f"{p}.{field}[{key}]", f"{value!r}: reservation expressions are not "
                                                                  "supported by karpy; give a quantity such as 100Mi"))
    ints = {f: kubelet.get(f) for f in ("imageGCHighThresholdPercent", "imageGCLowThresholdPercent", "podsPerCore",
                                        "evictionMaxPodGracePeriod", "maxPods")}
    for field in ("imageGCHighThresholdPercent", "imageGCLowThresholdPercent"):
        v = ints[field]
        if isinstance(v, int) and not 0 <= v <= 100:
            out.append(ValidationIssue(f"{p}.{field}", f"{v} must be between 0 and 100"))
    for field in ("podsPerCore", "evictionMaxPodGracePeriod", "maxPods"):
        v = ints[field]
        if isinstance(v, int) and not isinstance(v, bool) and v < 0:
            out.append(ValidationIssue(f"{p}.{field}", f"{v} can't be negative"))
    high, low = ints["imageGCHighThresholdPercent"], ints["imageGCLowThresholdPercent"]
    if isinstance(high, int) and isinstance(low, int) and high <= low:
        out.append(ValidationIssue(p, f"imageGCHighThresholdPercent ({high}) must be greater than "
                                      f"imageGCLowThresholdPercent ({low})"))


def _go_duration(value: str) -> float | None:
    """Seconds in a Go duration written exactly (no surrounding space), else None."""
    if value != value.strip():
        return None
    try:
        return parse_go_duration(value)
    except ValueError:
        return None


def _ec2nodeclass(raw: dict[str, Any], out: list[ValidationIssue]) -> None:
    kubelet = (raw.get("spec") or {}).get("kubelet")
    if isinstance(kubelet, dict):
        _kubelet(kubelet, out)


RULES = {"NodePool": _nodepool, "NodeClaim": _nodeclaim, "EC2NodeClass": _ec2nodeclass}


def validate_document(doc: Document) -> list[DocumentIssue]:
    """Every error in a Karpenter v1 document ([] when valid, and for kinds that are not Karpenter's)."""
    key = (doc.api_version, doc.kind)
    if key in OLD_KARPENTER:
        return [DocumentIssue(doc.ref, "apiVersion", f"{doc.api_version} {doc.kind} is not served by Karpenter v1: "
                                                       "run `karpy convert` to get the v1 form")]
    schema = KINDS.get(key)
    if schema is None:
        if doc.kind in RULES and doc.api_version.startswith(("karpenter.sh/", "karpenter.k8s.aws/")):
            return [DocumentIssue(doc.ref, "apiVersion", f"unknown version {doc.api_version!r} for {doc.kind}")]
        return []
    issues: list[ValidationIssue] = []
    validate(doc.raw, schema, "", issues)
    _metadata(doc.raw.get("metadata"), issues)
    try:
        RULES[doc.kind](doc.raw, issues)
    except (AttributeError, TypeError, ValueError) as e:
        # a cross-field rule tripped over a wrongly typed value, which the schema has reported already
        if not issues:
            issues.append(ValidationIssue("", f"cannot be checked: {type(e).__name__}: {str(e)[:120]}"))
    seen: set[tuple[str, str]] = set()
    out = []
    for i in issues:
        if (i.path, i.message) not in seen:
            seen.add((i.path, i.message))
            out.append(DocumentIssue(doc.ref, i.path, i.message))
    return out


def spec_errors(manifest: dict[str, Any], prefix: str = "") -> list[str]:
    """What a stored object's spec breaks of Karpenter's rules ([] when valid), as `path: message`; `prefix` keeps
    only errors under a path (e.g. spec.kubelet). The controllers run it as Karpenter's validation controllers run
    their runtime checks; on an apiserver without CEL it also catches what the CRD's rules would have refused."""
    raw = {"apiVersion": manifest.get("apiVersion", ""), "kind": manifest.get("kind", ""),
           "metadata": {"name": (manifest.get("metadata") or {}).get("name", "")}, "spec": manifest.get("spec")}
    doc = Document("cluster", 0, str(raw["apiVersion"]), str(raw["kind"]), str(raw["metadata"]["name"]), None, raw)
    return [f"{e.path}: {e.message}" for e in validate_document(doc) if e.path.startswith(prefix or "spec")]
