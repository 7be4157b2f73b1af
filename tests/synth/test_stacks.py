"""Real CDK Terrain synths (jsii, Node.js) of the example environments (examples/environments, which the checkout's
cdktf.json names), asserted on the Terraform JSON: two stacks per environment, the custom resources apart from their
CRDs, references instead of copied values, and the controller's configuration wired from the stack alone."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infra.events import INTERRUPTION_RULES
from infra.names import partition_of, role_arn
from stacks.app import synth
from stacks.environments import EnvironmentConfig, load_environments
from stacks.render import karpy_version, render_objects

pytestmark = pytest.mark.synth
ROOT = Path(__file__).resolve().parents[2]
ENVIRONMENTS: dict[str, EnvironmentConfig] = {e.name: e for e in load_environments(ROOT)}
NAMES = ["dev", "prod", "staging"]


@pytest.fixture(scope="module")
def stacks(tmp_path_factory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("cdktf.out")
    dirs = synth(None, str(out), ROOT)
    return {Path(d).name: json.loads((Path(d) / "cdk.tf.json").read_text()) for d in dirs}


def resources(stack: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return stack.get("resource", {}).get(kind, {})


def one(stack: dict[str, Any], kind: str, contains: str) -> dict[str, Any]:
    found = [v for k, v in resources(stack, kind).items() if contains in k]
    assert len(found) == 1, (kind, contains, list(resources(stack, kind)))
    return found[0]


def manifests(stack: dict[str, Any]) -> list[dict[str, Any]]:
    return [v["manifest"] for v in resources(stack, "kubernetes_manifest").values()]


def test_two_stacks_per_environment(stacks):
    assert list(stacks) == ["dev", "dev-pools", "prod", "prod-pools", "staging", "staging-pools"]


def test_no_custom_resource_shares_a_stack_with_its_crd(stacks):
    """The Kubernetes provider cannot plan a custom resource whose CRD is not installed: a stack that held both
    would fail its first plan on an empty cluster."""
    defined: dict[tuple[str, str], set[str]] = {}
    for name, s in stacks.items():
        for m in manifests(s):
            if m["kind"] == "CustomResourceDefinition":
                defined.setdefault((m["spec"]["group"], m["spec"]["names"]["kind"]), set()).add(name)
    assert len(defined) == 3 and all(v == {"dev", "prod", "staging"} for v in defined.values())
    custom = 0
    for name, s in stacks.items():
        for m in manifests(s):
            key = (m["apiVersion"].split("/")[0], m["kind"])
            if key in defined:
                custom += 1
                assert name not in defined[key], f"{m['kind']}/{m['metadata']['name']} shares {name} with its CRD"
                assert name.removesuffix("-pools") in defined[key]
                # planned after the CRDs' stack: it depends on it through a cross-stack reference
                assert "terraform_remote_state" in s["data"]
    assert custom == 3 * 7


@pytest.mark.parametrize("env", NAMES)
def test_queue_policy_and_rules(stacks, env):
    s = stacks[env]
    queue = one(s, "aws_sqs_queue", "interruption")
    assert queue["message_retention_seconds"] == 300 and queue["sqs_managed_sse_enabled"] is True
    assert queue["name"] == ENVIRONMENTS[env].cluster_name
    policy = json.loads(one(s, "aws_sqs_queue_policy", "interruption")["policy"])
    allow, deny = policy["Statement"]
    assert allow["Principal"] == {"Service": "events.amazonaws.com"}
    assert allow["Resource"].startswith("${aws_sqs_queue.")
    sources = allow["Condition"]["ArnEquals"]["aws:SourceArn"]
    assert len(sources) == len(INTERRUPTION_RULES)
    assert all(re.fullmatch(r"\$\{aws_cloudwatch_event_rule\.[\w-]+\.arn\}", a) for a in sources)
    assert allow["Condition"]["StringEquals"]["aws:SourceAccount"].startswith("${data.aws_caller_identity.")
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    rules = resources(s, "aws_cloudwatch_event_rule")
    assert sorted(json.loads(r["event_pattern"])["detail-type"][0] for r in rules.values()) == sorted(
        p["detail-type"][0] for p in INTERRUPTION_RULES.values())
    assert sorted(r["name"] for r in rules.values()) == sorted(f"{env}-{s}" for s in INTERRUPTION_RULES)
    targets = resources(s, "aws_cloudwatch_event_target")
    assert len(targets) == len(INTERRUPTION_RULES)
    assert all(t["arn"].startswith("${aws_sqs_queue.") and t["rule"].startswith("${aws_cloudwatch_event_rule.")
               for t in targets.values())


@pytest.mark.parametrize("env", NAMES)
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
    # shared VPCs: the subnets and security groups may belong to another account
    access = next(st for doc in policies.values() for st in doc["Statement"]
                  if st["Sid"] == "AllowScopedEC2InstanceAccessActions")["Resource"]
    assert any(r.endswith(":*:subnet/*") for r in access) and any(r.endswith(":*:security-group/*") for r in access)


def test_trust_follows_the_environment(stacks):
    dev = json.loads(one(stacks["dev"], "aws_iam_role", "controller")["assume_role_policy"])
    assert dev["Statement"][0]["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert dev["Statement"][0]["Condition"]["StringEquals"][
        "oidc.eks.us-east-1.amazonaws.com/id/0A1B2C3D4E5F:sub"] == "system:serviceaccount:kube-system:karpenter"
    prod = json.loads(one(stacks["prod"], "aws_iam_role", "controller")["assume_role_policy"])
    assert prod["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert resources(stacks["prod"], "aws_eks_pod_identity_association")
    assert not resources(stacks["dev"], "aws_eks_pod_identity_association")


def test_outputs_backends_providers_and_discovery_tags(stacks):
    for env in NAMES:
        s, cfg = stacks[env], ENVIRONMENTS[env]
        assert {"controller_role_arn", "controller_role_name", "node_role_arn", "node_role_name", "queue_name",
                "queue_url", "queue_arn", "namespace", "service_account", "cluster_name", "region",
                "cluster_endpoint"} <= set(s["output"])
        assert s["output"]["queue_arn"]["value"].startswith("${aws_sqs_queue.")
        tags = resources(s, "aws_ec2_tag")
        assert sorted(t["resource_id"] for t in tags.values()) == sorted(cfg.subnet_ids + cfg.security_group_ids)
        assert {t["key"] for t in tags.values()} == {"karpenter.sh/discovery"}
        for name in (env, f"{env}-pools"):  # both stacks only ever touch the environment's account
            assert stacks[name]["provider"]["aws"][0]["allowed_account_ids"] == [cfg.account_id]
            assert stacks[name]["provider"]["kubernetes"][0]["host"] == cfg.cluster_endpoint
    assert "local" in stacks["dev"]["terraform"]["backend"]
    staging = stacks["staging"]["terraform"]["backend"]["s3"]
    assert staging["dynamodb_table"] == "example-terraform-locks" and staging["key"] == "karpy/staging.tfstate"
    prod = stacks["prod-pools"]["terraform"]["backend"]["s3"]
    assert prod["bucket"] == "example-terraform-state-prod" and prod["use_lockfile"] is True
    assert prod["key"] == "karpy/prod-pools.tfstate"


def test_pools_as_code(stacks):
    for env in NAMES:
        m = {f"{x['metadata']['name']}/{x['kind']}": x for x in manifests(stacks[f"{env}-pools"])}
        assert sorted(m) == sorted(["default/EC2NodeClass", "system-critical/NodePool", "monitoring/NodePool",
                                    "cicd/NodePool", "cron/NodePool", "service/NodePool", "default/NodePool"])
        # the node role's name comes from the <env> stack's state
        assert m["default/EC2NodeClass"]["spec"]["role"].startswith(
            f"${{data.terraform_remote_state.cross-stack-reference-input-{env}.outputs.")
        assert m["default/NodePool"]["spec"]["template"]["spec"]["expireAfter"] == "720h"  # defaults filled in
        assert m["system-critical/NodePool"]["spec"]["template"]["spec"]["taints"] == [
            {"key": "CriticalAddonsOnly", "value": "true", "effect": "NoSchedule"}]

    def capacity(env, pool):
        pools = {x["metadata"]["name"]: x for x in manifests(stacks[f"{env}-pools"]) if x["kind"] == "NodePool"}
        reqs = pools[pool]["spec"]["template"]["spec"]["requirements"]
        return next(r["values"] for r in reqs if r["key"] == "karpenter.sh/capacity-type")

    assert capacity("prod", "system-critical") == ["on-demand"]
    assert capacity("dev", "system-critical") == ["spot", "on-demand"]
    assert capacity("dev", "cicd") == ["spot"]


# ------------------------------------------------------------------------------------------- resolving references
def _resolver(stacks: dict[str, dict[str, Any]], env: EnvironmentConfig):
    """Resolve `${...}` references the way the applied stacks' outputs would hold them: a resource's name is its
    configured name, an IAM role's or a queue's ARN is built from that name, account, partition and region, the
    caller identity is the environment's account (the AWS provider allows no other), and a cross-stack input is the
    producing stack's output."""
    base = stacks[env.name]
    partition = partition_of(env.region)

    def attribute(kind: str, name: str, attr: str) -> str:
        res = base["resource"][kind][name]
        if attr == "name":
            return str(res["name"])
        if (kind, attr) == ("aws_iam_role", "arn"):
            return role_arn(partition, env.account_id, res.get("path", "/"), res["name"])
        if (kind, attr) == ("aws_sqs_queue", "arn"):
            return f"arn:{partition}:sqs:{env.region}:{env.account_id}:{res['name']}"
        raise AssertionError(f"no rule to resolve {kind}.{name}.{attr}")

    def resolve_ref(ref: str) -> str:
        parts = ref.split(".")
        if parts[0] == "data" and parts[1] == "terraform_remote_state":
            output = parts[-1]
            return resolve(str(base["output"][output]["value"]))
        if parts[0] == "data" and parts[1] == "aws_caller_identity":
            return env.account_id
        if parts[0] == "data" and parts[1] == "aws_partition":
            return partition
        return attribute(parts[0], parts[1], parts[2])

    def resolve(value: str) -> str:
        return re.sub(r"\$\{([^}]+)\}", lambda m: resolve_ref(m.group(1)), value)

    def walk(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: walk(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [walk(v) for v in obj]
        return resolve(obj) if isinstance(obj, str) else obj

    return walk


@pytest.mark.parametrize("env", NAMES)
def test_render_is_what_the_stacks_deploy(stacks, env):
    """One source of truth: `karpy render`'s objects are the stacks' kubernetes_manifest resources, references
    resolved (Terraform orders them by their dependencies; render in the order a plain apply needs)."""
    walk = _resolver(stacks, ENVIRONMENTS[env])

    def key(m: dict[str, Any]) -> tuple[str, str, str]:
        return m["kind"], m["metadata"].get("namespace", ""), m["metadata"]["name"]

    deployed = {key(m): walk(m) for name in (env, f"{env}-pools") for m in manifests(stacks[name])}
    rendered = {key(m): m for m in render_objects(ENVIRONMENTS[env])}
    # the CRDs; ServiceAccount, 4 RBAC objects, Deployment and PDB; 7 pools and node classes
    assert len(rendered) == len(render_objects(ENVIRONMENTS[env])) == 3 + 7 + 7
    assert deployed == rendered


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_controller_is_configured_by_the_stack_alone(stacks, env, tmp_path):
    """The Deployment's environment, references resolved as the outputs would hold them, is a configuration
    `karpy controller --check-config` accepts, with the cluster, queue, region and role the stack created."""
    cfg = ENVIRONMENTS[env]
    walk = _resolver(stacks, cfg)
    objects = {(m["kind"], m["metadata"]["name"]): walk(m) for m in manifests(stacks[env])}
    container = objects[("Deployment", "karpy")]["spec"]["template"]["spec"]["containers"][0]
    pod_env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert [e["name"] for e in container["env"] if "valueFrom" in e] == ["SYSTEM_NAMESPACE"]
    pod_env["SYSTEM_NAMESPACE"] = objects[("Deployment", "karpy")]["metadata"]["namespace"]
    queue = one(stacks[env], "aws_sqs_queue", "interruption")["name"]
    controller_role = one(stacks[env], "aws_iam_role", "controller")
    expected_arn = role_arn("aws", cfg.account_id, "/", controller_role["name"])
    sa = objects[("ServiceAccount", cfg.service_account)]
    if cfg.pod_identity:  # the association, not an annotation, names the role
        assert "annotations" not in sa["metadata"]
        assoc = walk(next(iter(resources(stacks[env], "aws_eks_pod_identity_association").values())))
        assert assoc["role_arn"] == expected_arn and assoc["service_account"] == cfg.service_account
    else:  # IRSA: the webhook hands the annotation to the pod as AWS_ROLE_ARN
        assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == expected_arn
        pod_env["AWS_ROLE_ARN"] = expected_arn
    proc = subprocess.run(
        [sys.executable, "-c", "from cli import main; main()", "controller", "--check-config"],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none"), **pod_env},
        capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    resolved = dict(line.split(" (", 1)[0].split("=", 1) for line in proc.stdout.splitlines())
    assert resolved["CLUSTER_NAME"] == cfg.cluster_name
    assert resolved["INTERRUPTION_QUEUE"] == queue == cfg.cluster_name
    assert resolved["AWS_REGION"] == cfg.region
    assert resolved["CLUSTER_ENDPOINT"] == cfg.cluster_endpoint
    assert resolved["LEADER_ELECTION_NAME"] == "karpenter-leader-election"
    if cfg.settings:
        assert "SpotToSpotConsolidation=true" in resolved["FEATURE_GATES"]


# ------------------------------------------------------------------------------------------------------------ CLI
def _project(tmp_path: Path, **fields: Any) -> Path:
    (tmp_path / "environments").mkdir(parents=True)
    base = {"account_id": "111122223333", "region": "us-east-1", "cluster_name": "c", "pod_identity": True}
    (tmp_path / "environments" / "e.yaml").write_text(json.dumps({**base, **fields}))
    return tmp_path


def test_cli_synth(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from cli import main

    monkeypatch.chdir(ROOT)
    ok = CliRunner().invoke(main, ["synth", "--env", "dev", "-o", str(tmp_path)])
    assert ok.exit_code == 0, ok.output
    assert ok.output.split() == [str(tmp_path / "stacks" / "dev"), str(tmp_path / "stacks" / "dev-pools")]
    assert (tmp_path / "stacks" / "dev-pools" / "cdk.tf.json").exists()
    bad = CliRunner().invoke(main, ["synth", "--env", "qa", "-o", str(tmp_path)])
    assert bad.exit_code == 2 and "unknown environment 'qa' (one of: dev, prod, staging)" in bad.output


def test_synth_prints_the_stacks_a_progress_line_and_nothing_else(tmp_path):
    """As a user runs it at a terminal (a process of its own, starting jsii, stderr a pseudo-terminal): stdout is the
    two stack directories; stderr is only the progress line, cleared at the end: no jsii Node.js banner ("Node 20 is
    end-of-life" as Python bytes reprs), no library warnings."""
    import pty
    import threading

    env = {k: v for k, v in os.environ.items() if not k.startswith("JSII_SILENCE_")}
    primary, secondary = pty.openpty()
    seen = bytearray()

    def read() -> None:  # drained while the process runs, so it never blocks on a full terminal buffer
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc = subprocess.run([sys.executable, "-c", "import cli; cli.main()", "synth", "--env", "dev", "-o",
                               str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, stderr=secondary, text=True,
                              timeout=300, env={**env, "PYTHONPATH": str(ROOT), "COLUMNS": "80"})
    finally:
        os.close(secondary)
        reader.join(timeout=10)
        os.close(primary)
    stderr = seen.decode()
    assert proc.returncode == 0, stderr[-2000:]
    assert proc.stdout.split() == [str(tmp_path / "stacks" / "dev"), str(tmp_path / "stacks" / "dev-pools")]
    frames = [part.strip() for part in stderr.split("\r") if part.strip()]
    assert frames, "no progress line on a terminal"
    assert all(re.fullmatch(r"[|/\\-] synthesizing dev \(\d+s\)", f) for f in frames), stderr[-2000:]
    assert stderr.endswith("\r")  # the line is cleared: nothing of it is left beside later output


def test_cdktf_app_runs_from_the_installed_karpy(tmp_path):
    """cdktf.json's app, as `karpy init` writes it, is the installed console script: run as the CDK Terrain CLI
    runs it (in the project directory, output directory through CDKTF_OUTDIR), it writes both stacks, the pools
    stack depending on the other."""
    from stacks.environments import init_project

    init_project(tmp_path, "qa", "111122223333", "us-west-2", "qa")
    app = json.loads((tmp_path / "cdktf.json").read_text())["app"].split()
    karpy = Path(sys.executable).parent / app[0]
    assert app == ["karpy", "synth-app"] and karpy.exists()
    proc = subprocess.run([str(karpy), *app[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CDKTF_OUTDIR": str(tmp_path / "out")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())["stacks"]
    assert sorted(manifest) == ["qa", "qa-pools"] and manifest["qa-pools"]["dependencies"] == ["qa"]


def test_names_aws_would_refuse_fail_synth(tmp_path, monkeypatch):
    """A 45-character cluster name makes KarpenterController-<cluster> 65 characters: refused at synth, naming the
    field that fixes it, not at apply."""
    from click.testing import CliRunner

    from cli import main

    monkeypatch.chdir(_project(tmp_path, cluster_name="c" * 45, queue_name="short"))
    res = CliRunner().invoke(main, ["synth", "-o", str(tmp_path / "out")])
    assert res.exit_code == 1
    assert res.output.strip() == (f"error: controller IAM role name 'KarpenterController-{'c' * 45}' is 65 characters; "
                                  "AWS allows at most 64 (set a shorter controller_role_name in the environment file)")
    monkeypatch.chdir(_project(tmp_path / "rules", cluster_name="a-cluster-name-of-33-characters-x"))
    res = CliRunner().invoke(main, ["synth", "-o", str(tmp_path / "out")])
    assert res.exit_code == 1 and "EventBridge rule name 'a-cluster-name-of-33-characters-x-CapacityReservation" \
        "Interruption' is 65 characters" in res.output and "shorter queue_name" in res.output


def test_a_bad_pool_fails_synth_naming_the_field(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from cli import main

    pool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "broken"},
            "spec": {"weight": 101, "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Gt", "values": ["spot"]}]}}}}
    monkeypatch.chdir(_project(tmp_path, pools=[pool]))
    res = CliRunner().invoke(main, ["synth", "-o", str(tmp_path / "out")])
    assert res.exit_code == 1
    assert "environments/e.yaml[pools]: NodePool/broken: spec.weight: must be <= 100, got 101" in res.output


@pytest.mark.parametrize("env", NAMES)
def test_deployment_runs_the_built_image_writing_only_to_tmp(stacks, env):
    """The image scripts/build-image.sh tags (the package version), with a read-only root and /tmp an emptyDir."""
    deployments = [v["manifest"] for v in resources(stacks[env], "kubernetes_manifest").values()
                   if v["manifest"]["kind"] == "Deployment"]
    pod = deployments[0]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == f"{ENVIRONMENTS[env].image_repository}:{karpy_version()}"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {}}]


def test_deploy_says_what_is_missing(monkeypatch, tmp_path):
    """On a machine with none of the tools (an empty PATH), and one with all but terraform; an unknown --env is a
    usage error before any of that is looked at."""
    from click.testing import CliRunner

    from cli import main

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PATH", str(tmp_path))
    res = CliRunner().invoke(main, ["deploy", "--env", "dev", "--yes"])
    assert res.exit_code == 2 and res.output.startswith("error: Node.js is not installed"), res.output
    for name, text in (("node", "echo v22.19.0"), ("cdktn", "echo 0.24.0")):
        (tmp_path / name).write_text(f"#!/bin/sh\n{text}\n")
        (tmp_path / name).chmod(0o755)
    res = CliRunner().invoke(main, ["diff", "--env", "dev"])
    assert res.exit_code == 2 and res.output.startswith("error: terraform is not installed"), res.output
    res = CliRunner().invoke(main, ["diff", "--env", "qa"])
    assert res.exit_code == 2 and "unknown environment 'qa'" in res.output


def test_deploy_and_diff_cover_both_stacks(monkeypatch):
    """`deploy --env E` is one CDK Terrain run over E and E-pools (the CLI refuses a stack without the stacks it
    depends on, and applies E-pools only once E is applied), approved only when the caller says the user approved;
    `diff` diffs E, then E-pools, and stops at a failure."""
    import stacks.cli_support as support

    monkeypatch.chdir(ROOT)
    tools = support.Toolchain("/opt/bin/cdktn", 22)
    calls: list[list[str]] = []
    codes = iter([0, 0, 0, 0, 3])

    class Done:
        def __init__(self, code: int) -> None:
            self.returncode = code

    def run(cmd, cwd, env, check):  # stands in for the CDK Terrain CLI, which would need AWS and a cluster
        assert cwd == ROOT and env["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"].split(",")[-1] == "22"
        calls.append(cmd)
        return Done(next(codes))

    monkeypatch.setattr(support.subprocess, "run", run)
    assert support.run_cdk("deploy", "dev", toolchain=tools) == 0
    assert calls == [["/opt/bin/cdktn", "deploy", "dev", "dev-pools"]]  # not approved: the CLI asks itself
    calls.clear()
    assert support.run_cdk("deploy", "dev", auto_approve=True, toolchain=tools) == 0
    assert calls == [["/opt/bin/cdktn", "deploy", "dev", "dev-pools", "--auto-approve"]]
    calls.clear()
    assert support.run_cdk("diff", "dev", toolchain=tools) == 0
    assert calls == [["/opt/bin/cdktn", "diff", "dev"], ["/opt/bin/cdktn", "diff", "dev-pools"]]
    calls.clear()
    assert support.run_cdk("diff", "prod", toolchain=tools) == 3 and calls == [["/opt/bin/cdktn", "diff", "prod"]]


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
