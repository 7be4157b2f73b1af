"""The generated CRDs are accepted by a real kube-apiserver, and Karpenter manifests round-trip through it with the
apiserver applying the same defaults karpy's models do."""

from __future__ import annotations

import copy
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from controller.api import load_documents, parse_ec2nodeclass, parse_nodepool
from tests.kubetest import install_crds

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def crds(kube_api):
    install_crds(kube_api)
    return client.CustomObjectsApi(kube_api)


def _suffix() -> str:
    """A name suffix of this test run's own: a reused server may still hold objects of an earlier run."""
    return uuid.uuid4().hex[:6]


def test_example_nodepools_and_nodeclasses_round_trip(crds, cleanup):
    docs = load_documents([str(EXAMPLES / "nodepools.yaml"), str(EXAMPLES / "ec2nodeclasses.yaml")])
    suffix = _suffix()
    for doc in docs:
        group, version = doc.api_version.split("/")
        plural = {"NodePool": "nodepools", "EC2NodeClass": "ec2nodeclasses"}[doc.kind]
        body = copy.deepcopy(doc.raw)
        body["metadata"]["name"] = name = f"{doc.name}-{suffix}"
        created = crds.create_cluster_custom_object(group, version, plural, body)
        cleanup(crds.delete_cluster_custom_object, group, version, plural, name)
        model = parse_nodepool(doc) if doc.kind == "NodePool" else parse_ec2nodeclass(doc)
        # the apiserver defaulted from the CRD schema exactly as the model did
        assert created["spec"] == model.to_dict()["spec"], doc.ref


def test_status_is_a_subresource(crds, cleanup):
    name = f"default-{_suffix()}"
    body = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                       "values": ["m5.large"]}]},
            "status": {"providerID": "ignored-on-create"}}
    created = crds.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", body)
    cleanup(crds.delete_cluster_custom_object, "karpenter.sh", "v1", "nodeclaims", name)
    assert "providerID" not in (created.get("status") or {})
    created["status"] = {"providerID": "aws:///us-east-1a/i-0abc", "nodeName": "ip-10-0-0-1"}
    patched = crds.replace_cluster_custom_object_status("karpenter.sh", "v1", "nodeclaims", name, created)
    assert patched["status"]["providerID"] == "aws:///us-east-1a/i-0abc"


def _nodepool(name: str, **spec: object) -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}]}}, **spec}}


def test_an_apiserver_without_cel_serves_the_structural_schema(crds, kube_api, cleanup):
    """The same CRDs serve every apiserver: one that predates CEL (the 1.20 of the test world) drops the
    x-kubernetes-validations it does not know and enforces the structural schema (types, enums, patterns, bounds);
    the cross-field rules then rest on `karpy validate` (tests/unit/test_validation_cases.py checks them offline)."""
    ext = client.ApiextensionsV1Api(kube_api)
    stored = kube_api.sanitize_for_serialization(ext.read_custom_resource_definition("nodepools.karpenter.sh"))
    spec_schema = stored["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    minor = int("".join(ch for ch in client.VersionApi(kube_api).get_code().minor if ch.isdigit()))
    if minor < 25:
        assert "x-kubernetes-validations" not in spec_schema
    else:
        assert spec_schema["x-kubernetes-validations"]
    assert spec_schema["properties"]["weight"]["maximum"] == 100
    # structural checks hold on any apiserver
    suffix = _suffix()
    for bad in ({"weight": 0}, {"replicas": -1}, {"disruption": {"consolidationPolicy": "WhenUnderutilized"}},
                {"disruption": {"budgets": [{"nodes": "1000%"}]}}):
        cleanup(crds.delete_cluster_custom_object, "karpenter.sh", "v1", "nodepools", f"bad-{suffix}")
        with pytest.raises(client.ApiException) as e:
            crds.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", _nodepool(f"bad-{suffix}", **bad))
        assert e.value.status == 422, bad
    # a static pool (replicas) with the current consolidation policy is served
    cleanup(crds.delete_cluster_custom_object, "karpenter.sh", "v1", "nodepools", f"static-{suffix}")
    created = crds.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", _nodepool(
        f"static-{suffix}", replicas=3, limits={"nodes": "5"}, disruption={"consolidationPolicy": "Balanced"}))
    assert created["spec"]["replicas"] == 3 and created["spec"]["disruption"]["consolidateAfter"] == "0s"
