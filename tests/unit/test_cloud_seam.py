"""The CloudProvider seam: typed launch requests and node classes built once from the manifests, one offering /
requirement predicate shared by the scheduler, CreateFleet's overrides and the fake cloud, and one instance-type
cache (the cloud provider's), so a batch right after an ICE plans without the refused offering."""

from __future__ import annotations

import pytest

from controller.api import labels as L
from controller.api.models import Taint
from controller.catalog.types import InstanceType, Offering
from controller.cloud.aws.discovery import Subnet
from controller.cloud.aws.fleet import choose_overrides
from controller.cloud.aws.provider import resolved_from_status
from controller.cloud.aws.subnets import SubnetProvider
from controller.cloud.aws.unavailable import UnavailableOfferings
from controller.cloud.errors import InsufficientCapacityError
from controller.cloud.fake.provider import FakeCloudProvider
from controller.cloud.provider import (
    LaunchRequest,
    NodeClass,
    ResolvedAMI,
    ResolvedSecurityGroup,
    ResolvedSubnet,
)
from controller.provisioning.provisioner import Provisioner
from controller.scheduling.instancetypes import (
    CAPACITY_TYPES,
    InstanceTypeIndex,
    OfferingFilter,
    compatible_offerings,
    labels_compatible,
)
from controller.scheduling.requirements import Requirements
from controller.scheduling.types import SchedNodePool

NODECLAIM = {
    "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
    "metadata": {"name": "default-x7k2p", "uid": "0b6c-uid", "labels": {L.NODEPOOL: "default", "team": "a"}},
    "spec": {"requirements": [{"key": L.CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]},
                              {"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m5.large", "c5.large"]}],
             "resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}},
             "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
             "startupTaints": [{"key": "cilium.io/agent-not-ready", "effect": "NoExecute"}],
             "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}

