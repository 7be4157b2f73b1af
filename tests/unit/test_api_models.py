"""Documents, defaults, typed models, generated CRDs and conversion."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.api import DocumentError, load_documents, parse_ec2nodeclass, parse_nodepool, validate_document
from controller.api.convert import convert_documents
from controller.api.crds import crd_manifests
from controller.api.documents import parse_documents
from controller.api.kinds import KINDS
from controller.api.schema import walk_paths

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def test_examples_are_valid():
    docs = load_documents([str(p) for p in sorted(EXAMPLES.glob("*.yaml"))])
    karpenter = [d for d in docs if d.kind in ("NodePool", "EC2NodeClass")]
    assert len(karpenter) == 8
    assert [str(e) for d in docs for e in validate_document(d)] == []


def test_list_documents_are_flattened_and_errors_name_the_file(tmp_path):
    snapshot = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": "a"}}]}
    docs = parse_documents(yaml.safe_dump(snapshot), "snap.yaml")
    assert [(d.kind, d.name, d.namespace) for d in docs] == [("Node", "n1", None), ("Pod", "p1", "a")]
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: NodePool\nmetadata: {name: x\n")
    with pytest.raises(DocumentError, match=r"bad.yaml: line \d+: not valid YAML"):
        load_documents([str(bad)])
    with pytest.raises(DocumentError, match="expected a Kubernetes object"):
        parse_documents("- a\n- b\n", "list.yaml")
    with pytest.raises(DocumentError, match="kind: required"):
        parse_documents("metadata: {name: x}\n", "nokind.yaml")
    with pytest.raises(DocumentError, match=r"missing\.yaml"):
        load_documents([str(tmp_path / "missing.yaml")])


def _nodepool_doc(spec_extra=None):
    raw: dict[str, Any] = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
           "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                           "name": "default"}, "requirements": []}}}}
    raw["spec"].update(spec_extra or {})
    return parse_documents(yaml.safe_dump(raw), "p.yaml")[0]


def test_nodepool_defaults_are_karpenters():
    np_ = parse_nodepool(_nodepool_doc())
    assert np_.expire_after == "720h"
    assert np_.disruption.consolidation_policy == "WhenEmptyOrUnderutilized"
    assert np_.disruption.consolidate_after == "0s"
    assert [b.nodes for b in np_.disruption.budgets] == ["10%"]
    m = np_.to_dict()
    assert m["spec"]["disruption"]["budgets"] == [{"nodes": "10%"}]
    assert m["spec"]["template"]["spec"]["expireAfter"] == "720h"
    # the defaulted manifest validates and round-trips
    again = parse_nodepool(parse_documents(yaml.safe_dump(m), "p.yaml")[0])
    assert again.to_dict() == m


def test_nodepool_model_fields():
    np_ = parse_nodepool(_nodepool_doc({"limits": {"cpu": "10", "memory": "1Gi"}, "weight": 5}))
    assert np_.limits == {"cpu": 10000, "memory": 2**30}
    assert np_.weight == 5
    assert np_.node_class_ref.name == "default"


def test_ec2nodeclass_defaults_and_family():
    docs = load_documents([str(EXAMPLES / "ec2nodeclasses.yaml")])
    default = parse_ec2nodeclass(docs[0])
    assert default.ami_family == "al2023" and default.ami_alias == "al2023@latest"
    assert default.metadata_options == {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
                                        "httpPutResponseHopLimit": 1, "httpTokens": "required"}
    assert parse_ec2nodeclass(docs[1]).kubelet == {"maxPods": 110}


def test_crds_cover_every_field():
    crds = {c["spec"]["names"]["kind"]: c for c in crd_manifests()}
    assert set(crds) == {"NodePool", "NodeClaim", "EC2NodeClass"}
    for (_, kind), schema in KINDS.items():
        version = crds[kind]["spec"]["versions"][0]
        assert version["subresources"]["status"] == {}
        assert crds[kind]["spec"]["scope"] == "Cluster"
        root = version["schema"]["openAPIV3Schema"]
        for path in walk_paths(schema.fields["spec"], "spec"):
            node = root
            for part in path.replace("[]", ".[]").replace("{}", ".{}").split("."):
                if part == "[]":
                    node = node["items"]
                elif part == "{}":
                    node = node["additionalProperties"]
                else:
                    node = node["properties"][part]
            assert node, path
    columns = [c["name"] for c in crds["NodeClaim"]["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns[:6] == ["Type", "Capacity", "Zone", "Node", "Ready", "Age"]
    budgets = crds["NodePool"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["disruption"]["properties"]["budgets"]
    assert budgets["default"] == [{"nodes": "10%"}] and budgets["maxItems"] == 50


def test_convert_v1alpha5_provisioner_and_template():
    docs = load_documents([str(EXAMPLES / "legacy" / "provisioner-v1alpha5.yaml")])
    out, leftovers = convert_documents(docs)
    pool, nodeclass = out
    assert pool["apiVersion"] == "karpenter.sh/v1" and pool["kind"] == "NodePool"
    tspec = pool["spec"]["template"]["spec"]
    assert tspec["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    assert tspec["expireAfter"] == "2592000s"
    assert pool["spec"]["template"]["metadata"]["labels"] == {"team": "platform"}
    assert pool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"}
    assert pool["spec"]["limits"] == {"cpu": "1000"}
    assert nodeclass["spec"]["amiSelectorTerms"] == [{"alias": "al2@latest"}]
    assert nodeclass["spec"]["kubelet"] == {"maxPods": 110}  # moved from the Provisioner
    assert nodeclass["spec"]["subnetSelectorTerms"] == [{"tags": {"karpenter.sh/discovery": "my-cluster"}}]
    assert leftovers == []
    for m in out:
        d = parse_documents(yaml.safe_dump(m), "converted.yaml")[0]
        assert validate_document(d) == []


def test_convert_v1beta1_and_report_leftovers():
    text = """
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: web}
spec:
  template:
    spec:
      nodeClassRef: {name: web}
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]
      kubelet: {maxPods: 50}
      resources: {requests: {cpu: "1"}}
  disruption:
    consolidationPolicy: WhenUnderutilized
    expireAfter: 168h
---
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: web}
spec:
  amiFamily: Bottlerocket
  role: NodeRole
  subnetSelectorTerms: [{tags: {a: b}}]
  securityGroupSelectorTerms: [{tags: {a: b}}]
"""
    out, leftovers = convert_documents(parse_documents(text, "beta.yaml"))
    pool, nodeclass = out
    assert pool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}
    assert pool["spec"]["template"]["spec"]["expireAfter"] == "168h"
    assert "kubelet" not in pool["spec"]["template"]["spec"]
    assert nodeclass["spec"]["kubelet"] == {"maxPods": 50}
    assert nodeclass["spec"]["amiSelectorTerms"] == [{"alias": "bottlerocket@latest"}]
    assert "amiFamily" not in nodeclass["spec"]
    assert leftovers == ["beta.yaml: document 1 NodePool/web: spec.template.spec.resources: removed in v1 (requests "
                         "come from the pods)"]
    orphan = parse_documents(text.split("---")[0], "pool-only.yaml")
    _, leftovers = convert_documents(orphan)
    assert any("kubelet: moves to EC2NodeClass 'web'" in x for x in leftovers)
