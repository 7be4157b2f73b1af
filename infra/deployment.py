"""The controller in the cluster: CRDs, ServiceAccount, RBAC, Deployment and PodDisruptionBudget.

Manifests are built by pure functions (tested without jsii) and rendered as kubernetes_manifest resources by the
ControllerDeployment construct. Values other constructs produce (the role ARN, the queue name) arrive as Terraform
references.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller.api.crds import crd_manifests
from infra.cdk import Construct, KubernetesProvider, Manifest

APP = "karpy"
RESOURCE_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]
READ = ["get", "list", "watch"]


@dataclass
class DeploymentProps:
    """How the controller runs. Defaults follow Karpenter's chart."""

    cluster_name: str
    cluster_endpoint: str
    region: str
    queue_name: str  # a reference to the interruption queue's name
    role_arn: str | None  # a reference to the controller role's ARN (IRSA annotation); None with Pod Identity
    image_repository: str
    version: str
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


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": APP, "app.kubernetes.io/instance": APP}


def service_account(p: DeploymentProps) -> dict[str, Any]:
    """The controller's ServiceAccount, annotated with the role for IRSA."""
    meta: dict[str, Any] = {"name": p.service_account, "namespace": p.namespace, "labels": _labels()}
    if p.role_arn:
        meta["annotations"] = {"eks.amazonaws.com/role-arn": p.role_arn}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}


def cluster_role() -> dict[str, Any]:
    """Exactly what the controller reads and writes cluster-wide."""
    rules = [
        {"apiGroups": ["karpenter.sh"], "resources": ["nodepools", "nodepools/status", "nodeclaims",
                                                      "nodeclaims/status"], "verbs": RESOURCE_VERBS},
        {"apiGroups": ["karpenter.k8s.aws"], "resources": ["ec2nodeclasses", "ec2nodeclasses/status"],
         "verbs": [*READ, "update", "patch"]},
        {"apiGroups": [""], "resources": ["pods", "nodes", "persistentvolumes", "persistentvolumeclaims",
                                          "replicationcontrollers", "namespaces"], "verbs": READ},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses", "csinodes", "volumeattachments"],
         "verbs": READ},
        {"apiGroups": ["apps"], "resources": ["daemonsets", "deployments", "replicasets", "statefulsets"],
         "verbs": ["list", "watch"]},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": READ},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": APP, "labels": _labels()}, "rules": rules}


def role(p: DeploymentProps) -> dict[str, Any]:
    """Leader election and configuration in the controller's namespace only."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": APP, "namespace": p.namespace, "labels": _labels()},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                       "verbs": ["get", "watch", "create", "update", "patch"]},
                      {"apiGroups": [""], "resources": ["configmaps"], "verbs": READ}]}


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


def deployment(p: DeploymentProps) -> dict[str, Any]:
    """The controller Deployment: leader-elected replicas, off the nodes it manages, hardened."""
    env = {"CLUSTER_NAME": p.cluster_name, "CLUSTER_ENDPOINT": p.cluster_endpoint, "INTERRUPTION_QUEUE": p.queue_name,
           "AWS_REGION": p.region, "BATCH_MAX_DURATION": p.batch_max_duration,
           "BATCH_IDLE_DURATION": p.batch_idle_duration, "LOG_LEVEL": p.log_level,
           "METRICS_PORT": str(p.metrics_port), "HEALTH_PROBE_PORT": str(p.health_port)}
    container = {
        "name": "controller", "image": f"{p.image_repository}:{p.version}",
        "env": [{"name": k, "value": v} for k, v in env.items()]
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


def manifests(p: DeploymentProps) -> list[dict[str, Any]]:
    """Everything the controller needs in the cluster, CRDs first."""
    out = list(crd_manifests())
    if p.namespace not in ("kube-system", "default"):
        out.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": p.namespace}})
    out += [service_account(p), cluster_role(), role(p), *bindings(p), deployment(p), pod_disruption_budget(p)]
    return out


class ControllerDeployment(Construct):
    """The controller's manifests as kubernetes_manifest resources."""

    def __init__(self, scope: Construct, id: str, props: DeploymentProps, provider: KubernetesProvider) -> None:
        super().__init__(scope, id)
        self.manifests = manifests(props)
        for m in self.manifests:
            key = f"{m['kind'].lower()}-{m['metadata']['name']}"
            Manifest(self, key, manifest=m, provider=provider)
