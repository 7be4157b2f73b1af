"""The scheduler's fast paths (vector tests, caches, the benchmark's timing) against their plain definitions, and the
benchmark's plans pinned: an optimisation must not move a single pod."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from controller.catalog.synthetic import benchmark_instance_types
from controller.scheduling.instancetypes import column_max, column_min, fit_count, holds
from controller.scheduling.pod import pod_from_dict
from controller.scheduling.requirements import Requirements
from controller.scheduling.scheduler import Plan, Scheduler
from controller.scheduling.types import SchedNodePool

ROOT = Path(__file__).resolve().parents[2]


def _benchmark() -> ModuleType:
    """benchmarks/scheduling.py as a module (the benchmarks directory is not a package)."""
    spec = importlib.util.spec_from_file_location("scheduling_benchmark", ROOT / "benchmarks" / "scheduling.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def _pool(types: int = 400) -> SchedNodePool:
    return SchedNodePool("default", 0, Requirements(), [], [], {}, None, {}, benchmark_instance_types(types))


def _pod(name: str, cpu: str, mem: str = "100Mi") -> Any:
    return pod_from_dict({"metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
                          "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu,
                                                                                           "memory": mem}}}]}})


def _fingerprint(plan: Plan) -> tuple[int, float, list[tuple[int, int]], str]:
    """Node count, cost, the per-node pod counts (as sorted (count, nodes) pairs) and a hash of every NodeClaim's
    name, launch choice, options and pods in order."""
    h = hashlib.sha256()
    for c in plan.node_claims:
        it = c.instance_type.name if c.instance_type else None
        options = ",".join(sorted(t.name for t in c.instance_type_options))
        pods = ",".join(p.name for p in c.pods)
        h.update(f"{c.hostname}|{it}|{c.zone}|{c.capacity_type}|{c.price_per_hour}|{pods}|{options}\n".encode())
    counts = sorted(Counter(len(c.pods) for c in plan.node_claims).items())
    return len(plan.node_claims), round(plan.cost_per_hour, 6), counts, h.hexdigest()


@pytest.mark.parametrize("seed", range(5))
def test_column_helpers_match_their_numpy_definitions(seed: int) -> None:
    rng = np.random.default_rng(seed)
    free = rng.integers(-50, 5000, size=(97, 4))
    for req in (rng.integers(1, 300, size=4), np.array([0, 7, 0, 3]), np.zeros(4, dtype=np.int64)):
        nz = req > 0
        expected = (np.full(len(free), 1 << 30) if not nz.any()
                    else np.maximum(np.floor_divide(free[:, nz], req[nz]).min(axis=1), 0))
        assert fit_count(free, req).tolist() == expected.tolist()
        assert holds(free, req).tolist() == (free >= req[None, :]).all(axis=1).tolist()
    assert column_max(free).tolist() == free.max(axis=0).tolist()
    assert column_min(free).tolist() == free.min(axis=0).tolist()
    assert fit_count(free[0], np.array([5, 5, 5, 5])).tolist() == [max(0, int((free[0] // 5).min()))]


def test_a_nodeclaim_keeps_only_the_types_that_take_a_second_class():
    """1.5 cpu, then 1.4 cpu of another class: the 2-vCPU type (1.9 allocatable) drops out, 3 and 4 stay."""
    plan = Scheduler([_pool(4)]).solve([_pod("a", "1500m"), _pod("b", "1400m")])
    assert [[p.name for p in c.pods] for c in plan.node_claims] == [["a", "b"]]
    c = plan.node_claims[0]
    assert c.instance_type is not None and c.instance_type.name == "fake-it-2"
    assert [t.name for t in c.instance_type_options] == ["fake-it-2", "fake-it-3"]


def test_a_nodeclaim_keeps_every_type_when_all_still_take_the_pods():
    """1.5 cpu, then 0.2 cpu: every type that held the first pod holds both (the smallest-room shortcut)."""
    plan = Scheduler([_pool(4)]).solve([_pod("a", "1500m"), _pod("b", "200m")])
    assert [[p.name for p in c.pods] for c in plan.node_claims] == [["a", "b"]]
    c = plan.node_claims[0]
    assert c.instance_type is not None and c.instance_type.name == "fake-it-1"
    assert [t.name for t in c.instance_type_options] == ["fake-it-1", "fake-it-2", "fake-it-3"]


def test_a_zone_narrowed_nodeclaim_turns_away_another_zone():
    """A NodeClaim narrowed to one zone by its second pod keeps a third pod that needs another zone off it."""
    a = _pod("a", "3")
    b = pod_from_dict({"metadata": {"name": "b", "namespace": "default"}, "spec": {
        "nodeSelector": {"topology.kubernetes.io/zone": "test-zone-2"},
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}})
    c = pod_from_dict({"metadata": {"name": "c", "namespace": "default"}, "spec": {
        "nodeSelector": {"topology.kubernetes.io/zone": "test-zone-1"},
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}})
    plan = Scheduler([_pool(16)]).solve([a, b, c])
    assert [([p.name for p in n.pods], n.zone) for n in plan.node_claims] == [(["a", "b"], "test-zone-2"),
                                                                             (["c"], "test-zone-1")]


def test_a_nodeclaim_keeps_every_narrowing_its_pods_made():
    """Zones narrowed by one pod, the capacity type by the next, then a pod of another class asking for the same zones
    as the first: the NodeClaim stays on-demand (what room() remembered for those zones predates the capacity type)."""

    def selecting(name: str, cpu: str, selector: dict[str, Any] | None = None, expressions: list[Any] | None = None
                  ) -> Any:
        spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
        if selector:
            spec["nodeSelector"] = selector
        if expressions:
            spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}
        return pod_from_dict({"metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
                              "spec": spec})

    zones = [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-1", "test-zone-2"]}]
    # small pods: every type keeps taking them, so only the requirements change between the adds
    pods = [selecting("a", "400m"), selecting("b", "300m", expressions=zones),
            selecting("c", "200m", selector={"karpenter.sh/capacity-type": "on-demand"}),
            selecting("d", "100m", expressions=zones)]
    plan = Scheduler([_pool(16)]).solve(pods)
    assert [[p.name for p in c.pods] for c in plan.node_claims] == [["a", "b", "c", "d"]]
    c = plan.node_claims[0]
    assert (c.capacity_type, c.zone) == ("on-demand", "test-zone-1")
    assert c.requirements.get("karpenter.sh/capacity-type") is not None


def test_a_nodeclaim_narrowed_to_one_team_turns_away_the_other():
    """A pool for teams a and b (a label no instance type carries): a team-b pod kept off the first NodeClaim only by
    its first pod's anti-affinity is judged compatible with it, a team-a pod then narrows it to team a, and a small
    team-b pod must go elsewhere, whatever the NodeClaim answered before."""

    def team(name: str, cpu: str, value: str | None, away_from: str | None = None) -> Any:
        spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
        if value:
            spec["nodeSelector"] = {"team": value}
        if away_from:
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": away_from}}}]}}
        return pod_from_dict({"metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
                              "spec": spec})

    teams = Requirements.from_node_selector_requirements([{"key": "team", "operator": "In", "values": ["a", "b"]}])
    pool = SchedNodePool("default", 0, teams, [], [], {}, None, {}, benchmark_instance_types(16))
    plan = Scheduler([pool]).solve([team("a", "8", None, away_from="y"), team("y", "2", "b"), team("x", "1", "a"),
                                    team("y2", "500m", "b")])
    assert [[p.name for p in c.pods] for c in plan.node_claims] == [["a", "x"], ["y", "y2"]]
    assert [c.requirements.get("team") for c in plan.node_claims] == [
        Requirements.from_labels({"team": "a"}).get("team"), Requirements.from_labels({"team": "b"}).get("team")]


def _anti(name: str, app: str, away_from: str, cpu: str = "1") -> Any:
    return pod_from_dict({"metadata": {"name": name, "namespace": "default", "labels": {"app": app}}, "spec": {
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": away_from}}}]}},
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}})


def test_self_anti_affine_pods_open_one_nodeclaim_each_up_to_the_pool_limit():
    """Five pods that repel each other per node, a pool capped at three nodes: three NodeClaims, one pod each,
    opened in turn, and two pods left with the limit as the reason."""
    capped = SchedNodePool("default", 0, Requirements(), [], [], {}, {"nodes": 3}, {}, benchmark_instance_types(16))
    plan = Scheduler([capped]).solve([_anti(f"s{i}", "solo", "solo") for i in range(5)])
    assert [[p.name for p in c.pods] for c in plan.node_claims] == [["s0"], ["s1"], ["s2"]]
    assert [c.hostname for c in plan.node_claims] == ["default-00001", "default-00002", "default-00003"]
    assert sorted(plan.unschedulable) == ["default/s3", "default/s4"]
    assert all("limit of nodes" in why for why in plan.unschedulable.values())


def test_self_anti_affine_pods_spread_over_zones_take_turns():
    """One pod per node and a zone spread: each new NodeClaim goes to the zone with the fewest, not all to the
    first zone chosen."""
    pods = []
    for i in range(3):
        p = _anti(f"z{i}", "zoned", "zoned")
        pods.append(pod_from_dict({"metadata": {"name": p.name, "namespace": "default", "labels": {"app": "zoned"}},
                                   "spec": {"affinity": {"podAntiAffinity": {
                                       "requiredDuringSchedulingIgnoredDuringExecution": [{
                                           "topologyKey": "kubernetes.io/hostname",
                                           "labelSelector": {"matchLabels": {"app": "zoned"}}}]}},
                                       "topologySpreadConstraints": [{
                                           "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                           "whenUnsatisfiable": "DoNotSchedule",
                                           "labelSelector": {"matchLabels": {"app": "zoned"}}}],
                                       "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}))
    plan = Scheduler([_pool(16)]).solve(pods)
    assert [([p.name for p in c.pods], c.zone) for c in plan.node_claims] == [
        (["z0"], "test-zone-1"), (["z1"], "test-zone-2"), (["z2"], "test-zone-3")]


def test_pods_repelling_another_app_share_a_nodeclaim():
    """Hostname anti-affinity to another app does not keep a class's own pods apart: one NodeClaim for all three,
    and the app they repel gets its own."""
    plan = Scheduler([_pool(16)]).solve([_anti(f"w{i}", "web", "db") for i in range(3)] + [_anti("d", "db", "none",
                                                                                                    cpu="500m")])
    assert [[p.name for p in c.pods] for c in plan.node_claims] == [["w0", "w1", "w2"], ["d"]]


def test_the_lower_bound_asked_apart_is_the_solves():
    bench = _benchmark()
    pods = [pod_from_dict(d) for d in bench.make_pods(300, "diverse")]
    together = Scheduler([_pool()]).solve(pods, lower_bound=True)
    scheduler = Scheduler([_pool()])
    plan = scheduler.solve(pods)
    assert plan.lower_bound_per_hour == 0
    assert scheduler.lower_bound(plan) == together.lower_bound_per_hour > 0


def test_the_benchmark_times_the_solve_apart_from_the_lower_bound(monkeypatch: pytest.MonkeyPatch):
    """A lower bound that takes 0.5 s of sleep shows in lowerBoundSeconds (not in its CPU seconds), never in the
    solve's seconds."""
    bench = _benchmark()
    real = Scheduler.lower_bound

    def slow(self: Scheduler, plan: Plan) -> float:
        time.sleep(0.5)
        return real(self, plan)

    monkeypatch.setattr(Scheduler, "lower_bound", slow)
    r = bench.run_once(200, "diverse")
    assert r["lowerBoundSeconds"] >= 0.5 > r["seconds"]
    assert r["lowerBoundCpuSeconds"] < 0.25
    assert 0 < r["lowerBoundPerHour"] <= r["costPerHour"] and r["gap"] == pytest.approx(
        (r["costPerHour"] - r["lowerBoundPerHour"]) / r["lowerBoundPerHour"], abs=1e-3)
    assert r["nodes"] == 40 and r["unschedulable"] == 0 and r["cpuSeconds"] > 0


# The plans of the benchmark's inputs as the scheduler made them before its fast paths (at a128778): node count, cost,
# (pods per node, nodes) and a hash of every NodeClaim. A change meant to move pods updates these on purpose.
PINNED = {
    (1000, "diverse"): (200, 238.8, [(2, 50), (3, 30), (4, 43), (5, 57), (6, 9), (7, 5), (11, 3), (28, 2), (175, 1)],
                        "eb65ea6a7c6b3083f2bca8f6983088701d2ba58d9507fcacca99fbab4ec1af48"),
    (1000, "plain"): (2, 204.6, [(456, 1), (544, 1)],
                      "db198e6eb97d0f005caa69b4c8b71259df9f7c66b8eb14dd8cf712065abb467d"),
}


@pytest.mark.parametrize("n,mix", list(PINNED))
def test_the_benchmark_plans_are_pinned(n: int, mix: str):
    bench = _benchmark()
    plan = Scheduler([_pool()]).solve([pod_from_dict(d) for d in bench.make_pods(n, mix)])
    assert not plan.unschedulable
    nodes, cost, counts, digest = _fingerprint(plan)
    assert (nodes, cost, counts, digest) == PINNED[(n, mix)]
