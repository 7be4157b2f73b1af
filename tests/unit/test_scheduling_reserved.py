"""Karpenter's "Reserved Instance Types" scheduling cases (provisioning/scheduling/suite_test.go), on the benchmark
catalog: fake-it-1 (2 vCPU) plays Karpenter's small-instance-type, fake-it-2 (3 vCPU) the medium one. Karpenter's
test provisions again after each pass; here each pass is a solve whose reserved offerings carry what EC2 would report
after the previous pass's launches (a reservation launched into has one instance fewer, none: unavailable)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from controller.api import labels as L
from controller.catalog.types import Offering
from controller.scheduling.reservations import FALLBACK, STRICT, ReservationManager
from controller.scheduling.scheduler import Plan, Scheduler
from controller.scheduling.types import SchedNodePool
from tests.unit.test_scheduling import HOST, pod
from tests.unit.test_scheduling import pool as plain_pool

SMALL, MEDIUM = "fake-it-1", "fake-it-2"
APP = {"app": "test"}
ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"topologyKey": HOST, "labelSelector": {"matchLabels": APP}}]}}


def pool(name: str = "default", **kw: object) -> SchedNodePool:
    """A NodePool as the provisioner's inputs build it: its requirements include its own name."""
    return plain_pool(name, labels={L.NODEPOOL: name}, **kw)


def reserved(p: SchedNodePool, type_name: str, rid: str, count: int = 1, zone: str = "test-zone-1") -> SchedNodePool:
    """The pool with a reserved offering of `count` free instances added to one type (priced as Karpenter prices
    them: the on-demand price / 10,000,000; a reservation with none free is unavailable)."""
    types = []
    for it in p.instance_types:
        if it.name == type_name:
            od = min(o.price for o in it.offerings if o.capacity_type == L.CAPACITY_TYPE_ON_DEMAND)
            it = dataclasses.replace(it, offerings=[*it.offerings, Offering(
                zone, L.CAPACITY_TYPE_RESERVED, od / 10_000_000, available=count > 0, reservation_id=rid,
                reservation_capacity=count, reservation_type="default")])
        types.append(it)
    return dataclasses.replace(p, instance_types=types)


