"""With the in-memory cloud there is nothing to resolve: every EC2NodeClass is marked Ready, as Karpenter's KWOK
provider does for its node classes."""

from __future__ import annotations

import contextlib
import copy

from controller.api import conditions as C
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import NotFoundError
from controller.kube.workqueue import Result
from controller.nodeclass.hash import reconcile_hash
from controller.state.cluster import Cluster


class FakeNodeClassController:
    """Sets Ready=True on each EC2NodeClass."""

    def __init__(self, cluster: Cluster, client: KubeClient) -> None:
        self.cluster = cluster
        self.client = client

    def reconcile(self, name: str) -> Result:
        """Annotate the node class with its hash (as with the AWS provider) and mark it Ready if it is not."""
        current = self.cluster.nodeclass(name)
        if current is None:
            return Result()
        with contextlib.suppress(NotFoundError):
            current = reconcile_hash(self.client, self.cluster, current)
        status = copy.deepcopy(current.get("status") or {})
        if C.set_condition(status, "Ready", True, "Ready", generation=current["metadata"].get("generation")):
            with contextlib.suppress(NotFoundError):
                self.client.patch(R.EC2NODECLASSES, name, {"status": status}, subresource="status")
        return Result()
