"""Settings of `karpy controller`: Karpenter's env names and defaults, flag > env > legacy ConfigMap > default, one-line
errors naming the setting, feature gates, Go durations, the legacy ConfigMaps' keys and their malformed values, and
`karpy controller --check-config` as a process."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.settings import (
    FEATURE_GATE_DEFAULTS,
    SPECS,
    LegacyConfig,
    SettingsError,
    describe,
    format_duration,
    parse_duration,
    parse_feature_gates,
    parse_legacy_configmaps,
    read_legacy_configmaps,
    resolve,
    unsupported_feature_gates,
)

ROOT = Path(__file__).resolve().parents[2]
KARPY = Path(sys.executable).with_name("karpy")  # the console script installed beside the interpreter running tests
BASE = {"CLUSTER_NAME": "demo", "AWS_CONFIG_FILE": "/nonexistent/aws-config"}


def _resolve(env: dict[str, str] | None = None, flags: dict[str, str | None] | None = None,
             legacy: LegacyConfig | None = None):
    return resolve({**BASE, **(env or {})}, flags or {}, legacy)


# ------------------------------------------------------------------------------------------------------- defaults
def test_every_default():
    s, sources = _resolve()
    assert s.cluster_name == "demo" and sources["CLUSTER_NAME"] == "env"
    expected = {
        "cluster_endpoint": "", "cluster_ca_bundle": "", "interruption_queue": "", "batch_idle_duration": 1.0,
        "batch_max_duration": 10.0, "log_level": "info", "log_encoding": "json", "log_output_paths": ("stdout",),
        "log_error_output_paths": ("stderr",), "metrics_port": 8080, "health_probe_port": 8081,
        "disable_leader_election": False, "leader_election_name": "karpenter-leader-election",
        "leader_election_namespace": "kube-system", "system_namespace": "kube-system",
        "feature_gates": {"NodeRepair": False, "ReservedCapacity": True, "SpotToSpotConsolidation": False,
                          "NodeOverlay": False, "StaticCapacity": False, "CapacityBuffer": False,
                          "RebalanceRecommendationDrift": False, "ManyToManyConsolidation": False},
        "preference_policy": "Respect", "min_values_policy": "Strict", "vm_memory_overhead_percent": 0.075,
        "reserved_enis": 0, "isolated_vpc": False, "kube_client_qps": 200, "kube_client_burst": 300,
        "aws_region": "", "aws_endpoint_url": None, "kubeconfig": None, "cloud_provider": "aws"}
    for attr, value in expected.items():
        assert getattr(s, attr) == value, attr
    assert s.health_port == 8081
    assert {k for k, v in sources.items() if v != "default"} == {"CLUSTER_NAME"}
    assert list(sources) == [spec.name for spec in SPECS]


def test_env_names_map_to_snake_case_attributes():
    env = {"CLUSTER_ENDPOINT": "https://abc.gr7.us-west-2.eks.amazonaws.com", "INTERRUPTION_QUEUE": "q",
           "BATCH_IDLE_DURATION": "500ms", "BATCH_MAX_DURATION": "1m30s", "LOG_LEVEL": "DEBUG", "METRICS_PORT": "9000",
           "HEALTH_PROBE_PORT": "9001", "DISABLE_LEADER_ELECTION": "true", "LEADER_ELECTION_NAME": "lease-a",
           "LEADER_ELECTION_NAMESPACE": "le", "SYSTEM_NAMESPACE": "karpenter", "PREFERENCE_POLICY": "Ignore",
           "MIN_VALUES_POLICY": "BestEffort", "VM_MEMORY_OVERHEAD_PERCENT": "0.1", "RESERVED_ENIS": "2",
           "ISOLATED_VPC": "1", "KUBE_CLIENT_QPS": "50", "KUBE_CLIENT_BURST": "60", "AWS_REGION": "eu-west-1",
           "AWS_ENDPOINT_URL": "http://127.0.0.1:4566", "KUBECONFIG": "/tmp/kc", "CLOUD_PROVIDER": "fake"}
    s, sources = _resolve(env)
    assert (s.cluster_endpoint, s.interruption_queue, s.batch_idle_duration, s.batch_max_duration) == (
        "https://abc.gr7.us-west-2.eks.amazonaws.com", "q", 0.5, 90.0)
    assert (s.log_level, s.metrics_port, s.health_probe_port, s.disable_leader_election) == ("debug", 9000, 9001, True)
    assert (s.leader_election_name, s.leader_election_namespace, s.system_namespace) == ("lease-a", "le", "karpenter")
    assert (s.preference_policy, s.min_values_policy, s.vm_memory_overhead_percent, s.reserved_enis) == (
        "Ignore", "BestEffort", 0.1, 2)
    assert (s.isolated_vpc, s.kube_client_qps, s.kube_client_burst) == (True, 50, 60)
    assert (s.aws_region, s.aws_endpoint_url, s.kubeconfig, s.cloud_provider) == (
        "eu-west-1", "http://127.0.0.1:4566", "/tmp/kc", "fake")
    assert all(sources[name] == "env" for name in env)


def test_leader_election_namespace_follows_system_namespace():
    s, sources = _resolve({"SYSTEM_NAMESPACE": "karpenter"})
    assert s.leader_election_namespace == "karpenter" and sources["LEADER_ELECTION_NAMESPACE"] == "default"


def test_region_from_aws_default_region_then_the_config_file(tmp_path):
    s, sources = _resolve({"AWS_DEFAULT_REGION": "ap-south-1"})
    assert s.aws_region == "ap-south-1" and sources["AWS_REGION"] == "env"
    s, _ = _resolve({"AWS_DEFAULT_REGION": "ap-south-1", "AWS_REGION": "us-west-2"})
    assert s.aws_region == "us-west-2"
    cfg = tmp_path / "config"
    cfg.write_text("[default]\nregion = eu-central-1\n[profile other]\nregion = sa-east-1\n")
    s, sources = _resolve({"AWS_CONFIG_FILE": str(cfg)})
    assert s.aws_region == "eu-central-1" and sources["AWS_REGION"] == "aws config file"
    s, _ = _resolve({"AWS_CONFIG_FILE": str(cfg), "AWS_PROFILE": "other"})
    assert s.aws_region == "sa-east-1"


def test_empty_values_count_as_unset():
    s, sources = _resolve({"BATCH_IDLE_DURATION": "", "INTERRUPTION_QUEUE": "  "}, {"METRICS_PORT": ""})
    assert (s.batch_idle_duration, s.interruption_queue, s.metrics_port) == (1.0, "", 8080)
    assert sources["BATCH_IDLE_DURATION"] == sources["METRICS_PORT"] == "default"


# ----------------------------------------------------------------------------------------------------- precedence
def test_precedence_flag_over_env_over_configmap_over_default():
    legacy, warnings = parse_legacy_configmaps("kube-system", {"batchIdleDuration": "4s", "batchMaxDuration": "20s",
                                                               "aws.reservedENIs": "3"}, None)
    assert warnings == []
    env = {"BATCH_IDLE_DURATION": "3s", "BATCH_MAX_DURATION": "15s"}
    s, sources = _resolve(env, {"BATCH_IDLE_DURATION": "2s"}, legacy)
    assert (s.batch_idle_duration, sources["BATCH_IDLE_DURATION"]) == (2.0, "flag")
    assert (s.batch_max_duration, sources["BATCH_MAX_DURATION"]) == (15.0, "env")
    assert (s.reserved_enis, sources["RESERVED_ENIS"]) == (3, "configmap karpenter-global-settings")
    assert (s.kube_client_qps, sources["KUBE_CLIENT_QPS"]) == (200, "default")


def test_cluster_name_from_the_configmap_when_env_has_none():
    legacy, _ = parse_legacy_configmaps("kube-system", {"aws.clusterName": "legacy"}, None)
    s, sources = resolve({"AWS_CONFIG_FILE": "/nonexistent"}, {}, legacy)
    assert s.cluster_name == "legacy" and sources["CLUSTER_NAME"] == "configmap karpenter-global-settings"


def test_missing_cluster_name_is_one_line_naming_it():
    with pytest.raises(SettingsError) as e:
        resolve({"AWS_CONFIG_FILE": "/nonexistent"}, {}, None)
    text = str(e.value)
    assert "CLUSTER_NAME" in text and "\n" not in text and e.value.name == "CLUSTER_NAME"


# ----------------------------------------------------------------------------------------------------- bad values
@pytest.mark.parametrize(("name", "value"), [
    ("CLUSTER_ENDPOINT", "not a url"),
    ("CLUSTER_CA_BUNDLE", "###"),
    ("BATCH_IDLE_DURATION", "soon"),
    ("BATCH_IDLE_DURATION", "-1s"),
    ("BATCH_MAX_DURATION", "10"),
    ("LOG_LEVEL", "verbose"),
    ("LOG_ENCODING", "xml"),
    ("METRICS_PORT", "70000"),
    ("METRICS_PORT", "http"),
    ("HEALTH_PROBE_PORT", "-1"),
    ("DISABLE_LEADER_ELECTION", "yes please"),
    ("LEADER_ELECTION_NAME", "Not_A_Name"),
    ("LEADER_ELECTION_NAMESPACE", "UPPER"),
    ("SYSTEM_NAMESPACE", "a" * 64),
    ("FEATURE_GATES", "NodeRepair"),
    ("FEATURE_GATES", "NodeRepair=maybe"),
    ("FEATURE_GATES", "Bogus=true"),
    ("PREFERENCE_POLICY", "respect"),
    ("MIN_VALUES_POLICY", "Lenient"),
    ("VM_MEMORY_OVERHEAD_PERCENT", "7.5"),
    ("VM_MEMORY_OVERHEAD_PERCENT", "lots"),
    ("VM_MEMORY_OVERHEAD_PERCENT", "nan"),
    ("RESERVED_ENIS", "-2"),
    ("RESERVED_ENIS", "1.5"),
    ("ISOLATED_VPC", "maybe"),
    ("KUBE_CLIENT_QPS", "0"),
    ("KUBE_CLIENT_BURST", "many"),
    ("CLOUD_PROVIDER", "gcp"),
])
def test_each_bad_value_is_one_line_naming_the_setting_and_value(name, value):
    for env, flags, source in (({name: value}, {}, "env"), ({}, {name: value}, "flag")):
        with pytest.raises(SettingsError) as e:
            _resolve(env, flags)
        text = str(e.value)
        assert "\n" not in text and name in text and source in text, text
        assert value[:20] in text
        assert e.value.name == name


def test_a_long_bad_value_is_truncated_to_60_characters():
    with pytest.raises(SettingsError) as e:
        _resolve({"BATCH_IDLE_DURATION": "x" * 500 + "\nnext line"})
    text = str(e.value)
    quoted = text.split('"')[1]
    assert len(quoted) == 60 and quoted.endswith("...") and "\n" not in text


# -------------------------------------------------------------------------------------------------- feature gates
def test_feature_gates_parse_merge_and_name_unknown_gates():
    assert parse_feature_gates("NodeRepair=true, SpotToSpotConsolidation=false") == {
        "NodeRepair": True, "SpotToSpotConsolidation": False}
    s, sources = _resolve({"FEATURE_GATES": "NodeRepair=true,ReservedCapacity=false"})
    assert s.feature_gates == {**FEATURE_GATE_DEFAULTS, "NodeRepair": True, "ReservedCapacity": False}
    assert s.feature_gate("NodeRepair") and sources["FEATURE_GATES"] == "env"
    with pytest.raises(ValueError, match="unknown feature gate Bogus"):
        parse_feature_gates("NodeRepair=true,Bogus=true")
    with pytest.raises(ValueError, match="Drift is always on"):
        parse_feature_gates("Drift=true")
    with pytest.raises(SettingsError, match=r"FEATURE_GATES.*unknown feature gate Foo"):
        _resolve({}, {"FEATURE_GATES": "Foo=false"})


def test_feature_gates_merge_configmap_env_and_flag_gate_by_gate():
    legacy, warnings = parse_legacy_configmaps("kube-system", {"featureGates.spotToSpotConsolidation": "true",
                                                               "featureGates.nodeRepair": "true"}, None)
    assert warnings == [] and legacy.feature_gates == {"SpotToSpotConsolidation": True, "NodeRepair": True}
    s, sources = _resolve({}, {}, legacy)
    assert s.feature_gates["SpotToSpotConsolidation"]
    assert sources["FEATURE_GATES"] == "configmap karpenter-global-settings"
    s, sources = _resolve({"FEATURE_GATES": "NodeRepair=false"}, {"FEATURE_GATES": "NodeOverlay=true"}, legacy)
    assert s.feature_gates == {**FEATURE_GATE_DEFAULTS, "SpotToSpotConsolidation": True, "NodeRepair": False,
                               "NodeOverlay": True}
    assert sources["FEATURE_GATES"] == "flag"


def test_drift_gate_in_the_configmap_is_a_warning_that_drift_is_always_on():
    legacy, warnings = parse_legacy_configmaps("kube-system", {"featureGates.driftEnabled": "true",
                                                               "featureGates.someFutureGate": "true"}, None)
    assert legacy.feature_gates == {}
    assert len(warnings) == 2
    drift = next(w for w in warnings if "driftEnabled" in w)
    assert "Drift is always on" in drift and "karpenter-global-settings" in drift
    assert any("SomeFutureGate" in w for w in warnings)


# -------------------------------------------------------------------------------------------------- Go durations
@pytest.mark.parametrize(("text", "seconds", "shown"), [
    ("1s", 1.0, "1s"), ("500ms", 0.5, "500ms"), ("1m30s", 90.0, "1m30s"), ("1.5s", 1.5, "1.5s"),
    ("1h", 3600.0, "1h0m0s"), ("2h45m", 9900.0, "2h45m0s"), ("0", 0.0, "0s"), ("300us", 0.0003, "300µs"),
    ("300µs", 0.0003, "300µs"), ("10ns", 1e-8, "10ns"), ("1.5ms", 0.0015, "1.5ms"), (".5s", 0.5, "500ms"),
    ("1m0.5s", 60.5, "1m0.5s"), ("-2s", -2.0, "-2s"),
])
def test_go_durations(text, seconds, shown):
    assert parse_duration(text) == pytest.approx(seconds)
    assert format_duration(parse_duration(text)) == shown


@pytest.mark.parametrize("text", ["", "1", "10", "s", "1x", "1 s", "1s2", "one second", "1.2.3s"])
def test_bad_go_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


# ---------------------------------------------------------------------------------------------- legacy ConfigMaps
def test_global_settings_keys():
    legacy, warnings = parse_legacy_configmaps("karpenter", {
        "aws.clusterName": "old", "aws.clusterEndpoint": "https://old.example.com", "aws.interruptionQueueName": "q",
        "aws.isolatedVPC": "true", "aws.vmMemoryOverheadPercent": "0.1", "aws.reservedENIs": "1",
        "batchIdleDuration": "2s", "batchMaxDuration": "20s"}, None)
    assert warnings == []
    s, sources = resolve({"AWS_CONFIG_FILE": "/nonexistent"}, {}, legacy)
    assert (s.cluster_name, s.cluster_endpoint, s.interruption_queue, s.isolated_vpc) == (
        "old", "https://old.example.com", "q", True)
    assert (s.vm_memory_overhead_percent, s.reserved_enis, s.batch_idle_duration, s.batch_max_duration) == (
        0.1, 1, 2.0, 20.0)
    assert {sources[n] for n in ("CLUSTER_NAME", "CLUSTER_ENDPOINT", "INTERRUPTION_QUEUE", "ISOLATED_VPC",
                                 "VM_MEMORY_OVERHEAD_PERCENT", "RESERVED_ENIS", "BATCH_IDLE_DURATION",
                                 "BATCH_MAX_DURATION")} == {"configmap karpenter-global-settings"}


def test_malformed_global_settings_values_are_warnings_and_defaults_stay():
    legacy, warnings = parse_legacy_configmaps("kube-system", {
        "aws.vmMemoryOverheadPercent": "seven", "batchIdleDuration": "soon", "aws.reservedENIs": "-1",
        "aws.defaultInstanceProfile": "old-profile", "somethingElse": "x"}, None)
    assert legacy.values == {}
    assert len(warnings) == 5 and all("\n" not in w for w in warnings)
    for key in ("aws.vmMemoryOverheadPercent", "batchIdleDuration", "aws.reservedENIs", "aws.defaultInstanceProfile",
                "somethingElse"):
        line = next(w for w in warnings if f"key {key}" in w)
        assert "ConfigMap kube-system/karpenter-global-settings" in line
    s, sources = _resolve({}, {}, legacy)
    assert (s.vm_memory_overhead_percent, s.batch_idle_duration, s.reserved_enis) == (0.075, 1.0, 0)
    assert sources["VM_MEMORY_OVERHEAD_PERCENT"] == "default"


def test_zap_logger_config_with_a_comment_is_one_warning_and_defaults_stay():
    zap = '{\n  "level": "debug", // people write comments here\n  "encoding": "console"\n}'
    legacy, warnings = parse_legacy_configmaps("kube-system", None, {"zap-logger-config": zap})
    assert len(warnings) == 1
    assert "ConfigMap kube-system/config-logging" in warnings[0] and "zap-logger-config" in warnings[0]
    assert "line 2" in warnings[0] and "\n" not in warnings[0]
    s, sources = _resolve({}, {}, legacy)
    assert (s.log_level, s.log_encoding) == ("info", "json")
    assert sources["LOG_LEVEL"] == sources["LOG_ENCODING"] == "default"


def test_config_logging_level_encoding_paths_and_loglevel_controller():
    zap = ('{"level": "error", "encoding": "console", "outputPaths": ["stdout", "/tmp/k.log"], '
           '"errorOutputPaths": ["stderr"], "encoderConfig": {"timeKey": "ts"}}')
    legacy, warnings = parse_legacy_configmaps("kube-system", None, {"zap-logger-config": zap})
    assert warnings == []
    s, sources = _resolve({}, {}, legacy)
    assert (s.log_level, s.log_encoding, s.log_output_paths) == ("error", "console", ("stdout", "/tmp/k.log"))
    assert sources["LOG_LEVEL"] == sources["LOG_OUTPUT_PATHS"] == "configmap config-logging"
    legacy, _ = parse_legacy_configmaps("kube-system", None, {"zap-logger-config": zap, "loglevel.controller": "debug"})
    assert _resolve({}, {}, legacy)[0].log_level == "debug"
    s, sources = _resolve({"LOG_LEVEL": "info"}, {}, legacy)  # env wins
    assert s.log_level == "info" and sources["LOG_LEVEL"] == "env"


def test_malformed_zap_fields_name_the_field():
    legacy, warnings = parse_legacy_configmaps("kube-system", None, {
        "zap-logger-config": '{"level": "loud", "outputPaths": "stdout"}', "loglevel.controller": "chatty"})
    assert len(warnings) == 3 and legacy.values == {}
    assert any("field level" in w and '"loud"' in w for w in warnings)
    assert any("field outputPaths" in w for w in warnings)
    assert any("key loglevel.controller" in w and '"chatty"' in w for w in warnings)
    legacy, warnings = parse_legacy_configmaps("kube-system", None, {"zap-logger-config": '["debug"]'})
    assert len(warnings) == 1 and "not valid JSON" in warnings[0]


# -------------------------------------------------------------------------------------------------------- describe
def test_describe_gives_name_value_source_lines():
    legacy, _ = parse_legacy_configmaps("kube-system", {"batchMaxDuration": "1m30s"}, None)
    s, sources = _resolve({"AWS_ENDPOINT_URL": "http://localhost:4566"}, {"DISABLE_LEADER_ELECTION": "true"}, legacy)
    lines = describe(s, sources)
    assert len(lines) == len(SPECS)
    assert "CLUSTER_NAME=demo (env)" in lines
    assert "BATCH_IDLE_DURATION=1s (default)" in lines
    assert "BATCH_MAX_DURATION=1m30s (configmap karpenter-global-settings)" in lines
    assert "DISABLE_LEADER_ELECTION=true (flag)" in lines
    assert "VM_MEMORY_OVERHEAD_PERCENT=0.075 (default)" in lines
    assert "AWS_ENDPOINT_URL=http://localhost:4566 (env)" in lines
    assert ("FEATURE_GATES=NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,"
            "StaticCapacity=false,CapacityBuffer=false,RebalanceRecommendationDrift=false,"
            "ManyToManyConsolidation=false (default)") in lines


# ------------------------------------------------------------------------------------------ reading from a cluster
def _unreachable_kubeconfig(tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\nclusters:\n- cluster: {server: 'https://127.0.0.1:1', "
                    "insecure-skip-tls-verify: true}\n  name: c\ncontexts:\n- context: {cluster: c, user: u}\n"
                    "  name: x\ncurrent-context: x\nusers:\n- name: u\n  user: {token: abc}\n")
    return str(path)


def test_no_reachable_cluster_is_none_and_one_warning(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    urllib3_level = logging.getLogger("urllib3").level
    legacy, warnings = read_legacy_configmaps("kube-system", _unreachable_kubeconfig(tmp_path), timeout=1.0)
    assert logging.getLogger("urllib3").level == urllib3_level  # quiet only while reading
    assert legacy is None and len(warnings) == 1
    assert "env" in warnings[0] and "127.0.0.1:1" in warnings[0] and "\n" not in warnings[0]
    legacy, warnings = read_legacy_configmaps("kube-system", str(tmp_path / "missing"), timeout=1.0)
    assert legacy is None and len(warnings) == 1 and "env" in warnings[0]


# -------------------------------------------------------------------------------- `karpy controller` as a process
def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CLUSTER_", "AWS_", "KARPY_", "KUBE", "BATCH_", "LOG_", "FEATURE_GATES"))}
    env.update(HOME=str(tmp_path), KUBECONFIG=_unreachable_kubeconfig(tmp_path))
    env.update(extra)
    return env


def _karpy(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KARPY), *args], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_check_config_prints_settings_and_one_warning_when_no_cluster(tmp_path):
    result = _karpy(["controller", "--check-config", "--batch-max-duration", "20s", "--isolated-vpc"],
                    _env(tmp_path, CLUSTER_NAME="demo", BATCH_IDLE_DURATION="2s", AWS_REGION="us-west-2",
                         AWS_ENDPOINT_URL="http://127.0.0.1:4566"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(SPECS)
    for expected in ("CLUSTER_NAME=demo (env)", "BATCH_IDLE_DURATION=2s (env)", "BATCH_MAX_DURATION=20s (flag)",
                     "ISOLATED_VPC=true (flag)", "METRICS_PORT=8080 (default)", "AWS_REGION=us-west-2 (env)",
                     "AWS_ENDPOINT_URL=http://127.0.0.1:4566 (env)"):
        assert expected in lines
    err = result.stderr.splitlines()
    assert len(err) == 1 and err[0].startswith("warning: ") and "env" in err[0], result.stderr


@pytest.mark.parametrize(("env", "args", "name"), [
    ({}, [], "CLUSTER_NAME"),
    ({"CLUSTER_NAME": "demo", "BATCH_IDLE_DURATION": "soon"}, [], "BATCH_IDLE_DURATION"),
    ({"CLUSTER_NAME": "demo"}, ["--metrics-port", "70000"], "METRICS_PORT"),
    ({"CLUSTER_NAME": "demo", "FEATURE_GATES": "Bogus=true"}, [], "FEATURE_GATES"),
])
def test_bad_settings_exit_2_with_one_line_and_no_traceback(tmp_path, env, args, name):
    for mode in (["--check-config"], []):
        result = _karpy(["controller", *mode, *args], _env(tmp_path, **env))
        assert result.returncode == 2, (mode, result.stdout, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and name in lines[0], result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""


def test_refresh_intervals_are_go_durations_of_at_least_a_minute() -> None:
    s, sources = _resolve({"AMI_REFRESH_INTERVAL": "5m", "SUBNET_REFRESH_INTERVAL": "90s"})
    assert (s.ami_refresh_interval, s.subnet_refresh_interval) == (300.0, 90.0)
    assert sources["AMI_REFRESH_INTERVAL"] == "env"
    assert _resolve()[0].ami_refresh_interval == 60.0
    with pytest.raises(SettingsError, match=r"AMI_REFRESH_INTERVAL.*at least 1m"):
        _resolve({"AMI_REFRESH_INTERVAL": "30s"})


@pytest.mark.parametrize("gate", ["NodeOverlay", "CapacityBuffer"])
def test_a_gate_karpy_does_not_implement_is_refused_at_start_in_one_line(tmp_path, gate):
    result = _karpy(["controller"], _env(tmp_path, CLUSTER_NAME="demo", FEATURE_GATES=f"{gate}=true"))
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and gate in lines[0] and "not supported" in lines[0], result.stderr
    # --check-config shows the setting and says the same as a warning
    result = _karpy(["controller", "--check-config"], _env(tmp_path, CLUSTER_NAME="demo",
                                                           FEATURE_GATES=f"{gate}=true"))
    assert result.returncode == 0 and any(gate in line and "not supported" in line
                                          for line in result.stderr.splitlines()), result.stderr
    # set false, or a gate karpy implements, starts as before (it gets past the settings to the runtime)
    assert unsupported_feature_gates({gate: False, "StaticCapacity": True, "ReservedCapacity": True,
                                      "NodeRepair": True}) == []


def test_run_mode_without_the_runtime_says_so_in_one_line(tmp_path):
    # controller.main made unimportable: the command must fail with one clear line and exit 1
    code = "import sys; sys.modules['controller.main'] = None; import cli; sys.argv[0] = 'karpy'; cli.main()"
    result = subprocess.run([sys.executable, "-c", code, "controller"], cwd=ROOT, capture_output=True, text=True,
                            env=_env(tmp_path, CLUSTER_NAME="demo"), timeout=60)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "controller.main" in lines[0] and "Traceback" not in result.stderr
    # the unreachable cluster's warning went to the JSON log (stdout), not stderr
    logged = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(e["level"], e["logger"]) for e in logged] == [("WARN", "controller")]
    assert "env" in logged[0]["message"]


def test_help_names_every_env_variable(tmp_path):
    result = _karpy(["controller", "--help"], _env(tmp_path))
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for spec in SPECS:
        assert f"Env: {spec.name}" in text, spec.name
        assert spec.option in text
