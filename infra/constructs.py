"""karpy's constructs: node role, controller role and policies, interruption queue and rules, discovery tags.

Typed props with documented defaults; every value one construct takes from another is a Terraform reference to that
construct's attribute (a token), never a copied string. The IAM documents and event patterns come from the pure
functions in infra/policies.py and infra/events.py, which the tests also apply to LocalStack.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from infra.cdk import (
    CloudwatchEventRule,
    CloudwatchEventTarget,
    Construct,
    Ec2Tag,
    EksAccessEntry,
    EksPodIdentityAssociation,
    IamInstanceProfile,
    IamPolicy,
    IamRole,
    IamRolePolicyAttachment,
    IamServiceLinkedRole,
    SqsQueue,
    SqsQueuePolicy,
)
from infra.events import INTERRUPTION_RULES
from infra.names import controller_policy_name, controller_role_name, node_role_name, queue_name, rule_names
from infra.policies import PolicyContext, controller_policies, irsa_trust, node_trust, pod_identity_trust, queue_policy

AWS_MANAGED = "arn:{partition}:iam::aws:policy/{name}"


@dataclass
class NodeRoleProps:
    """The role Karpenter's nodes run with."""

    cluster_name: str
    partition: str
    name: str | None = None  # default KarpenterNodeRole-<cluster>: deterministic, so EC2NodeClass `role` is known
    ipv6: bool = False  # attach the IPv6 CNI policy instead of AmazonEKS_CNI_Policy
    ssm_managed: bool = True  # AmazonSSMManagedInstanceCore, for Session Manager access to nodes
    extra_policy_arns: list[str] = field(default_factory=list)
    create_instance_profile: bool = False  # only for EC2NodeClasses that name instanceProfile instead of role
    access_entry: bool = True  # EKS access entry of type EC2_LINUX; False: join through aws-auth (aws_auth_map_role)
    path: str = "/"
    permissions_boundary: str | None = None


class NodeRole(Construct):
    """IAM role for nodes, with the EKS worker, ECR pull-only and CNI policies and optional SSM and extras."""

    def __init__(self, scope: Construct, id: str, props: NodeRoleProps) -> None:
        super().__init__(scope, id)
        name = node_role_name(props.cluster_name, props.name)
        self.role = IamRole(self, "role", name=name, assume_role_policy=json.dumps(node_trust()),
                            description=f"karpy nodes of {props.cluster_name}", path=props.path,
                            permissions_boundary=props.permissions_boundary)
        cni = "AmazonEKS_CNI_IPv6_Policy" if props.ipv6 else "AmazonEKS_CNI_Policy"
        managed = ["AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly", cni]
        if props.ssm_managed:
            managed.append("AmazonSSMManagedInstanceCore")
        arns = [AWS_MANAGED.format(partition=props.partition, name=n) for n in managed] + props.extra_policy_arns
        for i, arn in enumerate(arns):
            IamRolePolicyAttachment(self, f"attach-{i}", role=self.role.name, policy_arn=arn)
        self.instance_profile = (IamInstanceProfile(self, "profile", name=name, role=self.role.name)
                                 if props.create_instance_profile else None)
        if props.access_entry:
            EksAccessEntry(self, "access", cluster_name=props.cluster_name, principal_arn=self.role.arn,
                           type="EC2_LINUX")
        self.aws_auth_map_role = aws_auth_map_role(self.role.arn)


def aws_auth_map_role(role_arn: str) -> dict[str, object]:
    """The aws-auth mapRoles entry that lets nodes of this role join (the legacy alternative to access entries)."""
    return {"rolearn": role_arn, "username": "system:node:{{EC2PrivateDNSName}}",
            "groups": ["system:bootstrappers", "system:nodes"]}


@dataclass
class ControllerRoleProps:
    """The role the controller's pods assume."""

    context: PolicyContext
    namespace: str = "kube-system"
    service_account: str = "karpenter"
    oidc_provider_arn: str | None = None  # set for IRSA
    oidc_issuer: str | None = None  # the cluster's OIDC issuer URL, for IRSA
    pod_identity: bool = False  # trust pods.eks.amazonaws.com and create the pod identity association
    name: str | None = None  # default KarpenterController-<cluster>
    path: str = "/"
    permissions_boundary: str | None = None


