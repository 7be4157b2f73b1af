"""Real CDK Terrain synths (jsii, Node.js) of every environment, asserted on the Terraform JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.events import INTERRUPTION_RULES
from stacks.app import environments, karpy_version, synth
from stacks.environments import ENVIRONMENTS

pytestmark = pytest.mark.synth


@pytest.fixture(scope="module")
def stacks(tmp_path_factory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("cdktf.out")
    dirs = synth(None, str(out))
    return {Path(d).name: json.loads((Path(d) / "cdk.tf.json").read_text()) for d in dirs}


def resources(stack: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return stack["resource"].get(kind, {})


def one(stack: dict[str, Any], kind: str, contains: str) -> dict[str, Any]:
    found = [v for k, v in resources(stack, kind).items() if contains in k]
    assert len(found) == 1, (kind, contains, list(resources(stack, kind)))
    return found[0]


def test_every_environment_synthesizes(stacks):
    assert sorted(stacks) == sorted(environments()) == ["dev", "prod", "staging"]


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_queue_and_rules(stacks, env):
    s = stacks[env]
    queue = one(s, "aws_sqs_queue", "interruption")
    assert queue["message_retention_seconds"] == 300 and queue["sqs_managed_sse_enabled"] is True
    assert queue["name"] == ENVIRONMENTS[env].cluster_name
    policy = json.loads(one(s, "aws_sqs_queue_policy", "interruption")["policy"])
    assert policy["Statement"][0]["Principal"]["Service"] == ["events.amazonaws.com", "sqs.amazonaws.com"]
    assert policy["Statement"][1]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert policy["Statement"][0]["Resource"].startswith("${aws_sqs_queue.")
    rules = resources(s, "aws_cloudwatch_event_rule")
    assert sorted(json.loads(r["event_pattern"])["detail-type"][0] for r in rules.values()) == sorted(
        p["detail-type"][0] for p in INTERRUPTION_RULES.values())
    targets = resources(s, "aws_cloudwatch_event_target")
    assert len(targets) == len(INTERRUPTION_RULES)
    assert all(t["arn"].startswith("${aws_sqs_queue.") and t["rule"].startswith("${aws_cloudwatch_event_rule.")
               for t in targets.values())


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_roles_and_policies_reference_each_other(stacks, env):
    s = stacks[env]
    cluster = ENVIRONMENTS[env].cluster_name
    node = one(s, "aws_iam_role", "node")
    assert node["name"] == f"KarpenterNodeRole-{cluster}"
    assert json.loads(node["assume_role_policy"])["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    attached = [a["policy_arn"] for a in resources(s, "aws_iam_role_policy_attachment").values()]
    for managed in ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly", "AmazonEKS_CNI_Policy"):
        assert any(a.endswith(f":policy/{managed}") for a in attached), managed
    policies = {k: json.loads(v["policy"]) for k, v in resources(s, "aws_iam_policy").items()}
    assert len(policies) == 5
    passrole = next(st for doc in policies.values() for st in doc["Statement"] if st["Action"] == "iam:PassRole")
    assert passrole["Resource"].startswith("${aws_iam_role.node_role")  # a reference, not a copied ARN
    queue = next(st for doc in policies.values() for st in doc["Statement"]
                 if st["Sid"] == "AllowInterruptionQueueActions")
    assert queue["Resource"].startswith("${aws_sqs_queue.")
    assert all(len(json.dumps(doc, separators=(",", ":"))) <= 6144 for doc in policies.values())


def test_trust_follows_the_environment(stacks):
    dev = json.loads(one(stacks["dev"], "aws_iam_role", "controller")["assume_role_policy"])
    assert dev["Statement"][0]["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert dev["Statement"][0]["Condition"]["StringEquals"][
        "oidc.eks.us-east-1.amazonaws.com/id/0A1B2C3D4E5F:sub"] == "system:serviceaccount:kube-system:karpenter"
    prod = json.loads(one(stacks["prod"], "aws_iam_role", "controller")["assume_role_policy"])
    assert prod["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert resources(stacks["prod"], "aws_eks_pod_identity_association")
    assert not resources(stacks["dev"], "aws_eks_pod_identity_association")


def test_outputs_backends_and_discovery_tags(stacks):
    for env, s in stacks.items():
        assert {"controller_role_arn", "controller_role_name", "node_role_arn", "node_role_name", "queue_name",
                "queue_url", "queue_arn", "namespace", "service_account", "cluster_name",
                "cluster_endpoint"} <= set(s["output"])
        assert s["output"]["queue_arn"]["value"].startswith("${aws_sqs_queue.")
        tags = resources(s, "aws_ec2_tag")
        cfg = ENVIRONMENTS[env]
        assert sorted(t["resource_id"] for t in tags.values()) == sorted(cfg.subnet_ids + cfg.security_group_ids)
        assert {t["key"] for t in tags.values()} == {"karpenter.sh/discovery"}
    assert "local" in stacks["dev"]["terraform"]["backend"]
    s3 = stacks["prod"]["terraform"]["backend"]["s3"]
    assert s3["bucket"] == "example-terraform-state-prod" and s3["dynamodb_table"] == "example-terraform-locks"


def test_cli_synth(tmp_path):
    from click.testing import CliRunner

    from cli import main

    ok = CliRunner().invoke(main, ["synth", "--env", "dev", "-o", str(tmp_path)])
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "stacks" / "dev" / "cdk.tf.json").exists()
    bad = CliRunner().invoke(main, ["synth", "--env", "qa", "-o", str(tmp_path)])
    assert bad.exit_code == 1 and "unknown environment(s) qa; known: dev, staging, prod" in bad.output


def _manifests(stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["manifest"]["metadata"]["name"] + "/" + v["manifest"]["kind"]: v["manifest"]
            for v in resources(stack, "kubernetes_manifest").values()
            if v["manifest"]["kind"] in ("NodePool", "EC2NodeClass")}


def test_pools_as_code(stacks):
    for s in stacks.values():
        m = _manifests(s)
        assert sorted(m) == sorted(["default/EC2NodeClass", "system-critical/NodePool", "monitoring/NodePool",
                                    "cicd/NodePool", "cron/NodePool", "service/NodePool", "default/NodePool"])
        assert m["default/EC2NodeClass"]["spec"]["role"].startswith("${aws_iam_role.node_role")
        assert m["default/NodePool"]["spec"]["template"]["spec"]["expireAfter"] == "720h"  # defaults filled in
        assert m["system-critical/NodePool"]["spec"]["template"]["spec"]["taints"] == [
            {"key": "CriticalAddonsOnly", "value": "true", "effect": "NoSchedule"}]

    def capacity(env, pool):
        reqs = _manifests(stacks[env])[f"{pool}/NodePool"]["spec"]["template"]["spec"]["requirements"]
        return next(r["values"] for r in reqs if r["key"] == "karpenter.sh/capacity-type")

    assert capacity("prod", "system-critical") == ["on-demand"]
    assert capacity("dev", "system-critical") == ["spot", "on-demand"]
    assert capacity("dev", "cicd") == ["spot"]
    provider = stacks["prod"]["provider"]["kubernetes"][0]
    assert provider["host"] == ENVIRONMENTS["prod"].cluster_endpoint
    assert "data.aws_eks_cluster" in provider["cluster_ca_certificate"]


def test_a_bad_pool_fails_synth_naming_the_field():
    from infra.nodepools import InvalidKarpenterResources, validated_manifests
    from stacks.pools import nodepool

    bad = nodepool("broken", weight=101, capacity_types=["spot"], categories=["c"])
    bad["spec"]["template"]["spec"]["requirements"][0]["operator"] = "Gt"
    with pytest.raises(InvalidKarpenterResources) as e:
        validated_manifests([bad], "stacks/pools.py[dev]")
    message = str(e.value)
    assert "stacks/pools.py[dev]: NodePool/broken: spec.weight: must be <= 100, got 101" in message
    assert ("stacks/pools.py[dev]: NodePool/broken: spec.template.spec.requirements[0].values: Gt takes exactly one "
            "integer") in message


def test_controller_deployment_is_wired_from_outputs(stacks):
    for env, s in stacks.items():
        m = {(v["manifest"]["kind"], v["manifest"]["metadata"]["name"]): v["manifest"]
             for v in resources(s, "kubernetes_manifest").values()}
        crds = {name for kind, name in m if kind == "CustomResourceDefinition"}
        assert crds == {"nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "ec2nodeclasses.karpenter.k8s.aws"}
        dep = m[("Deployment", "karpy")]
        env_vars = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env_vars["INTERRUPTION_QUEUE"].startswith("${aws_sqs_queue.")  # a reference, not a copy
        assert env_vars["CLUSTER_NAME"] == ENVIRONMENTS[env].cluster_name
        assert dep["spec"]["replicas"] == 2
        pod = dep["spec"]["template"]["spec"]
        assert pod["priorityClassName"] == "system-cluster-critical"
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms[0]["matchExpressions"] == [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]
        sc = pod["containers"][0]["securityContext"]
        assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
        # the image scripts/build-image.sh tags, writing only to its /tmp (an emptyDir)
        assert pod["containers"][0]["image"] == f"{ENVIRONMENTS[env].image_repository}:{karpy_version()}"
        assert pod["containers"][0]["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
        assert pod["volumes"] == [{"name": "tmp", "emptyDir": {}}]
        sa = m[("ServiceAccount", "karpenter")]
        if ENVIRONMENTS[env].pod_identity:
            assert "annotations" not in sa["metadata"]
        else:
            assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("${aws_iam_role.controller")
        assert ("PodDisruptionBudget", "karpy") in m and ("ClusterRole", "karpy") in m and ("Role", "karpy") in m
        rules = m[("ClusterRole", "karpy")]["rules"]
        assert {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]} in rules


def test_deploy_says_what_is_missing(monkeypatch):
    from click.testing import CliRunner

    import stacks.cli_support as support
    from cli import main

    monkeypatch.setattr(support.shutil, "which", lambda name: None)  # a machine with none of the tools
    res = CliRunner().invoke(main, ["deploy", "--env", "dev"])
    assert res.exit_code == 2 and "terraform (or OpenTofu) is not installed" in res.output
    monkeypatch.setattr(support.shutil, "which", lambda name: "/usr/bin/terraform" if name == "terraform" else None)
    res = CliRunner().invoke(main, ["diff", "--env", "dev"])
    assert res.exit_code == 2 and "Node.js is not installed" in res.output
    res = CliRunner().invoke(main, ["diff", "--env", "qa"])
    assert res.exit_code == 1 and "unknown environment 'qa'" in res.output


def test_spot_service_linked_role_is_opt_in(stacks):
    slr = resources(stacks["dev"], "aws_iam_service_linked_role")
    assert [r["aws_service_name"] for r in slr.values()] == ["spot.amazonaws.com"]
    assert not resources(stacks["prod"], "aws_iam_service_linked_role")


def test_node_join_access_entry_or_aws_auth(stacks):
    entries = resources(stacks["dev"], "aws_eks_access_entry")
    assert [e["type"] for e in entries.values()] == ["EC2_LINUX"]
    assert next(iter(entries.values()))["principal_arn"].startswith("${aws_iam_role.node_role")
    assert not resources(stacks["staging"], "aws_eks_access_entry")
    mapping = stacks["staging"]["output"]["aws_auth_map_role"]["value"]
    assert mapping["username"] == "system:node:{{EC2PrivateDNSName}}"
    assert mapping["groups"] == ["system:bootstrappers", "system:nodes"]
    assert mapping["rolearn"].startswith("${aws_iam_role.node_role")
    assert "aws_auth_map_role" not in stacks["dev"]["output"]
