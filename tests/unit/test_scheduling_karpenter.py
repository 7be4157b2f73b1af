"""Karpenter's scheduling scenarios (pkg/controllers/provisioning/scheduling: topology, DaemonSet overhead,
preferences), each stated in Karpenter's terms and run against karpy's scheduler on Karpenter's benchmark catalog:
type fake-it-i has i+1 vCPU (less 100m kube-reserved) and 2(i+1) GiB; spot in test-zone-1/2, on-demand in all three.
"""

from __future__ import annotations

import dataclasses

from controller.api import labels as L
from controller.catalog.synthetic import benchmark_instance_types
from controller.scheduling.preferences import relaxed
from controller.scheduling.scheduler import Scheduler
from controller.scheduling.types import ExistingNode, SchedNodePool, Taint
from tests.unit.test_scheduling import CT, HOST, ZONE, claim_of, pod, pool, solve

S2 = {"security": "s2"}
LARGE_TYPES = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": L.INSTANCE_CPU, "operator": "Gt", "values": ["4"]}]}]}}}
NODE_ALLOC = {"cpu": 16000, "memory": 64 * 2**30, "pods": 110}


def anti(key: str, labels: dict[str, str] = S2) -> dict[str, object]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": key, "labelSelector": {"matchLabels": labels}}]}}


def affinity(key: str, labels: dict[str, str] = S2) -> dict[str, object]:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": key, "labelSelector": {"matchLabels": labels}}]}}


def spread(key: str, skew: int = 1, labels: dict[str, str] | None = None, **extra: object) -> list[dict[str, object]]:
    return [{"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": labels or {"app": "web"}}, **extra}]


def node(name: str, labels: dict[str, str], pods=(), taints=(), alloc=None) -> ExistingNode:
    return ExistingNode(name, {HOST: name, **labels}, list(taints), dict(alloc or NODE_ALLOC), list(pods))


def placed_zones(plan, pods) -> list[str]:
    return sorted(claim_of(plan, p).zone for p in pods if p.key not in plan.unschedulable)


def two_arch_pool(name: str = "default") -> SchedNodePool:
    """The benchmark catalog twice: amd64 types and arm64 copies (the arm64 ones a little cheaper)."""
    types = benchmark_instance_types(16)
    arm = [dataclasses.replace(it, name=it.name + "-arm", labels={**it.labels, L.ARCH: "arm64",
                                                                  L.INSTANCE_TYPE: it.name + "-arm"},
                               offerings=[dataclasses.replace(o, price=o.price * 0.9) for o in it.offerings])
           for it in types]
    p = pool(name)
    p.instance_types = types + arm
    return p


# ---- DaemonSet overhead -------------------------------------------------------------------------------------------
def test_daemonset_counts_only_on_instance_types_its_pod_spec_can_land_on():
    """Karpenter groups instance types by the DaemonSets that can run on them: a DaemonSet whose node affinity
    selects large types adds no overhead to small ones, so a small pod still gets the smallest type."""
    large_only = pod(cpu="2", mem="256Mi", affinity=LARGE_TYPES)
    plan = solve([pool()], [pod(cpu="1", mem="1Gi")], daemonsets=[large_only])
    assert plan.node_claims[0].instance_type.name == "fake-it-1"  # 2 vCPU: no DaemonSet there
    everywhere = pod(cpu="2", mem="256Mi")
    plan = solve([pool()], [pod(cpu="1", mem="1Gi")], daemonsets=[everywhere])
    assert plan.node_claims[0].instance_type.name == "fake-it-3"  # 1 + 2 + 0.1 reserved needs 4 vCPU
    # a 4-cpu pod: on types with more than 4 vCPU the DaemonSet's 2 cpu come on top
    plan = solve([pool()], [pod(cpu="4", mem="1Gi")], daemonsets=[large_only])
    assert plan.node_claims[0].instance_type.name == "fake-it-6"  # 7 vCPU: 6.9 - 2 >= 4


def test_daemonset_tolerates_prefer_no_schedule_and_startup_taints():
    """isDaemonPodCompatible adds a PreferNoSchedule toleration to the DaemonSet pod, and startup taints are not
    considered: a DaemonSet without tolerations still runs on such a pool's nodes."""
    ds = pod(cpu="500m", mem="256Mi")
    soft = pool(taints=[Taint("spot-ish", "true", "PreferNoSchedule")])
    soft.startup_taints = [Taint("node.cilium.io/agent-not-ready", "true", "NoExecute")]
    plan = solve([soft], [pod(cpu="500m", tolerations=[{"operator": "Exists"}])], daemonsets=[ds])
    assert plan.node_claims[0].instance_type.name == "fake-it-1"  # 0.5 + 0.5 + 0.1 > 1 vCPU


