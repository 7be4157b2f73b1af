"""The controller as a process: watches that expire mid-run, two replicas handing over the Lease, the legacy
ConfigMaps, and bad settings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from tests.conftest import KUBE_BIN, ROOT, _stop
from tests.e2e.conftest import World, nodepool_name
from tests.e2e.harness import KubeletSim, wait_for
from tests.e2e.world import install_crds

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.localstack]


def _lease(world: World) -> Any:
    return client.CoordinationV1Api(world.api).read_namespaced_lease("karpenter-leader-election", "kube-system")


def test_two_replicas_hand_over_the_lease(world: World, kubelet, start_controller):
    a = start_controller("a.log")
    wait_for("a leads", lambda: "starting controllers" in a.messages(), timeout=60)
    b = start_controller("b.log")
    wait_for("b synced and ready", lambda: _ready(b), timeout=60)
    holder = _lease(world).spec.holder_identity
    assert holder and "starting controllers" not in b.messages(), "the follower must not act"
    started = time.monotonic()
    assert a.stop(timeout=30) == 0
    assert time.monotonic() - started < 30
    wait_for("b leads within 5 s of the release", lambda: "starting controllers" in b.messages(), timeout=8)
    assert _lease(world).spec.holder_identity not in ("", holder)
    pool = nodepool_name("handover")
    world.nodepool(pool)
    ns = world.namespace()
    world.deployment(ns, "after", 1, pool)
    wait_for("the new leader provisions", lambda: len(world.bound_pods(ns, "after")) == 1, timeout=120)


def _ready(proc: Any) -> bool:
    import urllib.request

    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{proc.env['HEALTH_PROBE_PORT']}/readyz",
                                      timeout=2).status == 200
    except OSError:
        return False


def _karpy(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("CLUSTER_", "INTERRUPTION_", "KARPY_"))}
    full.update(env)
    return subprocess.run([sys.executable, "-c", "import cli; cli.main()", *args], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=60)


def test_legacy_configmaps_are_read(world: World, kubelet, start_controller):
    core = world.core
    core.create_namespaced_config_map("kube-system", {"metadata": {"name": "karpenter-global-settings"}, "data": {
        "aws.clusterName": world.cluster, "aws.interruptionQueueName": world.queue_name,
        "batchIdleDuration": "2s"}})
    core.create_namespaced_config_map("kube-system", {"metadata": {"name": "config-logging"}, "data": {
        "zap-logger-config": '{"level": "debug", // people write comments here\n "encoding": "json"}'}})
    try:
        env = world.env()
        del env["CLUSTER_NAME"], env["INTERRUPTION_QUEUE"], env["BATCH_IDLE_DURATION"]
        checked = _karpy(["controller", "--check-config"], env)
        assert checked.returncode == 0, checked.stderr
        assert f"CLUSTER_NAME={world.cluster}" in checked.stdout
        line = next(x for x in checked.stdout.splitlines() if x.startswith("CLUSTER_NAME="))
        assert "karpenter-global-settings" in line
        assert "BATCH_IDLE_DURATION=2s" in checked.stdout
        assert "config-logging" in checked.stderr and "zap-logger-config" in checked.stderr
        # env wins over the ConfigMap
        env_wins = _karpy(["controller", "--check-config"], {**env, "BATCH_IDLE_DURATION": "3s"})
        assert "BATCH_IDLE_DURATION=3s" in env_wins.stdout
        proc = start_controller(unset=("CLUSTER_NAME", "INTERRUPTION_QUEUE", "BATCH_IDLE_DURATION"))
        wait_for("the ConfigMap's settings in use", lambda: any(
            "ConfigMap" in m for m in proc.messages()), timeout=60)
        pool = nodepool_name("legacy")
        world.nodepool(pool)
        ns = world.namespace()
        world.deployment(ns, "legacy", 1, pool)
        wait_for("provisioned with the ConfigMap's cluster name", lambda: len(world.bound_pods(ns, "legacy")) == 1,
                 timeout=120)
    finally:
        for name in ("karpenter-global-settings", "config-logging"):
            core.delete_namespaced_config_map(name, "kube-system")


@pytest.mark.parametrize(("env", "names"), [
    ({"CLUSTER_NAME": ""}, "CLUSTER_NAME"),
    ({"BATCH_IDLE_DURATION": "soon"}, "BATCH_IDLE_DURATION"),
    ({"METRICS_PORT": "70000"}, "METRICS_PORT"),
])
def test_bad_settings_exit_2_with_one_line(world: World, env: dict[str, str], names: str):
    full = world.env(**env)
    if not full.get("CLUSTER_NAME"):
        full.pop("CLUSTER_NAME")
    for args in (["controller"], ["controller", "--check-config"]):
        result = _karpy(args, full)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        lines = [x for x in result.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and names in lines[0], result.stderr
        assert "Traceback" not in result.stderr


@pytest.fixture
def private_kube(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A control plane of this test's own, whose apiserver the test may restart."""
    run = tmp_path / "kube"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "start-kube-control-plane.sh"), str(run), str(KUBE_BIN)],
                          capture_output=True, text=True)
    pids = [int(p) for p in (run / "pids").read_text().split()] if (run / "pids").exists() else []
    assert proc.returncode == 0, proc.stderr
    try:
        yield {"run": run, "pids": pids, "kubeconfig": str(run / "kubeconfig")}
    finally:
        _stop(pids)


def _restart_apiserver(kube: dict[str, Any]) -> None:
    """Kill kube-apiserver and start it again with the same command line: every watch drops, and one resumed from an
    old resourceVersion is answered 410 Gone, since the new apiserver's watch cache starts at the current revision."""
    pid = kube["pids"][1]
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    os.killpg(pid, signal.SIGKILL)
    time.sleep(1)
    log = open(kube["run"] / "apiserver-2.log", "wb")  # noqa: SIM115 - lives as long as the process
    new = subprocess.Popen([c.decode() for c in cmdline], stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True)
    kube["pids"][1] = new.pid


def test_watches_expire_mid_run(world: World, private_kube: dict[str, Any], start_controller):
    api = config.new_client_from_config(config_file=private_kube["kubeconfig"])
    core = client.CoreV1Api(api)
    wait_for("private apiserver", lambda: _sa_ready(core), timeout=60)
    install_crds(api)
    nodeclass = world.custom.get_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", world.nodeclass)
    custom = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", {
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": world.nodeclass},
        "spec": nodeclass["spec"]})
    private = World(**{**world.__dict__, "api": api, "kubeconfig": private_kube["kubeconfig"]})
    sim = KubeletSim(api).start()
    try:
        proc = start_controller(KUBECONFIG=private_kube["kubeconfig"], DISABLE_LEADER_ELECTION="true")
        pool = nodepool_name("gone")
        private.nodepool(pool)
        private.deployment("default", "before", 1, pool)
        wait_for("pod bound", lambda: len(private.bound_pods("default", "before")) == 1, timeout=120)
        _restart_apiserver(private_kube)
        wait_for("apiserver back", lambda: _sa_ready(core), timeout=60)
        private.deployment("default", "after", 2, pool)
        wait_for("pods bound after the watches expired", lambda: len(private.bound_pods("default", "after")) == 2,
                 timeout=150)
        assert proc.running
    finally:
        sim.stop()


def _sa_ready(core: Any) -> bool:
    try:
        core.read_namespaced_service_account("default", "default")
        return True
    except Exception:
        return False
