"""`karpy interrupt`: rehearse a spot interruption end to end by sending the interruption queue the EventBridge
message EC2 sends two minutes before it reclaims a spot instance (AWS's documented "EC2 Spot Instance Interruption
Warning" event), for one of karpy's instances. The controller then cordons and drains the node and replaces it.

Only instances that exist and that karpy launched (Karpenter's karpenter.sh/nodepool tag, and the cluster's
ownership tag when the cluster is known) are accepted, so a typo cannot drain someone else's node."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from controller.api import labels as L
from controller.cloud.aws.events import sample_event
from controller.cloud.aws.instances import LIVE_STATES, parse_provider_id
from controller.cloud.aws.messages import SpotInterruption, parse_message
from controller.cloud.aws.tags import owned_by
from controller.ops.errors import OpsError

_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,17}$")
_QUEUE_REGION = re.compile(r"sqs[.-]([a-z]{2}(?:-[a-z]+)+-\d)\.")
MISSING_QUEUE = ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "NonExistentQueue")


@dataclass(frozen=True)
class Sent:
    """What was sent: the instance, the queue, the SQS message id and the event itself."""

    instance_id: str
    queue_url: str
    message_id: str
    event: dict[str, Any]


def _aws_message(e: ClientError | BotoCoreError) -> str:
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        return f"{err.get('Code', '')}: {err.get('Message', '')}".strip(": ")
    return str(e)


def region_of_queue(queue_url: str) -> str | None:
    """The region in an SQS queue URL (https://sqs.<region>.amazonaws.com/...), None when it names none."""
    m = _QUEUE_REGION.search(queue_url)
    return m.group(1) if m else None


def queue_url_for(sqs: Any, queue_name: str, region: str) -> str:
    """The URL of the interruption queue by name; OpsError when the queue does not exist."""
    try:
        return str(sqs.get_queue_url(QueueName=queue_name)["QueueUrl"])
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in MISSING_QUEUE:
            raise OpsError(f"no interruption queue {queue_name!r} in {region} (is the environment deployed?)") from None
        raise OpsError(f"SQS {region}: {_aws_message(e)}") from None
    except BotoCoreError as e:
        raise OpsError(f"SQS {region}: {_aws_message(e)}") from None


def instance_of_nodeclaim(claim: dict[str, Any]) -> str:
    """The EC2 instance id in a NodeClaim's status.providerID; OpsError while it has none."""
    name = (claim.get("metadata") or {}).get("name")
    pid = str((claim.get("status") or {}).get("providerID") or "")
    if not pid:
        raise OpsError(f"NodeClaim {name} has no instance yet (status.providerID is empty)")
    try:
        return parse_provider_id(pid)[1]
    except ValueError as e:
        raise OpsError(f"NodeClaim {name}: {e}") from None


def check_instance(ec2: Any, instance_id: str, cluster_name: str | None = None) -> dict[str, Any]:
    """The DescribeInstances entry (with the reservation's OwnerId) of a live instance karpy launched; OpsError
    when it does not exist, is gone, or is not karpy's (or not this cluster's)."""
    if not _INSTANCE_ID.match(instance_id):
        raise OpsError(f"{instance_id!r} is not an EC2 instance id (i-0123456789abcdef0)", 2)
    try:
        reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
            raise OpsError(f"instance {instance_id} does not exist") from None
        raise OpsError(f"EC2 DescribeInstances: {_aws_message(e)}") from None
    except BotoCoreError as e:
        raise OpsError(f"EC2 DescribeInstances: {_aws_message(e)}") from None
    found = [{**d, "OwnerId": r.get("OwnerId")} for r in reservations for d in r.get("Instances", [])]
    if not found:
        raise OpsError(f"instance {instance_id} does not exist")
    inst = found[0]
    state = inst.get("State", {}).get("Name", "")
    if state not in LIVE_STATES:
        raise OpsError(f"instance {instance_id} is {state}")
    tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
    if L.NODEPOOL not in tags:
        raise OpsError(f"instance {instance_id} is not karpy's (no {L.NODEPOOL} tag); refusing to interrupt it")
    if cluster_name and not owned_by(tags, cluster_name):
        raise OpsError(f"instance {instance_id} does not belong to cluster {cluster_name}; refusing to interrupt it")
    return inst


def spot_interruption_event(instance: dict[str, Any], region: str) -> dict[str, Any]:
    """The EventBridge event EC2 sends before reclaiming the instance, checked with the controller's own parser."""
    event = sample_event("SpotInterruption", instance["InstanceId"], region=region,
                         account=str(instance.get("OwnerId") or "000000000000"))
    parsed = parse_message(json.dumps(event))
    if not isinstance(parsed, SpotInterruption) or parsed.instance_ids != (instance["InstanceId"],):
        raise AssertionError(f"the controller would not read this event as a spot interruption: {parsed}")
    return event


def send(sqs: Any, ec2: Any, queue_url: str, instance_id: str, region: str,
         cluster_name: str | None = None) -> Sent:
    """Check the instance, then send its spot interruption warning to the queue."""
    instance = check_instance(ec2, instance_id, cluster_name)
    event = spot_interruption_event(instance, region)
    try:
        answer = sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(event))
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in MISSING_QUEUE:
            raise OpsError(f"no queue at {queue_url}") from None
        raise OpsError(f"SQS SendMessage to {queue_url}: {_aws_message(e)}") from None
    except BotoCoreError as e:
        raise OpsError(f"SQS SendMessage to {queue_url}: {_aws_message(e)}") from None
    return Sent(instance_id, queue_url, str(answer.get("MessageId", "")), event)