def test_daemonset_host_ports_only_on_its_instance_type_group():
    """A DaemonSet's host ports are held on the types it runs on: a pod asking for the same port is kept to the
    types the DaemonSet does not run on, and is unschedulable where it runs on all of them."""
    port = [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 9100}],
             "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]
    exporter = pod(containers=port, affinity=LARGE_TYPES)
    wants = pod(name="wants-9100", containers=port)
    plan = solve([pool()], [wants], daemonsets=[exporter])
    assert not plan.unschedulable
    assert {int(it.labels[L.INSTANCE_CPU]) for it in plan.node_claims[0].instance_type_options} <= {1, 2, 3, 4}
    everywhere = pod(containers=port)
    plan = solve([pool()], [pod(name="clash", containers=port)], daemonsets=[everywhere])
    assert "host port 9100/TCP" in plan.unschedulable["default/clash"]


# ---- pod anti-affinity across zones -------------------------------------------------------------------------------
def _zone_pods(**extra):
    return [pod(cpu="2", name=f"zone{i}", nodeSelector={ZONE: f"test-zone-{i}"}, **extra) for i in (1, 2, 3)]


def test_should_not_violate_pod_anti_affinity_on_zone():
    """The three larger zone-pinned pods go first (one per zone); the pod that avoids them has no zone left."""
    zoned = [pod(cpu="2", name=f"zone{i}", labels=S2, nodeSelector={ZONE: f"test-zone-{i}"}) for i in (1, 2, 3)]
    avoider = pod(name="avoider", affinity=anti(ZONE))
    plan = solve([pool()], [*zoned, avoider])
    assert placed_zones(plan, zoned) == ["test-zone-1", "test-zone-2", "test-zone-3"]
    assert "pod anti-affinity" in plan.unschedulable["default/avoider"]


def test_should_not_violate_pod_anti_affinity_on_zone_other_schedules_first():
    """The pod to avoid lands on a NodeClaim whose zone is not decided: it may be in any zone, so the pod with
    zonal anti-affinity to it cannot go anywhere in this batch."""
    target = pod(cpu="2", name="target", labels=S2)
    avoider = pod(name="avoider", affinity=anti(ZONE))
    plan = solve([pool()], [target, avoider])
    assert "default/target" not in plan.unschedulable
    assert "default/avoider" in plan.unschedulable


def test_should_not_violate_pod_anti_affinity_on_zone_inverse():
    """Pods with anti-affinity to a label, one per zone, keep a pod with that label out of every zone."""
    zoned = _zone_pods(affinity=anti(ZONE))
    labelled = pod(name="labelled", labels=S2)
    plan = solve([pool()], [*zoned, labelled])
    assert placed_zones(plan, zoned) == ["test-zone-1", "test-zone-2", "test-zone-3"]
    assert "default/labelled" in plan.unschedulable


def test_should_violate_preferred_pod_anti_affinity_on_zone_inverse():
    """Preferred anti-affinity of other pods is not tracked in reverse: the labelled pod schedules."""
    pref = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm": {
        "topologyKey": ZONE, "labelSelector": {"matchLabels": S2}}}]}}
    zoned = _zone_pods(affinity=pref)
    labelled = pod(name="labelled", labels=S2)
    plan = solve([pool()], [*zoned, labelled])
    assert not plan.unschedulable


def test_should_not_violate_pod_anti_affinity_on_zone_inverse_with_existing_nodes():
    """Pods bound to existing nodes, one per zone, whose required anti-affinity selects the new pod."""
    nodes = [node(f"n{i}", {ZONE: f"test-zone-{i}"}, pods=[pod(cpu="2", name=f"bound{i}", affinity=anti(ZONE))])
             for i in (1, 2, 3)]
    labelled = pod(name="labelled", labels=S2)
    plan = solve([pool()], [labelled], existing=nodes)
    assert "default/labelled" in plan.unschedulable and not plan.node_claims and not plan.existing
    # with one zone free of them, the pod goes there (on a new node or an existing one in that zone)
    plan = solve([pool()], [labelled], existing=nodes[:2])
    assert claim_of(plan, labelled).zone == "test-zone-3"


def test_should_not_violate_pod_anti_affinity_on_zone_schroedinger():
    """First batch: the anti-affine pod's NodeClaim could be in any zone, so the labelled pod waits. Once that node
    exists in a zone, the next batch puts the labelled pod in another zone."""
    anywhere = pod(cpu="2", name="anywhere", affinity=anti(ZONE))
    labelled = pod(name="labelled", labels=S2)
    plan = solve([pool()], [anywhere, labelled])
    assert "default/anywhere" not in plan.unschedulable and "default/labelled" in plan.unschedulable
    launched = node("n1", {ZONE: "test-zone-2"}, pods=[anywhere], alloc={"cpu": 2000, "memory": 2**30, "pods": 10})
    plan = solve([pool()], [labelled], existing=[launched])
    assert claim_of(plan, labelled).zone != "test-zone-2"


def test_should_support_pod_anti_affinity_with_a_zone_topology():
    """Late committal: with no other constraint, one self-anti-affine pod schedules per batch (its NodeClaim may
    be in any zone); as nodes launch, the next batches fill the other zones, then nothing more fits."""
    existing: list[ExistingNode] = []
    for expected in (1, 2, 3, 3):
        pods = [pod(labels=S2, name=f"b{expected}-{i}", affinity=anti(ZONE)) for i in range(3)]
        plan = solve([pool()], pods, existing=existing)
        new = [c for c in plan.node_claims]
        assert len(new) <= 1
        for c in new:
            existing.append(node(f"n{len(existing)}", {ZONE: sorted({"test-zone-1", "test-zone-2", "test-zone-3"}
                                                                      - {n.labels[ZONE] for n in existing})[0]},
                                 pods=c.pods, alloc={"cpu": 1000, "memory": 2**30, "pods": 10}))
        assert len(existing) == expected


