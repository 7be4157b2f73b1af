"""AWSCloudProvider: discovery, AMIs, instance profiles, launch templates and CreateFleet put together."""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError
from cachetools import TTLCache

from controller.api import labels as L
from controller.catalog.types import InstanceType
from controller.cloud.aws import instances
from controller.cloud.aws.amis import AMI, ARCHITECTURES, resolve
from controller.cloud.aws.capacityreservations import ReservationAvailability, with_reserved_offerings
from controller.cloud.aws.discovery import (
    SecurityGroup,
    Subnet,
    discover_security_groups,
)
from controller.cloud.aws.errors import LaunchError, LaunchTemplateNotFoundError, NodeClaimNotFoundError
from controller.cloud.aws.fleet import Override, launch
from controller.cloud.aws.instanceprofiles import InstanceProfiles
from controller.cloud.aws.instancetypes import InstanceTypeProvider
from controller.cloud.aws.launchtemplates import (
    BlockDeviceError,
    LaunchTemplateSpec,
    bdm_request,
    block_device_mappings,
    ensure,
)
from controller.cloud.aws.subnets import SubnetProvider
from controller.cloud.aws.tags import NODECLAIM, matches, owner_tags, ownership_filters, ownership_tags
from controller.cloud.aws.unavailable import UnavailableOfferings
from controller.cloud.aws.userdata import RENDERERS, ClusterInfo, MissingClusterFactError, NodeSettings
from controller.cloud.errors import NodeClassNotReadyError
from controller.cloud.provider import LaunchedNode, LaunchRequest, NodeClass

DISCOVERY_TTL_SECONDS = 60.0
MAX_DISCOVERED = 3 * 1024  # three entries per EC2NodeClass
MAX_RESERVED_INSTANCES = 100_000
RESERVED_INSTANCE_TTL_SECONDS = 86_400.0


def resolved_from_status(nodeclass: NodeClass) -> tuple[list[Subnet], list[SecurityGroup], list[AMI],
                                                        str] | None:
    """What the status controller resolved: the subnets of status.subnets (ordered by free IPs, most first; their
    counts are the SubnetProvider's), the security groups, the AMIs by architecture and the instance profile; None
    unless all are there."""
    profile = nodeclass.status_instance_profile or nodeclass.instance_profile or ""
    subnets = [Subnet(s.id, s.zone, s.zone_id, 0) for s in nodeclass.subnets]
    groups = [SecurityGroup(g.id, g.name) for g in nodeclass.security_groups]
    amis = [AMI(a.id, a.name, arch, "", tuple(r for r in a.requirements if r[0] != L.ARCH))
            for a in nodeclass.amis for arch in a.architectures if arch in ARCHITECTURES.values()]
    if not (subnets and groups and amis and profile):
        return None
    return subnets, groups, amis, profile


