"""The controller's Kubernetes objects as plain dicts: CRDs, ServiceAccount, RBAC, Deployment, PodDisruptionBudget, and
an environment's NodePools and EC2NodeClasses validated with Karpenter's rules.

One source of truth for both ways of deploying: the stacks wrap these dicts in kubernetes_manifest resources (values
other resources produce, such as the role ARN and the queue name, arrive as Terraform references), and `karpy render`
writes them as YAML with those values filled in. Pure: no cdktn.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from controller.api import Document, parse_ec2nodeclass, parse_nodepool, validate_document
from controller.api.crds import crd_manifests

APP = "karpy"
READ = ["get", "list", "watch"]
LEADER_ELECTION_NAME = "karpenter-leader-election"  # Karpenter's Lease name
CONFIG_LOGGING = "config-logging"  # the legacy logging ConfigMap the controller reads


@dataclass
class DeploymentProps:
    """How the controller runs. Defaults follow Karpenter's chart."""

    cluster_name: str
    cluster_endpoint: str | None  # None: the controller asks EKS (DescribeCluster) at start
    region: str
    queue_name: str  # in a stack, a reference to the interruption queue's name
    role_arn: str | None  # in a stack, a reference to the controller role's ARN (IRSA annotation); None: Pod Identity
    image_repository: str
    version: str  # the image tag
    namespace: str = "kube-system"
    service_account: str = "karpenter"
    replicas: int = 2  # with leader election, one active
    log_level: str = "info"
    batch_max_duration: str = "10s"
    batch_idle_duration: str = "1s"
    resources: dict[str, dict[str, str]] = field(default_factory=lambda: {
        "requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}})
    metrics_port: int = 8080
    health_port: int = 8081
    leader_election_name: str = LEADER_ELECTION_NAME
    settings: dict[str, str] = field(default_factory=dict)  # further controller settings as env (FEATURE_GATES=…)


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": APP, "app.kubernetes.io/instance": APP}


def service_account(p: DeploymentProps) -> dict[str, Any]:
    """The controller's ServiceAccount, annotated with the role for IRSA."""
    meta: dict[str, Any] = {"name": p.service_account, "namespace": p.namespace, "labels": _labels()}
    if p.role_arn:
        meta["annotations"] = {"eks.amazonaws.com/role-arn": p.role_arn}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}


def cluster_role() -> dict[str, Any]:
    """What the controller reads and writes cluster-wide: the rules of Karpenter's chart (core and AWS cluster roles),
    less what karpy does not use (NodeOverlays, CapacityBuffers). Nodes are never created (kubelets register
    them); NodePools and EC2NodeClasses are written only for status and finalizers."""
    rules = [
        # read
        {"apiGroups": ["karpenter.sh"], "resources": ["nodepools", "nodepools/status", "nodeclaims",
                                                      "nodeclaims/status"], "verbs": READ},
        {"apiGroups": ["karpenter.k8s.aws"], "resources": ["ec2nodeclasses"], "verbs": READ},
        {"apiGroups": [""], "resources": ["pods", "nodes", "persistentvolumes", "persistentvolumeclaims",
                                          "replicationcontrollers", "namespaces", "podtemplates"], "verbs": READ},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses", "csinodes", "volumeattachments"],
         "verbs": READ},
        {"apiGroups": ["apps"], "resources": ["daemonsets", "deployments", "replicasets", "statefulsets"],
         "verbs": READ},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": READ},
        {"apiGroups": [""], "resources": ["events"], "verbs": READ},
        # the default/kubernetes Service: its ClusterIP gives the Service CIDR when DescribeCluster cannot
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get"], "resourceNames": ["kubernetes"]},
        # write
        {"apiGroups": ["karpenter.sh"], "resources": ["nodeclaims", "nodeclaims/status"],
         "verbs": ["create", "delete", "update", "patch"]},
        # the main resource too: finalizers (EC2NodeClass termination) and the NodePool hash annotation
        {"apiGroups": ["karpenter.sh"], "resources": ["nodepools", "nodepools/status"], "verbs": ["update", "patch"]},
        {"apiGroups": ["karpenter.k8s.aws"], "resources": ["ec2nodeclasses", "ec2nodeclasses/status"],
         "verbs": ["update", "patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch", "update", "delete"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
    ]
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": APP, "labels": _labels()}, "rules": rules}


def role(p: DeploymentProps) -> dict[str, Any]:
    """Leader election and configuration in the controller's namespace only: the Lease is written only under its
    own name (create cannot be limited by name, so it is granted alone), and of the ConfigMaps only config-logging
    may be written."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": APP, "namespace": p.namespace, "labels": _labels()},
            "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "watch"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["patch", "update"],
                 "resourceNames": [p.leader_election_name]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": READ},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["update", "patch"],
                 "resourceNames": [CONFIG_LOGGING]},
            ]}


def bindings(p: DeploymentProps) -> list[dict[str, Any]]:
    """The ClusterRoleBinding and RoleBinding to the ServiceAccount."""
    subject = [{"kind": "ServiceAccount", "name": p.service_account, "namespace": p.namespace}]
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": APP, "labels": _labels()},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": APP}, "subjects": subject},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": APP, "namespace": p.namespace, "labels": _labels()},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": APP}, "subjects": subject},
    ]


def rbac(p: DeploymentProps) -> list[dict[str, Any]]:
    """ClusterRole, Role and their bindings."""
    return [cluster_role(), role(p), *bindings(p)]


def controller_env(p: DeploymentProps) -> dict[str, str]:
    """The controller's settings as environment variables (names as Karpenter's)."""
    env = {"CLUSTER_NAME": p.cluster_name, "INTERRUPTION_QUEUE": p.queue_name, "AWS_REGION": p.region,
           "BATCH_MAX_DURATION": p.batch_max_duration,
           "BATCH_IDLE_DURATION": p.batch_idle_duration, "LOG_LEVEL": p.log_level,
           "METRICS_PORT": str(p.metrics_port), "HEALTH_PROBE_PORT": str(p.health_port),
           "LEADER_ELECTION_NAME": p.leader_election_name}
    if p.cluster_endpoint:
        env["CLUSTER_ENDPOINT"] = p.cluster_endpoint
    env.update(p.settings)
    return env


def deployment(p: DeploymentProps) -> dict[str, Any]:
    """The controller Deployment: leader-elected replicas, off the nodes it manages, hardened."""
    container = {
        "name": "controller", "image": f"{p.image_repository}:{p.version}",
        "env": [{"name": k, "value": v} for k, v in controller_env(p).items()]
        + [{"name": "SYSTEM_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "ports": [{"name": "http-metrics", "containerPort": p.metrics_port},
                  {"name": "http", "containerPort": p.health_port}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "initialDelaySeconds": 30},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "initialDelaySeconds": 5},
        "resources": p.resources,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "readOnlyRootFilesystem": True,
                            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
        # the image's HOME and TMPDIR, the only place it may write: the root filesystem is read-only
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    pod_spec = {
        "serviceAccountName": p.service_account, "priorityClassName": "system-cluster-critical",
        "containers": [container], "volumes": [{"name": "tmp", "emptyDir": {}}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}]}},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": _labels()}}]}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": _labels()}}],
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
    }
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": APP, "namespace": p.namespace, "labels": _labels()},
            "spec": {"replicas": p.replicas, "revisionHistoryLimit": 10, "selector": {"matchLabels": _labels()},
                     "strategy": {"rollingUpdate": {"maxUnavailable": 1}},
                     "template": {"metadata": {"labels": _labels()}, "spec": pod_spec}}}


def pod_disruption_budget(p: DeploymentProps) -> dict[str, Any]:
    """At most one controller replica down at a time."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": APP, "namespace": p.namespace, "labels": _labels()},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _labels()}}}


