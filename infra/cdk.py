"""Every CDK Terrain (cdktn) import karpy uses, in one place: the rest of infra/ and stacks/ import from here, so a
provider or cdktn upgrade touches one file."""

from cdktn import App, Fn, LocalBackend, S3Backend, TerraformOutput, TerraformStack, Testing
from cdktn_provider_aws.cloudwatch_event_rule import CloudwatchEventRule
from cdktn_provider_aws.cloudwatch_event_target import CloudwatchEventTarget
from cdktn_provider_aws.data_aws_caller_identity import DataAwsCallerIdentity
from cdktn_provider_aws.data_aws_eks_cluster import DataAwsEksCluster
from cdktn_provider_aws.data_aws_partition import DataAwsPartition
from cdktn_provider_aws.ec2_tag import Ec2Tag
from cdktn_provider_aws.eks_access_entry import EksAccessEntry
from cdktn_provider_aws.eks_pod_identity_association import EksPodIdentityAssociation
from cdktn_provider_aws.iam_instance_profile import IamInstanceProfile
from cdktn_provider_aws.iam_policy import IamPolicy
from cdktn_provider_aws.iam_role import IamRole
from cdktn_provider_aws.iam_role_policy_attachment import IamRolePolicyAttachment
from cdktn_provider_aws.iam_service_linked_role import IamServiceLinkedRole
from cdktn_provider_aws.provider import AwsProvider
from cdktn_provider_aws.sqs_queue import SqsQueue
from cdktn_provider_aws.sqs_queue_policy import SqsQueuePolicy
from cdktn_provider_kubernetes.manifest import Manifest
from cdktn_provider_kubernetes.provider import KubernetesProvider
from constructs import Construct

__all__ = [
    "App", "AwsProvider", "CloudwatchEventRule", "CloudwatchEventTarget", "Construct", "DataAwsCallerIdentity",
    "DataAwsEksCluster", "DataAwsPartition", "Ec2Tag", "EksAccessEntry", "EksPodIdentityAssociation", "Fn",
    "IamInstanceProfile", "IamPolicy", "IamRole", "IamRolePolicyAttachment", "IamServiceLinkedRole",
    "KubernetesProvider", "LocalBackend", "Manifest", "S3Backend", "SqsQueue", "SqsQueuePolicy", "TerraformOutput",
    "TerraformStack", "Testing",
]