def test_should_not_violate_pod_anti_affinity_on_arch():
    """Anti-affinity on any label: the second pod goes to a node with the other architecture."""
    tsc = spread(HOST, labels=S2)
    first = pod(cpu="2", name="first", labels=S2, topologySpreadConstraints=tsc, nodeSelector={L.ARCH: "arm64"})
    second = pod(cpu="1", name="second", labels=S2, topologySpreadConstraints=tsc, affinity=anti(L.ARCH))
    plan = solve([two_arch_pool()], [first, second])
    assert not plan.unschedulable
    a, b = claim_of(plan, first), claim_of(plan, second)
    assert a.instance_type.labels[L.ARCH] == "arm64" and b.instance_type.labels[L.ARCH] == "amd64"


# ---- pod affinity -------------------------------------------------------------------------------------------------
def test_should_respect_pod_affinity_hostname_when_the_target_is_placed_later():
    """The affine pod is larger, so it is tried first, before its target exists; it is retried after the target
    is placed (Karpenter's queue retries while it makes progress) and lands on the target's node."""
    target = pod(cpu="100m", name="target", labels=S2)
    follower = pod(cpu="2", name="follower", affinity=affinity(HOST))
    spreaders = [pod(cpu="100m", labels={"app": "web"}, topologySpreadConstraints=spread(HOST)) for _ in range(5)]
    plan = solve([pool()], [follower, *spreaders, target])
    assert not plan.unschedulable
    assert claim_of(plan, follower) is claim_of(plan, target)


def test_hostname_affinity_cannot_open_a_node_without_its_target():
    """A new NodeClaim holds no pod yet: a pod with hostname affinity to pods that exist elsewhere (on a full node)
    cannot open one, and a pod that is not self-affine never bootstraps its group."""
    full = node("full", {ZONE: "test-zone-1"}, pods=[pod(cpu="1", name="target", labels=S2)],
                alloc={"cpu": 1000, "memory": 2**30, "pods": 10})
    follower = pod(name="follower", affinity=affinity(HOST))
    plan = solve([pool()], [follower], existing=[full])
    assert "no node with a matching pod" in plan.unschedulable["default/follower"] and not plan.node_claims
    self_affine = [pod(name=f"s{i}", labels=S2, affinity=affinity(HOST)) for i in range(2)]
    plan = solve([pool()], self_affine, existing=[full])
    assert set(plan.unschedulable) == {"default/s0", "default/s1"}


def test_should_respect_self_pod_affinity_hostname():
    pods = [pod(labels=S2, affinity=affinity(HOST)) for _ in range(3)]
    plan = solve([pool()], pods)
    assert not plan.unschedulable and len(plan.node_claims) == 1


def test_self_pod_affinity_bootstraps_in_a_zone_it_can_reach():
    """The first self-affine pod picks a zone it can actually be launched in: spot-only pods cannot go to
    test-zone-3 (no spot there), whatever the zone order."""
    pods = [pod(labels=S2, nodeSelector={CT: "spot"}, affinity=affinity(ZONE),
                tolerations=[{"operator": "Exists"}]) for _ in range(4)]
    only3 = pool(reqs=[{"key": ZONE, "operator": "In", "values": ["test-zone-3", "test-zone-2"]}])
    plan = solve([only3], pods)
    assert not plan.unschedulable and {claim_of(plan, p).zone for p in pods} == {"test-zone-2"}


def test_should_respect_pod_affinity_arch():
    """Affinity on arch follows the target's architecture, while hostname spread puts them on two nodes."""
    tsc = spread(HOST, labels=S2)
    first = pod(cpu="2", name="first", labels=S2, topologySpreadConstraints=tsc, nodeSelector={L.ARCH: "arm64"})
    second = pod(cpu="1", name="second", labels=S2, topologySpreadConstraints=tsc, affinity=affinity(L.ARCH))
    plan = solve([two_arch_pool()], [first, second])
    a, b = claim_of(plan, first), claim_of(plan, second)
    assert a is not b and a.instance_type.labels[L.ARCH] == b.instance_type.labels[L.ARCH] == "arm64"


# ---- topology spread ----------------------------------------------------------------------------------------------
def test_should_schedule_to_the_non_minimum_domain_if_its_all_thats_available():
    """maxSkew 5, one pod each in zones 1 and 2 (existing nodes), a pool that only launches in zone 3: zone 3 takes
    up to 6 and the rest stay pending (Karpenter: skew 1, 1, 6)."""
    nodes = [node(f"n{i}", {ZONE: f"test-zone-{i}"}, pods=[pod(cpu="1100m", labels={"app": "web"})],
                  alloc={"cpu": 1100, "memory": 2**30, "pods": 10}) for i in (1, 2)]
    zone3 = pool(reqs=[{"key": ZONE, "operator": "In", "values": ["test-zone-3"]}])
    pods = [pod(cpu="1100m", labels={"app": "web"}, topologySpreadConstraints=spread(ZONE, skew=5))
            for _ in range(10)]
    plan = solve([zone3], pods, existing=nodes)
    assert placed_zones(plan, pods) == ["test-zone-3"] * 6 and len(plan.unschedulable) == 4


