"""The CLI's conventions: help and exit codes, version, completion, -o formats with apiVersion/kind, explain by
owner or prefix, warnings about duplicate or Karpenter-less inputs, and one-line errors (against a real closed port,
not a mock, for the no-cluster case)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from cli import main
from controller.ops.output import API_VERSION

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_karpy_alone_prints_help_and_exits_0(runner):
    res = runner.invoke(main, [], prog_name="karpy")
    assert res.exit_code == 0
    assert "Usage: karpy" in res.output and "Examples:" in res.output and "status" in res.output
    assert all(len(line) <= 80 for line in res.output.splitlines()), res.output


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path of the group, sub-groups included (catalog, catalog show, ...)."""
    out = []
    for name, command in sorted(group.commands.items()):
        out.append((*prefix, name))
        if isinstance(command, click.Group):
            out += _commands(command, (*prefix, name))
    return out


COMMANDS = _commands(main)


def test_every_command_is_covered():
    assert {"init", "render", "synth", "diff", "deploy", "version", "catalog refresh", "status", "controller",
            "synth-app"} <= {" ".join(c) for c in COMMANDS}


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_has_examples_and_fits_80_columns(runner, command):
    res = runner.invoke(main, [*command, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert all(len(line) <= 80 for line in res.output.splitlines()), res.output
    if not main.commands[command[0]].hidden:
        # synth-app, the hidden app command of cdktf.json, is run by the CDK Terrain CLI, not by people
        assert "Example" in res.output, res.output


def test_version(runner):
    res = runner.invoke(main, ["version"])
    assert res.exit_code == 0 and res.output.startswith("karpy 0.") and "Python 3." in res.output
    doc = json.loads(runner.invoke(main, ["version", "-o", "json"]).output)
    assert doc["apiVersion"] == API_VERSION and doc["kind"] == "Version" and doc["version"].startswith("0.")


@pytest.mark.parametrize(("shell", "marker"), [("bash", "complete -o nosort -F"), ("zsh", "compdef"),
                                               ("fish", "complete --no-files --command karpy")])
def test_completion_scripts(runner, shell, marker):
    res = runner.invoke(main, ["completion", shell])
    assert res.exit_code == 0 and "_KARPY_COMPLETE" in res.output and marker in res.output
    assert runner.invoke(main, ["completion", "powershell"]).exit_code == 2


def test_completion_answers_commands_and_environments(monkeypatch):
    """What the shell scripts ask karpy, answered as the shell would see it."""
    from click.shell_completion import ShellComplete

    comp = ShellComplete(main, {}, "karpy", "_KARPY_COMPLETE")
    assert {"status", "drain", "interrupt"} <= {c.value for c in comp.get_completions([], "")}
    envs = [c.value for c in comp.get_completions(["status", "--env"], "")]
    from stacks.environments import environment_names

    assert envs == environment_names() == ["dev", "prod", "staging"]


def test_validate_output_formats_and_warnings(runner, tmp_path):
    ok = runner.invoke(main, ["validate", "-f", str(EXAMPLES / "nodepools.yaml"), "-o", "json"])
    doc = json.loads(ok.stdout)
    assert ok.exit_code == 0 and doc["kind"] == "ValidationResult" and doc["valid"] is True
    assert isinstance(doc["documents"], int) and doc["documents"] > 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: b}\nspec: {weight: 0}\n")
    res = runner.invoke(main, ["validate", "-f", str(bad), "-o", "yaml"])
    doc = yaml.safe_load(res.stdout)
    assert res.exit_code == 1 and doc["valid"] is False
    assert {"file": str(bad), "kind": "NodePool", "name": "b", "field": "spec.weight",
            "message": "must be >= 1, got 0"} in doc["errors"]
    # the same file twice, and a file with no Karpenter documents
    plain = tmp_path / "pods.yaml"
    plain.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n")
    np = str(EXAMPLES / "nodepools.yaml")
    res = runner.invoke(main, ["validate", "-f", np, "-f", np, "-f", str(plain)])
    assert res.exit_code == 0
    assert f"warning: {np}: given more than once" in res.stderr
    assert f"warning: {plain}: no Karpenter documents" in res.stderr
    single = runner.invoke(main, ["validate", "-f", np])
    assert single.stdout == res.stdout  # read once: the same count


def test_duplicate_inputs_do_not_double_the_pods(runner):
    once = json.loads(runner.invoke(main, ["simulate", "-f", str(EXAMPLES), "-o", "json"]).stdout)
    res = runner.invoke(main, ["simulate", "-f", str(EXAMPLES), "-f", str(EXAMPLES / "workloads.yaml"), "-o", "json"])
    assert "given more than once" in res.stderr
    twice = json.loads(res.stdout)
    assert sum(len(c["pods"]) for c in twice["nodeClaims"]) == sum(len(c["pods"]) for c in once["nodeClaims"])


def test_catalog_show_formats(runner):
    doc = json.loads(runner.invoke(main, ["catalog", "show", "-o", "json"]).output)
    assert doc["kind"] == "Catalog" and doc["region"] == "us-east-1" and isinstance(doc["instanceTypes"], int)
    text = runner.invoke(main, ["catalog", "show"]).output
    assert "instance types:" in text and all(len(line) <= 80 for line in text.splitlines())
    res = runner.invoke(main, ["catalog", "show", "--catalog", "/nonexistent/snap.json"])
    assert res.exit_code == 1 and res.output.count("\n") == 1 and res.output.startswith("error: ")


def test_explain_by_owner_prefix_and_ambiguity(runner):
    by_owner = runner.invoke(main, ["explain", "Deployment/web", "-f", str(EXAMPLES), "-o", "json"])
    doc = json.loads(by_owner.output)
    assert doc["kind"] == "Explanation" and len(doc["pods"]) == 6
    assert {p["owner"] for p in doc["pods"]} == {"Deployment/web"}
    assert all(p["outcome"] == "NewNodeClaim" and isinstance(p["nodeClaim"]["pricePerHour"], float)
               for p in doc["pods"])
    assert json.loads(runner.invoke(main, ["explain", "web", "-f", str(EXAMPLES), "-o", "json"]).output) == \
        {**doc, "query": "web"}
    text = runner.invoke(main, ["explain", "web", "-f", str(EXAMPLES)]).output
    assert text.startswith("Deployment/web (shop): 6 pods") and "go to new NodeClaims" in text
    single = runner.invoke(main, ["explain", "ml/train-model", "-f", str(EXAMPLES)])
    assert "nodepool monitoring: taint dedicated=monitoring:NoSchedule not tolerated" in single.output
    prefix = runner.invoke(main, ["explain", "train", "-f", str(EXAMPLES)])
    assert prefix.exit_code == 0 and prefix.output.startswith("ml/train-model cannot be scheduled")
    ambiguous = runner.invoke(main, ["explain", "c", "-f", str(EXAMPLES)])
    assert ambiguous.exit_code == 2 and ambiguous.output.count("\n") == 1
    assert "owners:" in ambiguous.output and "Deployment/checkout" in ambiguous.output
    missing = runner.invoke(main, ["explain", "nothing-like-it", "-f", str(EXAMPLES)])
    assert missing.exit_code == 1 and "not among" in missing.output


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_status_without_a_reachable_cluster_is_one_line(runner, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{_closed_port()}",
                                              "insecure-skip-tls-verify": True}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    res = runner.invoke(main, ["status", "--kubeconfig", str(kubeconfig)])
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert res.output.startswith("error: no cluster reachable at https://127.0.0.1:")
    missing = runner.invoke(main, ["status", "--kubeconfig", str(tmp_path / "none")])
    assert missing.exit_code == 1 and "does not exist" in missing.output and missing.output.count("\n") == 1
    drain = runner.invoke(main, ["drain", "x", "--kubeconfig", str(kubeconfig)])
    assert drain.exit_code == 1 and "no cluster reachable" in drain.output


def test_usage_errors_exit_2(runner):
    res = runner.invoke(main, ["status", "--env", "prdo"])
    assert res.exit_code == 2 and "unknown environment 'prdo' (did you mean prod?)" in res.output
    res = runner.invoke(main, ["interrupt", "--instance", "i-0123456789abcdef0"])
    assert res.exit_code == 2 and "--queue-url URL or --env ENV" in res.output
    res = runner.invoke(main, ["interrupt", "--queue-url", "https://sqs.us-east-1.amazonaws.com/1/q"])
    assert res.exit_code == 2 and "--instance" in res.output
    res = runner.invoke(main, ["interrupt", "--queue-url", "https://sqs.us-east-1.amazonaws.com/1/q",
                               "--instance", "not-an-instance"])
    assert res.exit_code == 2 and "is not an EC2 instance id" in res.output


def test_an_unwritable_output_fails_before_any_work(runner, tmp_path):
    res = runner.invoke(main, ["catalog", "refresh", "--region", "us-east-1", "-o", str(tmp_path)])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "is a directory" in res.output, res.output


def test_usage_errors_are_one_line(runner):
    res = runner.invoke(main, ["simulate", "-f", "examples", "-o", "xml"], prog_name="karpy")
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert res.output.startswith("error: Invalid value for '-o' / '--output'")
    assert "'karpy simulate --help'" in res.output
    res = runner.invoke(main, ["no-such-command"], prog_name="karpy")
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "No such command" in res.output
    assert runner.invoke(main, ["status", "--help"]).exit_code == 0


def test_objects_defined_twice_and_inputs_without_karpenter_documents_are_warned(runner, tmp_path):
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: shop}\nspec: {containers: [{name: c}]}\n"
    (tmp_path / "a.yaml").write_text(pod)
    (tmp_path / "b.yaml").write_text(pod)
    res = runner.invoke(main, ["simulate", "-f", str(tmp_path / "a.yaml"), "-f", str(tmp_path / "b.yaml")])
    assert res.exit_code == 0
    assert f"warning: {tmp_path / 'b.yaml'}: Pod shop/p is defined again (first in {tmp_path / 'a.yaml'}); " \
        "the later one is used" in res.stderr
    plan = json.loads(runner.invoke(main, ["simulate", "-f", str(tmp_path / "a.yaml"), "-f", str(tmp_path / "b.yaml"),
                                           "-o", "json"]).stdout)
    assert [g["count"] for g in plan["unschedulable"]] == [1]  # one pod, not two of the same name
    assert "warning: no Karpenter documents in the input" in res.stderr
    quiet = runner.invoke(main, ["simulate", "-f", str(EXAMPLES)])
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_context_for_an_environment_endpoint(tmp_path):
    from controller.ops.connect import context_for_endpoint
    from controller.ops.errors import OpsError

    endpoint = "https://0A1B2C3D4E5F.gr7.us-east-1.eks.amazonaws.com"
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump({
        "clusters": [{"name": "other", "cluster": {"server": "https://example.com"}},
                     {"name": "arn:aws:eks:us-east-1:111122223333:cluster/dev", "cluster": {"server": endpoint + "/"}}],
        "contexts": [{"name": "other", "context": {"cluster": "other"}},
                     {"name": "dev-admin", "context": {"cluster": "arn:aws:eks:us-east-1:111122223333:cluster/dev"}}]}))
    assert context_for_endpoint(endpoint.upper().replace("HTTPS", "https"), str(kubeconfig)) == \
        (str(kubeconfig), "dev-admin")
    with pytest.raises(OpsError, match=r"no context for https://nowhere in .*config"):
        context_for_endpoint("https://nowhere", str(kubeconfig))


