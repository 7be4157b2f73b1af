"""`karpy interrupt` against LocalStack (EC2 and SQS): the message it sends is EC2's spot interruption warning as
EventBridge delivers it, read back from the queue and parsed by the controller's own parser; unknown, foreign and
other clusters' instances are refused. With --nodeclaim the instance comes from a NodeClaim on the real control
plane."""

from __future__ import annotations

import json
import uuid

import pytest
from click.testing import CliRunner

from cli import main
from controller.cloud.aws.events import SPOT_INTERRUPTION, interruption_event_patterns
from controller.cloud.aws.messages import Action, SpotInterruption, action_for, parse_message

pytestmark = [pytest.mark.localstack, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

CLUSTER = "dev"  # the bundled "dev" environment's cluster, for --env


def _instance(ec2, tags: dict[str, str]) -> str:
    image = ec2.describe_images(Filters=[{"Name": "architecture", "Values": ["x86_64"]}])["Images"][0]["ImageId"]
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    return str(ec2.run_instances(ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1,
                                 TagSpecifications=spec)["Instances"][0]["InstanceId"])


KARPY_TAGS = {"karpenter.sh/nodepool": "default", "karpenter.sh/nodeclaim": "default-abcde",
              f"kubernetes.io/cluster/{CLUSTER}": "owned", "eks:eks-cluster-name": CLUSTER}


@pytest.fixture(scope="module")
def aws(aws_client, localstack_endpoint):
    ec2, sqs = aws_client("ec2"), aws_client("sqs")
    queue = sqs.create_queue(QueueName=f"ops-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    return {"ec2": ec2, "sqs": sqs, "queue": queue, "endpoint": localstack_endpoint,
            "ours": _instance(ec2, KARPY_TAGS), "foreign": _instance(ec2, {"Name": "someone-elses"})}


def _karpy(aws, *args: str):
    return CliRunner().invoke(main, ["interrupt", *args, "--endpoint-url", aws["endpoint"], "--region", "us-east-1"],
                              prog_name="karpy")


def _received(sqs, queue: str) -> list[str]:
    msgs = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=2).get("Messages", [])
    for m in msgs:
        sqs.delete_message(QueueUrl=queue, ReceiptHandle=m["ReceiptHandle"])
    return [m["Body"] for m in msgs]


def _matches(pattern: dict, event: dict) -> bool:
    return all(event.get(k) in v for k, v in pattern.items())


def test_sends_the_spot_interruption_warning_the_controller_reads(aws):
    res = _karpy(aws, "--queue-url", aws["queue"], "--instance", aws["ours"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"sent a spot interruption warning for {aws['ours']} to {aws['queue']}")
    bodies = _received(aws["sqs"], aws["queue"])
    assert len(bodies) == 1
    event = json.loads(bodies[0])
    # AWS's documented shape of the event
    assert event["source"] == "aws.ec2" and event["detail-type"] == SPOT_INTERRUPTION
    assert event["detail"] == {"instance-id": aws["ours"], "instance-action": "terminate"}
    assert event["resources"] == [f"arn:aws:ec2:us-east-1:{event['account']}:instance/{aws['ours']}"]
    assert event["version"] == "0" and event["region"] == "us-east-1" and event["id"]
    # the stacks' EventBridge rule for spot interruptions matches it, and the controller acts on it
    assert _matches(interruption_event_patterns()["SpotInterruption"], event)
    parsed = parse_message(bodies[0])
    assert isinstance(parsed, SpotInterruption) and parsed.instance_ids == (aws["ours"],)
    assert action_for(parsed) is Action.CORDON_AND_DRAIN


def test_refuses_unknown_and_foreign_instances(aws):
    unknown = _karpy(aws, "--queue-url", aws["queue"], "--instance", "i-0123456789abcdef0")
    assert unknown.exit_code == 1 and unknown.output == "error: instance i-0123456789abcdef0 does not exist\n"
    foreign = _karpy(aws, "--queue-url", aws["queue"], "--instance", aws["foreign"])
    assert foreign.exit_code == 1 and "is not karpy's (no karpenter.sh/nodepool tag)" in foreign.output
    other = _karpy(aws, "--queue-url", aws["queue"], "--instance", aws["ours"], "--cluster-name", "prod")
    assert other.exit_code == 1 and "does not belong to cluster prod" in other.output
    assert _received(aws["sqs"], aws["queue"]) == []  # nothing was sent for any of them


def test_refuses_terminated_instances(aws):
    gone = _instance(aws["ec2"], KARPY_TAGS)
    aws["ec2"].terminate_instances(InstanceIds=[gone])
    res = _karpy(aws, "--queue-url", aws["queue"], "--instance", gone)
    assert res.exit_code == 1 and res.output.count("\n") == 1
    assert f"instance {gone} is " in res.output  # shutting-down or terminated


def test_no_queue_is_one_line(aws):
    missing = aws["queue"].rsplit("/", 1)[0] + "/no-such-queue"
    res = _karpy(aws, "--queue-url", missing, "--instance", aws["ours"])
    assert res.exit_code == 1 and res.output == f"error: no queue at {missing}\n"


def test_env_finds_its_queue_by_the_cluster_name(aws):
    res = _karpy(aws, "--env", "dev", "--instance", aws["ours"])
    assert res.exit_code == 1 and res.output.startswith("error: no interruption queue 'dev' in us-east-1")
    url = aws["sqs"].create_queue(QueueName=CLUSTER)["QueueUrl"]
    try:
        res = _karpy(aws, "--env", "dev", "--instance", aws["ours"])
        assert res.exit_code == 0, res.output
        bodies = _received(aws["sqs"], url)
        assert [parse_message(b).instance_ids for b in bodies] == [(aws["ours"],)]
    finally:
        aws["sqs"].delete_queue(QueueUrl=url)


@pytest.mark.kube
def test_nodeclaim_names_its_instance(aws, kube, kubeconfig):
    from controller.kube import resources as R

    kc, _, _ = kube
    name = f"ops-interrupt-{uuid.uuid4().hex[:6]}"
    kc.create(R.NODECLAIMS, {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": name},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": []}})
    pending = _karpy(aws, "--queue-url", aws["queue"], "--nodeclaim", name, "--kubeconfig", kubeconfig)
    assert pending.exit_code == 1 and "has no instance yet" in pending.output
    kc.patch(R.NODECLAIMS, name, {"status": {"providerID": f"aws:///us-east-1a/{aws['ours']}"}},
             subresource="status")
    res = _karpy(aws, "--queue-url", aws["queue"], "--nodeclaim", name, "--kubeconfig", kubeconfig)
    assert res.exit_code == 0, res.output
    assert [parse_message(b).instance_ids for b in _received(aws["sqs"], aws["queue"])] == [(aws["ours"],)]
    unknown = _karpy(aws, "--queue-url", aws["queue"], "--nodeclaim", name + "x", "--kubeconfig", kubeconfig)
    assert unknown.exit_code == 1 and unknown.output == f"error: unknown NodeClaim '{name}x'\n"
    kc.delete(R.NODECLAIMS, name)


def test_catalog_refresh_to_an_unwritable_file_is_one_line(aws, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    res = CliRunner().invoke(main, ["catalog", "refresh", "--region", "us-east-1", "--endpoint", aws["endpoint"],
                                    "--no-pricing-api", "-o", str(blocker / "snap.json.gz")])
    assert res.exit_code == 1 and res.output.count("\n") == 1 and res.output.startswith("error: "), res.output
    assert res.output == f"error: cannot write {blocker / 'snap.json.gz'}: {blocker} is not a directory\n"
