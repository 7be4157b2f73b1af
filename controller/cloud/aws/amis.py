"""AMIs for an EC2NodeClass: an alias (al2023@latest, al2@v20240807, bottlerocket@v1.20.3, windows2022@latest) is
resolved through the public SSM parameters under /aws/service/...; selector terms (id, name, tags, owner,
ssmParameter) through DescribeImages. The newest AMI per architecture wins, as in Karpenter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from controller.cloud.aws.discovery import tag_filters

ARCHITECTURES = {"x86_64": "amd64", "arm64": "arm64"}


@dataclass(frozen=True)
class AMI:
    """A resolved image and the architecture it serves."""

    id: str
    name: str
    architecture: str  # amd64 | arm64
    creation_date: str


def alias_parameters(alias: str, k8s_version: str) -> dict[str, str]:
    """Architecture -> SSM parameter holding the AMI id for an alias."""
    family, _, version = alias.partition("@")
    version = version or "latest"
    if family == "al2023":
        base = f"/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023"
        if version == "latest":
            return {a: f"{base}/{a}/standard/recommended/image_id" for a in ARCHITECTURES}
        return {a: f"{base}/{a}/standard/amazon-eks-node-al2023-{a}-standard-{k8s_version}-{version}/image_id"
                for a in ARCHITECTURES}
    if family == "al2":
        base = f"/aws/service/eks/optimized-ami/{k8s_version}"
        names = {"x86_64": "amazon-linux-2", "arm64": "amazon-linux-2-arm64"}
        if version == "latest":
            return {a: f"{base}/{n}/recommended/image_id" for a, n in names.items()}
        return {a: f"{base}/{n}/amazon-eks-{'arm64-' if a == 'arm64' else ''}node-{k8s_version}-{version}/image_id"
                for a, n in names.items()}
    if family == "bottlerocket":
        v = "latest" if version == "latest" else version.lstrip("v")
        return {a: f"/aws/service/bottlerocket/aws-k8s-{k8s_version}/{a}/{v}/image_id" for a in ARCHITECTURES}
    if family in ("windows2019", "windows2022", "windows2025"):
        year = family[-4:]
        return {"x86_64": f"/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-"
                          f"{k8s_version}/image_id"}
    raise ValueError(f"alias {alias!r}: unknown AMI family {family!r}")


def _describe(ec2: Any, **kwargs: Any) -> list[dict[str, Any]]:
    return [i for page in ec2.get_paginator("describe_images").paginate(**kwargs) for i in page["Images"]]


def _ami(image: dict[str, Any]) -> AMI | None:
    arch = ARCHITECTURES.get(image.get("Architecture", ""))
    if arch is None:
        return None
    return AMI(image["ImageId"], image.get("Name", ""), arch, image.get("CreationDate", ""))


def _newest_per_arch(images: list[AMI]) -> list[AMI]:
    best: dict[str, AMI] = {}
    for a in sorted(images, key=lambda a: (a.creation_date, a.id), reverse=True):
        best.setdefault(a.architecture, a)
    return [best[k] for k in sorted(best)]


def resolve(ec2: Any, ssm: Any, terms: list[dict[str, Any]], k8s_version: str) -> list[AMI]:
    """The AMIs an EC2NodeClass's amiSelectorTerms select, newest per architecture; ValueError when none."""
    found: list[AMI] = []
    for term in terms:
        if term.get("alias"):
            for param in alias_parameters(term["alias"], k8s_version).values():
                try:
                    image_id = ssm.get_parameter(Name=param)["Parameter"]["Value"]
                except ClientError as e:
                    if e.response["Error"]["Code"] == "ParameterNotFound":
                        continue  # e.g. no arm64 build of that version
                    raise
                found.extend(a for a in map(_ami, _describe(ec2, ImageIds=[image_id])) if a)
            continue
        if term.get("ssmParameter"):
            image_id = ssm.get_parameter(Name=term["ssmParameter"])["Parameter"]["Value"]
            found.extend(a for a in map(_ami, _describe(ec2, ImageIds=[image_id])) if a)
            continue
        kwargs: dict[str, Any] = {}
        filters = tag_filters(term.get("tags") or {})
        if term.get("id"):
            kwargs["ImageIds"] = [term["id"]]
        if term.get("name"):
            filters.append({"Name": "name", "Values": [term["name"]]})
        if term.get("owner"):
            kwargs["Owners"] = [term["owner"]]
        if filters:
            kwargs["Filters"] = filters
        found.extend(a for a in map(_ami, _describe(ec2, **kwargs)) if a)
    if not found:
        raise ValueError(f"amiSelectorTerms {terms} select no image")
    return _newest_per_arch(found)
