"""A cluster's worth of AWS resources on LocalStack and an AWSCloudProvider for it, shared by the end-to-end tests
and benchmarks/launch.py.

LocalStack has none of the public /aws/service/... SSM parameters and reserves that prefix against PutParameter, so
the AL2023 alias parameters are seeded under a prefix of our own and a botocore hook renames the prefix in the real
GetParameter requests: the calls still reach LocalStack's SSM.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from controller.catalog.pricing import PriceTable
from controller.cloud.aws.amis import alias_parameters
from controller.cloud.aws.instancetypes import InstanceTypeProvider
from controller.cloud.aws.pricing import PricingProvider
from controller.cloud.aws.provider import AWSCloudProvider
from controller.cloud.aws.userdata import ClusterInfo
from controller.cloud.provider import LaunchedNode, LaunchRequest, NodeClass

K8S = "1.31"


def make_world(ec2: Any, ssm: Any, iam: Any, *, cidr_octet: int, zones: tuple[str, ...], prices: dict[str, float],
               seeded_prefix: str = "/karpy-test") -> tuple[AWSCloudProvider, dict[str, Any]]:
    """VPC, discovery-tagged subnets and security group, seeded AL2023 parameters, node role; the provider and the
    EC2NodeClass manifest that selects them."""
    cluster = f"c{uuid.uuid4().hex[:8]}"
    tag = [{"Key": "karpenter.sh/discovery", "Value": cluster}]
    vpc = ec2.create_vpc(CidrBlock=f"10.{cidr_octet}.0.0/16")["Vpc"]["VpcId"]
    for i, zone in enumerate(zones):
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.{cidr_octet}.{i}.0/24", AvailabilityZone=zone,
                          TagSpecifications=[{"ResourceType": "subnet", "Tags": tag}])
    ec2.create_security_group(GroupName=f"{cluster}-nodes", Description="nodes", VpcId=vpc,
                              TagSpecifications=[{"ResourceType": "security-group", "Tags": tag}])
    for arch, name in alias_parameters("al2023@latest", K8S).items():
        image = ec2.describe_images(Filters=[{"Name": "architecture", "Values": [arch]}])["Images"][0]["ImageId"]
        ssm.put_parameter(Name=seeded_prefix + name, Value=image, Type="String", Overwrite=True)

    def seeded(params: dict[str, Any], **_: Any) -> None:
        if params.get("Name", "").startswith("/aws/service/"):
            params["Name"] = seeded_prefix + params["Name"]

    ssm.meta.events.register("provide-client-params.ssm.GetParameter", seeded)
    trust = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                                "Principal": {"Service": "ec2.amazonaws.com"}}]})
    iam.create_role(RoleName=f"KarpenterNodeRole-{cluster}", AssumeRolePolicyDocument=trust)
    types = InstanceTypeProvider(ec2, PricingProvider(None, ec2, "us-east-1", PriceTable(on_demand=prices)),
                                 "us-east-1")
    provider = AWSCloudProvider(cluster=ClusterInfo(cluster, "https://example.eks", "Q0E=", "10.100.0.0/16"),
                                region="us-east-1",
                                k8s_version=K8S, ec2=ec2, ssm=ssm, iam=iam, instance_types=types)
    selector = [{"tags": {"karpenter.sh/discovery": cluster}}]
    nodeclass = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
                 "spec": {"role": f"KarpenterNodeRole-{cluster}", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                          "subnetSelectorTerms": selector, "securityGroupSelectorTerms": selector,
                          "tags": {"team": "platform"}}}
    return provider, nodeclass


def launch_for(provider: AWSCloudProvider, nodeclaim: dict[str, Any], nodeclass: dict[str, Any]) -> LaunchedNode:
    """provider.create for NodeClaim and EC2NodeClass manifests, converted as the lifecycle controller converts
    them."""
    return provider.create(LaunchRequest.from_manifest(nodeclaim), NodeClass.from_manifest(nodeclass))
