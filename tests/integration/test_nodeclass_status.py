"""The EC2NodeClass status controller against LocalStack and the real control plane: the status is resolved and
Ready; Ready is False naming what was not found, and recovers; launches read the status; deletion waits for the
NodeClaims of the class, then removes the instance profile and the launch templates karpy made, then the finalizer."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError
from kubernetes import client

from controller.api import labels as L
from controller.api.nodeclasshash import ec2nodeclass_hash
from controller.cloud.aws.instanceprofiles import profile_name
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import NotFoundError
from controller.nodeclass.status import TERMINATION_FINALIZER, NodeClassController
from tests.integration.aws_world import launch_for, make_world
from tests.kubetest import wait_for

pytestmark = [pytest.mark.localstack, pytest.mark.kube,
              pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


@pytest.fixture(scope="module")
def world(aws_client: Callable[..., Any]) -> tuple[Any, dict[str, Any]]:
    return make_world(aws_client("ec2"), aws_client("ssm"), aws_client("iam"), cidr_octet=61,
                      zones=("us-east-1a", "us-east-1b"), prices={"m5.large": 0.096, "m6g.large": 0.077})


def _nodeclass(name: str, template: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name},
            "spec": {**template["spec"], **spec}}


def _conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c.get("reason", ""), c.get("message", ""))
            for c in (obj.get("status") or {}).get("conditions") or []}


def _delete_quietly(kc: KubeClient, name: str) -> None:
    with contextlib.suppress(NotFoundError):
        kc.patch(R.EC2NODECLASSES, name, {"metadata": {"finalizers": []}})
        kc.delete(R.EC2NODECLASSES, name)


def test_status_resolved_and_ready_and_launches_read_it(kube, world, aws_client):
    kc, cluster, recorder = kube
    provider, template = world
    name = f"nc-{uuid.uuid4().hex[:6]}"
    kc.create(R.EC2NODECLASSES, _nodeclass(name, template))
    ctl = NodeClassController(cluster=cluster, client=kc, provider=provider, recorder=recorder)
    try:
        result = ctl.reconcile(name)
        assert result.requeue_after == 60
        got = kc.get(R.EC2NODECLASSES, name)
        assert TERMINATION_FINALIZER in got["metadata"]["finalizers"]
        status = got["status"]
        assert sorted(s["zone"] for s in status["subnets"]) == ["us-east-1a", "us-east-1b"]
        assert all(s["id"].startswith("subnet-") and s["zoneID"] for s in status["subnets"])
        assert [g["name"] for g in status["securityGroups"]] == [f"{provider.cluster.name}-nodes"]
        archs = {a["requirements"][0]["values"][0]: a for a in status["amis"]}
        assert set(archs) == {"amd64", "arm64"}
        # the standard image: no GPU or Neuron accelerators (the world seeds only the standard alias parameters)
        assert archs["amd64"]["requirements"] == [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "karpenter.k8s.aws/instance-accelerator-count", "operator": "DoesNotExist"},
            {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "DoesNotExist"}]
        assert status["instanceProfile"] == profile_name(provider.cluster.name, "us-east-1", name)
        roles = aws_client("iam").get_instance_profile(InstanceProfileName=status["instanceProfile"])[
            "InstanceProfile"]["Roles"]
        assert [r["RoleName"] for r in roles] == [template["spec"]["role"]]
        conds = _conditions(got)
        for c in ("SubnetsReady", "SecurityGroupsReady", "AMIsReady", "InstanceProfileReady", "ValidationSucceeded",
                  "Ready"):
            assert conds[c][0] == "True", (c, conds[c])
        # annotated with the hash of its spec, as Karpenter's nodeclass hash controller does
        hashed = {L.EC2NODECLASS_HASH: ec2nodeclass_hash(got), L.EC2NODECLASS_HASH_VERSION: "karpy-v1"}
        assert {k: got["metadata"]["annotations"].get(k) for k in hashed} == hashed
        # a second pass changes nothing (no status write when nothing moved)
        rv = got["metadata"]["resourceVersion"]
        ctl.reconcile(name)
        assert kc.get(R.EC2NODECLASSES, name)["metadata"]["resourceVersion"] == rv

        # a launch reads the resolved status: no subnet, security group or image lookups
        calls: list[str] = []

        def count(event_name: str, **kwargs: Any) -> None:
            calls.append(event_name.rsplit(".", 1)[-1])

        provider.ec2.meta.events.register("before-call.ec2.*", count)
        try:
            claim = {"metadata": {"name": f"{name}-x", "uid": str(uuid.uuid4()),
                                  "labels": {"karpenter.sh/nodepool": "default"}},
                     "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                                "values": ["m5.large"]},
                                               {"key": "karpenter.sh/capacity-type", "operator": "In",
                                                "values": ["on-demand"]}],
                              "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": name}}}
            node = launch_for(provider, claim, got)
        finally:
            provider.ec2.meta.events.unregister("before-call.ec2.*", count)
        assert not {"DescribeSubnets", "DescribeSecurityGroups", "DescribeImages"} & set(calls), calls
        assert node.zone in {s["zone"] for s in status["subnets"]}
        provider.delete(node.provider_id)
        # a hashed field changes: so does the annotation
        kc.patch(R.EC2NODECLASSES, name, {"spec": {"tags": {"team": "payments"}}})
        ctl.reconcile(name)
        changed = kc.get(R.EC2NODECLASSES, name)
        assert changed["metadata"]["annotations"][L.EC2NODECLASS_HASH] == ec2nodeclass_hash(changed) != \
            hashed[L.EC2NODECLASS_HASH]
    finally:
        _delete_quietly(kc, name)


def test_ready_false_names_what_is_missing_then_recovers(kube, world):
    kc, cluster, recorder = kube
    provider, template = world
    name = f"nc-{uuid.uuid4().hex[:6]}"
    nothing = [{"tags": {"karpenter.sh/discovery": f"nothing-{name}"}}]
    kc.create(R.EC2NODECLASSES, _nodeclass(name, template, subnetSelectorTerms=nothing))
    ctl = NodeClassController(cluster=cluster, client=kc, provider=provider, recorder=recorder)
    try:
        ctl.reconcile(name)
        got = kc.get(R.EC2NODECLASSES, name)
        conds = _conditions(got)
        assert conds["SubnetsReady"] == ("False", "SubnetsNotFound", "SubnetSelector did not match any Subnets")
        assert conds["ValidationSucceeded"][:2] == ("False", "DependenciesNotReady")
        assert conds["Ready"] == ("False", "SubnetsNotFound", "SubnetSelector did not match any Subnets")
        assert conds["SecurityGroupsReady"][0] == "True" and conds["AMIsReady"][0] == "True"
        assert "subnets" not in got["status"]

        # more than one missing: the message names each
        kc.patch(R.EC2NODECLASSES, name, {"spec": {"securityGroupSelectorTerms": nothing,
                                                   "amiSelectorTerms": [{"id": "ami-00000000deadbeef0"}]}})
        ctl.reconcile(name)
        ready = _conditions(kc.get(R.EC2NODECLASSES, name))["Ready"]
        assert ready[0] == "False" and ready[1] == "AMINotFound"
        for text in ("AMISelector did not match any AMIs", "SubnetSelector did not match any Subnets",
                     "SecurityGroupSelector did not match any SecurityGroups"):
            assert text in ready[2]

        kc.patch(R.EC2NODECLASSES, name, {"spec": {k: template["spec"][k] for k in (
            "subnetSelectorTerms", "securityGroupSelectorTerms", "amiSelectorTerms")}})
        ctl.reconcile(name)
        got = kc.get(R.EC2NODECLASSES, name)
        assert _conditions(got)["Ready"][0] == "True"
        assert len(got["status"]["subnets"]) == 2
    finally:
        _delete_quietly(kc, name)


def test_an_unsupported_alias_and_a_user_instance_profile(kube, world):
    kc, cluster, recorder = kube
    provider, template = world
    name = f"nc-{uuid.uuid4().hex[:6]}"
    spec = {k: v for k, v in template["spec"].items() if k != "role"}
    body = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name},
            "spec": {**spec, "instanceProfile": "my-own-profile", "amiSelectorTerms": [{"alias": "nixos@latest"}]}}
    kc.create(R.EC2NODECLASSES, body)
    ctl = NodeClassController(cluster=cluster, client=kc, provider=provider, recorder=recorder)
    try:
        ctl.reconcile(name)
        got = kc.get(R.EC2NODECLASSES, name)
        conds = _conditions(got)
        assert conds["AMIsReady"][:2] == ("False", "UnsupportedAlias") and "nixos" in conds["AMIsReady"][2]
        assert conds["InstanceProfileReady"][0] == "True"
        assert got["status"]["instanceProfile"] == "my-own-profile"
        assert conds["Ready"][:2] == ("False", "UnsupportedAlias")
    finally:
        _delete_quietly(kc, name)


def _events(kube_api: Any, name: str, reason: str) -> list[Any]:
    evs = client.CoreV1Api(kube_api).list_event_for_all_namespaces(
        field_selector=f"involvedObject.name={name},reason={reason}").items
    return evs


def test_deletion_waits_for_nodeclaims_then_cleans_up(kube, world, aws_client, kube_api):
    kc, cluster, recorder = kube
    provider, template = world
    iam, ec2 = aws_client("iam"), aws_client("ec2")
    name = f"nc-{uuid.uuid4().hex[:6]}"
    kc.create(R.EC2NODECLASSES, _nodeclass(name, template))
    ctl = NodeClassController(cluster=cluster, client=kc, provider=provider, recorder=recorder,
                              finalize_poll_seconds=1.0)
    claim_name = f"{name}-claim"
    instance = ""
    try:
        ctl.reconcile(name)
        got = kc.get(R.EC2NODECLASSES, name)
        profile = got["status"]["instanceProfile"]
        claim: dict[str, Any] = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                 "metadata": {"name": claim_name, "uid": str(uuid.uuid4()),
                              "labels": {"karpenter.sh/nodepool": "default"}},
                 "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                            "values": ["m5.large", "m6g.large"]},
                                           {"key": "karpenter.sh/capacity-type", "operator": "In",
                                            "values": ["on-demand"]}],
                          "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": name}}}
        instance = launch_for(provider, claim, got).provider_id  # makes this class's launch templates
        other = f"karpenter.k8s.aws/other-{name}"  # another class's template in the same cluster stays
        ec2.create_launch_template(LaunchTemplateName=other, LaunchTemplateData={"ImageId": "ami-12345678"},
                                   TagSpecifications=[{"ResourceType": "launch-template", "Tags": [
                                       {"Key": "eks:eks-cluster-name", "Value": provider.cluster.name},
                                       {"Key": "karpenter.k8s.aws/ec2nodeclass", "Value": f"other-{name}"}]}])

        def tagged_templates() -> list[str]:
            return [lt["LaunchTemplateName"] for lt in ec2.describe_launch_templates(Filters=[
                {"Name": "tag:eks:eks-cluster-name", "Values": [provider.cluster.name]},
                {"Name": "tag:karpenter.k8s.aws/ec2nodeclass", "Values": [name]}])["LaunchTemplates"]]

        assert tagged_templates()
        kc.create(R.NODECLAIMS, {**claim, "metadata": {k: v for k, v in claim["metadata"].items() if k != "uid"}})
        wait_for("NodeClaim in the cache", lambda: cluster.nodeclaim(claim_name))
        kc.delete(R.EC2NODECLASSES, name)
        result = ctl.reconcile(name)
        assert result.requeue_after == 1.0
        got = kc.get(R.EC2NODECLASSES, name)
        assert got["metadata"]["deletionTimestamp"] and TERMINATION_FINALIZER in got["metadata"]["finalizers"]
        assert iam.get_instance_profile(InstanceProfileName=profile)
        assert tagged_templates()
        event = wait_for("WaitingOnNodeClaimTermination event",
                         lambda: _events(kube_api, name, "WaitingOnNodeClaimTermination"))
        assert event[0].message == f"Waiting on NodeClaim termination for {claim_name}"

        kc.delete(R.NODECLAIMS, claim_name)
        wait_for("NodeClaim gone from the cache", lambda: cluster.nodeclaim(claim_name) is None)
        assert ctl.reconcile(name).requeue_after is None
        with pytest.raises(NotFoundError):
            kc.get(R.EC2NODECLASSES, name)
        with pytest.raises(ClientError, match=r"NoSuchEntity|not found|cannot be found"):
            iam.get_instance_profile(InstanceProfileName=profile)
        assert tagged_templates() == []
        # another class's template and the role itself are untouched
        assert ec2.describe_launch_templates(LaunchTemplateNames=[other])["LaunchTemplates"]
        ec2.delete_launch_template(LaunchTemplateName=other)
        assert iam.get_role(RoleName=template["spec"]["role"])
    finally:
        _delete_quietly(kc, name)
        with contextlib.suppress(NotFoundError):
            kc.delete(R.NODECLAIMS, claim_name)
        if instance:
            with contextlib.suppress(Exception):
                provider.delete(instance)


def test_a_kubelet_map_karpenter_refuses_fails_validation(kube, world):
    """The CRD admits any spec.kubelet; the controller refuses one Karpenter's would, and the class is not Ready."""
    kc, cluster, recorder = kube
    provider, template = world
    name = f"nc-{uuid.uuid4().hex[:6]}"
    kc.create(R.EC2NODECLASSES, _nodeclass(name, template, kubelet={"kubeReserved": {"gpu": "1"}, "notAField": 1}))
    ctl = NodeClassController(cluster=cluster, client=kc, provider=provider, recorder=recorder)
    try:
        ctl.reconcile(name)
        conds = _conditions(kc.get(R.EC2NODECLASSES, name))
        status, reason, message = conds["ValidationSucceeded"]
        assert (status, reason) == ("False", "InvalidKubeletConfiguration")
        assert "'gpu' isn't a reservable resource" in message and "'notAField'" in message
        assert conds["Ready"][:2] == ("False", "InvalidKubeletConfiguration")
        kc.patch(R.EC2NODECLASSES, name, {"spec": {"kubelet": None}})
        ctl.reconcile(name)
        conds = _conditions(kc.get(R.EC2NODECLASSES, name))
        assert conds["ValidationSucceeded"][0] == "True" and conds["Ready"][0] == "True"
    finally:
        _delete_quietly(kc, name)
