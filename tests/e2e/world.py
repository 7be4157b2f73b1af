"""The pieces of an end-to-end world, shared by the e2e tests and benchmarks/provisioning.py: one cluster's AWS
resources on LocalStack, karpy's CRDs and an EC2NodeClass selecting those resources."""

from __future__ import annotations

import json
from typing import Any

from tests.kubetest import install_crds

__all__ = ["create_aws_world", "create_nodeclass", "install_crds"]


def create_aws_world(ec2: Any, iam: Any, sqs: Any, cluster: str, octet: int = 77) -> dict[str, str]:
    """VPC, two discovery-tagged subnets, the default VPC's default security group tagged, a node role and an
    interruption queue."""
    tag = [{"Key": "karpenter.sh/discovery", "Value": cluster}]
    vpc = ec2.create_vpc(CidrBlock=f"10.{octet}.0.0/16")["Vpc"]["VpcId"]
    for i, zone in enumerate(("us-east-1a", "us-east-1b")):
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.{octet}.{i}.0/24", AvailabilityZone=zone,
                          TagSpecifications=[{"ResourceType": "subnet", "Tags": tag}])
    # LocalStack gives a CreateFleet instance the default VPC's default security group whatever the launch template
    # names, so the nodes' group is that one: a group of the world's own would have every node SecurityGroupDrift
    # (and replaced by the disruption loop, again and again)
    default_vpc = [v["VpcId"] for v in ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]]
    default = ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": default_vpc or [vpc]},
                                                    {"Name": "group-name", "Values": ["default"]}])
    ec2.create_tags(Resources=[default["SecurityGroups"][0]["GroupId"]], Tags=tag)
    image = ec2.describe_images(Filters=[{"Name": "architecture", "Values": ["x86_64"]}])["Images"][0]["ImageId"]
    trust = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                                "Principal": {"Service": "ec2.amazonaws.com"}}]})
    role = f"KarpenterNodeRole-{cluster}"
    iam.create_role(RoleName=role, AssumeRolePolicyDocument=trust)
    queue_name = f"{cluster}-interruption"
    queue_url = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    return {"image": image, "role": role, "queue_name": queue_name, "queue_url": queue_url}


def create_nodeclass(custom: Any, cluster: str, made: dict[str, str]) -> None:
    """The EC2NodeClass named after the cluster, selecting the world's resources (the AMI by id: LocalStack has no
    public SSM parameters for aliases)."""
    selector = [{"tags": {"karpenter.sh/discovery": cluster}}]
    custom.create_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", {
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": cluster},
        "spec": {"role": made["role"], "amiFamily": "AL2023", "amiSelectorTerms": [{"id": made["image"]}],
                 "subnetSelectorTerms": selector, "securityGroupSelectorTerms": selector}})
