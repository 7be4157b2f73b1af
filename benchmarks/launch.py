"""Time to launch NodeClaims through AWSCloudProvider against LocalStack, sequential vs concurrent.

    python benchmarks/launch.py --endpoint http://127.0.0.1:4566 --nodeclaims 100 --workers 8

Sets up a VPC, subnets, a security group, a node role and the AL2023 alias parameters (LocalStack reserves
/aws/service/..., so they are seeded under /karpy-bench and a botocore hook renames the prefix), then launches the
NodeClaims one after another (the baseline, same run) and with a thread pool, and prints both and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import boto3
from botocore.config import Config

from controller.catalog.pricing import PriceTable
from controller.cloud.aws.amis import alias_parameters
from controller.cloud.aws.instancetypes import InstanceTypeProvider
from controller.cloud.aws.pricing import PricingProvider
from controller.cloud.aws.provider import AWSCloudProvider
from controller.cloud.aws.userdata import ClusterInfo

SEEDED = "/karpy-bench"
K8S = "1.31"


def setup(endpoint: str) -> tuple[AWSCloudProvider, dict[str, Any]]:
    """A cluster's worth of AWS resources on LocalStack and a provider for it."""
    kw: dict[str, Any] = {"region_name": "us-east-1", "endpoint_url": endpoint, "aws_access_key_id": "test",
                          "aws_secret_access_key": "test",
                          "config": Config(retries={"mode": "standard", "max_attempts": 5}, max_pool_connections=32)}
    ec2: Any = boto3.client("ec2", **kw)
    ssm, iam = boto3.client("ssm", **kw), boto3.client("iam", **kw)
    cluster = f"bench{uuid.uuid4().hex[:6]}"
    tag = [{"Key": "karpenter.sh/discovery", "Value": cluster}]
    vpc = ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
    for i, zone in enumerate(("us-east-1a", "us-east-1b", "us-east-1c")):
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.40.{i}.0/24", AvailabilityZone=zone,
                          TagSpecifications=[{"ResourceType": "subnet", "Tags": tag}])
    ec2.create_security_group(GroupName=f"{cluster}-nodes", Description="nodes", VpcId=vpc,
                              TagSpecifications=[{"ResourceType": "security-group", "Tags": tag}])
    for arch, name in alias_parameters("al2023@latest", K8S).items():
        image = ec2.describe_images(Filters=[{"Name": "architecture", "Values": [arch]}])["Images"][0]["ImageId"]
        ssm.put_parameter(Name=SEEDED + name, Value=image, Type="String", Overwrite=True)

    def seeded(params: dict[str, Any], **_: Any) -> None:
        if params.get("Name", "").startswith("/aws/service/"):
            params["Name"] = SEEDED + params["Name"]

    ssm.meta.events.register("provide-client-params.ssm.GetParameter", seeded)
    trust = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                                "Principal": {"Service": "ec2.amazonaws.com"}}]})
    iam.create_role(RoleName=f"KarpenterNodeRole-{cluster}", AssumeRolePolicyDocument=trust)
    prices = PriceTable(on_demand={"m5.large": 0.096, "c5.large": 0.085, "m5.xlarge": 0.192})
    types = InstanceTypeProvider(ec2, PricingProvider(None, ec2, "us-east-1", prices), "us-east-1")
    provider = AWSCloudProvider(cluster=ClusterInfo(cluster, "https://example.eks", "Q0E="), region="us-east-1",
                                k8s_version=K8S, ec2=ec2, ssm=ssm, iam=iam, instance_types=types)
    nodeclass = {"metadata": {"name": "default"}, "spec": {
        "role": f"KarpenterNodeRole-{cluster}", "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster}}]}}
    return provider, nodeclass


def nodeclaim(i: int) -> dict[str, Any]:
    """The i-th NodeClaim manifest."""
    return {"metadata": {"name": f"default-{i:05d}-{uuid.uuid4().hex[:4]}", "uid": str(uuid.uuid4()),
                         "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                       "values": ["m5.large", "c5.large", "m5.xlarge"]}],
                     "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}


def main() -> None:
    """Launch the NodeClaims both ways and print seconds, launches per second and the ratio."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", default=os.environ.get("KARPY_LOCALSTACK_ENDPOINT", "http://127.0.0.1:4566"))
    ap.add_argument("--nodeclaims", type=int, default=100)
    ap.add_argument("--workers", type=int, default=8)
    a = ap.parse_args()
    provider, nodeclass = setup(a.endpoint)
    provider.create(nodeclaim(-1), nodeclass)  # warm the discovery, AMI, profile and template caches
    start = time.perf_counter()
    sequential = [provider.create(nodeclaim(i), nodeclass) for i in range(a.nodeclaims)]
    seq = time.perf_counter() - start
    start = time.perf_counter()
    with ThreadPoolExecutor(a.workers) as pool:
        concurrent = list(pool.map(lambda i: provider.create(nodeclaim(i), nodeclass),
                                   range(a.nodeclaims, 2 * a.nodeclaims)))
    con = time.perf_counter() - start
    ids = {n.provider_id for n in sequential + concurrent}
    print(json.dumps({"nodeclaims": a.nodeclaims, "sequentialSeconds": round(seq, 2),
                      "concurrentSeconds": round(con, 2), "workers": a.workers,
                      "launchesPerSecondSequential": round(a.nodeclaims / seq, 1),
                      "launchesPerSecondConcurrent": round(a.nodeclaims / con, 1), "speedup": round(seq / con, 2),
                      "distinctInstances": len(ids)}, indent=2))


if __name__ == "__main__":
    main()
