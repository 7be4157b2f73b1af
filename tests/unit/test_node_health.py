"""Node repair as Karpenter's node health controller: an unhealthy condition is tolerated for its repair policy's
duration, then the NodeClaim is deleted forcefully (termination timestamp now) and counted as disrupted (unhealthy);
more than 20 % unhealthy nodes in the NodePool blocks repair with NodeRepairBlocked."""

from __future__ import annotations

from controller import metrics as M
from controller.api import labels as L
from controller.cloud.repair import AWS_REPAIR_POLICIES
from controller.kube import resources as R
from controller.nodehealth.controller import NodeHealthController
from tests.unit.kubefake import FakeKube, FakeRecorder, stamp

T0 = 1_700_000_000.0


def _node_and_claim(kube: FakeKube, i: int, ready: str, since: float, pool: str = "general") -> None:
    pid = f"aws:///us-east-1a/i-{i:04d}"
    kube.add(R.NODECLAIMS, {"metadata": {"name": f"c{i}", "labels": {L.NODEPOOL: pool, L.CAPACITY_TYPE: "spot"},
                                         "finalizers": [L.TERMINATION_FINALIZER]},
                            "spec": {}, "status": {"providerID": pid}})
    kube.add(R.NODES, {"metadata": {"name": f"n{i}", "labels": {L.NODEPOOL: pool}},
                       "spec": {"providerID": pid},
                       "status": {"conditions": [{"type": "Ready", "status": ready,
                                                  "lastTransitionTime": stamp(since)}]}})


def _world(unhealthy: int, healthy: int) -> tuple[FakeKube, FakeRecorder, NodeHealthController]:
    kube = FakeKube(now=T0)
    kube.add(R.NODEPOOLS, {"metadata": {"name": "general"}, "spec": {}})
    for i in range(unhealthy):
        _node_and_claim(kube, i, "False", T0)
    for i in range(unhealthy, unhealthy + healthy):
        _node_and_claim(kube, i, "True", T0)
    recorder = FakeRecorder()
    return kube, recorder, NodeHealthController(kube.cluster, kube, recorder, AWS_REPAIR_POLICIES,
                                                clock=lambda: kube.now)


def _disrupted() -> float:
    return M.REGISTRY.get_sample_value("karpenter_nodeclaims_disrupted_total", {
        "reason": "unhealthy", "nodepool": "general", "capacity_type": "spot", "consolidation_policy": "",
        "termination_mode": ""}) or 0.0


def test_an_unhealthy_node_is_tolerated_then_its_nodeclaim_deleted_forcefully() -> None:
    kube, _, health = _world(unhealthy=1, healthy=9)
    kube.now = T0 + 29 * 60
    assert health.reconcile("n0").requeue_after == 60.0  # Ready=False is tolerated for 30 minutes
    assert not kube.get(R.NODECLAIMS, "c0")["metadata"].get("deletionTimestamp")
    before = _disrupted()
    kube.now = T0 + 30 * 60 + 1
    health.reconcile("n0")
    claim = kube.get(R.NODECLAIMS, "c0")["metadata"]
    assert claim.get("deletionTimestamp")
    assert claim["annotations"][L.NODECLAIM_TERMINATION_TIMESTAMP] == stamp(kube.now)  # forceful: no grace left
    assert _disrupted() == before + 1
    assert health.reconcile("n5").requeue_after is None  # a healthy node is left alone


def test_more_than_a_fifth_of_the_nodepool_unhealthy_blocks_repair() -> None:
    kube, recorder, health = _world(unhealthy=3, healthy=7)  # 3 > ceil(20 % of 10)
    kube.now = T0 + 31 * 60
    assert health.reconcile("n0").requeue_after == 300.0
    assert not kube.get(R.NODECLAIMS, "c0")["metadata"].get("deletionTimestamp")
    blocked = [e for e in recorder.events if e[2] == "NodeRepairBlocked"]
    assert {e[0] for e in blocked} == {"n0", "c0", "general"}
    assert blocked[0][3] == "more than 20% nodes are unhealthy in the nodepool"
    kube2, _, health2 = _world(unhealthy=2, healthy=8)  # 2 <= 2: repaired
    kube2.now = T0 + 31 * 60
    health2.reconcile("n0")
    assert kube2.get(R.NODECLAIMS, "c0")["metadata"].get("deletionTimestamp")


def test_the_noderepair_gate_runs_the_node_health_controller() -> None:
    from controller import main
    from controller.settings import resolve

    for gates, expected in (("NodeRepair=true", True), ("NodeRepair=false", False)):
        settings, _ = resolve({"CLUSTER_NAME": "demo", "CLOUD_PROVIDER": "fake", "FEATURE_GATES": gates,
                               "AWS_CONFIG_FILE": "/nonexistent"}, {}, None)
        kube = FakeKube()
        cloud, aws = main.build_cloud(settings, kube)
        rt, _ = main.wire(settings, kube, cloud, aws, FakeRecorder(), lambda: True)
        assert ("node.health" in [c.name for c in rt.controllers]) == expected
