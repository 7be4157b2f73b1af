"""The scheduling simulation: each constraint kind, with asserted placements or asserted reasons."""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
from pathlib import Path

import pytest

from controller.catalog.synthetic import benchmark_instance_types
from controller.scheduling.pod import PodError, pod_from_dict
from controller.scheduling.requirements import Requirements
from controller.scheduling.scheduler import Plan, Scheduler
from controller.scheduling.types import ExistingNode, SchedNodePool, Taint

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
CT = "karpenter.sh/capacity-type"
_ids = itertools.count()


def pool(name="default", weight=0, reqs=(), taints=(), labels=None, limits=None, types=16):
    r = Requirements.from_node_selector_requirements(list(reqs)).intersect(Requirements.from_labels(labels or {}))
    return SchedNodePool(name, weight, r, list(taints), [], dict(labels or {}), limits, {},
                         benchmark_instance_types(types))


def pod(cpu="1", mem="1Gi", labels=None, name=None, **spec):
    spec.setdefault("containers", [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}])
    return pod_from_dict({"metadata": {"name": name or f"p{next(_ids)}", "namespace": "default",
                                       "labels": labels or {}}, "spec": spec})


def solve(pools, pods, existing=None, daemonsets=None) -> Plan:
    return Scheduler(pools, existing, daemonsets).solve(pods, lower_bound=True)


def claim_of(plan, p):
    return next(c for c in plan.node_claims if any(q is p for q in c.pods))


def test_packs_identical_pods_onto_the_cheapest_fitting_type():
    plan = solve([pool()], [pod() for _ in range(6)])
    assert len(plan.node_claims) == 1 and not plan.unschedulable
    c = plan.node_claims[0]
    assert c.instance_type is not None
    # 6 x 1 cpu + 100m overhead -> a 7-vCPU type (fake-it-6), spot first since the pool allows spot
    assert c.instance_type.name == "fake-it-6" and c.capacity_type == "spot"
    assert c.instance_type_options[0].name == "fake-it-6"
    assert plan.lower_bound_per_hour <= plan.cost_per_hour


def test_node_selector_and_required_affinity():
    on_demand = pod(nodeSelector={CT: "on-demand"})
    zonal = pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-3"]}]}]}}})
    plan = solve([pool()], [on_demand, zonal])
    assert claim_of(plan, on_demand).capacity_type == "on-demand"
    assert claim_of(plan, zonal).zone == "test-zone-3"
    assert claim_of(plan, zonal).capacity_type == "on-demand"  # no spot in zone 3


def test_affinity_terms_are_ored():
    p = pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "team", "operator": "In", "values": ["x"]}]},
        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-2"]}]}]}}})
    plan = solve([pool()], [p])
    assert claim_of(plan, p).zone == "test-zone-2"


def test_taints_need_tolerations_and_the_reason_names_the_taint():
    gpu = pool("gpu", taints=[Taint("nvidia.com/gpu", "true", "NoSchedule")])
    plain = pod(name="plain")
    tolerant = pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    plan = solve([gpu], [plain, tolerant])
    assert "taint nvidia.com/gpu=true:NoSchedule not tolerated" in plan.unschedulable["default/plain"]
    assert claim_of(plan, tolerant).node_pool == "gpu"


def test_weights_order_nodepools():
    plan = solve([pool("low", weight=1), pool("high", weight=50)], [pod()])
    assert plan.node_claims[0].node_pool == "high"


def test_pool_requirements_and_custom_labels():
    monitoring = pool("monitoring", labels={"workload": "monitoring"})
    wants = pod(nodeSelector={"workload": "monitoring"})
    other = pod(name="other", nodeSelector={"workload": "batch"})
    plan = solve([monitoring], [wants, other])
    assert claim_of(plan, wants).node_pool == "monitoring"
    assert "workload" in plan.unschedulable["default/other"]


def test_limits_are_respected():
    small = pool(limits={"cpu": 4000})
    plan = solve([small], [pod(cpu="3") for _ in range(3)])
    assert len(plan.node_claims) == 1
    assert len(plan.unschedulable) == 2
    assert all("limits" in r for r in plan.unschedulable.values())


def test_no_type_big_enough_reason():
    plan = solve([pool(types=4)], [pod(cpu="8", name="big")])
    assert "no instance type has room for requests cpu=8" in plan.unschedulable["default/big"]


def test_existing_nodes_are_filled_first():
    node = ExistingNode("node-a", {ZONE: "test-zone-1", HOST: "node-a"}, [], {"cpu": 4000, "memory": 8 * 2**30,
                                                                               "pods": 110})
    pods = [pod() for _ in range(5)]
    plan = solve([pool()], pods, existing=[node])
    assert len(plan.existing["node-a"]) == 4
    assert len(plan.node_claims) == 1 and len(plan.node_claims[0].pods) == 1


