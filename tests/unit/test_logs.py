"""Logs as Karpenter's zap writes them: JSON lines with level, time, logger, message, commit, controller, object
references and extra fields; console lines; library loggers at WARN; exceptions as an `error` field."""

from __future__ import annotations

import json
import logging
import re
import warnings
from collections.abc import Iterator

import pytest

from controller import logs

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    levels = {n: logging.getLogger(n).level for n in ("", *logs.LIBRARY_LOGGERS)}
    yield
    logs.reset()
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def _lines(capsys: pytest.CaptureFixture[str]) -> list[dict]:
    out = capsys.readouterr().out
    return [json.loads(line) for line in out.splitlines()]


def test_json_lines_carry_karpenters_fields(capsys):
    logs.configure("info")
    logging.getLogger("karpy.provisioner").info(
        "created nodeclaim", extra={"controller": "provisioner", "NodePool": {"name": "default"},
                                    "NodeClaim": {"name": "default-x7k2p"}, "requests": {"cpu": "2", "pods": "3"},
                                    "instance-types": "m5.large, c5.large"})
    (entry,) = _lines(capsys)
    assert entry["level"] == "INFO" and TIME.match(entry["time"]), entry
    assert entry["logger"] == "controller.provisioner"
    assert entry["message"] == "created nodeclaim"
    assert entry["controller"] == "provisioner"
    assert entry["NodePool"] == {"name": "default"} and entry["NodeClaim"] == {"name": "default-x7k2p"}
    assert entry["requests"] == {"cpu": "2", "pods": "3"} and entry["instance-types"] == "m5.large, c5.large"
    if logs.revision() != "unknown":
        assert entry["commit"] == logs.revision()
    keys = list(entry)
    assert keys[:4] == ["level", "time", "logger", "message"]
    assert keys.index("controller") < keys.index("NodePool") < keys.index("requests")


def test_object_references_from_dicts_objects_and_strings(capsys):
    logs.configure("info")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "namespace": "shop", "uid": "u"}}
    logging.getLogger("karpy.termination").info(
        "evicted pod", extra={"Pod": pod, "Node": "ip-10-0-0-1.ec2.internal", "EC2NodeClass": {"name": "default"},
                              "NodeClaim": {"name": "a", "namespace": ""}})
    (entry,) = _lines(capsys)
    assert entry["Pod"] == {"name": "web-1", "namespace": "shop"}
    assert entry["Node"] == {"name": "ip-10-0-0-1.ec2.internal"}
    assert entry["EC2NodeClass"] == {"name": "default"} and entry["NodeClaim"] == {"name": "a"}
    assert logs.object_ref("shop/web-1") == {"name": "web-1", "namespace": "shop"}


@pytest.mark.parametrize(("name", "expected"), [
    ("karpy", "controller"), ("karpy.controller", "controller"), ("karpy.provisioner", "controller.provisioner"),
    ("karpy.nodeclaim.lifecycle", "controller.nodeclaim.lifecycle"), ("botocore.hooks", "botocore.hooks")])
def test_logger_names_hang_below_controller(name, expected):
    assert logs.logger_name(name) == expected


def test_levels_filter_and_are_written_as_zap_does(capsys):
    logs.configure("warn")
    log = logging.getLogger("karpy.x")
    log.debug("d")
    log.info("i")
    log.warning("w")
    log.error("e")
    assert [(e["level"], e["message"]) for e in _lines(capsys)] == [("WARN", "w"), ("ERROR", "e")]
    logs.configure("debug")
    log.debug("d")
    (entry,) = _lines(capsys)
    assert entry["level"] == "DEBUG" and re.fullmatch(r"unit/test_logs\.py:\d+", entry["caller"]), entry


def test_exceptions_are_an_error_field_with_the_trace_at_debug_only(capsys):
    logs.configure("info")
    log = logging.getLogger("karpy.lifecycle")
    try:
        raise RuntimeError("launching nodeclaim,\ninsufficient capacity")
    except RuntimeError:
        log.exception("failed launching nodeclaim", extra={"controller": "nodeclaim.lifecycle"})
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and "Traceback" not in out
    entry = json.loads(out)
    assert entry["error"] == "RuntimeError: launching nodeclaim, insufficient capacity"
    assert entry["level"] == "ERROR" and "stacktrace" not in entry
    logs.configure("debug")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed")
    (entry,) = _lines(capsys)
    assert entry["error"] == "RuntimeError: boom" and "Traceback" in entry["stacktrace"]


