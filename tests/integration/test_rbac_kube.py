"""The controller's RBAC on a real kube-apiserver that enforces RBAC (a control plane of its own: the shared one
allows everything). SubjectAccessReview says what the ServiceAccount can and cannot do, checked against what
Karpenter's chart grants; then the controller's own code runs with the ServiceAccount's token (informers of the
cluster state, leader election, the legacy ConfigMaps), to show the RBAC is enough for what it really calls."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from infra.manifests import DeploymentProps, rbac, service_account
from tests.conftest import KUBE_BIN, ROOT, _stop, _tail

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]
NS = "karpy-system"
SA = "karpenter"
PROPS = DeploymentProps(cluster_name="c", cluster_endpoint=None, region="us-east-1", queue_name="c",
                        role_arn="arn:aws:iam::111122223333:role/KarpenterController-c", image_repository="repo",
                        version="1", namespace=NS, service_account=SA)


@pytest.fixture(scope="module")
def rbac_api(tmp_path_factory) -> Iterator[tuple[Any, str]]:
    """An ApiClient (admin) and the kubeconfig of a control plane started with --authorization-mode=RBAC."""
    import os

    if not (KUBE_BIN / "kube-apiserver").exists():
        pytest.fail(f"the control plane is not built in {KUBE_BIN}: run scripts/test.sh")
    run = tmp_path_factory.mktemp("kube-rbac")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "start-kube-control-plane.sh"), str(run), str(KUBE_BIN)],
                          capture_output=True, text=True, env={**os.environ, "AUTHORIZATION_MODE": "RBAC"})
    pids = [int(p) for p in (run / "pids").read_text().split()] if (run / "pids").exists() else []
    if proc.returncode != 0:
        _stop(pids)
        pytest.fail(f"the control plane did not start:\n{proc.stderr}\n{_tail(run / 'apiserver.log')}")
    try:
        api = config.new_client_from_config(config_file=str(run / "kubeconfig"))
        from tests.kubetest import install_crds, wait_for

        wait_for("the default namespace", lambda: client.CoreV1Api(api).read_namespace("default"))
        install_crds(api)
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": NS}})
        core.create_namespaced_service_account(NS, service_account(PROPS))
        from kubernetes import utils

        for m in rbac(PROPS):
            utils.create_from_dict(api, m)
        yield api, str(run / "kubeconfig")
    finally:
        _stop(pids)


def can(api: Any, verb: str, resource: str, group: str = "", namespace: str = "", name: str = "",
        subresource: str = "") -> bool:
    review = client.AuthorizationV1Api(api).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": f"system:serviceaccount:{NS}:{SA}",
                 "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"],
                 "resourceAttributes": {"verb": verb, "resource": resource, "group": group, "namespace": namespace,
                                        "name": name, "subresource": subresource}}})
    return bool(review.status.allowed)


ALLOWED = [
    # reads: the informers (pods, nodes, NodeClaims, NodePools, EC2NodeClasses, DaemonSets, PDBs) and lookups
    *[(v, r, g) for v in ("get", "list", "watch") for r, g in [
        ("pods", ""), ("nodes", ""), ("nodeclaims", "karpenter.sh"), ("nodepools", "karpenter.sh"),
        ("ec2nodeclasses", "karpenter.k8s.aws"), ("daemonsets", "apps"), ("poddisruptionbudgets", "policy"),
        ("persistentvolumeclaims", ""), ("persistentvolumes", ""), ("volumeattachments", "storage.k8s.io"),
        ("storageclasses", "storage.k8s.io"), ("csinodes", "storage.k8s.io"), ("namespaces", "")]],
    # writes the controller makes
    ("create", "nodeclaims", "karpenter.sh"), ("patch", "nodeclaims", "karpenter.sh"),
    ("delete", "nodeclaims", "karpenter.sh"), ("update", "nodeclaims", "karpenter.sh"),
    ("patch", "nodes", ""), ("update", "nodes", ""), ("delete", "nodes", ""),
    ("patch", "ec2nodeclasses", "karpenter.k8s.aws"),  # its finalizer
    ("delete", "pods", ""),
]
DENIED = [
    ("create", "nodes", ""),  # kubelets register nodes, never the controller
    ("create", "pods", ""), ("update", "pods", ""), ("create", "nodepools", "karpenter.sh"),
    ("delete", "nodepools", "karpenter.sh"), ("create", "ec2nodeclasses", "karpenter.k8s.aws"),
    ("delete", "ec2nodeclasses", "karpenter.k8s.aws"), ("get", "secrets", ""), ("list", "secrets", ""),
    ("list", "configmaps", ""), ("create", "clusterroles", "rbac.authorization.k8s.io"),
    ("delete", "namespaces", ""), ("create", "serviceaccounts", ""),
]


def test_what_the_service_account_can_and_cannot_do(rbac_api):
    api, _ = rbac_api
    allowed = [(v, r, g) for v, r, g in ALLOWED if not can(api, v, r, g)]
    assert allowed == [], "denied but needed"
    assert all(can(api, "create", "pods", "", ns, subresource="eviction") for ns in ("default", NS))
    for sub in ("status",):
        assert can(api, "patch", "nodeclaims", "karpenter.sh", subresource=sub)
        assert can(api, "patch", "nodepools", "karpenter.sh", subresource=sub)
        assert can(api, "update", "ec2nodeclasses", "karpenter.k8s.aws", subresource=sub)
    assert can(api, "create", "events", "", "default") and can(api, "patch", "events", "", NS)
    denied = [(v, r, g) for v, r, g in DENIED if can(api, v, r, g, "default")]
    assert denied == [], "allowed but not needed"
    # its own namespace: its Lease and config-logging only
    assert can(api, "get", "leases", "coordination.k8s.io", NS, "karpenter-leader-election")
    assert can(api, "create", "leases", "coordination.k8s.io", NS)
    assert can(api, "update", "leases", "coordination.k8s.io", NS, "karpenter-leader-election")
    assert not can(api, "update", "leases", "coordination.k8s.io", NS, "kube-scheduler")
    assert not can(api, "create", "leases", "coordination.k8s.io", "kube-system")
    assert can(api, "get", "configmaps", "", NS, "karpenter-global-settings")
    assert can(api, "patch", "configmaps", "", NS, "config-logging")
    assert not can(api, "patch", "configmaps", "", NS, "karpenter-global-settings")
    assert not can(api, "get", "configmaps", "", "kube-system", "aws-auth")
    assert not can(api, "update", "configmaps", "", "kube-system", "aws-auth")
    assert not can(api, "get", "configmaps", "", "default", "anything")


def _service_account_kubeconfig(api: Any, admin_kubeconfig: str, path: Path) -> str:
    """A kubeconfig that authenticates as the controller's ServiceAccount (a TokenRequest token)."""
    token = client.CoreV1Api(api).create_namespaced_service_account_token(
        SA, NS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                 "spec": {"expirationSeconds": 3600}}).status.token
    cfg = yaml.safe_load(Path(admin_kubeconfig).read_text())
    cfg["users"] = [{"name": "admin", "user": {"token": token}}]
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_the_controller_runs_with_this_rbac(rbac_api, tmp_path):
    from controller.kube import resources as R
    from controller.kube.client import KubeClient
    from controller.kube.errors import KubeError
    from controller.kube.leaderelection import LeaderElector
    from controller.settings import read_legacy_configmaps
    from controller.state.cluster import Cluster

    api, admin = rbac_api
    kubeconfig = _service_account_kubeconfig(api, admin, tmp_path / "sa-kubeconfig")
    kc = KubeClient.from_environment(kubeconfig)
    with pytest.raises(KubeError):  # really the ServiceAccount, really enforced
        kc.list(R.CONFIGMAPS, "kube-system")
    cluster = Cluster(kc)  # every informer the controller runs: list and watch allowed
    stop = threading.Event()
    try:
        cluster.start(stop)
        assert cluster.wait_synced(stop, timeout=60)
    finally:
        stop.set()
    elector = LeaderElector(kc, "karpenter-leader-election", NS, "a")
    assert elector.try_acquire_or_renew()  # creates its Lease
    assert elector.try_acquire_or_renew()  # renews it (update, by name)
    other = LeaderElector(kc, "another-lease", NS, "a")
    assert other.try_acquire_or_renew()  # create cannot be limited by name (as in Karpenter's chart) ...
    assert not other.try_acquire_or_renew()  # ... but only its own Lease may be renewed
    client.CoreV1Api(api).create_namespaced_config_map(NS, {"metadata": {"name": "config-logging"},
                                                            "data": {"loglevel.controller": "debug"}})
    legacy, warnings = read_legacy_configmaps(NS, kubeconfig)
    assert warnings == [] and legacy is not None and legacy.values.get("LOG_LEVEL") == "debug"
    assert "config-logging" in legacy.present


