"""The legacy ConfigMaps in a real apiserver: `karpy controller --check-config` shows their values and where they came
from, env wins over them, a malformed zap-logger-config is one warning naming the ConfigMap and key, and the running
controller logs which settings came from a ConfigMap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from controller.settings import read_legacy_configmaps

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

ROOT = Path(__file__).resolve().parents[2]
KARPY = Path(sys.executable).with_name("karpy")  # the console script installed beside the interpreter running tests
NAMESPACE = "kube-system"
GLOBAL = {"aws.clusterName": "legacy-cluster", "aws.clusterEndpoint": "https://legacy.example.com",
          "aws.interruptionQueueName": "legacy-queue", "aws.isolatedVPC": "true",
          "aws.vmMemoryOverheadPercent": "0.1", "aws.reservedENIs": "1", "batchIdleDuration": "2s",
          "batchMaxDuration": "20s", "featureGates.spotToSpotConsolidation": "true"}
ZAP = json.dumps({"level": "debug", "development": False, "encoding": "console", "outputPaths": ["stdout"],
                  "errorOutputPaths": ["stderr"]})


def _put(core: Any, name: str, data: dict[str, str]) -> None:
    try:
        core.delete_namespaced_config_map(name, NAMESPACE)
    except client.ApiException as e:
        if e.status != 404:
            raise
    core.create_namespaced_config_map(NAMESPACE, {"metadata": {"name": name}, "data": data})


@pytest.fixture
def configmaps(kube_api: Any) -> Iterator[Any]:
    core = client.CoreV1Api(kube_api)
    _put(core, "karpenter-global-settings", GLOBAL)
    _put(core, "config-logging", {"zap-logger-config": ZAP, "loglevel.webhook": "error"})
    try:
        yield core
    finally:
        for name in ("karpenter-global-settings", "config-logging"):
            try:
                core.delete_namespaced_config_map(name, NAMESPACE)
            except client.ApiException as e:
                if e.status != 404:
                    raise


def _env(kubeconfig: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CLUSTER_", "AWS_", "KARPY_", "KUBE", "BATCH_", "LOG_", "FEATURE_GATES",
                                "INTERRUPTION_", "SYSTEM_NAMESPACE"))}
    env.update(HOME=str(tmp_path), KUBECONFIG=kubeconfig)
    env.update(extra)
    return env


def _check_config(env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    result = subprocess.run([str(KARPY), "controller", "--check-config"], env=env, capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return result, dict(line.split("=", 1) for line in result.stdout.splitlines())


def test_check_config_shows_the_configmaps_values_with_their_source(configmaps, kubeconfig, tmp_path):
    result, shown = _check_config(_env(kubeconfig, tmp_path))
    assert result.stderr == ""
    gs, cl = "(configmap karpenter-global-settings)", "(configmap config-logging)"
    assert shown["CLUSTER_NAME"] == f"legacy-cluster {gs}"
    assert shown["CLUSTER_ENDPOINT"] == f"https://legacy.example.com {gs}"
    assert shown["INTERRUPTION_QUEUE"] == f"legacy-queue {gs}"
    assert shown["ISOLATED_VPC"] == f"true {gs}"
    assert shown["VM_MEMORY_OVERHEAD_PERCENT"] == f"0.1 {gs}"
    assert shown["RESERVED_ENIS"] == f"1 {gs}"
    assert shown["BATCH_IDLE_DURATION"] == f"2s {gs}"
    assert shown["BATCH_MAX_DURATION"] == f"20s {gs}"
    assert shown["FEATURE_GATES"].startswith("NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=true,")
    assert shown["FEATURE_GATES"].endswith(gs)
    assert shown["LOG_LEVEL"] == f"debug {cl}" and shown["LOG_ENCODING"] == f"console {cl}"
    assert shown["METRICS_PORT"] == "8080 (default)"


def test_env_and_flags_win_over_the_configmaps(configmaps, kubeconfig, tmp_path):
    _, shown = _check_config(_env(kubeconfig, tmp_path, CLUSTER_NAME="from-env", BATCH_IDLE_DURATION="3s",
                                  LOG_LEVEL="error", FEATURE_GATES="SpotToSpotConsolidation=false"))
    assert shown["CLUSTER_NAME"] == "from-env (env)"
    assert shown["BATCH_IDLE_DURATION"] == "3s (env)"
    assert shown["LOG_LEVEL"] == "error (env)"
    assert "SpotToSpotConsolidation=false" in shown["FEATURE_GATES"] and shown["FEATURE_GATES"].endswith("(env)")
    assert shown["BATCH_MAX_DURATION"] == "20s (configmap karpenter-global-settings)"


def test_a_malformed_zap_logger_config_is_one_warning_and_defaults_stay(configmaps, kubeconfig, tmp_path):
    _put(configmaps, "config-logging", {"zap-logger-config": '{\n  "level": "debug", // people write comments\n'
                                                             '  "encoding": "console"\n}'})
    result, shown = _check_config(_env(kubeconfig, tmp_path))
    warnings = result.stderr.splitlines()
    assert len(warnings) == 1, result.stderr
    assert warnings[0].startswith("warning: ") and "config-logging" in warnings[0]
    assert "zap-logger-config" in warnings[0] and "Traceback" not in result.stderr
    assert shown["LOG_LEVEL"] == "info (default)" and shown["LOG_ENCODING"] == "json (default)"
    assert shown["CLUSTER_NAME"] == "legacy-cluster (configmap karpenter-global-settings)"


def test_read_legacy_configmaps_from_the_apiserver(configmaps, kubeconfig):
    legacy, warnings = read_legacy_configmaps(NAMESPACE, kubeconfig)
    assert legacy is not None and warnings == []
    assert legacy.present == ("karpenter-global-settings", "config-logging")
    assert legacy.values["CLUSTER_NAME"] == "legacy-cluster" and legacy.values["LOG_LEVEL"] == "debug"
    # a namespace without them: nothing to say
    legacy, warnings = read_legacy_configmaps("default", kubeconfig)
    assert legacy is not None and legacy.values == {} and legacy.present == () and warnings == []


def test_the_running_controller_logs_settings_taken_from_a_configmap(configmaps, kubeconfig, tmp_path):
    _put(configmaps, "config-logging", {"zap-logger-config": json.dumps({"level": "info", "encoding": "json"})})
    # controller.main made unimportable: the command resolves and logs, then stops with one line before running
    code = "import sys; sys.modules['controller.main'] = None; import cli; sys.argv[0] = 'karpy'; cli.main()"
    result = subprocess.run([sys.executable, "-c", code, "controller"], cwd=ROOT, capture_output=True, text=True,
                            env=_env(kubeconfig, tmp_path), timeout=60)
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1, result.stderr
    logged = [json.loads(line) for line in result.stdout.splitlines()]
    used = {e["setting"]: e for e in logged if e["message"] == "using setting from ConfigMap"}
    assert used["CLUSTER_NAME"]["value"] == "legacy-cluster"
    assert used["CLUSTER_NAME"]["ConfigMap"] == {"name": "karpenter-global-settings", "namespace": NAMESPACE}
    assert used["LOG_ENCODING"]["ConfigMap"]["name"] == "config-logging"
    assert {"BATCH_IDLE_DURATION", "INTERRUPTION_QUEUE", "FEATURE_GATES"} <= set(used)
    assert all(e["logger"] == "controller" and e["level"] == "INFO" for e in used.values())
