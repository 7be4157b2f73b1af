"""The AWS clients karpy uses, built once with botocore's retry policy: adaptive mode (client-side rate limiting on
throttling) with retries for throttling, 5xx and transient network errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

DEFAULT_MAX_ATTEMPTS = 10
# prices have a static fallback and refresh on their own schedule: a failing Pricing API must not hold up a launch
PRICING_MAX_ATTEMPTS = 3


def client_config(mode: str = "adaptive", max_attempts: int = DEFAULT_MAX_ATTEMPTS, pool: int = 32) -> Config:
    """botocore Config with the retry mode and attempts, and a connection pool for concurrent launches."""
    if mode not in ("standard", "adaptive", "legacy"):
        raise ValueError(f"retry mode {mode!r}: expected standard, adaptive or legacy")
    retries: Any = {"mode": mode, "total_max_attempts": max_attempts}  # attempts in all, the first one included
    return Config(retries=retries, max_pool_connections=pool)


PRICING_CONFIG = client_config("standard", PRICING_MAX_ATTEMPTS)


@dataclass
class AWSClients:
    """EC2, SSM, IAM, SQS and Pricing clients for one region."""

    ec2: Any
    ssm: Any
    iam: Any
    sqs: Any
    pricing: Any | None
    eks: Any | None = None  # DescribeCluster, for the endpoint and CA bundle when CLUSTER_ENDPOINT is not set


def make_clients(region: str | None, endpoint_url: str | None = None, mode: str = "adaptive",
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS, pricing: bool = True, eks: bool = True) -> AWSClients:
    """Clients for region; endpoint_url points them at LocalStack or a VPC endpoint. The Pricing API is served from
    us-east-1 whatever the region; pass pricing=False where it cannot be reached (isolated VPCs)."""
    cfg = client_config(mode, max_attempts)
    session: Any = boto3.session.Session()

    def make(service: str, where: str | None = region, config: Config = cfg) -> Any:
        return session.client(service, region_name=where, endpoint_url=endpoint_url, config=config)

    return AWSClients(ec2=make("ec2"), ssm=make("ssm"), iam=make("iam"), sqs=make("sqs"),
                      pricing=make("pricing", "us-east-1", PRICING_CONFIG) if pricing else None,
                      eks=make("eks") if eks else None)


def make_client(service: str, region: str | None, endpoint_url: str | None = None,
                config: Config | None = None) -> Any:
    """One client with karpy's retry policy (client_config() unless config is given), for the commands that need
    one or two services rather than the controller's set (karpy catalog refresh)."""
    session: Any = boto3.session.Session()
    return session.client(service, region_name=region, endpoint_url=endpoint_url, config=config or client_config())
