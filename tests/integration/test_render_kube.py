"""`karpy render`'s YAML applied to a real kube-apiserver as a GitOps tool would (server-side apply): the CRDs first,
established, then everything else, custom resources included, and all of it accepted."""

from __future__ import annotations

import uuid
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from kubernetes import client, dynamic

from cli import main
from tests.kubetest import wait_for

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

ENV = """account_id: "111122223333"
region: us-east-1
cluster_name: render-test
oidc_issuer: https://oidc.eks.us-east-1.amazonaws.com/id/0A1B2C3D4E5F
oidc_provider_arn: arn:aws:iam::111122223333:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/0A1B2C3D4E5F
namespace: {namespace}
pools: pools.yaml
"""


def _established(ext: client.ApiextensionsV1Api, name: str) -> bool:
    conditions = ext.read_custom_resource_definition(name).status.conditions or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def _without_cel(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _without_cel(v) for k, v in obj.items() if k != "x-kubernetes-validations"}
    if isinstance(obj, list):
        return [_without_cel(v) for v in obj]
    return obj


def test_rendered_yaml_is_accepted(kube_api, tmp_path, monkeypatch, cleanup):
    suffix = uuid.uuid4().hex[:6]
    namespace = f"karpy-render-{suffix}"
    custom = client.CustomObjectsApi(kube_api)
    names = {f"{n}-{suffix}" for n in ("system-critical", "monitoring", "cicd", "cron", "service", "default")}
    # undone whatever happens below (the CRDs stay: they are shared by every test on this server)
    cleanup(client.CoreV1Api(kube_api).delete_namespace, namespace)
    cleanup(custom.delete_cluster_custom_object, "karpenter.k8s.aws", "v1", "ec2nodeclasses", f"default-{suffix}")
    for name in sorted(names):
        cleanup(custom.delete_cluster_custom_object, "karpenter.sh", "v1", "nodepools", name)
    project = tmp_path / "project"
    (project / "environments").mkdir(parents=True)
    (project / "environments" / "it.yaml").write_text(ENV.format(namespace=namespace))
    # the example dev pools, under names of their own so that objects of other tests on this server are not touched
    example = Path(__file__).resolve().parents[2] / "examples" / "environments" / "pools" / "dev.yaml"
    pools_docs = list(yaml.safe_load_all(example.read_text()))
    for d in pools_docs:
        d["metadata"]["name"] += f"-{suffix}"
        if d["kind"] == "NodePool":
            d["spec"]["template"]["spec"]["nodeClassRef"]["name"] += f"-{suffix}"
    (project / "environments" / "pools.yaml").write_text(yaml.safe_dump_all(pools_docs))
    monkeypatch.chdir(project)
    res = CliRunner().invoke(main, ["render", "--env", "it", "-o", "out"])
    assert res.exit_code == 0, res.output
    kustomization = yaml.safe_load((project / "out" / "kustomization.yaml").read_text())
    docs = [yaml.safe_load((project / "out" / f).read_text()) for f in kustomization["resources"]]
    kinds = [d["kind"] for d in docs]
    assert kinds.count("NodePool") == 6 and kinds.count("EC2NodeClass") == 1 and "Namespace" in kinds

    dyn = dynamic.DynamicClient(kube_api)
    ext = client.ApiextensionsV1Api(kube_api)

    version = client.VersionApi(kube_api).get_code()
    cel_known = (int(version.major), int(version.minor.rstrip("+"))) >= (1, 25)

    def apply(doc: dict) -> None:
        if doc["kind"] == "CustomResourceDefinition" and not cel_known:
            # an apiserver before 1.25 has no x-kubernetes-validations in its CRD schema: a create drops them, but a
            # server-side apply refuses them as undeclared fields (every EKS version in support knows them)
            doc = _without_cel(doc)
        if doc["kind"] == "PodDisruptionBudget" and doc["apiVersion"] == "policy/v1":
            # the 1.20 test apiserver predates policy/v1 (every EKS version serves it); v1beta1 has the same fields
            doc = {**doc, "apiVersion": "policy/v1beta1"}
        resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        dyn.server_side_apply(resource, body=doc, namespace=doc["metadata"].get("namespace"),
                              field_manager="karpy-render-test", force_conflicts=True)

    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert docs[:len(crds)] == crds  # CRDs come first in the rendered order
    for doc in crds:
        apply(doc)
    for name in [d["metadata"]["name"] for d in crds]:
        wait_for(f"CRD {name} established", partial(_established, ext, name))
    dyn.resources.invalidate_cache()  # discover the kinds the CRDs just added
    for doc in docs[len(crds):]:
        apply(doc)

    listed: Any = custom.list_cluster_custom_object("karpenter.sh", "v1", "nodepools")
    listed = listed["items"]
    pools = {p["metadata"]["name"] for p in listed}
    assert names <= pools
    node_class: Any = custom.get_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", f"default-{suffix}")
    assert node_class["spec"]["role"] == "KarpenterNodeRole-render-test"
    dep = client.AppsV1Api(kube_api).read_namespaced_deployment("karpy", namespace)
    env = {e.name: e.value for e in dep.spec.template.spec.containers[0].env}
    assert env["CLUSTER_NAME"] == "render-test" and env["INTERRUPTION_QUEUE"] == "render-test"
    sa = client.CoreV1Api(kube_api).read_namespaced_service_account("karpenter", namespace)
    assert (sa.metadata.annotations or {})["eks.amazonaws.com/role-arn"] == \
        "arn:aws:iam::111122223333:role/KarpenterController-render-test"
    role = client.RbacAuthorizationV1Api(kube_api).read_namespaced_role("karpy", namespace)
    assert any(r.resource_names == ["karpenter-leader-election"] for r in role.rules)
    # applying again changes nothing and is accepted (what a GitOps tool does on every sync)
    for doc in docs[len(crds):]:
        apply(doc)