def requiring(type_name: str, *extra: dict[str, object]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": L.INSTANCE_TYPE, "operator": "In", "values": [type_name]}, *extra]}]}}}


def anti_pod(type_name: str, *extra: dict[str, object], **spec: object):
    return pod(cpu="100m", mem="100Mi", labels=APP, affinity={**requiring(type_name, *extra), **ANTI}, **spec)


def strict(pools: list[SchedNodePool], pods) -> Plan:
    return Scheduler(pools, reserved_mode=STRICT).solve(pods)


def reservation(claim) -> list[str]:
    r = claim.requirements.get(L.CAPACITY_RESERVATION_ID)
    return sorted(r.values) if r is not None else []


def test_reservation_manager_holds_one_instance_per_nodeclaim_and_releases_it():
    o = Offering("z", L.CAPACITY_TYPE_RESERVED, 0.0, reservation_id="cr-1", reservation_capacity=1)
    rm = ReservationManager([o, dataclasses.replace(o, reservation_capacity=3)])  # the smallest count wins
    assert rm.can_reserve("a", "cr-1")
    rm.reserve("a", ["cr-1"])
    rm.reserve("a", ["cr-1"])  # idempotent
    assert rm.can_reserve("a", "cr-1") and not rm.can_reserve("b", "cr-1")
    rm.hold("a", [])
    assert rm.can_reserve("b", "cr-1")


def test_unknown_reserved_offering_mode_is_refused():
    with pytest.raises(ValueError, match="reserved offering mode 'sometimes'"):
        Scheduler([pool()], reserved_mode="sometimes")


def test_shouldnt_fallback_to_on_demand_or_spot_when_compatible_reserved_offerings_are_available():
    """Three 1800m pods fit one apiece on small or medium: the first NodeClaim holds both reservations (the launch
    may pick either), so one pod is placed per pass until both are used; only then spot/on-demand."""
    base = pool()
    pods = [pod(cpu="1800m", mem="100Mi") for _ in range(3)]
    plan = strict([reserved(reserved(base, SMALL, "r-small"), MEDIUM, "r-medium")], pods)
    assert len(plan.node_claims) == 1 and len(plan.deferred) == 2 and not plan.unschedulable
    c = plan.node_claims[0]
    assert (c.capacity_type, c.instance_type.name) == (L.CAPACITY_TYPE_RESERVED, SMALL)
    assert reservation(c) == ["r-medium", "r-small"]
    assert c.requirements.get(L.CAPACITY_TYPE).values == {L.CAPACITY_TYPE_RESERVED}
    # the small reservation was launched into: its offering is unavailable in the next pass
    left = [p for p in pods if p.key in plan.deferred]
    plan = strict([reserved(reserved(base, SMALL, "r-small", 0), MEDIUM, "r-medium")], left)
    assert len(plan.node_claims) == 1 and len(plan.deferred) == 1
    assert (plan.node_claims[0].instance_type.name, reservation(plan.node_claims[0])) == (MEDIUM, ["r-medium"])
    left = [p for p in left if p.key in plan.deferred]
    plan = strict([reserved(reserved(base, SMALL, "r-small", 0), MEDIUM, "r-medium", 0)], left)
    c = plan.node_claims[0]
    assert not plan.deferred and c.capacity_type != L.CAPACITY_TYPE_RESERVED and c.instance_type.name == SMALL
    assert not reservation(c)


def test_should_correctly_track_reservations_shared_across_nodepools():
    """Two NodePools share one reservation of one free instance: one pod gets it, the other waits a pass."""
    np1, np2 = (reserved(pool(n), SMALL, "r-small") for n in ("np-1", "np-2"))
    pods = [anti_pod(SMALL, {"key": L.NODEPOOL, "operator": "In", "values": [f"np-{i + 1}"]}) for i in range(2)]
    plan = strict([np1, np2], pods)
    assert len(plan.node_claims) == 1 and len(plan.deferred) == 1 and not plan.unschedulable
    assert reservation(plan.node_claims[0]) == ["r-small"]


def test_should_correctly_track_reservations_for_multiple_nodepools_with_distinct_reservations():
    np1 = reserved(pool("np-1"), SMALL, "r-small")
    np2 = reserved(pool("np-2"), SMALL, "r-distinct")
    pods = [anti_pod(SMALL, {"key": L.NODEPOOL, "operator": "In", "values": [f"np-{i + 1}"]}) for i in range(2)]
    plan = strict([np1, np2], pods)
    assert len(plan.node_claims) == 2 and not plan.deferred
    assert sorted(r for c in plan.node_claims for r in reservation(c)) == ["r-distinct", "r-small"]
    assert {c.capacity_type for c in plan.node_claims} == {L.CAPACITY_TYPE_RESERVED}


def test_should_correctly_track_multiple_reservations_for_the_same_instance_pool():
    """Reservations of 1 and 2 free instances for one type: each NodeClaim holds both, so two NodeClaims (the most
    either count allows), then one, then none left: spot or on-demand."""
    base = pool()
    pods = [anti_pod(SMALL) for _ in range(4)]
    plan = strict([reserved(reserved(base, SMALL, "r-small"), SMALL, "r-small-2", 2)], pods)
    assert len(plan.node_claims) == 2 and len(plan.deferred) == 2
    assert all(c.capacity_type == L.CAPACITY_TYPE_RESERVED for c in plan.node_claims)
    left = [p for p in pods if p.key in plan.deferred]
    plan = strict([reserved(reserved(base, SMALL, "r-small", 0), SMALL, "r-small-2", 1)], left)
    assert len(plan.node_claims) == 1 and len(plan.deferred) == 1
    left = [p for p in left if p.key in plan.deferred]
    plan = strict([reserved(reserved(base, SMALL, "r-small", 0), SMALL, "r-small-2", 0)], left)
    assert len(plan.node_claims) == 1 and plan.node_claims[0].capacity_type != L.CAPACITY_TYPE_RESERVED


def test_shouldnt_fallback_to_a_lower_weight_nodepool_if_a_reserved_offering_is_available():
    primary = reserved(pool("np-primary", weight=100), SMALL, "r-small")
    fallback = reserved(pool("np-fallback", weight=50), SMALL, "r-fallback")
    pods = [anti_pod(SMALL) for _ in range(2)]
    plan = strict([primary, fallback], pods)
    assert len(plan.node_claims) == 1 and len(plan.deferred) == 1
    assert plan.node_claims[0].node_pool == "np-primary" and reservation(plan.node_claims[0]) == ["r-small"]
    # next pass: the primary reservation is used up; the pod goes to the primary pool's spot/on-demand capacity
    left = [p for p in pods if p.key in plan.deferred]
    plan = strict([reserved(pool("np-primary", weight=100), SMALL, "r-small", 0), fallback], left)
    c = plan.node_claims[0]
    assert c.node_pool == "np-primary" and c.capacity_type != L.CAPACITY_TYPE_RESERVED


def test_shouldnt_relax_preferences_when_a_pod_fails_to_schedule_due_to_a_reserved_offering_error():
    np1 = reserved(pool("np-1"), SMALL, "r-small")
    np2 = reserved(pool("np-2"), SMALL, "r-distinct")
    prefer = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": [
        {"key": L.NODEPOOL, "operator": "In", "values": ["np-1"]}]}}]}
    pods = [pod(cpu="100m", mem="100Mi", labels=APP,
                affinity={**ANTI, "nodeAffinity": {**requiring(SMALL)["nodeAffinity"], **prefer}})
            for _ in range(2)]
    plan = strict([np1, np2], pods)
    assert len(plan.node_claims) == 1 and plan.node_claims[0].node_pool == "np-1"
    assert len(plan.deferred) == 1  # not relaxed onto np-2's free reservation


