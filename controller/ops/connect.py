"""Reaching the cluster and the AWS account of the ops commands, with one-line errors for every way it fails.

The cluster: --kubeconfig (else $KUBECONFIG, else ~/.kube/config) and --context; inside a pod without either, the
in-cluster service account. --env picks, from that kubeconfig, the context whose cluster's server is the environment's
cluster endpoint or, for an environment without one, the context named after its cluster's EKS ARN (both what
`aws eks update-kubeconfig` writes)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from controller.kube.client import KubeClient
from controller.kube.errors import KubeError, NotFoundError, UnavailableError
from controller.ops.errors import OpsError, did_you_mean

OPS_QPS, OPS_BURST = 50.0, 100


def environment(name: str) -> Any:
    """An environment's configuration (region, cluster name and endpoint, queue) from the project's environment
    files; OpsError (usage) when it is unknown or its file is invalid."""
    from stacks.environments import InvalidEnvironment, environment_names, load_environments

    try:
        known = environment_names()
        if name not in known:
            raise OpsError(f"unknown environment {name!r}{did_you_mean(name, known)}", 2)
        return load_environments(None, [name])[0]
    except InvalidEnvironment as e:
        raise OpsError(str(e), 2) from None


def kubeconfig_paths(kubeconfig: str | None) -> list[Path]:
    """The kubeconfig files kubectl would read: --kubeconfig, else each of $KUBECONFIG, else ~/.kube/config."""
    if kubeconfig:
        return [Path(kubeconfig)]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    return [Path.home() / ".kube" / "config"]


def _contexts(kubeconfig: str | None) -> tuple[list[tuple[Path, str, str, str]], list[str]]:
    """(file, context name, its cluster's name, that cluster's server) for every context of the kubeconfig files,
    in kubectl's order, and the files searched. Unreadable files are skipped (kubectl skips missing ones too)."""
    found: list[tuple[Path, str, str, str]] = []
    searched = []
    for path in kubeconfig_paths(kubeconfig):
        searched.append(str(path))
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(doc, dict):
            continue
        servers = {str(c.get("name")): str((c.get("cluster") or {}).get("server", "")).rstrip("/").lower()
                   for c in doc.get("clusters") or [] if isinstance(c, dict)}
        for ctx in doc.get("contexts") or []:
            if isinstance(ctx, dict):
                cluster = str((ctx.get("context") or {}).get("cluster"))
                found.append((path, str(ctx.get("name")), cluster, servers.get(cluster, "")))
    return found, searched


def context_for_endpoint(endpoint: str, kubeconfig: str | None) -> tuple[str, str]:
    """(kubeconfig file, context name) whose cluster's server is endpoint; OpsError naming the files searched."""
    want = endpoint.rstrip("/").lower()
    contexts, searched = _contexts(kubeconfig)
    for path, name, _, server in contexts:
        if server == want:
            return str(path), name
    raise OpsError(f"no context for {endpoint} in {', '.join(searched)} "
                   "(aws eks update-kubeconfig --name CLUSTER writes one)")


def eks_cluster_arn(region: str, account_id: str, cluster_name: str) -> str:
    """The ARN `aws eks update-kubeconfig` names a cluster and its context after."""
    from controller.cloud.aws.partitions import partition_of

    return f"arn:{partition_of(region)}:eks:{region}:{account_id}:cluster/{cluster_name}"


def context_for_cluster(env_name: str, region: str, account_id: str, cluster_name: str,
                        kubeconfig: str | None) -> tuple[str, str]:
    """(kubeconfig file, context name) for an environment without cluster_endpoint: the context or cluster named
    by the cluster's EKS ARN (what `aws eks update-kubeconfig` writes), else one named as the cluster; an OpsError
    naming the environment and the command that writes such a context when none is."""
    arn = eks_cluster_arn(region, account_id, cluster_name)
    contexts, searched = _contexts(kubeconfig)
    for wanted in (arn, cluster_name):
        for path, name, cluster, _ in contexts:
            if wanted in (name, cluster):
                return str(path), name
    raise OpsError(f"environment {env_name}: no kubeconfig context for cluster {arn} in {', '.join(searched)} "
                   f"(run: aws eks update-kubeconfig --name {cluster_name} --region {region})")


def kube_client(kubeconfig: str | None = None, context: str | None = None, env: str | None = None) -> KubeClient:
    """A KubeClient for the cluster the flags name (see the module's docstring); OpsError when there is none."""
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException

    if env is not None:
        where = environment(env)
        if where.cluster_endpoint:
            kubeconfig, context = context_for_endpoint(where.cluster_endpoint, kubeconfig)
        else:  # the default of `karpy init`: the stacks read the endpoint from EKS; find the cluster by its name
            kubeconfig, context = context_for_cluster(env, where.region, where.account_id, where.cluster_name,
                                                      kubeconfig)
    cfg = k8s.Configuration()
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig and not context \
                and not os.environ.get("KUBECONFIG"):
            k8s_config.load_incluster_config(client_configuration=cfg)
        else:
            paths = kubeconfig_paths(kubeconfig)
            if not any(p.exists() for p in paths):
                raise OpsError(f"no cluster configured: {', '.join(map(str, paths))} does not exist "
                               "(use --kubeconfig or KUBECONFIG)")
            # None lets the library merge every file of $KUBECONFIG, as kubectl does
            k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    except (ConfigException, OSError, ValueError, TypeError, yaml.YAMLError) as e:
        raise OpsError(f"no usable cluster configuration: {e}") from None
    return KubeClient(cfg, OPS_QPS, OPS_BURST)


# what urllib3 says (deep inside its message) -> what the operator needs to hear
_CONNECTION_PROBLEMS = (("refused", "connection refused"), ("Name or service not known", "host not found"),
                        ("Temporary failure in name resolution", "host not found"),
                        ("nodename nor servname", "host not found"), ("timed out", "timed out"),
                        ("CERTIFICATE_VERIFY_FAILED", "its TLS certificate is not trusted (certificate-authority?)"),
                        ("No route to host", "no route to host"), ("Network is unreachable", "network unreachable"))


def connection_problem(message: str) -> str:
    """The cause of a failed connection in a few words, from urllib3's nested message."""
    for needle, said in _CONNECTION_PROBLEMS:
        if needle.lower() in message.lower():
            return said
    return " ".join(message.split(": ", 1)[-1].split())[:200]


def kube_error(e: KubeError, client: KubeClient, what: str = "") -> OpsError:
    """The one-line OpsError for an API error: unreachable cluster, refused credentials, missing CRDs, others."""
    if isinstance(e, UnavailableError) and e.status == 0:
        return OpsError(f"no cluster reachable at {client.host}: {connection_problem(e.message)}")
    if e.status in (401, 403):
        return OpsError(f"the cluster at {client.host} refused the request{' to ' + what if what else ''}: "
                        f"{e.message or e.reason}")
    if isinstance(e, NotFoundError) and what:
        return OpsError(f"{what}: not found")
    return OpsError(f"{what + ': ' if what else ''}{e}")


def aws_client(service: str, region: str | None = None, endpoint_url: str | None = None) -> Any:
    """A boto3 client (endpoint_url: e.g. LocalStack; AWS_ENDPOINT_URL works as well); OpsError without a region."""
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        return boto3.client(service, region_name=region, endpoint_url=endpoint_url)  # type: ignore[call-overload]
    except BotoCoreError as e:
        raise OpsError(f"AWS {service}: {e} (set AWS_REGION or use --region)") from None