def test_an_error_passed_as_a_field_is_kept(capsys):
    logs.configure("info")
    logging.getLogger("karpy").error("failed", extra={"error": ValueError("bad")})
    logging.getLogger("karpy").error("failed", extra={"error": "as text"})
    assert [e["error"] for e in _lines(capsys)] == ["ValueError: bad", "as text"]


def test_console_encoding_is_one_readable_line(capsys):
    logs.configure("info", encoding="console")
    try:
        raise KeyError("x")
    except KeyError:
        logging.getLogger("karpy.provisioner").exception("found provisionable pod(s)",
                                                         extra={"Pods": "default/a", "duration": "1.2s"})
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    stamp, level, logger, message, fields = out[0].split("\t")
    assert TIME.match(stamp) and level == "ERROR" and logger == "controller.provisioner"
    assert message == "found provisionable pod(s)"
    assert json.loads(fields)["Pods"] == "default/a" and json.loads(fields)["error"] == "KeyError: 'x'"


def test_library_loggers_are_quiet_below_warn(capsys):
    logs.configure("debug")
    for name in ("urllib3.connectionpool", "botocore.credentials", "kubernetes.client.rest"):
        logging.getLogger(name).info("chatter")
        logging.getLogger(name).debug("chatter")
    logging.getLogger("urllib3.connectionpool").warning("Retrying connection")
    entries = _lines(capsys)
    assert [(e["logger"], e["level"], e["message"]) for e in entries] == [
        ("urllib3.connectionpool", "WARN", "Retrying connection")]


def test_python_warnings_become_log_lines(capsys):
    logs.configure("info")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("unverified HTTPS request", UserWarning, stacklevel=1)
    (entry,) = _lines(capsys)
    assert entry["level"] == "WARN" and "unverified HTTPS request" in entry["message"]


def test_output_paths_and_reconfiguring_does_not_duplicate(tmp_path, capsys):
    path = tmp_path / "karpy.log"
    logs.configure("info", output_paths=["stdout", str(path)])
    logs.configure("info", output_paths=["stdout", str(path)])
    logging.getLogger("karpy").info("registered nodeclaim", extra={"NodeClaim": {"name": "a"}})
    assert [e["message"] for e in _lines(capsys)] == ["registered nodeclaim"]
    assert [json.loads(x)["message"] for x in path.read_text().splitlines()] == ["registered nodeclaim"]


def test_a_failing_output_is_reported_on_the_error_outputs_and_never_raises(tmp_path, capsys):
    errors = tmp_path / "errors.log"
    logs.configure("info", output_paths=["stdout"], error_output_paths=[str(errors)])

    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("cannot render")

    logging.getLogger("karpy").info("x", extra={"thing": Unprintable()})
    assert capsys.readouterr().out == ""
    assert "logging to stdout failed" in errors.read_text()


def test_bad_level_or_encoding_is_refused():
    with pytest.raises(ValueError, match="verbose"):
        logs.configure("verbose")
    with pytest.raises(ValueError, match="xml"):
        logs.configure("info", encoding="xml")


def test_the_log_says_which_source_won_over_a_legacy_configmap(capsys):
    """One info line per setting a legacy ConfigMap also set: "using setting from ConfigMap" where it decided,
    "using setting from env/flag over ConfigMap" (naming the ConfigMap) where env or a flag won."""
    from controller.settings import log_sources, parse_legacy_configmaps, resolve

    legacy, warnings_ = parse_legacy_configmaps("kube-system", {
        "aws.clusterName": "legacy", "batchIdleDuration": "4s", "batchMaxDuration": "20s",
        "featureGates.spotToSpotConsolidation": "true"}, None)
    assert warnings_ == []
    env = {"AWS_CONFIG_FILE": "/nonexistent", "BATCH_IDLE_DURATION": "3s", "FEATURE_GATES": "NodeRepair=true"}
    settings, sources = resolve(env, {"BATCH_MAX_DURATION": "15s"}, legacy)
    logs.configure("info")
    log_sources(logging.getLogger("karpy"), settings, sources)
    said = {e["setting"]: (e["message"], e.get("value"), e["ConfigMap"]["name"]) for e in _lines(capsys)}
    assert said == {
        "CLUSTER_NAME": ("using setting from ConfigMap", "legacy", "karpenter-global-settings"),
        "BATCH_IDLE_DURATION": ("using setting from env over ConfigMap", "3s", "karpenter-global-settings"),
        "BATCH_MAX_DURATION": ("using setting from flag over ConfigMap", "15s", "karpenter-global-settings"),
        "FEATURE_GATES": ("using setting from env over ConfigMap", said["FEATURE_GATES"][1],
                          "karpenter-global-settings"),
    }