def test_the_interruption_message_is_awss_and_the_controllers():
    from controller.cloud.aws.messages import SpotInterruption, parse_message
    from controller.ops.interrupt import region_of_queue, spot_interruption_event

    event = spot_interruption_event({"InstanceId": "i-0123456789abcdef0", "OwnerId": "111122223333"}, "eu-west-1")
    assert event["detail-type"] == "EC2 Spot Instance Interruption Warning" and event["source"] == "aws.ec2"
    assert event["account"] == "111122223333" and event["region"] == "eu-west-1"
    assert event["resources"] == ["arn:aws:ec2:eu-west-1:111122223333:instance/i-0123456789abcdef0"]
    assert event["detail"] == {"instance-id": "i-0123456789abcdef0", "instance-action": "terminate"}
    assert isinstance(parse_message(json.dumps(event)), SpotInterruption)
    assert region_of_queue("https://sqs.eu-west-1.amazonaws.com/111122223333/prod") == "eu-west-1"
    assert region_of_queue("http://sqs.us-east-1.localhost.localstack.cloud:4566/000000000000/q") == "us-east-1"
    assert region_of_queue("http://127.0.0.1:4566/000000000000/q") is None


def test_an_unexpected_error_is_one_line_unless_debugging(runner, monkeypatch):
    """A bug is simulated by making the catalog loader raise (no input provokes one on purpose)."""
    import controller.catalog.snapshot as snapshot

    def broken(name: str) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(snapshot, "load_catalog", broken)
    res = runner.invoke(main, ["catalog", "show"])
    assert res.exit_code == 1
    assert res.output == "error: internal error: ZeroDivisionError: division by zero (KARPY_DEBUG=1 shows the " \
                         "traceback)\n"
    monkeypatch.setenv("KARPY_DEBUG", "1")
    res = runner.invoke(main, ["catalog", "show"])
    assert isinstance(res.exception, ZeroDivisionError)


