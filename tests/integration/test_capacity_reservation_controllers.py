"""Karpenter's capacity reservation controllers against the real control plane and LocalStack's EC2.

capacitytype: two NodeClaims launched into a reservation (through the AWS provider, labelled reserved); EC2 still
reports one instance in its reservation and the other not (the reservation ended): the second NodeClaim and its
registered Node become on-demand without the reservation labels, the first is untouched.
expiration: a NodeClaim in a capacity block that ends in 30 minutes is deleted; one in a block ending in 2 hours is
kept.

LocalStack stand-ins (the rest is LocalStack's EC2 and the real kube-apiserver):
- LocalStack's DescribeInstances never reports a capacity reservation on an instance: an after-call hook adds the
  reservation (CapacityReservationId, capacity-reservations-only) to the instance that is still in one.
- DescribeCapacityReservations is not implemented: a before-call hook answers it.
- CreateFleet for a capacity block launches nothing: the expiration test's NodeClaims are launched into ordinary
  reservations, which the hooked DescribeCapacityReservations then describes as capacity blocks.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from controller.api import labels as L
from controller.capacityreservation.controllers import CapacityTypeController, ExpirationController
from controller.cloud.aws import instances
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import NotFoundError
from tests.integration.aws_world import launch_for, make_world
from tests.kubetest import remove_claims_and_nodes, wait_for

pytestmark = [pytest.mark.localstack, pytest.mark.kube,
              pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]
ZONE = "us-east-1a"


@pytest.fixture(scope="module")
def world(aws_client: Callable[..., Any]) -> tuple[Any, dict[str, Any]]:
    return make_world(aws_client("ec2"), aws_client("ssm"), aws_client("iam"), cidr_octet=43, zones=(ZONE,),
                      prices={"m5.large": 0.096})


def _reserved_claim(kc: KubeClient, provider: Any, nodeclass: dict[str, Any], rid: str) -> tuple[dict[str, Any], str]:
    """A NodeClaim launched into reservation rid, with the labels and providerID the lifecycle controller writes."""
    name = f"cr-{uuid.uuid4().hex[:6]}"
    created = kc.create(R.NODECLAIMS, {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {L.NODEPOOL: "default"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": [{"key": L.CAPACITY_TYPE, "operator": "In", "values": ["reserved"]},
                                  {"key": L.CAPACITY_RESERVATION_ID, "operator": "In", "values": [rid]},
                                  {"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]}]}})
    provider.reservations.sync({rid: 1})
    with_status = {**nodeclass, "status": {"capacityReservations": [
        {"id": rid, "availabilityZone": ZONE, "instanceType": "m5.large", "instanceMatchCriteria": "targeted",
         "ownerID": "000000000000", "reservationType": "default", "state": "active"}]}}
    node = launch_for(provider, created, with_status)
    assert node.labels[L.CAPACITY_RESERVATION_ID] == rid
    kc.patch(R.NODECLAIMS, name, {"metadata": {"labels": {**node.labels, L.NODEPOOL: "default"}}})
    kc.patch(R.NODECLAIMS, name, {"status": {"providerID": node.provider_id}}, subresource="status")
    return kc.get(R.NODECLAIMS, name), node.provider_id


def _node(kc: KubeClient, claim: dict[str, Any], pid: str) -> str:
    name = f"ip-{uuid.uuid4().hex[:8]}"
    kc.create(R.NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "labels": {**claim["metadata"]["labels"], L.REGISTERED: "true"}}, "spec": {"providerID": pid}})
    return name


def test_nodes_whose_reservation_ended_are_relabelled_on_demand(kube, world):
    kc, cluster, _ = kube
    provider, nodeclass = world
    ec2 = provider.ec2
    kept_rid, ended_rid = (f"cr-{uuid.uuid4().hex[:17]}" for _ in range(2))
    claims: list[str] = []
    nodes: list[str] = []
    kept, kept_pid = _reserved_claim(kc, provider, nodeclass, kept_rid)
    claims.append(kept["metadata"]["name"])
    ended, ended_pid = _reserved_claim(kc, provider, nodeclass, ended_rid)
    claims.append(ended["metadata"]["name"])
    _, kept_instance = instances.parse_provider_id(kept_pid)

    def still_reserved(parsed: dict[str, Any], **_: Any) -> None:
        for r in parsed.get("Reservations", []):
            for d in r.get("Instances", []):
                if d.get("InstanceId") == kept_instance:
                    d["CapacityReservationId"] = kept_rid
                    d["CapacityReservationSpecification"] = {
                        "CapacityReservationPreference": "capacity-reservations-only"}

    ec2.meta.events.register("after-call.ec2.DescribeInstances", still_reserved)
    try:
        nodes += [_node(kc, kept, kept_pid), _node(kc, ended, ended_pid)]
        wait_for("NodeClaims and Nodes in the cache", lambda: all(cluster.nodeclaim(c) for c in claims) and all(
            cluster.node(n) for n in nodes))
        updated = CapacityTypeController(cluster, kc, provider).run_once()
        assert updated == [ended["metadata"]["name"]]
        for obj in (kc.get(R.NODECLAIMS, ended["metadata"]["name"]), kc.get(R.NODES, nodes[1])):
            labels = obj["metadata"]["labels"]
            assert labels[L.CAPACITY_TYPE] == L.CAPACITY_TYPE_ON_DEMAND
            assert not {L.CAPACITY_RESERVATION_ID, L.CAPACITY_RESERVATION_TYPE,
                        L.CAPACITY_RESERVATION_INTERRUPTIBLE} & set(labels)
        for obj in (kc.get(R.NODECLAIMS, kept["metadata"]["name"]), kc.get(R.NODES, nodes[0])):
            assert obj["metadata"]["labels"][L.CAPACITY_TYPE] == L.CAPACITY_TYPE_RESERVED
            assert obj["metadata"]["labels"][L.CAPACITY_RESERVATION_ID] == kept_rid
    finally:
        ec2.meta.events.unregister("after-call.ec2.DescribeInstances", still_reserved)
        remove_claims_and_nodes(kc, claims, nodes)


def test_nodeclaims_of_an_expiring_capacity_block_are_deleted(kube, world):
    kc, cluster, _ = kube
    provider, nodeclass = world
    ec2 = provider.ec2
    now = dt.datetime.now(dt.UTC)
    soon, later = (f"cr-{uuid.uuid4().hex[:17]}" for _ in range(2))
    ends = {soon: now + dt.timedelta(minutes=30), later: now + dt.timedelta(hours=2)}
    claims: list[str] = []

    def answer(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        return AWSResponse("https://ec2", 200, {}, None), {"CapacityReservations": [
            {"CapacityReservationId": rid, "InstanceType": "m5.large", "AvailabilityZone": ZONE,
             "OwnerId": "000000000000", "InstanceMatchCriteria": "targeted", "State": "active",
             "ReservationType": "capacity-block", "AvailableInstanceCount": 0, "EndDate": end}
            for rid, end in ends.items() if rid in str(params)]}

    ec2.meta.events.register("before-call.ec2.DescribeCapacityReservations", answer)
    try:
        # launched as ordinary reservations: LocalStack fills no capacity-block CreateFleet (no instances, no error);
        # what the controller reads is the reservation EC2 describes, a capacity block
        expiring, _ = _reserved_claim(kc, provider, nodeclass, soon)
        claims.append(expiring["metadata"]["name"])
        lasting, _ = _reserved_claim(kc, provider, nodeclass, later)
        claims.append(lasting["metadata"]["name"])
        wait_for("NodeClaims in the cache", lambda: all(
            (cluster.nodeclaim(c) or {}).get("metadata", {}).get("labels", {}).get(L.CAPACITY_RESERVATION_ID)
            for c in claims))
        deleted = ExpirationController(cluster, kc, ec2).run_once()
        assert deleted == [expiring["metadata"]["name"]]
        with pytest.raises(NotFoundError):
            kc.get(R.NODECLAIMS, expiring["metadata"]["name"])
        assert kc.get(R.NODECLAIMS, lasting["metadata"]["name"])["metadata"].get("deletionTimestamp") is None
    finally:
        ec2.meta.events.unregister("before-call.ec2.DescribeCapacityReservations", answer)
        remove_claims_and_nodes(kc, claims, [])
