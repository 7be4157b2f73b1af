"""Environment files (validation with one-line errors naming file and field), `karpy init`, `karpy render`, the names
AWS would refuse, and the controller's RBAC as Karpenter's chart scopes it. No jsii: none of this needs cdktn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cli import main
from infra.manifests import DeploymentProps, cluster_role, role
from infra.names import InvalidName, controller_role_name, partition_of, role_arn, rule_names
from stacks.environments import (
    CDKTF_JSON,
    InvalidEnvironment,
    environments_dir,
    init_project,
    load_environment,
    load_environments,
)
from stacks.render import render_objects

ROOT = Path(__file__).resolve().parents[2]
BASE = {"account_id": "111122223333", "region": "us-east-1", "cluster_name": "c", "pod_identity": True}


def write(tmp_path: Path, text: str, name: str = "e") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def env_file(tmp_path: Path, **fields: object) -> Path:
    return write(tmp_path, yaml.safe_dump({**BASE, **fields}))


def test_the_examples_load():
    envs = {e.name: e for e in load_environments(ROOT)}  # the checkout's cdktf.json names examples/environments
    assert environments_dir(ROOT) == ROOT / "examples" / "environments"
    assert sorted(envs) == ["dev", "prod", "staging"]
    assert envs["dev"].oidc_issuer == "https://oidc.eks.us-east-1.amazonaws.com/id/0A1B2C3D4E5F"
    assert envs["prod"].pod_identity and envs["prod"].state_use_lockfile
    assert [d["kind"] for d in envs["staging"].pools].count("NodePool") == 6


@pytest.mark.parametrize(("fields", "message"), [
    ({"acount_id": "1"}, "acount_id: unknown field; known: account_id, region,"),
    ({"account_id": 111122223333}, "account_id: write the account id as a quoted string"),
    ({"account_id": "1234"}, "account_id: expected 12 digits, got '1234'"),
    ({"region": "Europe"}, "region: expected an AWS region such as us-east-1, got 'Europe'"),
    ({"pod_identity": "yes"}, "pod_identity: expected true or false, got 'yes'"),
    ({"subnet_ids": ["subnet-1", "x"]}, "subnet_ids: [0]: expected subnet ids (subnet-…), got 'subnet-1'"),
    ({"pod_identity": False}, "pod_identity: set it to true, or set oidc_provider_arn and oidc_issuer"),
    ({"oidc_issuer": "https://oidc.eks.us-east-1.amazonaws.com/id/AB"},
     "oidc_provider_arn: required with oidc_issuer (IRSA needs both)"),
    ({"oidc_issuer": "https://oidc.eks.us-east-1.amazonaws.com/id/AB",
      "oidc_provider_arn": "arn:aws:iam::999999999999:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/AB"},
     "oidc_provider_arn: account 999999999999 is not account_id 111122223333"),
    ({"state_bucket": "my-state"}, "state_bucket: an S3 state backend without locking lets two deploys overwrite"),
    ({"settings": {"NOT_A_SETTING": "1"}}, "settings: NOT_A_SETTING: not a controller setting"),
    ({"settings": {"CLUSTER_NAME": "x"}}, "settings: CLUSTER_NAME: set by the environment's cluster_name"),
    ({"settings": {"BATCH_MAX_DURATION": "ten"}}, "settings: BATCH_MAX_DURATION:"),
    ({"node_join": "magic"}, "node_join: expected access-entry or aws-auth, got 'magic'"),
    ({"pools": "missing/"}, "pools: missing/: no such file or directory"),
    ({"pools": [1]}, "pools: [0]: expected a NodePool or EC2NodeClass manifest, got int"),
])
def test_a_bad_field_is_one_line_naming_file_and_field(tmp_path, fields, message):
    path = env_file(tmp_path, **fields)
    with pytest.raises(InvalidEnvironment) as e:
        load_environment(path)
    text = str(e.value)
    assert text.startswith(f"{path}: ") and message in text, text
    assert "\n" not in text and len(text) < 600


def test_missing_fields_bad_yaml_and_bad_names(tmp_path):
    with pytest.raises(InvalidEnvironment, match=r"e\.yaml: missing required field\(s\): account_id, cluster_name"):
        load_environment(write(tmp_path, "region: us-east-1\npod_identity: true\n"))
    with pytest.raises(InvalidEnvironment, match=r"e\.yaml: not valid YAML"):
        load_environment(write(tmp_path, "region: [us-east-1\n"))
    with pytest.raises(InvalidEnvironment, match=r"e\.yaml: expected a mapping of settings, got list"):
        load_environment(write(tmp_path, "- a\n"))
    with pytest.raises(InvalidEnvironment, match=r"the file name 'Prod_EU' is the environment's"):
        load_environment(write(tmp_path, yaml.safe_dump(BASE), name="Prod_EU"))
    with pytest.raises(InvalidEnvironment, match=r"ends in -pools, which names the pools stack of 'x'"):
        load_environment(write(tmp_path, yaml.safe_dump(BASE), name="x-pools"))


def test_unknown_environment_and_empty_project(tmp_path):
    with pytest.raises(InvalidEnvironment, match=r"no environments: .*environments has no \.yaml files \(create one "
                                                 r"with `karpy init`\)"):
        load_environments(tmp_path)
    (tmp_path / "environments").mkdir()
    env_file(tmp_path / "environments")
    with pytest.raises(InvalidEnvironment, match=r"unknown environment\(s\) qa; known: e \(files in "):
        load_environments(tmp_path, ["qa"])


def test_pools_from_a_directory(tmp_path):
    pools = tmp_path / "pools"
    pools.mkdir()
    (pools / "a.yaml").write_text(yaml.safe_dump_all([
        {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
         "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}],
                  "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
                  "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}]}}]))
    (pools / "b.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
         "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                         "name": "default"}, "requirements": []}}}}))
    env = load_environment(env_file(tmp_path, pools="pools"))
    assert [d["kind"] for d in env.pools] == ["EC2NodeClass", "NodePool"]
    objects = render_objects(env)
    node_class = next(o for o in objects if o["kind"] == "EC2NodeClass")
    assert node_class["spec"]["role"] == "KarpenterNodeRole-c"  # the node role the stack creates, by name
    assert [o["kind"] for o in objects][-2:] == ["EC2NodeClass", "NodePool"]


def test_init_scaffolds_a_valid_project(tmp_path):
    written = init_project(tmp_path, "prod", "012345678901", "eu-west-1", "prod-eu")
    assert written == [tmp_path / "cdktf.json", tmp_path / "environments" / "prod.yaml"]
    cdktf = json.loads((tmp_path / "cdktf.json").read_text())
    assert cdktf["app"] == "karpy synth-app" == CDKTF_JSON["app"]  # runs from an installed karpy, no checkout
    env = load_environments(tmp_path)[0]
    assert (env.name, env.account_id, env.region, env.cluster_name) == ("prod", "012345678901", "eu-west-1", "prod-eu")
    assert [d["kind"] for d in env.pools] == ["EC2NodeClass", "NodePool"]
    render_objects(env)  # the scaffold's pools pass Karpenter's validation
    with pytest.raises(InvalidEnvironment, match=r"prod\.yaml exists; not overwritten"):
        init_project(tmp_path, "prod", "012345678901", "eu-west-1", "prod-eu")
    assert init_project(tmp_path, "dev", "012345678901", "eu-west-1", "dev") == [tmp_path / "environments" / "dev.yaml"]


def test_init_and_render_cli(tmp_path, monkeypatch):
    runner = CliRunner()
    res = runner.invoke(main, ["init", "--env", "qa", "--account-id", "111122223333", "--region", "us-west-2",
                               "-d", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert f"wrote {tmp_path / 'environments' / 'qa.yaml'}" in res.output
    bad = runner.invoke(main, ["init", "--env", "qa", "--account-id", "1", "--region", "us-west-2", "-d",
                               str(tmp_path / "other")])
    assert bad.exit_code == 1 and "account_id: expected 12 digits, got '1'" in bad.output
    assert not (tmp_path / "other" / "environments" / "qa.yaml").exists()  # a bad scaffold is not left behind

    monkeypatch.chdir(tmp_path)
    # the project directory is the working directory, as for cdktf
    res = runner.invoke(main, ["render", "--env", "qa"])
    assert res.exit_code == 0, res.output
    docs = list(yaml.safe_load_all(res.output))
    kinds = [d["kind"] for d in docs]
    assert kinds[:3] == ["CustomResourceDefinition"] * 3 and kinds[-2:] == ["EC2NodeClass", "NodePool"]
    assert kinds.index("ClusterRole") < kinds.index("Deployment")
    res = runner.invoke(main, ["render", "--env", "qa", "-o", "out"])
    assert res.exit_code == 0, res.output
    kustomization = yaml.safe_load((tmp_path / "out" / "kustomization.yaml").read_text())
    assert len(kustomization["resources"]) == len(docs)
    assert [yaml.safe_load((tmp_path / "out" / f).read_text()) for f in kustomization["resources"]] == docs
    (tmp_path / "file").write_text("")
    res = runner.invoke(main, ["render", "--env", "qa", "-o", "file/sub"])
    assert res.exit_code == 1 and res.output == "error: cannot write to file/sub: file is not a directory\n"
    res = runner.invoke(main, ["render", "--env", "nope"])
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert "unknown environment 'nope' (one of: qa)" in res.output


def test_render_wires_names_and_settings():
    envs = {e.name: e for e in load_environments(ROOT)}
    objs = {(o["kind"], o["metadata"]["name"]): o for o in render_objects(envs["dev"])}
    sa = objs[("ServiceAccount", "karpenter")]
    assert sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn":
                                             "arn:aws:iam::111122223333:role/KarpenterController-dev"}
    container = objs[("Deployment", "karpy")]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["INTERRUPTION_QUEUE"] == "dev" and env["CLUSTER_NAME"] == "dev" and env["AWS_REGION"] == "us-east-1"
    assert container["image"].startswith("public.ecr.aws/karpy/controller:")
    prod = {(o["kind"], o["metadata"]["name"]): o for o in render_objects(envs["prod"])}
    assert "annotations" not in prod[("ServiceAccount", "karpenter")]["metadata"]  # Pod Identity
    prod_env = {e["name"]: e.get("value")
                for e in prod[("Deployment", "karpy")]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert prod_env["FEATURE_GATES"] == "SpotToSpotConsolidation=true"


def test_names_aws_would_refuse():
    assert controller_role_name("c" * 44) == "KarpenterController-" + "c" * 44  # 64: the limit
    with pytest.raises(InvalidName, match=r"is 65 characters; AWS allows at most 64 .*controller_role_name"):
        controller_role_name("c" * 45)
    assert controller_role_name("c" * 45, "KarpyCtl") == "KarpyCtl"
    names = rule_names("q" * 32, ["CapacityReservationInterruption", "Rebalance"])
    assert len(names["CapacityReservationInterruption"]) == 64
    with pytest.raises(InvalidName, match=r"EventBridge rule name .* is 65 characters.*queue_name"):
        rule_names("q" * 33, ["CapacityReservationInterruption"])
    assert partition_of("cn-north-1") == "aws-cn" and partition_of("us-gov-west-1") == "aws-us-gov"
    assert role_arn("aws", "111122223333", "/karpy/", "R") == "arn:aws:iam::111122223333:role/karpy/R"


def test_rbac_is_no_broader_than_karpenters_chart():
    rules = cluster_role()["rules"]

    def verbs(group: str, resource: str) -> set[str]:
        return {v for r in rules if group in r["apiGroups"] and resource in r["resources"] for v in r["verbs"]}

    assert verbs("", "nodes") == {"get", "list", "watch", "patch", "update", "delete"}  # never create
    assert verbs("karpenter.sh", "nodeclaims") == {"get", "list", "watch", "create", "delete", "patch", "update"}
    assert verbs("karpenter.sh", "nodepools") == {"get", "list", "watch", "patch", "update"}
    assert verbs("karpenter.k8s.aws", "ec2nodeclasses/status") == {"patch", "update"}
    assert verbs("", "pods") == {"get", "list", "watch", "delete"} and verbs("", "pods/eviction") == {"create"}
    assert verbs("", "events") == {"get", "list", "watch", "create", "patch"}
    assert not any("configmaps" in r["resources"] or "secrets" in r["resources"] for r in rules)
    assert all("*" not in r["verbs"] and "*" not in r["resources"] for r in rules)
    ns = role(DeploymentProps("c", None, "us-east-1", "q", None, "repo", "1"))["rules"]
    writes = [r for r in ns if {"patch", "update"} & set(r["verbs"])]
    assert all(r.get("resourceNames") for r in writes)
    assert {n for r in writes for n in r["resourceNames"]} == {"karpenter-leader-election", "config-logging"}
