"""Time to launch NodeClaims through AWSCloudProvider against LocalStack, sequential vs concurrent.

    python benchmarks/launch.py --endpoint http://127.0.0.1:4566 --nodeclaims 100 --workers 8

Sets up a VPC, subnets, a security group, a node role and the AL2023 alias parameters (tests/integration/aws_world.py),
then launches the
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

from controller.cloud.provider import LaunchRequest, NodeClass


def setup(endpoint: str) -> tuple[Any, dict[str, Any]]:
    """A cluster's worth of AWS resources on LocalStack and a provider for it (tests/integration/aws_world.py)."""
    from tests.integration.aws_world import make_world

    kw: dict[str, Any] = {"region_name": "us-east-1", "endpoint_url": endpoint, "aws_access_key_id": "test",
                          "aws_secret_access_key": "test",
                          "config": Config(retries={"mode": "standard", "max_attempts": 5}, max_pool_connections=32)}
    return make_world(boto3.client("ec2", **kw), boto3.client("ssm", **kw), boto3.client("iam", **kw),
                      cidr_octet=40, zones=("us-east-1a", "us-east-1b", "us-east-1c"),
                      prices={"m5.large": 0.096, "c5.large": 0.085, "m5.xlarge": 0.192}, seeded_prefix="/karpy-bench")


def nodeclaim(i: int) -> LaunchRequest:
    """The i-th NodeClaim's launch request."""
    return LaunchRequest.from_manifest({
        "metadata": {"name": f"default-{i:05d}-{uuid.uuid4().hex[:4]}", "uid": str(uuid.uuid4()),
                     "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                   "values": ["m5.large", "c5.large", "m5.xlarge"]}],
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}})


def main() -> None:
    """Launch the NodeClaims both ways and print seconds, launches per second and the ratio."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", default=os.environ.get("KARPY_LOCALSTACK_ENDPOINT", "http://127.0.0.1:4566"))
    ap.add_argument("--nodeclaims", type=int, default=100)
    ap.add_argument("--workers", type=int, default=8)
    a = ap.parse_args()
    provider, manifest = setup(a.endpoint)
    nodeclass = NodeClass.from_manifest(manifest)
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
