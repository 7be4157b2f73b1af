"""capacityReservationSelectorTerms -> status.capacityReservations (controller/cloud/aws/capacityreservations.py), as
Karpenter resolves them. LocalStack has no capacity reservation API, so DescribeCapacityReservations is answered by
botocore's Stubber on a real EC2 client (the requests are checked against the API model by the Stubber)."""

from __future__ import annotations

import datetime as dt

import boto3
import pytest
from botocore.stub import Stubber

from controller.cloud.aws.capacityreservations import queries, resolve, status_entry

NOW = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)


def _cr(rid: str, **kw: object) -> dict:
    return {"CapacityReservationId": rid, "InstanceType": "m5.large", "AvailabilityZone": "us-east-1a",
            "OwnerId": "123456789012", "InstanceMatchCriteria": "targeted", "State": "active", **kw}


def test_terms_become_karpenters_queries():
    active = {"Name": "state", "Values": ["active"]}
    assert queries([{"id": "cr-1"}, {"tags": {"team": "a", "any": "*"}, "ownerID": "123456789012"},
                    {"instanceMatchCriteria": "open"}]) == [
        {"CapacityReservationIds": ["cr-1"], "Filters": [active]},
        {"Filters": [active, {"Name": "owner-id", "Values": ["123456789012"]},
                     {"Name": "tag:team", "Values": ["a"]}, {"Name": "tag-key", "Values": ["any"]}],
         "MaxResults": 1000},
        {"Filters": [active, {"Name": "instance-match-criteria", "Values": ["open"]}], "MaxResults": 1000}]
    assert queries([]) == []


def test_entries_as_karpenter_writes_them():
    assert status_entry(_cr("cr-1"), NOW) == {
        "availabilityZone": "us-east-1a", "id": "cr-1", "instanceMatchCriteria": "targeted",
        "instanceType": "m5.large", "ownerID": "123456789012", "reservationType": "default",
        "interruptible": False, "state": "active"}
    block = _cr("cr-2", ReservationType="capacity-block", EndDate=NOW + dt.timedelta(minutes=39), Interruptible=True)
    entry = status_entry(block, NOW)
    assert entry is not None and entry["state"] == "expiring" and entry["endTime"] == "2026-11-25T12:39:00Z"
    assert entry["interruptible"] is True
    later = status_entry(_cr("cr-3", ReservationType="capacity-block", EndDate=NOW + dt.timedelta(hours=2)), NOW)
    assert later is not None and later["state"] == "active"
    # a default reservation with an end date never counts as expiring
    ending = status_entry(_cr("cr-4", EndDate=NOW + dt.timedelta(minutes=1)), NOW)
    assert ending is not None and ending["state"] == "active"
    assert status_entry(_cr("cr-5", InstanceMatchCriteria="something-new"), NOW) is None
    assert status_entry(_cr("cr-6", ReservationType="something-new"), NOW) is None


@pytest.fixture
def ec2():
    client = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        yield client, stub


def test_resolve_dedupes_by_id_and_pages(ec2):
    client, stub = ec2
    active = {"Name": "state", "Values": ["active"]}
    stub.add_response("describe_capacity_reservations", {"CapacityReservations": [_cr("cr-b")]},
                      {"CapacityReservationIds": ["cr-b"], "Filters": [active]})
    tagged = {"Filters": [active, {"Name": "tag:team", "Values": ["a"]}], "MaxResults": 1000}
    stub.add_response("describe_capacity_reservations", {"CapacityReservations": [_cr("cr-b")], "NextToken": "t"},
                      tagged)
    stub.add_response("describe_capacity_reservations", {"CapacityReservations": [_cr("cr-a")]},
                      {**tagged, "NextToken": "t"})
    got = resolve(client, [{"id": "cr-b"}, {"tags": {"team": "a"}}], NOW)
    assert [e["id"] for e in got] == ["cr-a", "cr-b"]
    stub.assert_no_pending_responses()
