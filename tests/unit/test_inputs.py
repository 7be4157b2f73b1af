"""The scheduling input builder shared by the provisioner and `karpy simulate` (controller.provisioning.inputs)."""

from __future__ import annotations

import pytest

from controller.api import labels as L
from controller.catalog.synthetic import benchmark_instance_types
from controller.provisioning import inputs
from controller.scheduling.scheduler import Scheduler
from controller.scheduling.types import Taint


def nodepool(name="default", **spec):
    template_spec = {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": [{"key": L.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}]}
    template_spec.update(spec.pop("template_spec", {}))
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"metadata": {"labels": {"team": "a"}}, "spec": template_spec}, **spec}}


def pod(name="p", cpu="1", **spec):
    spec.setdefault("containers", [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def node(name="n1", labels=None, taints=None, unschedulable=False, allocatable=None, capacity=None):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"allocatable": allocatable or {"cpu": "4", "memory": "16Gi", "pods": "110"},
                       "capacity": capacity or {"cpu": "4", "memory": "16Gi", "pods": "110"}}}


def test_taints_default_effect_and_errors():
    assert inputs.taints([{"key": "a", "value": "b", "effect": "NoExecute"}, {"key": "c"}]) == [
        Taint("a", "b", "NoExecute"), Taint("c", "", "NoSchedule")]
    assert inputs.taints(None) == []
    with pytest.raises(inputs.InputError, match=r"taints\[0\]\.key: required"):
        inputs.taints([{"effect": "NoSchedule"}])
    with pytest.raises(inputs.InputError, match=r"taints\[0\]\.effect: 'Sometimes'"):
        inputs.taints([{"key": "a", "effect": "Sometimes"}])


def test_node_pool_pins_its_name_and_template_labels():
    pool = inputs.node_pool(nodepool(limits={"cpu": "100"}, weight=5,
                                     template_spec={"taints": [{"key": "gpu", "effect": "NoSchedule"}],
                                                    "startupTaints": [{"key": "init", "effect": "NoSchedule"}]}),
                            [], {"cpu": 4000})
    assert pool.name == "default" and pool.weight == 5
    assert pool.requirements.labels() == {L.NODEPOOL: "default", "team": "a", L.CAPACITY_TYPE: "on-demand"}
    assert pool.limits == {"cpu": 100_000} and pool.used == {"cpu": 4000}
    assert pool.taints == [Taint("gpu", "", "NoSchedule")] and pool.startup_taints == [Taint("init", "", "NoSchedule")]
    assert pool.not_ready_reason == ""


def test_node_pool_errors_name_the_pool_and_field():
    with pytest.raises(inputs.InputError, match=r"NodePool/default: spec.limits.cpu: .lots. is not a quantity"):
        inputs.node_pool(nodepool(limits={"cpu": "lots"}), [], {})
    with pytest.raises(inputs.InputError, match=r"NodePool/default: spec.template.spec.taints\[0\].key: required"):
        inputs.node_pool(nodepool(template_spec={"taints": [{"effect": "NoSchedule"}]}), [], {})
    with pytest.raises(inputs.InputError, match=r"NodePool/x: spec: must be an object"):
        inputs.node_pool({"metadata": {"name": "x"}, "spec": 5}, [], {})


def test_a_not_ready_nodepool_opens_no_nodeclaim_and_says_why():
    ready = inputs.node_pool(nodepool("ready"), benchmark_instance_types(8), {})
    broken = inputs.node_pool(nodepool("broken", weight=100), benchmark_instance_types(8), {},
                              'EC2NodeClass "default" is not ready')
    p = inputs.scheduling_pod(pod())
    plan = Scheduler([broken, ready]).solve([p])
    assert [c.node_pool for c in plan.node_claims] == ["ready"]
    plan = Scheduler([broken]).solve([p])
    assert not plan.node_claims
    assert 'nodepool "broken": EC2NodeClass "default" is not ready' in plan.unschedulable["default/p"]


def test_scheduling_pod_errors_name_the_pod_and_field():
    with pytest.raises(inputs.InputError, match=r"Pod/default/p: spec.containers\[0\].resources.requests.cpu"):
        inputs.scheduling_pod(pod(cpu="a lot"))
    with pytest.raises(inputs.InputError, match=r"Pod/default/p: spec: required"):
        inputs.scheduling_pod({"metadata": {"name": "p"}})


def test_scheduling_pod_folds_in_the_zone_of_its_bound_volume():
    raw = pod(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])
    volumes = inputs.VolumeTopology(
        pvcs={("default", "data"): {"spec": {"volumeName": "pv-1"}}},
        pvs={"pv-1": {"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": L.ZONE, "operator": "In", "values": ["us-east-1b"]}]}]}}}}})
    p = inputs.scheduling_pod(raw, volumes)
    assert [t.labels() for t in p.volume_terms] == [{L.ZONE: "us-east-1b"}]
    assert p.node_terms == ()  # kept apart from node affinity (topology spread does not count with it)
    assert inputs.scheduling_pod(raw).volume_terms == ()  # without volumes, nothing is looked up
    with pytest.raises(inputs.InputError, match=r"Pod/default/p: .*PersistentVolumeClaim default/data not found"):
        inputs.scheduling_pod(raw, inputs.VolumeTopology())