NODECLASS = {
    "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
    "spec": {"role": "KarpenterNodeRole-prod", "amiSelectorTerms": [{"alias": "bottlerocket@latest"}],
             "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
             "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
             "kubelet": {"maxPods": 110}, "tags": {"team": "a"}, "detailedMonitoring": True,
             "metadataOptions": {"httpTokens": "required"},
             "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "40Gi"}}]},
    "status": {"instanceProfile": "prod_123",
               "subnets": [{"id": "subnet-2", "zone": "us-east-1a", "zoneID": "use1-az1"},
                           {"id": "subnet-1", "zone": "us-east-1a", "zoneID": "use1-az1"},
                           {"id": "subnet-3", "zone": "us-east-1b", "zoneID": "use1-az2"}],
               "securityGroups": [{"id": "sg-1", "name": "nodes"}],
               "amis": [{"id": "ami-arm", "name": "br-arm", "requirements": [
                   {"key": L.ARCH, "operator": "In", "values": ["arm64"]}]},
                        {"id": "ami-x86", "name": "br-x86", "requirements": [
                            {"key": L.ARCH, "operator": "In", "values": ["amd64"]}]}]}}


def test_launch_request_is_built_once_from_the_nodeclaim_manifest():
    r = LaunchRequest.from_manifest(NODECLAIM)
    assert (r.name, r.uid, r.nodepool, r.nodeclass) == ("default-x7k2p", "0b6c-uid", "default", "default")
    assert r.labels == {L.NODEPOOL: "default", "team": "a"}
    assert r.requests == {"cpu": 1500, "memory": 2 * 2**30}
    assert r.taints == (Taint(key="dedicated", value="gpu", effect="NoSchedule"),)
    assert r.startup_taints == (Taint(key="cilium.io/agent-not-ready", value="", effect="NoExecute"),)
    assert r.requirements.get(L.INSTANCE_TYPE).has("c5.large") and not r.requirements.get(L.INSTANCE_TYPE).has(
        "m5.xlarge")
    assert not r.requirements.get(L.CAPACITY_TYPE).has("reserved")


def test_nodeclass_view_carries_spec_and_resolved_status():
    nc = NodeClass.from_manifest(NODECLASS)
    assert (nc.name, nc.ami_family, nc.role, nc.instance_profile) == ("default", "bottlerocket",
                                                                      "KarpenterNodeRole-prod", None)
    assert nc.kubelet == {"maxPods": 110} and nc.tags == {"team": "a"} and nc.detailed_monitoring is True
    assert nc.block_device_mappings == ({"deviceName": "/dev/xvda", "ebs": {"volumeSize": "40Gi"}},)
    assert nc.subnets[0] == ResolvedSubnet("subnet-2", "us-east-1a", "use1-az1")
    assert nc.security_groups == (ResolvedSecurityGroup("sg-1", "nodes"),)
    assert nc.amis == (ResolvedAMI("ami-arm", "br-arm", ("arm64",), (("kubernetes.io/arch", "In", ("arm64",)),)),
                       ResolvedAMI("ami-x86", "br-x86", ("amd64",), (("kubernetes.io/arch", "In", ("amd64",)),)))
    resolved = resolved_from_status(nc)
    assert resolved is not None
    subnets, groups, amis, profile = resolved
    # per zone the first subnet of the status (the status controller orders them by free IPs) unless the subnet
    # provider counts more free addresses elsewhere
    assert {z: s.id for z, s in SubnetProvider().zonal(subnets).items()} == {"us-east-1a": "subnet-2",
                                                                              "us-east-1b": "subnet-3"}
    assert [g.id for g in groups] == ["sg-1"] and profile == "prod_123"
    assert [(a.id, a.architecture) for a in amis] == [("ami-arm", "arm64"), ("ami-x86", "amd64")]  # status order
    # not resolved yet: the provider resolves itself
    assert resolved_from_status(NodeClass.from_manifest({**NODECLASS, "status": {}})) is None


# ---- one offering / requirement predicate ------------------------------------------------------------------------
def _reqs(**by_key: list[str]) -> Requirements:
    keys = {"zone": L.ZONE, "zone_id": L.ZONE_ID, "ct": L.CAPACITY_TYPE, "reservation": L.CAPACITY_RESERVATION_ID,
            "family": L.INSTANCE_FAMILY, "type": L.INSTANCE_TYPE}
    return Requirements.from_node_selector_requirements(
        [{"key": keys[k], "operator": "In", "values": v} for k, v in by_key.items()])


RESERVED_A = Offering("a", "reserved", 0.0, zone_id="use1-az1", reservation_id="cr-1")
RESERVED_B = Offering("b", "reserved", 0.0, zone_id="use1-az2", reservation_id="cr-2")
SPOT_A = Offering("a", "spot", 0.03, zone_id="use1-az1")
OD_B = Offering("b", "on-demand", 0.096, zone_id="use1-az2")


@pytest.mark.parametrize(("reqs", "allowed"), [
    (Requirements(), {RESERVED_A, RESERVED_B, SPOT_A, OD_B}),
    (_reqs(zone=["a"]), {RESERVED_A, SPOT_A}),
    (_reqs(zone_id=["use1-az2"]), {RESERVED_B, OD_B}),
    (_reqs(ct=["spot", "on-demand"]), {SPOT_A, OD_B}),
    (_reqs(ct=["reserved"]), {RESERVED_A, RESERVED_B}),
    # a reservation ID is only on reserved offerings: requiring one rules the others out
    (_reqs(reservation=["cr-2"]), {RESERVED_B}),
    (_reqs(reservation=["cr-9"]), set()),
    (Requirements.from_node_selector_requirements(
        [{"key": L.CAPACITY_RESERVATION_ID, "operator": "DoesNotExist"}]), {SPOT_A, OD_B}),
])
def test_offering_filter_zone_zone_id_capacity_type_and_reservation(reqs, allowed):
    f = OfferingFilter(reqs)
    assert {o for o in (RESERVED_A, RESERVED_B, SPOT_A, OD_B) if f.allows(o)} == allowed


def _type(name: str, *offerings: Offering) -> InstanceType:
    return InstanceType(name, {L.INSTANCE_TYPE: name, L.INSTANCE_FAMILY: name.split(".")[0], L.ARCH: "amd64"},
                        {"cpu": 2000, "memory": 8 * 2**30, "pods": 29}, offerings=list(offerings))


TYPES = [_type("m5.large", RESERVED_A, SPOT_A, OD_B, Offering("a", "on-demand", 0.096, available=False)),
         _type("c5.large", Offering("a", "spot", 0.02), Offering("b", "on-demand", 0.085)),
         _type("r5.large", RESERVED_B, Offering("b", "spot", 0.04))]
SUBNETS = {"a": Subnet("subnet-a", "a", "use1-az1", 100), "b": Subnet("subnet-b", "b", "use1-az2", 100)}


def _index_offerings(reqs: Requirements) -> set[tuple[str, str, str]]:
    """What the scheduler's instance-type index offers a NodePool with these requirements."""
    index = InstanceTypeIndex(SchedNodePool("default", 0, reqs, [], [], {}, None, {}, TYPES), ["cpu"])
    return {(it.name, z, ct) for t, it in enumerate(index.types) for zi, z in enumerate(index.zones)
            for ci, ct in enumerate(CAPACITY_TYPES) if index.price[t, zi, ci] < float("inf")}


@pytest.mark.parametrize("reqs", [
    Requirements(), _reqs(zone=["b"]), _reqs(ct=["spot", "on-demand"]), _reqs(ct=["on-demand"]),
    _reqs(reservation=["cr-2"]), _reqs(family=["c5", "r5"]), _reqs(type=["m5.large"], ct=["on-demand"]),
    _reqs(zone_id=["use1-az1"], ct=["spot"]),
])
def test_scheduler_fleet_and_fake_cloud_agree_on_the_offerings_requirements_allow(reqs):
    expected = {(it.name, o.zone, o.capacity_type) for it in TYPES for o in compatible_offerings(it, reqs)}
    assert _index_offerings(reqs) == expected
    ct, overrides = choose_overrides(reqs, TYPES, SUBNETS, UnavailableOfferings())
    # CreateFleet gets every allowed offering of the preferred capacity type: reserved, then spot, then on-demand
    preferred = next(c for c in ("reserved", "spot", "on-demand") if any(e[2] == c for e in expected))
    assert ct == preferred
    assert {(o.instance_type, o.subnet.zone, ct) for o in overrides} == {e for e in expected if e[2] == ct}
    fake = FakeCloudProvider()
    fake.catalog.instance_types = TYPES
    node = fake.create(LaunchRequest("c", requirements=reqs), NodeClass("default"))
    assert (node.instance_type, node.zone, node.capacity_type) in expected and node.capacity_type == preferred


def test_reserved_launch_carries_its_reservation_and_a_used_up_reservation_falls_back():
    ct, overrides = choose_overrides(Requirements(), TYPES, SUBNETS, UnavailableOfferings())
    assert ct == "reserved"
    assert {(o.instance_type, o.reservation_id) for o in overrides} == {("m5.large", "cr-1"), ("r5.large", "cr-2")}
    ice = UnavailableOfferings()
    ice.mark_unavailable("m5.large", "a", "reserved")
    ice.mark_unavailable("r5.large", "b", "reserved")
    ct, overrides = choose_overrides(Requirements(), TYPES, SUBNETS, ice)
    assert ct == "spot" and overrides[0].instance_type == "c5.large"


def test_labels_compatible_ignores_offering_keys_and_labels_the_type_lacks():
    m5 = TYPES[0]
    assert labels_compatible(m5, _reqs(zone=["z"], ct=["x"]))  # the offerings' question
    assert labels_compatible(m5, Requirements.from_node_selector_requirements(
        [{"key": "team", "operator": "In", "values": ["a"]}]))  # a NodePool label, not the type's
    assert not labels_compatible(m5, _reqs(family=["c5"]))
    assert compatible_offerings(m5, _reqs(family=["c5"])) == []
    bare = InstanceType("x1.large", {}, {})
    assert labels_compatible(bare, _reqs(type=["x1.large"])) and not labels_compatible(bare, _reqs(type=["m5.large"]))


# ---- one instance-type cache -------------------------------------------------------------------------------------
def test_provisioner_plans_the_next_batch_without_an_offering_just_refused():
    cloud = FakeCloudProvider()
    cloud.catalog.instance_types = TYPES
    provisioner = Provisioner(None, None, cloud, None)  # only the cloud is used here
    nodeclass = {"metadata": {"name": "default", "resourceVersion": "7"}, "spec": {}}
    before = {it.name: it for it in provisioner._instance_types(nodeclass)}
    assert next(o for o in before["c5.large"].offerings if o.capacity_type == "spot").available
    launched = cloud.create(LaunchRequest("a", requirements=_reqs(ct=["spot"])), NodeClass("default"))
    assert (launched.instance_type, launched.capacity_type) == ("c5.large", "spot")
    cloud.insufficient.add(("c5.large", "a", "spot"))  # the next launch is refused: an ICE
    # same node class, same resourceVersion, within a second: the listing already shows the refused offering
    after = {it.name: it for it in provisioner._instance_types(nodeclass)}
    assert not next(o for o in after["c5.large"].offerings if o.capacity_type == "spot").available
    assert all(o.available for o in after["r5.large"].offerings)
    index = InstanceTypeIndex(SchedNodePool("default", 0, _reqs(ct=["spot"]), [], [], {}, None, {},
                                            list(after.values())), ["cpu"])
    assert [it.name for it in index.types] == ["m5.large", "r5.large"]
    with pytest.raises(InsufficientCapacityError):
        cloud.create(LaunchRequest("b", requirements=_reqs(type=["c5.large"], ct=["spot"])), NodeClass("default"))
