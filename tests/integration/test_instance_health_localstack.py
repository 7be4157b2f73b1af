"""Instance health against LocalStack's EC2 and the real control plane: DescribeInstanceStatus is called as Karpenter
calls it (one filtered listing per condition) on instances launched for real NodeClaims.

LocalStack answers DescribeInstanceStatus (ignoring the filters: every listing holds every running instance, healthy)
but its instances never fail a status check nor get a scheduled event, so the impairments are added to its real
replies with a botocore after-call hook, worded as EC2 words them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

from controller import metrics
from controller.api import labels as L
from controller.interruption.instancehealth import InstanceStatusController
from controller.kube import resources as R
from tests.integration.launched import launched_nodeclaim, one_zone_world
from tests.kubetest import wait_for

pytestmark = [pytest.mark.localstack, pytest.mark.kube,
              pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]
FINALIZER = "karpy.test/hold"  # keeps a deleted NodeClaim readable (no termination controller runs here)


@pytest.fixture(scope="module")
def world(aws_client: Callable[..., Any]) -> tuple[Any, dict[str, Any]]:
    return one_zone_world(aws_client, 44)


def _launched(kc: Any, provider: Any, nodeclass: dict[str, Any]) -> tuple[str, str]:
    name, provider_id = launched_nodeclaim(kc, provider, nodeclass, (FINALIZER,))
    return name, provider_id.rsplit("/", 1)[1]


def _count(category: str) -> float:
    return metrics.INTERRUPTION_INSTANCE_STATUS_UNHEALTHY.labels(category=category)._value.get()


def test_impaired_instances_are_terminated_and_scheduled_events_drained(world, kube):
    provider, nodeclass = world
    ec2 = provider.ec2
    kc, cluster, recorder = kube
    (broken, broken_id), (retiring, retiring_id), (flaky, flaky_id) = (_launched(kc, provider, nodeclass)
                                                                       for _ in range(3))
    wait_for("the NodeClaims with their providerIDs in the informer", lambda: all(
        (cluster.nodeclaim(n) or {}).get("status", {}).get("providerID") for n in (broken, retiring, flaky)))
    now = dt.datetime.now(dt.UTC)
    calls: list[list[dict[str, Any]]] = []

    def impair(parsed: dict[str, Any], model: Any, **_: Any) -> None:
        filters = calls[-1]
        statuses = parsed.setdefault("InstanceStatuses", [])
        names = {f["Name"] for f in filters}
        if "instance-status.status" in names:
            statuses.append({"InstanceId": broken_id, "InstanceStatus": {"Status": "impaired", "Details": [
                {"Name": "reachability", "Status": "failed", "ImpairedSince": now - dt.timedelta(minutes=5)}]}})
            statuses.append({"InstanceId": flaky_id, "InstanceStatus": {"Status": "impaired", "Details": [
                {"Name": "reachability", "Status": "failed", "ImpairedSince": now - dt.timedelta(seconds=30)}]}})
        if "event.code" in names:
            statuses.append({"InstanceId": retiring_id, "Events": [
                {"Code": "instance-retirement", "Description": "The instance is running on degraded hardware",
                 "NotBefore": now + dt.timedelta(days=7)}]})

    def record(params: dict[str, Any], **_: Any) -> None:
        calls.append(list(params.get("Filters") or []))

    ec2.meta.events.register("provide-client-params.ec2.DescribeInstanceStatus", record)
    ec2.meta.events.register("after-call.ec2.DescribeInstanceStatus", impair)
    before = {c: _count(c) for c in ("InstanceStatus", "SystemStatus", "EventStatus")}
    health = InstanceStatusController(cluster, kc, ec2, recorder)
    try:
        assert health.reconcile_once() == 2
        # one listing per condition, the filters Karpenter uses
        assert [[f["Name"] for f in c] for c in calls] == [["instance-status.status"], ["system-status.status"],
                                                            ["event.code"]]
        got = kc.get(R.NODECLAIMS, broken)
        assert got["metadata"].get("deletionTimestamp")
        assert L.NODECLAIM_TERMINATION_TIMESTAMP in got["metadata"]["annotations"]  # forceful: no graceful drain
        got = kc.get(R.NODECLAIMS, retiring)
        assert got["metadata"].get("deletionTimestamp")
        assert L.NODECLAIM_TERMINATION_TIMESTAMP not in (got["metadata"].get("annotations") or {})  # drained
        assert not kc.get(R.NODECLAIMS, flaky)["metadata"].get("deletionTimestamp")  # 30 s: under the threshold
        assert _count("InstanceStatus") - before["InstanceStatus"] == 1
        assert _count("EventStatus") - before["EventStatus"] == 1
        assert _count("SystemStatus") == before["SystemStatus"]
        # still unhealthy at the next poll: counted once, nothing deleted twice
        wait_for("the deletions in the informer", lambda: all(
            (cluster.nodeclaim(n) or {}).get("metadata", {}).get("deletionTimestamp") for n in (broken, retiring)))
        assert health.reconcile_once() == 0
        assert _count("InstanceStatus") - before["InstanceStatus"] == 1
    finally:
        ec2.meta.events.unregister("after-call.ec2.DescribeInstanceStatus", impair)
        ec2.meta.events.unregister("provide-client-params.ec2.DescribeInstanceStatus", record)
        for name in (broken, retiring, flaky):
            kc.patch(R.NODECLAIMS, name, {"metadata": {"finalizers": None}})
    # Karpenter's InstanceUnhealthy event on both NodeClaims (none for the one under the threshold)
    def unhealthy() -> set[str] | None:
        names = {str(e["involvedObject"]["name"]) for e in kc.list(R.EVENTS, namespace="default")[0]
                 if e.get("reason") == "InstanceUnhealthy"}
        return names if names >= {broken, retiring} else None

    named = wait_for("the InstanceUnhealthy events", unhealthy)
    assert flaky not in named
