"""The CLI's conventions: help and exit codes, version, completion, -o formats with apiVersion/kind, explain by
owner or prefix, warnings about duplicate or Karpenter-less inputs, and one-line errors (against a real closed port,
not a mock, for the no-cluster case)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

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


@pytest.mark.parametrize("command", ["simulate", "explain", "validate", "convert", "crds", "catalog", "catalog show",
                                     "catalog refresh", "status", "drain", "cordon", "uncordon", "interrupt",
                                     "completion"])
def test_help_has_examples_and_fits_80_columns(runner, command):
    res = runner.invoke(main, [*command.split(), "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0 and ("Example" in res.output), res.output
    assert all(len(line) <= 80 for line in res.output.splitlines()), res.output


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
    from controller.interruption.messages import SpotInterruption, parse_message
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
