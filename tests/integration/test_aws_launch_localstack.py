"""The launch path against LocalStack's EC2: discovery, launch templates, CreateFleet, idempotency, get/list/delete,
and recovery from throttling and insufficient capacity injected into the real client calls with botocore hooks."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from controller.catalog.snapshot import load_catalog
from controller.cloud.aws import instances
from controller.cloud.aws.discovery import discover_security_groups, discover_subnets, subnets_by_zone
from controller.cloud.aws.errors import NodeClaimNotFoundError
from controller.cloud.aws.fleet import launch
from controller.cloud.aws.launchtemplates import LaunchTemplateSpec, ensure
from controller.cloud.aws.unavailable import UnavailableOfferings
from controller.cloud.aws.userdata import ClusterInfo, NodeSettings, al2023_user_data
from controller.cloud.provider import LaunchRequest

pytestmark = pytest.mark.localstack
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


@pytest.fixture(scope="module")
def world(aws_client):
    ec2: Any = aws_client("ec2", config=Config(retries={"mode": "standard", "max_attempts": 5}))
    cluster = f"c{uuid.uuid4().hex[:8]}"
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    tag = {"Key": "karpenter.sh/discovery", "Value": cluster}
    subnet_ids = {}
    for i, zone in enumerate(ZONES):
        s = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.20.{i}.0/24", AvailabilityZone=zone,
                              TagSpecifications=[{"ResourceType": "subnet", "Tags": [tag]}])["Subnet"]
        subnet_ids[zone] = s["SubnetId"]
    small = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.9.0/28", AvailabilityZone="us-east-1a",
                              TagSpecifications=[{"ResourceType": "subnet", "Tags": [tag]}])["Subnet"]["SubnetId"]
    sg = ec2.create_security_group(GroupName=f"{cluster}-nodes", Description="nodes", VpcId=vpc,
                                   TagSpecifications=[{"ResourceType": "security-group", "Tags": [tag]}])["GroupId"]
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    wanted = {"m5.large", "m5.xlarge", "c5.large", "c5.xlarge"}
    types = [it for it in load_catalog().instance_types if it.name in wanted]
    return {"ec2": ec2, "cluster": cluster, "subnet_ids": subnet_ids, "small": small, "sg": sg, "image": image,
            "types": types}


def _template(world: dict[str, Any]) -> str:
    ud = al2023_user_data(ClusterInfo(world["cluster"], "https://example.eks", "Q0E="),
                          NodeSettings({"karpenter.sh/nodepool": "default"}))
    spec = LaunchTemplateSpec(world["image"], ud, (world["sg"],), f"{world['cluster']}_profile")
    return ensure(world["ec2"], spec, {f"kubernetes.io/cluster/{world['cluster']}": "owned"})


def _nodeclaim(name: str, capacity_types=("spot", "on-demand")) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "uid": str(uuid.uuid4()), "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": [
                         {"key": "karpenter.sh/capacity-type", "operator": "In", "values": list(capacity_types)},
                         {"key": "topology.kubernetes.io/zone", "operator": "In", "values": list(ZONES)},
                         {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5"]}]}}


def _launch(world: dict[str, Any], claim: dict[str, Any], ice: UnavailableOfferings | None = None):
    subnets = subnets_by_zone(discover_subnets(world["ec2"], [{"tags": {"karpenter.sh/discovery": world["cluster"]}}]))
    return launch(world["ec2"], cluster_name=world["cluster"], request=LaunchRequest.from_manifest(claim),
                  nodeclass_name="default",
                  instance_types=world["types"], subnets=subnets, launch_template=_template(world),
                  unavailable=ice or UnavailableOfferings(), user_tags={"team": "platform"})


def _count(world: dict[str, Any], name: str) -> int:
    found = instances.find_by_nodeclaim(world["ec2"], world["cluster"], name)
    all_for = [i for i in instances.list_managed(world["ec2"], world["cluster"])
               if i.tags.get("karpenter.sh/nodeclaim") == name]
    assert (found is None) == (not all_for)
    return len(all_for)


def test_discovery(world):
    ec2, cluster = world["ec2"], world["cluster"]
    by_tag = discover_subnets(ec2, [{"tags": {"karpenter.sh/discovery": cluster}}])
    assert {s.id for s in by_tag} == {*world["subnet_ids"].values(), world["small"]}
    chosen = subnets_by_zone(by_tag)
    assert chosen["us-east-1a"].id == world["subnet_ids"]["us-east-1a"]  # the /24, not the /28
    wildcard = discover_subnets(ec2, [{"tags": {"karpenter.sh/discovery": "*"}}])
    assert {s.id for s in by_tag} <= {s.id for s in wildcard}
    by_id = discover_subnets(ec2, [{"id": world["small"]}])
    assert [s.id for s in by_id] == [world["small"]]
    assert [g.id for g in discover_security_groups(ec2, [{"tags": {"karpenter.sh/discovery": cluster}}])] == [
        world["sg"]]
    assert [g.id for g in discover_security_groups(ec2, [{"name": f"{cluster}-nodes"}])] == [world["sg"]]


def test_launch_is_tagged_spot_first_and_idempotent(world):
    claim = _nodeclaim(f"default-{uuid.uuid4().hex[:5]}")
    first = _launch(world, claim)
    assert first.capacity_type == "spot"
    assert first.instance_type in {"m5.large", "c5.large", "m5.xlarge", "c5.xlarge"}
    assert first.tags[f"kubernetes.io/cluster/{world['cluster']}"] == "owned"
    assert first.tags["karpenter.sh/nodeclaim"] == claim["metadata"]["name"]
    assert first.tags["karpenter.sh/nodepool"] == "default" and first.tags["team"] == "platform"
    again = _launch(world, claim)
    assert again.id == first.id
    assert _count(world, claim["metadata"]["name"]) == 1
    od = _launch(world, _nodeclaim(f"default-{uuid.uuid4().hex[:5]}", ("on-demand",)))
    assert od.capacity_type == "on-demand"


def test_get_list_delete(world):
    claim = _nodeclaim(f"default-{uuid.uuid4().hex[:5]}")
    inst = _launch(world, claim)
    assert instances.get(world["ec2"], inst.provider_id).id == inst.id
    assert inst.id in {i.id for i in instances.list_managed(world["ec2"], world["cluster"])}
    instances.delete(world["ec2"], inst.provider_id)
    with pytest.raises(NodeClaimNotFoundError):
        instances.get(world["ec2"], inst.provider_id)
    with pytest.raises(NodeClaimNotFoundError):
        instances.get(world["ec2"], f"aws:///us-east-1a/i-{'0' * 17}")


def test_launch_template_is_recreated_when_deleted(world):
    name = _template(world)
    world["ec2"].delete_launch_template(LaunchTemplateName=name)
    assert _template(world) == name
    assert world["ec2"].describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"]


def test_insufficient_capacity_is_marked_and_retried(world):
    ec2 = world["ec2"]
    refused: list[dict[str, Any]] = []
    requests: list[dict[str, Any]] = []

    def record(params, **kwargs):
        requests.append(params)

    def ice_first_choice(params, **kwargs):
        if refused:
            return None  # later calls reach LocalStack
        first = requests[-1]["LaunchTemplateConfigs"][0]["Overrides"][0]
        refused.append(first)
        parsed = {"Instances": [], "Errors": [{
            "LaunchTemplateAndOverrides": {"Overrides": first}, "Lifecycle": "spot",
            "ErrorCode": "InsufficientInstanceCapacity", "ErrorMessage": "There is no Spot capacity available"}]}
        return AWSResponse("https://ec2", 200, {}, None), parsed

    ec2.meta.events.register("provide-client-params.ec2.CreateFleet", record)
    ec2.meta.events.register("before-call.ec2.CreateFleet", ice_first_choice)
    ice = UnavailableOfferings()
    try:
        claim = _nodeclaim(f"default-{uuid.uuid4().hex[:5]}")
        inst = _launch(world, claim, ice)
    finally:
        ec2.meta.events.unregister("before-call.ec2.CreateFleet", ice_first_choice)
        ec2.meta.events.unregister("provide-client-params.ec2.CreateFleet", record)
    assert len(requests) == 2  # the refused call and the retry
    bad = refused[0]
    assert ice.is_unavailable(bad["InstanceType"], bad["AvailabilityZone"], "spot")
    assert (inst.instance_type, inst.zone) != (bad["InstanceType"], bad["AvailabilityZone"])
    assert _count(world, claim["metadata"]["name"]) == 1


@pytest.mark.parametrize(("status", "code"), [(503, "RequestLimitExceeded"), (500, "InternalError")])
def test_throttling_and_5xx_are_retried_without_duplicates(world, status, code):
    ec2 = world["ec2"]
    failures = {"left": 2}

    def fail_twice(request, **kwargs):
        if "Action=CreateFleet" not in (request.body.decode() if isinstance(request.body, bytes) else
                                        str(request.body)) or failures["left"] == 0:
            return None
        failures["left"] -= 1
        body = (f"<Response><Errors><Error><Code>{code}</Code><Message>injected</Message></Error></Errors>"
                "<RequestID>x</RequestID></Response>").encode()
        return AWSResponse(request.url, status, {}, _Raw(body))

    ec2.meta.events.register("before-send.ec2.CreateFleet", fail_twice)
    try:
        claim = _nodeclaim(f"default-{uuid.uuid4().hex[:5]}")
        inst = _launch(world, claim)
    finally:
        ec2.meta.events.unregister("before-send.ec2.CreateFleet", fail_twice)
    assert failures["left"] == 0
    assert inst.tags["karpenter.sh/nodeclaim"] == claim["metadata"]["name"]
    assert _count(world, claim["metadata"]["name"]) == 1


class _Raw:
    """The raw body botocore reads from a response."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **kwargs):
        yield self.body

    def read(self, *args):
        return self.body