def test_existing_node_taints_and_labels_apply():
    node = ExistingNode("node-a", {"team": "a"}, [Taint("dedicated", "a", "NoSchedule")],
                        {"cpu": 4000, "memory": 8 * 2**30, "pods": 110})
    plan = solve([pool()], [pod()], existing=[node])
    assert not plan.existing


def test_daemonset_overhead_is_added_to_new_nodes():
    ds = pod(cpu="500m", mem="256Mi", tolerations=[{"operator": "Exists"}])
    plan = solve([pool()], [pod(cpu="1")], daemonsets=[ds])
    c = plan.node_claims[0]
    assert c.instance_type is not None
    # 1 cpu + 500m daemonset + 100m kube-reserved does not fit 1 vCPU, 2 vCPU does
    assert c.instance_type.name == "fake-it-1"


def test_daemonset_overhead_counts_despite_startup_taints():
    """Karpenter: startupTaints are removed by DaemonSets once the node is up, so a DaemonSet that does not tolerate
    them still runs there (only the pool's taints can keep it off)."""
    ds = pod(cpu="500m", mem="256Mi")
    starting = pool()
    starting.startup_taints = [Taint("cilium/agent-not-ready", "true", "NoSchedule")]
    # 500m + 500m daemonset + 100m kube-reserved does not fit 1 vCPU, 2 vCPU does
    plan = solve([starting], [pod(cpu="500m")], daemonsets=[ds])
    assert plan.node_claims[0].instance_type.name == "fake-it-1"
    tainted = pool(taints=[Taint("dedicated", "db", "NoSchedule")])
    plan = solve([tainted], [pod(cpu="500m", tolerations=[{"key": "dedicated", "operator": "Exists"}])],
                 daemonsets=[ds])
    assert plan.node_claims[0].instance_type.name == "fake-it-0"  # the DaemonSet does not run there


def test_host_ports_of_bound_pods_and_daemonsets_are_taken():
    """Karpenter tracks host-port usage per node: a port held by a pod bound to an existing node, or by a DaemonSet
    that runs on the pool's nodes, is not available to a new pod."""
    port = [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}],
             "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]
    bound = pod(name="bound", containers=port)
    node = ExistingNode("node-a", {}, [], {"cpu": 4000, "memory": 8 * 2**30, "pods": 110}, pods=[bound])
    plan = solve([pool()], [pod(name="wants-8080", containers=port)], existing=[node])
    assert not plan.existing and len(plan.node_claims) == 1
    other = pod(name="other-port", containers=[{**port[0], "ports": [{"containerPort": 80, "hostPort": 8081}]}])
    plan = solve([pool()], [other], existing=[node])
    assert list(plan.existing) == ["node-a"]
    exporter = pod(name="exporter", containers=port, tolerations=[{"operator": "Exists"}])
    plan = solve([pool()], [pod(name="clash", containers=port)], daemonsets=[exporter])
    assert not plan.node_claims and "host port 8080/TCP" in plan.unschedulable["default/clash"]


def test_nodepool_limit_on_nodes():
    """Karpenter: `limits.nodes` caps how many nodes a NodePool has, counting the nodes it already has."""
    capped = pool(limits={"nodes": 3})
    plan = solve([capped], [pod(cpu="1", name=f"n{i}", topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "one-per-node"}}}], labels={"app": "one-per-node"})
        for i in range(5)])
    assert len(plan.node_claims) == 3 and len(plan.unschedulable) == 2
    assert all("limit of nodes" in why for why in plan.unschedulable.values())
    capped.used = {"nodes": 3}
    plan = solve([capped], [pod(cpu="1", name="late")])
    assert not plan.node_claims and "limits exceeded" in plan.unschedulable["default/late"]


def test_a_term_without_label_selector_matches_no_pods():
    """Kubernetes reads a null labelSelector as matching nothing (an empty one matches everything): a spread
    constraint without one never limits placement, anti-affinity without one keeps no pod away, and required
    affinity without one cannot be met."""
    spread = [pod(cpu="100m", labels={"app": "a"}, topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule"}]) for _ in range(4)]
    plan = solve([pool()], spread)
    assert len(plan.node_claims) == 1
    anti = [pod(cpu="100m", labels={"app": "a"}, affinity={"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": HOST}]}}) for _ in range(3)]
    assert len(solve([pool()], anti).node_claims) == 1
    everyone = [pod(cpu="100m", labels={"app": "a"}, affinity={"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": HOST, "labelSelector": {}}]}})
        for _ in range(3)]
    assert len(solve([pool()], everyone).node_claims) == 3
    lonely = pod(cpu="100m", name="lonely", labels={"app": "a"}, affinity={"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": ZONE}]}})
    plan = solve([pool()], [lonely])
    assert not plan.node_claims and "no pod matches" in plan.unschedulable["default/lonely"]