def test_daemonset_pod_is_its_template():
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
          "spec": {"template": {"metadata": {"labels": {"app": "agent"}}, "spec": {
              "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}],
              "tolerations": [{"operator": "Exists"}]}}}}
    p = inputs.daemonset_pod(ds)
    assert (p.namespace, p.labels, p.requests["cpu"], p.owner) == ("kube-system", {"app": "agent"}, 100,
                                                                   "DaemonSet/agent")
    assert len(p.tolerations) == 1
    with pytest.raises(inputs.InputError, match=r"DaemonSet/kube-system/agent: spec\.template: a pod template"):
        inputs.daemonset_pod({**ds, "spec": {"template": {}}})
    greedy = {**ds, "spec": {"template": {"spec": {"containers": [{"name": "a", "resources": {"requests": {
        "cpu": "lots"}}}]}}}}
    with pytest.raises(inputs.InputError,
                       match=r"DaemonSet/kube-system/agent: spec\.template: spec\.containers\[0\]\.resources"):
        inputs.daemonset_pod(greedy)


def test_existing_node_labels_taints_and_cordon():
    n = inputs.existing_node(node(labels={L.NODEPOOL: "default", L.ZONE: "us-east-1a"},
                                  taints=[{"key": "dedicated", "value": "a", "effect": "NoSchedule"}],
                                  unschedulable=True), [], price=0.5)
    assert n.taints == [Taint("dedicated", "a", "NoSchedule"),
                        Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")]
    assert n.labels[L.HOSTNAME] == "n1" and n.node_pool == "default" and n.price == 0.5
    assert n.allocatable["cpu"] == 4000 and not n.in_flight


def test_a_cordoned_node_takes_no_pods():
    cordoned = inputs.existing_node(node(unschedulable=True), [])
    open_ = inputs.existing_node(node("n2"), [])
    plan = Scheduler([], [cordoned, open_]).solve([inputs.scheduling_pod(pod())])
    assert list(plan.existing) == ["n2"]
    plan = Scheduler([], [cordoned]).solve([inputs.scheduling_pod(pod())])
    assert "default/p" in plan.unschedulable


def test_existing_node_ignores_startup_and_ephemeral_taints_until_initialized():
    """Karpenter's StateNode.Taints: on its own node not yet initialized, known ephemeral taints and the
    NodeClaim's startupTaints are expected to go away; other taints stay."""
    taints = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
              {"key": L.UNREGISTERED_TAINT_KEY, "effect": "NoExecute"},
              {"key": "cilium/agent-not-ready", "effect": "NoSchedule"},
              {"key": "dedicated", "value": "a", "effect": "NoSchedule"}]
    claim = {"metadata": {"name": "default-abcde"},
             "spec": {"startupTaints": [{"key": "cilium/agent-not-ready", "effect": "NoSchedule"}]},
             "status": {"allocatable": {"cpu": "3800m", "memory": "15Gi", "pods": "58"}}}
    starting = inputs.existing_node(node(labels={L.NODEPOOL: "default"}, taints=taints,
                                         allocatable={"cpu": "0", "pods": "0"}), [], nodeclaim=claim)
    assert starting.taints == [Taint("dedicated", "a", "NoSchedule")]
    assert starting.allocatable == {"cpu": 3800, "pods": 58, "memory": 15 * 2**30}
    ready = inputs.existing_node(node(labels={L.NODEPOOL: "default", L.INITIALIZED: "true"}, taints=taints), [],
                                 nodeclaim=claim)
    assert len(ready.taints) == 4
    unmanaged = inputs.existing_node(node(taints=taints), [])
    assert len(unmanaged.taints) == 4


def test_in_flight_node_from_a_nodeclaim():
    claim = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
             "metadata": {"name": "default-x7k2p", "labels": {L.NODEPOOL: "default", "team": "a"}},
             "spec": {"requirements": [
                 {"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m5.large", "m5.xlarge"]},
                 {"key": L.ZONE, "operator": "In", "values": ["us-east-1a"]},
                 {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["spot"]},
                 {"key": L.ARCH, "operator": "NotIn", "values": ["arm64"]}],
                 "taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"},
                            {"key": L.UNREGISTERED_TAINT_KEY, "effect": "NoExecute"}],
                 "startupTaints": [{"key": "init", "effect": "NoSchedule"}]}}
    n = inputs.in_flight_node(claim, {"cpu": 1930, "pods": 29}, [])
    assert n.in_flight and n.name == "default-x7k2p" and n.node_pool == "default"
    assert n.labels == {L.NODEPOOL: "default", "team": "a", L.ZONE: "us-east-1a", L.CAPACITY_TYPE: "spot",
                        L.HOSTNAME: "default-x7k2p"}
    assert n.taints == [Taint("dedicated", "a", "NoSchedule")]
    assert n.allocatable == {"cpu": 1930, "pods": 29}
    with pytest.raises(inputs.InputError, match=r"NodeClaim/c: spec.requirements"):
        inputs.in_flight_node({"metadata": {"name": "c"}, "spec": {"requirements": [{"key": "a", "operator": "Gt"}]}},
                              {}, [])


