"""The controller's manifests are accepted by a real kube-apiserver: ServiceAccount, RBAC, Deployment (the
PodDisruptionBudget is policy/v1, which the 1.20 test apiserver predates; every EKS version serves it)."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client, utils

from infra.manifests import DeploymentProps, controller_manifests

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


def test_manifests_apply(kube_api, cleanup):
    ns = f"karpy-{uuid.uuid4().hex[:6]}"
    rbac = client.RbacAuthorizationV1Api(kube_api)
    props = DeploymentProps(cluster_name="test", cluster_endpoint="https://example", region="us-east-1",
                            queue_name="test", role_arn="arn:aws:iam::000000000000:role/KarpenterController-test",
                            image_repository="example.com/karpy", version="0.1.0", namespace=ns)
    applied = []
    for m in controller_manifests(props):
        if m["kind"] in ("CustomResourceDefinition", "PodDisruptionBudget"):
            continue  # CRDs are proven in test_crds_kube.py
        if m["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            m["metadata"]["name"] = f"{m['metadata']['name']}-{ns}"
            if m["kind"] == "ClusterRoleBinding":
                m["roleRef"]["name"] = m["metadata"]["name"]
        utils.create_from_dict(kube_api, m)
        applied.append(m["kind"])
        if m["kind"] == "Namespace":
            cleanup(client.CoreV1Api(kube_api).delete_namespace, ns)  # takes the namespaced objects along
        elif m["kind"] == "ClusterRole":
            cleanup(rbac.delete_cluster_role, m["metadata"]["name"])
        elif m["kind"] == "ClusterRoleBinding":
            cleanup(rbac.delete_cluster_role_binding, m["metadata"]["name"])
    assert applied[0] == "Namespace"
    assert {"ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding", "Deployment"} <= set(applied)
    dep = client.AppsV1Api(kube_api).read_namespaced_deployment("karpy", ns)
    assert dep.spec.template.spec.service_account_name == "karpenter"
    sa = client.CoreV1Api(kube_api).read_namespaced_service_account("karpenter", ns)
    assert (sa.metadata.annotations or {})["eks.amazonaws.com/role-arn"].endswith("KarpenterController-test")
