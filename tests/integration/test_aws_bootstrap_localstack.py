"""Each AMI family's launch against LocalStack's EC2 and SSM through AWSCloudProvider.create: the user data decoded
from the launch template EC2 stores, checked field by field; a GPU instance type launched from the alias's nvidia
image; AL2023 refused (NodeClassNotReady) while the service CIDR is unknown.

LocalStack serves EC2 (images, launch templates, CreateFleet) and SSM; the public /aws/service/... parameters are
seeded under a prefix of our own (tests.integration.aws_world). EKS DescribeCluster is not served by LocalStack and
not used here: the provider is given its cluster facts, or learns the service CIDR from the real kube-apiserver's
kubernetes Service (tests/unit/test_aws_userdata.py covers DescribeCluster with a botocore Stubber). The
EC2NodeClass status controller runs against the real control plane."""

from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import email
import ipaddress
import tomllib
import uuid
from typing import Any

import pytest
import yaml

from controller.cloud.aws.amis import alias_variants
from controller.cloud.aws.clusterfacts import ClusterFacts
from controller.cloud.errors import NodeClassNotReadyError
from controller.kube import resources as R
from controller.kube.errors import NotFoundError
from controller.nodeclass.status import NodeClassController
from tests.integration.aws_world import K8S, launch_for, make_world

pytestmark = pytest.mark.localstack
ZONES = ("us-east-1a",)
SEEDED = "/karpy-boot"
RESTRICTED = {"kubernetes.io/foo": "bar", "node-restriction.kubernetes.io/x": "y"}


@pytest.fixture(scope="module")
def world(aws_client):
    ec2, ssm = aws_client("ec2"), aws_client("ssm")
    provider, nodeclass = make_world(ec2, ssm, aws_client("iam"), cidr_octet=57, zones=ZONES,
                                     prices={"m5.large": 0.096, "g4dn.xlarge": 0.526}, seeded_prefix=SEEDED)
    provider.cluster = dataclasses.replace(provider.cluster, service_cidr="172.20.0.0/16")
    x86 = [i["ImageId"] for i in ec2.describe_images(Filters=[{"Name": "architecture", "Values": ["x86_64"]}])[
        "Images"]]
    assert len(set(x86)) >= 3, "LocalStack offers at least three x86_64 images"
    standard, nvidia, other = sorted(set(x86))[:3]
    images = {"standard": standard, "nvidia": nvidia, "neuron": other}
    for alias in ("al2023@latest", "al2@latest", "bottlerocket@latest", "windows2022@latest"):
        for param, (arch, variants) in alias_variants(alias, K8S).items():
            if arch != "x86_64":
                continue
            image = images["nvidia"] if "nvidia" in variants else images["standard"]
            ssm.put_parameter(Name=SEEDED + param, Value=image, Type="String", Overwrite=True)
    return {"ec2": ec2, "provider": provider, "nodeclass": nodeclass, "images": images}


def _nodeclass(world: dict[str, Any], terms: list[dict[str, Any]], user_data: str | None = None,
               kubelet: dict[str, Any] | None = None) -> dict[str, Any]:
    nc = copy.deepcopy(world["nodeclass"])
    nc["metadata"]["name"] = f"nc-{uuid.uuid4().hex[:6]}"
    nc["spec"]["amiSelectorTerms"] = terms
    if user_data is not None:
        nc["spec"]["userData"] = user_data
    if kubelet:
        nc["spec"]["kubelet"] = kubelet
    return nc