def test_spread_tries_the_next_domain_when_the_minimum_one_cannot_take_the_pod():
    """Spot-only pods with zonal spread: test-zone-3 holds no matching pod but offers no spot, so pods go to the
    other zones while the skew allows (counts stay within maxSkew of the empty zone)."""
    pods = [pod(labels={"app": "web"}, nodeSelector={CT: "spot"}, topologySpreadConstraints=spread(ZONE, skew=2))
            for _ in range(6)]
    plan = solve([pool()], pods)
    assert placed_zones(plan, pods) == ["test-zone-1"] * 2 + ["test-zone-2"] * 2
    assert len(plan.unschedulable) == 2


def test_spread_domains_of_any_key_come_from_nodepools_and_instance_types():
    """A spread over a custom label takes its domains from the NodePools' requirements (not only from domains
    that already hold pods), so pods balance across both pools' values."""
    a = pool("a", reqs=[{"key": "rack", "operator": "In", "values": ["r1"]}])
    b = pool("b", reqs=[{"key": "rack", "operator": "In", "values": ["r2"]}])
    pods = [pod(labels={"app": "web"}, topologySpreadConstraints=spread("rack")) for _ in range(4)]
    plan = solve([a, b], pods)
    racks = sorted(str(c.requirements.get("rack").any_value()) for c in plan.node_claims for _ in c.pods)
    assert racks == ["r1", "r1", "r2", "r2"]
    # instance-type labels too: spread over arch uses both architectures of the catalog
    pods = [pod(labels={"app": "web"}, topologySpreadConstraints=spread(L.ARCH)) for _ in range(4)]
    plan = solve([two_arch_pool()], pods)
    arches = sorted(claim_of(plan, p).instance_type.labels[L.ARCH] for p in pods)
    assert arches == ["amd64", "amd64", "arm64", "arm64"]


def _tainted_label_nodes(extra_labels: dict[str, str] | None = None) -> list[ExistingNode]:
    taint = Taint("taintname", "taintvalue", "NoSchedule")
    return [node(n, {"fake-label": n, **(extra_labels or {})}, taints=[taint], alloc={"cpu": 100})
            for n in ("foo", "bar")]


def test_node_taints_policy_ignore_and_honor():
    """Karpenter's NodeTaintsPolicy scenarios: two tainted nodes carry fake-label foo/bar, the pool sets baz.
    Ignore: three domains, only baz launchable, so one pod. Honor: the tainted nodes are no domains, all five go."""
    baz = pool(labels={"fake-label": "baz"})
    for policy, placed in (("Ignore", 1), ("Honor", 5)):
        pods = [pod(cpu="1", labels={"app": "web"},
                    topologySpreadConstraints=spread("fake-label", nodeTaintsPolicy=policy)) for _ in range(5)]
        plan = solve([baz], pods, existing=_tainted_label_nodes())
        assert 5 - len(plan.unschedulable) == placed, policy


def test_node_affinity_policy_ignore_and_honor():
    """Karpenter's NodeAffinityPolicy scenarios: nodes foo/bar do not match the pod's nodeSelector. Ignore: they
    are domains, so one pod; Honor (the default): they are not, all five go to baz."""
    baz = pool(labels={"fake-label": "baz", "selector": "value"})
    nodes = [node(n, {"fake-label": n, "selector": "mismatch"}, alloc={"cpu": 100}) for n in ("foo", "bar")]
    for policy, placed in (("Ignore", 1), ("Honor", 5)):
        pods = [pod(cpu="1", labels={"app": "web"}, nodeSelector={"selector": "value"},
                    topologySpreadConstraints=spread("fake-label", nodeAffinityPolicy=policy)) for _ in range(5)]
        plan = solve([baz], pods, existing=nodes)
        assert 5 - len(plan.unschedulable) == placed, policy


def test_spread_counts_only_nodes_meeting_the_pods_node_affinity():
    """nodeAffinityPolicy Honor: matching pods on a node the pod's nodeSelector excludes do not count, so they do
    not skew the zones; with Ignore they do."""
    other = node("other", {ZONE: "test-zone-1", "team": "b"}, pods=[pod(labels={"app": "web"}) for _ in range(3)])
    team_a = pool(labels={"team": "a"})
    for policy, zone1 in (("Honor", 1), ("Ignore", 0)):
        pods = [pod(labels={"app": "web"}, nodeSelector={"team": "a"},
                    topologySpreadConstraints=spread(ZONE, nodeAffinityPolicy=policy)) for _ in range(3)]
        plan = solve([team_a], pods, existing=[other])
        assert placed_zones(plan, pods).count("test-zone-1") == zone1, policy


