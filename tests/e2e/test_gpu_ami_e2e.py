"""`karpy controller` with an EC2NodeClass selecting `alias: al2023@latest` and one NodePool allowing a GPU type
(g4dn.xlarge, one NVIDIA T4) and a CPU type (m5.large): the EC2NodeClass status lists the alias's standard and nvidia
images with the requirements that decide which instance types boot them; a pod requesting `nvidia.com/gpu: 1` lands
on a g4dn.xlarge node whose instance was launched with the nvidia image, and a plain pod on an m5.large node launched
with the standard image.

What is stood in, and why: AWS publishes the EKS optimized AMI ids as public SSM parameters under
`/aws/service/eks/optimized-ami/...`, and LocalStack refuses to store parameters under `/aws/service/`. The
controller's AWS endpoint is therefore tests/e2e/ssmproxy.py, a pass-through proxy to LocalStack that answers SSM
reads of `/aws/service/` names itself: the AL2023 x86_64 `standard` and `nvidia` `recommended/image_id` parameters of
the cluster's Kubernetes version name two images made in LocalStack for this test (CopyImage of the world's image,
distinct names: LocalStack's RegisterImage records no architecture); every other `/aws/service/` name (neuron, arm64)
is ParameterNotFound, as for a variant AWS does not publish. Everything else (DescribeImages, DescribeInstanceTypes,
launch templates, CreateFleet, DescribeInstances...) is LocalStack's. The e2e kubelet stand-in registers each node
with its NodeClaim's capacity, nvidia.com/gpu included."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.conftest import World, nodepool_name
from tests.e2e.harness import wait_for
from tests.e2e.ssmproxy import PublicParameterProxy

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.localstack]
GPU = "nvidia.com/gpu"
TYPE = "node.kubernetes.io/instance-type"
ARCH = {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
STANDARD_REQS = [ARCH, {"key": "karpenter.k8s.aws/instance-accelerator-count", "operator": "DoesNotExist"},
                 {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "DoesNotExist"}]
NVIDIA_REQS = [ARCH, {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Exists"}]


def _k8s_version(world: World) -> str:
    v = client.VersionApi(world.api).get_code()
    return f"{v.major}.{v.minor.rstrip('+')}"


def _copy(world: World, variant: str) -> str:
    """A fresh x86_64 image in LocalStack named like the EKS AL2023 image of that variant: a copy of the world's
    image (LocalStack's RegisterImage records no architecture, which karpy needs to pick the image)."""
    base = world.custom.get_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", world.nodeclass)
    source = base["spec"]["amiSelectorTerms"][0]["id"]
    name = f"amazon-eks-node-al2023-x86_64-{variant}-karpy-e2e-{uuid.uuid4().hex[:8]}"
    image = world.ec2.copy_image(SourceImageId=source, SourceRegion="us-east-1", Name=name)["ImageId"]
    described = world.ec2.describe_images(ImageIds=[image])["Images"][0]
    assert (described["Name"], described["Architecture"]) == (name, "x86_64"), described
    return str(image)


@pytest.fixture
def images(world: World) -> dict[str, str]:
    """variant (standard, nvidia) -> image id."""
    return {variant: _copy(world, variant) for variant in ("standard", "nvidia")}


@pytest.fixture
def proxy(world: World, images: dict[str, str]) -> Iterator[PublicParameterProxy]:
    base = f"/aws/service/eks/optimized-ami/{_k8s_version(world)}/amazon-linux-2023/x86_64"
    public = {f"{base}/{variant}/recommended/image_id": image for variant, image in images.items()}
    with PublicParameterProxy(world.endpoint, world.ec2, public) as p:
        yield p


def _status_amis(world: World, name: str) -> list[dict[str, Any]] | None:
    obj = world.custom.get_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", name)
    amis = (obj.get("status") or {}).get("amis") or []
    return amis if len(amis) >= 2 else None


def _bound_node(world: World, namespace: str, app: str) -> str | None:
    pods = world.bound_pods(namespace, app)
    return str(pods[0].spec.node_name) if pods else None


def _fleet_types(world: World, form: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(instance type, launch template image) per override of one CreateFleet request, in the order sent."""
    out = []
    configs = sorted({k.split(".")[1] for k in form if k.startswith("LaunchTemplateConfigs.")}, key=int)
    for c in configs:
        name = form[f"LaunchTemplateConfigs.{c}.LaunchTemplateSpecification.LaunchTemplateName"][0]
        image = world.ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"][0][
            "LaunchTemplateData"]["ImageId"]
        overrides = sorted({k.split(".")[3] for k in form if k.startswith(f"LaunchTemplateConfigs.{c}.Overrides.")},
                           key=int)
        types = [form[f"LaunchTemplateConfigs.{c}.Overrides.{o}.InstanceType"][0] for o in overrides]
        out += [(t, image) for t in dict.fromkeys(types)]
    return out


def _claim_of(world: World, pool: str, node: str) -> dict[str, Any]:
    return next(c for c in world.nodeclaims(pool) if (c.get("status") or {}).get("nodeName") == node)


def test_a_gpu_pod_gets_the_nvidia_image_and_a_cpu_pod_the_standard_one(world: World, images: dict[str, str],
                                                                       proxy: PublicParameterProxy, kubelet,
                                                                       start_controller):
    base = world.custom.get_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", world.nodeclass)
    nodeclass = f"al2023-gpu-{uuid.uuid4().hex[:5]}"
    world.custom.create_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", {
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": nodeclass},
        "spec": {**base["spec"], "amiFamily": "AL2023", "amiSelectorTerms": [{"alias": "al2023@latest"}]}})
    pool = nodepool_name("gpu")
    world.nodepool(pool, nodeClassRef={"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass},
                   requirements=[ARCH, {"key": TYPE, "operator": "In", "values": ["g4dn.xlarge", "m5.large"]},
                                 {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}])
    ns = world.namespace()
    controller = start_controller(AWS_ENDPOINT_URL=proxy.url)

    amis = wait_for("status.amis", functools.partial(_status_amis, world, nodeclass), timeout=120)
    by_id = {a["id"]: a for a in amis}
    assert set(by_id) == {images["standard"], images["nvidia"]}, amis
    assert by_id[images["standard"]]["requirements"] == STANDARD_REQS
    assert by_id[images["nvidia"]]["requirements"] == NVIDIA_REQS
    assert by_id[images["nvidia"]]["name"].startswith("amazon-eks-node-al2023-x86_64-nvidia-karpy-e2e-")
    # karpy asked for the alias's variants of the cluster's version and architectures, by their public names
    version = _k8s_version(world)
    assert f"/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/x86_64/nvidia/recommended/image_id" in \
        proxy.names_asked
    assert f"/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/arm64/standard/recommended/image_id" in \
        proxy.names_asked

    # The two pods never share a node, and the plain one comes once the GPU one is bound: otherwise kube-scheduler
    # may bind the plain pod to the GPU node if that registers first (a node whose pods all fit is its choice, not
    # karpy's), and the GPU pod would wait for another. Its NodeClaim then allows both types: the launch takes the
    # cheaper m5.large, with the image that type boots.
    apart = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname",
         "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["gpu", "cpu"]}]}}]}}
    gpu_container = {"name": "cuda", "image": "registry.k8s.io/pause:3.9",
                     "resources": {"requests": {"cpu": "100m", "memory": "128Mi", GPU: "1"}, "limits": {GPU: "1"}}}
    launched = {}
    for app in ("gpu", "cpu"):
        if app == "gpu":
            world.deployment(ns, app, 1, pool, affinity=apart, containers=[gpu_container])
        else:
            world.deployment(ns, app, 1, pool, cpu="100m", memory="128Mi", affinity=apart)
        node = wait_for(f"{app} pod bound", functools.partial(_bound_node, world, ns, app), timeout=240)
        claim = _claim_of(world, pool, node)
        instance = world.instance(claim["status"]["providerID"])
        launched[app] = (world.core.read_node(node), claim, instance)

    node, claim, instance = launched["gpu"]
    assert instance["InstanceType"] == "g4dn.xlarge" and node.metadata.labels[TYPE] == "g4dn.xlarge"
    assert instance["ImageId"] == images["nvidia"] and claim["status"]["imageID"] == images["nvidia"]
    assert claim["status"]["capacity"][GPU] == "1" and node.status.allocatable[GPU] == "1"
    assert node.metadata.labels["karpenter.k8s.aws/instance-gpu-count"] == "1"

    node, claim, instance = launched["cpu"]
    assert instance["InstanceType"] == "m5.large" and node.metadata.labels[TYPE] == "m5.large"
    assert instance["ImageId"] == images["standard"] and claim["status"]["imageID"] == images["standard"]
    assert GPU not in claim["status"]["capacity"]
    allowed = next(r["values"] for r in claim["spec"]["requirements"] if r["key"] == TYPE)
    assert sorted(allowed) == ["g4dn.xlarge", "m5.large"], allowed
    assert "karpenter.k8s.aws/instance-gpu-count" not in node.metadata.labels
    # the GPU pod's launch offered EC2 the GPU type with the nvidia image; the plain pod's offered both types, each
    # with the launch template of its own image, the cheaper first
    fleets = [_fleet_types(world, f) for f in proxy.fleets if f.get("DryRun") != ["true"]]  # not validation's
    assert [("g4dn.xlarge", images["nvidia"])] in fleets, fleets
    assert [("m5.large", images["standard"]), ("g4dn.xlarge", images["nvidia"])] in fleets, fleets
    assert controller.stop() == 0
