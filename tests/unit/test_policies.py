"""The controller's IAM documents, statement by statement: scoped resources, conditions present, no wildcard PassRole,
TerminateInstances only on owned resources, every managed policy under IAM's size limit."""

from __future__ import annotations

import pytest

from infra.policies import (
    MAX_MANAGED_POLICY_CHARS,
    PolicyContext,
    controller_policies,
    irsa_trust,
    minified_length,
    node_trust,
    pod_identity_trust,
    queue_policy,
)

CTX = PolicyContext(partition="aws", region="us-east-1", account_id="111122223333",
                    cluster_name="a-fairly-long-production-cluster-name",
                    node_role_arn="arn:aws:iam::111122223333:role/KarpenterNodeRole-a-fairly-long-production-cluster-name",
                    queue_arn="arn:aws:sqs:us-east-1:111122223333:a-fairly-long-production-cluster-name")
OWNED = "aws:ResourceTag/kubernetes.io/cluster/a-fairly-long-production-cluster-name"


def statements():
    return {s["Sid"]: s for doc in controller_policies(CTX).values() for s in doc["Statement"]}


def actions(s):
    return [s["Action"]] if isinstance(s["Action"], str) else s["Action"]


@pytest.mark.parametrize("name", ["NodeLifecycle", "IAMIntegration", "EKSIntegration", "Interruption",
                                  "ResourceDiscovery"])
def test_each_managed_policy_fits(name):
    assert minified_length(controller_policies(CTX)[name]) <= MAX_MANAGED_POLICY_CHARS


def test_terminate_and_delete_only_on_owned_resources():
    s = statements()["AllowScopedDeletion"]
    assert set(actions(s)) == {"ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"}
    assert s["Condition"]["StringEquals"] == {OWNED: "owned"}
    assert s["Condition"]["StringLike"] == {"aws:ResourceTag/karpenter.sh/nodepool": "*"}
    for sid, st in statements().items():
        if sid != "AllowScopedDeletion":
            assert "ec2:TerminateInstances" not in actions(st), sid


def test_launches_need_ownership_request_tags():
    s = statements()["AllowScopedEC2InstanceActionsWithTags"]
    cond = s["Condition"]
    assert cond["StringEquals"]["aws:RequestTag/kubernetes.io/cluster/a-fairly-long-production-cluster-name"] == "owned"
    assert cond["StringEquals"]["aws:RequestTag/eks:eks-cluster-name"] == CTX.cluster_name
    assert cond["StringLike"] == {"aws:RequestTag/karpenter.sh/nodepool": "*"}
    tagging = statements()["AllowScopedResourceCreationTagging"]
    assert tagging["Condition"]["StringEquals"]["ec2:CreateAction"] == ["RunInstances", "CreateFleet",
                                                                       "CreateLaunchTemplate"]
    retag = statements()["AllowScopedResourceTagging"]
    assert retag["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"] == ["eks:eks-cluster-name",
                                                                             "karpenter.sh/nodeclaim", "Name"]


def test_pass_role_is_the_node_role_to_ec2_only():
    passes = [s for s in statements().values() if "iam:PassRole" in actions(s)]
    assert len(passes) == 1
    s = passes[0]
    assert s["Resource"] == CTX.node_role_arn and "*" not in s["Resource"]
    assert s["Condition"]["StringEquals"]["iam:PassedToService"] == ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]


def test_instance_profiles_are_scoped_by_tags():
    s = statements()
    create = s["AllowScopedInstanceProfileCreationActions"]["Condition"]
    assert create["StringEquals"]["aws:RequestTag/topology.kubernetes.io/region"] == "us-east-1"
    assert create["StringLike"] == {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}
    manage = s["AllowScopedInstanceProfileActions"]
    assert set(actions(manage)) == {"iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile",
                                    "iam:DeleteInstanceProfile"}
    assert manage["Condition"]["StringEquals"][OWNED] == "owned"


def test_reads_are_regional_and_everything_else_is_scoped():
    s = statements()
    assert s["AllowRegionalReadActions"]["Condition"] == {"StringEquals": {"aws:RequestedRegion": "us-east-1"}}
    assert s["AllowSSMReadActions"]["Resource"] == "arn:aws:ssm:us-east-1::parameter/aws/service/*"
    assert s["AllowInterruptionQueueActions"]["Resource"] == CTX.queue_arn
    assert s["AllowAPIServerEndpointDiscovery"]["Resource"] == (
        "arn:aws:eks:us-east-1:111122223333:cluster/a-fairly-long-production-cluster-name")
    # the only unconditioned wildcard resources are read-only list/price calls
    unscoped = {sid for sid, st in s.items() if st["Resource"] == "*" and "Condition" not in st}
    assert unscoped == {"AllowUnscopedInstanceProfileListAction", "AllowPricingReadActions"}


def test_trust_policies():
    irsa = irsa_trust("arn:aws:iam::111122223333:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC",
                      "https://oidc.eks.us-east-1.amazonaws.com/id/ABC", "karpenter", "karpenter")
    cond = irsa["Statement"][0]["Condition"]["StringEquals"]
    assert cond == {"oidc.eks.us-east-1.amazonaws.com/id/ABC:sub": "system:serviceaccount:karpenter:karpenter",
                    "oidc.eks.us-east-1.amazonaws.com/id/ABC:aud": "sts.amazonaws.com"}
    assert irsa["Statement"][0]["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert pod_identity_trust()["Statement"][0]["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    assert node_trust()["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}


def test_queue_policy_only_this_accounts_rules_and_tls():
    rules = ["arn:aws:events:us-east-1:111122223333:rule/c-SpotInterruption",
             "arn:aws:events:us-east-1:111122223333:rule/c-Rebalance"]
    doc = queue_policy(CTX.queue_arn, rules, "111122223333")
    allow, deny = doc["Statement"]
    assert allow["Principal"] == {"Service": "events.amazonaws.com"} and allow["Action"] == "sqs:SendMessage"
    assert allow["Condition"] == {"ArnEquals": {"aws:SourceArn": rules},
                                  "StringEquals": {"aws:SourceAccount": "111122223333"}}
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_launch_resources_of_a_shared_vpc():
    """Subnets and security groups of a shared VPC belong to the VPC owner's account: any account is allowed for
    them (as in Karpenter's policy), while what karpy creates stays in this account."""
    statements = {s["Sid"]: s for s in controller_policies(CTX)["NodeLifecycle"]["Statement"]}
    access = statements["AllowScopedEC2InstanceAccessActions"]["Resource"]
    assert "arn:aws:ec2:us-east-1:*:subnet/*" in access and "arn:aws:ec2:us-east-1:*:security-group/*" in access
    assert "arn:aws:ec2:us-east-1::image/*" in access
    tagged = statements["AllowScopedEC2InstanceActionsWithTags"]["Resource"]
    assert "arn:aws:ec2:us-east-1:111122223333:instance/*" in tagged
