"""Interruption actions: each event type -> Karpenter's events, deletion and unavailable offering; instance-id
validation; the consumer keeps a batch's good messages whatever its bad ones do; a follower never receives."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from controller.cloud.aws.events import sample_event
from controller.cloud.aws.interruption import DELETED, FAILED, RECEIVED, InterruptionQueue, message_type
from controller.cloud.aws.messages import parse_message
from controller.cloud.aws.unavailable import UnavailableOfferings
from controller.interruption.controller import (
    INVALID_INSTANCE_ID,
    NODECLAIMS_DELETED,
    UNKNOWN_INSTANCE,
    InterruptionController,
    instance_id_of,
    valid_instance_id,
)
from controller.kube.errors import KubeError, NotFoundError
from controller.state.views import NodeClaimView, NodeView

IID = "i-0123456789abcdef0"
PID = f"aws:///us-east-1a/{IID}"


class FakeCluster:
    """The Cluster's reads the interruption controller makes, as its typed views."""

    def __init__(self, claims: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> None:
        self.claims = claims
        self.nodes = nodes
        self.reads = 0

    def nodeclaims(self) -> list[NodeClaimView]:
        self.reads += 1
        return [NodeClaimView(c) for c in self.claims]

    def node_for_provider_id(self, pid: str) -> NodeView | None:
        return next((NodeView(n) for n in self.nodes if n["spec"].get("providerID") == pid), None)


class FakeClient:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.deleted: list[tuple[str, str, str | None]] = []
        self.fail = fail

    def delete(self, res: Any, name: str, namespace: str | None = None, grace_period_seconds: int | None = None,
               uid: str | None = None) -> None:
        if self.fail is not None:
            raise self.fail
        self.deleted.append((res.plural, name, uid))


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def publish(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((obj["kind"], type_, reason, message))


def _claim(deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "default-abcde", "uid": "u-1", "labels": {
        "karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "m5.large",
        "topology.kubernetes.io/zone": "us-east-1a", "karpenter.sh/capacity-type": "spot"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"kind": "NodeClaim", "metadata": meta, "status": {"providerID": PID, "nodeName": "ip-10-0-0-1"}}


def _node() -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": "ip-10-0-0-1", "uid": "n-1"}, "spec": {"providerID": PID}}


def _controller(claims=None, nodes=None, client=None, leader=True, sqs=None):
    cluster = FakeCluster([_claim()] if claims is None else claims, [_node()] if nodes is None else nodes)
    recorder = FakeRecorder()
    unavailable = UnavailableOfferings()
    ctl = InterruptionController(cluster=cluster, client=client or FakeClient(), cloud=object(), sqs=sqs,
                                 queue_name="q", recorder=recorder, is_leader=lambda: leader,
                                 unavailable=unavailable, queue_url="http://queue")
    return ctl, cluster, recorder, unavailable


def _event(kind: str, instance_id: str = IID, **kw: Any):
    return parse_message(json.dumps(sample_event(kind, instance_id, **kw)))


@pytest.mark.parametrize("value, ok", [
    ("i-0123abcd", True), (IID, True), ("i-0abc", False), ("i-0123456789", False), ("i-0123ABCD", False),
    ("i-0123abcd\n", False), ("x-0123abcd", False), ("", False), ("i-0123456789abcdef01", False),
    ("i-0123abcg", False), ("arn:aws:ec2:us-east-1:1:instance/i-0123abcd", False),
])
def test_instance_id_validation(value, ok):
    assert valid_instance_id(value) is ok


def test_instance_id_of_provider_id():
    assert instance_id_of(PID) == IID
    assert instance_id_of("aws:///us-east-1a/") == ""
    assert instance_id_of("kwok://x") == ""


@pytest.mark.parametrize("kind, kw, expected", [
    ("SpotInterruption", {}, "spot_interrupted"),
    ("Rebalance", {}, "rebalance_recommendation"),
    ("ScheduledChange", {}, "scheduled_change"),
    ("CapacityReservationInterruption", {}, "capacity_reservation_interrupted"),
    ("InstanceStateChange", {"state": "stopping"}, "instance_stopped"),
    ("InstanceStateChange", {"state": "stopped"}, "instance_stopped"),
    ("InstanceStateChange", {"state": "shutting-down"}, "instance_terminated"),
    ("InstanceStateChange", {"state": "terminated"}, "instance_terminated"),
    ("InstanceStateChange", {"state": "running"}, "no_op"),
    ("InstanceStateChange", {"state": "whatever-new-state"}, "no_op"),
])
def test_message_types_are_karpenters_bounded_kinds(kind, kw, expected):
    assert message_type(_event(kind, **kw)) == expected
    assert message_type(None) == "unknown"


@pytest.mark.parametrize("kind, kw, reason, type_", [
    ("SpotInterruption", {}, "SpotInterrupted", "Warning"),
    ("ScheduledChange", {}, "InstanceUnhealthy", "Warning"),
    ("InstanceStateChange", {"state": "stopping"}, "InstanceStopping", "Warning"),
    ("InstanceStateChange", {"state": "terminated"}, "InstanceTerminating", "Warning"),
    ("CapacityReservationInterruption", {}, "CapacityReservationInstanceInterrupted", "Warning"),
])
def test_draining_events_delete_the_nodeclaim(kind, kw, reason, type_):
    ctl, _, recorder, unavailable = _controller()
    ctl.handle(_event(kind, **kw))
    assert ctl.client.deleted == [("nodeclaims", "default-abcde", "u-1")]
    reasons = [(k, r) for k, _, r, _ in recorder.events]
    assert reasons == [("NodeClaim", reason), ("Node", reason), ("NodeClaim", "TerminatingOnInterruption"),
                       ("Node", "TerminatingOnInterruption")]
    assert recorder.events[0][1] == type_
    assert ("Node", "Warning", "TerminatingOnInterruption", "Interruption triggered termination for the Node") \
        in recorder.events
    assert ctl.counts[NODECLAIMS_DELETED] == 1
    # only a spot interruption refuses the offering
    assert unavailable.is_unavailable("m5.large", "us-east-1a", "spot") is (kind == "SpotInterruption")
    assert not unavailable.is_unavailable("m5.large", "us-east-1a", "on-demand")


def test_spot_interruption_messages_are_karpenters():
    ctl, _, recorder, _ = _controller()
    ctl.handle(_event("SpotInterruption"))
    assert recorder.events[0] == ("NodeClaim", "Warning", "SpotInterrupted", "Spot interruption warning was triggered")
    assert recorder.events[2] == ("NodeClaim", "Warning", "TerminatingOnInterruption",
                                  "Interruption triggered termination for the NodeClaim")


def test_rebalance_recommendation_is_an_event_only():
    ctl, _, recorder, unavailable = _controller()
    ctl.handle(_event("Rebalance"))
    assert ctl.client.deleted == []
    assert recorder.events == [
        ("NodeClaim", "Normal", "SpotRebalanceRecommendation", "Spot rebalance recommendation was triggered"),
        ("Node", "Normal", "SpotRebalanceRecommendation", "Spot rebalance recommendation was triggered")]
    assert not unavailable.is_unavailable("m5.large", "us-east-1a", "spot")


def test_running_state_change_does_nothing():
    ctl, cluster, recorder, _ = _controller()
    ctl.handle(_event("InstanceStateChange", state="running"))
    assert recorder.events == [] and ctl.client.deleted == [] and cluster.reads == 0


def test_invalid_instance_id_is_counted_before_any_lookup():
    ctl, cluster, recorder, _ = _controller()
    ctl.handle(_event("SpotInterruption", "i-0abc"))
    assert ctl.counts[INVALID_INSTANCE_ID] == 1 and cluster.reads == 0 and recorder.events == []


def test_unknown_instance_is_counted_and_handled():
    ctl, _, recorder, _ = _controller()
    ctl.handle(_event("SpotInterruption", "i-0fedcba9876543210"))
    assert ctl.counts[UNKNOWN_INSTANCE] == 1 and recorder.events == []


def test_a_nodeclaim_already_deleting_is_not_deleted_again():
    ctl, _, recorder, _ = _controller(claims=[_claim(deleting=True)])
    ctl.handle(_event("SpotInterruption"))
    assert ctl.client.deleted == []
    assert [r for _, _, r, _ in recorder.events] == ["SpotInterrupted", "SpotInterrupted"]


def test_without_a_node_only_the_nodeclaim_gets_events():
    ctl, _, recorder, _ = _controller(nodes=[])
    ctl.handle(_event("SpotInterruption"))
    assert [k for k, _, _, _ in recorder.events] == ["NodeClaim", "NodeClaim"]


def test_a_nodeclaim_that_vanished_meanwhile_is_fine():
    ctl, _, _, _ = _controller(client=FakeClient(NotFoundError(404, "NotFound", "gone")))
    ctl.handle(_event("SpotInterruption"))
    assert ctl.counts[NODECLAIMS_DELETED] == 0


def test_a_failed_delete_raises_so_the_message_is_redelivered():
    ctl, _, _, _ = _controller(client=FakeClient(KubeError(503, "ServiceUnavailable", "apiserver down")))
    with pytest.raises(KubeError):
        ctl.handle(_event("SpotInterruption"))


# ---- the consumer ------------------------------------------------------------------------------------------------
class FakeSQS:
    def __init__(self, bodies: list[str], batch_error: bool = False) -> None:
        self.messages = [{"MessageId": str(i), "ReceiptHandle": f"rh-{i}", "Body": b,
                          "Attributes": {"SentTimestamp": "1700000000000"}} for i, b in enumerate(bodies)]
        self.batch_error = batch_error
        self.deleted: list[str] = []
        self.receives = 0

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        self.receives += 1
        return {"Messages": list(self.messages)}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> dict[str, Any]:
        if self.batch_error:
            raise RuntimeError("batch endpoint broken")
        self.deleted.extend(e["ReceiptHandle"] for e in Entries)
        return {"Successful": [{"Id": e["Id"]} for e in Entries]}

    def delete_message(self, QueueUrl: str, ReceiptHandle: str) -> None:
        self.deleted.append(ReceiptHandle)


def _bodies() -> list[str]:
    return ["not json", json.dumps({"source": "my.app", "detail-type": "Deploy", "detail": {}}),
            json.dumps(sample_event("SpotInterruption", "i-0fedcba9876543210")),  # no NodeClaim has it
            json.dumps(sample_event("SpotInterruption", IID)),
            json.dumps({"source": "aws.health", "detail-type": "AWS Health Event", "detail": {
                "service": "EC2", "eventTypeCategory": "scheduledChange", "affectedEntities": [[1, 2]]}})]


@pytest.mark.parametrize("batch_error", [False, True])
def test_a_batch_with_bad_messages_deletes_all_and_acts_on_the_good(batch_error):
    sqs = FakeSQS(_bodies(), batch_error=batch_error)
    ctl, _, _, _ = _controller(sqs=sqs)
    assert ctl.poll_once() == 5
    assert sorted(sqs.deleted) == [f"rh-{i}" for i in range(5)]
    assert ctl.client.deleted == [("nodeclaims", "default-abcde", "u-1")]
    assert ctl.counts[UNKNOWN_INSTANCE] == 1
    consumer = ctl.consumer
    assert consumer is not None
    assert dict(consumer.metrics[RECEIVED]) == {"unknown": 3, "spot_interrupted": 2}
    assert sum(consumer.metrics[DELETED].values()) == 5


def test_a_handler_error_leaves_only_its_message():
    bodies = [json.dumps(sample_event("SpotInterruption", f"i-{uuid.uuid4().hex[:17]}")) for _ in range(3)]
    sqs = FakeSQS(bodies)
    calls = []

    def handler(event):
        calls.append(event)
        if len(calls) == 2:
            raise RuntimeError("apiserver unavailable")

    consumer = InterruptionQueue(sqs, "http://queue", handler, wait_seconds=0)
    consumer.poll_once()
    assert sqs.deleted == ["rh-0", "rh-2"]
    assert consumer.metrics[FAILED]["spot_interrupted"] == 1


def test_nothing_is_handled_when_leadership_is_lost_after_the_receive():
    sqs = FakeSQS(_bodies())
    consumer = InterruptionQueue(sqs, "http://queue", lambda e: None, wait_seconds=0)
    assert consumer.poll_once(proceed=lambda: False) == 5
    assert sqs.deleted == [] and not consumer.metrics[RECEIVED]


def test_a_follower_does_not_receive():
    sqs = FakeSQS(_bodies())
    ctl, _, _, _ = _controller(sqs=sqs, leader=False)
    assert ctl.poll_once() == 0
    assert sqs.receives == 0 and ctl.consumer is None


# ---- found by mutation testing: the consumer's requests, batches and counts ---------------------------------------
class RecordingSQS(FakeSQS):
    """FakeSQS that records every call, answers DeleteMessageBatch with `failed` receipt handles as Failed entries
    and refuses the single deletes of `refused` handles."""

    def __init__(self, bodies: list[str], failed: frozenset[str] = frozenset(),
                 refused: frozenset[str] = frozenset()) -> None:
        super().__init__(bodies)
        self.failed, self.refused = failed, refused
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("receive", kwargs))
        return super().receive_message(**kwargs)

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> dict[str, Any]:
        self.calls.append(("batch", {"QueueUrl": QueueUrl, "Entries": Entries}))
        ok = [e for e in Entries if e["ReceiptHandle"] not in self.failed]
        self.deleted.extend(e["ReceiptHandle"] for e in ok)
        return {"Successful": [{"Id": e["Id"]} for e in ok],
                "Failed": [{"Id": e["Id"], "Code": "ReceiptHandleIsInvalid", "SenderFault": True, "Message": "bad"}
                           for e in Entries if e["ReceiptHandle"] in self.failed]}

    def delete_message(self, QueueUrl: str, ReceiptHandle: str) -> None:
        self.calls.append(("single", {"QueueUrl": QueueUrl, "ReceiptHandle": ReceiptHandle}))
        if ReceiptHandle in self.refused:
            raise RuntimeError("ReceiptHandleIsInvalid")
        self.deleted.append(ReceiptHandle)


def _spots(n: int) -> list[str]:
    return [json.dumps(sample_event("SpotInterruption", f"i-{i:017x}")) for i in range(n)]


def test_receive_asks_for_10_with_long_polling_and_the_sent_timestamp():
    sqs = RecordingSQS([])
    InterruptionQueue(sqs, "http://queue", lambda e: None, wait_seconds=20).poll_once()
    InterruptionQueue(sqs, "http://queue", lambda e: None, wait_seconds=0, visibility_timeout=30).poll_once()
    assert [kw for _, kw in sqs.calls] == [
        {"QueueUrl": "http://queue", "MaxNumberOfMessages": 10, "WaitTimeSeconds": 20,
         "AttributeNames": ["SentTimestamp"]},
        {"QueueUrl": "http://queue", "MaxNumberOfMessages": 10, "WaitTimeSeconds": 0,
         "AttributeNames": ["SentTimestamp"], "VisibilityTimeout": 30}]


def test_deletes_go_in_batches_of_10_with_their_own_ids():
    sqs = RecordingSQS(_spots(12))
    consumer = InterruptionQueue(sqs, "http://queue", lambda e: None, wait_seconds=0)
    assert consumer.poll_once() == 12
    batches = [kw["Entries"] for call, kw in sqs.calls if call == "batch"]
    assert [[e["Id"] for e in b] for b in batches] == [[str(i) for i in range(10)], ["0", "1"]]
    assert [e["ReceiptHandle"] for b in batches for e in b] == [f"rh-{i}" for i in range(12)]
    assert all(kw["QueueUrl"] == "http://queue" for _, kw in sqs.calls)
    assert consumer.metrics[DELETED] == {"spot_interrupted": 12}
    assert consumer.metrics[RECEIVED] == {"spot_interrupted": 12}


def test_a_failed_batch_entry_is_deleted_alone_and_a_refused_one_stays_counted(caplog):
    from controller.cloud.aws.interruption import DELETE_FAILED

    sqs = RecordingSQS(_spots(4), failed=frozenset({"rh-1", "rh-2"}), refused=frozenset({"rh-2"}))
    consumer = InterruptionQueue(sqs, "http://queue", lambda e: None, wait_seconds=0)
    with caplog.at_level("WARNING", logger="karpy.interruption"):
        consumer.poll_once()
    assert [(c, kw["ReceiptHandle"]) for c, kw in sqs.calls if c == "single"] == [("single", "rh-1"),
                                                                                   ("single", "rh-2")]
    assert sorted(sqs.deleted) == ["rh-0", "rh-1", "rh-3"]  # rh-2 stays on the queue for redelivery
    assert consumer.metrics[DELETED] == {"spot_interrupted": 3}
    assert consumer.metrics[DELETE_FAILED] == {"spot_interrupted": 1}
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert [getattr(r, "message-id") for r in errors] == ["2"]
    assert [r.__dict__.get("code") for r in caplog.records if r.levelname == "WARNING"] == [
        "ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid"]


def test_messages_without_a_receipt_handle_are_not_deleted():
    sqs = RecordingSQS(_spots(2))
    del sqs.messages[0]["ReceiptHandle"]
    consumer = InterruptionQueue(sqs, "http://queue", lambda e: None, wait_seconds=0)
    consumer.poll_once()
    assert sqs.deleted == ["rh-1"] and consumer.metrics[DELETED] == {"spot_interrupted": 1}


def test_prometheus_counts_and_queue_time():
    from controller import metrics as M

    def value(name: str, **labels: str) -> float:
        return M.REGISTRY.get_sample_value(name, labels) or 0.0

    before = (value("karpenter_interruption_received_messages_total", message_type="spot_interrupted"),
              value("karpenter_interruption_received_messages_total", message_type="unknown"),
              value("karpenter_interruption_deleted_messages_total"),
              value("karpenter_interruption_message_queue_duration_seconds_count"),
              value("karpenter_interruption_message_queue_duration_seconds_sum"))
    sqs = RecordingSQS([*_spots(2), "not json"])
    # sent at 1700000000.000 (FakeSQS's SentTimestamp), handled 12.5 s later
    InterruptionQueue(sqs, "http://queue", lambda e: None, wait_seconds=0, clock=lambda: 1700000012.5).poll_once()
    after = (value("karpenter_interruption_received_messages_total", message_type="spot_interrupted"),
             value("karpenter_interruption_received_messages_total", message_type="unknown"),
             value("karpenter_interruption_deleted_messages_total"),
             value("karpenter_interruption_message_queue_duration_seconds_count"),
             value("karpenter_interruption_message_queue_duration_seconds_sum"))
    assert [round(a - b, 3) for a, b in zip(after, before, strict=True)] == [2, 1, 3, 2, 25.0]


def test_every_failure_is_counted_and_single_deletes_name_the_queue():
    from controller.cloud.aws.interruption import DELETE_FAILED

    sqs = RecordingSQS(_spots(3), failed=frozenset({"rh-0", "rh-1", "rh-2"}), refused=frozenset({"rh-0", "rh-1"}))

    def handler(event):
        if event.instance_ids[0].endswith("2"):
            raise RuntimeError("apiserver unavailable")

    consumer = InterruptionQueue(sqs, "http://queue", handler, wait_seconds=0)
    consumer.poll_once()
    assert [kw for c, kw in sqs.calls if c == "single"] == [
        {"QueueUrl": "http://queue", "ReceiptHandle": "rh-0"}, {"QueueUrl": "http://queue", "ReceiptHandle": "rh-1"}]
    assert consumer.metrics[DELETE_FAILED] == {"spot_interrupted": 2}
    consumer.poll_once()  # the same three again: the handler fails on the third twice in all
    assert consumer.metrics[FAILED] == {"spot_interrupted": 2}


def test_a_sent_timestamp_in_the_future_counts_as_no_time_on_the_queue():
    from controller import metrics as M

    def total() -> float:
        return M.REGISTRY.get_sample_value("karpenter_interruption_message_queue_duration_seconds_sum") or 0.0

    before = total()
    InterruptionQueue(RecordingSQS(_spots(1)), "http://queue", lambda e: None, wait_seconds=0,
                      clock=lambda: 1699999990.0).poll_once()
    assert total() - before == 0.0


def test_capacity_reservation_interruption_leaves_the_reservation_with_no_room():
    """Karpenter's markUnavailableOfferings: the interrupted NodeClaim's reservation is marked unavailable, so its
    replacement is not planned into it; other messages leave reservations alone."""
    from controller.cloud.aws.capacityreservations import ReservationAvailability

    claim = _claim()
    claim["metadata"]["labels"].update({"karpenter.sh/capacity-type": "reserved",
                                        "karpenter.k8s.aws/capacity-reservation-id": "cr-1"})
    for kind, left in (("SpotInterruption", 2), ("CapacityReservationInterruption", 0)):
        ctl, *_ = _controller(claims=[json.loads(json.dumps(claim))])
        cloud = type("Cloud", (), {"reservations": ReservationAvailability()})()
        cloud.reservations.sync({"cr-1": 2})
        ctl.cloud = cloud
        ctl.handle(_event(kind))
        assert cloud.reservations.count("cr-1") == left, kind
