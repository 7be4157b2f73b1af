"""NodePool status, as Karpenter's nodepool counter and readiness controllers keep it: status.resources and
status.nodes from its nodes by the cluster state's usage rule (controller.state.usage), conditions NodeClassReady,
ValidationSucceeded and Ready, and the usage and limit gauges."""

from __future__ import annotations

import contextlib
import copy
import logging
from typing import Any

from controller import metrics as M
from controller.api import conditions as C
from controller.api.quantity import QuantityError, resources_from_dict
from controller.api.validation import spec_errors
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import NotFoundError
from controller.kube.workqueue import Result
from controller.provisioning.nodeclaimtemplate import resource_list
from controller.provisioning.provisioner import nodeclass_not_ready
from controller.state.cluster import Cluster
from controller.state.usage import NODES

log = logging.getLogger("karpy.nodepool.status")


class NodePoolStatusController:
    """Keeps each NodePool's status and gauges current."""

    def __init__(self, cluster: Cluster, client: KubeClient) -> None:
        self.cluster = cluster
        self.client = client
        # nodepool -> resource types its usage / limit gauges have series for, so the stale ones can be removed
        self._usage_series: dict[str, set[str]] = {}
        self._limit_series: dict[str, set[str]] = {}

    @staticmethod
    def _set_gauges(gauge: Any, series: dict[str, set[str]], pool: str, values: dict[str, int]) -> None:
        """Set one series per resource and remove the pool's series for resources no longer there (a resource that
        went to zero, a limit taken out, a pool deleted), as Karpenter's nodepool metrics controller does."""
        for resource in series.pop(pool, set()) - set(values):
            with contextlib.suppress(KeyError):
                gauge.remove(resource, pool)
        for resource, value in values.items():
            gauge.labels(nodepool=pool, resource_type=resource).set(value)
        if values:
            series[pool] = set(values)

    def usage(self, name: str) -> tuple[dict[str, int], int]:
        """The capacity the pool's nodes hold and how many it has, by Karpenter's counter (controller.state.usage)."""
        used = dict(self.cluster.nodepool_usage().get(name, {}))
        return used, used.pop(NODES, 0)

    def reconcile(self, name: str) -> Result:
        """One pass over a NodePool."""
        current = self.cluster.nodepool(name)
        if current is None:
            self._set_gauges(M.NODEPOOLS_USAGE, self._usage_series, name, {})
            self._set_gauges(M.NODEPOOLS_LIMIT, self._limit_series, name, {})
            return Result()
        status = copy.deepcopy(current.get("status") or {})
        before = copy.deepcopy(status)
        resources, nodes = self.usage(name)
        status["resources"] = resource_list(resources)
        status["nodes"] = nodes
        generation = current["metadata"].get("generation")
        ref = ((((current.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {})
        nodeclass = self.cluster.nodeclass(str(ref.get("name", "")))
        why = nodeclass_not_ready(nodeclass, str(ref.get("name", "")))
        invalid = "; ".join(spec_errors(current))
        C.set_condition(status, "ValidationSucceeded", not invalid,
                        "NodePoolValidationFailed" if invalid else "ValidationSucceeded", invalid[:1000],
                        generation=generation)
        C.set_condition(status, "NodeClassReady", not why, "NodeClassReady" if not why else "NodeClassNotReady", why,
                        generation=generation)
        not_ready = f"ValidationSucceeded=False: {invalid[:300]}" if invalid else why
        C.set_condition(status, "Ready", not not_ready, "Ready" if not not_ready else "NotReady", not_ready,
                        generation=generation)
        if nodeclass is not None:
            status["nodeClassObservedGeneration"] = nodeclass["metadata"].get("generation")
        if status != before:
            try:
                self.client.patch(R.NODEPOOLS, name, {"status": status}, subresource="status")
            except NotFoundError:
                return Result()
        self._set_gauges(M.NODEPOOLS_USAGE, self._usage_series, name, {k: v for k, v in resources.items() if v})
        limits: dict[str, Any] = (current.get("spec") or {}).get("limits") or {}
        try:
            parsed = resources_from_dict(limits)
        except QuantityError:
            parsed = {}
        self._set_gauges(M.NODEPOOLS_LIMIT, self._limit_series, name, parsed)
        return Result(requeue_after=60.0)