class AWSCloudProvider:
    """The CloudProvider for EC2."""

    def __init__(self, *, cluster: ClusterInfo, region: str, k8s_version: str, ec2: Any, ssm: Any, iam: Any,
                 instance_types: InstanceTypeProvider, unavailable: UnavailableOfferings | None = None,
                 clock: Callable[[], float] = time.monotonic, subnets: SubnetProvider | None = None,
                 facts: Callable[[], ClusterInfo] | None = None, reserved_capacity: bool = True,
                 reservations: ReservationAvailability | None = None) -> None:
        self.cluster = cluster
        # the cluster facts bootstrap reads at each launch (clusterfacts.ClusterFacts.get: learned, then cached)
        self.facts: Callable[[], ClusterInfo] = facts or (lambda: self.cluster)
        self.region = region
        self.k8s_version = k8s_version
        self.ec2, self.ssm = ec2, ssm
        self.profiles = InstanceProfiles(iam, cluster.name, region)
        self.instance_types = instance_types
        self.unavailable = unavailable or instance_types.unavailable
        self.clock = clock
        self.subnets = subnets or SubnetProvider(clock)  # free addresses per subnet, shared with the status controller
        # the ReservedCapacity gate: reserved offerings from status.capacityReservations, targeted launch templates
        self.reserved_capacity = reserved_capacity
        # room left per capacity reservation: synced by the status controller, counted down by launches
        self.reservations = reservations or ReservationAvailability()
        # providerID -> the capacity reservation its instance runs in (as last seen), so that a deleted one gives its
        # room back (Karpenter's MarkTerminated); a day bounds what a vanished instance leaves here
        self._reserved_of: TTLCache[str, str] = TTLCache(MAX_RESERVED_INSTANCES, RESERVED_INSTANCE_TTL_SECONDS,
                                                         timer=clock)
        # subnets, security groups and AMIs resolved here (when the status controller has not), for a minute
        self._discovered: TTLCache[str, Any] = TTLCache(MAX_DISCOVERED, DISCOVERY_TTL_SECONDS, timer=clock)
        self._discovered_lock = threading.Lock()
        self._templates: set[str] = set()  # launch templates known to exist (recreated if CreateFleet says not)

    def _cached(self, key: str, make: Callable[[], Any]) -> Any:
        """The discovery result under key, made anew when older than a minute."""
        with self._discovered_lock:
            hit = self._discovered.get(key)
        if hit is not None:
            return hit
        value = make()  # outside the lock: an EC2 call must not hold up launches for other node classes
        with self._discovered_lock:
            self._discovered[key] = value
        return value

    def get_instance_types(self, nodeclass: NodeClass) -> list[InstanceType]:
        """Instance types and offerings for the node class's kubelet settings and AMI family, with a reserved offering
        per capacity reservation of its status (ReservedCapacity gate)."""
        family = nodeclass.ami_family
        its = self.instance_types.list(kubelet=dict(nodeclass.kubelet) or None,
                                       ami_family=family if family != "custom" else "al2023")
        if not self.reserved_capacity or not nodeclass.capacity_reservations:
            return its
        return with_reserved_offerings(its, nodeclass.capacity_reservations, self.reservations,
                                       self.instance_types.pricing.on_demand_price,
                                       {s.zone: s.zone_id for s in nodeclass.subnets if s.zone_id})

    def create(self, request: LaunchRequest, nodeclass: NodeClass) -> LaunchedNode:
        """Make or reuse launch templates from the node class's resolved status (resolving here only when the status
        is empty, as for `karpy simulate` and tests without the status controller), and launch through CreateFleet."""
        name = nodeclass.name
        family = nodeclass.ami_family
        render = RENDERERS.get(family)
        if render is None:
            raise LaunchError(f"EC2NodeClass {name}: unknown AMI family {family!r}")
        devices = block_device_mappings(family, [dict(b) for b in nodeclass.block_device_mappings])
        for b in devices:  # before any AWS call: a volume EC2 cannot take fails the launch with the field at fault
            try:
                bdm_request(b)
            except BlockDeviceError as e:
                raise LaunchError(f"EC2NodeClass {name}: blockDeviceMappings {b.get('deviceName')}: {e}") from None
        subnets, groups, amis, profile = self._resolved(nodeclass)
        node = NodeSettings(labels=dict(request.labels), taints=[*request.taints, *request.startup_taints],
                            kubelet=dict(nodeclass.kubelet))
        try:
            user_data = render(self.facts(), node, nodeclass.user_data)
        except MissingClusterFactError as e:
            raise NodeClassNotReadyError(f"EC2NodeClass {name}: {e}") from None
        owned = ownership_tags(self.cluster.name, nodeclass=name)
        its = self.get_instance_types(nodeclass)
        # per instance type the first AMI whose requirements it meets (a GPU type gets the nvidia image), one
        # launch template per AMI used, as Karpenter's MapToInstanceTypes groups them
        templates: dict[str, LaunchTemplateSpec] = {}
        image_of: dict[str, str] = {}
        for it in its:
            ami = next((a for a in amis if a.serves(it.labels)), None)
            if ami is None:
                continue
            image_of[it.name] = ami.id
            templates.setdefault(ami.id, LaunchTemplateSpec(
                image_id=ami.id, user_data=user_data, security_group_ids=tuple(g.id for g in groups),
                instance_profile=profile, metadata_options=dict(nodeclass.metadata_options),
                block_device_mappings=devices, tags={**nodeclass.tags, **owned},
                detailed_monitoring=nodeclass.detailed_monitoring,
                associate_public_ip=nodeclass.associate_public_ip_address))
        its = [it for it in its if it.name in image_of]
        used: set[str] = set()  # the templates this launch asked for (made again if CreateFleet says they are gone)
        for attempt in (1, 2):

            def template_for(o: Override) -> str:
                """The launch template of an override (made when missing): its type's AMI, and with the
                ReservedCapacity gate the capacity reservation it targets (none for on-demand and spot)."""
                lt = templates[image_of[o.instance_type]]
                if self.reserved_capacity:
                    lt = dataclasses.replace(lt, targeted=True, capacity_reservation_id=o.reservation_id,
                                             capacity_reservation_type=o.reservation_type if o.reservation_id else "",
                                             capacity_reservation_interruptible=o.reservation_interruptible)
                lt_name = lt.name()
                if lt_name not in self._templates:
                    ensure(self.ec2, lt, owned)
                    self._templates.add(lt_name)
                used.add(lt_name)
                return lt_name

            try:
                inst = launch(self.ec2, cluster_name=self.cluster.name, request=request, nodeclass_name=name,
                              instance_types=its, subnets=subnets, launch_template=template_for,
                              unavailable=self.unavailable, user_tags=dict(nodeclass.tags),
                              subnet_provider=self.subnets, reservations=self.reservations)
                if inst.reservation_id:
                    self.reservations.mark_launched(inst.reservation_id)
                return self._describe(inst, its)
            except LaunchTemplateNotFoundError:
                if attempt == 2:
                    raise
                self._templates.difference_update(used)
                used.clear()
        raise AssertionError("unreachable")

    def _resolved(self, nodeclass: NodeClass) -> tuple[list[Subnet], list[SecurityGroup], list[AMI], str]:
        """Subnets, security groups, AMIs and the instance profile: from status when the status controller
        has resolved them, else resolved here (cached for a minute)."""
        name = nodeclass.name
        from_status = resolved_from_status(nodeclass)
        if from_status is not None:
            return from_status
        subnets = self._cached(f"subnets/{name}", lambda: self.subnets.describe(
            self.ec2, [dict(t) for t in nodeclass.subnet_selector_terms]))
        groups = self._cached(f"sgs/{name}", lambda: discover_security_groups(
            self.ec2, [dict(t) for t in nodeclass.security_group_selector_terms]))
        amis = self._cached(f"amis/{name}", lambda: resolve(self.ec2, self.ssm,
                                                             [dict(t) for t in nodeclass.ami_selector_terms],
                                                             self.k8s_version))
        if nodeclass.instance_profile:
            return subnets, groups, amis, nodeclass.instance_profile
        if not nodeclass.role:
            raise LaunchError(f"EC2NodeClass {name}: neither role nor instanceProfile is set")
        return subnets, groups, amis, self.profiles.ensure(name, nodeclass.role)

    def delete_launch_templates(self, nodeclass: str) -> list[str]:
        """Delete the launch templates tagged for this cluster and EC2NodeClass (the node class is going away);
        returns their names."""
        names = []
        paginator = self.ec2.get_paginator("describe_launch_templates")
        for page in paginator.paginate(Filters=ownership_filters(self.cluster.name, nodeclass=nodeclass)):
            for lt in page.get("LaunchTemplates", []):
                tags = {t["Key"]: t["Value"] for t in lt.get("Tags", [])}
                if matches(tags, owner_tags(self.cluster.name, nodeclass=nodeclass)):
                    names.append(lt["LaunchTemplateName"])
        for lt_name in names:
            try:
                self.ec2.delete_launch_template(LaunchTemplateName=lt_name)
            except ClientError as e:
                if e.response["Error"]["Code"] not in ("InvalidLaunchTemplateName.NotFoundException",
                                                       "InvalidLaunchTemplateId.NotFound"):
                    raise
            self._templates.discard(lt_name)
        with self._discovered_lock:
            for key in (f"subnets/{nodeclass}", f"sgs/{nodeclass}", f"amis/{nodeclass}"):
                self._discovered.pop(key, None)
        return names

    def _describe(self, inst: instances.Instance, its: list[InstanceType] | None = None,
                  launch_time: float | None = None) -> LaunchedNode:
        it = next((t for t in its or [] if t.name == inst.instance_type), None)
        labels = dict(it.labels) if it else {L.INSTANCE_TYPE: inst.instance_type}
        labels.update({L.ZONE: inst.zone, L.CAPACITY_TYPE: inst.capacity_type})
        if inst.capacity_type == L.CAPACITY_TYPE_RESERVED and inst.reservation_id:
            self._reserved_of[inst.provider_id] = inst.reservation_id
            # Karpenter's instanceToNodeClaim: the reservation's labels on reserved NodeClaims only
            labels.update({L.CAPACITY_RESERVATION_ID: inst.reservation_id,
                           L.CAPACITY_RESERVATION_TYPE: inst.reservation_type or "default",
                           L.CAPACITY_RESERVATION_INTERRUPTIBLE: str(inst.reservation_interruptible).lower()})
        for key in (L.NODEPOOL, L.EC2NODECLASS):
            if key in inst.tags:
                labels[key] = inst.tags[key]
        return LaunchedNode(provider_id=inst.provider_id, instance_type=inst.instance_type, zone=inst.zone,
                            capacity_type=inst.capacity_type, image_id=inst.image_id, labels=labels,
                            capacity=dict(it.capacity) if it else {}, allocatable=it.allocatable if it else {},
                            launch_time=launch_time, state=inst.state, nodeclaim=inst.tags.get(NODECLAIM, ""))

    def _describe_instances(self, **kwargs: Any) -> list[LaunchedNode]:
        out = []
        for page in self.ec2.get_paginator("describe_instances").paginate(**kwargs):
            for r in page["Reservations"]:
                for d in r["Instances"]:
                    launched = d.get("LaunchTime")
                    out.append(self._describe(instances.from_description(d), launch_time=launched.timestamp()
                                              if isinstance(launched, dt.datetime) else None))
        return out

    def get(self, provider_id: str) -> LaunchedNode:
        """The live machine behind a providerID (NodeClaimNotFoundError when it is gone or terminated)."""
        _, instance_id = instances.parse_provider_id(provider_id)
        try:
            found = self._describe_instances(InstanceIds=[instance_id])
        except ClientError as e:
            if e.response["Error"]["Code"] in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                raise NodeClaimNotFoundError(f"instance {instance_id} not found") from None
            raise
        live = [n for n in found if n.state in instances.LIVE_STATES]
        if not live:
            raise NodeClaimNotFoundError(f"instance {instance_id} is terminated")
        return live[0]

    def list(self) -> list[LaunchedNode]:
        """Every live machine of this cluster that Karpenter launched (owned by the cluster, tagged with a NodePool),
        as Karpenter's garbage collection lists them."""
        return self._describe_instances(Filters=[
            *ownership_filters(self.cluster.name, tag_keys=(L.NODEPOOL,)),
            {"Name": "instance-state-name", "Values": list(instances.LIVE_STATES)}])

    def _drift_view(self, instance_id: str) -> dict[str, Any]:
        """The instance's DescribeInstances entry for drift, from one paginated call over the cluster's instances
        cached for a minute (a NodeClass change re-checks every NodeClaim of it: one call, not one per NodeClaim);
        an instance not in it is described alone. NodeClaimNotFoundError when it is gone."""
        views = self._cached("drift-instances", lambda: {
            str(d["InstanceId"]): d for page in self.ec2.get_paginator("describe_instances").paginate(Filters=[
                *ownership_filters(self.cluster.name, tag_keys=(L.NODEPOOL,)),
                {"Name": "instance-state-name", "Values": list(instances.LIVE_STATES)}])
            for r in page["Reservations"] for d in r["Instances"]})
        if instance_id in views:
            return dict(views[instance_id])
        try:
            found = [d for r in self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
                     for d in r["Instances"]]
        except ClientError as e:
            if e.response["Error"]["Code"] in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                raise NodeClaimNotFoundError(f"instance {instance_id} not found") from None
            raise
        if not found:
            raise NodeClaimNotFoundError(f"instance {instance_id} not found")
        return dict(found[0])

    def is_drifted(self, nodeclaim: Mapping[str, Any], nodeclass: Mapping[str, Any] | None) -> str:
        """The EC2NodeClass side of drift (karpenter-provider-aws's isNodeClassDrifted): the static hash and the AMI
        from the NodeClaim, then the instance's security groups, subnet and capacity reservation from EC2."""
        from controller.cloud.drift import nodeclass_drift

        claim = dict(nodeclaim)
        klass = dict(nodeclass) if nodeclass is not None else None
        early = nodeclass_drift(claim, klass)  # the hash and the AMI need no EC2 call
        if early or klass is None:
            return early
        pid = str((claim.get("status") or {}).get("providerID") or "")
        if not pid:
            return ""
        _, instance_id = instances.parse_provider_id(pid)
        d = self._drift_view(instance_id)
        groups = [str(g["GroupId"]) for g in d.get("SecurityGroups") or [] if g.get("GroupId")]
        return nodeclass_drift(claim, klass, subnet_id=str(d.get("SubnetId") or ""), security_group_ids=groups,
                               reservation_id=str(d.get("CapacityReservationId") or ""))

    def delete(self, provider_id: str) -> None:
        """Terminate the machine. Once it is gone (NodeClaimNotFoundError), the capacity reservation it ran in has
        its room back until EC2's next count (Karpenter's MarkTerminated)."""
        try:
            instances.delete(self.ec2, provider_id)
        except NodeClaimNotFoundError:
            rid = self._reserved_of.pop(provider_id, "")
            if rid:
                self.reservations.mark_terminated(rid)
            raise
