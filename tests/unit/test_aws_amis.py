"""AMI aliases' variants, their requirements, and the choice per requirement set."""

from __future__ import annotations

import pytest

from controller.api import labels as L
from controller.cloud.aws.amis import (
    AMI,
    VARIANT_REQUIREMENTS,
    alias_parameters,
    alias_variants,
    newest_per_requirements,
)

K8S = "1.31"
CPU = {L.ARCH: "amd64"}
GPU = {L.ARCH: "amd64", L.INSTANCE_GPU_COUNT: "1"}
NEURON = {L.ARCH: "amd64", L.INSTANCE_ACCELERATOR_COUNT: "1"}
ARM = {L.ARCH: "arm64"}


def test_al2023_alias_names_every_variant():
    v = alias_variants("al2023@latest", K8S)
    base = f"/aws/service/eks/optimized-ami/{K8S}/amazon-linux-2023"
    assert v == {f"{base}/x86_64/standard/recommended/image_id": ("x86_64", ("standard",)),
                 f"{base}/x86_64/nvidia/recommended/image_id": ("x86_64", ("nvidia",)),
                 f"{base}/x86_64/neuron/recommended/image_id": ("x86_64", ("neuron",)),
                 f"{base}/arm64/standard/recommended/image_id": ("arm64", ("standard",)),
                 f"{base}/arm64/nvidia/recommended/image_id": ("arm64", ("nvidia",))}
    pinned = alias_variants("al2023@v20240807", K8S)
    assert f"{base}/x86_64/nvidia/amazon-eks-node-al2023-x86_64-nvidia-{K8S}-v20240807/image_id" in pinned


def test_al2_bottlerocket_windows_variants():
    al2 = alias_variants("al2@latest", K8S)
    assert al2[f"/aws/service/eks/optimized-ami/{K8S}/amazon-linux-2-gpu/recommended/image_id"] == (
        "x86_64", ("neuron", "nvidia"))
    br = alias_variants("bottlerocket@v1.20.3", K8S)
    assert br[f"/aws/service/bottlerocket/aws-k8s-{K8S}-nvidia/arm64/1.20.3/image_id"] == ("arm64", ("nvidia",))
    assert br[f"/aws/service/bottlerocket/aws-k8s-{K8S}/x86_64/1.20.3/image_id"] == ("x86_64", ("standard", "neuron"))
    win = alias_variants("windows2022@latest", K8S)
    assert list(win.values()) == [("x86_64", ())]
    with pytest.raises(ValueError, match="Windows aliases take only the version latest"):
        alias_variants("windows2022@v1", K8S)
    with pytest.raises(ValueError, match="unknown AMI family 'ubuntu'"):
        alias_variants("ubuntu@latest", K8S)
    # the standard image per architecture
    assert set(alias_parameters("bottlerocket@latest", K8S)) == {"x86_64", "arm64"}


@pytest.mark.parametrize(("labels", "variant"), [(CPU, "standard"), (GPU, "nvidia"), (NEURON, "neuron")])
def test_variant_requirements_pick_the_instance_types(labels, variant):
    amis = [AMI(f"ami-{v}", v, "amd64", "", VARIANT_REQUIREMENTS[v]) for v in ("standard", "nvidia", "neuron")]
    assert [a.id for a in amis if a.serves(labels)] == [f"ami-{variant}"]
    assert not any(a.serves(ARM) for a in amis)


def test_newest_per_requirement_set_deprecated_only_as_a_last_resort():
    std = VARIANT_REQUIREMENTS["standard"]
    images = [AMI("ami-old", "a", "amd64", "2024-01-01", std), AMI("ami-new", "b", "amd64", "2024-06-01", std),
              AMI("ami-newest-deprecated", "c", "amd64", "2025-01-01", std, deprecated=True),
              AMI("ami-gpu", "g", "amd64", "2024-02-01", VARIANT_REQUIREMENTS["nvidia"]),
              AMI("ami-arm-deprecated", "d", "arm64", "2024-01-01", std, deprecated=True)]
    best = newest_per_requirements(images)
    assert sorted(a.id for a in best) == ["ami-arm-deprecated", "ami-gpu", "ami-new"]
    assert next(a for a in best if a.id == "ami-gpu").all_requirements() == (
        (L.ARCH, "In", ("amd64",)), (L.INSTANCE_GPU_COUNT, "Exists", ()))
