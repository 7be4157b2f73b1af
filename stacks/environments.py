"""One configuration per environment. Values here are the environment's facts (its cluster, network, state backend);
everything karpy creates is derived from them in stacks/app.py."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EnvironmentConfig:
    """What a stack needs to know about one environment."""

    name: str
    region: str
    cluster_name: str
    cluster_endpoint: str
    oidc_provider_arn: str | None = None  # IRSA; leave None to use Pod Identity only
    oidc_issuer: str | None = None
    pod_identity: bool = False
    subnet_ids: list[str] = field(default_factory=list)  # tagged karpenter.sh/discovery=<cluster>
    security_group_ids: list[str] = field(default_factory=list)
    namespace: str = "kube-system"
    service_account: str = "karpenter"
    image_repository: str = "public.ecr.aws/karpy/controller"
    state_bucket: str | None = None  # S3 state backend when set; local state otherwise
    state_lock_table: str | None = None  # DynamoDB table for state locking with the S3 backend
    tags: dict[str, str] = field(default_factory=dict)
    create_spot_service_linked_role: bool = False  # once per account, and only if it does not exist yet
    node_join: str = "access-entry"  # or "aws-auth": the stack then outputs aws_auth_map_role to merge into aws-auth
    iam_path: str = "/"
    permissions_boundary: str | None = None  # ARN of a boundary policy for the roles karpy creates


ENVIRONMENTS: dict[str, EnvironmentConfig] = {
    "dev": EnvironmentConfig(
        name="dev", region="us-east-1", cluster_name="dev",
        cluster_endpoint="https://0A1B2C3D4E5F.gr7.us-east-1.eks.amazonaws.com",
        oidc_provider_arn="arn:aws:iam::111122223333:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/0A1B2C3D4E5F",
        oidc_issuer="https://oidc.eks.us-east-1.amazonaws.com/id/0A1B2C3D4E5F",
        subnet_ids=["subnet-0dev0000000000001", "subnet-0dev0000000000002"],
        security_group_ids=["sg-0dev0000000000001"], tags={"environment": "dev"},
        create_spot_service_linked_role=True),
    "staging": EnvironmentConfig(
        name="staging", region="eu-west-1", cluster_name="staging",
        cluster_endpoint="https://1B2C3D4E5F6A.gr7.eu-west-1.eks.amazonaws.com",
        oidc_provider_arn="arn:aws:iam::444455556666:oidc-provider/oidc.eks.eu-west-1.amazonaws.com/id/1B2C3D4E5F6A",
        oidc_issuer="https://oidc.eks.eu-west-1.amazonaws.com/id/1B2C3D4E5F6A",
        subnet_ids=["subnet-0stg0000000000001", "subnet-0stg0000000000002", "subnet-0stg0000000000003"],
        security_group_ids=["sg-0stg0000000000001"], state_bucket="example-terraform-state-staging",
        node_join="aws-auth",
        state_lock_table="example-terraform-locks",
        tags={"environment": "staging"}),
    "prod": EnvironmentConfig(
        name="prod", region="eu-west-1", cluster_name="prod",
        cluster_endpoint="https://2C3D4E5F6A7B.gr7.eu-west-1.eks.amazonaws.com", pod_identity=True,
        subnet_ids=["subnet-0prd0000000000001", "subnet-0prd0000000000002", "subnet-0prd0000000000003"],
        security_group_ids=["sg-0prd0000000000001"], state_bucket="example-terraform-state-prod",
        state_lock_table="example-terraform-locks",
        tags={"environment": "prod"}),
}
