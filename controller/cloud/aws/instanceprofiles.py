"""Instance profiles Karpenter manages for an EC2NodeClass's `role`: a deterministic name, the tags Karpenter's scoped
IAM policy requires, the role attached (and replaced when the EC2NodeClass changes it), deleted with the
EC2NodeClass."""

from __future__ import annotations

import hashlib
from typing import Any

from botocore.exceptions import ClientError

from controller.cloud.aws.tags import ownership_tags


def profile_name(cluster_name: str, region: str, nodeclass: str) -> str:
    """<cluster>_<digits>: stable for a (region, EC2NodeClass), within IAM's 128-character limit."""
    digest = int(hashlib.sha256(f"{region}{nodeclass}".encode()).hexdigest()[:16], 16)
    return f"{cluster_name[:100]}_{digest}"


class InstanceProfiles:
    """Creates, updates and deletes the instance profiles of EC2NodeClasses, with a cache of what is in place."""

    def __init__(self, iam: Any, cluster_name: str, region: str) -> None:
        self.iam = iam
        self.cluster = cluster_name
        self.region = region
        self._roles: dict[str, str] = {}  # profile name -> role attached

    def ensure(self, nodeclass: str, role: str) -> str:
        """The profile's name, with `role` (a role name or ARN) attached."""
        name = profile_name(self.cluster, self.region, nodeclass)
        role_name = role.rsplit("/", 1)[-1]
        if self._roles.get(name) == role_name:
            return name
        try:
            profile = self.iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        except ClientError as e:
            if e.response["Error"]["Code"] != "NoSuchEntity":
                raise
            tags = [{"Key": k, "Value": v} for k, v in ownership_tags(
                self.cluster, nodeclass=nodeclass, region=self.region).items()]
            profile = self.iam.create_instance_profile(InstanceProfileName=name, Tags=tags)["InstanceProfile"]
        attached = [r["RoleName"] for r in profile.get("Roles", [])]
        for other in attached:
            if other != role_name:
                self.iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=other)
        if role_name not in attached:
            self.iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role_name)
        self._roles[name] = role_name
        return name

    def delete(self, nodeclass: str) -> None:
        """Detach the role and delete the profile; a profile that is already gone is fine."""
        name = profile_name(self.cluster, self.region, nodeclass)
        self._roles.pop(name, None)
        try:
            profile = self.iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        except ClientError as e:
            if e.response["Error"]["Code"] == "NoSuchEntity":
                return
            raise
        for r in profile.get("Roles", []):
            self.iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=r["RoleName"])
        self.iam.delete_instance_profile(InstanceProfileName=name)
