"""Launch templates: one per distinct resolved configuration, named by the hash of its content, reused while it
exists and recreated when someone deleted it."""

from __future__ import annotations

import base64
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

NAME_PREFIX = "karpenter.k8s.aws/"


@dataclass(frozen=True)
class LaunchTemplateSpec:
    """Everything a node's launch template is made of."""

    image_id: str
    user_data: str
    security_group_ids: tuple[str, ...]
    instance_profile: str
    metadata_options: dict[str, Any] = field(default_factory=dict)
    block_device_mappings: tuple[dict[str, Any], ...] = ()
    tags: dict[str, str] = field(default_factory=dict)
    detailed_monitoring: bool = False
    associate_public_ip: bool | None = None
    # with the ReservedCapacity gate (Karpenter's targeted launch mode) every template says which capacity
    # reservation it launches into: one (capacity-reservations-only, with its market for capacity blocks and
    # interruptible reservations) or none (so on-demand and spot launches never draw from open reservations)
    targeted: bool = False
    capacity_reservation_id: str = ""
    capacity_reservation_type: str = ""
    capacity_reservation_interruptible: bool = False

    def data(self) -> dict[str, Any]:
        """The LaunchTemplateData of CreateLaunchTemplate."""
        d: dict[str, Any] = {
            "ImageId": self.image_id,
            "UserData": base64.b64encode(self.user_data.encode()).decode(),
            "IamInstanceProfile": {"Name": self.instance_profile},
            "MetadataOptions": {"HttpEndpoint": self.metadata_options.get("httpEndpoint", "enabled"),
                                "HttpProtocolIpv6": self.metadata_options.get("httpProtocolIPv6", "disabled"),
                                "HttpPutResponseHopLimit": int(self.metadata_options.get("httpPutResponseHopLimit", 1)),
                                "HttpTokens": self.metadata_options.get("httpTokens", "required")},
            "Monitoring": {"Enabled": self.detailed_monitoring},
            "TagSpecifications": [{"ResourceType": rt, "Tags": [{"Key": k, "Value": v}
                                                                for k, v in sorted(self.tags.items())]}
                                  for rt in ("volume", "network-interface")] if self.tags else [],
        }
        if self.associate_public_ip is None:
            d["SecurityGroupIds"] = list(self.security_group_ids)
        else:
            d["NetworkInterfaces"] = [{"DeviceIndex": 0, "AssociatePublicIpAddress": self.associate_public_ip,
                                       "Groups": list(self.security_group_ids)}]
        if self.block_device_mappings:
            d["BlockDeviceMappings"] = [bdm_request(b) for b in self.block_device_mappings]
        if self.targeted:
            if self.capacity_reservation_id:
                d["CapacityReservationSpecification"] = {
                    "CapacityReservationPreference": "capacity-reservations-only",
                    "CapacityReservationTarget": {"CapacityReservationId": self.capacity_reservation_id}}
            else:
                d["CapacityReservationSpecification"] = {"CapacityReservationPreference": "none"}
            if self.capacity_reservation_type == "capacity-block":
                d["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
            elif self.capacity_reservation_interruptible:
                d["InstanceMarketOptions"] = {"MarketType": "interruptible-capacity-reservation"}
        return d

    def name(self) -> str:
        """karpenter.k8s.aws/<hash of the content>: equal configurations share one template."""
        digest = hashlib.sha256(json.dumps(self.data(), sort_keys=True).encode()).hexdigest()[:20]
        return NAME_PREFIX + digest


# Karpenter's default EBS volume (amifamily.DefaultEBS) and where each AMI family puts it when the EC2NodeClass has no
# blockDeviceMappings; Custom has none, so the AMI's own mappings apply
DEFAULT_EBS: dict[str, Any] = {"encrypted": True, "volumeType": "gp3", "volumeSize": "20Gi"}
DEFAULT_BLOCK_DEVICE_MAPPINGS: dict[str, tuple[dict[str, Any], ...]] = {
    "al2": ({"deviceName": "/dev/xvda", "ebs": DEFAULT_EBS},),
    "al2023": ({"deviceName": "/dev/xvda", "ebs": DEFAULT_EBS},),
    # Bottlerocket: a small OS volume and the 20Gi data volume that holds images and pods
    "bottlerocket": ({"deviceName": "/dev/xvda", "ebs": {**DEFAULT_EBS, "volumeSize": "4Gi"}},
                     {"deviceName": "/dev/xvdb", "ebs": DEFAULT_EBS}),
    "windows2019": ({"deviceName": "/dev/sda1", "ebs": {**DEFAULT_EBS, "volumeSize": "50Gi"}},),
    "windows2022": ({"deviceName": "/dev/sda1", "ebs": {**DEFAULT_EBS, "volumeSize": "50Gi"}},),
    "windows2025": ({"deviceName": "/dev/sda1", "ebs": {**DEFAULT_EBS, "volumeSize": "50Gi"}},),
}


class BlockDeviceError(ValueError):
    """A block device mapping EC2 cannot take (e.g. a volume smaller than 1 GiB)."""


def block_device_mappings(ami_family: str, configured: list[dict[str, Any]] | None) -> tuple[dict[str, Any], ...]:
    """The EC2NodeClass's blockDeviceMappings, or Karpenter's defaults for its AMI family when it has none."""
    if configured:
        return tuple(configured)
    return DEFAULT_BLOCK_DEVICE_MAPPINGS.get(ami_family.lower(), ())


def volume_size_gib(size: Any) -> int:
    """EC2's VolumeSize (whole GiB, rounded up as Karpenter does) for a volumeSize quantity; below 1Gi is an error,
    never VolumeSize 0."""
    from controller.api.quantity import QuantityError, parse_quantity

    try:
        amount = parse_quantity(size)
    except QuantityError as e:
        raise BlockDeviceError(f"volumeSize: {e}") from None
    if amount < 2**30:
        raise BlockDeviceError(f"volumeSize: {str(size)[:40]!r} is less than 1Gi, the smallest EBS volume")
    return math.ceil(amount / 2**30)


def bdm_request(b: dict[str, Any]) -> dict[str, Any]:
    """One LaunchTemplateData BlockDeviceMapping from an EC2NodeClass blockDeviceMapping."""
    out: dict[str, Any] = {"DeviceName": b.get("deviceName", "/dev/xvda")}
    ebs = b.get("ebs") or {}
    e: dict[str, Any] = {}
    for src, dst in (("deleteOnTermination", "DeleteOnTermination"), ("encrypted", "Encrypted"), ("iops", "Iops"),
                     ("kmsKeyID", "KmsKeyId"), ("snapshotID", "SnapshotId"), ("throughput", "Throughput"),
                     ("volumeType", "VolumeType")):
        if ebs.get(src) is not None:
            e[dst] = ebs[src]
    if ebs.get("volumeSize") is not None:
        e["VolumeSize"] = volume_size_gib(ebs["volumeSize"])
    if e:
        out["Ebs"] = e
    return out


def ensure(ec2: Any, spec: LaunchTemplateSpec, tags: dict[str, str]) -> str:
    """The template's name, creating it when it does not exist (also after someone deleted it)."""
    name = spec.name()
    try:
        ec2.describe_launch_templates(LaunchTemplateNames=[name])
        return name
    except ClientError as e:
        if e.response["Error"]["Code"] not in ("InvalidLaunchTemplateName.NotFoundException",
                                               "InvalidLaunchTemplateId.NotFound"):
            raise
    try:
        ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData=spec.data(), TagSpecifications=[
            {"ResourceType": "launch-template", "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())]}])
    except ClientError as e:
        if e.response["Error"]["Code"] != "InvalidLaunchTemplateName.AlreadyExistsException":
            raise
    return name