def test_preferred_node_affinity_never_narrows_spread_domains():
    """Karpenter computes spread domains and their minimum from the pod's required node affinity: a zone preference
    is followed only while the spread allows it, then relaxed, and DoNotSchedule skew holds."""
    sel = {"matchLabels": {"app": "web"}}
    pods = [pod(labels={"app": "web"}, topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}],
        affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "preference": {
            "matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-1"]}]}}]}})
        for _ in range(6)]
    plan = solve([pool()], pods)
    zones = sorted(c.zone for c in plan.node_claims for _ in c.pods)
    assert zones == ["test-zone-1"] * 2 + ["test-zone-2"] * 2 + ["test-zone-3"] * 2


def test_min_domains_caps_bulk_placement():
    """Kubernetes/Karpenter: with fewer eligible domains than minDomains the global minimum is 0, so no domain may
    hold more than maxSkew matching pods: this holds for every pod of a class, not only the first."""
    sel = {"matchLabels": {"app": "web"}}
    pods = [pod(cpu="100m", labels={"app": "web"}, topologySpreadConstraints=[
        {"maxSkew": 2, "minDomains": 5, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": sel}]) for _ in range(8)]
    plan = solve([pool()], pods)
    zones = sorted(c.zone for c in plan.node_claims for _ in c.pods)
    assert zones == ["test-zone-1"] * 2 + ["test-zone-2"] * 2 + ["test-zone-3"] * 2
    assert len(plan.unschedulable) == 2 and all("maxSkew 2" in why for why in plan.unschedulable.values())


def test_zonal_topology_spread_balances_zones():
    sel = {"matchLabels": {"app": "web"}}
    pods = [pod(labels={"app": "web"}, topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}])
        for _ in range(6)]
    plan = solve([pool()], pods)
    zones = [claim_of(plan, p).zone for p in pods]
    assert sorted(zones.count(z) for z in set(zones)) == [2, 2, 2]


def test_hostname_spread_and_anti_affinity_put_one_per_node():
    sel = {"matchLabels": {"app": "a"}}
    spread = [pod(labels={"app": "a"}, topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}])
        for _ in range(3)]
    plan = solve([pool()], spread)
    assert len({claim_of(plan, p).hostname for p in spread}) == 3
    anti = [pod(labels={"app": "b"}, affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "b"}}}]}}) for _ in range(4)]
    plan = solve([pool()], anti)
    assert len({claim_of(plan, p).hostname for p in anti}) == 4


def test_zonal_self_affinity_keeps_pods_together():
    pods = [pod(labels={"app": "db"}, affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": "db"}}}]}}) for _ in range(30)]
    plan = solve([pool()], pods)
    assert len({claim_of(plan, p).zone for p in pods}) == 1


def test_affinity_to_missing_pods_is_unschedulable():
    p = pod(name="lonely", affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": "nowhere"}}}]}})
    plan = solve([pool()], [p])
    assert "no pod matches" in plan.unschedulable["default/lonely"]


def test_host_ports_conflict():
    ports = [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}],
              "resources": {"requests": {"cpu": "100m"}}}]
    pods = [pod(containers=ports) for _ in range(3)]
    plan = solve([pool()], pods)
    assert len({claim_of(plan, p).hostname for p in pods}) == 3


def test_preferences_are_relaxed_when_they_cannot_be_met():
    p = pod(name="pref", affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["mars"]}]}}]}})
    plan = solve([pool()], [p])
    assert not plan.unschedulable
    met = pod(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [{"key": ZONE, "operator": "In",
                                                            "values": ["test-zone-2"]}]}}]}})
    plan = solve([pool()], [met])
    assert claim_of(plan, met).zone == "test-zone-2"


