"""Garbage collection and interruption against LocalStack (EC2, SQS) and the real control plane.

GC: an orphan instance older than the (shortened) grace is terminated; a young one, one whose NodeClaim exists only
by the instance's tag (a launch that crashed before its status write) and one not tagged with a NodePool are kept; a
NodeClaim whose instance was terminated is deleted and its NotReady Node let go without a drain, while one whose Node
is still Ready is kept. Interruption: a spot interruption warning on a real SQS queue deletes the NodeClaim and makes
the offering unavailable; a batch with a non-JSON body, a foreign source and an unknown instance next to a good
message is deleted whole, the good one acted on, each counted by type.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from controller.cloud.aws.interruption import DELETED, RECEIVED
from controller.garbagecollection.controller import INSTANCES, NODECLAIMS, GarbageCollector
from controller.interruption.controller import NODECLAIMS_DELETED, UNKNOWN_INSTANCE, InterruptionController
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import NotFoundError
from tests.integration.aws_world import launch_for, make_world
from tests.integration.kubelet import FakeKubelet
from tests.kubetest import remove_claims_and_nodes, wait_for

pytestmark = [pytest.mark.localstack, pytest.mark.kube,
              pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


@pytest.fixture(scope="module")
def world(aws_client: Callable[..., Any]) -> tuple[Any, dict[str, Any]]:
    return make_world(aws_client("ec2"), aws_client("ssm"), aws_client("iam"), cidr_octet=62,
                      zones=("us-east-1a", "us-east-1b"), prices={"m5.large": 0.096, "c5.large": 0.085})


def _claim_manifest(name: str, nodepool: str = "default", capacity_type: str = "on-demand") -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": nodepool}},
            "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                       "values": ["m5.large", "c5.large"]},
                                      {"key": "karpenter.sh/capacity-type", "operator": "In",
                                       "values": [capacity_type]}],
                     "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}


def _ago(seconds: float) -> str:
    return (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _launched_claim(kc: KubeClient, provider: Any, name: str, launched_ago: float = 600,
                    capacity_type: str = "on-demand") -> dict[str, Any]:
    """A NodeClaim whose instance was launched (the labels and status the lifecycle controller writes)."""
    created = kc.create(R.NODECLAIMS, _claim_manifest(name, capacity_type=capacity_type))
    node = launch_for(provider, created, provider.test_nodeclass)
    kc.patch(R.NODECLAIMS, name, {"metadata": {"labels": {**node.labels, "karpenter.sh/nodepool": "default"}}})
    kc.patch(R.NODECLAIMS, name, {"status": {
        "providerID": node.provider_id, "imageID": node.image_id,
        "conditions": [{"type": "Launched", "status": "True", "reason": "Launched",
                        "lastTransitionTime": _ago(launched_ago)}]}}, subresource="status")
    return kc.get(R.NODECLAIMS, name)


@pytest.fixture(scope="module")
def provider(world: tuple[Any, dict[str, Any]]) -> Any:
    """The world's AWSCloudProvider, carrying the world's EC2NodeClass manifest for launches."""
    p, nodeclass = world
    p.test_nodeclass = nodeclass
    return p


def _state(ec2: Any, instance_id: str) -> str:
    return str(ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]["Name"])


def _run_instance(ec2: Any, tags: dict[str, str]) -> str:
    image = ec2.describe_images(Filters=[{"Name": "architecture", "Values": ["x86_64"]}])["Images"][0]["ImageId"]
    return str(ec2.run_instances(ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1, TagSpecifications=[
        {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        Placement={"AvailabilityZone": "us-east-1a"})["Instances"][0]["InstanceId"])


def _gone(kc: KubeClient, res: Any, name: str) -> bool:
    try:
        obj = kc.get(res, name)
    except NotFoundError:
        return True
    return bool(obj["metadata"].get("deletionTimestamp"))


def _cleanup(kc: KubeClient, ec2: Any, claims: list[str], nodes: list[str], instances: list[str]) -> None:
    remove_claims_and_nodes(kc, claims, nodes)
    if instances:
        with contextlib.suppress(Exception):
            ec2.terminate_instances(InstanceIds=instances)


# ---- garbage collection ------------------------------------------------------------------------------------------
def test_gc_terminates_old_orphans_and_keeps_young_tag_claimed_and_foreign_instances(kube, provider, aws_client):
    kc, cluster, _ = kube
    ec2 = aws_client("ec2")
    owned = {f"kubernetes.io/cluster/{provider.cluster.name}": "owned"}
    claim_name = f"gc-{uuid.uuid4().hex[:6]}"
    made: list[str] = []
    try:
        orphan = _run_instance(ec2, {**owned, "karpenter.sh/nodepool": "default", "karpenter.sh/nodeclaim": "lost"})
        # a NodeClaim created, its instance launched, and a crash before the status write: only the tag links them
        kc.create(R.NODECLAIMS, _claim_manifest(claim_name))
        crashed = _run_instance(ec2, {**owned, "karpenter.sh/nodepool": "default",
                                      "karpenter.sh/nodeclaim": claim_name})
        # an instance whose tag names a NodeClaim that has since claimed another instance is a leaked duplicate
        dup_claim = f"gc-{uuid.uuid4().hex[:6]}"
        kc.create(R.NODECLAIMS, _claim_manifest(dup_claim))
        kc.patch(R.NODECLAIMS, dup_claim, {"status": {"providerID": "aws:///us-east-1a/i-0aaaaaaaaaaaaaaaa"}},
                 subresource="status")
        duplicate = _run_instance(ec2, {**owned, "karpenter.sh/nodepool": "default",
                                        "karpenter.sh/nodeclaim": dup_claim})
        foreign = _run_instance(ec2, owned)  # no karpenter.sh/nodepool tag: not Karpenter's
        made += [orphan, crashed, duplicate, foreign]
        wait_for("NodeClaims in the cache", lambda: cluster.nodeclaim(claim_name) and cluster.nodeclaim(dup_claim))
        time.sleep(3.5)  # LaunchTime has one-second resolution
        young = _run_instance(ec2, {**owned, "karpenter.sh/nodepool": "default"})
        made.append(young)
        gc = GarbageCollector(cluster=cluster, client=kc, cloud=provider, grace_seconds=2.5)
        gc.run_once()
        assert _state(ec2, orphan) in ("shutting-down", "terminated")
        assert _state(ec2, duplicate) in ("shutting-down", "terminated")
        assert _state(ec2, crashed) == "running"
        assert _state(ec2, foreign) == "running"
        assert _state(ec2, young) == "running"
        assert gc.collected[INSTANCES] == 2
        # the crashed launch's NodeClaim is still there for the restarted launch to adopt the instance
        assert kc.get(R.NODECLAIMS, claim_name)
    finally:
        _cleanup(kc, ec2, [claim_name, dup_claim], [], made)


def test_gc_deletes_nodeclaim_whose_instance_was_terminated(kube, provider, aws_client, kube_api):
    kc, cluster, _ = kube
    ec2 = aws_client("ec2")
    kubelet = FakeKubelet(kube_api)
    suffix = uuid.uuid4().hex[:6]
    vanished, still_ready, alive = f"gc-v-{suffix}", f"gc-r-{suffix}", f"gc-a-{suffix}"
    nodes = {n: f"ip-{n}.ec2.internal" for n in (vanished, still_ready, alive)}
    instances: list[str] = []
    try:
        claims = {}
        for name in (vanished, still_ready, alive):
            claims[name] = _launched_claim(kc, provider, name)
            pid = claims[name]["status"]["providerID"]
            instances.append(pid.rsplit("/", 1)[-1])
            kubelet.register(nodes[name], pid)
            kc.patch(R.NODES, nodes[name], {"metadata": {"finalizers": ["karpenter.sh/termination"]}})
        ec2.terminate_instances(InstanceIds=instances[:2])
        kubelet.set_ready(nodes[vanished], False)
        wait_for("cache current", lambda: all(
            (cluster.nodeclaim(n) or {}).get("status", {}).get("providerID") for n in claims) and all(
            cluster.node(nodes[n]) for n in claims) and not any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in ((cluster.node(nodes[vanished]) or {}).get("status") or {}).get("conditions") or []))
        gc = GarbageCollector(cluster=cluster, client=kc, cloud=provider, grace_seconds=2.5)
        gc.run_once()
        assert _gone(kc, R.NODECLAIMS, vanished)
        assert _gone(kc, R.NODES, nodes[vanished])
        with pytest.raises(NotFoundError):  # no finalizer left: the Node is gone, not waiting on a drain
            kc.get(R.NODES, nodes[vanished])
        # the kubelet of the other terminated instance still reports Ready: not trusted to be gone yet
        assert not _gone(kc, R.NODECLAIMS, still_ready)
        assert not _gone(kc, R.NODECLAIMS, alive)
        assert gc.collected[NODECLAIMS] == 1
        kubelet.set_ready(nodes[still_ready], False)
        wait_for("NotReady in the cache", lambda: not any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in ((cluster.node(nodes[still_ready]) or {}).get("status") or {}).get("conditions") or []))
        gc.run_once()
        assert _gone(kc, R.NODECLAIMS, still_ready)
        assert not _gone(kc, R.NODECLAIMS, alive)
    finally:
        _cleanup(kc, ec2, list(nodes), list(nodes.values()), instances)


def test_gc_leaves_a_just_launched_nodeclaim_alone(kube, provider, aws_client):
    kc, cluster, _ = kube
    ec2 = aws_client("ec2")
    name = f"gc-n-{uuid.uuid4().hex[:6]}"
    instances: list[str] = []
    try:
        claim = _launched_claim(kc, provider, name, launched_ago=0)
        instances.append(claim["status"]["providerID"].rsplit("/", 1)[-1])
        ec2.terminate_instances(InstanceIds=instances)
        wait_for("cache current", lambda: (cluster.nodeclaim(name) or {}).get("status", {}).get("providerID"))
        GarbageCollector(cluster=cluster, client=kc, cloud=provider, grace_seconds=30).run_once()
        assert not _gone(kc, R.NODECLAIMS, name)
    finally:
        _cleanup(kc, ec2, [name], [], instances)


# ---- interruption ------------------------------------------------------------------------------------------------
@pytest.fixture
def queue(aws_client: Callable[..., Any]) -> Iterator[tuple[Any, str]]:
    sqs = aws_client("sqs")
    url = sqs.create_queue(QueueName=f"karpy-int-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    try:
        yield sqs, url
    finally:
        sqs.delete_queue(QueueUrl=url)


def spot_interruption(instance_id: str, region: str = "us-east-1") -> str:
    """An EC2 Spot Instance Interruption Warning as EventBridge delivers it (the example in AWS's documentation)."""
    return json.dumps({
        "version": "0", "id": str(uuid.uuid4()), "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2", "account": "123456789012", "time": _ago(0), "region": region,
        "resources": [f"arn:aws:ec2:{region}:123456789012:instance/{instance_id}"],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"}})


def _poll_until(ctl: InterruptionController, received: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ctl.poll_once()
        if ctl.consumer is not None and sum(ctl.consumer.metrics[RECEIVED].values()) >= received:
            return
    raise AssertionError(f"received {ctl.consumer.metrics[RECEIVED] if ctl.consumer else 0}, wanted {received}")


def _queue_empty(sqs: Any, url: str) -> bool:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    return bool(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
                == dict.fromkeys(names, "0"))


def _events(kube_api: Any, name: str) -> set[str]:
    return {str(e.reason) for e in client.CoreV1Api(kube_api).list_event_for_all_namespaces(
        field_selector=f"involvedObject.name={name}").items}


def test_spot_interruption_deletes_the_nodeclaim_and_refuses_the_offering(kube, provider, aws_client, queue,
                                                                          kube_api):
    kc, cluster, recorder = kube
    sqs, url = queue
    ec2 = aws_client("ec2")
    kubelet = FakeKubelet(kube_api)
    name = f"int-{uuid.uuid4().hex[:6]}"
    node_name = f"ip-{name}.ec2.internal"
    instances: list[str] = []
    try:
        claim = _launched_claim(kc, provider, name, capacity_type="spot")
        pid = claim["status"]["providerID"]
        instance_id = pid.rsplit("/", 1)[-1]
        instances.append(instance_id)
        labels = claim["metadata"]["labels"]
        assert labels["karpenter.sh/capacity-type"] == "spot"
        kubelet.register(node_name, pid, labels=labels)
        wait_for("cache current", lambda: cluster.nodeclaim_for_provider_id(pid)
                 and cluster.node_for_provider_id(pid))
        ctl = InterruptionController(cluster=cluster, client=kc, cloud=provider, sqs=sqs,
                                     queue_name=url.rsplit("/", 1)[-1], recorder=recorder, is_leader=lambda: True,
                                     wait_seconds=1)
        sqs.send_message(QueueUrl=url, MessageBody=spot_interruption(instance_id))
        _poll_until(ctl, 1)
        assert _gone(kc, R.NODECLAIMS, name)
        assert provider.unavailable.is_unavailable(labels["node.kubernetes.io/instance-type"],
                                                   labels["topology.kubernetes.io/zone"], "spot")
        assert not provider.unavailable.is_unavailable(labels["node.kubernetes.io/instance-type"],
                                                       labels["topology.kubernetes.io/zone"], "on-demand")
        wait_for("queue drained", lambda: _queue_empty(sqs, url))
        wait_for("events", lambda: {"SpotInterrupted", "TerminatingOnInterruption"} <= _events(kube_api, name))
        wait_for("node events", lambda: {"SpotInterrupted", "TerminatingOnInterruption"}
                 <= _events(kube_api, node_name))
    finally:
        _cleanup(kc, ec2, [name], [node_name], instances)


def test_a_bad_batch_is_deleted_whole_and_the_good_message_acted_on(kube, provider, aws_client, queue):
    kc, cluster, recorder = kube
    sqs, url = queue
    ec2 = aws_client("ec2")
    name = f"int-{uuid.uuid4().hex[:6]}"
    instances: list[str] = []
    try:
        claim = _launched_claim(kc, provider, name)
        pid = claim["status"]["providerID"]
        instance_id = pid.rsplit("/", 1)[-1]
        instances.append(instance_id)
        wait_for("cache current", lambda: cluster.nodeclaim_for_provider_id(pid))
        follower = InterruptionController(cluster=cluster, client=kc, cloud=provider, sqs=sqs,
                                          queue_name=url.rsplit("/", 1)[-1], recorder=recorder,
                                          is_leader=lambda: False, wait_seconds=1)
        bodies = ["{not json", json.dumps({"version": "0", "source": "my.deployer", "detail-type": "Deployed",
                                           "detail": {"instance-id": instance_id}}),
                  spot_interruption("i-0fedcba9876543210"),  # no NodeClaim has this instance
                  spot_interruption(instance_id)]
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies)])
        assert follower.poll_once() == 0 and follower.consumer is None  # a follower never receives
        ctl = InterruptionController(cluster=cluster, client=kc, cloud=provider, sqs=sqs,
                                     queue_name=url.rsplit("/", 1)[-1], recorder=recorder, is_leader=lambda: True,
                                     wait_seconds=1)
        _poll_until(ctl, 4)
        consumer = ctl.consumer
        assert consumer is not None
        assert dict(consumer.metrics[RECEIVED]) == {"unknown": 2, "spot_interrupted": 2}
        assert sum(consumer.metrics[DELETED].values()) == 4
        assert ctl.counts[UNKNOWN_INSTANCE] == 1 and ctl.counts[NODECLAIMS_DELETED] == 1
        assert _gone(kc, R.NODECLAIMS, name)
        wait_for("queue drained", lambda: _queue_empty(sqs, url))
    finally:
        _cleanup(kc, ec2, [name], [], instances)
