"""The NodeClaim disruption rules (Consolidatable, drift reasons, hash versions), expiration and pod events, and
their controllers against the in-memory apiserver (tests/unit/kubefake.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller import metrics as M
from controller.api import labels as L
from controller.api.nodeclasshash import EC2NODECLASS_HASH_VERSION, hash_annotations
from controller.catalog.types import InstanceType, Offering
from controller.cloud.drift import nodeclass_drift
from controller.kube import resources as R
from controller.nodeclaim.disruption import (
    DisruptionRuleError,
    NodeClaimDisruptionController,
    consolidatable,
    consolidatable_at,
    drift_reason,
    instance_type_drift,
    restamp,
)
from controller.nodeclaim.expiration import ExpirationController, expires_at, termination_mode
from controller.nodeclaim.podevents import PodEventsController, pod_event_node
from controller.provisioning.nodeclaimtemplate import NODEPOOL_HASH_VERSION, nodepool_hash
from controller.state.views import NodeClaimView
from tests.unit.kubefake import FakeKube, stamp

T0 = 1_700_000_000.0
KARPENTER_NODEPOOL_HASH_VERSION = "v3"  # what Karpenter v1 writes
KARPENTER_NODECLASS_HASH_VERSION = "v4"


def nodepool(consolidate_after: str | None = "30s", **template_spec: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": [{"key": L.CAPACITY_TYPE, "operator": "In", "values": ["on-demand", "spot"]}],
        **template_spec}}, "disruption": {}}
    if consolidate_after is not None:
        spec["disruption"]["consolidateAfter"] = consolidate_after
    return {"metadata": {"name": "general"}, "spec": spec}


def nodeclass() -> dict[str, Any]:
    return {"metadata": {"name": "default"}, "spec": {"role": "R", "amiSelectorTerms": [{"alias": "al2023@latest"}]},
            "status": {"amis": [{"id": "ami-amd", "requirements": [{"key": L.ARCH, "operator": "In",
                                                                     "values": ["amd64"]}]},
                                {"id": "ami-arm", "requirements": [{"key": L.ARCH, "operator": "In",
                                                                     "values": ["arm64"]}]}],
                       "subnets": [{"id": "subnet-a", "zone": "us-east-1a"}],
                       "securityGroups": [{"id": "sg-1"}, {"id": "sg-2"}]}}


def claim(pool: dict[str, Any] | None = None, *, initialized: float | None = T0, launched: bool = True,
          last_pod_event: float | None = None, created: float = T0, **meta: Any) -> dict[str, Any]:
    pool = pool or nodepool()
    conds = []
    if launched:
        conds.append({"type": "Launched", "status": "True", "reason": "Launched", "lastTransitionTime": stamp(created)})
    if initialized is not None:
        conds.append({"type": "Initialized", "status": "True", "reason": "Initialized",
                      "lastTransitionTime": stamp(initialized)})
    status: dict[str, Any] = {"conditions": conds, "nodeName": "node-1", "providerID": "fake:///i-1",
                              "imageID": "ami-amd"}
    if last_pod_event is not None:
        status["lastPodEventTime"] = stamp(last_pod_event)
    annotations = {L.NODEPOOL_HASH: nodepool_hash(pool), L.NODEPOOL_HASH_VERSION: NODEPOOL_HASH_VERSION,
                   **hash_annotations(nodeclass())}
    return {"metadata": {"name": "claim-1", "creationTimestamp": stamp(created), "annotations": annotations,
                         "labels": {L.NODEPOOL: "general", L.INSTANCE_TYPE: "m5.large", L.ZONE: "us-east-1a",
                                    L.CAPACITY_TYPE: "on-demand", L.ARCH: "amd64"}, **meta},
            "spec": {"nodeClassRef": {"name": "default"}}, "status": status}


# ---- Consolidatable -------------------------------------------------------------------------------------------------
def test_consolidatable_after_consolidate_after_since_initialization() -> None:
    pool = nodepool("30s")
    c = claim(pool, initialized=T0)
    assert consolidatable_at(c, pool) == T0 + 30
    assert not consolidatable(c, pool, T0 + 29) and consolidatable(c, pool, T0 + 30)


def test_last_pod_event_moves_the_window() -> None:
    pool = nodepool("5m")
    c = claim(pool, initialized=T0, last_pod_event=T0 + 1000)
    assert not consolidatable(c, pool, T0 + 1200) and consolidatable(c, pool, T0 + 1300)


def test_never_unset_and_uninitialized_are_not_consolidatable() -> None:
    assert consolidatable_at(claim(), nodepool("Never")) is None
    assert consolidatable_at(claim(), nodepool(None)) is None
    assert consolidatable_at(claim(initialized=None), nodepool("0s")) is None
    assert consolidatable(claim(), nodepool("0s"), T0)


def test_unreadable_consolidate_after_names_the_field() -> None:
    with pytest.raises(DisruptionRuleError, match=r"spec\.disruption\.consolidateAfter"):
        consolidatable_at(claim(), nodepool("soon"))


# ---- drift ------------------------------------------------------------------------------------------------------
def _types(*offerings: tuple[str, str], name: str = "m5.large") -> list[InstanceType]:
    return [InstanceType(name=name, labels={}, capacity={},
                         offerings=[Offering(zone=z, capacity_type=ct, price=0.1) for z, ct in offerings])]


def test_no_drift_for_an_unchanged_nodepool() -> None:
    pool = nodepool()
    assert drift_reason(claim(pool), pool, _types(("us-east-1a", "on-demand"))) is None


def test_static_fields_drift_behavioural_fields_do_not() -> None:
    pool = nodepool()
    c = claim(pool)
    changed = nodepool(taints=[{"key": "k", "effect": "NoSchedule"}])
    assert drift_reason(c, changed) == "NodePoolDrifted"
    behavioural = copy.deepcopy(pool)
    behavioural["spec"]["disruption"] = {"consolidateAfter": "1h", "budgets": [{"nodes": "0"}]}
    behavioural["spec"]["weight"] = 50
    behavioural["spec"]["limits"] = {"cpu": "10"}
    assert drift_reason(c, behavioural) is None
    reordered = nodepool(taints=[{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}])
    c2 = claim(reordered)
    assert drift_reason(c2, nodepool(taints=[{"key": "b", "effect": "NoSchedule"},
                                             {"key": "a", "effect": "NoSchedule"}])) is None


def test_requirements_drift() -> None:
    pool = nodepool()
    c = claim(pool)
    narrowed = copy.deepcopy(pool)
    narrowed["spec"]["template"]["spec"]["requirements"] = [
        {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["spot"]}]
    assert drift_reason(c, narrowed) == "RequirementsDrifted"
    custom = copy.deepcopy(pool)
    custom["spec"]["template"]["spec"]["requirements"].append({"key": "team", "operator": "In", "values": ["a"]})
    assert drift_reason(c, custom) == "RequirementsDrifted"  # a custom label the NodeClaim does not carry


def test_instance_type_not_found() -> None:
    pool = nodepool()
    c = claim(pool)
    assert drift_reason(c, pool, _types(("us-east-1a", "on-demand"), name="m6i.large")) == "InstanceTypeNotFound"
    assert drift_reason(c, pool, _types(("us-east-1b", "on-demand"))) == "InstanceTypeNotFound"
    assert drift_reason(c, pool, _types(("us-east-1a", "spot"))) == "InstanceTypeNotFound"
    assert drift_reason(c, pool, []) is None  # offerings unknown: no drift
    reserved = claim(pool)
    reserved["metadata"]["labels"][L.CAPACITY_TYPE] = "reserved"
    # a reserved NodeClaim may fall back to on-demand: its offering is still there
    assert instance_type_drift(reserved, _types(("us-east-1a", "on-demand"))) == ""


def test_nodeclass_drift_reasons() -> None:
    nc = nodeclass()
    c = claim()
    assert nodeclass_drift(c, nc, subnet_id="subnet-a", security_group_ids=["sg-2", "sg-1"]) == ""
    changed = copy.deepcopy(nc)
    changed["spec"]["tags"] = {"team": "a"}
    assert nodeclass_drift(c, changed) == "NodeClassDrift"
    other_ami = copy.deepcopy(nc)
    other_ami["status"]["amis"][0]["id"] = "ami-new"
    assert nodeclass_drift(c, other_ami) == "AMIDrift"
    assert nodeclass_drift(c, nc, security_group_ids=["sg-1"]) == "SecurityGroupDrift"
    assert nodeclass_drift(c, nc, subnet_id="subnet-z") == "SubnetDrift"
    assert nodeclass_drift(c, nc, reservation_id="cr-gone") == "CapacityReservationDrift"


# ---- hash versions ----------------------------------------------------------------------------------------------
def _stamped_by(version_pool: str, version_class: str) -> dict[str, Any]:
    c = claim()
    c["metadata"]["annotations"] = {L.NODEPOOL_HASH: "123", L.NODEPOOL_HASH_VERSION: version_pool,
                                    L.EC2NODECLASS_HASH: "456", L.EC2NODECLASS_HASH_VERSION: version_class}
    return c


@pytest.mark.parametrize("pool_version,class_version", [
    (KARPENTER_NODEPOOL_HASH_VERSION, KARPENTER_NODECLASS_HASH_VERSION),  # moved from Karpenter
    ("karpy-v0", "karpy-v0"),  # an older karpy
])
def test_another_hash_version_is_restamped_never_drifted(pool_version: str, class_version: str) -> None:
    pool, nc = nodepool(), nodeclass()
    c = _stamped_by(pool_version, class_version)
    assert drift_reason(c, pool) is None and nodeclass_drift(c, nc) == ""
    stamp_ = restamp(c, pool, nc)
    assert stamp_ == {L.NODEPOOL_HASH_VERSION: NODEPOOL_HASH_VERSION, L.NODEPOOL_HASH: nodepool_hash(pool),
                      L.EC2NODECLASS_HASH_VERSION: EC2NODECLASS_HASH_VERSION,
                      **{L.EC2NODECLASS_HASH: hash_annotations(nc)[L.EC2NODECLASS_HASH]}}
    c["metadata"]["annotations"].update(stamp_)
    assert restamp(c, pool, nc) == {} and drift_reason(c, pool) is None and nodeclass_drift(c, nc) == ""


def test_a_hash_without_version_is_restamped_and_no_hash_is_left_alone() -> None:
    pool, nc = nodepool(), nodeclass()
    c = claim()
    c["metadata"]["annotations"] = {L.NODEPOOL_HASH: "1"}
    assert restamp(c, pool, nc) == {L.NODEPOOL_HASH: nodepool_hash(pool),
                                    L.NODEPOOL_HASH_VERSION: NODEPOOL_HASH_VERSION}
    c["metadata"]["annotations"] = {}
    assert restamp(c, pool, nc) == {}


def test_an_already_drifted_nodeclaim_keeps_its_hash_when_restamped() -> None:
    c = _stamped_by(KARPENTER_NODEPOOL_HASH_VERSION, EC2NODECLASS_HASH_VERSION)
    c["status"]["conditions"].append({"type": "Drifted", "status": "True", "reason": "NodePoolDrifted"})
    assert restamp(c, nodepool(), nodeclass()) == {L.NODEPOOL_HASH_VERSION: NODEPOOL_HASH_VERSION}


def _karpenter_static_drift(nodepool_ann: dict[str, str], claim_ann: dict[str, str]) -> str:
    """Karpenter's areStaticFieldsDrifted (pkg/controllers/nodeclaim/disruption/drift.go), restated as the model
    Karpenter applies to the annotations karpy leaves behind."""
    keys = (L.NODEPOOL_HASH, L.NODEPOOL_HASH_VERSION)
    if not all(k in nodepool_ann and k in claim_ann for k in keys):
        return ""
    if nodepool_ann[L.NODEPOOL_HASH_VERSION] != claim_ann[L.NODEPOOL_HASH_VERSION]:
        return ""
    return "NodePoolDrifted" if nodepool_ann[L.NODEPOOL_HASH] != claim_ann[L.NODEPOOL_HASH] else ""


def test_karpenter_taking_back_a_karpy_cluster_restamps() -> None:
    """Karpenter's nodepool hash controller re-stamps NodeClaims when the NodePool's stored version is not "v3";
    karpy leaves its own version on the NodePool, so that happens, and until it has Karpenter's drift check sees
    different versions and reports no drift."""
    from controller.nodeclaim.disruption import nodepool_hash_annotations

    pool = nodepool()
    karpy_pool_ann = nodepool_hash_annotations(pool)
    karpy_claim_ann = claim(pool)["metadata"]["annotations"]
    assert karpy_pool_ann[L.NODEPOOL_HASH_VERSION] != KARPENTER_NODEPOOL_HASH_VERSION  # Karpenter re-stamps
    karpenter_pool_ann = {L.NODEPOOL_HASH: "999", L.NODEPOOL_HASH_VERSION: KARPENTER_NODEPOOL_HASH_VERSION}
    assert _karpenter_static_drift(karpenter_pool_ann, karpy_claim_ann) == ""  # Karpenter's hash, karpy's stamp
    assert _karpenter_static_drift(karpy_pool_ann, {**karpy_claim_ann, L.NODEPOOL_HASH: "1"}) == "NodePoolDrifted"


def test_what_karpy_writes_is_not_compared_by_karpenter() -> None:
    """Karpenter compares hashes only under its own versions ("v3", "v4") and re-stamps any other: karpy's versions
    differ from both, so a NodeClaim karpy stamped is re-stamped by Karpenter, not drifted."""
    c = claim()
    ann = c["metadata"]["annotations"]
    assert ann[L.NODEPOOL_HASH_VERSION] == NODEPOOL_HASH_VERSION != KARPENTER_NODEPOOL_HASH_VERSION
    assert ann[L.EC2NODECLASS_HASH_VERSION] == EC2NODECLASS_HASH_VERSION != KARPENTER_NODECLASS_HASH_VERSION
    assert NODEPOOL_HASH_VERSION.startswith("karpy-") and EC2NODECLASS_HASH_VERSION.startswith("karpy-")


# ---- the conditions controller ---------------------------------------------------------------------------------
def _world(pool: dict[str, Any] | None = None, c: dict[str, Any] | None = None, **kw: Any) -> Any:
    kube = FakeKube(now=T0 + 60)
    pool = pool or nodepool()
    kube.add(R.NODEPOOLS, pool)
    kube.add(R.EC2NODECLASSES, nodeclass())
    kube.add(R.NODECLAIMS, c or claim(pool))
    return kube, NodeClaimDisruptionController(kube.cluster, kube, cloud=None, clock=lambda: kube.now, **kw)


def _conds(kube: FakeKube) -> dict[str, dict[str, Any]]:
    got = kube.get(R.NODECLAIMS, "claim-1")
    return {c["type"]: c for c in got["status"].get("conditions") or []}


def test_controller_marks_consolidatable_and_drifted_and_clears_them() -> None:
    kube, ctl = _world()
    kube.now = T0 + 10
    res = ctl.reconcile("claim-1")
    assert "Consolidatable" not in _conds(kube) and res.requeue_after == pytest.approx(20)
    kube.now = T0 + 31
    ctl.reconcile("claim-1")
    assert _conds(kube)["Consolidatable"]["status"] == "True"
    assert "Drifted" not in _conds(kube)
    kube.patch(R.NODEPOOLS, "general", {"spec": {"template": {"spec": {"taints": [{"key": "k", "effect":
                                                                                     "NoSchedule"}]}}}})
    ctl.reconcile("claim-1")
    assert _conds(kube)["Drifted"]["reason"] == "NodePoolDrifted"
    kube.patch(R.NODEPOOLS, "general", {"spec": {"template": {"spec": {"taints": None}},
                                                 "disruption": {"consolidateAfter": "Never"}}})
    ctl.reconcile("claim-1")
    assert "Drifted" not in _conds(kube) and "Consolidatable" not in _conds(kube)


def test_controller_restamps_karpenters_versions_without_drift() -> None:
    pool = nodepool()
    kube, ctl = _world(pool, _stamped_by(KARPENTER_NODEPOOL_HASH_VERSION, KARPENTER_NODECLASS_HASH_VERSION))
    ctl.reconcile("claim-1")
    ann = kube.get(R.NODECLAIMS, "claim-1")["metadata"]["annotations"]
    assert ann[L.NODEPOOL_HASH_VERSION] == NODEPOOL_HASH_VERSION and ann[L.NODEPOOL_HASH] == nodepool_hash(pool)
    assert ann[L.EC2NODECLASS_HASH_VERSION] == EC2NODECLASS_HASH_VERSION
    ctl.reconcile("claim-1")
    assert "Drifted" not in _conds(kube)


def test_rebalance_drift_sticks_only_with_the_gate() -> None:
    c = claim()
    c["status"]["conditions"].append({"type": "Drifted", "status": "True", "reason": "RebalanceRecommendation"})
    kube, ctl = _world(c=c, rebalance_drift=True)
    ctl.reconcile("claim-1")
    assert _conds(kube)["Drifted"]["reason"] == "RebalanceRecommendation"
    _, off = _world(c=c)
    kube2 = off.client
    off.reconcile("claim-1")
    assert "Drifted" not in _conds(kube2)


def test_instance_type_drift_is_looked_at_after_an_hour_and_then_every_half_hour() -> None:
    class Cloud:
        def __init__(self) -> None:
            self.calls = 0
            self.types = _types(("us-east-1a", "on-demand"))

        def get_instance_types(self, nodeclass: Any) -> list[InstanceType]:
            self.calls += 1
            return self.types

        def is_drifted(self, nodeclaim: Any, nodeclass: Any) -> str:
            return ""

    cloud = Cloud()
    kube, _ = _world()
    ctl = NodeClaimDisruptionController(kube.cluster, kube, cloud, clock=lambda: kube.now)
    kube.now = T0 + 1800
    ctl.reconcile("claim-1")
    assert cloud.calls == 0  # younger than an hour
    kube.now = T0 + 3700
    ctl.reconcile("claim-1")
    assert cloud.calls == 1 and "Drifted" not in _conds(kube)
    cloud.types = _types(("us-east-1a", "on-demand"), name="m6i.large")
    kube.now = T0 + 3700 + 600
    ctl.reconcile("claim-1")
    assert cloud.calls == 1  # found offered 10 minutes ago
    kube.now = T0 + 3700 + 1801
    ctl.reconcile("claim-1")
    assert cloud.calls == 2 and _conds(kube)["Drifted"]["reason"] == "InstanceTypeNotFound"


# ---- expiration -------------------------------------------------------------------------------------------------
def test_expires_at_and_termination_mode() -> None:
    c = claim(created=T0)
    assert expires_at(c) is None
    c["spec"]["expireAfter"] = "720h"
    assert expires_at(c) == T0 + 720 * 3600
    c["spec"]["expireAfter"] = "Never"
    assert expires_at(c) is None
    assert termination_mode(c) == "graceful"
    c["spec"]["terminationGracePeriod"] = "0s"
    assert termination_mode(c) == "forceful"
    c["spec"]["terminationGracePeriod"] = "1h"
    assert termination_mode(c) == "eventual"


def _sample(name: str, **labels: str) -> float:
    return M.REGISTRY.get_sample_value(name, labels) or 0.0


def test_expiration_deletes_at_once_and_counts() -> None:
    c = claim(created=T0, finalizers=[L.TERMINATION_FINALIZER])  # stays, terminating, as with the apiserver
    c["spec"]["expireAfter"] = "1h"
    kube, _ = _world(c=c)
    ctl = ExpirationController(kube.cluster, kube, clock=lambda: kube.now)
    kube.now = T0 + 1800
    assert ctl.reconcile("claim-1").requeue_after == pytest.approx(1800)
    labels = {"reason": "expired", "nodepool": "general", "capacity_type": "on-demand", "consolidation_policy": "",
              "termination_mode": "graceful"}
    before = _sample("karpenter_nodeclaims_disrupted_total", **labels)
    pre_delete = kube.get(R.NODECLAIMS, "claim-1")
    kube.now = T0 + 3600
    ctl.reconcile("claim-1")
    assert ("delete", "nodeclaims", "claim-1") in kube.writes
    assert _sample("karpenter_nodeclaims_disrupted_total", **labels) == before + 1
    assert _sample("karpenter_nodes_disrupted_total", reason="expired", nodepool="general",
                   capacity_type="on-demand") >= 1
    # a pass on a copy from before the delete (the watch has not caught up) deletes and counts nothing more
    kube.cluster.nodeclaim = lambda name: NodeClaimView(pre_delete)  # the cache holds views
    deletes = sum(1 for w in kube.writes if w[0] == "delete")
    ctl.reconcile("claim-1")
    assert sum(1 for w in kube.writes if w[0] == "delete") == deletes
    assert _sample("karpenter_nodeclaims_disrupted_total", **labels) == before + 1


# ---- pod events -------------------------------------------------------------------------------------------------
def _pod(node: str = "", phase: str = "Running", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default", **meta}, "spec": {"nodeName": node},
            "status": {"phase": phase}}


def test_which_pod_events_count() -> None:
    assert pod_event_node("MODIFIED", _pod(), _pod("n")) == "n"  # bound
    assert pod_event_node("MODIFIED", _pod("n"), _pod("n", "Succeeded")) == "n"  # terminal
    assert pod_event_node("MODIFIED", _pod("n"), _pod("n", deletionTimestamp=stamp(T0))) == "n"  # terminating
    assert pod_event_node("DELETED", _pod("n"), None) == "n"
    assert pod_event_node("MODIFIED", _pod("n"), _pod("n")) == ""  # nothing that matters changed
    ds = _pod("n", ownerReferences=[{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d"}])
    assert pod_event_node("ADDED", None, ds) == ""


def test_pod_events_stamp_with_a_ten_second_dedupe() -> None:
    kube, _ = _world()
    kube.add(R.NODES, {"metadata": {"name": "node-1"}, "spec": {"providerID": "fake:///i-1"}})
    ctl = PodEventsController(kube.cluster, kube, clock=lambda: kube.now)
    kube.now = T0 + 100
    assert ctl.stamp("node-1")
    assert kube.get(R.NODECLAIMS, "claim-1")["status"]["lastPodEventTime"] == stamp(T0 + 100)
    kube.now = T0 + 105
    assert not ctl.stamp("node-1")
    kube.now = T0 + 111
    assert ctl.stamp("node-1")
    assert kube.get(R.NODECLAIMS, "claim-1")["status"]["lastPodEventTime"] == stamp(T0 + 111)


# ---- the RebalanceRecommendationDrift gate in the interruption controller ---------------------------------------
def test_rebalance_recommendation_marks_drifted_only_with_the_gate() -> None:
    from tests.unit.test_interruption_actions import _controller, _event

    class PatchingClient:
        def __init__(self) -> None:
            self.patches: list[tuple[str, str, Any, str | None]] = []
            self.deleted: list[Any] = []

        def patch(self, res: Any, name: str, body: Any, subresource: str | None = None) -> dict[str, Any]:
            self.patches.append((res.plural, name, body, subresource))
            return {}

    client = PatchingClient()
    ctl, *_ = _controller(client=client)
    ctl.handle(_event("Rebalance"))
    assert client.patches == []  # gate off: an event only, as Karpenter
    ctl.rebalance_drift = True
    ctl.handle(_event("Rebalance"))
    [(plural, _name, body, sub)] = client.patches
    [cond] = body["status"]["conditions"]
    assert (plural, sub, cond["type"], cond["status"], cond["reason"]) == (
        "nodeclaims", "status", "Drifted", "True", "RebalanceRecommendation")
    assert client.deleted == []


def test_the_nodeclass_hash_controller_restamps_a_drifted_nodeclaims_version_only() -> None:
    from controller.nodeclass.hash import reconcile_hash

    kube = FakeKube(now=T0)
    nc = nodeclass()
    nc["metadata"]["annotations"] = {L.EC2NODECLASS_HASH: "1", L.EC2NODECLASS_HASH_VERSION: "v4"}  # Karpenter's
    kube.add(R.EC2NODECLASSES, nc)
    for name, drifted in (("plain", False), ("drifted", True)):
        c = claim()
        c["metadata"]["name"] = name
        c["metadata"]["annotations"] = {L.EC2NODECLASS_HASH: "1", L.EC2NODECLASS_HASH_VERSION: "v4"}
        if drifted:
            c["status"]["conditions"].append({"type": "Drifted", "status": "True", "reason": "AMIDrift"})
        kube.add(R.NODECLAIMS, c)
    reconcile_hash(kube, kube.cluster, kube.cluster.nodeclass("default") or {})
    current = hash_annotations(nodeclass())
    assert kube.get(R.NODECLAIMS, "plain")["metadata"]["annotations"] == current
    assert kube.get(R.NODECLAIMS, "drifted")["metadata"]["annotations"] == {
        L.EC2NODECLASS_HASH: "1", L.EC2NODECLASS_HASH_VERSION: EC2NODECLASS_HASH_VERSION}
