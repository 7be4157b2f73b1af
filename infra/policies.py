"""IAM documents for karpy, as plain functions returning dicts: the controller's permissions scoped the way Karpenter's
own policy is, split into managed policies by concern; the trust policies for IRSA, Pod Identity and the node role;
and the interruption queue's policy.

Pure: no cdktn, no boto3. The constructs pass Terraform references (tokens, which are strings) as the arguments; the
tests pass real values and also apply the documents to LocalStack.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

VERSION = "2012-10-17"
MAX_MANAGED_POLICY_CHARS = 6144  # IAM's limit on a managed policy document, whitespace excluded


@dataclass(frozen=True)
class PolicyContext:
    """Where the controller runs: the values its permissions are scoped to."""

    partition: str
    region: str
    account_id: str
    cluster_name: str
    node_role_arn: str
    queue_arn: str

    @property
    def cluster_arn(self) -> str:
        """The EKS cluster's ARN."""
        return f"arn:{self.partition}:eks:{self.region}:{self.account_id}:cluster/{self.cluster_name}"

    def ec2(self, resource: str, account: str | None = None) -> str:
        """arn:<partition>:ec2:<region>:<account>:<resource>; account defaults to this account ("" for AMIs and
        snapshots, which have none in their ARN; "*" for what another account may own)."""
        owner = self.account_id if account is None else account
        return f"arn:{self.partition}:ec2:{self.region}:{owner}:{resource}"


def _owned(ctx: PolicyContext, kind: str) -> dict[str, str]:
    return {f"aws:{kind}/kubernetes.io/cluster/{ctx.cluster_name}": "owned"}


