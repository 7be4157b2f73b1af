"""Typed NodePool, NodeClaim and EC2NodeClass, built from validated documents with Karpenter's defaults applied.

The models keep the defaulted manifest (`to_dict()` returns it) and expose the fields the controller reads as typed
attributes, so there is one source of truth: the schema in controller.api.kinds.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from controller.api.documents import Document
from controller.api.kinds import KINDS
from controller.api.quantity import resources_from_dict
from controller.api.schema import apply_defaults
from controller.api.taints import Taint
from controller.api.validation import InvalidDocument, validate_document


@dataclass(frozen=True)
class NodeSelectorRequirementWithMinValues:
    """A requirement of a NodePool or NodeClaim."""

    key: str
    operator: str
    values: list[str] = field(default_factory=list)
    min_values: int | None = None


@dataclass(frozen=True)
class NodeClassReference:
    """Which node class a NodePool or NodeClaim uses."""

    group: str
    kind: str
    name: str


@dataclass(frozen=True)
class Budget:
    """A disruption budget."""

    nodes: str
    schedule: str | None = None
    duration: str | None = None
    reasons: list[str] | None = None


@dataclass(frozen=True)
class Disruption:
    """A NodePool's disruption settings."""

    consolidation_policy: str
    consolidate_after: str
    budgets: list[Budget]


@dataclass(frozen=True)
class Condition:
    """A status condition."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""


def _reqs(items: list[dict[str, Any]]) -> list[NodeSelectorRequirementWithMinValues]:
    return [NodeSelectorRequirementWithMinValues(r["key"], r["operator"], [str(v) for v in r.get("values") or []],
                                                 r.get("minValues")) for r in items]


def _taints(items: list[dict[str, Any]] | None) -> list[Taint]:
    return [Taint.from_dict(t) for t in items or []]


def _conditions(status: dict[str, Any]) -> list[Condition]:
    return [Condition(c["type"], c["status"], c.get("reason", ""), c.get("message", ""),
                      c.get("lastTransitionTime", "")) for c in status.get("conditions") or []]


@dataclass
class NodePool:
    """karpenter.sh/v1 NodePool."""

    name: str
    template_labels: dict[str, str]
    template_annotations: dict[str, str]
    requirements: list[NodeSelectorRequirementWithMinValues]
    taints: list[Taint]
    startup_taints: list[Taint]
    node_class_ref: NodeClassReference
    expire_after: str
    termination_grace_period: str | None
    disruption: Disruption
    limits: dict[str, int]
    weight: int | None
    replicas: int | None
    conditions: list[Condition]
    manifest: dict[str, Any] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The full v1 manifest with defaults filled in."""
        return copy.deepcopy(self.manifest)


@dataclass
class NodeClaim:
    """karpenter.sh/v1 NodeClaim."""

    name: str
    labels: dict[str, str]
    requirements: list[NodeSelectorRequirementWithMinValues]
    taints: list[Taint]
    startup_taints: list[Taint]
    requests: dict[str, int]
    node_class_ref: NodeClassReference
    expire_after: str
    termination_grace_period: str | None
    provider_id: str
    node_name: str
    conditions: list[Condition]
    manifest: dict[str, Any] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The full v1 manifest with defaults filled in."""
        return copy.deepcopy(self.manifest)


@dataclass
class EC2NodeClass:
    """karpenter.k8s.aws/v1 EC2NodeClass."""

    name: str
    role: str | None
    instance_profile: str | None
    ami_alias: str | None
    ami_family: str
    subnet_selector_terms: list[dict[str, Any]]
    security_group_selector_terms: list[dict[str, Any]]
    ami_selector_terms: list[dict[str, Any]]
    capacity_reservation_selector_terms: list[dict[str, Any]]
    kubelet: dict[str, Any]
    user_data: str | None
    tags: dict[str, str]
    block_device_mappings: list[dict[str, Any]]
    metadata_options: dict[str, Any]
    associate_public_ip_address: bool | None
    detailed_monitoring: bool | None
    instance_store_policy: str | None
    network_interfaces: list[dict[str, Any]]
    placement_group_selector: dict[str, Any] | None
    cpu_options: dict[str, Any] | None
    connection_tracking: dict[str, Any] | None
    ip_prefix_count: int | None
    conditions: list[Condition]
    manifest: dict[str, Any] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The full v1 manifest with defaults filled in."""
        return copy.deepcopy(self.manifest)


def ami_family(spec: dict[str, Any]) -> str:
    """The AMI family an EC2NodeClass spec resolves to: its alias's family (al2023@latest -> al2023), else amiFamily
    lowercased, else custom."""
    for term in spec.get("amiSelectorTerms") or []:
        if term.get("alias"):
            return str(term["alias"]).split("@", 1)[0]
    return str(spec.get("amiFamily") or "custom").lower()


