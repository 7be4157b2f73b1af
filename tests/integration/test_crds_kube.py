"""The generated CRDs are accepted by a real kube-apiserver, and Karpenter manifests round-trip through it with the
apiserver applying the same defaults karpy's models do."""

from __future__ import annotations

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


def test_example_nodepools_and_nodeclasses_round_trip(crds):
    docs = load_documents([str(EXAMPLES / "nodepools.yaml"), str(EXAMPLES / "ec2nodeclasses.yaml")])
    for doc in docs:
        group, version = doc.api_version.split("/")
        plural = {"NodePool": "nodepools", "EC2NodeClass": "ec2nodeclasses"}[doc.kind]
        created = crds.create_cluster_custom_object(group, version, plural, doc.raw)
        model = parse_nodepool(doc) if doc.kind == "NodePool" else parse_ec2nodeclass(doc)
        # the apiserver defaulted from the CRD schema exactly as the model did
        assert created["spec"] == model.to_dict()["spec"], doc.ref
        crds.delete_cluster_custom_object(group, version, plural, doc.name)


def test_status_is_a_subresource(crds):
    body = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "default-x1"},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                       "values": ["m5.large"]}]},
            "status": {"providerID": "ignored-on-create"}}
    created = crds.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", body)
    assert "providerID" not in (created.get("status") or {})
    created["status"] = {"providerID": "aws:///us-east-1a/i-0abc", "nodeName": "ip-10-0-0-1"}
    patched = crds.replace_cluster_custom_object_status("karpenter.sh", "v1", "nodeclaims", "default-x1", created)
    assert patched["status"]["providerID"] == "aws:///us-east-1a/i-0abc"
    crds.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "default-x1")
