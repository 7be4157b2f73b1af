"""Pure parts of the launch path: user data, override selection, providerIDs, tag filters, template naming."""

from __future__ import annotations

import email

import pytest
import yaml

from controller.api.models import Taint
from controller.catalog.types import InstanceType, Offering
from controller.cloud.aws.discovery import Subnet, subnets_by_zone, tag_filters
from controller.cloud.aws.fleet import MAX_OVERRIDES, choose_overrides
from controller.cloud.aws.instances import parse_provider_id, provider_id
from controller.cloud.aws.launchtemplates import LaunchTemplateSpec
from controller.cloud.aws.tags import owned_by, ownership_filters, ownership_tags
from controller.cloud.aws.unavailable import UnavailableOfferings
from controller.cloud.aws.userdata import ClusterInfo, NodeSettings, al2023_user_data
from controller.scheduling.requirements import Requirements

CLUSTER = ClusterInfo("prod", "https://ABC.gr7.us-east-1.eks.amazonaws.com", "LS0tQ0E=", "172.20.0.0/16")


def _parts(doc: str) -> list[tuple[str, str]]:
    msg = email.message_from_string(doc)
    return [(p.get_content_type(), str(p.get_payload())) for p in msg.walk() if not p.is_multipart()]


def test_al2023_nodeconfig_carries_cluster_and_kubelet():
    node = NodeSettings({"karpenter.sh/nodepool": "default", "team": "a"},
                        [Taint(key="dedicated", value="gpu", effect="NoSchedule")], {"maxPods": 110})
    parts = _parts(al2023_user_data(CLUSTER, node))
    assert [t for t, _ in parts] == ["application/node.eks.aws"]
    cfg = yaml.safe_load(parts[0][1])
    assert cfg["kind"] == "NodeConfig"
    assert cfg["spec"]["cluster"] == {"name": "prod", "apiServerEndpoint": CLUSTER.endpoint,
                                      "certificateAuthority": "LS0tQ0E=", "cidr": "172.20.0.0/16"}
    assert cfg["spec"]["kubelet"]["config"]["maxPods"] == 110
    assert cfg["spec"]["kubelet"]["config"]["registerWithTaints"] == [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]
    assert cfg["spec"]["kubelet"]["flags"] == ["--node-labels=karpenter.sh/nodepool=default,team=a"]


@pytest.mark.parametrize(("user", "types"), [
    ("#!/bin/bash\necho hello", ["text/x-shellscript", "application/node.eks.aws"]),
    ("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec: {kubelet: {config: {shutdownGracePeriod: 30s}}}",
     ["application/node.eks.aws", "application/node.eks.aws"]),
    ('MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="BOUNDARY"\n\n--BOUNDARY\n'
     'Content-Type: text/x-shellscript; charset="us-ascii"\n\n#!/bin/bash\necho one\n--BOUNDARY--\n',
     ["text/x-shellscript", "application/node.eks.aws"]),
])
def test_user_data_is_merged_before_karpenters(user, types):
    parts = _parts(al2023_user_data(CLUSTER, NodeSettings(), user))
    assert [t for t, _ in parts] == types
    assert yaml.safe_load(parts[-1][1])["spec"]["cluster"]["name"] == "prod"


def test_bad_user_data_is_named():
    with pytest.raises(ValueError, match="userData: expected"):
        al2023_user_data(CLUSTER, NodeSettings(), "just some words")


def _it(name: str, price: float, zones: tuple[str, ...] = ("a", "b"), spot: bool = True) -> InstanceType:
    offerings = [Offering(z, "on-demand", price) for z in zones]
    if spot:
        offerings += [Offering(z, "spot", price / 3) for z in zones]
    return InstanceType(name, {"node.kubernetes.io/instance-type": name,
                               "karpenter.k8s.aws/instance-family": name.split(".")[0]}, {}, offerings=offerings)


SUBNETS = {"a": Subnet("subnet-a", "a", "use1-az1", 100), "b": Subnet("subnet-b", "b", "use1-az2", 100)}