def test_effective_requests_count_init_containers_and_sidecars():
    p = pod(containers=[{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
            initContainers=[{"name": "i", "resources": {"requests": {"cpu": "3"}}},
                            {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}],
            overhead={"cpu": "100m"})
    assert p.requests["cpu"] == 3000 + 100  # the 3-cpu init step dominates 1 + 0.5 sidecar


def test_bad_pod_fields_are_named():
    with pytest.raises(PodError, match=r"spec.containers\[0\].resources.requests.cpu: 'abc' is not a quantity"):
        pod(containers=[{"name": "c", "resources": {"requests": {"cpu": "abc"}}}])


@pytest.mark.parametrize("seed", range(5))
def test_lower_bound_never_exceeds_cost(seed):
    rnd = random.Random(seed)
    pods = [pod(cpu=f"{rnd.choice([100, 500, 1500])}m", mem=f"{rnd.choice([128, 1024, 4096])}Mi")
            for _ in range(rnd.randint(1, 60))]
    plan = solve([pool(types=32)], pods)
    assert not plan.unschedulable
    assert 0 < plan.lower_bound_per_hour <= plan.cost_per_hour + 1e-9


def test_min_values_keeps_enough_instance_types():
    # types fake-it-0..15 have instance-cpu 1..16: with minValues 5 on instance-cpu, a claim must keep 5 sizes open,
    # so it cannot grow to the largest type and 14 one-cpu pods need more than one node
    p = pool(reqs=[{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Exists", "minValues": 5}])
    plan = solve([p], [pod(cpu="1", mem="100Mi") for _ in range(14)])
    assert not plan.unschedulable
    for c in plan.node_claims:
        assert len({it.labels["karpenter.k8s.aws/instance-cpu"] for it in c.instance_type_options}) >= 5
    assert len(plan.node_claims) > 1
    too_many = pool(reqs=[{"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["1", "2"],
                           "minValues": 2}])
    plan = solve([too_many], [pod(cpu="1500m", name="needs-2")])
    assert "minValues" in plan.unschedulable["default/needs-2"]


def test_capacity_type_spread_uses_both_capacity_types():
    sel = {"matchLabels": {"app": "ct"}}
    pods = [pod(labels={"app": "ct"}, topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": CT, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}])
        for _ in range(4)]
    plan = solve([pool()], pods)
    cts = [claim_of(plan, p).capacity_type for p in pods]
    assert sorted(cts) == ["on-demand", "on-demand", "spot", "spot"]


def test_nodeclaim_names_are_deterministic_per_solve():
    """Names count from 1 within a solve: the same inputs give the same names, however many solves ran before."""
    s = Scheduler([pool("a", weight=1), pool("b", labels={"team": "b"})])
    pods = [pod(cpu="3") for _ in range(4)] + [pod(cpu="1", nodeSelector={"team": "b"})]
    first = [c.hostname for c in s.solve(pods).node_claims]
    again = [c.hostname for c in s.solve(pods).node_claims]
    fresh = [c.hostname for c in Scheduler([pool("a", weight=1), pool("b", labels={"team": "b"})]).solve(
        pods).node_claims]
    assert first == again == fresh
    assert first[0] == "a-00001" and len(set(first)) == len(first)
    assert any(n.startswith("b-") for n in first)


def test_a_solve_without_the_lower_bound_does_not_import_scipy():
    """The controller solves on every batch: the LP bound (and scipy) is only for simulate and benchmarks."""
    code = (
        "import sys\n"
        "from controller.catalog.synthetic import benchmark_instance_types\n"
        "from controller.provisioning import inputs\n"
        "from controller.scheduling.scheduler import Scheduler\n"
        "pool = inputs.node_pool({'metadata': {'name': 'p'}, 'spec': {'template': {'spec': {}}}},"
        " benchmark_instance_types(8), {})\n"
        "pod = inputs.scheduling_pod({'metadata': {'name': 'x'}, 'spec': {'containers': [{'name': 'c',"
        " 'resources': {'requests': {'cpu': '1'}}}]}})\n"
        "plan = Scheduler([pool]).solve([pod])\n"
        "assert plan.node_claims and plan.lower_bound_per_hour == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))\n"
        "Scheduler([pool]).solve([pod], lower_bound=True)\n"
        "print('scipy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout.split("\n")
    assert out[:2] == ["[]", "True"]


def test_the_reasons_of_the_pools_a_pod_selects_come_first():
    # a FailedScheduling event is bounded: the selected pool's reason must not be cut off behind the others'
    pools = [pool("a", weight=30), pool("b", weight=20), pool("c", weight=10)]
    big = pod(cpu="1000", name="big", nodeSelector={"karpenter.sh/nodepool": "b"})
    plan = solve(pools, [big])
    reason = plan.unschedulable["default/big"]
    assert reason.startswith('nodepool "b": no instance type has room'), reason
    assert reason.index('nodepool "a"') < reason.index('nodepool "c"')  # the rest keep the weight order


def test_prefer_no_schedule_relaxation_looks_at_existing_nodes_again():
    # every place is PreferNoSchedule-tainted: only the last relaxation (tolerate PreferNoSchedule) places the pod,
    # and then, as always, existing capacity comes before a new NodeClaim
    soft = Taint("batch", "true", "PreferNoSchedule")
    node = ExistingNode("node-a", {}, [soft], {"cpu": 4000, "memory": 8 * 2**30, "pods": 110})
    plan = solve([pool(taints=[soft])], [pod(name="late")], existing=[node])
    assert [p.name for p in plan.existing.get("node-a", [])] == ["late"], plan.node_claims
    assert not plan.node_claims and not plan.unschedulable
