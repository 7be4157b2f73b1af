"""The disruption queue and loop against a real control plane: tainting, launching and waiting on replacements,
deleting candidates, rolling back on failure and timeout, dropping commands that fail validation, and the state a new
process rebuilds from the cluster after a crash mid-command. The decision core is replaced by the commands each test
gives (its own tests cover deciding); no cloud is involved: replacements are NodeClaims nobody launches, and the test
marks them Initialized as the lifecycle controller would."""

# ruff: noqa: F811 - tests take the imported `world` fixture as their argument
from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from controller import metrics as M
from controller.api import labels as L
from controller.catalog.snapshot import load_catalog
from controller.disruption import events as E
from controller.disruption.controller import DisruptionController
from controller.disruption.queue import REPLACEMENT_OF, REPLACES, Queue
from controller.disruption.types import (
    DRIFT,
    SINGLE_NODE_CONSOLIDATION,
    BudgetMapping,
    Candidate,
    Command,
    Options,
    Pass,
    Replacement,
    Snapshot,
)
from controller.kube import resources as R
from controller.kube.errors import NotFoundError
from controller.scheduling.nodeclaim import PlannedNodeClaim
from controller.scheduling.requirements import Requirements
from controller.termination import drain as D
from tests.integration.test_termination_kube import World, world  # noqa: F401 - its module fixture, reused
from tests.kubetest import wait_for

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

Obj = dict[str, Any]


# a Node and NodeClaim per test, built on the termination tests' world (client, cache, recorder, kubelet)
TYPES = [it for it in load_catalog().instance_types if it.name in ("m5.large", "m5.xlarge")]


@pytest.fixture
def pool(world: World) -> Iterator[str]:
    """A NodePool of its own per test; every NodeClaim and Node the test made is removed afterwards."""
    name = f"dq-{uuid.uuid4().hex[:6]}"
    world.recorder.captured.clear()
    world.client.create(R.NODEPOOLS, {
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m5.large", "m5.xlarge"]}]}}}})
    wait_for("the cache to see the NodePool", lambda: world.cluster.nodepool(name))
    try:
        yield name
    finally:
        for claim in world.cluster.nodeclaims_for_nodepool(name):
            _force_delete(world, R.NODECLAIMS, claim["metadata"]["name"])
        for cleanup in reversed(world.cleanups):
            with contextlib.suppress(Exception):
                cleanup()
        world.cleanups.clear()
        with contextlib.suppress(NotFoundError):
            world.client.delete(R.NODEPOOLS, name)


def _force_delete(world: World, res: R.Resource, name: str) -> None:
    with contextlib.suppress(NotFoundError):
        world.client.patch(res, name, {"metadata": {"finalizers": None}})
        world.client.delete(res, name)


def candidate(world: World, pool: str) -> Candidate:
    """A registered, initialized Node and NodeClaim of the pool (the NodeClaim keeps a finalizer, as Karpenter's
    does, so a delete leaves it terminating), as the core would hand it over."""
    suffix = uuid.uuid4().hex[:8]
    claim_name, node_name = f"{pool}-{suffix}", f"ip-10-9-{suffix}.ec2.internal"
    pid = f"aws:///us-east-1a/i-0{suffix}abcdef"
    labels = {L.NODEPOOL: pool, L.ZONE: "us-east-1a", L.CAPACITY_TYPE: "on-demand", L.INSTANCE_TYPE: "m5.xlarge"}
    world.cleanups.append(lambda: _force_delete(world, R.NODES, node_name))
    world.cleanups.append(lambda: _force_delete(world, R.NODECLAIMS, claim_name))
    claim = world.client.create(R.NODECLAIMS, {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": claim_name, "labels": labels, "finalizers": [L.TERMINATION_FINALIZER]},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": [{"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m5.xlarge"]}]}})
    world.kubelet.register(node_name, pid, labels=labels)
    mark_initialized(world, claim_name, provider_id=pid, node_name=node_name,
                     generation=claim["metadata"]["generation"])
    wait_for("the cache to see the NodeClaim and Node", lambda: world.cluster.nodeclaim_for_provider_id(pid)
             is not None and world.cluster.node_for_provider_id(pid) is not None)
    cached = world.cluster.nodeclaim_for_provider_id(pid)
    node = world.cluster.node(node_name)
    assert cached is not None and node is not None
    return Candidate(nodeclaim=cached, node=node, nodepool=pool, instance_type="m5.xlarge", capacity_type="on-demand",
                     zone="us-east-1a", price=0.192, disruption_cost=1.0)