def test_should_support_match_label_keys():
    """matchLabelKeys adds the pod's own value of each key to the selector: two revisions spread independently.
    Keys the pod does not have are ignored."""
    def rev(r: str, n: int):
        return [pod(labels={"app": "web", "rev": r}, topologySpreadConstraints=spread(
            HOST, matchLabelKeys=["rev", "not-a-label"])) for _ in range(n)]
    old, new = rev("1", 2), rev("2", 2)
    plan = solve([pool()], old + new)
    assert len(plan.node_claims) == 2  # one of each revision per node
    for c in plan.node_claims:
        assert sorted(p.labels["rev"] for p in c.pods) == ["1", "2"]


def test_spread_pod_not_selected_by_its_own_selector_is_not_counted():
    """A pod its own constraint does not select adds nothing to the counts, so it never breaks the skew."""
    pods = [pod(cpu="100m", labels={"app": "other"}, topologySpreadConstraints=spread(HOST)) for _ in range(4)]
    plan = solve([pool()], pods)
    assert not plan.unschedulable and len(plan.node_claims) == 1


# ---- preferences --------------------------------------------------------------------------------------------------
def _pref_pod():
    w = {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"x": "y"}}}
    return pod(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-1"]}]},
                    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-2"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [{"key": CT, "operator": "In",
                                                                       "values": ["on-demand"]}]}},
                    {"weight": 50, "preference": {"matchExpressions": [{"key": CT, "operator": "In",
                                                                        "values": ["spot"]}]}}]},
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "podAffinityTerm": w}, {"weight": 9, "podAffinityTerm": w}]},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": w}]}},
        topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway",
                                    "labelSelector": {"matchLabels": {"x": "y"}}}])


def test_preferences_are_relaxed_in_karpenters_order():
    """Karpenter's Relax: first the required OR-terms one by one, then preferred pod affinity terms, then preferred
    pod anti-affinity terms, then preferred node affinity terms (the heaviest is held as a requirement and dropped
    first), then ScheduleAnyway spreads, then a PreferNoSchedule toleration (only if a pool has such a taint)."""
    p = _pref_pod()
    views = []
    level = 0
    while (v := relaxed(p, level, tolerate_prefer_no_schedule=True)) is not None:
        views.append(v)
        level += 1
    zone = [v.strict_terms[0].get(ZONE).any_value() for v in views]
    aff = [len(v.affinity) for v in views]
    anti_ = [len(v.anti_affinity) for v in views]
    ct = [(v.node_terms[0].get(CT).any_value() if v.node_terms[0].get(CT) else None) for v in views]
    soft = [len(v.spread) for v in views]
    tol = [len(v.tolerations) for v in views]
    assert zone == ["test-zone-1"] + ["test-zone-2"] * 8
    assert aff == [2, 2, 1, 0, 0, 0, 0, 0, 0]
    assert views[2].affinity[0] is p.preferred_affinity[0][1]  # the weight-9 term went first, weight 5 stays
    assert anti_ == [1, 1, 1, 1, 0, 0, 0, 0, 0]
    assert ct == ["spot"] * 5 + ["on-demand", None, None, None]
    assert soft == [1] * 7 + [0, 0]
    assert tol == [0] * 8 + [1] and views[-1].tolerations[-1].effect == "PreferNoSchedule"
    assert relaxed(p, 8, tolerate_prefer_no_schedule=False) is None


def test_heaviest_preferred_node_term_is_tried_alone_then_the_next():
    """Karpenter holds only the heaviest preferred node term as a requirement; when it cannot be met the next one
    is tried on its own (terms are not combined)."""
    p = pod(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 90, "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["mars"]}]}},
        {"weight": 10, "preference": {"matchExpressions": [{"key": ZONE, "operator": "In",
                                                            "values": ["test-zone-3"]}]}}]}})
    plan = solve([pool()], [p])
    assert claim_of(plan, p).zone == "test-zone-3"


def test_prefer_no_schedule_taints_are_avoided_until_the_last_relaxation():
    """A PreferNoSchedule taint keeps pods away while an untainted pool can take them, even a lighter one; only
    when nothing else works is it tolerated."""
    soft = pool("soft", weight=100, taints=[Taint("batch", "true", "PreferNoSchedule")])
    plain = pool("plain", weight=1)
    p = pod(name="p")
    plan = solve([soft, plain], [p])
    assert claim_of(plan, p).node_pool == "plain"
    plan = solve([soft], [p])
    assert claim_of(plan, p).node_pool == "soft"


def test_nodepool_whose_nodeclass_is_not_ready_is_not_used():
    """Karpenter skips NodePools whose NodeClass is not Ready; the reason is the pool's."""
    broken = pool("broken", weight=100)
    broken.not_ready_reason = 'nodeclass "default" is not ready'
    fine = pool("fine")
    p = pod(name="p")
    plan = solve([broken, fine], [p])
    assert claim_of(plan, p).node_pool == "fine"
    plan = solve([broken], [p])
    assert 'nodeclass "default" is not ready' in plan.unschedulable["default/p"] and not plan.node_claims


