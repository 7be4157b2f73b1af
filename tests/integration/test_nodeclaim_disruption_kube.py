"""The NodeClaim disruption conditions, expiration and pod events against a real control plane: Consolidatable and
Drifted appear and change as the NodePool changes, NodeClaims stamped under Karpenter's hash versions are re-stamped
and not drifted, an expired NodeClaim is deleted, and lastPodEventTime moves when pods are bound and leave. The
controllers run with their work queues and informer handlers as `karpy controller` wires them; no cloud is involved
(the cloud provider's drift checks have their own tests), so the only drift here is the NodePool's."""

# ruff: noqa: F811 - tests take the imported fixtures as their arguments
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from controller import metrics as M
from controller.api import conditions as C
from controller.api import labels as L
from controller.kube import resources as R
from controller.nodeclaim.controllers import NodeClaimControllers, build
from controller.provisioning.nodeclaimtemplate import NODEPOOL_HASH_VERSION, nodepool_hash
from tests.integration.test_disruption_kube import _force_delete, candidate, pool  # noqa: F401
from tests.integration.test_termination_kube import World, world  # noqa: F401
from tests.kubetest import wait_for

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def controllers(world: World) -> Iterator[NodeClaimControllers]:
    """The NodeClaim controllers on the module's cache, running as the leader."""
    stop = threading.Event()
    out = build(world.cluster, world.client, None, world.recorder, {}, lambda: True)
    for c in out.controllers:
        c.start(stop)
    try:
        yield out
    finally:
        stop.set()


def _conditions(world: World, name: str) -> dict[str, Obj]:
    got = world.client.get(R.NODECLAIMS, name)
    return {c["type"]: c for c in (got.get("status") or {}).get("conditions") or []}


def _stamp(world: World, claim: str, pool: str, version: str = NODEPOOL_HASH_VERSION, value: str = "") -> None:
    stored = wait_for("the cache to see the NodePool", lambda: world.cluster.nodepool(pool))
    world.client.patch(R.NODECLAIMS, claim, {"metadata": {"annotations": {
        L.NODEPOOL_HASH: value or nodepool_hash(stored), L.NODEPOOL_HASH_VERSION: version}}})


def _enqueue(controllers: NodeClaimControllers, name: str) -> None:
    controllers.disruption.queue.add(name)


