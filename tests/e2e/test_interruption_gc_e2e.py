"""Interruption, garbage collection and crash safety through the running controller, on LocalStack's EC2 and SQS."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client

from tests.e2e.conftest import World, nodepool_name
from tests.e2e.harness import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.localstack]


def _gone(world: World, name: str) -> bool:
    try:
        world.custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", name)
        return False
    except client.ApiException as e:
        return e.status == 404


def _instances(world: World, **tags: str) -> list[dict]:
    filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
    filters.append({"Name": "instance-state-name", "Values": ["pending", "running"]})
    return [i for r in world.ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


def spot_interruption(instance_id: str) -> str:
    """An EC2 Spot Instance Interruption Warning as EventBridge delivers it (the shape in AWS's documentation)."""
    return json.dumps({
        "version": "0", "id": str(uuid.uuid4()), "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2", "account": "123456789012", "time": "2026-11-23T07:00:00Z", "region": "us-east-1",
        "resources": [f"arn:aws:ec2:us-east-1a:instance/{instance_id}"],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"}})


def test_spot_interruption_replaces_the_node(world: World, kubelet, start_controller):
    pool = nodepool_name("interrupt")
    world.nodepool(pool)
    ns = world.namespace()
    controller = start_controller()
    world.deployment(ns, "svc", 2, pool)
    wait_for("pods bound", lambda: len(world.bound_pods(ns, "svc")) == 2, timeout=120)
    claim = world.nodeclaims(pool)[0]
    name, pid = claim["metadata"]["name"], claim["status"]["providerID"]
    instance_id = pid.rsplit("/", 1)[-1]
    world.sqs.send_message(QueueUrl=world.queue_url, MessageBody="not json at all")
    world.sqs.send_message(QueueUrl=world.queue_url, MessageBody=spot_interruption(instance_id))
    # the replacement launches while the interrupted node drains (a spot warning leaves two minutes), not after
    overlap: list[str] = []

    def replacement_or_gone() -> bool:
        names = {c["metadata"]["name"] for c in world.nodeclaims(pool)}
        if name in names and names - {name}:
            overlap.extend(sorted(names - {name}))
        return bool(overlap) or name not in names

    wait_for("a replacement NodeClaim (or the interrupted one gone)", replacement_or_gone, timeout=120)
    assert overlap, "the replacement NodeClaim was created only after the interrupted one was gone"
    wait_for("interrupted NodeClaim deleted", lambda: _gone(world, name), timeout=120)
    wait_for("pods on a replacement", lambda: len([p for p in world.bound_pods(ns, "svc")
                                                   if p.spec.node_name != claim["status"]["nodeName"]]) == 2,
             timeout=120)
    counts = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    wait_for("queue drained", lambda: world.sqs.get_queue_attributes(
        QueueUrl=world.queue_url, AttributeNames=counts)["Attributes"] == dict.fromkeys(counts, "0"), timeout=60)
    assert controller.running


def test_garbage_collects_orphan_instance_and_vanished_instance(world: World, kubelet, start_controller):
    pool = nodepool_name("gc")
    world.nodepool(pool)
    ns = world.namespace()
    # an instance karpy launched whose NodeClaim never existed (or was lost)
    image = world.ec2.describe_images(Filters=[{"Name": "architecture", "Values": ["x86_64"]}])["Images"][0]["ImageId"]
    tags = [{"Key": f"kubernetes.io/cluster/{world.cluster}", "Value": "owned"},
            {"Key": "karpenter.sh/nodepool", "Value": pool}, {"Key": "karpenter.sh/nodeclaim", "Value": "lost-1"}]
    orphan = world.ec2.run_instances(ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1,
                                     TagSpecifications=[{"ResourceType": "instance", "Tags": tags}]
                                     )["Instances"][0]["InstanceId"]
    start_controller()
    world.deployment(ns, "gc", 1, pool)
    wait_for("pod bound", lambda: len(world.bound_pods(ns, "gc")) == 1, timeout=120)
    claim = world.nodeclaims(pool)[0]
    # the orphan goes (launched more than 30 s ago by then, or soon after)
    wait_for("orphan terminated", lambda: world.ec2.describe_instances(InstanceIds=[orphan])["Reservations"][0][
        "Instances"][0]["State"]["Name"] in ("shutting-down", "terminated"), timeout=150)
    # someone terminates the NodeClaim's instance behind karpy's back: the NodeClaim goes too
    world.ec2.terminate_instances(InstanceIds=[claim["status"]["providerID"].rsplit("/", 1)[-1]])
    kubelet.kubelet.set_ready(claim["status"]["nodeName"], False)
    wait_for("NodeClaim of the vanished instance deleted", lambda: _gone(world, claim["metadata"]["name"]),
             timeout=150)


def test_crash_between_create_fleet_and_status_write(world: World, kubelet, start_controller):
    pool = nodepool_name("crash")
    world.nodepool(pool)
    ns = world.namespace()
    first = start_controller("first.log", KARPY_FAILPOINTS="lifecycle.after-create")
    world.deployment(ns, "crash", 1, pool)
    wait_for("the controller died at the failpoint", lambda: not first.running, timeout=120)
    claims = world.nodeclaims(pool)
    assert len(claims) == 1 and not (claims[0].get("status") or {}).get("providerID")
    launched = _instances(world, **{"karpenter.sh/nodeclaim": claims[0]["metadata"]["name"]})
    assert len(launched) == 1, "CreateFleet ran before the crash"
    start_controller("second.log")
    wait_for("pod bound after restart", lambda: len(world.bound_pods(ns, "crash")) == 1, timeout=120)
    claims = world.nodeclaims(pool)
    assert len(claims) == 1
    assert claims[0]["status"]["providerID"].endswith(launched[0]["InstanceId"])
    assert len(_instances(world, **{"karpenter.sh/nodepool": pool})) == 1, "a second instance was launched"