def test_preferred_pod_affinity_is_relaxed_before_required_constraints_give_way():
    """Karpenter: a preferred pod affinity that conflicts with a hostname spread is dropped; all pods schedule,
    one per node (skew 1, 1, 1)."""
    target = pod(name="target", labels=S2)
    pref = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "podAffinityTerm": {
        "topologyKey": HOST, "labelSelector": {"matchLabels": S2}}}]}}
    spreaders = [pod(labels={"app": "web"}, topologySpreadConstraints=spread(HOST), affinity=pref) for _ in range(3)]
    plan = solve([pool()], [*spreaders, target])
    assert not plan.unschedulable
    assert len({claim_of(plan, p).hostname for p in spreaders}) == 3


def test_scheduler_state_is_per_solve():
    """The same Scheduler solves twice with the same result (no state carried over from the first solve)."""
    s = Scheduler([pool()])
    pods = [pod(labels=S2, affinity=anti(ZONE)) for _ in range(2)]
    first, second = s.solve(pods), s.solve(pods)
    assert [c.hostname for c in first.node_claims] == [c.hostname for c in second.node_claims]
    assert first.unschedulable.keys() == second.unschedulable.keys()


# ---- packing and the lower bound ----------------------------------------------------------------------------------
def test_pods_fill_the_room_left_on_the_type_a_node_launches_as():
    """Three self-anti-affine 1.5-cpu pods need three nodes of 2 vCPU (1.9 allocatable); small pods fill the 0.4
    cpu each leaves instead of growing a node to a larger type or opening another."""
    anti_pods = [pod(cpu="1500m", mem="1Gi", labels=S2, affinity=anti(HOST)) for _ in range(3)]
    small = [pod(cpu="200m", mem="256Mi", name=f"small{i}") for i in range(6)]
    plan = solve([pool()], [*anti_pods, *small])
    assert not plan.unschedulable and len(plan.node_claims) == 3
    assert {c.instance_type.name for c in plan.node_claims} == {"fake-it-1"}
    assert sorted(len(c.pods) for c in plan.node_claims) == [3, 3, 3]


def test_lower_bound_counts_the_nodes_hostname_constraints_force():
    """n pods that must each have their own node (self-anti-affinity on hostname, a shared host port, hostname
    spread with maxSkew 1) cost at least n of the cheapest type that holds one; pods sharing nothing do not."""
    cheapest = 0.6  # fake-it-1: the smallest type that holds a 1-cpu pod (1.9 allocatable)
    for extra in ({"affinity": anti(HOST)}, {"topologySpreadConstraints": spread(HOST, labels=S2)},
                  {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}],
                                   "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}):
        pods = [pod(cpu="1", mem="1Gi", labels=S2, **extra) for _ in range(4)]
        plan = solve([pool()], pods)
        assert len(plan.node_claims) == 4
        assert 4 * cheapest - 1e-6 <= plan.lower_bound_per_hour <= plan.cost_per_hour + 1e-9, extra
    free = [pod(cpu="1", mem="1Gi", labels=S2) for _ in range(4)]
    assert solve([pool()], free).lower_bound_per_hour < 4 * cheapest


def test_unknown_topology_keys():
    """Karpenter: a spread over a key no node or NodePool has leaves the pod unschedulable (no domain), while the
    other pods schedule; anti-affinity over such a key keeps nothing away (no node is in any of its domains)."""
    lost = pod(name="lost", labels={"app": "web"}, topologySpreadConstraints=spread("unknown"))
    plain = pod(name="plain")
    plan = solve([pool()], [lost, plain])
    assert "default/lost" in plan.unschedulable and "default/plain" not in plan.unschedulable
    avoiders = [pod(name=f"a{i}", labels=S2, affinity=anti("unknown")) for i in range(3)]
    assert not solve([pool()], avoiders).unschedulable


def test_existing_nodes_keep_room_for_daemonsets_not_running_there_yet():
    """Karpenter's ExistingNode subtracts the requests of the DaemonSets that will run on the node, less the
    DaemonSet pods already bound there: a node without its DaemonSet pod yet takes fewer pods."""
    ds = pod(cpu="500m", mem="128Mi", name="agent-ds")
    ds.owner = "DaemonSet/agent"
    fresh = node("fresh", {ZONE: "test-zone-1"}, alloc={"cpu": 2000, "memory": 8 * 2**30, "pods": 110})
    pods = [pod(cpu="1", mem="1Gi", name=f"w{i}") for i in range(2)]
    plan = solve([pool()], pods, existing=[fresh], daemonsets=[ds])
    assert len(plan.existing["fresh"]) == 1 and len(plan.node_claims) == 1
    running = pod(cpu="500m", mem="128Mi", name="agent-abcde")
    running.owner = "DaemonSet/agent"
    settled = node("settled", {ZONE: "test-zone-1"}, pods=[running], alloc={"cpu": 2500, "memory": 8 * 2**30,
                                                                             "pods": 110})
    plan = solve([pool()], pods, existing=[settled], daemonsets=[ds])
    assert len(plan.existing["settled"]) == 2 and not plan.node_claims
    tainted = node("tainted", {ZONE: "test-zone-1"}, taints=[Taint("dedicated", "x", "NoSchedule")],
                   alloc={"cpu": 2000, "memory": 8 * 2**30, "pods": 110})
    tolerant = [pod(cpu="1", mem="1Gi", name=f"t{i}", tolerations=[{"operator": "Exists"}]) for i in range(2)]
    plan = solve([pool()], tolerant, existing=[tainted], daemonsets=[ds])
    assert len(plan.existing["tainted"]) == 2  # the DaemonSet does not tolerate the node's taint