def node_lifecycle_policy(ctx: PolicyContext) -> dict[str, Any]:
    """Launching and terminating nodes: only with the cluster's ownership tags, only on owned resources."""
    tagged = [ctx.ec2(r) for r in ("fleet/*", "instance/*", "volume/*", "network-interface/*", "launch-template/*",
                                   "spot-instances-request/*", "capacity-reservation/*")]
    return {"Version": VERSION, "Statement": [
        # any account's subnets, security groups and capacity reservations: in a shared VPC (and with capacity
        # reservations shared through RAM) they belong to the owner account, as in Karpenter's own policy
        {"Sid": "AllowScopedEC2InstanceAccessActions", "Effect": "Allow",
         "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
         "Resource": [ctx.ec2("image/*", account=""), ctx.ec2("snapshot/*", account=""),
                      ctx.ec2("security-group/*", account="*"), ctx.ec2("subnet/*", account="*"),
                      ctx.ec2("capacity-reservation/*", account="*")]},
        {"Sid": "AllowScopedEC2LaunchTemplateAccessActions", "Effect": "Allow",
         "Action": ["ec2:RunInstances", "ec2:CreateFleet"], "Resource": ctx.ec2("launch-template/*"),
         "Condition": {"StringEquals": _owned(ctx, "ResourceTag"),
                       "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}},
        {"Sid": "AllowScopedEC2InstanceActionsWithTags", "Effect": "Allow",
         "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"], "Resource": tagged,
         "Condition": {"StringEquals": {**_owned(ctx, "RequestTag"),
                                        "aws:RequestTag/eks:eks-cluster-name": ctx.cluster_name},
                       "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}}},
        {"Sid": "AllowScopedResourceCreationTagging", "Effect": "Allow", "Action": "ec2:CreateTags",
         "Resource": tagged[:-1],
         "Condition": {"StringEquals": {**_owned(ctx, "RequestTag"),
                                        "aws:RequestTag/eks:eks-cluster-name": ctx.cluster_name,
                                        "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"]},
                       "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}}},
        {"Sid": "AllowScopedResourceTagging", "Effect": "Allow", "Action": "ec2:CreateTags",
         "Resource": ctx.ec2("instance/*"),
         "Condition": {"StringEquals": _owned(ctx, "ResourceTag"),
                       "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                       "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": ctx.cluster_name},
                       "ForAllValues:StringEquals": {"aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim",
                                                                     "Name"]}}},
        {"Sid": "AllowScopedDeletion", "Effect": "Allow",
         "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
         "Resource": [ctx.ec2("instance/*"), ctx.ec2("launch-template/*")],
         "Condition": {"StringEquals": _owned(ctx, "ResourceTag"),
                       "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}},
    ]}


def iam_integration_policy(ctx: PolicyContext) -> dict[str, Any]:
    """Passing the node role to EC2 only, and managing instance profiles tagged for this cluster and region."""
    profiles = f"arn:{ctx.partition}:iam::{ctx.account_id}:instance-profile/*"
    request_tags = {**_owned(ctx, "RequestTag"), "aws:RequestTag/eks:eks-cluster-name": ctx.cluster_name,
                    "aws:RequestTag/topology.kubernetes.io/region": ctx.region}
    resource_tags = {**_owned(ctx, "ResourceTag"), "aws:ResourceTag/topology.kubernetes.io/region": ctx.region}
    return {"Version": VERSION, "Statement": [
        {"Sid": "AllowPassingInstanceRole", "Effect": "Allow", "Action": "iam:PassRole",
         "Resource": ctx.node_role_arn,
         "Condition": {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}}},
        {"Sid": "AllowScopedInstanceProfileCreationActions", "Effect": "Allow", "Action": "iam:CreateInstanceProfile",
         "Resource": profiles,
         "Condition": {"StringEquals": request_tags,
                       "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}}},
        {"Sid": "AllowScopedInstanceProfileTagActions", "Effect": "Allow", "Action": "iam:TagInstanceProfile",
         "Resource": profiles,
         "Condition": {"StringEquals": {**resource_tags, **request_tags},
                       "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                                      "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}}},
        {"Sid": "AllowScopedInstanceProfileActions", "Effect": "Allow",
         "Action": ["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"],
         "Resource": profiles,
         "Condition": {"StringEquals": resource_tags,
                       "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"}}},
        {"Sid": "AllowUnscopedInstanceProfileListAction", "Effect": "Allow", "Action": "iam:ListInstanceProfiles",
         "Resource": "*"},
        {"Sid": "AllowInstanceProfileReadActions", "Effect": "Allow", "Action": "iam:GetInstanceProfile",
         "Resource": profiles},
    ]}


def eks_integration_policy(ctx: PolicyContext) -> dict[str, Any]:
    """Reading the cluster's endpoint and CA."""
    return {"Version": VERSION, "Statement": [
        {"Sid": "AllowAPIServerEndpointDiscovery", "Effect": "Allow", "Action": "eks:DescribeCluster",
         "Resource": ctx.cluster_arn}]}


def interruption_policy(ctx: PolicyContext) -> dict[str, Any]:
    """Consuming the interruption queue, and nothing else in SQS."""
    return {"Version": VERSION, "Statement": [
        {"Sid": "AllowInterruptionQueueActions", "Effect": "Allow",
         "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"], "Resource": ctx.queue_arn}]}


def resource_discovery_policy(ctx: PolicyContext) -> dict[str, Any]:
    """Describe calls in the cluster's region only, the public AMI parameters, and prices."""
    return {"Version": VERSION, "Statement": [
        {"Sid": "AllowRegionalReadActions", "Effect": "Allow",
         "Action": ["ec2:DescribeCapacityReservations", "ec2:DescribeImages", "ec2:DescribeInstances",
                    "ec2:DescribeInstanceStatus", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes",
                    "ec2:DescribeLaunchTemplates", "ec2:DescribeSecurityGroups", "ec2:DescribeSpotPriceHistory",
                    "ec2:DescribeSubnets"],
         "Resource": "*", "Condition": {"StringEquals": {"aws:RequestedRegion": ctx.region}}},
        {"Sid": "AllowSSMReadActions", "Effect": "Allow", "Action": "ssm:GetParameter",
         "Resource": f"arn:{ctx.partition}:ssm:{ctx.region}::parameter/aws/service/*"},
        {"Sid": "AllowPricingReadActions", "Effect": "Allow", "Action": "pricing:GetProducts", "Resource": "*"},
    ]}


def controller_policies(ctx: PolicyContext) -> dict[str, dict[str, Any]]:
    """The controller's managed policies by concern (name suffix -> document)."""
    return {"NodeLifecycle": node_lifecycle_policy(ctx), "IAMIntegration": iam_integration_policy(ctx),
            "EKSIntegration": eks_integration_policy(ctx), "Interruption": interruption_policy(ctx),
            "ResourceDiscovery": resource_discovery_policy(ctx)}


def minified_length(document: dict[str, Any]) -> int:
    """The size IAM counts against the managed-policy limit (JSON without whitespace)."""
    return len(json.dumps(document, separators=(",", ":")))


def irsa_trust(oidc_provider_arn: str, oidc_issuer: str, namespace: str, service_account: str) -> dict[str, Any]:
    """Trust for IAM Roles for Service Accounts: only the controller's ServiceAccount, only for STS."""
    issuer = oidc_issuer.removeprefix("https://")
    return {"Version": VERSION, "Statement": [{
        "Effect": "Allow", "Principal": {"Federated": oidc_provider_arn}, "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                                       f"{issuer}:aud": "sts.amazonaws.com"}}}]}


def pod_identity_trust() -> dict[str, Any]:
    """Trust for EKS Pod Identity (the association names the ServiceAccount)."""
    return {"Version": VERSION, "Statement": [{
        "Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
        "Action": ["sts:AssumeRole", "sts:TagSession"]}]}


def node_trust() -> dict[str, Any]:
    """Trust for the node role: EC2 instances."""
    return {"Version": VERSION, "Statement": [{
        "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}


def queue_policy(queue_arn: str, rule_arns: list[str], account_id: str) -> dict[str, Any]:
    """Only the interruption rules of this account may send to the queue through EventBridge (aws:SourceArn and
    aws:SourceAccount, so no other account's rule can use the service principal to reach it), and nobody may use
    the queue without TLS."""
    return {"Version": VERSION, "Id": "EC2InterruptionPolicy", "Statement": [
        {"Sid": "AllowInterruptionRules", "Effect": "Allow",
         "Principal": {"Service": "events.amazonaws.com"}, "Action": "sqs:SendMessage",
         "Resource": queue_arn,
         "Condition": {"ArnEquals": {"aws:SourceArn": rule_arns},
                       "StringEquals": {"aws:SourceAccount": account_id}}},
        {"Sid": "DenyHTTP", "Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": queue_arn,
         "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]}