def _checked(doc: Document, kind: str, validated: bool) -> dict[str, Any]:
    if doc.kind != kind:
        raise ValueError(f"{doc.ref}: expected a {kind}")
    errors = [] if validated else validate_document(doc)
    if errors:
        raise InvalidDocument(errors)
    schema = KINDS[(doc.api_version, doc.kind)]
    return dict(apply_defaults(copy.deepcopy(doc.raw), schema))


def _ref(raw: dict[str, Any]) -> NodeClassReference:
    return NodeClassReference(raw["group"], raw["kind"], raw["name"])


def parse_nodepool(doc: Document, *, validated: bool = False) -> NodePool:
    """A validated NodePool with defaults; InvalidDocument lists every error (`validated`: the caller has validated
    the document already, so it is not validated twice)."""
    return nodepool_from_manifest(_checked(doc, "NodePool", validated), doc.name)


def nodepool_from_manifest(m: dict[str, Any], name: str | None = None) -> NodePool:
    """The typed view of a valid NodePool manifest with its defaults applied (kept as `manifest`, not copied)."""
    spec = m["spec"]
    tmpl = spec["template"]
    tspec = tmpl["spec"]
    meta = tmpl.get("metadata") or {}
    d = spec.get("disruption") or {}
    return NodePool(
        name=name or str((m.get("metadata") or {}).get("name") or ""),
        template_labels=dict(meta.get("labels") or {}),
        template_annotations=dict(meta.get("annotations") or {}), requirements=_reqs(tspec.get("requirements") or []),
        taints=_taints(tspec.get("taints")), startup_taints=_taints(tspec.get("startupTaints")),
        node_class_ref=_ref(tspec["nodeClassRef"]), expire_after=tspec["expireAfter"],
        termination_grace_period=tspec.get("terminationGracePeriod"),
        disruption=Disruption(d["consolidationPolicy"], d["consolidateAfter"],
                              [Budget(b["nodes"], b.get("schedule"), b.get("duration"), b.get("reasons"))
                               for b in d["budgets"]]),
        limits=resources_from_dict(spec.get("limits")), weight=spec.get("weight"), replicas=spec.get("replicas"),
        conditions=_conditions(m.get("status") or {}), manifest=m)


def parse_nodeclaim(doc: Document) -> NodeClaim:
    """A validated NodeClaim with defaults; InvalidDocument lists every error."""
    m = _checked(doc, "NodeClaim", False)
    spec, status = m["spec"], m.get("status") or {}
    return NodeClaim(
        name=doc.name, labels=dict((m.get("metadata") or {}).get("labels") or {}),
        requirements=_reqs(spec.get("requirements") or []), taints=_taints(spec.get("taints")),
        startup_taints=_taints(spec.get("startupTaints")),
        requests=resources_from_dict((spec.get("resources") or {}).get("requests")),
        node_class_ref=_ref(spec["nodeClassRef"]), expire_after=spec["expireAfter"],
        termination_grace_period=spec.get("terminationGracePeriod"), provider_id=status.get("providerID", ""),
        node_name=status.get("nodeName", ""), conditions=_conditions(status), manifest=m)


def parse_ec2nodeclass(doc: Document, *, validated: bool = False) -> EC2NodeClass:
    """A validated EC2NodeClass with defaults; InvalidDocument lists every error (`validated` as for NodePools)."""
    return ec2nodeclass_from_manifest(_checked(doc, "EC2NodeClass", validated), doc.name)


def ec2nodeclass_from_manifest(m: dict[str, Any], name: str | None = None) -> EC2NodeClass:
    """The typed view of a valid EC2NodeClass manifest with its defaults applied (kept as `manifest`)."""
    spec = m["spec"]
    alias = next((t["alias"] for t in spec["amiSelectorTerms"] if t.get("alias")), None)
    family = ami_family(spec)
    return EC2NodeClass(
        name=name or str((m.get("metadata") or {}).get("name") or ""), role=spec.get("role"),
        instance_profile=spec.get("instanceProfile"), ami_alias=alias,
        ami_family=family, subnet_selector_terms=spec["subnetSelectorTerms"],
        security_group_selector_terms=spec["securityGroupSelectorTerms"],
        ami_selector_terms=spec["amiSelectorTerms"],
        capacity_reservation_selector_terms=spec.get("capacityReservationSelectorTerms") or [],
        kubelet=spec.get("kubelet") or {}, user_data=spec.get("userData"), tags=spec.get("tags") or {},
        block_device_mappings=spec.get("blockDeviceMappings") or [], metadata_options=spec["metadataOptions"],
        associate_public_ip_address=spec.get("associatePublicIPAddress"),
        detailed_monitoring=spec.get("detailedMonitoring"), instance_store_policy=spec.get("instanceStorePolicy"),
        network_interfaces=spec.get("networkInterfaces") or [],
        placement_group_selector=spec.get("placementGroupSelector"),
        cpu_options=spec.get("cpuOptions"), connection_tracking=spec.get("connectionTracking"),
        ip_prefix_count=spec.get("ipPrefixCount"), conditions=_conditions(m.get("status") or {}), manifest=m)
