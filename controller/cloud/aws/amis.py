"""AMIs for an EC2NodeClass, as Karpenter's AMI provider resolves them.

An alias (al2023@latest, al2@v20240807, bottlerocket@v1.20.3, windows2022@latest) is resolved through the public SSM
parameters under /aws/service/... for every variant of the family (standard, nvidia, neuron), each variant carrying
the requirements that decide which instance types boot it (architecture; GPU or Neuron accelerators). Selector terms
(id, name, tags, owner, ssmParameter) go through DescribeImages. Per requirement set the newest image wins, a
deprecated one only when nothing else matches."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from controller.api import labels as L
from controller.cloud.aws.discovery import tag_filters

ARCHITECTURES = {"x86_64": "amd64", "arm64": "arm64"}

# One requirement of an AMI: (label key, operator In | Exists | DoesNotExist, values)
Requirement = tuple[str, str, tuple[str, ...]]

# The instance types each variant serves (Karpenter's Variant.Requirements).
VARIANT_REQUIREMENTS: dict[str, tuple[Requirement, ...]] = {
    "standard": ((L.INSTANCE_ACCELERATOR_COUNT, "DoesNotExist", ()), (L.INSTANCE_GPU_COUNT, "DoesNotExist", ())),
    "nvidia": ((L.INSTANCE_GPU_COUNT, "Exists", ()),),
    "neuron": ((L.INSTANCE_ACCELERATOR_COUNT, "Exists", ()),),
}


@dataclass(frozen=True)
class AMI:
    """A resolved image, the architecture it serves and the requirements an instance type must meet to boot it."""

    id: str
    name: str
    architecture: str  # amd64 | arm64
    creation_date: str
    requirements: tuple[Requirement, ...] = field(default=())  # with the architecture's; () means arch only
    deprecated: bool = False

    def all_requirements(self) -> tuple[Requirement, ...]:
        """The architecture requirement, then the variant's."""
        return ((L.ARCH, "In", (self.architecture,)), *self.requirements)

    def serves(self, labels: Mapping[str, str]) -> bool:
        """True when an instance type with these labels meets every requirement of this AMI."""
        return requirements_met(self.all_requirements(), labels)


def requirements_met(requirements: tuple[Requirement, ...], labels: Mapping[str, str]) -> bool:
    """In: the label has one of the values; Exists / DoesNotExist: the label is there / is not."""
    for key, op, values in requirements:
        have = labels.get(key)
        if (op == "In" and have not in values) or (op == "NotIn" and have in values) or \
                (op == "Exists" and have is None) or (op == "DoesNotExist" and have is not None):
            return False
    return True


def alias_variants(alias: str, k8s_version: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """SSM parameter -> (architecture, variants) for every image an alias names, as Karpenter's AMI families list
    them. ValueError for an unknown family."""
    family, _, version = alias.partition("@")
    version = version or "latest"
    latest = version == "latest"
    if family == "al2023":
        out: dict[str, tuple[str, tuple[str, ...]]] = {}
        for arch, variants in (("x86_64", ("standard", "nvidia", "neuron")), ("arm64", ("standard", "nvidia"))):
            for v in variants:
                leaf = "recommended" if latest else f"amazon-eks-node-al2023-{arch}-{v}-{k8s_version}-{version}"
                out[f"/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{arch}/{v}/{leaf}/image_id"] = \
                    (arch, (v,))
        return out
    if family == "al2":
        base = f"/aws/service/eks/optimized-ami/{k8s_version}"

        def al2_leaf(kind: str) -> str:
            return "recommended" if latest else f"amazon-eks-{kind}node-{k8s_version}-{version}"
        # the GPU image has both the Neuron and the NVIDIA drivers
        return {f"{base}/amazon-linux-2/{al2_leaf('')}/image_id": ("x86_64", ("standard",)),
                f"{base}/amazon-linux-2-arm64/{al2_leaf('arm64-')}/image_id": ("arm64", ("standard",)),
                f"{base}/amazon-linux-2-gpu/{al2_leaf('gpu-')}/image_id": ("x86_64", ("neuron", "nvidia"))}
    if family == "bottlerocket":
        v = "latest" if latest else version.lstrip("v")
        base = f"/aws/service/bottlerocket/aws-k8s-{k8s_version}"
        return {f"{base}/x86_64/{v}/image_id": ("x86_64", ("standard", "neuron")),
                f"{base}/arm64/{v}/image_id": ("arm64", ("standard",)),
                f"{base}-nvidia/x86_64/{v}/image_id": ("x86_64", ("nvidia",)),
                f"{base}-nvidia/arm64/{v}/image_id": ("arm64", ("nvidia",))}
    if family in ("windows2019", "windows2022", "windows2025"):
        if not latest:
            raise ValueError(f"alias {alias!r}: Windows aliases take only the version latest")
        year = family[-4:]
        return {f"/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s_version}"
                f"/image_id": ("x86_64", ())}
    raise ValueError(f"alias {alias!r}: unknown AMI family {family!r}")


def alias_parameters(alias: str, k8s_version: str) -> dict[str, str]:
    """Architecture (x86_64/arm64) -> SSM parameter of the alias's standard image (the accelerated variants are in
    alias_variants)."""
    out: dict[str, str] = {}
    for param, (arch, variants) in alias_variants(alias, k8s_version).items():
        if not variants or "standard" in variants:
            out.setdefault(arch, param)
    return out


def _describe(ec2: Any, **kwargs: Any) -> list[dict[str, Any]]:
    return [i for page in ec2.get_paginator("describe_images").paginate(**kwargs) for i in page["Images"]]


def _deprecated(image: Mapping[str, Any], now: dt.datetime) -> bool:
    when = image.get("DeprecationTime")
    if not when:
        return False
    try:
        t = dt.datetime.fromisoformat(str(when).replace("Z", "+00:00"))
    except ValueError:
        return False
    return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)) <= now


