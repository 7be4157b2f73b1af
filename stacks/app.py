"""The CDK Terrain app: one stack per environment, composed from infra/ constructs.

    .venv/bin/python -m stacks.app          (what cdktf.json runs)
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
from infra.deployment import ControllerDeployment, DeploymentProps
from infra.nodepools import KarpenterResources
from infra.policies import PolicyContext
from stacks.environments import ENVIRONMENTS, EnvironmentConfig
from stacks.pools import pools


class KarpyStack(TerraformStack):
    """Everything karpy needs in one environment's AWS account."""

    def __init__(self, scope: Construct, env: EnvironmentConfig) -> None:
        super().__init__(scope, env.name)
        AwsProvider(self, "aws", region=env.region, default_tags=[{"tags": {"managed-by": "karpy", **env.tags}}])
        if env.state_bucket:
            S3Backend(self, bucket=env.state_bucket, key=f"karpy/{env.name}.tfstate", region=env.region,
                      dynamodb_table=env.state_lock_table, encrypt=True)
        else:
            LocalBackend(self, path=f"terraform.{env.name}.tfstate")
        partition = DataAwsPartition(self, "partition")
        caller = DataAwsCallerIdentity(self, "caller")
        if env.node_join not in ("access-entry", "aws-auth"):
            raise ValueError(f"{env.name}: node_join {env.node_join!r}: expected access-entry or aws-auth")
        node = NodeRole(self, "node", NodeRoleProps(
            cluster_name=env.cluster_name, partition=partition.partition, access_entry=env.node_join == "access-entry",
            path=env.iam_path, permissions_boundary=env.permissions_boundary))
        queue = InterruptionQueue(self, "interruption", InterruptionQueueProps(cluster_name=env.cluster_name))
        ctx = PolicyContext(partition=partition.partition, region=env.region, account_id=caller.account_id,
                            cluster_name=env.cluster_name, node_role_arn=node.role.arn, queue_arn=queue.queue.arn)
        controller = ControllerRole(self, "controller", ControllerRoleProps(
            context=ctx, namespace=env.namespace, service_account=env.service_account,
            oidc_provider_arn=env.oidc_provider_arn, oidc_issuer=env.oidc_issuer, pod_identity=env.pod_identity,
            path=env.iam_path, permissions_boundary=env.permissions_boundary))
        DiscoveryTags(self, "discovery", env.cluster_name, [*env.subnet_ids, *env.security_group_ids])
        if env.create_spot_service_linked_role:
            SpotServiceLinkedRole(self, "spot")
        eks = DataAwsEksCluster(self, "cluster", name=env.cluster_name)
        kubernetes = KubernetesProvider(
            self, "kubernetes", host=env.cluster_endpoint,
            cluster_ca_certificate=Fn.base64decode(eks.certificate_authority.get(0).data),
            exec=[{"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
                   "args": ["eks", "get-token", "--cluster-name", env.cluster_name, "--region", env.region]}])
        KarpenterResources(self, "karpenter", pools(env.name, env.cluster_name), kubernetes,
                           f"stacks/pools.py[{env.name}]", node.role.name)
        ControllerDeployment(self, "controller-deployment", DeploymentProps(
            cluster_name=env.cluster_name, cluster_endpoint=env.cluster_endpoint, region=env.region,
            queue_name=queue.queue.name, role_arn=None if env.pod_identity else controller.role.arn,
            image_repository=env.image_repository, version=karpy_version(), namespace=env.namespace,
            service_account=env.service_account), kubernetes)
        outputs: dict[str, object] = {
            "controller_role_arn": controller.role.arn, "controller_role_name": controller.role.name,
            "node_role_arn": node.role.arn, "node_role_name": node.role.name,
            "queue_name": queue.queue.name, "queue_url": queue.queue.url, "queue_arn": queue.queue.arn,
            "namespace": env.namespace, "service_account": env.service_account,
            "cluster_name": env.cluster_name, "cluster_endpoint": env.cluster_endpoint,
        }
        for suffix, rule in queue.rules.items():
            outputs[f"rule_{suffix}"] = rule.name
        if env.node_join == "aws-auth":
            outputs["aws_auth_map_role"] = node.aws_auth_map_role
        for key, value in outputs.items():
            TerraformOutput(self, key, value=value)


def karpy_version() -> str:
    """karpy's version, the controller image's tag: pyproject.toml's in a checkout (the tag scripts/build-image.sh
    gives the image), else the installed package's."""
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        return str(tomllib.loads(pyproject.read_text())["project"]["version"])
    from importlib.metadata import version

    return version("karpy")


def environments() -> list[str]:
    """The configured environment names."""
    return list(ENVIRONMENTS)


def build(app: App, envs: list[str] | None = None) -> list[KarpyStack]:
    """Add the stacks of envs (default: all) to app; an unknown name is a ValueError listing the known ones."""
    names = envs or environments()
    unknown = [n for n in names if n not in ENVIRONMENTS]
    if unknown:
        raise ValueError(f"unknown environment(s) {', '.join(unknown)}; known: {', '.join(environments())}")
    return [KarpyStack(app, ENVIRONMENTS[n]) for n in names]


def synth(envs: list[str] | None = None, outdir: str = "cdktf.out") -> list[str]:
    """Synthesize the stacks to outdir/stacks/<env>/cdk.tf.json; returns those directories."""
    app = App(outdir=outdir)
    stacks = build(app, envs)
    app.synth()
    return [str(Path(outdir) / "stacks" / s.node.id) for s in stacks]


def main() -> None:
    """Entry point of cdktf.json's app command."""
    app = App()
    build(app)
    app.synth()


if __name__ == "__main__":
    main()
