"""Every validation rule, accepting and rejecting, with the error naming the document and field path."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.api import Document, InvalidDocument, parse_nodepool, validate_document

NODEPOOL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
    "spec": {"template": {"spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}},
}
NODECLASS: dict[str, Any] = {
    "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
    "spec": {"role": "KarpenterNodeRole-c", "amiSelectorTerms": [{"alias": "al2023@latest"}],
             "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
             "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}]},
}


def doc(raw: dict[str, Any]) -> Document:
    return Document("test.yaml", 0, raw["apiVersion"], raw["kind"], raw["metadata"]["name"], None, raw)


def with_(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(base)
    node = raw
    parts = path.split(".")
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    if isinstance(node, list):
        node[int(parts[-1])] = value
    elif value is _DELETE:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value
    return raw


_DELETE = object()
REQ = "spec.template.spec.requirements"


def errors(raw: dict[str, Any]) -> list[str]:
    return [str(e) for e in validate_document(doc(raw))]


def test_valid_documents_pass():
    assert errors(NODEPOOL) == []
    assert errors(NODECLASS) == []


@pytest.mark.parametrize(("path", "value"), [
    (f"{REQ}.0", {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["4"]}),
    (f"{REQ}.0", {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lte", "values": ["64"]}),
    (f"{REQ}.0", {"key": "karpenter.k8s.aws/instance-family", "operator": "Exists", "minValues": 3}),
    (f"{REQ}.0", {"key": "team", "operator": "DoesNotExist"}),
    (f"{REQ}.0", {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c5", "m5"],
                  "minValues": 2}),
    (f"{REQ}.0", {"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": ["t3.nano"]}),
    ("spec.template.spec.expireAfter", "Never"),
    ("spec.template.spec.expireAfter", "1h30m"),
    ("spec.template.spec.terminationGracePeriod", "48h"),
    ("spec.disruption", {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s",
                         "budgets": [{"nodes": "0", "schedule": "@daily", "duration": "10m"},
                                     {"nodes": "20%", "schedule": "0 9 * * mon-fri", "duration": "8h",
                                      "reasons": ["Drifted", "Underutilized"]}, {"nodes": "5"}]}),
    ("spec.weight", 100),
    ("spec.limits", {"cpu": "1000", "memory": "1000Gi", "nvidia.com/gpu": 8}),
    ("spec.template.spec.taints", [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
    ("spec.template.metadata", {"labels": {"team": "a", "node.kubernetes.io/role": "x"}}),
])
def test_nodepool_accepts(path, value):
    assert errors(with_(NODEPOOL, path, value)) == []


@pytest.mark.parametrize(("path", "value", "where", "message"), [
    (f"{REQ}.0", {"key": "k", "operator": "Equals", "values": ["a"]}, f"{REQ}[0].operator", "is not one of"),
    (f"{REQ}.0", {"key": "k", "operator": "In", "values": []}, REQ, "operator 'In' must have a value defined"),
    (f"{REQ}.0", {"key": "k", "operator": "Gt", "values": ["a"]}, REQ, "single positive integer value"),
    (f"{REQ}.0", {"key": "k", "operator": "Lt", "values": ["1", "2"]}, REQ, "single positive integer value"),
    (f"{REQ}.0", {"key": "k", "operator": "In", "values": ["a"], "minValues": 2}, REQ,
     "must have at least that many values"),
    (f"{REQ}.0", {"key": "k", "operator": "Exists", "minValues": 51}, f"{REQ}[0].minValues", "<= 50"),
    (f"{REQ}.0", {"key": "k", "operator": "Exists", "minValues": 0}, f"{REQ}[0].minValues", ">= 1"),
    (f"{REQ}.0", {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}, f"{REQ}[0].key", "restricted"),
    (f"{REQ}.0", {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["a"]}, f"{REQ}[0].key", "restricted"),
    (f"{REQ}.0", {"key": "karpenter.sh/custom", "operator": "In", "values": ["a"]}, f"{REQ}[0].key", "restricted"),
    (f"{REQ}.0", {"key": "bad key!", "operator": "Exists"}, f"{REQ}[0].key", "is not a qualified name"),
    (f"{REQ}.0", {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["xspot"]}, f"{REQ}[0].values",
     "no valid values found"),
    (f"{REQ}.0", {"key": "karpenter.k8s.aws/custom", "operator": "Exists"}, f"{REQ}[0].key",
     'label domain "karpenter.k8s.aws" is restricted'),
    ("spec.template.spec.nodeClassRef", {"name": "default"}, "spec.template.spec.nodeClassRef.group", "required"),
    ("spec.template.spec.nodeClassRef", {"group": "g", "kind": "k"}, "spec.template.spec.nodeClassRef.name",
     "required"),
    ("spec.template.spec.expireAfter", "30d", "spec.template.spec.expireAfter", "is not a duration"),
    ("spec.template.spec.terminationGracePeriod", "Never", "spec.template.spec.terminationGracePeriod",
     "not a duration"),
    ("spec.disruption", {"budgets": [{"nodes": "150%"}]}, "spec.disruption.budgets[0].nodes", "percentage"),
    ("spec.disruption", {"budgets": [{"nodes": "-1"}]}, "spec.disruption.budgets[0].nodes", "non-negative"),
    ("spec.disruption", {"budgets": [{"nodes": "1", "schedule": "@daily"}]}, "spec.disruption.budgets",
     "'schedule' must be set with 'duration'"),
    ("spec.disruption", {"budgets": [{"nodes": "1", "schedule": "61 * * * *", "duration": "1h"}]},
     "spec.disruption.budgets[0].schedule", "not a valid cron"),
    ("spec.disruption", {"budgets": [{"nodes": "1", "schedule": "@sometimes", "duration": "1h"}]},
     "spec.disruption.budgets[0].schedule", "not a cron schedule"),
    ("spec.disruption", {"budgets": [{"nodes": "1", "schedule": "@daily", "duration": "30s"}]},
     "spec.disruption.budgets[0].duration", "hours and minutes"),
    ("spec.disruption", {"budgets": [{"nodes": "1", "reasons": ["Expired"]}]},
     "spec.disruption.budgets[0].reasons[0]", "is not one of"),
    ("spec.disruption", {"consolidationPolicy": "WhenUnderutilized"}, "spec.disruption.consolidationPolicy",
     "is not one of"),
    ("spec.weight", 0, "spec.weight", ">= 1"),
    ("spec.weight", 101, "spec.weight", "<= 100"),
    ("spec.weight", "10", "spec.weight", "must be an integer"),
    ("spec.limits", {"cpu": "lots"}, "spec.limits[cpu]", "not a quantity"),
    ("spec.template.spec.taints", [{"key": "a", "effect": "Sometimes"}], "spec.template.spec.taints[0].effect",
     "is not one of"),
    ("spec.template.spec.taints", [{"key": "a"}], "spec.template.spec.taints[0].effect", "required"),
    ("spec.template.metadata", {"labels": {"kubernetes.io/hostname": "x"}},
     "spec.template.metadata.labels", 'label "kubernetes.io/hostname" is restricted'),
    ("spec.template.metadata", {"labels": {"team": "not valid!"}}, "spec.template.metadata.labels[team]",
     "not a valid label value"),
])
def test_nodepool_rejects(path, value, where, message):
    errs = errors(with_(NODEPOOL, path, value))
    assert any(f"test.yaml: NodePool/default: {where}: " in e and message in e for e in errs), errs


def test_unknown_fields_get_a_did_you_mean_hint():
    raw = with_(NODEPOOL, "spec.limit", {"cpu": "10"})
    assert 'test.yaml: NodePool/default: spec.limit: unknown field; did you mean "limits"?' in errors(raw)
    raw = with_(NODEPOOL, "spec.template.spec.requirments", [])
    assert any('did you mean "requirements"' in e for e in errors(raw))


def test_every_error_is_reported():
    raw = with_(with_(NODEPOOL, "spec.weight", 0), "spec.limit", {})
    raw = with_(raw, "spec.template.spec.expireAfter", "1d")
    assert sorted(errors(raw)) == sorted([
        "test.yaml: NodePool/default: spec.template.spec.expireAfter: '1d' is not a duration (s, m and h only, "
        "e.g. 720h or 1h30m, or Never)",
        "test.yaml: NodePool/default: spec.weight: must be >= 1, got 0",
        'test.yaml: NodePool/default: spec.limit: unknown field; did you mean "limits"?'])


def test_parse_raises_with_all_errors():
    with pytest.raises(InvalidDocument) as e:
        parse_nodepool(doc(with_(NODEPOOL, "spec.weight", 0)))
    assert e.value.errors[0].path == "spec.weight"


@pytest.mark.parametrize(("path", "value"), [
    ("spec.amiSelectorTerms", [{"alias": "bottlerocket@v1.20.3"}]),
    ("spec.amiSelectorTerms", [{"alias": "al2@v20240807"}]),
    ("spec.amiSelectorTerms", [{"tags": {"a": "b"}}, {"id": "ami-123"}]),
    ("spec.instanceProfile", "profile"),
    ("spec.metadataOptions", {"httpTokens": "optional", "httpPutResponseHopLimit": 2}),
    ("spec.blockDeviceMappings", [{"deviceName": "/dev/xvda", "rootVolume": True,
                                   "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "encrypted": True}}]),
    ("spec.kubelet", {"maxPods": 110, "evictionHard": {"memory.available": "5%"},
                      "evictionSoft": {"memory.available": "10%"},
                      "evictionSoftGracePeriod": {"memory.available": "1m"},
                      "kubeReserved": {"cpu": "200m"}, "imageGCHighThresholdPercent": 85,
                      "imageGCLowThresholdPercent": 80}),
    ("spec.subnetSelectorTerms", [{"id": "subnet-123"}, {"tags": {"Name": "*private*"}}]),
    ("spec.securityGroupSelectorTerms", [{"name": "nodes"}, {"tags": {"a": "b"}}]),
])
def test_ec2nodeclass_accepts(path, value):
    raw = with_(NODECLASS, path, value)
    if path == "spec.instanceProfile":
        raw["spec"].pop("role")
    if path == "spec.amiSelectorTerms" and "alias" not in str(value):
        raw["spec"]["amiFamily"] = "AL2023"
    assert errors(raw) == []


@pytest.mark.parametrize(("path", "value", "where", "message"), [
    ("spec.instanceProfile", "p", "spec", "must specify exactly one of ['role', 'instanceProfile']"),
    ("spec.role", _DELETE, "spec", "must specify exactly one of ['role', 'instanceProfile']"),
    ("spec.amiSelectorTerms", _DELETE, "spec.amiSelectorTerms", "required"),
    ("spec.amiSelectorTerms", [], "spec.amiSelectorTerms", "at least 1"),
    ("spec.amiSelectorTerms", [{"alias": "al2023@latest"}, {"id": "ami-1"}], "spec.amiSelectorTerms",
     "combination of other amiSelectorTerms"),
    ("spec.amiSelectorTerms", [{"alias": "al2023@latest", "name": "x"}], "spec.amiSelectorTerms",
     "combination of other fields in amiSelectorTerms"),
    ("spec.amiSelectorTerms", [{"alias": "ubuntu@latest"}], "spec.amiSelectorTerms[0].alias",
     "family is not supported"),
    ("spec.amiSelectorTerms", [{"alias": "windows2022@v1"}], "spec.amiSelectorTerms[0].alias",
     "may only specify version 'latest'"),
    ("spec.amiSelectorTerms", [{"tags": {"a": "b"}}], "spec",
     "must specify amiFamily if amiSelectorTerms does not contain an alias"),
    ("spec.subnetSelectorTerms", [{}], "spec.subnetSelectorTerms", "expected at least one, got none, ['tags', 'id']"),
    ("spec.subnetSelectorTerms", [{"id": "subnet-1", "tags": {"a": "b"}}], "spec.subnetSelectorTerms",
     "'id' is mutually exclusive"),
    ("spec.subnetSelectorTerms", [{"tags": {"a": ""}}], "spec.subnetSelectorTerms[0].tags",
     "empty tag keys or values aren't supported"),
    ("spec.securityGroupSelectorTerms", [{"id": "sg-1", "name": "x"}], "spec.securityGroupSelectorTerms",
     "'id' is mutually exclusive"),
    ("spec.tags", {"kubernetes.io/cluster/c": "owned"}, "spec.tags", "restricted tag matching kubernetes.io/cluster/"),
    ("spec.tags", {"karpenter.sh/nodepool": "x"}, "spec.tags", "restricted tag matching karpenter.sh/nodepool"),
    ("spec.tags", {"eks:eks-cluster-name": "x"}, "spec.tags", "restricted tag matching eks:eks-cluster-name"),
    ("spec.metadataOptions", {"httpTokens": "sometimes"}, "spec.metadataOptions.httpTokens", "is not one of"),
    ("spec.metadataOptions", {"httpEndpoint": "on"}, "spec.metadataOptions.httpEndpoint", "is not one of"),
    ("spec.metadataOptions", {"httpPutResponseHopLimit": 65}, "spec.metadataOptions.httpPutResponseHopLimit",
     "<= 64"),
    ("spec.blockDeviceMappings", [{"rootVolume": True}, {"rootVolume": True}], "spec.blockDeviceMappings",
     "only one"),
    ("spec.blockDeviceMappings", [{"ebs": {"volumeType": "gp9"}}], "spec.blockDeviceMappings[0].ebs.volumeType",
     "is not one of"),
    ("spec.kubelet", {"evictionHard": {"memory.free": "1Gi"}}, "spec.kubelet.evictionHard",
     "isn't a valid eviction signal"),
    ("spec.kubelet", {"evictionSoft": {"memory.available": "1Gi"}}, "spec.kubelet.evictionSoft[memory.available]",
     "has no matching evictionSoftGracePeriod"),
    ("spec.kubelet", {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60},
     "spec.kubelet", "must be greater than imageGCLowThresholdPercent"),
    ("spec.kubelet", {"kubeReserved": {"gpu": "1"}}, "spec.kubelet.kubeReserved", "isn't a reservable resource"),
    ("spec.amiFamily", "Ubuntu", "spec.amiFamily", "is not one of"),
    ("spec.userdata", "#!/bin/sh", "spec.userdata", 'did you mean "userData"'),
])
def test_ec2nodeclass_rejects(path, value, where, message):
    errs = errors(with_(NODECLASS, path, value))
    assert any(f"test.yaml: EC2NodeClass/default: {where}: " in e and message in e for e in errs), errs


def test_nodeclaim_rules():
    claim = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "default-abc"},
             "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                      "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                        "values": ["m5.large"]}],
                      "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}}
    assert errors(claim) == []
    bad = with_(claim, "spec.requirements.0", {"key": "k", "operator": "Gt", "values": []})
    assert any("spec.requirements: requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive "
               "integer value" in e for e in errors(bad))


def test_old_versions_point_at_convert():
    old = dict(NODEPOOL, apiVersion="karpenter.sh/v1beta1")
    assert "karpy convert" in errors(old)[0]
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    assert errors(other) == []