def _amis(image: Mapping[str, Any], variants: tuple[str, ...], now: dt.datetime) -> list[AMI]:
    """One AMI per variant the image serves (one with the architecture alone when no variant is known)."""
    arch = ARCHITECTURES.get(str(image.get("Architecture", "")))
    if arch is None:
        return []
    base = dict(id=str(image["ImageId"]), name=str(image.get("Name", "")), architecture=arch,
                creation_date=str(image.get("CreationDate", "")), deprecated=_deprecated(image, now))
    if not variants:
        return [AMI(**base)]  # type: ignore[arg-type]
    return [AMI(**base, requirements=VARIANT_REQUIREMENTS[v]) for v in variants]  # type: ignore[arg-type]


def _rank(a: AMI) -> tuple[bool, str, str]:
    """Higher is better: not deprecated, then newest, then the name (Karpenter's compareAMI)."""
    return (not a.deprecated, a.creation_date, a.name)


def newest_per_requirements(images: list[AMI]) -> list[AMI]:
    """Per requirement set, the best image: a deprecated one only when no other has those requirements."""
    best: dict[frozenset[Requirement], AMI] = {}
    for a in images:
        key = frozenset(a.all_requirements())
        if key not in best or _rank(a) > _rank(best[key]):
            best[key] = a
    return sorted(best.values(), key=lambda a: (a.architecture, a.requirements, a.id))


def resolve(ec2: Any, ssm: Any, terms: list[dict[str, Any]], k8s_version: str,
            now: dt.datetime | None = None) -> list[AMI]:
    """The AMIs an EC2NodeClass's amiSelectorTerms select, the best per requirement set; ValueError when none."""
    now = now or dt.datetime.now(dt.UTC)
    found: list[AMI] = []
    for term in terms:
        if term.get("alias"):
            ids: dict[str, tuple[str, ...]] = {}
            for param, (_, variants) in alias_variants(term["alias"], k8s_version).items():
                try:
                    image_id = ssm.get_parameter(Name=param)["Parameter"]["Value"]
                except ClientError as e:
                    if e.response["Error"]["Code"] == "ParameterNotFound":
                        continue  # e.g. no arm64 build of that version
                    raise
                ids[image_id] = tuple(dict.fromkeys((*ids.get(image_id, ()), *variants)))
            if ids:
                for image in _describe(ec2, ImageIds=sorted(ids), IncludeDeprecated=True):
                    found.extend(_amis(image, ids.get(str(image["ImageId"]), ()), now))
            continue
        if term.get("ssmParameter"):
            image_id = ssm.get_parameter(Name=term["ssmParameter"])["Parameter"]["Value"]
            for image in _describe(ec2, ImageIds=[image_id], IncludeDeprecated=True):
                found.extend(_amis(image, (), now))
            continue
        kwargs: dict[str, Any] = {"IncludeDeprecated": True}
        filters = tag_filters(term.get("tags") or {})
        if term.get("id"):
            kwargs["ImageIds"] = [term["id"]]
        if term.get("name"):
            filters.append({"Name": "name", "Values": [term["name"]]})
        if term.get("owner"):
            kwargs["Owners"] = [term["owner"]]
        if filters:
            kwargs["Filters"] = filters
        for image in _describe(ec2, **kwargs):
            found.extend(_amis(image, (), now))
    if not found:
        raise ValueError(f"amiSelectorTerms {str(terms)[:300]} select no image")
    return newest_per_requirements(found)