def test_overrides_prefer_spot_then_price_and_respect_requirements():
    types = [_it("m5.xlarge", 0.192), _it("m5.large", 0.096), _it("c5.large", 0.085, spot=False)]
    ct, overrides = choose_overrides(Requirements(), types, SUBNETS, UnavailableOfferings())
    assert ct == "spot"
    assert [o.instance_type for o in overrides][:2] == ["m5.large", "m5.large"]
    od = Requirements.from_node_selector_requirements([
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["b"]}])
    ct, overrides = choose_overrides(od, types, SUBNETS, UnavailableOfferings())
    assert ct == "on-demand" and overrides[0].instance_type == "c5.large"
    assert {o.subnet.id for o in overrides} == {"subnet-b"}
    family = Requirements.from_node_selector_requirements([
        {"key": "karpenter.k8s.aws/instance-family", "operator": "NotIn", "values": ["m5"]}])
    ct, overrides = choose_overrides(family, types, SUBNETS, UnavailableOfferings())
    assert ct == "on-demand" and {o.instance_type for o in overrides} == {"c5.large"}


def test_overrides_skip_iced_offerings_and_cap_at_60():
    ice = UnavailableOfferings()
    ice.mark_unavailable("m5.large", "a", "spot")
    ct, overrides = choose_overrides(Requirements(), [_it("m5.large", 0.096)], SUBNETS, ice)
    assert ct == "spot"
    assert [(o.instance_type, o.subnet.zone) for o in overrides] == [("m5.large", "b")]
    # 49 types x 2 zones = 98 spot offerings, listed dearest first: CreateFleet gets the 60 cheapest, in price order
    many = [_it(f"m5.{i}xlarge", 0.1 * i) for i in range(49, 0, -1)]
    ct, kept = choose_overrides(Requirements(), many, SUBNETS, UnavailableOfferings())
    assert MAX_OVERRIDES == 60 and ct == "spot" and len(kept) == 60
    assert [(o.instance_type, o.subnet.zone) for o in kept] == [
        (f"m5.{i}xlarge", z) for i in range(1, 31) for z in ("a", "b")]
    assert [o.price for o in kept] == sorted(o.price for o in kept)


def test_provider_ids_and_tags():
    assert provider_id("us-east-1a", "i-0abc") == "aws:///us-east-1a/i-0abc"
    assert parse_provider_id("aws:///us-east-1a/i-0abc") == ("us-east-1a", "i-0abc")
    with pytest.raises(ValueError, match="not an AWS providerID"):
        parse_provider_id("gce://p/z/n")
    assert tag_filters({"karpenter.sh/discovery": "prod", "Name": "*"}) == [
        {"Name": "tag:karpenter.sh/discovery", "Values": ["prod"]}, {"Name": "tag-key", "Values": ["Name"]}]


def test_one_ownership_tag_helper_for_instances_profiles_templates_and_filters():
    assert ownership_tags("prod", nodepool="default", nodeclaim="default-x7k2p", nodeclass="default",
                          user_tags={"team": "a", "eks:eks-cluster-name": "spoofed"}) == {
        "team": "a", "kubernetes.io/cluster/prod": "owned", "eks:eks-cluster-name": "prod",
        "karpenter.sh/nodepool": "default", "karpenter.sh/nodeclaim": "default-x7k2p",
        "karpenter.k8s.aws/ec2nodeclass": "default"}  # Named after its Node once it registers, not at launch
    assert ownership_tags("prod", nodeclaim="c", user_tags={"Name": "mine"})["Name"] == "mine"
    # instance profiles: what the iam:*InstanceProfile conditions of the controller policy key on
    assert ownership_tags("prod", nodeclass="default", region="us-east-1") == {
        "kubernetes.io/cluster/prod": "owned", "eks:eks-cluster-name": "prod",
        "karpenter.k8s.aws/ec2nodeclass": "default", "topology.kubernetes.io/region": "us-east-1"}
    assert ownership_filters("prod", nodeclaim="c", tag_keys=("karpenter.sh/nodepool",)) == [
        {"Name": "tag:kubernetes.io/cluster/prod", "Values": ["owned"]},
        {"Name": "tag:karpenter.sh/nodeclaim", "Values": ["c"]},
        {"Name": "tag-key", "Values": ["karpenter.sh/nodepool"]}]
    assert owned_by({"kubernetes.io/cluster/prod": "owned"}, "prod")
    assert owned_by({"eks:eks-cluster-name": "prod"}, "prod")
    assert not owned_by({"kubernetes.io/cluster/prod": "shared", "eks:eks-cluster-name": "dev"}, "prod")


