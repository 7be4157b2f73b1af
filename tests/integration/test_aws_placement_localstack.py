"""Where instances land, against LocalStack's EC2 through AWSCloudProvider: per zone the subnet with the most free
addresses (LocalStack's real AvailableIpAddressCount, which drops as instances take addresses), launches in flight
counted, and a subnet out of addresses passed over for another subnet of its zone.

LocalStack never answers CreateFleet with InsufficientFreeAddressesInSubnet (its subnets fail internally when full),
so that one error is injected into the real client call with a botocore hook, as EC2 words it."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from tests.integration.aws_world import launch_for, make_world

pytestmark = pytest.mark.localstack
ZONES = ("us-east-1a", "us-east-1b")


@pytest.fixture(scope="module")
def world(aws_client):
    ec2 = aws_client("ec2")
    provider, nodeclass = make_world(ec2, aws_client("ssm"), aws_client("iam"), cidr_octet=41, zones=ZONES,
                                     prices={"m5.large": 0.096, "m5.4xlarge": 0.768})
    # the Service range the test cluster would report (placement does not depend on it; bootstrap needs one)
    provider.cluster = dataclasses.replace(provider.cluster, service_cidr="10.100.0.0/16")
    terms = nodeclass["spec"]["subnetSelectorTerms"]
    made = {s["AvailabilityZone"]: s for s in ec2.describe_subnets(
        Filters=[{"Name": f"tag:{k}", "Values": [v]} for k, v in terms[0]["tags"].items()])["Subnets"]}
    vpc = made["us-east-1a"]["VpcId"]
    tag = [{"Key": k, "Value": v} for k, v in terms[0]["tags"].items()]
    # a second, bigger subnet in zone a (the first choice there) and a second, smaller one in zone b
    big_a = ec2.create_subnet(VpcId=vpc, CidrBlock="10.41.128.0/23", AvailabilityZone="us-east-1a",
                              TagSpecifications=[{"ResourceType": "subnet", "Tags": tag}])["Subnet"]
    small_b = ec2.create_subnet(VpcId=vpc, CidrBlock="10.41.64.0/25", AvailabilityZone="us-east-1b",
                                TagSpecifications=[{"ResourceType": "subnet", "Tags": tag}])["Subnet"]
    return {"ec2": ec2, "provider": provider, "nodeclass": nodeclass, "terms": terms,
            "a24": made["us-east-1a"]["SubnetId"], "a23": big_a["SubnetId"],
            "b24": made["us-east-1b"]["SubnetId"], "b25": small_b["SubnetId"]}


def _nodeclaim(zones: tuple[str, ...], types: tuple[str, ...] = ("m5.large",)) -> dict[str, Any]:
    return {"metadata": {"name": f"default-{uuid.uuid4().hex[:5]}", "uid": str(uuid.uuid4()),
                         "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(types)},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": list(zones)},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}


def _subnet_of(ec2: Any, provider_id: str) -> str:
    instance_id = provider_id.rsplit("/", 1)[1]
    return str(ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["SubnetId"])


def _free(ec2: Any, subnet_id: str) -> int:
    return int(ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]["AvailableIpAddressCount"])


class FullSubnets:
    """A CreateFleet hook: overrides naming a full subnet are refused with InsufficientFreeAddressesInSubnet (as EC2
    answers); a request left with other overrides reaches LocalStack with those only."""

    def __init__(self, ec2: Any, full: set[str]) -> None:
        self.ec2, self.full, self.calls, self.refused = ec2, full, 0, 0
        self.request: dict[str, Any] = {}

    def __enter__(self) -> FullSubnets:
        self.ec2.meta.events.register("provide-client-params.ec2.CreateFleet", self.record)
        self.ec2.meta.events.register("before-call.ec2.CreateFleet", self.hook)
        return self

    def __exit__(self, *exc: object) -> None:
        self.ec2.meta.events.unregister("before-call.ec2.CreateFleet", self.hook)
        self.ec2.meta.events.unregister("provide-client-params.ec2.CreateFleet", self.record)

    def record(self, params: dict[str, Any], **_: Any) -> None:
        self.request = params

    def hook(self, **_: Any) -> Any:
        self.calls += 1
        overrides = [o for c in self.request["LaunchTemplateConfigs"] for o in c["Overrides"]]
        refused = [o for o in overrides if o["SubnetId"] in self.full]
        if not refused:
            return None
        self.refused += len(refused)
        errors = [{"LaunchTemplateAndOverrides": {"Overrides": o}, "Lifecycle": "on-demand",
                   "ErrorCode": "InsufficientFreeAddressesInSubnet",
                   "ErrorMessage": "There are not enough free addresses in subnet to satisfy the requested number of "
                                   "instances."} for o in refused]
        return AWSResponse("https://ec2", 200, {}, None), {"Instances": [], "Errors": errors}


def test_most_free_addresses_first_and_launches_in_flight_counted(world):
    ec2, provider = world["ec2"], world["provider"]
    subnets = provider.subnets.describe(ec2, world["terms"])
    assert {s.id: s.available_ips for s in subnets} == {
        world["a24"]: 251, world["a23"]: 507, world["b24"]: 251, world["b25"]: 123}
    # zone b: the /24 (251 free) first; an m5.4xlarge takes up to 234 pod addresses, so the next launch counts
    # 17 left there and goes to the /25 (123)
    first = launch_for(provider, _nodeclaim(("us-east-1b",), ("m5.4xlarge",)), world["nodeclass"])
    assert _subnet_of(ec2, first.provider_id) == world["b24"]
    second = launch_for(provider, _nodeclaim(("us-east-1b",), ("m5.4xlarge",)), world["nodeclass"])
    assert _subnet_of(ec2, second.provider_id) == world["b25"]
    # LocalStack counts one address per instance: described again, the real counts replace the in-flight ones and
    # the /24 is first again
    assert (_free(ec2, world["b24"]), _free(ec2, world["b25"])) == (250, 122)
    provider.subnets.describe(ec2, world["terms"])
    third = launch_for(provider, _nodeclaim(("us-east-1b",), ("m5.4xlarge",)), world["nodeclass"])
    assert _subnet_of(ec2, third.provider_id) == world["b24"]


def test_a_zone_with_a_full_subnet_still_launches(world):
    ec2, provider = world["ec2"], world["provider"]
    provider.subnets.describe(ec2, world["terms"])
    with FullSubnets(ec2, {world["a23"]}) as hook:
        node = launch_for(provider, _nodeclaim(("us-east-1a",)), world["nodeclass"])
    # the /23 (most free) refused; the retry took the zone's other subnet, and the zone's offering was kept
    assert hook.calls == 2 and hook.refused == 1
    assert node.zone == "us-east-1a" and _subnet_of(ec2, node.provider_id) == world["a24"]
    assert not provider.unavailable.is_unavailable("m5.large", "us-east-1a", "on-demand")
    assert provider.subnets.is_full(world["a23"])
    # the next launch goes straight to the subnet with room
    with FullSubnets(ec2, {world["a23"]}) as hook:
        again = launch_for(provider, _nodeclaim(("us-east-1a",)), world["nodeclass"])
    assert hook.calls == 1 and hook.refused == 0 and _subnet_of(ec2, again.provider_id) == world["a24"]


def test_a_zone_whose_subnets_are_all_full_gives_up_its_offerings(world):
    ec2, provider = world["ec2"], world["provider"]
    with FullSubnets(ec2, {world["a23"], world["a24"]}) as hook:
        node = launch_for(provider, _nodeclaim(ZONES), world["nodeclass"])
    assert node.zone == "us-east-1b" and hook.refused >= 1
    assert provider.unavailable.is_unavailable("m5.large", "us-east-1a", "on-demand")
