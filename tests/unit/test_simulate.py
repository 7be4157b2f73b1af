"""`karpy simulate` on the bundled examples and on kubectl-style snapshots, with asserted placements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cli import main
from controller.api import load_documents
from controller.api.documents import parse_documents
from controller.provisioning import inputs
from controller.simulate.render import explain_pod, to_dict
from controller.simulate.run import SimulationError, simulate_documents

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def result():
    return simulate_documents(load_documents([str(p) for p in sorted(EXAMPLES.glob("*.yaml"))]))


def _claims(data, prefix):
    return [c for c in data["nodeClaims"] if any(p.split("/")[1].startswith(prefix) for p in c["pods"])]


def test_examples_land_on_their_pools(result):
    data = to_dict(result)
    coredns = _claims(data, "coredns")
    assert {c["nodePool"] for c in coredns} == {"system-critical"} and len(coredns) == 2  # anti-affinity
    assert all(c["capacityType"] == "on-demand" for c in coredns)
    prometheus = _claims(data, "prometheus")
    assert {c["nodePool"] for c in prometheus} == {"monitoring"}
    assert len({c["zone"] for c in prometheus}) == 2  # zonal spread
    assert all(c["instanceType"].startswith("r") for c in prometheus)
    assert {c["nodePool"] for c in _claims(data, "build-frontend")} == {"cicd"}
    assert {c["capacityType"] for c in _claims(data, "build-frontend")} == {"spot"}
    assert {c["nodePool"] for c in _claims(data, "nightly-report")} == {"cron"}
    web = _claims(data, "web")
    assert {c["nodePool"] for c in web} == {"service"}
    zones = [c["zone"] for c in web for p in c["pods"] if "/web-" in p]
    assert len(zones) == 6 and max(zones.count(z) for z in zones) - min(zones.count(z) for z in set(zones)) <= 1
    checkout = _claims(data, "checkout")
    assert len({c["name"] for c in checkout}) == 4  # preferred anti-affinity met
    assert all(c["capacityType"] == "on-demand" for c in checkout)  # preferred on-demand met


def test_gpu_pod_is_explained(result):
    data = to_dict(result)
    assert [u["pods"] for u in data["unschedulable"]] == [["ml/train-model"]]
    reasons = {r["nodePool"]: r["reason"] for r in data["unschedulable"][0]["reasons"]}
    assert reasons["monitoring"] == "taint dedicated=monitoring:NoSchedule not tolerated"
    assert reasons["default"].startswith("no instance type has room for requests cpu=8, memory=32Gi, nvidia.com/gpu=1")
    assert explain_pod(result, "ml/train-model").startswith("ml/train-model cannot be scheduled")


def test_cost_and_bound(result):
    cost = to_dict(result)["cost"]
    assert 0 < cost["lowerBoundPerHour"] <= cost["totalPerHour"]
    assert cost["totalPerHour"] == pytest.approx(sum(c["pricePerHour"] for c in to_dict(result)["nodeClaims"]),
                                                 abs=1e-3)
    assert to_dict(result)["catalog"]["prices"].startswith("estimated")


def test_snapshot_with_existing_nodes_fills_them_first():
    snapshot = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-10-0-1-1", "labels": {
            "topology.kubernetes.io/zone": "us-east-1a", "node.kubernetes.io/instance-type": "m5.xlarge",
            "karpenter.sh/capacity-type": "on-demand", "karpenter.sh/nodepool": "default",
            "kubernetes.io/arch": "amd64"}},
         "spec": {"providerID": "aws:///us-east-1a/i-1"},
         "status": {"allocatable": {"cpu": "3920m", "memory": "14Gi", "pods": "58"},
                    "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "running", "namespace": "default"},
         "spec": {"nodeName": "ip-10-0-1-1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]},
         "status": {"phase": "Running"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pending-small", "namespace": "default"},
         "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pending-big", "namespace": "default"},
         "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}]}},
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
         "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                         "name": "default"}, "requirements": []}},
                  "limits": {"cpu": "6"}}},
    ]}
    result = simulate_documents(parse_documents(yaml.safe_dump(snapshot), "snapshot.yaml"))
    data = to_dict(result)
    assert data["existingNodes"] == [{"name": "ip-10-0-1-1", "pods": ["default/pending-small"]}]
    # the pool has 6 cpu of limits and its node uses 4: a new node fits only within the 2 left
    assert [u["pods"] for u in data["unschedulable"]] == [["default/pending-big"]]
    assert "limits exceeded" in data["unschedulable"][0]["reasons"][0]["reason"]


def test_invalid_input_names_the_field():
    text = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: broken}
spec:
  limit: {cpu: "10"}
  template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}, requirements: []}}
"""
    with pytest.raises(SimulationError,
                       match=r'x\.yaml: document 1 NodePool/broken: spec\.limit: unknown field; did you mean'):
        simulate_documents(parse_documents(text, "x.yaml"))
    bad_pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: " \
              "{requests: {cpu: lots}}}]}\n"
    with pytest.raises(SimulationError, match=r"pod.yaml: document 1 Pod/p: spec.containers\[0\].resources."
                                              r"requests\[cpu\]: .lots. is not a quantity"):
        simulate_documents(parse_documents(bad_pod, "pod.yaml"))