class ControllerRole(Construct):
    """The controller's role, trusted through IRSA and/or Pod Identity, with one managed policy per concern."""

    def __init__(self, scope: Construct, id: str, props: ControllerRoleProps) -> None:
        super().__init__(scope, id)
        ctx = props.context
        statements = []
        if props.oidc_provider_arn and props.oidc_issuer:
            statements += irsa_trust(props.oidc_provider_arn, props.oidc_issuer, props.namespace,
                                     props.service_account)["Statement"]
        if props.pod_identity:
            statements += pod_identity_trust()["Statement"]
        if not statements:
            raise ValueError("ControllerRoleProps: set oidc_provider_arn and oidc_issuer (IRSA), pod_identity, or both")
        self.role = IamRole(self, "role", name=controller_role_name(ctx.cluster_name, props.name),
                            path=props.path, permissions_boundary=props.permissions_boundary,
                            assume_role_policy=json.dumps({"Version": "2012-10-17", "Statement": statements}))
        self.policies = {}
        for suffix, document in controller_policies(ctx).items():
            policy = IamPolicy(self, f"policy-{suffix}", name=controller_policy_name(suffix, ctx.cluster_name),
                               path=props.path, policy=json.dumps(document))
            IamRolePolicyAttachment(self, f"attach-{suffix}", role=self.role.name, policy_arn=policy.arn)
            self.policies[suffix] = policy
        if props.pod_identity:
            EksPodIdentityAssociation(self, "pod-identity", cluster_name=ctx.cluster_name,
                                      namespace=props.namespace, service_account=props.service_account,
                                      role_arn=self.role.arn)


@dataclass
class InterruptionQueueProps:
    """The interruption queue and the EventBridge rules that feed it."""

    cluster_name: str
    account_id: str  # the account whose rules may send (aws:SourceAccount); a reference or the configured account
    name: str | None = None  # default: the cluster name, as Karpenter's getting-started template does
    kms_key_id: str | None = None  # None: SQS-managed SSE. A KMS key needs a key policy letting events.amazonaws.com
    # use it (kms:GenerateDataKey, kms:Decrypt), or EventBridge cannot deliver.


class InterruptionQueue(Construct):
    """SQS queue (300 s retention, encrypted, only this account's interruption rules may send, TLS only) and one
    EventBridge rule per event."""

    def __init__(self, scope: Construct, id: str, props: InterruptionQueueProps) -> None:
        super().__init__(scope, id)
        name = queue_name(props.cluster_name, props.name)
        names = rule_names(name, list(INTERRUPTION_RULES))  # refused at synth when AWS would refuse them
        self.queue = SqsQueue(self, "queue", name=name, message_retention_seconds=300,
                              sqs_managed_sse_enabled=None if props.kms_key_id else True,
                              kms_master_key_id=props.kms_key_id)
        self.rules = {}
        for suffix, pattern in INTERRUPTION_RULES.items():
            rule = CloudwatchEventRule(self, f"rule-{suffix}", name=names[suffix],
                                       description=f"karpy interruption: {suffix}", event_pattern=json.dumps(pattern))
            CloudwatchEventTarget(self, f"target-{suffix}", rule=rule.name, target_id="KarpenterInterruptionQueue",
                                  arn=self.queue.arn)
            self.rules[suffix] = rule
        SqsQueuePolicy(self, "policy", queue_url=self.queue.url, policy=json.dumps(queue_policy(
            self.queue.arn, [r.arn for r in self.rules.values()], props.account_id)))


class DiscoveryTags(Construct):
    """karpenter.sh/discovery=<cluster> on the subnets and security groups EC2NodeClasses select."""

    def __init__(self, scope: Construct, id: str, cluster_name: str, resource_ids: list[str]) -> None:
        super().__init__(scope, id)
        for i, rid in enumerate(resource_ids):
            Ec2Tag(self, f"tag-{i}", resource_id=rid, key="karpenter.sh/discovery", value=cluster_name)


class SpotServiceLinkedRole(Construct):
    """AWSServiceRoleForEC2Spot, which EC2 needs before an account's first spot launch. Opt-in: it exists once per
    account, so create it from one stack only (creating it twice fails)."""

    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        self.role = IamServiceLinkedRole(self, "role", aws_service_name="spot.amazonaws.com",
                                         description="EC2 Spot, for karpy's spot launches")
