"""`karpy controller` launches from a Custom and a Bottlerocket EC2NodeClass whose NodePools' templates carry labels
NodeRestriction keeps kubelet from setting (kubernetes.io/foo, node-restriction.kubernetes.io/x): the nodes'
kubelets register with the labels their user data gives them (read back from the launch template EC2 stores), and
registration applies the restricted ones through the API. Bottlerocket's settings carry the cluster DNS address
derived from the control plane's own kubernetes Service (LocalStack does not serve EKS DescribeCluster).

The GPU-pod-gets-the-nvidia-image case is tests/e2e/test_gpu_ami_e2e.py (the public /aws/service/... alias parameters,
which LocalStack refuses to store, served there by a proxy in front of it)."""

from __future__ import annotations

import base64
import functools
import ipaddress
import tomllib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import World, nodepool_name
from tests.e2e.harness import KubeletSim, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.localstack]
RESTRICTED = {"kubernetes.io/foo": "bar", "node-restriction.kubernetes.io/x": "y"}
CUSTOM_USER_DATA = "#!/bin/bash\n/opt/my-bootstrap --join\n"


def _user_data(world: World, claim: dict[str, Any]) -> str | None:
    """The user data of the launch template the NodeClaim's instance came from (None until it is launched)."""
    pid = (claim.get("status") or {}).get("providerID")
    if not pid:
        return None
    inst = world.instance(pid)
    nodeclass = claim["spec"]["nodeClassRef"]["name"]
    for lt in world.ec2.describe_launch_templates(Filters=[{"Name": "tag:karpenter.k8s.aws/ec2nodeclass",
                                                            "Values": [nodeclass]}])["LaunchTemplates"]:
        for v in world.ec2.describe_launch_template_versions(
                LaunchTemplateId=lt["LaunchTemplateId"])["LaunchTemplateVersions"]:
            data = v["LaunchTemplateData"]
            if data.get("ImageId") == inst["ImageId"]:
                return base64.b64decode(data.get("UserData", "")).decode()
    return None


def _bootstrap_labels(world: World, claim: dict[str, Any]) -> dict[str, str] | None:
    """What the node's own bootstrap tells kubelet: Bottlerocket's settings.kubernetes.node-labels; a Custom
    node's script knows none of karpy's labels."""
    ud = _user_data(world, claim)
    if ud is None:
        return None
    if ud == CUSTOM_USER_DATA:
        return {}
    try:
        return dict(tomllib.loads(ud)["settings"]["kubernetes"].get("node-labels") or {})
    except (tomllib.TOMLDecodeError, KeyError, TypeError, AttributeError):
        # another family's node (other tests' NodePools share the cluster): its kubelet gets the NodeClaim's labels
        return dict(claim["metadata"].get("labels") or {})


@pytest.fixture
def bootstrap_kubelet(world: World) -> Iterator[KubeletSim]:
    sim = KubeletSim(world.api, labels_for=functools.partial(_bootstrap_labels, world)).start()
    try:
        yield sim
    finally:
        sim.stop()


def _nodeclass(world: World, family: str, user_data: str) -> str:
    base = world.custom.get_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", world.nodeclass)
    name = f"{family.lower()}-{uuid.uuid4().hex[:5]}"
    spec = {**base["spec"], "amiFamily": family, "userData": user_data}
    world.custom.create_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", {
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": spec})
    return name


def _bound(world: World, namespace: str, app: str) -> bool:
    return len(world.bound_pods(namespace, app)) == 1


def _ready(world: World, name: str) -> bool:
    claim = world.custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", name)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in claim.get("status", {}).get("conditions", []))


def test_custom_and_bottlerocket_launch_and_register_with_restricted_labels(world: World, bootstrap_kubelet,
                                                                            start_controller):
    families = {"Custom": _nodeclass(world, "Custom", CUSTOM_USER_DATA),
                "Bottlerocket": _nodeclass(world, "Bottlerocket", '[settings.host-containers.admin]\nenabled = true\n')}
    pools = {}
    for family, nodeclass in families.items():
        pools[family] = nodepool_name(family.lower())
        world.nodepool(pools[family], nodeClassRef={"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                    "name": nodeclass})
        body = world.custom.get_cluster_custom_object("karpenter.sh", "v1", "nodepools", pools[family])
        body["spec"]["template"].setdefault("metadata", {})["labels"] = {**RESTRICTED, "team": "a"}
        world.custom.replace_cluster_custom_object("karpenter.sh", "v1", "nodepools", pools[family], body)
    ns = world.namespace()
    controller = start_controller()
    for family, pool in pools.items():
        world.deployment(ns, family.lower(), 1, pool)
    for family, pool in pools.items():
        app = family.lower()
        wait_for(f"{family} pod bound", functools.partial(_bound, world, ns, app), timeout=180)
        claim = world.nodeclaims(pool)[0]
        wait_for(f"{family} NodeClaim Ready", functools.partial(_ready, world, claim["metadata"]["name"]),
                 timeout=90)
        claim = world.custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", claim["metadata"]["name"])
        ud = _user_data(world, claim)
        assert ud is not None
        node = world.core.read_node(claim["status"]["nodeName"])
        labels = node.metadata.labels
        # the restricted labels reached the Node through registration, not kubelet
        for key, value in RESTRICTED.items():
            assert labels[key] == value, key
            assert key not in ud, (family, key)
        assert labels["team"] == "a" and labels["karpenter.sh/registered"] == "true"
        if family == "Custom":
            assert ud == CUSTOM_USER_DATA  # passed through untouched
            continue
        settings = tomllib.loads(ud)["settings"]
        k8s = settings["kubernetes"]
        assert settings["host-containers"] == {"admin": {"enabled": True}}
        assert k8s["cluster-name"] == world.cluster and k8s["api-server"] == "https://127.0.0.1:6443"
        assert k8s["node-labels"] == {"karpenter.sh/nodepool": pool, "team": "a",
                                      "karpenter.k8s.aws/ec2nodeclass": families[family]}
        assert k8s["node-taints"]["karpenter.sh/unregistered"] == [":NoExecute"]
        # the cluster DNS address: the tenth of the Service range the kubernetes Service's ClusterIP lies in
        service_ip = ipaddress.ip_address(world.core.read_namespaced_service("kubernetes", "default").spec.cluster_ip)
        assert ipaddress.ip_address(k8s["cluster-dns-ip"]) in ipaddress.ip_network(f"{service_ip}/16", strict=False)
        assert k8s["cluster-dns-ip"].endswith(".10")
    assert "registered nodeclaim" in controller.messages()
    assert controller.stop() == 0