def test_conditions_follow_the_nodepool(world: World, pool: str, controllers: NodeClaimControllers) -> None:
    cand = candidate(world, pool)
    _stamp(world, cand.name, pool)
    # consolidateAfter defaults to 0s: Consolidatable once initialized; nothing drifted
    wait_for("Consolidatable", lambda: C.is_true({"conditions": list(_conditions(world, cand.name).values())},
                                                 "Consolidatable"))
    assert "Drifted" not in _conditions(world, cand.name)
    # the NodePool carries its hash under karpy's version (Karpenter taking over re-stamps rather than compares)
    ann = wait_for("the NodePool's hash annotations", lambda: (
        a := world.client.get(R.NODEPOOLS, pool)["metadata"].get("annotations") or {}).get(L.NODEPOOL_HASH_VERSION)
        == NODEPOOL_HASH_VERSION and a)
    assert ann[L.NODEPOOL_HASH] == nodepool_hash(world.client.get(R.NODEPOOLS, pool))
    # a static template field changes: NodePoolDrifted
    world.client.patch(R.NODEPOOLS, pool, {"spec": {"template": {"metadata": {"labels": {"team": "web"}}}}})
    wait_for("Drifted NodePoolDrifted", lambda: (_conditions(world, cand.name).get("Drifted") or {}).get("reason")
             == "NodePoolDrifted")
    # back as it was: no longer drifted
    world.client.patch(R.NODEPOOLS, pool, {"spec": {"template": {"metadata": {"labels": None}}}})
    wait_for("Drifted cleared", lambda: "Drifted" not in _conditions(world, cand.name))
    # the requirements no longer admit its instance type: RequirementsDrifted
    world.client.patch(R.NODEPOOLS, pool, {"spec": {"template": {"spec": {"requirements": [
        {"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]}]}}}})
    wait_for("Drifted RequirementsDrifted", lambda: (_conditions(world, cand.name).get("Drifted") or {})
             .get("reason") == "RequirementsDrifted")
    # consolidation turned off: Consolidatable goes
    world.client.patch(R.NODEPOOLS, pool, {"spec": {"disruption": {"consolidateAfter": "Never"}}})
    wait_for("Consolidatable removed", lambda: "Consolidatable" not in _conditions(world, cand.name))


@pytest.mark.parametrize("version", ["v3", "karpy-v0"])  # Karpenter's, an older karpy's
def test_another_hash_version_is_restamped_not_drifted(world: World, pool: str, controllers: NodeClaimControllers,
                                                       version: str) -> None:
    cand = candidate(world, pool)
    world.client.patch(R.NODEPOOLS, pool, {"spec": {"template": {"metadata": {"labels": {"team": "web"}}}}})
    stored = wait_for("the new template in the cache", lambda: (world.cluster.nodepool(pool) or {}).get("spec", {})
                      .get("template", {}).get("metadata", {}).get("labels", {}).get("team") and
                      world.cluster.nodepool(pool))
    _stamp(world, cand.name, pool, version=version, value="12345")  # a hash of another function
    _enqueue(controllers, cand.name)
    ann = wait_for("the re-stamp", lambda: (a := world.client.get(R.NODECLAIMS, cand.name)["metadata"]
                                            .get("annotations") or {}).get(L.NODEPOOL_HASH_VERSION)
                   == NODEPOOL_HASH_VERSION and a)
    assert ann[L.NODEPOOL_HASH] == nodepool_hash(stored)
    # a pass after the re-stamp (it removes Consolidatable) finds no drift
    world.client.patch(R.NODEPOOLS, pool, {"spec": {"disruption": {"consolidateAfter": "Never"}}})
    wait_for("a pass after the re-stamp", lambda: "Consolidatable" not in _conditions(world, cand.name))
    assert "Drifted" not in _conditions(world, cand.name)


def test_the_same_hash_version_with_another_hash_drifts(world: World, pool: str,
                                                        controllers: NodeClaimControllers) -> None:
    """The control for the re-stamp test: under karpy's own version, a hash that differs is drift."""
    cand = candidate(world, pool)
    _stamp(world, cand.name, pool, value="12345")
    _enqueue(controllers, cand.name)
    wait_for("Drifted NodePoolDrifted", lambda: (_conditions(world, cand.name).get("Drifted") or {}).get("reason")
             == "NodePoolDrifted")
    assert world.client.get(R.NODECLAIMS, cand.name)["metadata"]["annotations"][L.NODEPOOL_HASH] == "12345"


def test_an_expired_nodeclaim_is_deleted(world: World, pool: str, controllers: NodeClaimControllers) -> None:
    name = f"{pool}-exp-{uuid.uuid4().hex[:6]}"
    world.cleanups.append(lambda: _force_delete(world, R.NODECLAIMS, name))
    labels = {L.NODEPOOL: pool, L.CAPACITY_TYPE: "on-demand", L.INSTANCE_TYPE: "m5.large"}
    world.client.create(R.NODECLAIMS, {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": labels, "finalizers": [L.TERMINATION_FINALIZER]},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "expireAfter": "3s",
                 "requirements": [{"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]}]}})
    metric = {"reason": "expired", "nodepool": pool, "capacity_type": "on-demand", "consolidation_policy": "",
              "termination_mode": "graceful"}
    before = M.REGISTRY.get_sample_value("karpenter_nodeclaims_disrupted_total", metric) or 0.0
    deleting = wait_for("the expired NodeClaim deleted", lambda: world.client.get(R.NODECLAIMS, name)["metadata"]
                        .get("deletionTimestamp"), timeout=90)
    created = C.parse_time(world.client.get(R.NODECLAIMS, name)["metadata"]["creationTimestamp"])
    assert created is not None and (C.parse_time(deleting) or 0) >= created + 3
    assert M.REGISTRY.get_sample_value("karpenter_nodeclaims_disrupted_total", metric) == before + 1


def test_last_pod_event_time_moves(world: World, pool: str, controllers: NodeClaimControllers) -> None:
    cand = candidate(world, pool)
    ns = "default"
    pod = f"pe-{uuid.uuid4().hex[:6]}"
    world.cleanups.append(lambda: world.client.delete(R.PODS, pod, ns, grace_period_seconds=0))
    world.client.create(R.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": ns},
                                 "spec": {"nodeName": cand.node_name, "containers": [{"name": "c", "image": "x"}]}})
    first = wait_for("lastPodEventTime after the bind", lambda: (world.client.get(R.NODECLAIMS, cand.name)
                                                                  .get("status") or {}).get("lastPodEventTime"))
    # the written time is cut to the second: the controller's own clock may be up to 1 s past it
    deadline = (C.parse_time(first) or 0) + 12.0
    wait_for("the 10 s dedupe window to pass", lambda: time.time() > deadline, timeout=60)
    world.client.delete(R.PODS, pod, ns, grace_period_seconds=0)
    later = wait_for("lastPodEventTime after the pod left", lambda: (
        t := (world.client.get(R.NODECLAIMS, cand.name).get("status") or {}).get("lastPodEventTime")) != first and t)
    assert (C.parse_time(later) or 0) > (C.parse_time(first) or 0)
    # a moved lastPodEventTime restarts consolidateAfter
    world.client.patch(R.NODEPOOLS, pool, {"spec": {"disruption": {"consolidateAfter": "1h"}}})
    wait_for("Consolidatable removed inside consolidateAfter", lambda: "Consolidatable"
             not in _conditions(world, cand.name))


# ---- the AWS cloud provider's drift checks against LocalStack's EC2 ----------------------------------------------
@pytest.fixture(scope="module")
def aws_world(aws_client: Any) -> Any:
    from tests.integration.aws_world import make_world

    ec2 = aws_client("ec2")
    provider, nodeclass = make_world(ec2, aws_client("ssm"), aws_client("iam"), cidr_octet=47,
                                     zones=("us-east-1a",), prices={"m5.large": 0.096})
    return provider, nodeclass, ec2


@pytest.mark.localstack
def test_aws_provider_drift_reasons(aws_world: Any) -> None:
    import copy

    from controller.api.nodeclasshash import hash_annotations
    from tests.integration.aws_world import launch_for

    provider, base, ec2 = aws_world
    claim: Obj = {"metadata": {"name": f"default-{uuid.uuid4().hex[:6]}", "uid": str(uuid.uuid4()),
                               "labels": {L.NODEPOOL: "default"}},
                  "spec": {"requirements": [
                      {"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]},
                      {"key": L.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
                      "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}
    node = launch_for(provider, claim, base)
    try:
        described = ec2.describe_instances(InstanceIds=[node.provider_id.rsplit("/", 1)[1]])
        inst = described["Reservations"][0]["Instances"][0]
        claim["metadata"]["labels"].update(node.labels)
        claim["metadata"]["annotations"] = hash_annotations(base)
        claim["status"] = {"providerID": node.provider_id, "imageID": node.image_id}
        nodeclass = copy.deepcopy(base)
        nodeclass["status"] = {
            "subnets": [{"id": inst["SubnetId"], "zone": "us-east-1a"}],
            "securityGroups": [{"id": g["GroupId"]} for g in inst["SecurityGroups"]],
            "amis": [{"id": node.image_id, "requirements": [
                {"key": L.ARCH, "operator": "In", "values": [node.labels.get(L.ARCH, "amd64")]}]}]}
        calls: list[str] = []
        ec2.meta.events.register("before-call.ec2.DescribeInstances", lambda **_: calls.append("describe"))
        assert provider.is_drifted(claim, nodeclass) == ""
        assert provider.is_drifted(claim, nodeclass) == ""
        assert len(calls) == 1  # the cluster's instances are described once for a minute, not once per check

        def changed(path: str, value: Any) -> Obj:
            out = copy.deepcopy(nodeclass)
            out["status"][path] = value
            return out

        assert provider.is_drifted(claim, changed("subnets", [{"id": "subnet-0new", "zone": "us-east-1a"}])) == \
            "SubnetDrift"
        assert provider.is_drifted(claim, changed("securityGroups", [{"id": "sg-0new"}])) == "SecurityGroupDrift"
        assert provider.is_drifted(claim, changed("amis", [{"id": "ami-0new"}])) == "AMIDrift"
        respec = copy.deepcopy(nodeclass)
        respec["spec"]["tags"] = {"team": "other"}
        assert provider.is_drifted(claim, respec) == "NodeClassDrift"
        claim["metadata"]["annotations"][L.EC2NODECLASS_HASH_VERSION] = "v4"  # Karpenter's stamp: never drift
        assert provider.is_drifted(claim, respec) == ""
    finally:
        provider.delete(node.provider_id)