def test_connection_problems_in_a_few_words():
    from controller.ops.connect import connection_problem

    assert connection_problem("GET /x: HTTPSConnectionPool(host='k', port=1): Max retries exceeded (Caused by "
                              "NewConnectionError('...: [Errno 111] Connection refused'))") == "connection refused"
    assert connection_problem("GET /x: ... [Errno -2] Name or service not known") == "host not found"
    assert connection_problem("GET /x: ... Read timed out. (read timeout=30)") == "timed out"
    assert connection_problem("GET /x: something else entirely") == "something else entirely"


# ---- synth, diff, deploy: prerequisites checked up front, confirmation ------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def _script(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _toolchain(tmp_path: Path, node: str = "v22.20.0", cdktn: str | None = "0.24.0", terraform: bool = True,
               cdktn_exit: str = "0") -> Path:
    """A PATH directory of tiny scripts standing in for node, cdktn and terraform; the fake cdktn appends its
    arguments, jsii's silencing variable and its working directory to tmp_path/cdktn.log."""
    bin_dir = tmp_path / "bin"
    _script(bin_dir, "node", f"echo {node}")
    if cdktn is not None:
        _script(bin_dir, "cdktn", f'if [ "$1" = --version ]; then echo {cdktn}; exit 0; fi\n'
                                  f'echo "$* eol=$JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION cwd=$PWD" '
                                  f'>> {tmp_path}/cdktn.log\nexit {cdktn_exit}')
    if terraform:
        _script(bin_dir, "terraform", "echo Terraform v1.9.0")
    return bin_dir