def test_the_controllers_writes_with_this_rbac(rbac_api, tmp_path):
    """The writes the controller makes, made with the ServiceAccount's token: a NodeClaim's life (create, status,
    finalizer, delete), NodePool status, the EC2NodeClass finalizer and status, Node labels and deletion, events, and
    an eviction; and what it must not do refused."""
    from controller.api import labels as L
    from controller.kube import resources as R
    from controller.kube.client import KubeClient
    from controller.kube.errors import KubeError

    api, admin = rbac_api
    kc = KubeClient.from_environment(_service_account_kubeconfig(api, admin, tmp_path / "sa-kubeconfig"))
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    ref = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "rbac"}
    custom.create_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", {
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "rbac"},
        "spec": {"role": "R", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                 "subnetSelectorTerms": [{"tags": {"k": "v"}}], "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]}})
    custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", {
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "rbac"},
        "spec": {"template": {"spec": {"nodeClassRef": ref, "requirements": []}}}})

    kc.patch(R.EC2NODECLASSES, "rbac", {"metadata": {"finalizers": ["karpenter.k8s.aws/termination"]}})
    kc.patch(R.EC2NODECLASSES, "rbac", {"status": {"conditions": []}}, subresource="status")
    kc.patch(R.NODEPOOLS, "rbac", {"status": {"resources": {"cpu": "0"}}}, subresource="status")
    claim = kc.create(R.NODECLAIMS, {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "rbac-x1", "labels": {L.NODEPOOL: "rbac"}, "finalizers": ["karpenter.sh/termination"]},
        "spec": {"nodeClassRef": ref, "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}]}})
    kc.patch(R.NODECLAIMS, "rbac-x1", {"status": {"providerID": "aws:///us-east-1a/i-0abc"}}, subresource="status")
    kc.delete(R.NODECLAIMS, "rbac-x1", uid=claim["metadata"]["uid"])
    kc.patch(R.NODECLAIMS, "rbac-x1", [{"op": "remove", "path": "/metadata/finalizers"}], patch_type="json")
    kc.patch(R.EC2NODECLASSES, "rbac", {"metadata": {"finalizers": None}})

    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-10-0-0-9"}}
    with pytest.raises(KubeError):
        kc.create(R.NODES, node)  # kubelets register nodes
    core.create_node(node)
    kc.patch(R.NODES, "ip-10-0-0-9", {"metadata": {"labels": {L.INITIALIZED: "true"}}})
    kc.delete(R.NODES, "ip-10-0-0-9")

    kc.create(R.EVENTS, {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "rbac.1", "namespace": "default"},
                         "involvedObject": {"kind": "NodePool", "name": "rbac", "apiVersion": "karpenter.sh/v1"},
                         "reason": "Test", "message": "m", "type": "Normal", "source": {"component": "karpenter"}})
    core.create_namespaced_pod("default", {"metadata": {"name": "evictee"},
                                           "spec": {"containers": [{"name": "c", "image": "x"}]}})
    kc.evict("default", "evictee")
    with pytest.raises(KubeError):
        kc.create(R.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                           "spec": {"containers": [{"name": "c", "image": "x"}]}})
    with pytest.raises(KubeError):
        kc.delete(R.NODEPOOLS, "rbac")
    custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodepools", "rbac")
    custom.delete_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", "rbac")
