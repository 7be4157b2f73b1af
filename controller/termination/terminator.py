"""Karpenter's terminator (pkg/controllers/node/termination/terminator/terminator.go): taint a node
karpenter.sh/disrupted:NoSchedule and drain it one pass at a time, pods whose grace period would outlast the node's
deadline deleted at once, the others evicted tier by tier through the eviction queue (controller/termination/
eviction.py). Which pods go when is decided in controller/termination/drain.py; this module does the writes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from controller import metrics as M
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import ConflictError, NotFoundError
from controller.kube.events import Recorder
from controller.state.views import NodeView, PodView
from controller.termination import drain as D
from controller.termination.eviction import EvictionQueue, pod_key

log = logging.getLogger("karpy.termination")

Obj = dict[str, Any]


@dataclass(frozen=True)
class DrainPass:
    """What one drain pass left: how many pods are still waiting to go (0 once drained) and, when some are backing
    off after a refused eviction, the seconds until the first may be tried again."""

    waiting: int
    retry_in: float | None = None

    @property
    def drained(self) -> bool:
        """Whether nothing is left to evict or delete."""
        return self.waiting == 0


class Terminator:
    """Taints and drains nodes; one per controller, its eviction queue shared by every pass."""

    def __init__(self, client: KubeClient, pods_on_node: Callable[[str], Sequence[PodView]],
                 recorder: Recorder) -> None:
        self.client = client
        self.pods_on_node = pods_on_node
        self.recorder = recorder
        self.evictions = EvictionQueue(client, recorder)

    def taint(self, node: NodeView, extra: Obj) -> NodeView:
        """Idempotently taint karpenter.sh/disrupted:NoSchedule (replacing that key with another effect) and label
        node.kubernetes.io/exclude-from-external-load-balancers, in one patch; returns the Node as written."""
        need_label = node.labels.get(D.EXCLUDE_LB_LABEL) != D.EXCLUDE_LB_VALUE
        need_taint = not node.disrupted
        if not need_label and not need_taint:
            return node
        taints = [dict(t) for t in node.taints]
        same_key = [t for t in taints if t.get("key") == D.DISRUPTED_TAINT["key"]]
        label_patch = {D.EXCLUDE_LB_LABEL: D.EXCLUDE_LB_VALUE}
        if need_taint and same_key:
            # the key is there with another effect: replace the list, locked on the resourceVersion we read
            new_taints = [t for t in taints if t.get("key") != D.DISRUPTED_TAINT["key"]] + [dict(D.DISRUPTED_TAINT)]
            body: Obj = {"metadata": {"labels": label_patch, "resourceVersion": node.resource_version or None},
                         "spec": {"taints": new_taints}}
            patched = self.client.patch(R.NODES, node.name, body)
        else:
            body = {"metadata": {"labels": label_patch}}
            if need_taint:
                body["spec"] = {"taints": [dict(D.DISRUPTED_TAINT)]}  # strategic merge: keyed by taint key
            patched = self.client.patch(R.NODES, node.name, body, patch_type="strategic")
        if need_taint:
            log.info("tainted node", extra={**extra, "taint.Key": D.DISRUPTED_TAINT["key"], "taint.Value": "",
                                            "taint.Effect": D.DISRUPTED_TAINT["effect"]})
        return NodeView.of(patched)

    def drain(self, node: NodeView, deadline: float | None, now: float, reason: str, extra: Obj) -> DrainPass:
        """One drain pass over the pods bound to the node (from the informer): delete those that must go before the
        deadline, evict the current tier, and say what is left."""
        plan = D.plan_drain(self.pods_on_node(node.name), deadline, now)
        for pod in plan.delete:
            assert deadline is not None
            self._force_delete(PodView.of(pod), deadline, now, reason, extra)
        for pod in plan.evict:
            self.evictions.evict(pod, node, now, reason)
        if plan.drained:
            return DrainPass(0)
        return DrainPass(len(plan.waiting), self.evictions.next_try(plan.evict, now))

    def _force_delete(self, pod: PodView, deadline: float, now: float, reason: str, extra: Obj) -> None:
        """Delete a pod whose grace period would outlast the node's deadline, with what is left of it (bypassing its
        PDB and do-not-disrupt)."""
        key = pod_key(pod)
        if self.evictions.acted_recently(key, now):
            return
        grace = D.force_delete_grace(deadline, now)
        tgps = pod.spec.get("terminationGracePeriodSeconds")
        self.recorder.publish(pod, "Normal", "Disrupted",
                              f"Deleting the pod to accommodate the terminationTime {D.format_time(deadline)} of the "
                              f"node. The pod was granted {grace} seconds of grace-period of its {tgps} "
                              "terminationGracePeriodSeconds. This bypasses the PDB of the pod and the do-not-disrupt "
                              "annotation.")
        try:
            self.client.delete(R.PODS, pod.name, pod.namespace, grace_period_seconds=grace, uid=pod.uid or None)
        except (NotFoundError, ConflictError):
            self.evictions.acted(key, now)
            return
        self.evictions.acted(key, now)
        log.debug("deleting pod", extra={**extra, "namespace": pod.namespace, "name": pod.name,
                                         "pod.terminationGracePeriodSeconds": tgps,
                                         "delete.gracePeriodSeconds": grace,
                                         "nodeclaim.terminationTime": D.format_time(deadline)})
        M.PODS_DRAINED.labels(reason=reason).inc()
