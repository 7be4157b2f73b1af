"""The CDK Terrain app: two stacks per environment of the project's environment files, composed from infra/ constructs.

- `<env>`: the AWS resources (node and controller roles, interruption queue and rules, discovery tags) and the
  controller in the cluster (CRDs, ServiceAccount, RBAC, Deployment, PDB).
- `<env>-pools`: the environment's EC2NodeClasses and NodePools. Apart because the Kubernetes provider cannot plan a
  custom resource whose CRD is not installed yet: this stack is planned after `<env>` is applied, and takes the
  node role's name from it through a cross-stack reference (which also orders the two).

    karpy synth-app       (what cdktf.json runs; also `python -m stacks.app`)
    karpy synth [--env E] [-o DIR]
"""

from __future__ import annotations

from pathlib import Path

from infra.cdk import (
    App,
    AwsProvider,
    Construct,
    DataAwsCallerIdentity,
    DataAwsEksCluster,
    DataAwsPartition,
    Fn,
    KubernetesProvider,
    LocalBackend,
    S3Backend,
    TerraformOutput,
    TerraformStack,
)
from infra.constructs import (
    ControllerRole,
    ControllerRoleProps,
    DiscoveryTags,
    InterruptionQueue,
    InterruptionQueueProps,
    NodeRole,
    NodeRoleProps,
    SpotServiceLinkedRole,
)
from infra.deployment import ControllerDeployment
from infra.nodepools import KarpenterResources
from infra.policies import PolicyContext
from stacks.environments import EnvironmentConfig, load_environments
from stacks.render import deployment_props

TARGET_VERSIONS = "targetVersions"  # cdktn's context key (cdktf.json "targetVersions") for the Terraform versions


def _providers(stack: TerraformStack, env: EnvironmentConfig, state_name: str) -> KubernetesProvider:
    """The AWS provider (only for env's account), the state backend, and the Kubernetes provider for env's cluster."""
    AwsProvider(stack, "aws", region=env.region, allowed_account_ids=[env.account_id],
                default_tags=[{"tags": {"managed-by": "karpy", **env.tags}}])
    if env.state_bucket:
        S3Backend(stack, bucket=env.state_bucket, key=f"karpy/{state_name}.tfstate", region=env.region,
                  dynamodb_table=env.state_lock_table, use_lockfile=env.state_use_lockfile or None, encrypt=True)
    else:
        LocalBackend(stack)  # terraform.<stack>.tfstate in the project directory
    eks = DataAwsEksCluster(stack, "cluster", name=env.cluster_name)
    return KubernetesProvider(
        stack, "kubernetes", host=env.cluster_endpoint or eks.endpoint,
        cluster_ca_certificate=Fn.base64decode(eks.certificate_authority.get(0).data),
        exec=[{"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
               "args": ["eks", "get-token", "--cluster-name", env.cluster_name, "--region", env.region]}])