def mark_initialized(world: World, name: str, provider_id: str = "", node_name: str = "",
                     generation: int = 1) -> None:
    """What the lifecycle controller writes once a NodeClaim's Node is up."""
    now = D.format_time(time.time())
    status: Obj = {"conditions": [{"type": t, "status": "True", "reason": t, "lastTransitionTime": now,
                                   "observedGeneration": generation}
                                  for t in ("Launched", "Registered", "Initialized", "Ready")]}
    if provider_id:
        status.update(providerID=provider_id, nodeName=node_name)
    world.client.patch(R.NODECLAIMS, name, {"status": status}, subresource="status")


def replacement(world: World, pool: str) -> Replacement:
    reqs = Requirements.from_node_selector_requirements(
        [{"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]}])
    return Replacement(PlannedNodeClaim(node_pool=pool, requirements=reqs, instance_type_options=TYPES[:1],
                                        instance_type=TYPES[0], capacity_type="on-demand", zone="us-east-1a",
                                        price_per_hour=0.096, pods=[]))


def tainted(world: World, node: str) -> bool:
    return D.has_disrupted_taint(world.client.get(R.NODES, node))


def live(world: World, name: str) -> Obj | None:
    try:
        return world.client.get(R.NODECLAIMS, name)
    except NotFoundError:
        return None


def deleting(world: World, name: str) -> bool:
    claim = live(world, name)
    return claim is None or bool(claim["metadata"].get("deletionTimestamp"))


def sample(metric: Any, **labels: str) -> float:
    value = M.REGISTRY.get_sample_value(metric, labels)
    return float(value or 0.0)


# ---- the queue -------------------------------------------------------------------------------------------------

def test_replace_taints_launches_waits_for_initialized_then_deletes(world: World, pool: str) -> None:
    cand = candidate(world, pool)
    cmd = Command(method=SINGLE_NODE_CONSOLIDATION, reason="Underutilized", candidates=[cand],
                  replacements=[replacement(world, pool)])
    queue = Queue(world.cluster, world.client, world.recorder)
    labels = {"reason": "underutilized", "nodepool": pool, "capacity_type": "on-demand",
              "consolidation_policy": "when_empty_or_underutilized", "termination_mode": "graceful"}
    before = sample("karpenter_nodeclaims_disrupted_total", **labels)

    run = queue.start(cmd)
    assert tainted(world, cand.node_name)
    assert len(run.replacements) == 1
    rep = live(world, run.replacements[0])
    assert rep is not None
    assert rep["metadata"]["annotations"][REPLACEMENT_OF] == run.id
    assert rep["metadata"]["annotations"][REPLACES] == cand.name
    assert rep["metadata"]["labels"][L.NODEPOOL] == pool
    assert queue.holds() == {cand.name}

    wait_for("the cache to see the replacement", lambda: world.cluster.nodeclaim(run.replacements[0]))
    queue.tick()  # the replacement is not initialized: the candidate stays
    assert not deleting(world, cand.name)
    assert any(r == E.DISRUPTION_WAITING_READINESS and n == run.replacements[0]
               for _, n, r, _ in world.recorder.captured)
    assert any(r == E.DISRUPTION_LAUNCHING and m == "Launching NodeClaim: Underutilized"
               for _, _, r, m in world.recorder.captured)

    mark_initialized(world, run.replacements[0])
    wait_for("the cache to see the replacement initialized", lambda: (world.cluster.nodeclaim(
        run.replacements[0]) or {}).get("status", {}).get("conditions"))
    queue.tick()
    assert deleting(world, cand.name)
    assert queue.holds() == set()
    rep = live(world, run.replacements[0])
    assert rep is not None and REPLACEMENT_OF not in (rep["metadata"].get("annotations") or {})
    assert (("Node", cand.node_name, E.DISRUPTION_TERMINATING, "Disrupting Node: Underutilized")
            in world.recorder.captured)
    assert (("NodeClaim", cand.name, E.DISRUPTION_TERMINATING, "Disrupting NodeClaim: Underutilized")
            in world.recorder.captured)
    assert sample("karpenter_nodeclaims_disrupted_total", **labels) == before + 1


def test_timeout_takes_taints_off_and_deletes_replacements(world: World, pool: str) -> None:
    cands = [candidate(world, pool), candidate(world, pool)]
    cmd = Command(method=DRIFT, reason="Drifted", candidates=cands, replacements=[replacement(world, pool)])
    now = [0.0]
    queue = Queue(world.cluster, world.client, world.recorder, clock=lambda: now[0], retry_seconds=60)
    run = queue.start(cmd)
    assert all(tainted(world, c.node_name) for c in cands)
    queue.tick()
    assert all(tainted(world, c.node_name) for c in cands), "within the window the command waits"
    now[0] = 61
    queue.tick()
    assert not any(tainted(world, c.node_name) for c in cands)
    assert live(world, run.replacements[0]) is None or deleting(world, run.replacements[0])
    assert not any(deleting(world, c.name) for c in cands)
    assert queue.holds() == set()


def test_replacement_deleted_by_someone_else_rolls_back(world: World, pool: str) -> None:
    cand = candidate(world, pool)
    queue = Queue(world.cluster, world.client, world.recorder)
    run = queue.start(Command(method=DRIFT, reason="Drifted", candidates=[cand],
                              replacements=[replacement(world, pool)]))
    world.client.delete(R.NODECLAIMS, run.replacements[0])
    wait_for("the replacement to go", lambda: live(world, run.replacements[0]) is None)
    wait_for("the cache to lose it", lambda: world.cluster.nodeclaim(run.replacements[0]) is None)
    queue.tick()
    assert not tainted(world, cand.node_name)
    assert not deleting(world, cand.name)
    assert queue.holds() == set()


def test_delete_command_deletes_at_once(world: World, pool: str) -> None:
    cand = candidate(world, pool)
    queue = Queue(world.cluster, world.client, world.recorder)
    queue.start(Command(method=DRIFT, reason="Drifted", candidates=[cand]))
    queue.tick()
    assert deleting(world, cand.name)


def reason_of(world: World, name: str) -> tuple[str, str] | None:
    """The NodeClaim's DisruptionReason condition as (status, reason), read from the API."""
    claim = live(world, name)
    cond = next((c for c in ((claim or {}).get("status") or {}).get("conditions") or []
                 if c.get("type") == "DisruptionReason"), None)
    return (cond["status"], cond["reason"]) if cond else None


def test_candidates_carry_the_disruption_reason_until_the_command_fails(world: World, pool: str) -> None:
    cands = [candidate(world, pool), candidate(world, pool)]
    now = [0.0]
    queue = Queue(world.cluster, world.client, world.recorder, clock=lambda: now[0], retry_seconds=60)
    queue.start(Command(method=DRIFT, reason="Drifted", candidates=cands, replacements=[replacement(world, pool)]))
    assert [reason_of(world, c.name) for c in cands] == [("True", "Drifted")] * 2
    stored = live(world, cands[0].name)
    assert stored is not None and {c["type"] for c in stored["status"]["conditions"]} >= {
        "Launched", "Registered", "Initialized", "Ready"}, "the lifecycle's conditions are kept"
    queue.tick()
    assert [reason_of(world, c.name) for c in cands] == [("True", "Drifted")] * 2
    now[0] = 61
    queue.tick()  # the command ran out of time: taints and reasons come off
    assert [reason_of(world, c.name) for c in cands] == [None, None]
    assert not any(tainted(world, c.node_name) for c in cands)


def test_pods_of_a_disrupted_node_are_evicted_under_its_disruption_reason(world: World, pool: str) -> None:
    from tests.integration.test_termination_kube import FakeCloud, make_pod, termination

    cand = candidate(world, pool)
    world.client.patch(R.NODES, cand.node_name, {"metadata": {"finalizers": [L.TERMINATION_FINALIZER]}})
    pid = str(cand.nodeclaim["status"]["providerID"])
    cloud = FakeCloud()
    cloud.instances.add(pid)
    ns = f"dr-{uuid.uuid4().hex[:6]}"
    world.client.create(R.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    world.cleanups.append(lambda: world.client.delete(R.NAMESPACES, ns))
    make_pod(world, ns, "app", cand.node_name)
    wait_for("the cache to see the pod", lambda: world.cluster.pods_on_node(cand.node_name))
    before = sample("karpenter_pods_drained_total", reason="Drifted")
    queue = Queue(world.cluster, world.client, world.recorder)
    queue.start(Command(method=DRIFT, reason="Drifted", candidates=[cand]))
    queue.tick()
    assert deleting(world, cand.name)
    wait_for("the cache to see the reason", lambda: any(
        c.get("type") == "DisruptionReason" for c in (world.cluster.nodeclaim(cand.name) or {}).get(
            "status", {}).get("conditions") or []))
    term = termination(world, cloud)
    term.claims.reconcile(cand.name)  # deletes the Node
    term.nodes.reconcile(cand.node_name)  # taints it and evicts the pod
    assert world.recorder.messages("app", "Evicted") == ["Evicted pod: Drifted"]
    assert sample("karpenter_pods_drained_total", reason="Drifted") == before + 1


# ---- restart: state rebuilt from the cluster --------------------------------------------------------------------

def test_new_process_untaints_and_deletes_replacements_of_an_unfinished_command(world: World, pool: str) -> None:
    cand = candidate(world, pool)
    crashed = Queue(world.cluster, world.client, world.recorder)
    run = crashed.start(Command(method=SINGLE_NODE_CONSOLIDATION, reason="Underutilized", candidates=[cand],
                                replacements=[replacement(world, pool)]))
    rep = run.replacements[0]
    wait_for("the cache to see the taint and the replacement", lambda: D.has_disrupted_taint(
        world.cluster.node(cand.node_name) or {}) and world.cluster.nodeclaim(rep))

    fresh = Queue(world.cluster, world.client, world.recorder)  # the new process: an empty queue
    fresh.sweep()
    assert not tainted(world, cand.node_name)
    assert deleting(world, rep)
    assert not deleting(world, cand.name)


def test_new_process_keeps_replacements_of_a_command_that_reached_its_deletions(world: World, pool: str) -> None:
    cand = candidate(world, pool)
    crashed = Queue(world.cluster, world.client, world.recorder)
    run = crashed.start(Command(method=DRIFT, reason="Drifted", candidates=[cand],
                                replacements=[replacement(world, pool)]))
    rep = run.replacements[0]
    world.client.delete(R.NODECLAIMS, cand.name)  # the crash came after the candidate's delete
    wait_for("the cache to see both", lambda: world.cluster.nodeclaim(rep) and (world.cluster.nodeclaim(
        cand.name) or {}).get("metadata", {}).get("deletionTimestamp"))

    fresh = Queue(world.cluster, world.client, world.recorder)
    fresh.sweep()
    kept = live(world, rep)
    assert kept is not None and not kept["metadata"].get("deletionTimestamp")
    assert REPLACEMENT_OF not in (kept["metadata"].get("annotations") or {})
    assert tainted(world, cand.node_name), "a node being deleted keeps its taint"


def test_sweep_spares_commands_in_flight(world: World, pool: str) -> None:
    cand = candidate(world, pool)
    queue = Queue(world.cluster, world.client, world.recorder)
    run = queue.start(Command(method=DRIFT, reason="Drifted", candidates=[cand],
                              replacements=[replacement(world, pool)]))
    wait_for("the cache to see the replacement", lambda: world.cluster.nodeclaim(run.replacements[0]))
    queue.sweep()
    assert tainted(world, cand.node_name)
    assert not deleting(world, run.replacements[0])


# ---- the loop: validation --------------------------------------------------------------------------------------

def test_consolidation_that_fails_validation_is_dropped_untouched(world: World, pool: str) -> None:
    cand = candidate(world, pool)
    cmd = Command(method=SINGLE_NODE_CONSOLIDATION, reason="Underutilized", candidates=[cand],
                  replacements=[replacement(world, pool)])
    seen: list[Snapshot] = []

    def compute(snapshot: Snapshot, options: Options) -> Pass:
        return Pass(method=SINGLE_NODE_CONSOLIDATION, commands=[cmd])

    def validate(snapshot: Snapshot, command: Command, options: Options) -> str:
        seen.append(snapshot)
        return "a pod arrived on the candidate"

    queue = Queue(world.cluster, world.client, world.recorder)
    loop = DisruptionController(world.cluster, _NoPools(), world.recorder, queue, compute=compute,
                                validate=validate, validation_seconds=0)
    before = sample("karpenter_voluntary_disruption_failed_validations_total", consolidation_type="single")
    loop.reconcile()
    assert [p.command for p in loop.pending] == [cmd]
    assert not tainted(world, cand.node_name), "Karpenter validates before it taints"
    assert any(r == E.CONSOLIDATION_CANDIDATE and n == cand.node_name for _, n, r, _ in world.recorder.captured)
    loop.reconcile()
    assert seen and cand.name not in seen[0].disrupting, "validation sees the candidates as candidates again"
    assert loop.pending == [] and queue.holds() == set()
    assert not tainted(world, cand.node_name)
    assert not [c for c in world.cluster.nodeclaims_for_nodepool(pool) if c["metadata"]["name"] != cand.name]
    assert sample("karpenter_voluntary_disruption_failed_validations_total",
                  consolidation_type="single") == before + 1


def test_consolidation_still_valid_starts(world: World, pool: str) -> None:
    cand = candidate(world, pool)
    cmd = Command(method=SINGLE_NODE_CONSOLIDATION, reason="Underutilized", candidates=[cand])
    queue = Queue(world.cluster, world.client, world.recorder)
    loop = DisruptionController(world.cluster, _NoPools(), world.recorder, queue,
                                compute=lambda s, o: Pass(method=SINGLE_NODE_CONSOLIDATION, commands=[cmd]),
                                validate=lambda s, c, o: "", validation_seconds=0)
    loop.reconcile()
    loop.reconcile()
    assert tainted(world, cand.node_name)
    assert queue.holds() == {cand.name}
    loop.reconcile()  # the queue's tick deletes the candidate (no replacements to wait for)
    assert deleting(world, cand.name)


def test_budget_metrics_and_blocked_nodepool_event(world: World, pool: str) -> None:
    """As Karpenter's BuildDisruptionBudgetMapping reports: allowed_disruptions is the budgets' own figure,
    nodes_consuming_budgets the NotReady or disrupting nodes, and a NodePool with nodes whose budget allows none gets
    its DisruptionBlocked event (one per reason)."""
    blocked = BudgetMapping(allowed={pool: 0}, consuming={pool: 1}, remaining={pool: 0}, nodes={pool: 2})
    open_ = BudgetMapping(allowed={pool: 3}, consuming={pool: 1}, remaining={pool: 2}, nodes={pool: 2})

    def compute(snapshot: Snapshot, options: Options) -> Pass:
        return Pass(budgets={"Drifted": blocked, "Empty": open_})

    wait_for("the NodePool in the cache", lambda: world.cluster.nodepool(pool) is not None, 60)
    loop = DisruptionController(world.cluster, _NoPools(), world.recorder, Queue(world.cluster, world.client,
                                                                                 world.recorder), compute=compute)
    loop.reconcile()
    assert sample("karpenter_nodepools_allowed_disruptions", nodepool=pool, reason="drifted") == 0
    assert sample("karpenter_nodepools_nodes_consuming_budgets", nodepool=pool, reason="drifted") == 1
    assert sample("karpenter_nodepools_allowed_disruptions", nodepool=pool, reason="empty") == 3
    assert world.recorder.messages(pool, E.DISRUPTION_BLOCKED) == [
        "No allowed disruptions for disruption reason Drifted due to blocking budget"]


class _NoPools:
    """The provisioner's NodePool view, for tests that hand the loop their own commands."""

    def pool_sources(self) -> list[Any]:
        return []


# ---- the snapshot -----------------------------------------------------------------------------------------------

def test_snapshot_from_the_running_controllers_state(world: World, pool: str) -> None:
    """Instance types come through the provisioner (a Ready EC2NodeClass on the fake cloud), a pool whose class is
    missing is named not ready with the provisioner's reason, and a tainted node's NodeClaim counts as disrupting."""
    from controller.cloud.fake.provider import FakeCloudProvider
    from controller.disruption.state import build_snapshot
    from controller.provisioning.provisioner import Provisioner

    nodeclass = f"dq-class-{uuid.uuid4().hex[:5]}"
    world.client.create(R.EC2NODECLASSES, {
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": nodeclass},
        "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                 "subnetSelectorTerms": [{"tags": {"k": "v"}}], "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]}})
    world.cleanups.append(lambda: _force_delete(world, R.EC2NODECLASSES, nodeclass))
    world.client.patch(R.EC2NODECLASSES, nodeclass, {"status": {"conditions": [{
        "type": "Ready", "status": "True", "reason": "Ready", "message": "Ready",
        "lastTransitionTime": D.format_time(time.time())}]}}, subresource="status")
    ready_pool = f"{pool}-ready"
    world.client.create(R.NODEPOOLS, {
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": ready_pool},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass},
            "requirements": []}}}})
    world.cleanups.append(lambda: _force_delete(world, R.NODEPOOLS, ready_pool))
    wait_for("the cache to see the Ready class and its pool", lambda: world.cluster.nodepool(ready_pool) and (
        world.cluster.nodeclass(nodeclass) or {}).get("status", {}).get("conditions"))
    cand = candidate(world, pool)
    Queue(world.cluster, world.client, world.recorder).start(Command(method=DRIFT, reason="Drifted",
                                                                     candidates=[cand]))
    wait_for("the cache to see the taint", lambda: D.has_disrupted_taint(world.cluster.node(cand.node_name) or {}))

    provisioner = Provisioner(world.cluster, world.client, FakeCloudProvider(), world.recorder)
    snap = build_snapshot(world.cluster, provisioner, held=set())
    assert snap.instance_types[ready_pool], "a Ready class's pool gets the cloud's instance types"
    assert snap.nodepool_not_ready[pool] == 'EC2NodeClass "default" not found'
    assert cand.name in snap.disrupting
    assert {c["metadata"]["name"] for c in snap.nodeclaims} >= {cand.name}
    assert ready_pool in {p["metadata"]["name"] for p in snap.nodepools}
    assert nodeclass in snap.nodeclasses
