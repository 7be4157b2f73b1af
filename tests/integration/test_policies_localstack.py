"""The IAM documents are accepted by LocalStack's IAM as managed policies and trust policies, attached to roles."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from infra.policies import PolicyContext, controller_policies, irsa_trust, node_trust, pod_identity_trust

pytestmark = pytest.mark.localstack


def _delete_role(iam: Any, name: str) -> None:
    """A role with its attached policies detached first (IAM refuses to delete a role that has any)."""
    for p in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]:
        iam.detach_role_policy(RoleName=name, PolicyArn=p["PolicyArn"])
    iam.delete_role(RoleName=name)


def _delete_policy(iam: Any, arn: str) -> None:
    """A managed policy, detached from any role it is still attached to."""
    for role in iam.list_entities_for_policy(PolicyArn=arn).get("PolicyRoles", []):
        iam.detach_role_policy(RoleName=role["RoleName"], PolicyArn=arn)
    iam.delete_policy(PolicyArn=arn)


def test_roles_and_managed_policies(aws_client, cleanup):
    iam = aws_client("iam")
    cluster = f"c{uuid.uuid4().hex[:8]}"
    node = iam.create_role(RoleName=f"KarpenterNodeRole-{cluster}",
                           AssumeRolePolicyDocument=json.dumps(node_trust()))["Role"]
    cleanup(_delete_role, iam, node["RoleName"])
    ctx = PolicyContext("aws", "us-east-1", "000000000000", cluster, node["Arn"],
                        f"arn:aws:sqs:us-east-1:000000000000:{cluster}")
    controller = iam.create_role(
        RoleName=f"KarpenterController-{cluster}",
        AssumeRolePolicyDocument=json.dumps(irsa_trust(
            "arn:aws:iam::000000000000:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/X",
            "https://oidc.eks.us-east-1.amazonaws.com/id/X", "karpenter", "karpenter")))["Role"]
    cleanup(_delete_role, iam, controller["RoleName"])
    iam.create_role(RoleName=f"KarpenterControllerPI-{cluster}",
                    AssumeRolePolicyDocument=json.dumps(pod_identity_trust()))
    cleanup(_delete_role, iam, f"KarpenterControllerPI-{cluster}")
    attached = []
    for suffix, doc in controller_policies(ctx).items():
        policy = iam.create_policy(PolicyName=f"Karpenter{suffix}-{cluster}", PolicyDocument=json.dumps(doc))["Policy"]
        cleanup(_delete_policy, iam, policy["Arn"])
        iam.attach_role_policy(RoleName=controller["RoleName"], PolicyArn=policy["Arn"])
        stored = iam.get_policy_version(PolicyArn=policy["Arn"], VersionId=policy["DefaultVersionId"])
        document = stored["PolicyVersion"]["Document"]
        assert (json.loads(document) if isinstance(document, str) else document) == doc
        attached.append(policy["Arn"])
    listed = iam.list_attached_role_policies(RoleName=controller["RoleName"])["AttachedPolicies"]
    assert sorted(p["PolicyArn"] for p in listed) == sorted(attached)
