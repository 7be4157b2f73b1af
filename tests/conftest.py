"""Session fixtures for the real servers the integration tests use: LocalStack and a Kubernetes control plane.

Each server starts once, only when a test asks for it, on free ports, and is stopped by process group at the end of
the session. KARPY_LOCALSTACK_ENDPOINT / KARPY_KUBECONFIG reuse servers that are already running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("KARPY_CACHE", Path.home() / ".cache" / "karpy"))
KUBE_BIN = Path(os.environ.get("KARPY_KUBE_BIN", Path.home() / ".cache" / "kube-control-plane" / "bin"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(pids: list[int]) -> None:
    for pid in reversed(pids):
        try:
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            continue
    deadline = time.monotonic() + 10
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@pytest.fixture(scope="session")
def localstack_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A LocalStack endpoint URL, started for this session unless KARPY_LOCALSTACK_ENDPOINT names a running one."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    given = os.environ.get("KARPY_LOCALSTACK_ENDPOINT")
    if given:
        yield given.rstrip("/")
        return
    venv = CACHE / "localstack-venv"
    if not (venv / "bin" / "python").exists():
        pytest.fail(f"LocalStack is not installed in {venv}: run scripts/test.sh (or scripts/install-localstack.sh)")
    run = tmp_path_factory.mktemp("localstack")
    port = _free_port()
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "start-localstack.sh"), str(run), str(port), str(venv)],
                          capture_output=True, text=True)
    pid_file = run / "pid"
    pids = [int(pid_file.read_text())] if pid_file.exists() else []
    if proc.returncode != 0:
        _stop(pids)
        pytest.fail(f"LocalStack did not start:\n{proc.stderr}\n{_tail(run / 'localstack.log')}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(pids)


# the AWS services the tests ask LocalStack for; pytest-localstack checks each answers before the first test
LOCALSTACK_SERVICES = ("ec2", "events", "iam", "sqs", "ssm", "sts")


@pytest.fixture(scope="session")
def localstack_session(localstack_endpoint: str) -> Callable[[str], Any]:
    """pytest-localstack's RunningSession, per region, attached to this session's LocalStack (no Docker: the server
    is the one localstack_endpoint started): it waits until every service in LOCALSTACK_SERVICES answers and hands
    out boto3 clients and sessions bound to it (`.boto3.client("ec2")`, `.boto3.session()`)."""
    from pytest_localstack.session import RunningSession

    url = urllib.parse.urlsplit(localstack_endpoint)
    sessions: dict[str, Any] = {}

    def for_region(region: str = "us-east-1") -> Any:
        if region not in sessions:
            session = RunningSession(url.hostname or "127.0.0.1", region_name=region, use_ssl=url.scheme == "https",
                                     services={name: url.port for name in LOCALSTACK_SERVICES})
            session.start(timeout=120)
            sessions[region] = session
        return sessions[region]

    return for_region


@pytest.fixture(scope="session")
def aws_client(localstack_session: Callable[[str], Any]) -> Callable[..., Any]:
    """A factory of boto3 clients bound to LocalStack, from pytest-localstack: aws_client("ec2"),
    aws_client("sqs", region="eu-west-1"), aws_client("ec2", config=Config(...))."""

    sessions: dict[str, Any] = {}

    def make(service: str, region: str = "us-east-1", **kwargs: Any) -> Any:
        if region not in sessions:
            # the credentials the controller processes of the e2e tests use: one LocalStack account for both
            sessions[region] = localstack_session(region).boto3.session(aws_access_key_id="test",
                                                                       aws_secret_access_key="test")
        return sessions[region].client(service, **kwargs)

    return make


@pytest.fixture(scope="session")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A kubeconfig for a real control plane, started for this session unless KARPY_KUBECONFIG names one."""
    given = os.environ.get("KARPY_KUBECONFIG")
    if given:
        yield given
        return
    if not (KUBE_BIN / "kube-apiserver").exists():
        pytest.fail(f"the control plane is not built in {KUBE_BIN}: run scripts/test.sh "
                    "(or scripts/build-kube-control-plane.sh)")
    run = tmp_path_factory.mktemp("kube")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "start-kube-control-plane.sh"), str(run), str(KUBE_BIN)],
                          capture_output=True, text=True)
    pids_file = run / "pids"
    pids = [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []
    if proc.returncode != 0:
        _stop(pids)
        pytest.fail(f"the control plane did not start:\n{proc.stderr}\n{_tail(run / 'apiserver.log')}")
    try:
        yield str(run / "kubeconfig")
    finally:
        _stop(pids)


@pytest.fixture(scope="session")
def kube_api(kubeconfig: str) -> Any:
    """An ApiClient for the control plane, once the default namespace and the controller-manager are working."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=kubeconfig)
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + 60
    while True:
        try:
            core.read_namespace("default")
            # the controller-manager's service-account controller creates the default ServiceAccount
            core.read_namespaced_service_account("default", "default")
            return api
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="session")
def crds(kube_api: Any) -> None:
    """karpy's CRDs installed (or brought up to date) and established."""
    from tests.kubetest import install_crds

    install_crds(kube_api)


@pytest.fixture(scope="module")
def kube(kubeconfig: str, crds: None) -> Iterator[tuple[Any, Any, Any]]:
    """A KubeClient, a started and synced Cluster and a Recorder against the control plane, for one test module."""
    import threading

    from controller.kube.client import KubeClient
    from controller.kube.events import Recorder
    from controller.state.cluster import Cluster

    kc = KubeClient.from_environment(kubeconfig)
    cluster = Cluster(kc)
    recorder = Recorder(kc)
    stop = threading.Event()
    cluster.start(stop)
    recorder.start(stop)
    assert cluster.wait_synced(stop, timeout=60)
    try:
        yield kc, cluster, recorder
    finally:
        stop.set()