def nodeclaim_instance(name: str, kubeconfig: str | None, context: str | None, env: str | None) -> str:
    """The instance id behind a NodeClaim of the cluster the flags name; OpsError when it is unknown or has none."""
    from controller.kube import resources as R
    from controller.kube.errors import KubeError, NotFoundError
    from controller.ops.connect import kube_client, kube_error

    client = kube_client(kubeconfig, context, env)
    try:
        claim = client.get(R.NODECLAIMS, name)
    except NotFoundError:
        raise OpsError(f"unknown NodeClaim {name!r}") from None
    except KubeError as e:
        raise kube_error(e, client) from None
    return instance_of_nodeclaim(claim)


def rehearse(*, queue_url: str | None, env: str | None, instance_id: str | None, nodeclaim: str | None,
             region: str | None, endpoint_url: str | None, cluster_name: str | None, kubeconfig: str | None,
             context: str | None) -> Sent:
    """`karpy interrupt`: resolve the region, the queue (its URL, or the environment's queue: its queue_name, else
    its cluster's name) and the instance (given, or behind a NodeClaim), then check and send."""
    from controller.ops.connect import aws_client, environment

    config = environment(env) if env else None
    if config is not None:
        region = region or config.region
        cluster_name = cluster_name or config.cluster_name
    region = region or (region_of_queue(queue_url) if queue_url else None) or os.environ.get("AWS_REGION") \
        or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise OpsError("no AWS region: give --region (or set AWS_REGION)", 2)
    if nodeclaim is not None:
        # --env names the cluster too (its kubeconfig context), unless --context says otherwise
        instance_id = nodeclaim_instance(nodeclaim, kubeconfig, context, env if context is None else None)
    if instance_id is None:
        raise OpsError("give the instance (--instance) or its NodeClaim (--nodeclaim)", 2)
    sqs = aws_client("sqs", region, endpoint_url)
    if queue_url is None:
        if config is None:
            raise OpsError("give the queue (--queue-url) or the environment (--env)", 2)
        queue_url = queue_url_for(sqs, config.queue_name or config.cluster_name, region)
    return send(sqs, aws_client("ec2", region, endpoint_url), queue_url, instance_id, region, cluster_name)
