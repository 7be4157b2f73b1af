"""Launching into capacity reservations against LocalStack's EC2, as Karpenter's AWS provider does: reserved offerings
from the EC2NodeClass status, a launch template targeting the reservation, CreateFleet's request, the reservation's
labels on the launched node, the reservation counted down (and up again once its instance is gone), and a refused
reservation (ReservationCapacityExceeded) marked as having no room with the launch falling back to on-demand.

What LocalStack does not serve, and how it is stood in for (each in the test that needs it):
- DescribeCapacityReservations (and CreateCapacityReservation) are not implemented: a botocore before-call hook on
  the real EC2 client answers DescribeCapacityReservations with one reservation.
- CreateFleet ignores a launch template's CapacityReservationSpecification (it launches plain on-demand and does not
  report a reservation on the instance): what is checked is the request karpy sends and the template LocalStack
  stores; a refused reservation is a CreateFleet error returned by a before-call hook for the reserved request.
Everything else (launch templates, CreateFleet, DescribeInstances, the instances) is LocalStack's.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from controller.api import labels as L
from controller.cloud.aws import capacityreservations
from controller.cloud.aws.errors import InsufficientCapacityError, NodeClaimNotFoundError
from controller.cloud.aws.launchtemplates import NAME_PREFIX
from controller.cloud.provider import NodeClass
from tests.integration.aws_world import launch_for, make_world

pytestmark = pytest.mark.localstack
ZONE = "us-east-1a"


@pytest.fixture(scope="module")
def world(aws_client):
    ec2 = aws_client("ec2")
    provider, nodeclass = make_world(ec2, aws_client("ssm"), aws_client("iam"), cidr_octet=41, zones=(ZONE,),
                                     prices={"m5.large": 0.096, "m5.xlarge": 0.192})
    return {"ec2": ec2, "provider": provider, "nodeclass": nodeclass, "rid": f"cr-{uuid.uuid4().hex[:17]}"}


def _reservation(rid: str, available: int = 1) -> dict[str, Any]:
    return {"CapacityReservationId": rid, "InstanceType": "m5.large", "AvailabilityZone": ZONE,
            "OwnerId": "000000000000", "InstanceMatchCriteria": "targeted", "State": "active",
            "ReservationType": "default", "TotalInstanceCount": 2, "AvailableInstanceCount": available,
            "EndDate": dt.datetime.now(dt.UTC) + dt.timedelta(days=1)}


def _resolve(world: dict[str, Any], available: int) -> dict[str, Any]:
    """The EC2NodeClass with status.capacityReservations as the status controller resolves them; LocalStack has no
    DescribeCapacityReservations, so a before-call hook answers it (the request itself is built and checked by
    botocore against the API model)."""
    ec2 = world["ec2"]
    asked: list[dict[str, Any]] = []

    def answer(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        asked.append(params)
        return AWSResponse("https://ec2", 200, {}, None), {
            "CapacityReservations": [_reservation(world["rid"], available)]}

    ec2.meta.events.register("before-call.ec2.DescribeCapacityReservations", answer)
    try:
        entries = capacityreservations.resolve(ec2, [{"id": world["rid"]}], dt.datetime.now(dt.UTC),
                                               world["provider"].reservations)
    finally:
        ec2.meta.events.unregister("before-call.ec2.DescribeCapacityReservations", answer)
    assert asked and world["rid"] in str(asked[0])  # the serialized request asks for the reservation by id
    return {**world["nodeclass"], "spec": {**world["nodeclass"]["spec"],
                                           "capacityReservationSelectorTerms": [{"id": world["rid"]}]},
            "status": {"capacityReservations": entries}}


def _nodeclaim(capacity_types: list[str], reservation: str | None = None) -> dict[str, Any]:
    reqs = [{"key": L.CAPACITY_TYPE, "operator": "In", "values": capacity_types},
            {"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m5.large", "m5.xlarge"]}]
    if reservation:  # what the scheduler writes for a NodeClaim holding the reservation
        reqs.append({"key": L.CAPACITY_RESERVATION_ID, "operator": "In", "values": [reservation]})
    return {"metadata": {"name": f"default-{uuid.uuid4().hex[:5]}", "uid": str(uuid.uuid4()),
                         "labels": {L.NODEPOOL: "default"}},
            "spec": {"nodeClassRef": {"name": "default"}, "requirements": reqs}}


def _record(ec2: Any) -> tuple[list[dict[str, Any]], Any]:
    requests: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        requests.append(params)

    ec2.meta.events.register("provide-client-params.ec2.CreateFleet", record)
    return requests, record


def _template_data(ec2: Any, request: dict[str, Any]) -> dict[str, Any]:
    name = request["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"]
    assert name.startswith(NAME_PREFIX)
    return dict(ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"][0][
        "LaunchTemplateData"])


def test_a_nodeclaim_holding_a_reservation_launches_into_it_with_its_labels(world):
    ec2, provider = world["ec2"], world["provider"]
    nodeclass = _resolve(world, available=1)
    assert provider.reservations.count(world["rid"]) == 1
    # the reserved offering, priced as Karpenter prices it
    its = {it.name: it for it in provider.get_instance_types(NodeClass.from_manifest(nodeclass))}
    offering = next(o for o in its["m5.large"].offerings if o.capacity_type == L.CAPACITY_TYPE_RESERVED)
    assert offering.reservation_id == world["rid"] and offering.available and offering.reservation_capacity == 1
    assert offering.price == pytest.approx(0.096 / 10_000_000)
    requests, record = _record(ec2)
    try:
        node = launch_for(provider, _nodeclaim([L.CAPACITY_TYPE_RESERVED], world["rid"]), nodeclass)
    finally:
        ec2.meta.events.unregister("provide-client-params.ec2.CreateFleet", record)
    assert len(requests) == 1
    sent = requests[0]
    assert sent["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand"
    assert sent["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
    assert [o["InstanceType"] for c in sent["LaunchTemplateConfigs"] for o in c["Overrides"]] == ["m5.large"]
    assert _template_data(ec2, sent)["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "capacity-reservations-only",
        "CapacityReservationTarget": {"CapacityReservationId": world["rid"]}}
    assert node.capacity_type == L.CAPACITY_TYPE_RESERVED and node.instance_type == "m5.large"
    assert node.labels[L.CAPACITY_TYPE] == L.CAPACITY_TYPE_RESERVED
    assert node.labels[L.CAPACITY_RESERVATION_ID] == world["rid"]
    assert node.labels[L.CAPACITY_RESERVATION_TYPE] == "default"
    assert node.labels[L.CAPACITY_RESERVATION_INTERRUPTIBLE] == "false"
    reserved_node = node
    # counted down: the next listing offers the reservation as unavailable, and a NodeClaim that allows on-demand
    # launches there, through a template that opts out of open reservations
    assert provider.reservations.count(world["rid"]) == 0
    requests, record = _record(ec2)
    try:
        node = launch_for(provider, _nodeclaim([L.CAPACITY_TYPE_RESERVED, L.CAPACITY_TYPE_ON_DEMAND]), nodeclass)
    finally:
        ec2.meta.events.unregister("provide-client-params.ec2.CreateFleet", record)
    assert node.capacity_type == L.CAPACITY_TYPE_ON_DEMAND and L.CAPACITY_RESERVATION_ID not in node.labels
    assert _template_data(ec2, requests[0])["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "none"}
    # the reserved instance terminated and gone: its room is back (Karpenter's MarkTerminated)
    provider.delete(reserved_node.provider_id)
    with pytest.raises(NodeClaimNotFoundError):
        provider.delete(reserved_node.provider_id)
    assert provider.reservations.count(world["rid"]) == 1


def test_a_refused_reservation_is_marked_unavailable_and_the_launch_falls_back(world):
    ec2, provider = world["ec2"], world["provider"]
    nodeclass = _resolve(world, available=1)
    requests, record = _record(ec2)
    refused: list[dict[str, Any]] = []

    def exceeded(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if requests[-1]["TargetCapacitySpecification"]["DefaultTargetCapacityType"] != "on-demand" or refused \
                or "OnDemandOptions" not in requests[-1]:
            return None
        first = requests[-1]["LaunchTemplateConfigs"][0]["Overrides"][0]
        if _template_data(ec2, requests[-1]).get("CapacityReservationSpecification", {}).get(
                "CapacityReservationPreference") != "capacity-reservations-only":
            return None  # the on-demand retry reaches LocalStack
        refused.append(first)
        return AWSResponse("https://ec2", 200, {}, None), {"Instances": [], "Errors": [{
            "LaunchTemplateAndOverrides": {"Overrides": first}, "Lifecycle": "on-demand",
            "ErrorCode": "ReservationCapacityExceeded", "ErrorMessage": "The reservation has no capacity"}]}

    ec2.meta.events.register("before-call.ec2.CreateFleet", exceeded)
    try:
        node = launch_for(provider, _nodeclaim([L.CAPACITY_TYPE_RESERVED, L.CAPACITY_TYPE_ON_DEMAND]), nodeclass)
        assert refused and provider.reservations.count(world["rid"]) == 0
        assert node.capacity_type == L.CAPACITY_TYPE_ON_DEMAND and L.CAPACITY_RESERVATION_ID not in node.labels
        assert len(requests) == 2
        # a NodeClaim that may only launch into the reservation gets an insufficient-capacity error (Karpenter
        # deletes it and the pods are scheduled again, now without the reservation)
        with pytest.raises(InsufficientCapacityError):
            launch_for(provider, _nodeclaim([L.CAPACITY_TYPE_RESERVED], world["rid"]), nodeclass)
    finally:
        ec2.meta.events.unregister("before-call.ec2.CreateFleet", exceeded)
        ec2.meta.events.unregister("provide-client-params.ec2.CreateFleet", record)