def test_most_free_ips_per_zone():
    subnets = [Subnet("subnet-1", "a", "", 10), Subnet("subnet-2", "a", "", 200), Subnet("subnet-3", "b", "", 5)]
    assert {z: s.id for z, s in subnets_by_zone(subnets).items()} == {"a": "subnet-2", "b": "subnet-3"}


def test_launch_template_name_follows_content():
    a = LaunchTemplateSpec("ami-1", "ud", ("sg-1",), "profile")
    b = LaunchTemplateSpec("ami-1", "ud", ("sg-1",), "profile")
    c = LaunchTemplateSpec("ami-2", "ud", ("sg-1",), "profile")
    assert a.name() == b.name() != c.name()
    assert a.name().startswith("karpenter.k8s.aws/")
    assert a.data()["MetadataOptions"]["HttpTokens"] == "required"


def test_al2_bootstrap_carries_kubelet_args_after_user_script():
    from controller.cloud.aws.userdata import al2_user_data

    node = NodeSettings({"karpenter.sh/nodepool": "default"}, [Taint(key="a", value="b", effect="NoSchedule")],
                        {"maxPods": 58})
    parts = _parts(al2_user_data(CLUSTER, node, "#!/bin/bash\necho first"))
    assert [t for t, _ in parts] == ["text/x-shellscript", "text/x-shellscript"]
    assert "echo first" in parts[0][1]
    boot = parts[1][1]
    assert "/etc/eks/bootstrap.sh 'prod' --apiserver-endpoint 'https://ABC.gr7.us-east-1.eks.amazonaws.com'" in boot
    assert "--use-max-pods false" in boot
    assert ("--kubelet-extra-args '--node-labels=karpenter.sh/nodepool=default "
            "--register-with-taints=a=b:NoSchedule,karpenter.sh/unregistered:NoExecute "
            "--max-pods=58'") in boot


def test_bottlerocket_settings_merge_with_karpenters_winning():
    import tomllib

    from controller.cloud.aws.userdata import bottlerocket_user_data

    user = ('[settings.kubernetes]\ncluster-name = "wrong"\nmax-pods = 5\n'
            '[settings.host-containers.admin]\nenabled = true\n')
    node = NodeSettings({"karpenter.sh/nodepool": "default"}, [Taint(key="a", value="b", effect="NoSchedule")],
                        {"maxPods": 110})
    settings = tomllib.loads(bottlerocket_user_data(CLUSTER, node, user))["settings"]
    k8s = settings["kubernetes"]
    assert k8s["cluster-name"] == "prod" and k8s["api-server"] == CLUSTER.endpoint and k8s["max-pods"] == 110
    assert k8s["node-labels"] == {"karpenter.sh/nodepool": "default"}
    assert k8s["node-taints"] == {"a": ["b:NoSchedule"], "karpenter.sh/unregistered": [":NoExecute"]}
    assert settings["host-containers"]["admin"]["enabled"] is True  # the user's own settings are kept
    with pytest.raises(ValueError, match="not valid TOML"):
        bottlerocket_user_data(CLUSTER, node, "settings = [")


def test_clients_retry_throttling_adaptively():
    from controller.cloud.aws.clients import client_config, make_clients

    clients = make_clients("eu-west-1", pricing=False)
    assert clients.ec2.meta.config.retries["mode"] == "adaptive"
    assert clients.ec2.meta.config.retries["total_max_attempts"] == 10
    assert clients.ec2.meta.region_name == "eu-west-1" and clients.pricing is None
    assert make_clients("eu-west-1").pricing.meta.region_name == "us-east-1"
    with pytest.raises(ValueError, match="retry mode 'sometimes'"):
        client_config("sometimes")