def test_pods_go_to_in_flight_capacity_before_new_nodeclaims():
    claim = {"metadata": {"name": "default-aaaaa", "labels": {L.NODEPOOL: "default"}}, "spec": {}}
    flight = inputs.in_flight_node(claim, {"cpu": 4000, "memory": 16 * 2**30, "pods": 110}, [])
    pool = inputs.node_pool(nodepool(), benchmark_instance_types(8), {})
    plan = Scheduler([pool], [flight]).solve([inputs.scheduling_pod(pod(f"p{i}")) for i in range(3)])
    assert not plan.node_claims and len(plan.existing["default-aaaaa"]) == 3


def test_nodepool_usage_sums_capacity_and_counts_nodes_per_pool():
    nodes = [node("a", labels={L.NODEPOOL: "x"}), node("b", labels={L.NODEPOOL: "x"}, capacity={"cpu": "2"}),
             node("c", labels={L.NODEPOOL: "y"}), node("d")]
    usage = inputs.nodepool_usage(nodes)
    assert usage["x"] == {"nodes": 2, "cpu": 6000, "memory": 16 * 2**30, "pods": 110}
    assert usage["y"]["nodes"] == 1 and set(usage) == {"x", "y"}
    with pytest.raises(inputs.InputError, match=r"Node/e: status.capacity"):
        inputs.nodepool_usage([node("e", labels={L.NODEPOOL: "x"}, capacity={"cpu": "many"})])


def test_limits_count_what_existing_nodes_use():
    pool = inputs.node_pool(nodepool(limits={"cpu": "8"}), benchmark_instance_types(8),
                            inputs.nodepool_usage([node("a", labels={L.NODEPOOL: "default"}, capacity={"cpu": "8"})])[
                                "default"])
    plan = Scheduler([pool]).solve([inputs.scheduling_pod(pod())])
    assert not plan.node_claims and "limits exceeded" in plan.unschedulable["default/p"]


def _pv(name: str, *terms: list[dict], **spec) -> dict:
    return {"metadata": {"name": name}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
        {"matchExpressions": t} for t in terms]}}, **spec}}


def _zone(*zones: str) -> dict:
    return {"key": L.ZONE, "operator": "In", "values": list(zones)}


def test_volume_alternatives_as_karpenters_volume_topology():
    """A PV's terms are alternatives; two volumes keep only the pairings that agree; a hostPath/local volume's
    hostname requirement is dropped; a generic ephemeral volume is read through the claim <pod>-<volume>."""
    raw = pod(volumes=[{"name": "a", "persistentVolumeClaim": {"claimName": "a"}},
                       {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}])
    volumes = inputs.VolumeTopology(
        pvcs={("default", "a"): {"spec": {"volumeName": "pv-a"}},
              ("default", "p-scratch"): {"spec": {"volumeName": "pv-b"}}},
        pvs={"pv-a": _pv("pv-a", [_zone("us-east-1a")], [_zone("us-east-1b")]),
             "pv-b": _pv("pv-b", [_zone("us-east-1b"), {"key": L.HOSTNAME, "operator": "In", "values": ["n1"]}],
                         hostPath={"path": "/x"})})
    p = inputs.scheduling_pod(raw, volumes)
    assert [t.labels() for t in p.volume_terms] == [{L.ZONE: "us-east-1b"}]
    # an unbound claim: its StorageClass's topologies, each an alternative; a StorageClass that is not there is said
    raw = pod(volumes=[{"name": "a", "persistentVolumeClaim": {"claimName": "new"}}])
    volumes = inputs.VolumeTopology(pvcs={("default", "new"): {"spec": {"storageClassName": "zonal"}}},
                                    storage_classes={"zonal": {"allowedTopologies": [
                                        {"matchLabelExpressions": [{"key": L.ZONE, "values": ["us-east-1a"]}]},
                                        {"matchLabelExpressions": [{"key": L.ZONE, "values": ["us-east-1c"]}]}]}})
    assert sorted(t.labels()[L.ZONE] for t in inputs.scheduling_pod(raw, volumes).volume_terms) == [
        "us-east-1a", "us-east-1c"]
    with pytest.raises(inputs.InputError, match="StorageClass zonal of PersistentVolumeClaim default/new not found"):
        inputs.scheduling_pod(raw, inputs.VolumeTopology(pvcs=volumes.pvcs))
    deleting = {("default", "new"): {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}}}
    with pytest.raises(inputs.InputError, match="PersistentVolumeClaim default/new is being deleted"):
        inputs.scheduling_pod(raw, inputs.VolumeTopology(pvcs=deleting))
