"""The launch path against LocalStack's EC2: discovery, launch templates, CreateFleet, idempotency, get/list/delete,
and recovery from throttling, insufficient capacity and a lost CreateFleet reply injected into the real client calls
with botocore hooks. The EC2 client is karpy's own (controller/cloud/aws/clients.py make_clients), so the retry
behaviour under test is the one the controller runs with."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError, ConnectionClosedError
from botocore.retries.standard import ExponentialBackoff

from controller.catalog.snapshot import load_catalog
from controller.cloud.aws import instances
from controller.cloud.aws.clients import DEFAULT_MAX_ATTEMPTS, make_clients
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
def world(localstack_session, localstack_endpoint):
    localstack_session("us-east-1")  # waits until every service answers, before the first call
    ec2: Any = make_clients("us-east-1", endpoint_url=localstack_endpoint, pricing=False, eks=False).ec2
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
    ud = al2023_user_data(ClusterInfo(world["cluster"], "https://example.eks", "Q0E=", "10.100.0.0/16"),
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


def _instances_named(world: dict[str, Any], name: str) -> list[str]:
    """Every instance tagged with the NodeClaim's name that is not going away: the duplicate check."""
    found = world["ec2"].describe_instances(Filters=[{"Name": "tag:karpenter.sh/nodeclaim", "Values": [name]}])
    return sorted(i["InstanceId"] for r in found["Reservations"] for i in r["Instances"]
                  if i["State"]["Name"] not in ("shutting-down", "terminated"))


@pytest.fixture
def no_backoff(monkeypatch):
    """botocore's retry sleeps set to zero: the attempts and the retry decisions stay karpy's config, only faster."""
    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: 0)


def test_the_launch_client_is_karpys_adaptive_retry_config(world):
    retries = world["ec2"].meta.config.retries
    assert retries == {"mode": "adaptive", "total_max_attempts": DEFAULT_MAX_ATTEMPTS}


def _failing_sends(status: int, code: str, times: int) -> tuple[dict[str, int], Any]:
    failures = {"left": times, "sent": 0}

    def fail(request, **kwargs):
        failures["sent"] += 1
        if failures["left"] == 0:
            return None
        failures["left"] -= 1
        body = (f"<Response><Errors><Error><Code>{code}</Code><Message>injected</Message></Error></Errors>"
                "<RequestID>x</RequestID></Response>").encode()
        return AWSResponse(request.url, status, {}, _Raw(body))

    return failures, fail


@pytest.mark.parametrize(("status", "code"), [(503, "RequestLimitExceeded"), (500, "InternalError")])
def test_throttling_and_5xx_are_retried_up_to_karpys_attempts_without_duplicates(world, no_backoff, status, code):
    """DEFAULT_MAX_ATTEMPTS - 1 failures in a row (more than botocore's own defaults of 3 or 5 attempts would
    survive) still launch exactly one instance."""
    ec2 = world["ec2"]
    failures, fail = _failing_sends(status, code, DEFAULT_MAX_ATTEMPTS - 1)
    ec2.meta.events.register("before-send.ec2.CreateFleet", fail)
    try:
        claim = _nodeclaim(f"default-{uuid.uuid4().hex[:5]}")
        inst = _launch(world, claim)
    finally:
        ec2.meta.events.unregister("before-send.ec2.CreateFleet", fail)
    assert failures == {"left": 0, "sent": DEFAULT_MAX_ATTEMPTS}
    assert inst.tags["karpenter.sh/nodeclaim"] == claim["metadata"]["name"]
    assert _instances_named(world, claim["metadata"]["name"]) == [inst.id]


