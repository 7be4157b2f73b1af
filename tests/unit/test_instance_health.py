"""Which DescribeInstanceStatus entries are unhealthy (controller/interruption/instancehealth.py), as Karpenter's
instancestatus provider decides: failed instance/system checks past two minutes, any scheduled event at once, EBS
checks ignored."""

from __future__ import annotations

import datetime as dt

from controller.interruption.instancehealth import EVENT_STATUS, INSTANCE_STATUS, SYSTEM_STATUS, unhealthy

NOW = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)


def _check(status: str, ago: float | None, name: str = "reachability") -> dict:
    d: dict = {"Name": name, "Status": status}
    if ago is not None:
        d["ImpairedSince"] = NOW - dt.timedelta(seconds=ago)
    return {"Status": "impaired" if status == "failed" else "ok", "Details": [d]}


def test_failed_checks_count_after_the_threshold():
    found = unhealthy([
        {"InstanceId": "i-1", "InstanceStatus": _check("failed", 121)},
        {"InstanceId": "i-2", "SystemStatus": _check("failed", 120)},
        {"InstanceId": "i-3", "InstanceStatus": _check("failed", 119)},  # not yet two minutes
        {"InstanceId": "i-4", "InstanceStatus": _check("passed", None)},
        {"InstanceId": "i-5", "InstanceStatus": _check("failed", None)},  # no ImpairedSince: just now
    ], NOW)
    assert [(h.instance_id, h.categories) for h in found] == [("i-1", (INSTANCE_STATUS,)), ("i-2", (SYSTEM_STATUS,))]
    assert found[0].details == ("InstanceStatus/reachability",)


def test_scheduled_events_count_at_once_whatever_their_date():
    later = {"Code": "instance-retirement", "NotBefore": NOW + dt.timedelta(days=7), "Description": "retiring"}
    found = unhealthy([
        {"InstanceId": "i-1", "Events": [later]},
        {"InstanceId": "i-2", "Events": [{"Code": "system-reboot"}], "SystemStatus": _check("failed", 600)},
        {"InstanceId": "i-3", "Events": [{"Code": "something-new"}]},
    ], NOW)
    assert [(h.instance_id, h.categories) for h in found] == [("i-1", (EVENT_STATUS,)),
                                                               ("i-2", (SYSTEM_STATUS, EVENT_STATUS))]


def test_ebs_checks_and_naive_times():
    naive = (NOW - dt.timedelta(seconds=300)).replace(tzinfo=None)  # read as UTC
    found = unhealthy([
        {"InstanceId": "i-1", "AttachedEbsStatus": _check("failed", 600)},
        {"InstanceId": "i-2", "InstanceStatus": {"Details": [{"Name": "reachability", "Status": "failed",
                                                               "ImpairedSince": naive}]}},
    ], NOW)
    assert [h.instance_id for h in found] == ["i-2"]
