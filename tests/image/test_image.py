"""The controller image as it ships: built by scripts/build-image.sh, run with `buildah run` as the Deployment runs it
(uid 65532, its entrypoint, a read-only root with a writable /tmp), its settings checked, and the controller inside it
scaling a Deployment up against the test control plane and LocalStack."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from stacks.environments import EnvironmentConfig
from stacks.render import karpy_version
from tests.e2e.conftest import World, nodepool_name
from tests.e2e.harness import wait_for
from tests.image.conftest import ROOT, BuiltImage
from tests.image.container import Container, buildah, contained, process_stderr

pytestmark = [pytest.mark.image, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]

ENTRYPOINT = ["/opt/karpy/venv/bin/karpy", "controller"]
SETTING_LINE = re.compile(r"^[A-Z][A-Z0-9_]*=.* \([a-z][^)]*\)$")


def test_image_is_what_the_stacks_deploy(image: BuiltImage, container: Container):
    assert image.name == f"{EnvironmentConfig.image_repository}:{karpy_version()}"
    config = container.config()
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ENTRYPOINT
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == karpy_version()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert labels["org.opencontainers.image.revision"].removesuffix("-dirty") == head
    assert labels["org.opencontainers.image.source"]
    # the archive under dist/ holds this very image: same config, hence same layers
    manifest = json.loads(subprocess.run(["skopeo", "inspect", "--raw", f"oci-archive:{image.archive}"],
                                         capture_output=True, text=True, check=True).stdout)
    image_id = json.loads(buildah("inspect", "--type", "image", image.name).stdout)["FromImageID"]
    assert manifest["config"]["digest"] == f"sha256:{image_id}"
    assert "skopeo copy oci-archive:" in image.output and "buildah --storage-driver vfs push" in image.output


def test_dependencies_are_the_pinned_versions(container: Container):
    pinned = {}
    for line in (ROOT / "requirements-image.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pinned[_canonical(name)] = version
    res = container.run(["python3", "-c", "import importlib.metadata as m, json; print(json.dumps("
                         "{d.metadata['Name']: d.version for d in m.distributions()}))"])
    assert res.returncode == 0, res.stderr
    installed = {_canonical(k): v for k, v in json.loads(res.stdout).items()}
    assert installed.pop("karpy") == karpy_version()
    assert installed == pinned


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_root_filesystem_is_read_only_and_tmp_writable(container: Container):
    probe = ("import os\n"
             "for path in ('/opt/karpy/probe', '/etc/probe', '/probe', '/tmp/probe'):\n"
             "    try:\n"
             "        open(path, 'w').close(); print(path, 'written')\n"
             "    except OSError as e:\n"
             "        print(path, e.strerror)\n"
             "print('uid', os.getuid(), os.getgid())")
    res = container.run(["python3", "-c", probe])
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["/opt/karpy/probe Read-only file system", "/etc/probe Read-only file system",
                                       "/probe Read-only file system", "/tmp/probe written", "uid 65532 65532"]
    (container.tmp / "probe").unlink()


def test_check_config_prints_the_settings(container: Container):
    res = container.run([*ENTRYPOINT, "--check-config"], env={"CLUSTER_NAME": "demo", "BATCH_IDLE_DURATION": "2s"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines and all(SETTING_LINE.match(line) for line in lines), lines
    assert "CLUSTER_NAME=demo (env)" in lines
    assert "BATCH_IDLE_DURATION=2s (env)" in lines
    assert "BATCH_MAX_DURATION=10s (default)" in lines


def test_check_config_without_cluster_name_exits_2(container: Container):
    res = container.run([*ENTRYPOINT, "--check-config"])
    assert res.returncode == 2
    assert res.stdout == ""
    err = process_stderr(res.stderr)
    assert len(err) == 1 and "CLUSTER_NAME" in err[0] and "Traceback" not in res.stderr, res.stderr


@pytest.mark.e2e
@pytest.mark.kube
@pytest.mark.localstack
def test_controller_from_image_scales_up(container: Container, world: World, kubelet, start_controller, monkeypatch,
                                         tmp_path: Path):
    names = ",".join(world.env())
    monkeypatch.setenv("KARPY_E2E_COMMAND", f"{sys.executable} -m tests.image.container --container {container.name} "
                       f"--pass {names} --stage {tmp_path / 'stage'} {' '.join(ENTRYPOINT)}")
    pool = nodepool_name("image")
    world.nodepool(pool)
    ns = world.namespace()
    controller = start_controller()
    world.deployment(ns, "web", 2, pool, cpu="1", memory="1Gi")
    wait_for("both pods bound", lambda: len(world.bound_pods(ns, "web")) == 2, timeout=180)
    # the controller is the image's entrypoint, chrooted into the container's root, as uid 65532
    assert controller.proc is not None
    inside = contained(controller.proc.pid)
    assert len(inside) == 1, inside
    assert inside[0]["uid"] == 65532 and inside[0]["root"] != "/", inside
    assert inside[0]["cmdline"][1:] == ENTRYPOINT, inside  # the venv's python running the karpy script
    assert Path(f"/proc/{inside[0]['pid']}/root/opt/karpy/venv").is_dir()
    claims = world.nodeclaims(pool)
    assert claims
    for claim in claims:
        name = claim["metadata"]["name"]
        wait_for(f"{name} Ready", functools.partial(_claim_ready, world, name), timeout=60)
        status = world.custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", name)["status"]
        tags = {t["Key"]: t["Value"] for t in world.instance(status["providerID"]).get("Tags", [])}
        assert tags["karpenter.sh/nodeclaim"] == name and tags["karpenter.sh/nodepool"] == pool
    messages = controller.messages()
    for message in ("found provisionable pod(s)", "created nodeclaim", "launched nodeclaim", "registered nodeclaim",
                    "initialized nodeclaim"):
        assert message in messages, (message, controller.text()[-3000:])
    # the metrics endpoint of the process in the container answers on the host network
    body = urllib.request.urlopen(f"http://127.0.0.1:{controller.env['METRICS_PORT']}/metrics", timeout=5).read()
    assert "karpenter_nodeclaims_created_total{" in body.decode()
    assert controller.stop() == 0, controller.text()[-3000:]
    assert "received signal, shutting down" in controller.messages()  # SIGTERM reached it: a graceful stop
    # it ran on the read-only root: nothing of it is in /run beyond the kubeconfig mounts buildah made (the
    # kubeconfig and the files it names, such as the apiserver's CA)
    left = {str(p.relative_to(container.run_dir)) for p in container.run_dir.rglob("*")}
    assert {p for p in left if p != "kube" and not p.startswith("kube/")} == set(), left


def _claim_ready(world: World, name: str) -> bool:
    claim = world.custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", name)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (claim.get("status") or {}).get("conditions")
               or [])
