"""Launch templates: one per distinct resolved configuration, named by the hash of its content, reused while it
exists and recreated when someone deleted it."""

from __future__ import annotations

import base64
import hashlib
import json
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
            d["BlockDeviceMappings"] = [_bdm(b) for b in self.block_device_mappings]
        return d

    def name(self) -> str:
        """karpenter.k8s.aws/<hash of the content>: equal configurations share one template."""
        digest = hashlib.sha256(json.dumps(self.data(), sort_keys=True).encode()).hexdigest()[:20]
        return NAME_PREFIX + digest


def _bdm(b: dict[str, Any]) -> dict[str, Any]:
    from controller.api.quantity import parse_quantity

    out: dict[str, Any] = {"DeviceName": b.get("deviceName", "/dev/xvda")}
    ebs = b.get("ebs") or {}
    e: dict[str, Any] = {}
    for src, dst in (("deleteOnTermination", "DeleteOnTermination"), ("encrypted", "Encrypted"), ("iops", "Iops"),
                     ("kmsKeyID", "KmsKeyId"), ("snapshotID", "SnapshotId"), ("throughput", "Throughput"),
                     ("volumeType", "VolumeType")):
        if ebs.get(src) is not None:
            e[dst] = ebs[src]
    if ebs.get("volumeSize") is not None:
        e["VolumeSize"] = int(parse_quantity(ebs["volumeSize"]) / 2**30)
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