def test_throttling_beyond_karpys_attempts_fails_the_launch(world, no_backoff):
    ec2 = world["ec2"]
    failures, fail = _failing_sends(503, "RequestLimitExceeded", DEFAULT_MAX_ATTEMPTS)
    ec2.meta.events.register("before-send.ec2.CreateFleet", fail)
    claim = _nodeclaim(f"default-{uuid.uuid4().hex[:5]}")
    try:
        with pytest.raises(ClientError) as raised:
            _launch(world, claim)
    finally:
        ec2.meta.events.unregister("before-send.ec2.CreateFleet", fail)
    assert raised.value.response["Error"]["Code"] == "RequestLimitExceeded"
    assert failures == {"left": 0, "sent": DEFAULT_MAX_ATTEMPTS}
    assert _instances_named(world, claim["metadata"]["name"]) == []


def _record_tokens(ec2: Any) -> tuple[list[str], Any]:
    tokens: list[str] = []

    def record(params, **kwargs):
        tokens.append(params["ClientToken"])

    ec2.meta.events.register("provide-client-params.ec2.CreateFleet", record)
    return tokens, record


def test_a_lost_createfleet_reply_retried_by_botocore_makes_one_instance(world, no_backoff):
    """The request reaches LocalStack and creates the instance; the reply is treated as lost (a connection error
    after the call) so botocore resends the same request: the same ClientToken, and one instance."""
    ec2 = world["ec2"]
    lost = {"left": 1}

    def drop_reply(response, caught_exception, **kwargs):
        if lost["left"] and caught_exception is None and response is not None and response[0].status_code == 200:
            lost["left"] -= 1
            return 0  # retry now, as botocore does after a ConnectionClosedError
        return None

    sends: list[str] = []

    def count(request, **kwargs):
        sends.append(request.url)

    tokens, record = _record_tokens(ec2)
    ec2.meta.events.register_first("needs-retry.ec2.CreateFleet", drop_reply)
    ec2.meta.events.register("before-send.ec2.CreateFleet", count)
    claim = _nodeclaim(f"default-{uuid.uuid4().hex[:5]}")
    try:
        inst = _launch(world, claim)
    finally:
        ec2.meta.events.unregister("needs-retry.ec2.CreateFleet", drop_reply)
        ec2.meta.events.unregister("before-send.ec2.CreateFleet", count)
        ec2.meta.events.unregister("provide-client-params.ec2.CreateFleet", record)
    assert lost["left"] == 0 and len(sends) == 2 and len(tokens) == 1
    assert _instances_named(world, claim["metadata"]["name"]) == [inst.id]


def test_a_lost_createfleet_reply_then_a_provider_retry_makes_one_instance(world):
    """The reply of a CreateFleet that launched the instance is lost after botocore's retries (the call raises);
    launching the NodeClaim again, as the lifecycle controller does, finds the instance instead of making another,
    and an identical request would carry the same ClientToken."""
    ec2 = world["ec2"]
    lost = {"left": 1}

    def drop_reply(http_response, parsed, **kwargs):
        if lost["left"] and http_response.status_code == 200:
            lost["left"] -= 1
            raise ConnectionClosedError(endpoint_url=str(ec2.meta.endpoint_url))

    tokens, record = _record_tokens(ec2)
    ec2.meta.events.register("after-call.ec2.CreateFleet", drop_reply)
    claim = _nodeclaim(f"default-{uuid.uuid4().hex[:5]}")
    name = claim["metadata"]["name"]
    try:
        with pytest.raises(ConnectionClosedError):
            _launch(world, claim)
        launched = _instances_named(world, name)
        assert len(launched) == 1  # the request did reach EC2
        inst = _launch(world, claim)
    finally:
        ec2.meta.events.unregister("after-call.ec2.CreateFleet", drop_reply)
        ec2.meta.events.unregister("provide-client-params.ec2.CreateFleet", record)
    assert lost["left"] == 0
    assert inst.id == launched[0]
    assert _instances_named(world, name) == launched
    assert len(tokens) == 1  # the retry found the instance by its tag: no second CreateFleet


class _Raw:
    """The raw body botocore reads from a response."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **kwargs):
        yield self.body

    def read(self, *args):
        return self.body
