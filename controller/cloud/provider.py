"""The CloudProvider protocol: what the controller needs from a cloud, whatever the cloud.

Typed objects cross the seam: the lifecycle controller and the provisioner convert the NodeClaim and EC2NodeClass
manifests once (LaunchRequest.from_manifest, NodeClass.from_manifest) and the providers read fields, never JSON.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller.api import labels as L
from controller.api.models import Taint, ami_family
from controller.api.quantity import resources_from_dict
from controller.catalog.types import InstanceType
from controller.scheduling.requirements import Requirements


def _taints(items: Any) -> tuple[Taint, ...]:
    """A NodeClaim's taints in the API's form as the shared Taint type."""
    return tuple(Taint.from_dict(t) for t in items or [])


@dataclass(frozen=True)
class LaunchRequest:
    """What to launch for a NodeClaim: its name and uid (the idempotency key), NodePool, labels, requirements (the
    instance types, zones and capacity types it allows), requests, taints and node class."""

    name: str
    uid: str = ""
    nodepool: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    requirements: Requirements = field(default_factory=Requirements)
    requests: Mapping[str, int] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    nodeclass: str = ""

    @classmethod
    def from_manifest(cls, nodeclaim: Mapping[str, Any]) -> LaunchRequest:
        """The request for a karpenter.sh/v1 NodeClaim manifest (QuantityError for unreadable requests)."""
        meta = nodeclaim.get("metadata") or {}
        spec = nodeclaim.get("spec") or {}
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        return cls(name=str(meta["name"]), uid=str(meta.get("uid") or ""), nodepool=labels.get(L.NODEPOOL, ""),
                   labels=labels,
                   requirements=Requirements.from_node_selector_requirements(spec.get("requirements") or []),
                   requests=resources_from_dict((spec.get("resources") or {}).get("requests")),
                   taints=_taints(spec.get("taints")), startup_taints=_taints(spec.get("startupTaints")),
                   nodeclass=str((spec.get("nodeClassRef") or {}).get("name") or ""))


@dataclass(frozen=True)
class ResolvedSubnet:
    """A subnet the node class's status controller resolved."""

    id: str
    zone: str
    zone_id: str = ""


@dataclass(frozen=True)
class ResolvedSecurityGroup:
    """A security group the node class's status controller resolved."""

    id: str
    name: str = ""


