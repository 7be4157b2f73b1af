"""NodeClaim lifecycle, as Karpenter's sub-reconcilers: launch -> registration -> initialization, with liveness.

Each pass works on one copy of the NodeClaim and writes at most one metadata patch and one status patch. A launch is
idempotent (the cloud provider finds the instance it already made for this NodeClaim), so a crash between CreateFleet
and the status write leaves neither a leak nor a duplicate.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable
from typing import Any

from controller import metrics as M
from controller.api import conditions as C
from controller.api import labels as L
from controller.api.nodeclasshash import hash_annotations
from controller.api.quantity import QuantityError, resources_from_dict
from controller.api.taints import UNREGISTERED_TAINT, Taint, is_known_ephemeral
from controller.cloud.errors import InsufficientCapacityError, NodeClassNotReadyError
from controller.cloud.provider import CloudProvider, LaunchedNode, LaunchRequest, NodeClass
from controller.failpoints import failpoint
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import InvalidError, NotFoundError
from controller.kube.events import Recorder
from controller.kube.workqueue import Result, WorkQueue
from controller.provisioning.nodeclaimtemplate import resource_list
from controller.state.cluster import Cluster, provider_id
from controller.state.views import NodeClaimView, NodeView

log = logging.getLogger("karpy.nodeclaim.lifecycle")

LAUNCH_TIMEOUT = 5 * 60.0
REGISTRATION_TIMEOUT = 15 * 60.0
# Karpenter's lifecycle controller retries a failed reconcile (a launch error) from 1 s doubling to 1 min
ERROR_BACKOFF_BASE = 1.0
ERROR_BACKOFF_MAX = 60.0
WELL_KNOWN_RESOURCES = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})


def lifecycle_queue() -> WorkQueue:
    """The nodeclaim.lifecycle work queue, with Karpenter's per-item error backoff."""
    return WorkQueue("nodeclaim.lifecycle", base_delay=ERROR_BACKOFF_BASE, max_delay=ERROR_BACKOFF_MAX)


def _ref(claim: dict[str, Any]) -> dict[str, Any]:
    return {"NodeClaim": {"name": claim["metadata"]["name"]}}


def requirement_labels(claim: dict[str, Any]) -> dict[str, str]:
    """Labels implied by single-valued In requirements (Karpenter labels nodes with them)."""
    out = {}
    for r in (claim.get("spec") or {}).get("requirements") or []:
        if r.get("operator") == "In" and len(r.get("values") or []) == 1 and r.get("key") != L.HOSTNAME:
            out[str(r["key"])] = str(r["values"][0])
    return out


def _taint_key(t: dict[str, Any]) -> tuple[str, str]:
    return str(t.get("key")), str(t.get("effect"))


