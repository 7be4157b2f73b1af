"""`karpy controller` with an EC2NodeClass that selects a capacity reservation of one m5.large: the EC2NodeClass
status lists it, the first of two pods that need a node each lands on a `reserved` NodeClaim launched into the
reservation (with its labels on the NodeClaim and the Node), and the second, once the reservation is used, on
on-demand capacity: a reservation with one free instance backs one NodeClaim.

LocalStack serves no DescribeCapacityReservations and reports no reservation on instances: the controller's AWS
endpoint is tests/e2e/ec2proxy.py, a pass-through proxy to LocalStack that answers DescribeCapacityReservations and
adds the reservation to the instances launched through a template targeting it (see its docstring)."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import World, nodepool_name
from tests.e2e.ec2proxy import EC2Proxy
from tests.e2e.harness import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.localstack]
CT = "karpenter.sh/capacity-type"
RID = "karpenter.k8s.aws/capacity-reservation-id"


@pytest.fixture
def proxy(world: World) -> Iterator[EC2Proxy]:
    rid = f"cr-{uuid.uuid4().hex[:17]}"
    p = EC2Proxy(world.endpoint, {rid: {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1a", "Total": 1}},
                 world.ec2).start()
    try:
        yield p
    finally:
        p.stop()


def _status_reservations(world: World, name: str) -> list[dict[str, Any]] | None:
    obj = world.custom.get_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", name)
    return (obj.get("status") or {}).get("capacityReservations") or None


def _bound_nodes(world: World, namespace: str, app: str, n: int) -> list[str] | None:
    nodes = [p.spec.node_name for p in world.bound_pods(namespace, app)]
    return nodes if len(nodes) == n else None


def test_a_pod_lands_on_a_reserved_nodeclaim_and_the_reservation_backs_one(world: World, kubelet, start_controller,
                                                                           proxy: EC2Proxy):
    rid = next(iter(proxy.reservations))
    base = world.custom.get_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", world.nodeclass)
    nodeclass = f"reserved-{uuid.uuid4().hex[:5]}"
    world.custom.create_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", {
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": nodeclass},
        "spec": {**base["spec"], "capacityReservationSelectorTerms": [{"id": rid}]}})
    pool = nodepool_name("reserved")
    world.nodepool(pool, nodeClassRef={"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass},
                   requirements=[{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                                 {"key": "node.kubernetes.io/instance-type", "operator": "In",
                                  "values": ["m5.large"]},
                                 {"key": CT, "operator": "In", "values": ["reserved", "on-demand"]}])
    ns = world.namespace()
    controller = start_controller(AWS_ENDPOINT_URL=proxy.url)
    entries = wait_for("status.capacityReservations", functools.partial(_status_reservations, world, nodeclass),
                       timeout=120)
    assert [(e["id"], e["instanceType"], e["availabilityZone"]) for e in entries] == [(rid, "m5.large", "us-east-1a")]
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}]}}
    world.deployment(ns, "web", 2, pool, cpu="100m", affinity=anti)
    nodes = wait_for("both pods bound", functools.partial(_bound_nodes, world, ns, "web", 2), timeout=240)
    by_type = {}
    for name in nodes:
        labels = world.core.read_node(name).metadata.labels
        by_type[labels[CT]] = labels
    assert set(by_type) == {"reserved", "on-demand"}, by_type
    reserved = by_type["reserved"]
    assert reserved[RID] == rid and reserved["karpenter.k8s.aws/capacity-reservation-type"] == "default"
    assert reserved["karpenter.k8s.aws/capacity-reservation-interruptible"] == "false"
    assert RID not in by_type["on-demand"]
    claims = {c["metadata"]["labels"][CT]: c for c in world.nodeclaims(pool)}
    assert claims["reserved"]["metadata"]["labels"][RID] == rid
    # the scheduler wrote the reservation into the NodeClaim's requirements
    reqs = {r["key"]: r["values"] for r in claims["reserved"]["spec"]["requirements"]}
    assert reqs[CT] == ["reserved"] and reqs[RID] == [rid]
    assert "CreateFleet" in proxy.asked and len(proxy.launched) == 1
    assert controller.stop() == 0
