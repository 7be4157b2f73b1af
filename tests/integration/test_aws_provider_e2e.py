"""AWSCloudProvider end to end: an EC2NodeClass and a NodeClaim become a real (LocalStack) instance; the test plays
kubelet for it on the real control plane, and the real scheduler binds a pending pod to that Node. The AWS resources
come from tests/integration/aws_world.py (which says how the public AMI parameters are seeded)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from kubernetes import client

from controller.api.quantity import format_quantity
from controller.cloud.aws.errors import LaunchError, NodeClaimNotFoundError
from tests.integration.aws_world import launch_for, make_world
from tests.integration.kubelet import FakeKubelet

pytestmark = [pytest.mark.localstack, pytest.mark.kube,
              pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]
@pytest.fixture(scope="module")
def provider_and_class(aws_client):
    return make_world(aws_client("ec2"), aws_client("ssm"), aws_client("iam"), cidr_octet=30,
                      zones=("us-east-1a", "us-east-1b"),
                      prices={"m5.large": 0.096, "m6g.large": 0.077, "c5.large": 0.085})


def _nodeclaim(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": str(uuid.uuid4()), "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In",
                 "values": ["m5.large", "m6g.large", "c5.large"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}


def test_launch_register_and_bind(provider_and_class, kube_api):
    provider, nodeclass = provider_and_class
    name = f"default-{uuid.uuid4().hex[:5]}"
    node = launch_for(provider, _nodeclaim(name), nodeclass)
    assert node.provider_id.startswith("aws:///us-east-1")
    # m6g.large ($0.077) is the cheapest allowed: the arm64 AMI's launch template is used
    assert node.capacity_type == "on-demand" and node.instance_type == "m6g.large"
    assert node.labels["kubernetes.io/arch"] == "arm64"
    assert node.labels["karpenter.sh/nodepool"] == "default"
    assert node.labels["topology.kubernetes.io/zone"] == node.zone
    assert node.allocatable["cpu"] == 1930 and node.capacity["pods"] == 29
    assert launch_for(provider, _nodeclaim(name) | {"metadata": {"name": name, "labels": {}}}, nodeclass).provider_id \
        == node.provider_id  # idempotent
    assert node.provider_id in {n.provider_id for n in provider.list()}

    kubelet = FakeKubelet(kube_api)
    node_name = f"ip-{uuid.uuid4().hex[:8]}.ec2.internal"
    kubelet.register(node_name, node.provider_id, labels=node.labels,
                     capacity={k: format_quantity(k, v) for k, v in node.capacity.items()},
                     allocatable={k: format_quantity(k, v) for k, v in node.allocatable.items()})
    core = client.CoreV1Api(kube_api)
    ns = f"e2e-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app"}, "spec": {
        "nodeSelector": {"karpenter.sh/nodepool": "default", "kubernetes.io/arch": "arm64"},
        "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "1"}}}]}})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not core.read_namespaced_pod("app", ns).spec.node_name:
        time.sleep(0.3)
    assert core.read_namespaced_pod("app", ns).spec.node_name == node_name

    provider.delete(node.provider_id)
    with pytest.raises(NodeClaimNotFoundError):
        provider.get(node.provider_id)
    kubelet.delete(node_name)


def test_unknown_ami_family_is_named(provider_and_class):
    provider, nodeclass = provider_and_class
    br = json.loads(json.dumps(nodeclass))
    br["spec"]["amiSelectorTerms"] = [{"alias": "ubuntu@latest"}]
    with pytest.raises(LaunchError, match="unknown AMI family 'ubuntu'"):
        launch_for(provider, _nodeclaim(f"default-{uuid.uuid4().hex[:5]}"), br)


def test_deleted_launch_templates_are_recreated(provider_and_class):
    """AWS answers CreateFleet for a deleted template with InvalidLaunchTemplateName.NotFoundException; LocalStack
    does not check, so a before-send hook returns AWS's error for the first CreateFleet after the deletion."""
    from botocore.awsrequest import AWSResponse

    provider, nodeclass = provider_and_class
    nodeclass = json.loads(json.dumps(nodeclass))
    nodeclass["metadata"]["name"] = "recreate"  # its own templates (they carry the EC2NodeClass tag)
    before = set(provider._templates)
    launch_for(provider, _nodeclaim(f"default-{uuid.uuid4().hex[:5]}"), nodeclass)
    cached = set(provider._templates) - before
    assert cached
    for name in cached:
        provider.ec2.delete_launch_template(LaunchTemplateName=name)
    injected: list[int] = []

    class _Raw:
        def __init__(self, body: bytes) -> None:
            self.body = body

        def stream(self, **kwargs):
            yield self.body

    def not_found(request, **kwargs):
        if injected:
            return None
        injected.append(1)
        body = (b"<Response><Errors><Error><Code>InvalidLaunchTemplateName.NotFoundException</Code><Message>"
                b"The specified launch template does not exist.</Message></Error></Errors><RequestID>x</RequestID>"
                b"</Response>")
        return AWSResponse(request.url, 400, {}, _Raw(body))

    provider.ec2.meta.events.register("before-send.ec2.CreateFleet", not_found)
    try:
        node = launch_for(provider, _nodeclaim(f"default-{uuid.uuid4().hex[:5]}"), nodeclass)
    finally:
        provider.ec2.meta.events.unregister("before-send.ec2.CreateFleet", not_found)
    assert injected and node.provider_id.startswith("aws:///")
    for name in cached:
        assert provider.ec2.describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"]