def test_cli_simulate_json_and_validate_exit_codes(tmp_path):
    runner = CliRunner()
    out = runner.invoke(main, ["simulate", "-f", str(EXAMPLES), "-o", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert set(data) >= {"nodeClaims", "existingNodes", "unschedulable", "cost"}
    assert set(data["nodeClaims"][0]) >= {"nodePool", "instanceType", "capacityType", "zone", "pricePerHour", "pods",
                                          "instanceTypeOptions"}
    assert runner.invoke(main, ["validate", "-f", str(EXAMPLES)]).exit_code == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: b}\nspec: {weight: 0}\n")
    res = runner.invoke(main, ["validate", "-f", str(bad)])
    assert res.exit_code == 1
    assert f"{bad}: document 1 NodePool/b: spec.template: required" in res.output
    assert f"{bad}: document 1 NodePool/b: spec.weight: must be >= 1, got 0" in res.output
    assert runner.invoke(main, ["simulate", "-f", str(tmp_path / "none.yaml")]).exit_code == 2
    crds = runner.invoke(main, ["crds"])
    assert crds.exit_code == 0 and len(list(yaml.safe_load_all(crds.output))) == 3
    conv = runner.invoke(main, ["convert", "-f", str(EXAMPLES / "legacy")])
    assert conv.exit_code == 0 and "karpenter.sh/v1" in conv.output
    explain = runner.invoke(main, ["explain", "shop/web-x", "-f", str(EXAMPLES)])
    assert explain.exit_code == 1 and "not among" in explain.output


def test_zonal_volumes_pin_pods_to_their_zone():
    text = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}, requirements: []}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-data}
spec:
  capacity: {storage: 10Gi}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1c]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: db}
spec: {volumeName: pv-data, storageClassName: gp3}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: gp3-east-1b}
provisioner: ebs.csi.aws.com
allowedTopologies:
  - matchLabelExpressions: [{key: topology.kubernetes.io/zone, values: [us-east-1b]}]
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, namespace: db}
spec:
  containers: [{name: c, resources: {requests: {cpu: "1"}}}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: cache, namespace: db}
spec:
  replicas: 2
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache}}
    spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
  volumeClaimTemplates:
    - metadata: {name: data}
      spec: {storageClassName: gp3-east-1b, resources: {requests: {storage: 1Gi}}}
"""
    data = to_dict(simulate_documents(parse_documents(text, "vol.yaml")))
    zone_of = {p: c["zone"] for c in data["nodeClaims"] for p in c["pods"]}
    assert zone_of["db/db-0"] == "us-east-1c"
    assert zone_of["db/cache-0"] == zone_of["db/cache-1"] == "us-east-1b"
    missing = text.replace("claimName: data}", "claimName: nope}")
    with pytest.raises(SimulationError, match="PersistentVolumeClaim db/nope not found"):
        simulate_documents(parse_documents(missing, "vol.yaml"))


def test_cli_simulate_yaml_says_what_json_says():
    """`-o yaml` is the same document as `-o json`, not another rendering of part of it."""
    runner = CliRunner()
    as_json = runner.invoke(main, ["simulate", "-f", str(EXAMPLES), "-o", "json"])
    as_yaml = runner.invoke(main, ["simulate", "-f", str(EXAMPLES), "-o", "yaml"])
    assert as_json.exit_code == 0 and as_yaml.exit_code == 0, (as_json.output, as_yaml.output)
    assert not as_yaml.output.lstrip().startswith("{")
    from_yaml = yaml.safe_load(as_yaml.output)
    assert from_yaml == json.loads(as_json.output)
    assert from_yaml["nodeClaims"] and from_yaml["cost"]["totalPerHour"] > 0


NODEPOOLS_WITH_STATUS = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: preferred}
spec:
  weight: 50
  template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}, requirements: []}}
status:
  conditions: [{type: Ready, status: "False", reason: NodeClassNotReady, message: EC2NodeClass d not ready}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: fallback}
spec:
  template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}, requirements: []}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {team: a}}
---
apiVersion: v1
kind: Pod
metadata: {name: target, namespace: team-a, labels: {app: db}}
spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: near-db, namespace: default}
spec:
  containers: [{name: c, resources: {requests: {cpu: "1"}}}]
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: db}},
           namespaceSelector: {matchLabels: {team: a}}}
---
apiVersion: v1
kind: Pod
metadata: {name: gpu, namespace: default}
spec:
  containers: [{name: c, resources: {claims: [{name: g}]}}]
  resourceClaims: [{name: g, resourceClaimName: gpu}]
---
apiVersion: v1
kind: Pod
metadata: {name: elsewhere, namespace: default}
spec:
  containers: [{name: c}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: karpenter.sh/nodepool, operator: DoesNotExist}]}]
"""


def test_simulate_honours_nodepool_readiness_namespace_selectors_and_karpenters_refusals():
    """A NodePool whose status says it is not Ready takes no pods; a namespaceSelector is matched against the
    Namespace documents; pods with resource claims are refused as the controller refuses them; pods that ask for
    non-Karpenter capacity are left out with a note."""
    result = simulate_documents(parse_documents(NODEPOOLS_WITH_STATUS, "status.yaml"))
    data = to_dict(result)
    pool_of = {p: c["nodePool"] for c in data["nodeClaims"] for p in c["pods"]}
    assert pool_of == {"team-a/target": "fallback", "default/near-db": "fallback"}
    [claim] = data["nodeClaims"]
    assert sorted(claim["pods"]) == ["default/near-db", "team-a/target"]
    assert result.plan.unschedulable["default/gpu"] == inputs.DRA_UNSUPPORTED
    assert "default/elsewhere" not in result.plan.unschedulable
    assert any("default/elsewhere" in n and "DoesNotExist" in n for n in result.notes)
    # the NodePool alone, not Ready: its reason is the pods'
    only = NODEPOOLS_WITH_STATUS.split("---")[0] + "---" + NODEPOOLS_WITH_STATUS.split("---")[3]
    lone = simulate_documents(parse_documents(only, "status.yaml"))
    assert "EC2NodeClass d not ready" in lone.plan.unschedulable["team-a/target"]
