"""AMI resolution through SSM parameters and selector terms, and instance profiles, against LocalStack.

LocalStack has none of the public /aws/service/... parameters and reserves that prefix against PutParameter, so the
alias test seeds them under /karpy-test/aws/service/... and a botocore hook renames the prefix in the real SSM
requests: the calls still go to LocalStack's SSM."""

from __future__ import annotations

import json
import uuid

import pytest

from controller.cloud.aws.amis import alias_parameters, resolve
from controller.cloud.aws.instanceprofiles import InstanceProfiles, profile_name

pytestmark = pytest.mark.localstack
K8S = "1.31"


SEEDED = "/karpy-test"


@pytest.fixture(scope="module")
def images(aws_client):
    ec2 = aws_client("ec2")
    tag = uuid.uuid4().hex[:8]
    made = {}
    for arch, name in (("x86_64", f"eks-al2023-x86-{tag}"), ("arm64", f"eks-al2023-arm-{tag}")):
        base = ec2.describe_images(Filters=[{"Name": "architecture", "Values": [arch]}])["Images"][0]["ImageId"]
        inst = ec2.run_instances(ImageId=base, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
        image = ec2.create_image(InstanceId=inst, Name=name, TagSpecifications=[
            {"ResourceType": "image", "Tags": [{"Key": "team", "Value": tag}]}])["ImageId"]
        ec2.terminate_instances(InstanceIds=[inst])
        made[arch] = image
    return ec2, made, tag


def test_alias_parameters_follow_the_public_paths():
    assert alias_parameters("al2023@latest", K8S)["arm64"] == (
        "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id")
    assert alias_parameters("bottlerocket@v1.20.3", K8S)["x86_64"] == (
        "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/1.20.3/image_id")
    assert alias_parameters("al2@latest", K8S)["x86_64"] == (
        "/aws/service/eks/optimized-ami/1.31/amazon-linux-2/recommended/image_id")
    assert alias_parameters("bottlerocket@1.10.0", K8S)["arm64"] == (
        "/aws/service/bottlerocket/aws-k8s-1.31/arm64/1.10.0/image_id")
    assert alias_parameters("windows2025@latest", K8S) == {
        "x86_64": "/aws/service/ami-windows-latest/Windows_Server-2025-English-Core-EKS_Optimized-1.31/image_id"}
    with pytest.raises(ValueError, match="unknown AMI family"):
        alias_parameters("ubuntu@latest", K8S)


def test_alias_resolves_through_ssm(aws_client, images):
    ec2, made, _ = images
    ssm = aws_client("ssm")
    params = alias_parameters("al2023@latest", K8S)
    for arch, name in params.items():
        ssm.put_parameter(Name=SEEDED + name, Value=made[arch], Type="String", Overwrite=True)

    def under_seeded_prefix(params, **kwargs):
        if params.get("Name", "").startswith("/aws/service/"):
            params["Name"] = SEEDED + params["Name"]

    ssm.meta.events.register("provide-client-params.ssm.GetParameter", under_seeded_prefix)
    amis = resolve(ec2, ssm, [{"alias": "al2023@latest"}], K8S)
    assert {(a.architecture, a.id) for a in amis} == {("amd64", made["x86_64"]), ("arm64", made["arm64"])}


def test_selector_terms(aws_client, images):
    ec2, made, tag = images
    ssm = aws_client("ssm")
    by_tag = resolve(ec2, ssm, [{"tags": {"team": tag}}], K8S)
    assert {a.id for a in by_tag} == set(made.values())
    by_id = resolve(ec2, ssm, [{"id": made["arm64"]}], K8S)
    assert [a.id for a in by_id] == [made["arm64"]]
    by_name = resolve(ec2, ssm, [{"name": f"eks-al2023-x86-{tag}"}], K8S)
    assert [a.id for a in by_name] == [made["x86_64"]]
    param = f"/karpy/test/{tag}/image"
    ssm.put_parameter(Name=param, Value=made["x86_64"], Type="String")
    assert [a.id for a in resolve(ec2, ssm, [{"ssmParameter": param}], K8S)] == [made["x86_64"]]
    with pytest.raises(ValueError, match="select no image"):
        resolve(ec2, ssm, [{"tags": {"team": "nobody"}}], K8S)


def test_instance_profiles(aws_client):
    iam = aws_client("iam")
    cluster = f"c{uuid.uuid4().hex[:6]}"
    trust = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                                "Principal": {"Service": "ec2.amazonaws.com"}}]})
    for role in ("NodeRoleA", "NodeRoleB"):
        iam.create_role(RoleName=f"{role}-{cluster}", AssumeRolePolicyDocument=trust)
    profiles = InstanceProfiles(iam, cluster, "us-east-1")
    name = profiles.ensure("default", f"NodeRoleA-{cluster}")
    assert name == profile_name(cluster, "us-east-1", "default") and name.startswith(f"{cluster}_")
    got = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    assert [r["RoleName"] for r in got["Roles"]] == [f"NodeRoleA-{cluster}"]
    tags = {t["Key"]: t["Value"] for t in iam.list_instance_profile_tags(InstanceProfileName=name)["Tags"]}
    assert tags == {f"kubernetes.io/cluster/{cluster}": "owned", "eks:eks-cluster-name": cluster,
                    "topology.kubernetes.io/region": "us-east-1", "karpenter.k8s.aws/ec2nodeclass": "default"}
    # the EC2NodeClass's role changes: the profile keeps its name and swaps the role
    assert profiles.ensure("default", f"arn:aws:iam::000000000000:role/NodeRoleB-{cluster}") == name
    got = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    assert [r["RoleName"] for r in got["Roles"]] == [f"NodeRoleB-{cluster}"]
    profiles.delete("default")
    with pytest.raises(iam.exceptions.NoSuchEntityException):
        iam.get_instance_profile(InstanceProfileName=name)
    profiles.delete("default")  # already gone: fine