@dataclass(frozen=True)
class ResolvedAMI:
    """An AMI the node class's status controller resolved, with the architectures its requirements allow."""

    id: str
    name: str = ""
    architectures: tuple[str, ...] = ()
    # every requirement of status.amis[].requirements as (key, operator, values), the architecture's included
    requirements: tuple[tuple[str, str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class ResolvedCapacityReservation:
    """A capacity reservation the node class's status controller resolved (status.capacityReservations)."""

    id: str
    zone: str
    instance_type: str
    reservation_type: str = "default"  # default | capacity-block
    interruptible: bool = False
    state: str = "active"  # active | expiring
    end_time: str = ""


@dataclass(frozen=True)
class NodeClass:
    """An EC2NodeClass as a cloud provider reads it: the launch settings of its spec and what its status controller
    resolved (subnets ordered by free IPs, security groups, AMIs, instance profile; empty until resolved)."""

    name: str
    ami_family: str = "al2023"
    kubelet: Mapping[str, Any] = field(default_factory=dict)
    user_data: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    block_device_mappings: tuple[Mapping[str, Any], ...] = ()
    metadata_options: Mapping[str, Any] = field(default_factory=dict)
    detailed_monitoring: bool = False
    associate_public_ip_address: bool | None = None
    role: str | None = None
    instance_profile: str | None = None
    subnet_selector_terms: tuple[Mapping[str, Any], ...] = ()
    security_group_selector_terms: tuple[Mapping[str, Any], ...] = ()
    ami_selector_terms: tuple[Mapping[str, Any], ...] = ()
    subnets: tuple[ResolvedSubnet, ...] = ()
    security_groups: tuple[ResolvedSecurityGroup, ...] = ()
    amis: tuple[ResolvedAMI, ...] = ()
    status_instance_profile: str = ""
    capacity_reservations: tuple[ResolvedCapacityReservation, ...] = ()

    @classmethod
    def from_manifest(cls, nodeclass: Mapping[str, Any]) -> NodeClass:
        """The view of a karpenter.k8s.aws/v1 EC2NodeClass manifest (spec and status)."""
        spec = nodeclass.get("spec") or {}
        status = nodeclass.get("status") or {}
        amis = []
        for a in status.get("amis") or []:
            if not a.get("id"):
                continue
            archs = tuple(str(v) for r in a.get("requirements") or []
                          if r.get("key") == L.ARCH and r.get("operator") == "In" for v in r.get("values") or [])
            reqs = tuple((str(r.get("key") or ""), str(r.get("operator") or ""),
                          tuple(str(v) for v in r.get("values") or [])) for r in a.get("requirements") or [])
            amis.append(ResolvedAMI(str(a["id"]), str(a.get("name") or ""), archs, reqs))
        return cls(
            name=str(nodeclass["metadata"]["name"]), ami_family=ami_family(spec),
            kubelet=dict(spec.get("kubelet") or {}),
            user_data=spec.get("userData"), tags=dict(spec.get("tags") or {}),
            block_device_mappings=tuple(spec.get("blockDeviceMappings") or ()),
            metadata_options=dict(spec.get("metadataOptions") or {}),
            detailed_monitoring=bool(spec.get("detailedMonitoring")),
            associate_public_ip_address=spec.get("associatePublicIPAddress"), role=spec.get("role"),
            instance_profile=spec.get("instanceProfile"),
            subnet_selector_terms=tuple(spec.get("subnetSelectorTerms") or ()),
            security_group_selector_terms=tuple(spec.get("securityGroupSelectorTerms") or ()),
            ami_selector_terms=tuple(spec.get("amiSelectorTerms") or ()),
            subnets=tuple(ResolvedSubnet(str(s["id"]), str(s["zone"]), str(s.get("zoneID") or ""))
                          for s in status.get("subnets") or [] if s.get("id") and s.get("zone")),
            security_groups=tuple(ResolvedSecurityGroup(str(g["id"]), str(g.get("name") or ""))
                                  for g in status.get("securityGroups") or [] if g.get("id")),
            amis=tuple(amis), status_instance_profile=str(status.get("instanceProfile") or ""),
            capacity_reservations=tuple(
                ResolvedCapacityReservation(
                    str(r["id"]), str(r.get("availabilityZone") or ""), str(r.get("instanceType") or ""),
                    str(r.get("reservationType") or "default"), r.get("interruptible") is True,
                    str(r.get("state") or "active"), str(r.get("endTime") or ""))
                for r in status.get("capacityReservations") or []
                if isinstance(r, dict) and r.get("id") and r.get("instanceType")))


@dataclass(frozen=True)
class LaunchedNode:
    """What a launch produced, for the NodeClaim's status and the Node's labels."""

    provider_id: str
    instance_type: str
    zone: str
    capacity_type: str
    image_id: str
    labels: dict[str, str] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)
    allocatable: dict[str, int] = field(default_factory=dict)
    # when the machine was launched (epoch seconds; None when the cloud does not say) and its cloud state
    launch_time: float | None = None
    state: str = ""
    # the NodeClaim the machine was launched for (the karpenter.sh/nodeclaim tag), for garbage collection
    nodeclaim: str = ""


class CloudProvider(Protocol):
    """Launch, look up, list and delete the machines behind NodeClaims; list instance types for a node class."""

    def create(self, request: LaunchRequest, nodeclass: NodeClass) -> LaunchedNode:
        """Launch (idempotently, per request.name) the machine for a NodeClaim with its node class."""
        ...

    def get(self, provider_id: str) -> LaunchedNode:
        """The machine behind a providerID (NodeClaimNotFoundError when gone)."""
        ...

    def list(self) -> list[LaunchedNode]:
        """Every machine this cluster's karpy launched (for garbage collection)."""
        ...

    def delete(self, provider_id: str) -> None:
        """Terminate the machine (NodeClaimNotFoundError when already gone)."""
        ...

    def get_instance_types(self, nodeclass: NodeClass) -> builtins.list[InstanceType]:
        """Instance types with offerings as seen through a node class's kubelet settings."""
        ...

    def is_drifted(self, nodeclaim: Mapping[str, Any], nodeclass: Mapping[str, Any] | None) -> str:
        """Why the NodeClaim's machine drifted from its node class ("" when it has not): NodeClassDrift, AMIDrift,
        SecurityGroupDrift, SubnetDrift, CapacityReservationDrift (NodeClaimNotFoundError when the machine is gone)."""
        ...
