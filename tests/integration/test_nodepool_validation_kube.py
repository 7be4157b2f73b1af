"""A NodePool Karpenter's runtime validation refuses (here admitted by an apiserver without CEL) is reported on its
status (ValidationSucceeded False, NodePoolValidationFailed) and never provisioned from."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api import conditions as C
from controller.cloud.fake.provider import FakeCloudProvider
from controller.kube import resources as R
from controller.kube.events import Recorder
from controller.nodepool.status import NodePoolStatusController
from controller.provisioning.provisioner import Provisioner
from tests.kubetest import wait_for

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


def _pool(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"metadata": {"labels": labels}, "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}}}


def test_an_invalid_nodepool_is_reported_and_not_used(kube):
    kc, cluster, _ = kube
    kc.create(R.NODEPOOLS, _pool("invalid-labels", {"karpenter.sh/custom": "x", "team": "a"}))
    kc.create(R.NODEPOOLS, _pool("valid-labels", {"team": "a"}))
    try:
        wait_for("both pools in the cluster state",
                 lambda: cluster.nodepool("invalid-labels") and cluster.nodepool("valid-labels"))
        ctl = NodePoolStatusController(cluster, kc)
        ctl.reconcile("invalid-labels")
        ctl.reconcile("valid-labels")
        bad = C.get(kc.get(R.NODEPOOLS, "invalid-labels")["status"], "ValidationSucceeded") or {}
        assert (bad.get("status"), bad.get("reason")) == ("False", "NodePoolValidationFailed")
        assert 'label domain "karpenter.sh" is restricted' in bad.get("message", "")
        assert (C.get(kc.get(R.NODEPOOLS, "invalid-labels")["status"], "Ready") or {}).get("status") == "False"
        good = C.get(kc.get(R.NODEPOOLS, "valid-labels")["status"], "ValidationSucceeded") or {}
        assert good.get("status") == "True"

        provisioner = Provisioner(cluster, kc, FakeCloudProvider(), Recorder(kc))
        why = {s.manifest["metadata"]["name"]: s.not_ready for s in provisioner.pool_sources()}
        assert why["invalid-labels"].startswith("NodePool validation failed: ")
        assert "NodePool validation failed" not in why["valid-labels"]
    finally:
        for name in ("invalid-labels", "valid-labels"):
            kc.delete(R.NODEPOOLS, name)
