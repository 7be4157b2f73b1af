"""Session fixtures for the real servers the integration tests use: LocalStack and a Kubernetes control plane.

Each server starts once, only when a test asks for it, on free ports, and is stopped by process group at the end of
the session. KARPY_LOCALSTACK_ENDPOINT / KARPY_KUBECONFIG reuse servers that are already running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.parse
import uuid
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


def _localstack_health(session: Any) -> None:
    """What the tests rely on LocalStack for, checked once per region before the first test uses it (a server that
    answers but does not do these fails here, with what is missing, not later inside some test): EC2 serves AWS's
    instance-type data and three zones, an SQS message round-trips, an EventBridge rule delivers to SQS, IAM and SSM
    store what they are given. Everything it makes is deleted."""
    ec2, sqs, events, iam, ssm = (session.client(s) for s in ("ec2", "sqs", "events", "iam", "ssm"))
    names = {t["InstanceType"] for page in ec2.get_paginator("describe_instance_types").paginate()
             for t in page["InstanceTypes"]}
    assert len(names) > 500 and {"m5.large", "c7g.xlarge", "p4d.24xlarge"} <= names, "LocalStack EC2 instance types"
    assert len(ec2.describe_availability_zones()["AvailabilityZones"]) >= 3, "LocalStack EC2 zones"
    name = f"health-{uuid.uuid4().hex[:8]}"
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    try:
        sqs.send_message(QueueUrl=url, MessageBody="hello")
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2).get("Messages", [])
        assert [m["Body"] for m in got] == ["hello"], "LocalStack SQS round trip"
        sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name=name, EventPattern=json.dumps({"source": ["karpy.health"]}))
        try:
            events.put_targets(Rule=name, Targets=[{"Id": "queue", "Arn": arn}])
            events.put_events(Entries=[{"Source": "karpy.health", "DetailType": "Health",
                                        "Detail": json.dumps({"n": 1})}])
            deadline, body = time.monotonic() + 15, None
            while body is None and time.monotonic() < deadline:
                msgs = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages", [])
                body = json.loads(msgs[0]["Body"]) if msgs else None
            assert body is not None and body["source"] == "karpy.health" and body["detail"] == {"n": 1}, \
                "LocalStack EventBridge rule delivering to SQS"
        finally:
            events.remove_targets(Rule=name, Ids=["queue"])
            events.delete_rule(Name=name)
    finally:
        sqs.delete_queue(QueueUrl=url)
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                                                     "Action": "sts:AssumeRole"}]}
    created = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]
    try:
        assert iam.get_role(RoleName=name)["Role"]["Arn"] == created["Arn"], "LocalStack IAM"
    finally:
        iam.delete_role(RoleName=name)
    param = f"/karpy/health/{name}"
    ssm.put_parameter(Name=param, Value="ami-0123456789abcdef0", Type="String")
    try:
        assert ssm.get_parameter(Name=param)["Parameter"]["Value"] == "ami-0123456789abcdef0", "LocalStack SSM"
    finally:
        ssm.delete_parameter(Name=param)


@pytest.fixture(scope="session")
def aws_client(localstack_session: Callable[[str], Any]) -> Callable[..., Any]:
    """A factory of boto3 clients bound to LocalStack, from pytest-localstack: aws_client("ec2"),
    aws_client("sqs", region="eu-west-1"), aws_client("ec2", config=Config(...))."""

    sessions: dict[str, Any] = {}

    def make(service: str, region: str = "us-east-1", **kwargs: Any) -> Any:
        if region not in sessions:
            # the credentials the controller processes of the e2e tests use: one LocalStack account for both
            session = localstack_session(region).boto3.session(aws_access_key_id="test",
                                                               aws_secret_access_key="test")
            _localstack_health(session)
            sessions[region] = session
        return sessions[region].client(service, **kwargs)

    return make


@pytest.fixture
def cleanup() -> Iterator[Callable[..., None]]:
    """`cleanup(fn, *args)` registers an undo step right after a test creates something on a server; the steps run
    in reverse at teardown whatever the test did, each on its own (one that fails, say a 404 for what the test
    already deleted, does not skip the rest), so a failed test leaves nothing behind for the next one."""
    steps: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def add(fn: Callable[..., Any], *args: Any) -> None:
        steps.append((fn, args))

    yield add
    for fn, args in reversed(steps):
        with contextlib.suppress(Exception):
            fn(*args)


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
    deadline = time.monotonic() + 180  # generous: the machine is shared
    while True:
        try:
            core.read_namespace("default")
            # the controller-manager's service-account controller creates the default ServiceAccount
            core.read_namespaced_service_account("default", "default")
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    _kube_health(api)
    return api


def _kube_health(api: Any) -> None:
    """The control plane's other parts work, checked once before the first test (a half-started control plane fails
    here, naming what is missing): the controller-manager makes a Deployment's pod through its ReplicaSet and the
    scheduler marks it Unschedulable (nothing is bound: no Node is added, so tests that count nodes are undisturbed).
    The namespace is deleted afterwards."""
    from kubernetes import client

    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    ns = f"health-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    try:
        apps.create_namespaced_deployment(ns, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "health"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "health"}},
                     "template": {"metadata": {"labels": {"app": "health"}}, "spec": {"containers": [
                         {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "640"}}}]}}}})
        deadline, why = time.monotonic() + 180, "no pod made by the controller-manager"
        while time.monotonic() < deadline:
            pods = core.list_namespaced_pod(ns, label_selector="app=health").items
            if pods:
                why = "the scheduler did not mark the pod Unschedulable"
                owner = (pods[0].metadata.owner_references or [None])[0]
                conds = {c.type: c for c in pods[0].status.conditions or []}
                cond = conds.get("PodScheduled")
                if owner is not None and owner.kind == "ReplicaSet" and cond is not None \
                        and cond.status == "False" and cond.reason == "Unschedulable":
                    return
            time.sleep(0.3)
        raise AssertionError(f"control plane health check: {why}")
    finally:
        core.delete_namespace(ns)


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