@pytest.fixture
def project(monkeypatch):
    """The checkout as the project (its cdktf.json names examples/environments: dev, prod, staging)."""
    monkeypatch.chdir(ROOT)
    for name in ("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "TERRAFORM_BINARY_NAME"):
        monkeypatch.delenv(name, raising=False)
    return ROOT


def test_deploy_refuses_what_is_missing_naming_the_fix(runner, project, tmp_path, monkeypatch):
    import importlib.util

    import stacks.cli_support as support

    cases: list[tuple[dict[str, Any], str]] = [
        (dict(node="v20.20.2"), "Node.js 20.20.2 is too old: the CDK Terrain CLI 0.24.0 needs Node.js >= 22.19.0"),
        (dict(cdktn=None), "the CDK Terrain CLI (cdktn) is not installed: npm install --global cdktn-cli@0.24.0"),
        (dict(cdktn="0.23.1"), "is 0.23.1, the cdktn Python package is 0.24.0; they must match: npm install "
                               "--global cdktn-cli@0.24.0"),
        (dict(terraform=False), "terraform is not installed: the CDK Terrain CLI runs it"),
    ]
    for i, (kwargs, message) in enumerate(cases):
        monkeypatch.setenv("PATH", str(_toolchain(tmp_path / str(i), **kwargs)))
        for args in (["diff", "--env", "dev"], ["deploy", "--env", "dev", "--yes"]):
            res = runner.invoke(main, args)
            assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
            assert res.output.startswith("error: ") and message in res.output, res.output
        assert not (tmp_path / str(i) / "cdktn.log").exists()  # nothing ran
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    res = runner.invoke(main, ["deploy", "--env", "dev", "--yes"])
    assert res.exit_code == 2 and "error: Node.js is not installed" in res.output
    # the infra extra cannot be uninstalled from the shared venv: its modules are made unfindable instead
    real = importlib.util.find_spec
    monkeypatch.setattr(support.importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("cdktn") else real(name, *a))
    for args in (["diff", "--env", "dev"], ["deploy", "--env", "dev"], ["synth", "-o", str(tmp_path / "o")]):
        res = runner.invoke(main, args)
        assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
        assert f"karpy {args[0]} needs the infra extra" in res.output and "pip install 'karpy[infra]'" in res.output


def test_node_minimum_read_from_the_clis_package_json(tmp_path, monkeypatch, runner, project):
    """A CLI installed by npm is a link into its package: the package's engines.node is the minimum, not MIN_NODE."""
    from stacks.cli_support import cli_package, minimum_node

    package = tmp_path / "lib" / "node_modules" / "cdktn-cli"
    real = _script(package / "bin", "cdktn", "echo 0.24.0")
    (package / "package.json").write_text(json.dumps({"name": "cdktn-cli", "version": "0.24.0",
                                                      "engines": {"node": ">=23.1.0"}}))
    bin_dir = _toolchain(tmp_path, node="v22.20.0", cdktn=None)
    (bin_dir / "cdktn").symlink_to(real)
    assert minimum_node(cli_package(str(bin_dir / "cdktn"))) == (23, 1, 0)
    monkeypatch.setenv("PATH", str(bin_dir))
    res = runner.invoke(main, ["diff", "--env", "dev"])
    assert res.exit_code == 2 and "Node.js 22.20.0 is too old: the CDK Terrain CLI 0.24.0 needs Node.js >= 23.1.0" \
        in res.output
    assert minimum_node(None) == (22, 19, 0)


def test_the_cli_in_the_projects_node_modules_is_found_first(tmp_path, monkeypatch):
    """The project's pinned CLI (npm install --save-dev) wins over a global one of another version, as with npx."""
    from stacks.cli_support import MissingTool, check_toolchain

    bin_dir = _toolchain(tmp_path, cdktn="0.23.0")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("TERRAFORM_BINARY_NAME", raising=False)
    with pytest.raises(MissingTool, match=r"cdktn is 0\.23\.0, the cdktn Python package is 0\.24\.0"):
        check_toolchain("diff", tmp_path / "project")
    local = _script(tmp_path / "project" / "node_modules" / ".bin", "cdktn", "echo 0.24.0")
    tools = check_toolchain("diff", tmp_path / "project")
    assert (tools.cli, tools.node_major) == (str(local), 22)


def test_deploy_asks_on_a_terminal_and_yes_skips_the_question(runner, project, tmp_path, monkeypatch):
    import cli

    monkeypatch.setenv("PATH", str(_toolchain(tmp_path)))
    log = tmp_path / "cdktn.log"
    res = runner.invoke(main, ["deploy", "--env", "dev"])  # CliRunner's stdin is no terminal
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "pass --yes" in res.output and not log.exists()
    monkeypatch.setattr(cli, "_stdin_is_tty", lambda: True)
    res = runner.invoke(main, ["deploy", "--env", "dev"], input="n\n")
    assert res.exit_code == 1 and "account 111122223333, region us-east-1" in res.output, res.output
    assert res.output.endswith("error: not deployed\n") and not log.exists()
    res = runner.invoke(main, ["deploy", "--env", "dev"], input="y\n")
    assert res.exit_code == 0, res.output
    assert log.read_text() == f"deploy dev dev-pools --auto-approve eol=22 cwd={ROOT}\n"
    log.unlink()
    monkeypatch.setattr(cli, "_stdin_is_tty", lambda: False)
    res = runner.invoke(main, ["deploy", "--env", "prod", "--yes"])
    assert res.exit_code == 0 and log.read_text() == f"deploy prod prod-pools --auto-approve eol=22 cwd={ROOT}\n"


def test_diff_runs_each_stack_and_passes_the_exit_code(runner, project, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(_toolchain(tmp_path, cdktn_exit="3")))
    res = runner.invoke(main, ["diff", "--env", "staging"])
    assert res.exit_code == 3  # the first stack failed: the second is not diffed
    assert (tmp_path / "cdktn.log").read_text() == f"diff staging eol=22 cwd={ROOT}\n"


@pytest.mark.parametrize("command", [["render", "--env", "prdo"], ["synth", "--env", "dev", "--env", "prdo"],
                                     ["diff", "--env", "prdo"], ["deploy", "--env", "prdo", "--yes"]])
def test_project_commands_check_env_before_any_work(runner, project, command, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no tool needed to refuse a bad --env
    res = runner.invoke(main, command, prog_name="karpy")
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "unknown environment 'prdo' (did you mean prod?)" in res.output


@pytest.mark.parametrize("command", ["render", "synth", "diff", "deploy"])
def test_project_commands_complete_env(project, command):
    from click.shell_completion import ShellComplete

    comp = ShellComplete(main, {}, "karpy", "_KARPY_COMPLETE")
    assert [c.value for c in comp.get_completions([command, "--env"], "")] == ["dev", "prod", "staging"]
    assert [c.value for c in comp.get_completions([command, "--env"], "st")] == ["staging"]


def test_quiet_environ_keeps_what_the_user_set():
    from stacks.cli_support import quiet_environ

    environ = quiet_environ({"JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "18",
                             "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "yes"}, 20)
    assert environ == {"JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "18,20",
                       "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "yes",
                       "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
                       "JSII_SILENCE_WARNING_KNOWN_BROKEN_NODE_VERSION": "1"}


def test_status_env_without_an_endpoint_finds_the_context_update_kubeconfig_wrote(runner, tmp_path, monkeypatch):
    """`karpy init`'s environment has no cluster_endpoint: the context is the one named by the cluster's EKS ARN
    (as `aws eks update-kubeconfig` writes it), else one named as the cluster; none -> one line saying what to run."""
    from controller.ops.connect import context_for_cluster

    assert runner.invoke(main, ["init", "--env", "qa", "--account-id", "111122223333", "--region", "us-west-2",
                                "--cluster-name", "qa-west", "-d", str(tmp_path)]).exit_code == 0
    monkeypatch.chdir(tmp_path)
    arn = "arn:aws:eks:us-west-2:111122223333:cluster/qa-west"
    port = _closed_port()

    def kubeconfig(contexts: list[tuple[str, str]]) -> str:
        path = tmp_path / f"config-{len(list(tmp_path.glob('config-*')))}"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "other",
            "clusters": [{"name": cluster, "cluster": {"server": f"https://127.0.0.{i + 1}:{port}"}}
                         for i, (_, cluster) in enumerate(contexts)],
            "contexts": [{"name": name, "context": {"cluster": cluster, "user": "u"}} for name, cluster in contexts],
            "users": [{"name": "u", "user": {"token": "t"}}]}))
        return str(path)

    # the ARN as context and cluster name (update-kubeconfig's default), beside another cluster's context
    written = kubeconfig([("other", "arn:aws:eks:us-west-2:111122223333:cluster/other"), (arn, arn)])
    res = runner.invoke(main, ["status", "--env", "qa", "--kubeconfig", written])
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert res.output.startswith(f"error: no cluster reachable at https://127.0.0.2:{port}")
    # update-kubeconfig --alias: the context renamed, its cluster still the ARN; or a hand-written one named qa-west
    assert context_for_cluster("qa", "us-west-2", "111122223333", "qa-west",
                               kubeconfig([("other", "other"), ("admin@qa", arn)]))[1] == "admin@qa"
    assert context_for_cluster("qa", "us-west-2", "111122223333", "qa-west",
                               kubeconfig([("other", "other"), ("qa-west", "c1")]))[1] == "qa-west"
    none = kubeconfig([("other", "arn:aws:eks:us-east-1:111122223333:cluster/qa-west")])  # another region's
    res = runner.invoke(main, ["status", "--env", "qa", "--kubeconfig", none])
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert res.output == (f"error: environment qa: no kubeconfig context for cluster {arn} in {none} "
                          "(run: aws eks update-kubeconfig --name qa-west --region us-west-2)\n")


def test_catalog_refresh_uses_the_controllers_retry_policy(runner, tmp_path, monkeypatch):
    """The clients catalog refresh builds are make_client's (issue 10 §5), not boto3's defaults. The snapshot writer
    is replaced (building clients needs no server) and the price provider recorded, to see the clients."""

    import controller.catalog.snapshot as snapshot
    import controller.cloud.aws.pricing as pricing_module
    from controller.cloud.aws.clients import DEFAULT_MAX_ATTEMPTS, PRICING_MAX_ATTEMPTS

    seen: dict[str, Any] = {}

    class Recorded(pricing_module.PricingProvider):
        def __init__(self, pricing: Any, *args: Any, **kwargs: Any) -> None:
            seen["pricing"] = pricing
            super().__init__(pricing, *args, **kwargs)

    def capture(ec2: Any, region: str, out: str, date: str, live: Any, live_source: str) -> int:
        seen["ec2"] = ec2
        return 0

    monkeypatch.setattr(snapshot, "snapshot_from_ec2", capture)
    monkeypatch.setattr(pricing_module, "PricingProvider", Recorded)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    res = runner.invoke(main, ["catalog", "refresh", "--region", "eu-west-1", "--endpoint", "http://127.0.0.1:1",
                               "-o", str(tmp_path / "snap.json.gz")])
    assert res.exit_code == 0, res.output
    ec2, pricing = seen["ec2"], seen["pricing"]
    assert (ec2.meta.endpoint_url, ec2.meta.region_name) == ("http://127.0.0.1:1", "eu-west-1")
    assert ec2.meta.config.retries == {"mode": "adaptive", "total_max_attempts": DEFAULT_MAX_ATTEMPTS}
    # the Pricing API is AWS's in us-east-1 whatever the region, not the EC2 endpoint
    assert (pricing.meta.endpoint_url, pricing.meta.region_name) == ("https://api.pricing.us-east-1.amazonaws.com",
                                                                     "us-east-1")
    assert pricing.meta.config.retries == {"mode": "standard", "total_max_attempts": PRICING_MAX_ATTEMPTS}
    res = runner.invoke(main, ["catalog", "refresh", "--region", "eu-west-1", "--no-pricing-api",
                               "-o", str(tmp_path / "snap.json.gz")])
    assert res.exit_code == 0 and seen["pricing"] is None


POLICY_POOL = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: narrow}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: ["m5.large", "m5.xlarge"]}
        - {key: karpenter.k8s.aws/instance-family, operator: Exists, minValues: 3}
