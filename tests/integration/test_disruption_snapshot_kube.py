"""`karpy disruption` on a snapshot read from the real apiserver, as `kubectl get
nodes,pods,nodeclaims,nodepools,ec2nodeclasses,pdb -o yaml` prints it: the objects the apiserver stores (defaults,
managedFields, status written through the status subresource, a policy/v1beta1 PDB on 1.20) read back as one List
and planned offline. Nodes are registered by the test kubelet; pods are bound through spec.nodeName."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from cli import main
from controller.api import labels as L
from controller.api.nodeclasshash import hash_annotations
from controller.api.quantity import format_quantity
from controller.catalog.snapshot import load_catalog
from controller.kube import resources as R
from controller.kube.errors import NotFoundError
from controller.provisioning.nodeclaimtemplate import NODEPOOL_HASH_VERSION, nodepool_hash
from tests.integration.kubelet import FakeKubelet
from tests.kubetest import wait_for

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


def _at(offset: float = 0) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def cluster(kube, kube_api) -> Iterator[dict[str, Any]]:
    """A NodePool with three initialized NodeClaims and Nodes (m5.xlarge), a few pods bound to them, one covered by
    a PDB that allows no eviction."""
    kc, _, _ = kube
    suffix = uuid.uuid4().hex[:6]
    pool, ns = f"dsnap-{suffix}", f"dsnap-{suffix}"
    undo: list[Callable[[], Any]] = []
    kubelet = FakeKubelet(kube_api)
    try:
        yield _world(kc, kubelet, pool, ns, suffix, undo)
    finally:
        for step in reversed(undo):
            with contextlib.suppress(Exception):
                step()


def _world(kc: Any, kubelet: FakeKubelet, pool: str, ns: str, suffix: str,
           undo: list[Callable[[], Any]]) -> dict[str, Any]:
    it = next(t for t in load_catalog().instance_types if t.name == "m5.xlarge")
    capacity = {k: format_quantity(k, v) for k, v in it.capacity.items() if v}
    allocatable = {k: format_quantity(k, v) for k, v in it.allocatable.items() if v}
    undo.append(lambda: kc.delete(R.EC2NODECLASSES, pool))
    nodeclass = kc.create(R.EC2NODECLASSES, {
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": pool},
        "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                 "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]}})
    undo.append(lambda: kc.delete(R.NODEPOOLS, pool))
    nodepool = kc.create(R.NODEPOOLS, {
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": pool},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": pool},
            "requirements": [{"key": L.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}]}},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
                           "budgets": [{"nodes": "100%"}]}}})
    annotations = {L.NODEPOOL_HASH: nodepool_hash(nodepool), L.NODEPOOL_HASH_VERSION: NODEPOOL_HASH_VERSION,
                   **hash_annotations(nodeclass)}
    nodes, claims = [], []
    for i, zone in enumerate(("us-east-1a", "us-east-1b", "us-east-1c")):
        claim, node = f"{pool}-{i}", f"ip-10-77-{int(suffix, 16) % 200}-{i}.ec2.internal"
        labels = {L.NODEPOOL: pool, L.INSTANCE_TYPE: "m5.xlarge", L.CAPACITY_TYPE: "on-demand", L.ZONE: zone,
                  L.ARCH: "amd64", L.EC2NODECLASS: pool}
        provider = f"aws:///{zone}/i-0{suffix}{i:010d}"
        undo.append(functools.partial(_release, kc, claim))
        kc.create(R.NODECLAIMS, {
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": claim, "labels": labels, "annotations": annotations},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": pool},
                     "requirements": [{"key": L.INSTANCE_TYPE, "operator": "In", "values": ["m5.xlarge"]}]}})
        kc.patch(R.NODECLAIMS, claim, {"status": {
            "nodeName": node, "providerID": provider, "capacity": capacity, "allocatable": allocatable,
            "lastPodEventTime": _at(-3600),
            "conditions": [{"type": t, "status": "True", "reason": t, "message": t, "lastTransitionTime": _at(-7200)}
                           for t in ("Launched", "Registered", "Initialized", "Ready")]}}, subresource="status")
        undo.append(functools.partial(kubelet.delete, node))
        kubelet.register(node, provider, labels={**labels, L.INITIALIZED: "true", L.REGISTERED: "true"},
                         capacity=capacity, allocatable=allocatable)
        nodes.append(node)
        claims.append(claim)
    undo.append(lambda: kc.delete(R.NAMESPACES, ns))
    kc.create(R.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    wait_for("the namespace's default ServiceAccount", lambda: _exists(kc, ns))
    for i, (app, node) in enumerate((("web", nodes[0]), ("web", nodes[1]), ("db", nodes[2]))):
        kc.create(R.PODS, {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": f"{app}-{i}", "namespace": ns, "labels": {"app": app}},
                           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "pause", "resources": {
                               "requests": {"cpu": "500m", "memory": "512Mi"}}}]}})
    kc.create(R.PDBS, {"apiVersion": f"policy/{kc.resolve(R.PDBS).version}", "kind": "PodDisruptionBudget",
                       "metadata": {"name": "db", "namespace": ns},
                       "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "db"}}}})
    return {"kc": kc, "pool": pool, "ns": ns, "nodes": nodes, "claims": claims}


def _exists(kc: Any, ns: str) -> bool:
    try:
        kc.get(R.Resource("", "v1", "serviceaccounts", "ServiceAccount", True), "default", ns)
        return True
    except NotFoundError:
        return False


def _release(kc: Any, name: str) -> None:
    with contextlib.suppress(NotFoundError):
        kc.patch(R.NODECLAIMS, name, {"metadata": {"finalizers": None}})
    with contextlib.suppress(NotFoundError):
        kc.delete(R.NODECLAIMS, name)


def _kubectl_get(world: dict[str, Any]) -> dict[str, Any]:
    """What kubectl's -o yaml prints for these objects: one List, each item with its apiVersion and kind."""
    kc = world["kc"]
    items: list[dict[str, Any]] = []

    def add(res: Any, keep: Callable[[dict[str, Any]], bool], namespace: str | None = None) -> None:
        served = kc.resolve(res)
        found, _ = kc.list(served, namespace=namespace)
        group = f"{served.group}/{served.version}" if served.group else served.version
        items.extend({"apiVersion": group, "kind": served.kind, **o} for o in found if keep(o))

    pool = world["pool"]
    add(R.NODES, lambda o: (o["metadata"].get("labels") or {}).get(L.NODEPOOL) == pool)
    add(R.PODS, lambda o: True, world["ns"])
    add(R.NODECLAIMS, lambda o: (o["metadata"].get("labels") or {}).get(L.NODEPOOL) == pool)
    add(R.NODEPOOLS, lambda o: o["metadata"]["name"] == pool)
    add(R.EC2NODECLASSES, lambda o: o["metadata"]["name"] == pool)
    add(R.PDBS, lambda o: True, world["ns"])
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


def test_a_snapshot_of_the_real_apiserver_plans_consolidation(cluster, tmp_path: Path):
    snapshot = tmp_path / "snapshot.yaml"
    snapshot.write_text(yaml.safe_dump(_kubectl_get(cluster), sort_keys=False))
    res = CliRunner().invoke(main, ["disruption", "-f", str(snapshot), "-o", "json"], prog_name="karpy")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["kind"] == "DisruptionPlan" and doc["commands"], doc
    moved = {c["nodeClaim"] for cmd in doc["commands"] for c in cmd["candidates"]}
    # the two web nodes are half empty; the db node is held by its PDB (disruptionsAllowed 0)
    assert moved and moved <= set(cluster["claims"][:2])
    blocked = {b["nodeClaim"]: b["reason"] for b in doc["blocked"]}
    assert "pdb" in blocked.get(cluster["claims"][2], "").lower(), doc["blocked"]
