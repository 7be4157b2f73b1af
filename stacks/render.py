"""`karpy render`: the objects the stacks deploy into the cluster, as plain YAML, for teams that deploy with kubectl,
kustomize or GitOps tools instead of Terraform.

The same functions build them as in the stacks (infra/manifests.py); where a stack passes a Terraform reference (the
controller role's ARN, the queue's name, the node role's name), render passes the name the stack gives that resource
(infra/names.py), so both describe the same cluster. Needs no cdktn.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from infra.manifests import DeploymentProps, controller_manifests, pool_manifests
from infra.names import controller_role_name, node_role_name, partition_of, queue_name, role_arn
from stacks.environments import EnvironmentConfig


def karpy_version() -> str:
    """karpy's version, the controller image's tag: pyproject.toml's in a checkout (the tag scripts/build-image.sh
    gives the image), else the installed package's."""
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        return str(tomllib.loads(pyproject.read_text())["project"]["version"])
    from importlib.metadata import version

    return version("karpy")


def deployment_props(env: EnvironmentConfig, queue: str, controller_role_arn: str) -> DeploymentProps:
    """How the controller of env runs; queue and controller_role_arn are references in a stack, names in render."""
    return DeploymentProps(
        cluster_name=env.cluster_name, cluster_endpoint=env.cluster_endpoint, region=env.region,
        queue_name=queue, role_arn=None if env.pod_identity and not env.oidc_provider_arn else controller_role_arn,
        image_repository=env.image_repository, version=env.image_tag or karpy_version(), namespace=env.namespace,
        service_account=env.service_account, replicas=env.replicas, settings=dict(env.settings))


def controller_objects(env: EnvironmentConfig) -> list[dict[str, Any]]:
    """CRDs, Namespace, ServiceAccount, RBAC, Deployment and PDB of env, with the names the stack gives its AWS
    resources."""
    arn = role_arn(partition_of(env.region), env.account_id, env.iam_path,
                   controller_role_name(env.cluster_name, env.controller_role_name))
    return controller_manifests(deployment_props(env, queue_name(env.cluster_name, env.queue_name), arn))


def pool_objects(env: EnvironmentConfig) -> list[dict[str, Any]]:
    """env's EC2NodeClasses and NodePools, validated, defaults filled in."""
    return pool_manifests(env.pools, env.pools_source or env.source,
                          node_role_name(env.cluster_name, env.node_role_name))


def render_objects(env: EnvironmentConfig) -> list[dict[str, Any]]:
    """Everything, in the order a plain apply must follow: CRDs first, the custom resources last."""
    return controller_objects(env) + pool_objects(env)


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """A multi-document YAML stream."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False)


def _file_name(index: int, obj: dict[str, Any]) -> str:
    name = re.sub(r"[^a-z0-9.-]+", "-", str(obj["metadata"]["name"]).lower())
    return f"{index:02d}-{obj['kind'].lower()}-{name}.yaml"


def write_directory(objects: list[dict[str, Any]], outdir: Path) -> list[Path]:
    """One file per object, numbered in apply order, plus a kustomization.yaml listing them (a kustomize base that
    per-environment overlays can patch). Returns the files written."""
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for i, obj in enumerate(objects):
        path = outdir / _file_name(i, obj)
        path.write_text(to_yaml([obj]))
        written.append(path)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": [p.name for p in written]}
    (outdir / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return [*written, outdir / "kustomization.yaml"]
