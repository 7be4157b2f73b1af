"""Validation of Karpenter documents with Karpenter's v1 rules: the schema (types, enums, bounds, formats, unknown
fields) and the rules that span fields. Every error names the document and the field path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller.api.documents import Document
from controller.api.kinds import AMI_ALIAS_FAMILIES, EVICTION_SIGNALS, KINDS, RESERVED_RESOURCES
from controller.api.labels import INTEGER_LABELS, is_restricted_label
from controller.api.quantity import QuantityError, parse_quantity
from controller.api.schema import ValidationIssue, validate

OLD_KARPENTER = {("karpenter.sh/v1beta1", "NodePool"), ("karpenter.k8s.aws/v1beta1", "EC2NodeClass"),
                 ("karpenter.sh/v1alpha5", "Provisioner"), ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate"),
                 ("karpenter.sh/v1beta1", "NodeClaim"), ("karpenter.sh/v1alpha5", "Machine")}
RESTRICTED_TAG_PREFIXES = ("kubernetes.io/cluster/",)
RESTRICTED_TAGS = ("karpenter.sh/nodepool", "karpenter.sh/nodeclaim", "karpenter.k8s.aws/ec2nodeclass",
                   "eks:eks-cluster-name", "karpenter.sh/managed-by")


@dataclass(frozen=True)
class ValidationError:
    """One problem in one document."""

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

    def __init__(self, errors: list[ValidationError]) -> None:
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = errors


def _requirements(reqs: Any, path: str, out: list[ValidationIssue], nodepool: bool) -> None:
    if not isinstance(reqs, list):
        return
    for i, r in enumerate(reqs):
        if not isinstance(r, dict):
            continue
        p = f"{path}[{i}]"
        key, op, values = r.get("key"), r.get("operator"), r.get("values") or []
        if not isinstance(values, list):
            continue
        if isinstance(key, str) and nodepool and is_restricted_label(key):
            out.append(ValidationIssue(f"{p}.key", f"label {key!r} is restricted"))
        if op == "In" and not values:
            out.append(ValidationIssue(f"{p}.values", "In takes at least one value"))
        if op in ("Exists", "DoesNotExist") and values:
            out.append(ValidationIssue(f"{p}.values", f"{op} takes no values"))
        if op in ("Gt", "Lt", "Gte", "Lte"):
            ints = [v for v in values if isinstance(v, str) and v.lstrip("-").isdigit()]
            if len(values) != 1 or len(ints) != 1:
                out.append(ValidationIssue(f"{p}.values", f"{op} takes exactly one integer"))
            elif int(ints[0]) < 0:
                out.append(ValidationIssue(f"{p}.values", f"{op} takes a non-negative integer"))
        elif op in ("In", "NotIn") and isinstance(key, str) and key in INTEGER_LABELS:
            bad = [v for v in values if not (isinstance(v, str) and v.isdigit())]
            if bad:
                out.append(ValidationIssue(f"{p}.values", f"{key} has integer values, got {bad}"))
        mv = r.get("minValues")
        if isinstance(mv, int) and op == "In" and mv > len(values):
            out.append(ValidationIssue(f"{p}.minValues", f"minValues {mv} is more than the {len(values)} value(s) "
                                                         "given for In"))


def _nodepool(raw: dict[str, Any], out: list[ValidationIssue]) -> None:
    spec = raw.get("spec") or {}
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    _requirements(tspec.get("requirements"), "spec.template.spec.requirements", out, nodepool=True)
    labels = (template.get("metadata") or {}).get("labels") or {}
    if isinstance(labels, dict):
        for k in labels:
            if is_restricted_label(str(k)):
                out.append(ValidationIssue(f"spec.template.metadata.labels[{k}]", f"label {k!r} is restricted"))
    disruption = spec.get("disruption") or {}
    for i, b in enumerate(disruption.get("budgets") or []):
        if isinstance(b, dict) and bool(b.get("schedule")) != bool(b.get("duration")):
            out.append(ValidationIssue(f"spec.disruption.budgets[{i}]",
                                       "schedule and duration must be set together"))
    if disruption.get("consolidationPolicy") == "WhenEmptyOrUnderutilized" and disruption.get(
            "consolidateAfter") is None and "consolidateAfter" in disruption:
        out.append(ValidationIssue("spec.disruption.consolidateAfter", "required"))


def _nodeclaim(raw: dict[str, Any], out: list[ValidationIssue]) -> None:
    _requirements((raw.get("spec") or {}).get("requirements"), "spec.requirements", out, nodepool=False)


def _terms(terms: Any, path: str, fields: tuple[str, ...], out: list[ValidationIssue]) -> None:
    if not isinstance(terms, list):
        return
    for i, t in enumerate(terms):
        if not isinstance(t, dict):
            continue
        p = f"{path}[{i}]"
        present = [f for f in fields if t.get(f)]
        if not present:
            out.append(ValidationIssue(p, f"expected at least one of {', '.join(fields)}, got none"))
        if "id" in present and len(present) > 1:
            out.append(ValidationIssue(f"{p}.id", "id is mutually exclusive with " + ", ".join(
                f for f in present if f != "id")))
        tags = t.get("tags")
        if isinstance(tags, dict):
            if "tags" in t and not tags:
                out.append(ValidationIssue(f"{p}.tags", "empty tag selectors are not allowed"))
            for k, v in tags.items():
                if not k or v in ("", None):
                    out.append(ValidationIssue(f"{p}.tags[{k}]", "empty tag keys or values are not allowed"))


def _ec2nodeclass(raw: dict[str, Any], out: list[ValidationIssue]) -> None:
    spec = raw.get("spec") or {}
    if bool(spec.get("role")) == bool(spec.get("instanceProfile")):
        out.append(ValidationIssue("spec", "must specify exactly one of role, instanceProfile"))
    _terms(spec.get("subnetSelectorTerms"), "spec.subnetSelectorTerms", ("tags", "id"), out)
    _terms(spec.get("securityGroupSelectorTerms"), "spec.securityGroupSelectorTerms", ("tags", "id", "name"), out)
    _terms(spec.get("capacityReservationSelectorTerms"), "spec.capacityReservationSelectorTerms",
           ("tags", "id", "ownerID"), out)
    ami_terms = spec.get("amiSelectorTerms")
    if isinstance(ami_terms, list):
        aliases = [i for i, t in enumerate(ami_terms) if isinstance(t, dict) and t.get("alias")]
        if aliases:
            if len(ami_terms) > 1:
                out.append(ValidationIssue("spec.amiSelectorTerms",
                                           "alias is mutually exclusive with other amiSelectorTerms"))
            for i in aliases:
                t = ami_terms[i]
                others = [k for k in t if k != "alias" and t.get(k)]
                if others:
                    out.append(ValidationIssue(f"spec.amiSelectorTerms[{i}].alias",
                                               f"alias is mutually exclusive with {', '.join(others)}"))
                family, _, version = str(t["alias"]).partition("@")
                if family not in AMI_ALIAS_FAMILIES or not version:
                    out.append(ValidationIssue(f"spec.amiSelectorTerms[{i}].alias",
                                               f"{t['alias']!r} must be <family>@<version> with family one of "
                                               f"{', '.join(AMI_ALIAS_FAMILIES)} and version latest or vX"))
                elif version != "latest" and (not version.startswith("v") or family.startswith("windows")):
                    out.append(ValidationIssue(f"spec.amiSelectorTerms[{i}].alias",
                                               f"version {version!r} must be latest or start with v"
                                               + (" (windows takes only latest)" if family.startswith("windows")
                                                  else "")))
        else:
            _terms(ami_terms, "spec.amiSelectorTerms", ("tags", "id", "name", "alias", "ssmParameter"), out)
            if not spec.get("amiFamily"):
                out.append(ValidationIssue("spec.amiFamily", "required when amiSelectorTerms has no alias"))
    tags = spec.get("tags")
    if isinstance(tags, dict):
        for k in tags:
            if str(k).startswith(RESTRICTED_TAG_PREFIXES) or k in RESTRICTED_TAGS:
                out.append(ValidationIssue(f"spec.tags[{k}]", f"tag {k!r} is restricted (Karpenter sets it)"))
    bdms = spec.get("blockDeviceMappings")
    if isinstance(bdms, list) and sum(1 for b in bdms if isinstance(b, dict) and b.get("rootVolume")) > 1:
        out.append(ValidationIssue("spec.blockDeviceMappings", "must have only one blockDeviceMapping with "
                                                               "rootVolume"))
    for i, b in enumerate(bdms if isinstance(bdms, list) else []):
        size = (b.get("ebs") or {}).get("volumeSize") if isinstance(b, dict) else None
        message = volume_size_error(size) if size is not None else None
        if message:
            out.append(ValidationIssue(f"spec.blockDeviceMappings[{i}].ebs.volumeSize", message))
    kubelet = spec.get("kubelet") or {}
    if isinstance(kubelet, dict):
        for f in ("evictionHard", "evictionSoft", "evictionSoftGracePeriod"):
            for k in (kubelet.get(f) or {}):
                if k not in EVICTION_SIGNALS:
                    out.append(ValidationIssue(f"spec.kubelet.{f}[{k}]", f"{k!r} is not one of "
                                                                          f"{', '.join(EVICTION_SIGNALS)}"))
        for f in ("kubeReserved", "systemReserved"):
            for k in (kubelet.get(f) or {}):
                if k not in RESERVED_RESOURCES:
                    out.append(ValidationIssue(f"spec.kubelet.{f}[{k}]", f"{k!r} is not one of "
                                                                          f"{', '.join(RESERVED_RESOURCES)}"))
                elif _negative((kubelet.get(f) or {})[k]):
                    out.append(ValidationIssue(f"spec.kubelet.{f}[{k}]", "must not be negative"))
        soft, grace = set(kubelet.get("evictionSoft") or {}), set(kubelet.get("evictionSoftGracePeriod") or {})
        if soft != grace:
            out.append(ValidationIssue("spec.kubelet.evictionSoftGracePeriod",
                                       "evictionSoft and evictionSoftGracePeriod must name the same signals"))
        high, low = kubelet.get("imageGCHighThresholdPercent"), kubelet.get("imageGCLowThresholdPercent")
        if isinstance(high, int) and isinstance(low, int) and high <= low:
            out.append(ValidationIssue("spec.kubelet.imageGCHighThresholdPercent",
                                       "must be greater than imageGCLowThresholdPercent"))


def _negative(value: Any) -> bool:
    try:
        return parse_quantity(value) < 0
    except QuantityError:
        return False  # the schema reports what is not a quantity


def volume_size_error(size: Any) -> str | None:
    """An EBS volume is at least 1Gi (EC2 takes whole GiB; a smaller size would launch with VolumeSize 0)."""
    try:
        if parse_quantity(size) < 2**30:
            return f"{str(size)[:40]!r} is less than 1Gi, the smallest EBS volume"
    except QuantityError:
        return None  # the schema reports what is not a quantity
    return None


RULES = {"NodePool": _nodepool, "NodeClaim": _nodeclaim, "EC2NodeClass": _ec2nodeclass}


def validate_document(doc: Document) -> list[ValidationError]:
    """Every error in a Karpenter v1 document ([] when valid, and for kinds that are not Karpenter's)."""
    key = (doc.api_version, doc.kind)
    if key in OLD_KARPENTER:
        return [ValidationError(doc.ref, "apiVersion", f"{doc.api_version} {doc.kind} is not served by Karpenter v1: "
                                                       "run `karpy convert` to get the v1 form")]
    schema = KINDS.get(key)
    if schema is None:
        if doc.kind in RULES and doc.api_version.startswith(("karpenter.sh/", "karpenter.k8s.aws/")):
            return [ValidationError(doc.ref, "apiVersion", f"unknown version {doc.api_version!r} for {doc.kind}")]
        return []
    issues: list[ValidationIssue] = []
    validate(doc.raw, schema, "", issues)
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
            out.append(ValidationError(doc.ref, i.path, i.message))
    return out