class KarpyStack(TerraformStack):
    """Everything karpy needs in one environment's AWS account, and the controller in its cluster."""

    def __init__(self, scope: Construct, env: EnvironmentConfig) -> None:
        super().__init__(scope, env.name)
        kubernetes = _providers(self, env, env.name)
        partition = DataAwsPartition(self, "partition")
        caller = DataAwsCallerIdentity(self, "caller")
        self.node_role = NodeRole(self, "node", NodeRoleProps(
            cluster_name=env.cluster_name, partition=partition.partition, name=env.node_role_name,
            access_entry=env.node_join == "access-entry", path=env.iam_path,
            permissions_boundary=env.permissions_boundary))
        queue = InterruptionQueue(self, "interruption", InterruptionQueueProps(
            cluster_name=env.cluster_name, account_id=caller.account_id, name=env.queue_name))
        ctx = PolicyContext(partition=partition.partition, region=env.region, account_id=caller.account_id,
                            cluster_name=env.cluster_name, node_role_arn=self.node_role.role.arn,
                            queue_arn=queue.queue.arn)
        controller = ControllerRole(self, "controller", ControllerRoleProps(
            context=ctx, namespace=env.namespace, service_account=env.service_account,
            oidc_provider_arn=env.oidc_provider_arn, oidc_issuer=env.oidc_issuer, pod_identity=env.pod_identity,
            name=env.controller_role_name, path=env.iam_path, permissions_boundary=env.permissions_boundary))
        DiscoveryTags(self, "discovery", env.cluster_name, [*env.subnet_ids, *env.security_group_ids])
        if env.create_spot_service_linked_role:
            SpotServiceLinkedRole(self, "spot")
        self.deployment = ControllerDeployment(self, "controller-deployment", deployment_props(
            env, queue.queue.name, controller.role.arn), kubernetes)
        outputs: dict[str, object] = {
            "controller_role_arn": controller.role.arn, "controller_role_name": controller.role.name,
            "node_role_arn": self.node_role.role.arn, "node_role_name": self.node_role.role.name,
            "queue_name": queue.queue.name, "queue_url": queue.queue.url, "queue_arn": queue.queue.arn,
            "namespace": env.namespace, "service_account": env.service_account,
            "cluster_name": env.cluster_name, "region": env.region,
        }
        if env.cluster_endpoint:
            outputs["cluster_endpoint"] = env.cluster_endpoint
        for suffix, rule in queue.rules.items():
            outputs[f"rule_{suffix}"] = rule.name
        if env.node_join == "aws-auth":
            outputs["aws_auth_map_role"] = self.node_role.aws_auth_map_role
        for key, value in outputs.items():
            TerraformOutput(self, key, value=value)


class PoolsStack(TerraformStack):
    """The environment's EC2NodeClasses and NodePools, planned once `<env>` has installed their CRDs."""

    def __init__(self, scope: Construct, env: EnvironmentConfig, base: KarpyStack) -> None:
        super().__init__(scope, env.pools_stack)
        kubernetes = _providers(self, env, env.pools_stack)
        # the node role's name is a cross-stack reference: an output of <env>, read from its state
        self.resources = KarpenterResources(self, "karpenter", env.pools, kubernetes, env.pools_source or env.source,
                                            base.node_role.role.name)
        self.add_dependency(base)


def environments(root: Path | None = None) -> list[str]:
    """The project's environment names."""
    from stacks.environments import environment_names

    return environment_names(root)


def build(app: App, envs: list[str] | None = None, root: Path | None = None) -> list[TerraformStack]:
    """Add the two stacks of each of envs (default: all) to app, `<env>` before `<env>-pools`; InvalidEnvironment
    for an unknown name or a bad file, InvalidName / InvalidKarpenterResources for what AWS or Karpenter would
    refuse."""
    loaded = load_environments(root, envs)
    if any(e.state_use_lockfile for e in loaded) and not app.node.try_get_context(TARGET_VERSIONS):
        # S3-native locking exists from Terraform/OpenTofu 1.10; say so, or cdktn refuses the backend
        app.node.set_context(TARGET_VERSIONS, {"terraform": ">=1.10.0", "opentofu": ">=1.10.0"})
    out: list[TerraformStack] = []
    for env in loaded:
        base = KarpyStack(app, env)
        out += [base, PoolsStack(app, env, base)]
    return out


def synth(envs: list[str] | None = None, outdir: str = "cdktf.out", root: Path | None = None) -> list[str]:
    """Synthesize the stacks to outdir/stacks/<stack>/cdk.tf.json; returns those directories, in deploy order."""
    app = App(outdir=outdir)
    stacks = build(app, envs, root)
    app.synth()
    return [str(Path(outdir) / "stacks" / s.node.id) for s in stacks]


def main() -> None:
    """Entry point of cdktf.json's app command (cdktf sets the output directory through the environment)."""
    app = App()
    build(app)
    app.synth()


if __name__ == "__main__":
    main()