class LifecycleController:
    """Reconciles one NodeClaim at a time through launch, registration, initialization and liveness."""

    def __init__(self, cluster: Cluster, client: KubeClient, cloud: CloudProvider, recorder: Recorder,
                 on_deleted: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self.client = client
        self.cloud = cloud
        self.recorder = recorder
        self.on_deleted = on_deleted  # a NodeClaim given up on: its pods need a new home (the provisioner's trigger)
        self.clock = clock
        # NodeClaim -> resourceVersions this process has written past: until the informer shows the last write, its
        # copy is stale and a pass on it would redo the work (a second launch call)
        self._superseded: dict[str, set[str]] = {}

    def _stale(self, claim: NodeClaimView) -> bool:
        name = claim.name
        if claim.resource_version in self._superseded.get(name, ()):
            return True
        self._superseded.pop(name, None)
        return False

    def _wrote(self, before: dict[str, Any], after: dict[str, Any] | None = None) -> None:
        """Mark the version read (and an intermediate version written) as superseded by this process's write."""
        stale = self._superseded.setdefault(before["metadata"]["name"], set())
        stale.add(str(before["metadata"].get("resourceVersion")))
        if after is not None and after is not before:
            stale.discard(str(after["metadata"].get("resourceVersion")))

    def reconcile(self, name: str) -> Result:
        """One pass over a NodeClaim."""
        current = self.cluster.nodeclaim(name)
        if current is None or current.deleting:
            self._superseded.pop(name, None)
            return Result()
        if self._stale(current):
            return Result(requeue_after=0.5)  # our own write is on its way through the watch
        claim: dict[str, Any] = copy.deepcopy(current)  # a plain dict to change
        meta = claim["metadata"]
        if L.TERMINATION_FINALIZER not in (meta.get("finalizers") or []):
            self._wrote(current, self.client.patch(R.NODECLAIMS, name, {"metadata": {
                "finalizers": [*(meta.get("finalizers") or []), L.TERMINATION_FINALIZER],
                "resourceVersion": meta.get("resourceVersion")}}))
            return Result(requeue_after=0.0)
        status = claim.setdefault("status", {})
        if not C.is_true(status, "Launched"):
            return self._launch(claim)
        result = self._register(claim)
        if result is not None:
            return result
        return self._initialize(claim)

    # ---- launch ------------------------------------------------------------------------------------------------
    def _delete(self, claim: dict[str, Any], reason: str) -> None:
        """Delete the NodeClaim given up on, counted in karpenter_nodeclaims_disrupted_total with reason."""
        name = claim["metadata"]["name"]
        try:
            self.client.delete(R.NODECLAIMS, name, uid=claim["metadata"].get("uid"))
        except NotFoundError:
            return
        M.nodeclaim_disrupted(claim, reason)
        # karpenter_nodeclaims_terminated_total is counted once, by the Terminator when the finalizer goes
        log.info("deleted nodeclaim", extra={**_ref(claim), "reason": reason, "controller": "nodeclaim.lifecycle"})
        self.on_deleted()

    def _since(self, claim: dict[str, Any], type_: str) -> float:
        """Seconds since the condition's lastTransitionTime. Karpenter's conditions start Unknown when the NodeClaim
        is created, so a condition not written yet counts from the creationTimestamp."""
        at = C.parse_time((C.get(claim.get("status"), type_) or {}).get("lastTransitionTime"))
        if at is None:
            at = C.parse_time(claim["metadata"].get("creationTimestamp"))
        return 0.0 if at is None else self.clock() - at

    def _unknown_since_creation(self, claim: dict[str, Any], type_: str, reason: str, message: str) -> bool:
        """Set a condition Unknown (whether it changed); one not there yet is stamped with the creationTimestamp (it
        has been Unknown since then, as in Karpenter), so liveness measures from creation."""
        status = claim["status"]
        created = None if C.get(status, type_) is not None else C.parse_time(
            claim["metadata"].get("creationTimestamp"))
        return C.set_condition(status, type_, None, reason, message, now=created)

    def _launch(self, claim: dict[str, Any]) -> Result:
        name = claim["metadata"]["name"]
        status = claim["status"]
        # liveness.go: not Launched 5 min after Launched's last transition (Unknown since creation) -> deleted
        if self._since(claim, "Launched") > LAUNCH_TIMEOUT:
            log.info("nodeclaim did not launch in time", extra={**_ref(claim), "timeout": "5m"})
            self._delete(claim, "launch_timeout")
            return Result()
        ref = ((claim.get("spec") or {}).get("nodeClassRef") or {}).get("name", "")
        nodeclass = self.cluster.nodeclass(str(ref))
        from controller.provisioning.provisioner import nodeclass_not_ready

        why = nodeclass_not_ready(nodeclass, str(ref))
        if why or nodeclass is None:
            if self._unknown_since_creation(claim, "Launched", "NodeClassNotReady", why):
                self._write_status(claim)
            self.recorder.publish(claim, "Warning", "NodeClassNotReady", why)
            return Result(requeue_after=5.0)
        try:
            # timed and counted by cloud.metered.MeteredCloudProvider
            launched = self.cloud.create(LaunchRequest.from_manifest(claim), NodeClass.from_manifest(nodeclass))
        except InsufficientCapacityError as e:
            message = str(e)[:300]
            log.error("failed launching nodeclaim", extra={**_ref(claim), "error": message})
            self.recorder.publish(claim, "Warning", "InsufficientCapacityError",
                                  f"NodeClaim {name} event: {message}")
            self._delete(claim, "insufficient_capacity")
            return Result()
        except NodeClassNotReadyError as e:
            self._unknown_since_creation(claim, "Launched", "NodeClassNotReady", str(e)[:300])
            self._write_status(claim)
            return Result(requeue_after=5.0)
        except Exception as e:
            # Launched stays Unknown (the launch timeout still runs from its transition); the error backs off
            if C.set_condition(status, "Launched", None, "LaunchFailed", str(e)[:300]):
                self._write_status(claim)
            raise
        failpoint("lifecycle.after-create")  # a crash between CreateFleet and the status write
        self._populate(claim, launched, nodeclass)
        log.info("launched nodeclaim", extra={
            **_ref(claim), "controller": "nodeclaim.lifecycle", "provider-id": launched.provider_id,
            "instance-type": launched.instance_type, "zone": launched.zone, "capacity-type": launched.capacity_type,
            "allocatable": resource_list(launched.allocatable)})
        return Result(requeue_after=0.0)

    def _populate(self, claim: dict[str, Any], launched: LaunchedNode, nodeclass: dict[str, Any]) -> None:
        """Write what the launch produced: labels and the EC2NodeClass hash annotations (as the AWS provider's Create
        stamps them) on the NodeClaim, then providerID, image, capacity, allocatable and Launched in one status
        patch."""
        meta = claim["metadata"]
        labels = dict(meta.get("labels") or {})
        labels.update(launched.labels)
        labels.update({L.INSTANCE_TYPE: launched.instance_type, L.ZONE: launched.zone,
                       L.CAPACITY_TYPE: launched.capacity_type})
        annotations = {**(meta.get("annotations") or {}), **hash_annotations(nodeclass)}
        if labels != (meta.get("labels") or {}) or annotations != (meta.get("annotations") or {}):
            patched = self.client.patch(R.NODECLAIMS, meta["name"], {"metadata": {"labels": labels,
                                                                                  "annotations": annotations}})
            self._wrote(claim)
            self._superseded[meta["name"]].add(str(patched["metadata"].get("resourceVersion")))
            meta["labels"] = labels
            meta["annotations"] = annotations
        status = claim["status"]
        status.update({"providerID": launched.provider_id, "imageID": launched.image_id,
                       "capacity": resource_list(launched.capacity),
                       "allocatable": resource_list(launched.allocatable)})
        C.set_condition(status, "Launched", True, "Launched")
        self._unknown_since_creation(claim, "Registered", "AwaitingReconciliation", "node not registered yet")
        self._unknown_since_creation(claim, "Initialized", "AwaitingReconciliation", "node not initialized yet")
        C.set_condition(status, "Ready", False, "NotReady", "Registered and Initialized are not True")
        self._write_status(claim)

    def _write_status(self, claim: dict[str, Any]) -> None:
        with contextlib.suppress(NotFoundError):
            written = self.client.patch(R.NODECLAIMS, claim["metadata"]["name"], {"status": claim["status"]},
                                        subresource="status")
            self._wrote(claim, written)

    # ---- registration ------------------------------------------------------------------------------------------
    def _register(self, claim: dict[str, Any]) -> Result | None:
        status = claim["status"]
        pid = provider_id(claim)
        node = self.cluster.node_for_provider_id(pid)
        if node is None and C.is_true(status, "Registered"):
            return None  # liveness ends at registration: a Node gone since is termination's or GC's, not a timeout
        if node is None:
            # liveness.go: not Registered 15 min after Registered's last transition (Unknown since creation)
            if self._since(claim, "Registered") > REGISTRATION_TIMEOUT:
                log.info("nodeclaim did not register in time", extra={**_ref(claim), "timeout": "15m"})
                self._delete(claim, "registration_timeout")
                return Result()
            if C.set_condition(status, "Registered", None, "NodeNotFound", "Node not registered with cluster"):
                self._write_status(claim)
            return Result(requeue_after=15.0)
        node_name = node.name
        if C.is_true(status, "Registered") and status.get("nodeName") == node_name:
            return None
        self._sync_node(claim, node, first=True)
        status["nodeName"] = node_name
        C.set_condition(status, "Registered", True, "Registered")
        self._write_status(claim)
        log.info("registered nodeclaim", extra={**_ref(claim), "Node": {"name": node_name},
                                                "taints": node.taints,
                                                "provider-id": pid, "controller": "nodeclaim.lifecycle"})
        M.NODES_CREATED.labels(nodepool=claim["metadata"].get("labels", {}).get(L.NODEPOOL, ""),
                               zone=claim["metadata"].get("labels", {}).get(L.ZONE, "")).inc()
        return Result(requeue_after=0.0)

    def _sync_node(self, claim: dict[str, Any], node: NodeView, first: bool) -> None:
        """Owner reference, finalizer, labels, annotations and taints from the NodeClaim; the unregistered taint
        removed."""
        labels = dict(node.labels)
        labels.update(requirement_labels(claim))
        labels.update(claim["metadata"].get("labels") or {})
        labels[L.REGISTERED] = "true"
        annotations = {**node.annotations, **(claim["metadata"].get("annotations") or {})}
        finalizers = node.finalizers
        if L.TERMINATION_FINALIZER not in finalizers:
            finalizers.append(L.TERMINATION_FINALIZER)
        owners: list[Any] = [o for o in node.owner_references if o.get("kind") != "NodeClaim"]
        owners.append({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": claim["metadata"]["name"],
                       "uid": claim["metadata"]["uid"], "blockOwnerDeletion": True})
        taints: list[Any] = [t for t in node.taints if not UNREGISTERED_TAINT.matches(Taint.from_dict(dict(t)))]
        if "karpenter.sh/do-not-sync-taints" not in labels:
            have = {_taint_key(t) for t in taints}
            spec = claim.get("spec") or {}
            wanted = list(spec.get("taints") or []) + (list(spec.get("startupTaints") or []) if first else [])
            for t in wanted:
                if _taint_key(t) not in have:
                    taints.append({k: v for k, v in t.items() if k in ("key", "value", "effect")})
                    have.add(_taint_key(t))
        self.client.patch(R.NODES, node.name, {
            "metadata": {"labels": labels, "annotations": annotations, "finalizers": finalizers,
                         "ownerReferences": owners,
                         "resourceVersion": node.resource_version or None},
            "spec": {"taints": taints}})

    def _remove_unregistered_taint(self, node: NodeView) -> None:
        """Remove the unregistered taint if it is (still, or again) there. Other writers replace the whole taint list
        (the node lifecycle controller's not-ready taint), so a registration's removal can be lost to a concurrent
        write; a JSON patch naming the entry removes exactly it."""
        for i, t in enumerate(node.taints):
            if UNREGISTERED_TAINT.matches(Taint.from_dict(dict(t))):
                with contextlib.suppress(NotFoundError, InvalidError):  # InvalidError: the list changed meanwhile
                    self.client.patch(R.NODES, node.name, [
                        {"op": "test", "path": f"/spec/taints/{i}/key", "value": UNREGISTERED_TAINT.key},
                        {"op": "test", "path": f"/spec/taints/{i}/effect", "value": UNREGISTERED_TAINT.effect},
                        {"op": "remove", "path": f"/spec/taints/{i}"}], patch_type="json")
                return

    # ---- initialization ----------------------------------------------------------------------------------------
    def _initialize(self, claim: dict[str, Any]) -> Result:
        status = claim["status"]
        if C.is_true(status, "Initialized"):
            if not C.is_true(status, "Ready"):
                C.set_condition(status, "Ready", True, "Ready")
                self._write_status(claim)
            return Result()
        node = self.cluster.node(str(status.get("nodeName", "")))
        if node is None:
            return Result(requeue_after=5.0)
        self._remove_unregistered_taint(node)
        why = self._not_initialized(claim, node)
        if why:
            if C.set_condition(status, "Initialized", None, "NotInitialized", why):
                self._write_status(claim)
            return Result(requeue_after=30.0)
        if not node.initialized:
            self.client.patch(R.NODES, node.name, {"metadata": {"labels": {L.INITIALIZED: "true"}}})
        C.set_condition(status, "Initialized", True, "Initialized")
        C.set_condition(status, "Ready", True, "Ready")
        self._write_status(claim)
        log.info("initialized nodeclaim", extra={**_ref(claim), "Node": {"name": node.name}, "taints": node.taints,
                                                 "allocatable": node.status.get("allocatable", {}),
                                                 "controller": "nodeclaim.lifecycle"})
        return Result()

    def _not_initialized(self, claim: dict[str, Any], node: dict[str, Any]) -> str:
        """Why the node is not initialized yet ("" when it is): Ready, startup and ephemeral taints gone, requested
        extended resources registered."""
        view = NodeView.of(node)
        if not view.ready:
            return "Node not ready"
        taints = [Taint.from_dict(dict(t)) for t in view.taints]
        for startup in (claim.get("spec") or {}).get("startupTaints") or []:
            if any(Taint.from_dict(startup).matches(t) for t in taints):
                return f"StartupTaint \"{startup.get('key')}:{startup.get('effect')}\" still exists"
        for t in taints:
            if is_known_ephemeral(t):
                return f"KnownEphemeralTaint \"{t.key}:{t.effect}\" still exists"
        try:
            requested = resources_from_dict(((claim.get("spec") or {}).get("resources") or {}).get("requests"))
            allocatable = view.allocatable
        except QuantityError:
            return ""
        for resource, amount in requested.items():
            if resource not in WELL_KNOWN_RESOURCES and amount > 0 and allocatable.get(resource, 0) <= 0:
                return f'Resource "{resource}" was requested but not registered'
        return ""