def test_zonal_spread_over_many_nodes_keeps_the_skew():
    """Pods that need a node each (3 cpu on types of at most 4 vCPU) spread over zones: several NodeClaims per zone,
    and the counts stay within maxSkew at every step (Karpenter: skew 4, 4, 4 for 12 pods)."""
    pods = [pod(cpu="3", labels={"app": "web"}, topologySpreadConstraints=spread(ZONE)) for _ in range(12)]
    plan = solve([pool(types=4)], pods)
    assert len(plan.node_claims) == 12
    zones = placed_zones(plan, pods)
    assert [zones.count(z) for z in ("test-zone-1", "test-zone-2", "test-zone-3")] == [4, 4, 4]
    more = [pod(cpu="100m", labels={"app": "web"}, topologySpreadConstraints=spread(ZONE, skew=2)) for _ in range(7)]
    plan = solve([pool()], more)
    zones = placed_zones(plan, more)
    assert max(zones.count(z) for z in set(zones)) - min(zones.count(z) for z in set(zones)) <= 2
    assert len(set(zones)) == 3


# ---- pod affinity: namespaces and chains --------------------------------------------------------------------------
def _ns_pod(namespace: str, name: str, labels: dict[str, str] | None = None, namespace_labels=None, **spec):
    from controller.scheduling.pod import pod_from_dict

    spec.setdefault("containers", [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}])
    return pod_from_dict({"metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
                          "spec": spec}, namespace_labels)


def _affinity_term(**term: object) -> dict[str, object]:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": HOST, "labelSelector": {"matchLabels": S2}, **term}]}}


def _ten_spread_nodes() -> list:
    return [pod(cpu="100m", labels={"app": "web"}, topologySpreadConstraints=spread(HOST)) for _ in range(10)]


def test_should_filter_pod_affinity_topologies_by_namespace_no_matching_pods():
    """The target is in another namespace, and the term names neither namespaces nor a namespaceSelector: only the
    pod's own namespace counts, so the affine pod does not schedule."""
    target = _ns_pod("other-ns-no-match", "target", S2)
    follower = _ns_pod("default", "follower", affinity=_affinity_term())
    plan = solve([pool()], [*_ten_spread_nodes(), target, follower])
    assert "default/follower" in plan.unschedulable and "other-ns-no-match/target" not in plan.unschedulable


def test_should_filter_pod_affinity_topologies_by_namespace_matching_pods_namespace_list():
    target = _ns_pod("other-ns-list", "target", S2)
    follower = _ns_pod("default", "follower", affinity=_affinity_term(namespaces=["other-ns-list"]))
    plan = solve([pool()], [*_ten_spread_nodes(), target, follower])
    assert not plan.unschedulable and claim_of(plan, follower) is claim_of(plan, target)


def test_should_filter_pod_affinity_topologies_by_namespace_empty_namespace_selector():
    """An empty namespaceSelector selects every namespace."""
    target = _ns_pod("empty-ns-selector", "target", S2)
    follower = _ns_pod("default", "follower", affinity=_affinity_term(namespaceSelector={}))
    plan = solve([pool()], [*_ten_spread_nodes(), target, follower])
    assert not plan.unschedulable and claim_of(plan, follower) is claim_of(plan, target)


def test_pod_affinity_namespace_selector_matches_namespace_labels():
    namespaces = {"team-a": {"team": "a"}, "team-b": {"team": "b"}}
    target = _ns_pod("team-a", "target", S2)
    wants_a = _ns_pod("default", "wants-a", namespace_labels=namespaces,
                      affinity=_affinity_term(namespaceSelector={"matchLabels": {"team": "a"}}))
    wants_b = _ns_pod("default", "wants-b", namespace_labels=namespaces,
                      affinity=_affinity_term(namespaceSelector={"matchLabels": {"team": "b"}}))
    plan = solve([pool()], [target, wants_a, wants_b])
    assert claim_of(plan, wants_a) is claim_of(plan, target)
    assert "default/wants-b" in plan.unschedulable


def test_should_handle_multiple_dependent_affinities():
    """DB <- Web <- Cache <- UI, each with hostname affinity to the one before: given in any order, all schedule
    (Karpenter retries pods while the queue makes progress), on one node."""
    import itertools

    labels = {name: {"type": name, "spread": "spread"} for name in ("db", "web", "cache", "ui")}

    def chain() -> list:
        db = pod(cpu="100m", name="db", labels=labels["db"])
        web = pod(cpu="100m", name="web", labels=labels["web"], affinity=affinity(HOST, labels["db"]))
        cache = pod(cpu="100m", name="cache", labels=labels["cache"], affinity=affinity(HOST, labels["web"]))
        ui = pod(cpu="100m", name="ui", labels=labels["ui"], affinity=affinity(HOST, labels["cache"]))
        return [db, web, cache, ui]

    for order in itertools.permutations(range(4)):
        pods = chain()
        plan = solve([pool()], [pods[i] for i in order])
        assert not plan.unschedulable, (order, plan.unschedulable)
        assert len({id(claim_of(plan, p)) for p in pods}) == 1, order