def _claim(nodeclass: dict[str, Any], instance_type: str = "m5.large") -> dict[str, Any]:
    return {"metadata": {"name": f"default-{uuid.uuid4().hex[:5]}", "uid": str(uuid.uuid4()),
                         "labels": {"karpenter.sh/nodepool": "default", "team": "a", **RESTRICTED}},
            "spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                 "name": nodeclass["metadata"]["name"]}}}


def _launched(world: dict[str, Any], nodeclass: dict[str, Any], instance_type: str = "m5.large") -> tuple[str, str]:
    """Launch one NodeClaim; the instance's image and the user data of the launch template it came from."""
    node = launch_for(world["provider"], _claim(nodeclass, instance_type), nodeclass)
    ec2 = world["ec2"]
    inst = ec2.describe_instances(InstanceIds=[node.provider_id.rsplit("/", 1)[1]])["Reservations"][0][
        "Instances"][0]
    tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
    lt_id = tags.get("aws:ec2launchtemplate:id")
    if lt_id:
        data = ec2.describe_launch_template_versions(LaunchTemplateId=lt_id)["LaunchTemplateVersions"][0]
    else:  # LocalStack may not tag the instance with its template: the one of this node class holding its image
        versions = [v for lt in ec2.describe_launch_templates(Filters=[{
            "Name": "tag:karpenter.k8s.aws/ec2nodeclass", "Values": [nodeclass["metadata"]["name"]]}])[
            "LaunchTemplates"] for v in ec2.describe_launch_template_versions(
            LaunchTemplateId=lt["LaunchTemplateId"])["LaunchTemplateVersions"]]
        data = next(v for v in versions if v["LaunchTemplateData"]["ImageId"] == inst["ImageId"])
    return inst["ImageId"], base64.b64decode(data["LaunchTemplateData"]["UserData"]).decode()


def _parts(doc: str) -> list[tuple[str, str]]:
    return [(p.get_content_type(), str(p.get_payload())) for p in email.message_from_string(doc).walk()
            if not p.is_multipart()]


def test_al2023_nodeconfig_from_the_launch_template(world):
    nc = _nodeclass(world, [{"alias": "al2023@latest"}], "#!/bin/bash\necho hi", {"maxPods": 30, "cpuCFSQuota": False})
    image, ud = _launched(world, nc)
    assert image == world["images"]["standard"]
    parts = _parts(ud)
    assert [t for t, _ in parts] == ["text/x-shellscript", "application/node.eks.aws"]
    spec = yaml.safe_load(parts[1][1])["spec"]
    cluster = world["provider"].cluster
    assert spec["cluster"] == {"name": cluster.name, "apiServerEndpoint": "https://example.eks",
                               "certificateAuthority": "Q0E=", "cidr": "172.20.0.0/16"}
    assert spec["kubelet"]["config"] == {"maxPods": 30, "cpuCFSQuota": False, "registerWithTaints": [
        {"key": "dedicated", "value": "x", "effect": "NoSchedule"},
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]}
    assert spec["kubelet"]["flags"] == ["--node-labels=karpenter.sh/nodepool=default,team=a"]


def test_gpu_instance_type_gets_the_nvidia_image(world):
    nc = _nodeclass(world, [{"alias": "al2023@latest"}])
    image, _ = _launched(world, nc, "g4dn.xlarge")
    assert image == world["images"]["nvidia"]


def test_al2_bootstrap_from_the_launch_template(world):
    nc = _nodeclass(world, [{"alias": "al2@latest"}], None, {"maxPods": 30})
    _, ud = _launched(world, nc)
    (kind, script), = _parts(ud)
    assert kind == "text/x-shellscript"
    assert f"/etc/eks/bootstrap.sh '{world['provider'].cluster.name}' --apiserver-endpoint 'https://example.eks'" \
           " --b64-cluster-ca 'Q0E='" in script
    assert "--dns-cluster-ip '172.20.0.10'" in script and "--use-max-pods false" in script
    assert ("--kubelet-extra-args '--node-labels=karpenter.sh/nodepool=default,team=a --register-with-taints="
            "dedicated=x:NoSchedule,karpenter.sh/unregistered:NoExecute --max-pods=30'") in script


def test_bottlerocket_settings_from_the_launch_template(world):
    user = '[settings.kubernetes]\napi-server = "https://theirs"\n[settings.kubernetes.node-labels]\nmine = "1"\n'
    nc = _nodeclass(world, [{"alias": "bottlerocket@latest"}], user, {"maxPods": 30})
    _, ud = _launched(world, nc)
    k8s = tomllib.loads(ud)["settings"]["kubernetes"]
    assert k8s["api-server"] == "https://example.eks" and k8s["cluster-certificate"] == "Q0E="
    assert k8s["cluster-name"] == world["provider"].cluster.name and k8s["cluster-dns-ip"] == "172.20.0.10"
    assert k8s["max-pods"] == 30
    assert k8s["node-labels"] == {"karpenter.sh/nodepool": "default", "mine": "1", "team": "a"}
    assert k8s["node-taints"] == {"dedicated": ["x:NoSchedule"], "karpenter.sh/unregistered": [":NoExecute"]}


def test_windows_powershell_from_the_launch_template(world):
    nc = _nodeclass(world, [{"alias": "windows2022@latest"}])
    _, ud = _launched(world, nc)
    lines = ud.split("\n")
    assert lines[0] == "<powershell>" and lines[-1] == "</powershell>"
    assert lines[2].startswith(f"& $EKSBootstrapScriptFile -EKSClusterName '{world['provider'].cluster.name}' "
                               "-APIServerEndpoint 'https://example.eks' -Base64ClusterCA 'Q0E='")
    assert "-KubeletExtraArgs '--node-labels=karpenter.sh/nodepool=default,team=a" in lines[2]
    assert lines[2].endswith("-DNSClusterIP '172.20.0.10'")


def test_custom_user_data_untouched(world):
    user = "#!/bin/bash\n/opt/bootstrap --cluster mine\n"
    nc = _nodeclass(world, [{"id": world["images"]["standard"]}], user)
    nc["spec"]["amiFamily"] = "Custom"
    image, ud = _launched(world, nc)
    assert (image, ud) == (world["images"]["standard"], user)


def test_al2023_without_service_cidr_is_not_ready(world):
    provider = world["provider"]
    saved = provider.cluster
    provider.cluster = dataclasses.replace(saved, service_cidr="")
    try:
        nc = _nodeclass(world, [{"alias": "al2023@latest"}])
        with pytest.raises(NodeClassNotReadyError, match="service CIDR"):
            launch_for(provider, _claim(nc), nc)
    finally:
        provider.cluster = saved


@pytest.mark.kube
@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_service_cidr_learned_from_the_real_kubernetes_service(kube):
    kc = kube[0]
    cluster_ip = kc.get(R.SERVICES, "kubernetes", "default")["spec"]["clusterIP"]
    facts = ClusterFacts(name="c", endpoint="https://x", eks=None,
                         kubernetes_service_ip=lambda: kc.get(R.SERVICES, "kubernetes", "default")["spec"][
                             "clusterIP"]).get()
    assert ipaddress.ip_address(cluster_ip) in ipaddress.ip_network(facts.service_cidr)
    assert facts.service_cidr == str(ipaddress.ip_network(f"{cluster_ip}/16", strict=False))


@pytest.mark.kube
@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_nodeclass_not_ready_naming_the_missing_fact(kube, world):
    kc, cluster, recorder = kube
    provider = world["provider"]
    saved = provider.cluster
    provider.cluster = dataclasses.replace(saved, service_cidr="")
    names = []
    try:
        ctl = NodeClassController(cluster=cluster, client=kc, provider=provider, recorder=recorder)
        for terms, family in (([{"alias": "al2023@latest"}], None), ([{"id": world["images"]["standard"]}], "Custom")):
            nc = _nodeclass(world, terms)
            if family:
                nc["spec"]["amiFamily"] = family
            names.append(nc["metadata"]["name"])
            kc.create(R.EC2NODECLASSES, nc)
            ctl.reconcile(nc["metadata"]["name"])
        conds = [{c["type"]: c for c in kc.get(R.EC2NODECLASSES, n)["status"]["conditions"]} for n in names]
        al2023, custom = conds
        assert (al2023["AMIsReady"]["status"], al2023["AMIsReady"]["reason"]) == ("False", "ClusterFactUnresolved")
        assert "service CIDR" in al2023["AMIsReady"]["message"]
        assert (al2023["Ready"]["status"], al2023["Ready"]["reason"]) == ("False", "ClusterFactUnresolved")
        assert custom["Ready"]["status"] == "True"  # Custom needs no cluster fact
        provider.cluster = saved  # the fact is learned: the next pass is Ready
        ctl.reconcile(names[0])
        ready = {c["type"]: c for c in kc.get(R.EC2NODECLASSES, names[0])["status"]["conditions"]}["Ready"]
        assert ready["status"] == "True"
    finally:
        provider.cluster = saved
        for n in names:
            with contextlib.suppress(NotFoundError):
                kc.patch(R.EC2NODECLASSES, n, {"metadata": {"finalizers": []}})
                kc.delete(R.EC2NODECLASSES, n)
