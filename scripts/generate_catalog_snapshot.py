"""Generate the bundled catalog snapshot from an EC2 endpoint (LocalStack serves AWS's real instance data).

Usage: python scripts/generate_catalog_snapshot.py --endpoint http://127.0.0.1:4566 --region us-east-1 \
           -o controller/catalog/data/aws-us-east-1.json.gz
Prices are estimates from controller.catalog.pricing (LocalStack has no Pricing API); the file says so.
The same is available as `karpy catalog refresh`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import boto3

from controller.catalog.snapshot import snapshot_from_ec2


def main() -> None:
    """Parse the flags and write the snapshot."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--endpoint", default=None)
    p.add_argument("--region", default="us-east-1")
    p.add_argument("-o", "--output", required=True)
    a = p.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    ec2 = boto3.client("ec2", region_name=a.region, endpoint_url=a.endpoint)
    n = snapshot_from_ec2(ec2, a.region, a.output, dt.date.today().isoformat())
    print(f"wrote {n} instance types to {a.output}")


if __name__ == "__main__":
    main()