def test_should_handle_multiple_pods_on_reserved_nodes():
    zone_affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": APP}}]}}
    extra = ({"key": L.NODEPOOL, "operator": "In", "values": ["np-1"]},
             {"key": L.CAPACITY_TYPE, "operator": "In", "values": [L.CAPACITY_TYPE_RESERVED]},
             {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-1"]})
    pods = [pod(cpu="100m", mem="100Mi", labels=APP, affinity={**requiring(SMALL, *extra), **zone_affinity})
            for _ in range(2)]
    plan = strict([reserved(pool("np-1"), SMALL, "r-small")], pods)
    assert len(plan.node_claims) == 1 and len(plan.node_claims[0].pods) == 2 and not plan.deferred
    assert reservation(plan.node_claims[0]) == ["r-small"]


def test_a_reservation_with_one_free_instance_gives_at_most_one_nodeclaim_in_bulk():
    """Many identical pods that need a node each: one NodeClaim per free instance of the reservation."""
    pods = [anti_pod(SMALL) for _ in range(5)]
    plan = strict([reserved(pool(), SMALL, "r-small", 2)], pods)
    assert len(plan.node_claims) == 2 and len(plan.deferred) == 3
    assert all(reservation(c) == ["r-small"] for c in plan.node_claims)


def test_fallback_mode_launches_beyond_the_reservation_on_spot_or_on_demand():
    """Disruption's simulations (Karpenter's default mode): nothing is deferred, the rest goes to other capacity."""
    pods = [anti_pod(SMALL) for _ in range(3)]
    plan = Scheduler([reserved(pool(), SMALL, "r-small")], reserved_mode=FALLBACK).solve(pods)
    assert len(plan.node_claims) == 3 and not plan.deferred and not plan.unschedulable
    assert sorted(c.capacity_type for c in plan.node_claims).count(L.CAPACITY_TYPE_RESERVED) == 1


def test_a_nodepool_that_does_not_allow_reserved_never_uses_the_reservation():
    np = reserved(pool(reqs=[{"key": L.CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}]),
                  SMALL, "r-small")
    plan = strict([np], [anti_pod(SMALL) for _ in range(2)])
    assert len(plan.node_claims) == 2 and not plan.deferred
    assert all(c.capacity_type != L.CAPACITY_TYPE_RESERVED and not reservation(c) for c in plan.node_claims)


def test_pods_that_outgrow_the_reserved_types_do_not_join_a_reserved_nodeclaim():
    """Strict: a NodeClaim holding reservations takes no pod that would leave it only unreserved types."""
    first = pod(cpu="1500m", mem="100Mi")
    big = pod(cpu="1500m", mem="100Mi")
    plan = strict([reserved(pool(), SMALL, "r-small")], [first, big])
    reserved_claims = [c for c in plan.node_claims if c.capacity_type == L.CAPACITY_TYPE_RESERVED]
    assert len(reserved_claims) == 1 and len(reserved_claims[0].pods) == 1