def controller_manifests(p: DeploymentProps) -> list[dict[str, Any]]:
    """Everything the controller needs in the cluster, CRDs first (the order a plain apply must follow)."""
    out = list(crd_manifests())
    if p.namespace not in ("kube-system", "default"):
        out.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": p.namespace}})
    out += [service_account(p), *rbac(p), deployment(p), pod_disruption_budget(p)]
    return out


class InvalidKarpenterResources(ValueError):
    """Pools or node classes that Karpenter would reject; the message lists every error."""


def validated_manifests(documents: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """The v1 manifests with Karpenter's defaults, or InvalidKarpenterResources naming every field at fault."""
    docs = []
    for i, raw in enumerate(documents):
        meta = raw.get("metadata") or {}
        docs.append(Document(source, i, str(raw.get("apiVersion", "")), str(raw.get("kind", "")),
                             str(meta.get("name", "(unnamed)")), None, raw))
    unknown = [f"{d.ref}: kind must be NodePool or EC2NodeClass" for d in docs
               if d.kind not in ("NodePool", "EC2NodeClass")]
    errors = [str(e) for d in docs if d.kind in ("NodePool", "EC2NodeClass") for e in validate_document(d)]
    if errors or unknown:
        raise InvalidKarpenterResources("\n".join(errors + unknown))
    out = []
    for d in docs:
        model = parse_nodepool(d) if d.kind == "NodePool" else parse_ec2nodeclass(d)
        # the parsed model's manifest (Karpenter's defaults applied to a copy of the input) as it is, without the
        # status a deployment does not set: no to_dict() copy of a model used once
        out.append({key: value for key, value in model.manifest.items() if key != "status"})
    return out


def pool_manifests(documents: list[dict[str, Any]], source: str, node_role_name: str) -> list[dict[str, Any]]:
    """An environment's EC2NodeClasses and NodePools, validated, defaults filled in; an EC2NodeClass without `role`
    or `instanceProfile` gets node_role_name (in a stack, a reference to the node role it creates). EC2NodeClasses
    come first, so a plain apply creates what the NodePools refer to before them."""
    documents = copy.deepcopy(documents)
    for raw in documents:
        spec = raw.get("spec")
        if raw.get("kind") == "EC2NodeClass" and isinstance(spec, dict) and not (
                spec.get("role") or spec.get("instanceProfile")):
            spec["role"] = node_role_name
    out = validated_manifests(documents, source)
    return sorted(out, key=lambda m: m["kind"] != "EC2NodeClass")