def test_should_fail_to_schedule_pods_with_unsatisfiable_dependencies():
    lonely = pod(name="db", labels={"type": "db"}, affinity=affinity(HOST, {"type": "web"}))
    plan = solve([pool()], [lonely])
    assert "default/db" in plan.unschedulable and not plan.node_claims


# ---- DaemonSet overhead from a live pod, NodePool readiness ---------------------------------------------------------
def test_should_account_for_overhead_using_daemonset_pod_spec_instead_of_daemonset_spec():
    """Karpenter's suite: a DaemonSet asks 1 cpu / 1Gi in its template, its live pod (after a LimitRange) 2 cpu /
    2Gi; the pod's requests size the overhead."""
    from controller.provisioning import inputs

    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds", "namespace": "default",
                                                                     "uid": "ds"},
          "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {
              "requests": {"cpu": "1", "memory": "1Gi"}}}]}}}}
    live = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ds-x", "namespace": "default"},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {
                "requests": {"cpu": "2", "memory": "2Gi"}}}]}}
    from_template = inputs.daemonset_pod(ds)
    from_pod = inputs.daemonset_pod(ds, live)
    assert from_template.requests["cpu"] == 1000 and from_pod.requests["cpu"] == 2000
    p = pod(cpu="1", mem="1Gi", name="p")
    assert claim_of(solve([pool()], [p], daemonsets=[from_template]), p).instance_type.name == "fake-it-2"
    assert claim_of(solve([pool()], [p], daemonsets=[from_pod]), p).instance_type.name == "fake-it-3"


def test_daemonset_live_pod_keeps_the_templates_node_affinity_not_its_own_node():
    """The DaemonSet controller pins each pod to its node with a matchFields term; Karpenter puts the template's
    required node affinity back, so the overhead applies on every node the DaemonSet selects."""
    from controller.provisioning import inputs

    ds = {"metadata": {"name": "ds", "namespace": "default", "uid": "ds"},
          "spec": {"template": {"spec": {"affinity": LARGE_TYPES, "containers": [{"name": "c"}]}}}}
    live = {"metadata": {"name": "ds-x", "namespace": "default"},
            "spec": {"nodeName": "n", "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                        "values": ["n"]}]}]}}},
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}}
    overhead = inputs.daemonset_pod(ds, live)
    assert [r.key for t in overhead.node_terms for r in t] == [L.INSTANCE_CPU]
    small = pod(cpu="1", mem="1Gi", name="small")
    assert claim_of(solve([pool()], [small], daemonsets=[overhead]), small).instance_type.name == "fake-it-1"


def test_should_not_schedule_pods_with_nodepool_which_is_not_ready():
    """Karpenter's suite: a NodePool whose Ready condition is False takes no pods (its status says so)."""
    from controller.provisioning.provisioner import nodepool_not_ready

    manifest = {"metadata": {"name": "default"}, "status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "NodeClassNotReady", "message": "EC2NodeClass not ready"}]}}
    why = nodepool_not_ready(manifest)
    assert why == 'NodePool "default" is not ready: EC2NodeClass not ready'
    p = pool()
    p.not_ready_reason = why
    plan = solve([p], [pod(name="p")])
    assert not plan.node_claims and why in plan.unschedulable["default/p"]
    assert nodepool_not_ready({"metadata": {"name": "x"}}) == ""  # no status yet: its node class decides


def test_volume_requirements_place_the_pod_but_do_not_narrow_its_spread_domains():
    """Karpenter keeps a pod's volume requirements out of the node affinity its topology spread counts with: pods
    spread over zones, one in each of zones 1 and 2 already; a third whose volume lives in zone 1 would make the skew
    2 against zone 3 and cannot go; a pod pinned to zone 1 by node affinity counts only zone 1 and can."""
    import dataclasses as dc

    from controller.scheduling.requirements import Requirements

    web = {"app": "web"}
    existing = [node(f"n{z}", {ZONE: f"test-zone-{z}"}, pods=[pod(cpu="100m", labels=web, name=f"w{z}")])
                for z in (1, 2)]
    zone1 = Requirements.from_labels({ZONE: "test-zone-1"})
    by_volume = pod(cpu="100m", labels=web, name="vol", topologySpreadConstraints=spread(ZONE))
    by_volume = dc.replace(by_volume, volume_terms=(zone1,), class_key=None)
    plan = solve([pool()], [by_volume], existing=existing)
    assert "maxSkew" in plan.unschedulable["default/vol"]
    by_affinity = pod(cpu="100m", labels=web, name="aff", topologySpreadConstraints=spread(ZONE),
                      nodeSelector={ZONE: "test-zone-1"})
    plan = solve([pool()], [by_affinity], existing=existing)
    assert plan.existing == {"n1": [by_affinity]}
