"""LocalStack is real: EC2 serves AWS's instance data, SQS queues, EventBridge rules deliver, IAM and SSM answer."""

from __future__ import annotations

import json
import time
import uuid

import pytest

pytestmark = pytest.mark.localstack


def test_ec2_serves_real_instance_types(aws_client):
    ec2 = aws_client("ec2")
    names = [t["InstanceType"] for page in ec2.get_paginator("describe_instance_types").paginate()
             for t in page["InstanceTypes"]]
    assert len(names) > 500
    assert {"m5.large", "c7g.xlarge", "p4d.24xlarge"} <= set(names)
    zones = ec2.describe_availability_zones()["AvailabilityZones"]
    assert len(zones) >= 3


def test_sqs_round_trip(aws_client):
    sqs = aws_client("sqs")
    url = sqs.create_queue(QueueName=f"smoke-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="hello")
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"]
    assert got[0]["Body"] == "hello"


def test_eventbridge_rule_delivers_to_sqs(aws_client):
    sqs, events = aws_client("sqs"), aws_client("events")
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name=name, EventPattern=json.dumps({"source": ["karpy.smoke"]}))
    events.put_targets(Rule=name, Targets=[{"Id": "queue", "Arn": arn}])
    events.put_events(Entries=[{"Source": "karpy.smoke", "DetailType": "Smoke", "Detail": json.dumps({"n": 1})}])
    deadline = time.monotonic() + 15
    body = None
    while time.monotonic() < deadline and body is None:
        msgs = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages", [])
        body = json.loads(msgs[0]["Body"]) if msgs else None
    assert body is not None and body["source"] == "karpy.smoke" and body["detail"] == {"n": 1}


def test_iam_and_ssm(aws_client):
    iam, ssm = aws_client("iam"), aws_client("ssm")
    role = f"smoke-{uuid.uuid4().hex[:8]}"
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                                                     "Action": "sts:AssumeRole"}]}
    created = iam.create_role(RoleName=role, AssumeRolePolicyDocument=json.dumps(trust))["Role"]
    assert iam.get_role(RoleName=role)["Role"]["Arn"] == created["Arn"]
    param = f"/karpy/smoke/{role}"
    ssm.put_parameter(Name=param, Value="ami-0123456789abcdef0", Type="String")
    assert ssm.get_parameter(Name=param)["Parameter"]["Value"] == "ami-0123456789abcdef0"
