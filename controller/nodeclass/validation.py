"""EC2NodeClass validation by dry run, as Karpenter's nodeclass validation: before the first launch, the controller's
permission to call ec2:CreateLaunchTemplate, ec2:CreateFleet and ec2:RunInstances with the class's resolved AMI,
subnets, security groups, instance profile and tags is checked with DryRun requests, so a missing permission shows
as ValidationSucceeded=False on the EC2NodeClass instead of as failed launches. Outcomes are kept ten minutes per
(class, resolved status, spec, tags); DISABLE_DRY_RUN skips the calls (the class is then taken as valid).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from cachetools import TTLCache

log = logging.getLogger("karpy.nodeclass.validation")

CACHE_SECONDS = 600.0
CREATE_LAUNCH_TEMPLATE_AUTH_FAILED = "CreateLaunchTemplateAuthCheckFailed"
CREATE_FLEET_AUTH_FAILED = "CreateFleetAuthCheckFailed"
RUN_INSTANCES_AUTH_FAILED = "RunInstancesAuthCheckFailed"
MESSAGES = {
    CREATE_LAUNCH_TEMPLATE_AUTH_FAILED: "Controller isn't authorized to call ec2:CreateLaunchTemplate",
    CREATE_FLEET_AUTH_FAILED: "Controller isn't authorized to call ec2:CreateFleet",
    RUN_INSTANCES_AUTH_FAILED: "Controller isn't authorized to call ec2:RunInstances",
}
UNAUTHORIZED = frozenset({"UnauthorizedOperation", "AccessDenied", "AccessDeniedException"})
# a dry run that got past authorization and failed on the request's content: the permission is there
AUTHORIZED_ANYWAY = ("DryRunOperation", "InvalidLaunchTemplateName.NotFound", "InvalidLaunchTemplateId.NotFound")
MAX_MESSAGE = 1000


@dataclass(frozen=True)
class Verdict:
    """The outcome: valid, or the reason and message of ValidationSucceeded=False."""

    ok: bool
    reason: str = ""
    message: str = ""


class TransientValidationError(Exception):
    """A dry run that could not say (throttled, a server error, no connection): try again later."""


def validation_template_name(nodeclass: str) -> str:
    """The launch template name the dry runs name (never created)."""
    return f"karpenter.k8s.aws/validation/{nodeclass}"[:128]


class DryRunValidator:
    """Dry-run checks of an EC2NodeClass's launch permissions, with their outcomes cached."""

    def __init__(self, ec2: Any, clock: Callable[[], float] = time.monotonic,
                 ttl_seconds: float = CACHE_SECONDS) -> None:
        self.ec2 = ec2
        self._cache: TTLCache[str, Verdict] = TTLCache(4096, ttl_seconds, timer=clock)

    @staticmethod
    def cache_key(name: str, spec: dict[str, Any], status: dict[str, Any], tags: dict[str, str]) -> str:
        """One key per class and what the dry runs depend on."""
        resolved = {k: status.get(k) for k in ("subnets", "securityGroups", "amis", "instanceProfile")}
        digest = hashlib.sha256(json.dumps([spec, resolved, tags], sort_keys=True, default=str).encode())
        return f"{name}:{digest.hexdigest()[:16]}"

    def validate(self, name: str, spec: dict[str, Any], status: dict[str, Any], tags: dict[str, str]) -> Verdict:
        """The verdict for the class (cached); TransientValidationError when AWS could not answer."""
        key = self.cache_key(name, spec, status, tags)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        verdict = self._run(name, status, tags)
        self._cache[key] = verdict
        return verdict

    def _run(self, name: str, status: dict[str, Any], tags: dict[str, str]) -> Verdict:
        image = next((a.get("id") for a in status.get("amis") or [] if a.get("id")), "")
        groups = [g["id"] for g in status.get("securityGroups") or [] if g.get("id")]
        subnets = [s["id"] for s in status.get("subnets") or [] if s.get("id")]
        profile = str(status.get("instanceProfile") or "")
        tag_list = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
        template = validation_template_name(name)
        data: dict[str, Any] = {"ImageId": image, "SecurityGroupIds": groups}
        if profile:
            data["IamInstanceProfile"] = {"Name": profile}
        checks: list[tuple[str, Callable[[], Any]]] = [
            (CREATE_LAUNCH_TEMPLATE_AUTH_FAILED, lambda: self.ec2.create_launch_template(
                DryRun=True, LaunchTemplateName=template, LaunchTemplateData=data,
                TagSpecifications=[{"ResourceType": "launch-template", "Tags": tag_list}])),
            (CREATE_FLEET_AUTH_FAILED, lambda: self.ec2.create_fleet(
                DryRun=True, Type="instant",
                TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
                LaunchTemplateConfigs=[{"LaunchTemplateSpecification": {"LaunchTemplateName": template,
                                                                        "Version": "$Latest"},
                                        "Overrides": [{"SubnetId": s} for s in subnets[:1]]}],
                TagSpecifications=[{"ResourceType": rt, "Tags": tag_list}
                                   for rt in ("instance", "volume", "network-interface", "fleet")])),
            (RUN_INSTANCES_AUTH_FAILED, lambda: self.ec2.run_instances(
                DryRun=True, MinCount=1, MaxCount=1, ImageId=image, SecurityGroupIds=groups,
                **({"SubnetId": subnets[0]} if subnets else {}),
                **({"IamInstanceProfile": {"Name": profile}} if profile else {}),
                TagSpecifications=[{"ResourceType": rt, "Tags": tag_list}
                                   for rt in ("instance", "volume", "network-interface")])),
        ]
        for reason, call in checks:
            try:
                call()
            except ClientError as e:
                code = str(e.response.get("Error", {}).get("Code", ""))
                if code.startswith(AUTHORIZED_ANYWAY):
                    continue
                if code in UNAUTHORIZED:
                    log.error("unauthorized to call %s", MESSAGES[reason].rsplit(" ", 1)[-1],
                              extra={"EC2NodeClass": {"name": name}, "error": str(e)[:300]})
                    return Verdict(False, reason, f"{MESSAGES[reason]} ({code})"[:MAX_MESSAGE])
                if code in ("RequestLimitExceeded", "Throttling") or e.response.get(
                        "ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500:
                    raise TransientValidationError(f"{reason}: {code}") from None
                # the request itself was refused (a bad image, subnet, profile): not a permission problem; the
                # launch reports it with EC2's words
                log.info("dry run refused for a reason other than permissions", extra={
                    "EC2NodeClass": {"name": name}, "check": reason, "error": str(e)[:300]})
            except BotoCoreError as e:
                raise TransientValidationError(f"{reason}: {e}") from None
        return Verdict(True)