---
apiVersion: v1
kind: Pod
metadata: {name: solo, namespace: default}
spec: {containers: [{name: c, resources: {requests: {cpu: 500m}}}]}
"""

SPREAD_APP = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: ["m5.xlarge"]}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector: {matchLabels: {app: web}}
      containers: [{name: c, resources: {requests: {cpu: 500m}}}]
"""


def test_simulate_policies_are_the_controllers(runner, tmp_path):
    """--min-values-policy BestEffort launches where minValues (3 families out of one) leaves the pod unschedulable;
    --preference-policy Ignore drops the preferred hostname anti-affinity, so the three replicas share a node."""
    pools = tmp_path / "minvalues.yaml"
    pools.write_text(POLICY_POOL)
    strict = json.loads(runner.invoke(main, ["simulate", "-f", str(pools), "-o", "json"]).stdout)
    assert strict["nodeClaims"] == [] and [g["count"] for g in strict["unschedulable"]] == [1]
    res = runner.invoke(main, ["simulate", "-f", str(pools), "--min-values-policy", "BestEffort", "-o", "json"])
    best = json.loads(res.stdout)
    assert best["unschedulable"] == [] and [c["pods"] for c in best["nodeClaims"]] == [["default/solo"]]
    app = tmp_path / "spread.yaml"
    app.write_text(SPREAD_APP)
    respect = json.loads(runner.invoke(main, ["simulate", "-f", str(app), "-o", "json"]).stdout)
    assert sorted(len(c["pods"]) for c in respect["nodeClaims"]) == [1, 1, 1]
    res = runner.invoke(main, ["simulate", "-f", str(app), "--preference-policy", "Ignore", "-o", "json"])
    assert [len(c["pods"]) for c in json.loads(res.stdout)["nodeClaims"]] == [3]
    bad = runner.invoke(main, ["simulate", "-f", str(app), "--preference-policy", "ignore"])
    assert bad.exit_code == 2 and bad.output.count("\n") == 1


def test_synth_to_an_unusable_directory_fails_before_jsii(runner, project, tmp_path):
    """Before the change this was a JavaScript ENOTDIR after 20 s of synth, as an internal error."""
    (tmp_path / "file").write_text("")
    target = tmp_path / "file" / "sub"
    res = runner.invoke(main, ["synth", "--env", "dev", "-o", str(target)])
    assert res.exit_code == 1 and res.output == f"error: cannot write to {target}: {tmp_path / 'file'} is not a " \
                                                "directory\n"
    res = runner.invoke(main, ["synth", "--env", "dev", "-o", str(tmp_path / "file")])  # click's own check
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "is a file" in res.output, res.output
