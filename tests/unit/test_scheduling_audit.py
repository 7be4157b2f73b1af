"""Scheduling behaviours an audit found unguarded (changing the code left the old tests passing): DaemonSet overhead
through simulate_documents, existing-node labels, PREFERENCE_POLICY=Ignore on pod (anti-)affinity, the 60-option cap
of the simulate output."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from controller.api.documents import parse_documents
from controller.provisioning.provisioner import without_preferences
from controller.scheduling.pod import pod_from_dict
from controller.scheduling.types import ExistingNode, Taint
from controller.simulate.render import MAX_OPTIONS, to_dict
from controller.simulate.run import simulate_documents
from tests.unit.test_scheduling import HOST, ZONE, pool, solve

NODECLASS = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
             "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                      "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
                      "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}]}}


def _nodepool(types: list[str] | None = None) -> dict[str, Any]:
    reqs: list[dict[str, Any]] = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]
    if types is not None:
        reqs.append({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types})
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                            "name": "default"}, "requirements": reqs}}}}


def _pod(name: str, cpu: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
                     **spec}}


def _daemonset(cpu: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {
                         "containers": [{"name": "a", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
                         **spec}}}}


def _simulate(*docs: dict[str, Any]) -> dict[str, Any]:
    return to_dict(simulate_documents(parse_documents(yaml.safe_dump_all(docs), "in.yaml")))


def test_a_daemonset_document_changes_the_instance_type_chosen():
    """m5.large allocates ~1.93 vCPU: a 1.5-vCPU pod fits alone, not beside a 0.5-vCPU DaemonSet pod, so the
    DaemonSet's overhead moves the NodeClaim to m5.xlarge; a DaemonSet that cannot run there changes nothing."""
    docs = [NODECLASS, _nodepool(["m5.large", "m5.xlarge"]), _pod("web", "1500m")]
    alone = _simulate(*docs)
    assert [c["instanceType"] for c in alone["nodeClaims"]] == ["m5.large"]
    with_ds = _simulate(*docs, _daemonset("500m"))
    assert [c["instanceType"] for c in with_ds["nodeClaims"]] == ["m5.xlarge"]
    elsewhere = _daemonset("500m", nodeSelector={"kubernetes.io/arch": "arm64"})
    assert [c["instanceType"] for c in _simulate(*docs, elsewhere)["nodeClaims"]] == ["m5.large"]
    small = _daemonset("100m")
    assert [c["instanceType"] for c in _simulate(*docs, small)["nodeClaims"]] == ["m5.large"]


def test_simulate_lists_the_60_cheapest_instance_type_options():
    """Karpenter hands CreateFleet at most 60 instance types: the output lists exactly 60 of a larger option set,
    and they are the 60 cheapest of it."""
    docs = [NODECLASS, _nodepool(), _pod("web", "500m")]
    result = simulate_documents(parse_documents(yaml.safe_dump_all(docs), "in.yaml"))
    (claim,) = to_dict(result)["nodeClaims"]
    (planned,) = result.plan.node_claims
    assert MAX_OPTIONS == 60
    assert len(claim["instanceTypeOptions"]) == 60
    assert claim["instanceTypeOptionsTotal"] == len(planned.instance_type_options) > 60

    def price(it: Any) -> float:
        return min(o.price for o in it.offerings if o.capacity_type == "on-demand")

    by_price = sorted(planned.instance_type_options, key=lambda it: (price(it), it.name))
    assert sorted(claim["instanceTypeOptions"]) == sorted(it.name for it in by_price[:60])
    assert claim["instanceType"] == by_price[0].name


NODE_ALLOC = {"cpu": 4000, "memory": 8 * 2**30, "pods": 110}


def test_existing_node_labels_admit_a_selecting_pod():
    node = ExistingNode("node-a", {"team": "a", ZONE: "test-zone-1", HOST: "node-a"}, [], dict(NODE_ALLOC))
    p = pod_from_dict({"metadata": {"name": "p", "namespace": "default"},
                       "spec": {"nodeSelector": {"team": "a"}, "containers": [{"name": "c"}]}})
    plan = solve([], [p], existing=[node])
    assert [q.key for q in plan.existing["node-a"]] == ["default/p"] and not plan.unschedulable


def test_existing_node_labels_reject_a_pod_selecting_other_labels():
    node = ExistingNode("node-a", {"team": "a", ZONE: "test-zone-1", HOST: "node-a"}, [], dict(NODE_ALLOC))
    other = pod_from_dict({"metadata": {"name": "p", "namespace": "default"},
                           "spec": {"nodeSelector": {"team": "b"}, "containers": [{"name": "c"}]}})
    plan = solve([], [other], existing=[node])
    assert not plan.existing and list(plan.unschedulable) == ["default/p"]
    affinity = pod_from_dict({"metadata": {"name": "q", "namespace": "default"}, "spec": {
        "containers": [{"name": "c"}], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}]}}}}})
    plan = solve([pool()], [affinity], existing=[node])
    assert not plan.existing and len(plan.node_claims) == 1


def test_existing_node_taint_rejects_and_toleration_admits():
    node = ExistingNode("node-a", {ZONE: "test-zone-1", HOST: "node-a"}, [Taint("dedicated", "a", "NoSchedule")],
                        dict(NODE_ALLOC))
    plain = pod_from_dict({"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}})
    assert not solve([], [plain], existing=[node]).existing
    tolerant = pod_from_dict({"metadata": {"name": "t", "namespace": "default"}, "spec": {
        "containers": [{"name": "c"}],
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]}})
    assert [q.key for q in solve([], [tolerant], existing=[node]).existing["node-a"]] == ["default/t"]


def _term(weight: int) -> dict[str, Any]:
    return {"weight": weight, "podAffinityTerm": {"topologyKey": HOST,
                                                  "labelSelector": {"matchLabels": {"app": "web"}}}}


def _web(name: str, affinity: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
                     "affinity": affinity}}


def test_preference_policy_ignore_drops_preferred_pod_anti_affinity():
    """Respect: two pods that prefer not to share a host get a NodeClaim each; Ignore: they share one."""
    raw = [_web(f"w{i}", {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [_term(100)]}})
           for i in range(2)]
    respected = solve([pool()], [pod_from_dict(copy.deepcopy(r)) for r in raw])
    assert len(respected.node_claims) == 2
    ignored_pods = [without_preferences(pod_from_dict(copy.deepcopy(r))) for r in raw]
    assert all(p.preferred_anti_affinity == () for p in ignored_pods)
    ignored = solve([pool()], ignored_pods)
    assert len(ignored.node_claims) == 1 and not ignored.unschedulable


def test_preference_policy_ignore_drops_preferred_pod_affinity_and_keeps_required_terms():
    required = {"requiredDuringSchedulingIgnoredDuringExecution": [_term(1)["podAffinityTerm"]]}
    raw = _web("w", {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [_term(50)]},
                     "podAntiAffinity": required})
    p = pod_from_dict(raw)
    assert len(p.preferred_affinity) == 1 and len(p.anti_affinity) == 1
    ignored = without_preferences(p)
    assert ignored.preferred_affinity == () and ignored.preferred_anti_affinity == ()
    assert ignored.anti_affinity == p.anti_affinity  # required terms are never dropped
