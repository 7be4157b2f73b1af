"""The in-memory cluster: informers for the objects Karpenter watches, with the indexes the controllers ask for.

Objects are parsed once, as the informer stores them, into typed views (controller.state.views: the API's JSON with
managed fields and unused pod status stripped, read through typed properties), shared read-only: a controller copies
before it changes anything. `synced()` is Karpenter's gate: nothing is decided until every informer has listed
and every NodeClaim this process created is visible, so a batch never launches the same capacity twice.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

from controller.api.pods import owned_by_daemonset
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.informer import Informer, key_of, strip_managed_fields
from controller.scheduling.volumes import VolumeTopology
from controller.state import usage
from controller.state.views import NodeClaimView, NodeView, PodView

Obj = dict[str, Any]

# pod status fields the controllers read; the rest (container statuses, IPs) is dropped at the edge
_POD_STATUS_KEYS = ("phase", "conditions", "nominatedNodeName", "startTime")
# container fields the controllers read (requests, host ports, a sidecar's restartPolicy, device claims); image,
# command, env, probes and mounts are most of a pod's bytes and no controller reads them
_CONTAINER_KEYS = ("name", "resources", "restartPolicy")
# volume sources whose contents decide something (zones, drain waits); the others keep only their kind
_VOLUME_KEPT = ("persistentVolumeClaim", "ephemeral", "hostPath", "local")
# an annotation as large as the object it describes, read by kubectl apply only
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _interned(value: Any) -> Any:
    """The value with its dict keys and short strings interned: thousands of pods share the same keys, namespaces,
    label values and condition types, which a JSON decode otherwise allocates once per pod."""
    if isinstance(value, dict):
        return {sys.intern(k) if type(k) is str else k: _interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(v) for v in value]
    if type(value) is str and len(value) <= 64:
        return sys.intern(value)
    return value


def _compact_container(c: Any) -> Any:
    if not isinstance(c, dict):
        return c  # left for validation to report
    out = {k: c[k] for k in _CONTAINER_KEYS if k in c}
    ports = [p for p in c.get("ports") or [] if isinstance(p, dict) and p.get("hostPort")]
    if ports:
        out["ports"] = ports
    return out


def _compact_volume(v: Any) -> Any:
    if not isinstance(v, dict) or any(k in v for k in _VOLUME_KEPT):
        return v
    return {k: ({} if isinstance(val, dict) else val) for k, val in v.items()}


def compact_pod(pod: Obj) -> PodView:
    """A pod as the controllers read it: no managed fields or last-applied annotation, containers reduced to what
    scheduling and draining read, volume sources that decide nothing reduced to their kind, only the status parts
    read, and common strings shared between pods. Dropped at the informer's edge, so a cluster of many pods costs
    the controller the little it reads of each."""
    out = strip_managed_fields(pod)
    meta = out.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("annotations"), dict) and _LAST_APPLIED in meta["annotations"]:
        meta = dict(meta)
        meta["annotations"] = {k: v for k, v in meta["annotations"].items() if k != _LAST_APPLIED}
        out["metadata"] = meta
    spec = pod.get("spec")
    if isinstance(spec, dict):
        spec = {k: v for k, v in spec.items() if k != "ephemeralContainers"}
        for key in ("containers", "initContainers"):
            if isinstance(spec.get(key), list):
                spec[key] = [_compact_container(c) for c in spec[key]]
        if isinstance(spec.get("volumes"), list):
            spec["volumes"] = [_compact_volume(v) for v in spec["volumes"]]
        out["spec"] = spec
    status = pod.get("status") or {}
    out["status"] = {k: status[k] for k in _POD_STATUS_KEYS if k in status} if isinstance(status, dict) else {}
    return PodView(_interned(out))


def provider_id(obj: Obj | None) -> str:
    """A NodeClaim's status.providerID or a Node's spec.providerID ("" when not set)."""
    if obj is None:
        return ""
    if isinstance(obj, NodeView | NodeClaimView):
        return obj.provider_id
    if obj.get("kind") == "Node" or "providerID" in (obj.get("spec") or {}):
        return str((obj.get("spec") or {}).get("providerID") or "")
    return str((obj.get("status") or {}).get("providerID") or "")


def condition(obj: Obj | None, type_: str) -> Obj | None:
    """The status condition of that type, if any."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == type_:
            return c
    return None


def is_true(obj: Obj | None, type_: str) -> bool:
    """Whether the condition of that type is True."""
    c = condition(obj, type_)
    return c is not None and c.get("status") == "True"


def is_mirror(pod: Obj) -> bool:
    """A static pod's mirror (managed by the kubelet, never evicted or provisioned for)."""
    return PodView.of(pod).mirror


def is_terminal(pod: Obj) -> bool:
    """Succeeded or Failed."""
    return PodView.of(pod).terminal


def is_provisionable(pod: Obj) -> bool:
    """Karpenter's provisionable pod: kube-scheduler marked it Unschedulable, unbound, not preempting, not terminal or
    terminating, not a DaemonSet's or a mirror pod."""
    view = PodView.of(pod)
    if view.node_name or view.deleting or view.terminal or view.nominated_node_name:
        return False
    if owned_by_daemonset(view) or view.mirror:
        return False
    c = view.condition("PodScheduled")
    return c is not None and c.get("status") == "False" and c.get("reason") == "Unschedulable"


def daemonset_controller(pod: Obj) -> str:
    """The UID of the DaemonSet that controls the pod ("" when none does)."""
    return PodView.of(pod).daemonset_uid


def _reindex(forward: dict[str, str], reverse: dict[str, set[str]], key: str, value: str) -> None:
    """Move key to value ("" for none) in a forward map and its reverse index, dropping emptied index entries."""
    prev = forward.pop(key, "")
    if prev:
        reverse[prev].discard(key)
        if not reverse[prev]:
            del reverse[prev]
    if value:
        forward[key] = value
        reverse[value].add(key)


class InformerView(Mapping[Any, Obj]):
    """An informer's store read as a mapping, keyed as the caller keys it (e.g. (namespace, name) for claims): the
    scheduler's inputs read the live cache without copying it."""

    def __init__(self, informer: Informer, key: Callable[[Any], str] = str) -> None:
        self._informer = informer
        self._key = key

    def __getitem__(self, k: Any) -> Obj:
        obj = self._informer.get(self._key(k))
        if obj is None:
            raise KeyError(k)
        return obj

    def __iter__(self) -> Iterator[Any]:
        return iter(key_of(o) for o in self._informer.items())

    def __len__(self) -> int:
        return len(self._informer.items())


class Cluster:
    """Informers for nodes, pods, NodeClaims, NodePools, EC2NodeClasses, DaemonSets, PDBs, namespaces and the
    volume objects a pod's zone depends on (PVCs, PVs, StorageClasses), plus indexes."""

    def __init__(self, client: KubeClient, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.clock = clock
        self.nodes_informer = Informer(client, R.NODES, transform=lambda o: NodeView(strip_managed_fields(o)),
                                       name="nodes")
        self.pods_informer = Informer(client, R.PODS, transform=compact_pod, name="pods")
        self.nodeclaims_informer = Informer(client, R.NODECLAIMS,
                                            transform=lambda o: NodeClaimView(strip_managed_fields(o)),
                                            name="nodeclaims")
        self.nodepools_informer = Informer(client, R.NODEPOOLS, name="nodepools")
        self.nodeclasses_informer = Informer(client, R.EC2NODECLASSES, name="ec2nodeclasses")
        self.daemonsets_informer = Informer(client, R.DAEMONSETS, name="daemonsets")
        self.pdbs_informer = Informer(client, R.PDBS, name="poddisruptionbudgets")
        self.namespaces_informer = Informer(client, R.NAMESPACES, name="namespaces")
        self.pvcs_informer = Informer(client, R.PERSISTENTVOLUMECLAIMS, name="persistentvolumeclaims")
        self.pvs_informer = Informer(client, R.PERSISTENTVOLUMES, name="persistentvolumes")
        self.storageclasses_informer = Informer(client, R.STORAGECLASSES, name="storageclasses")
        # what a draining node's termination waits on, indexed by node (Karpenter's VolumeAttachment field index)
        self.volumeattachments_informer = Informer(client, R.VOLUMEATTACHMENTS, name="volumeattachments")
        self.volumeattachments_informer.add_index(
            "node", lambda va: [str((va.get("spec") or {}).get("nodeName") or "")])
        self._lock = threading.Lock()
        self._pods_by_node: dict[str, set[str]] = defaultdict(set)
        self._pod_node: dict[str, str] = {}
        self._nodeclaim_by_pid: dict[str, str] = {}
        self._node_by_pid: dict[str, str] = {}
        self._pods_by_daemonset: dict[str, set[str]] = defaultdict(set)  # DaemonSet uid -> its pods' keys
        self._pod_daemonset: dict[str, str] = {}
        self._provisionable: set[str] = set()  # keys of provisionable pods
        self._created: dict[str, float] = {}  # NodeClaims this process created, until the informer shows them
        self.pods_informer.add_handler(self._on_pod)
        self.nodes_informer.add_handler(self._on_node)
        self.nodeclaims_informer.add_handler(self._on_nodeclaim)

    @property
    def informers(self) -> list[Informer]:
        """Every informer, in the order they should start."""
        return [self.nodepools_informer, self.nodeclasses_informer, self.nodeclaims_informer, self.nodes_informer,
                self.daemonsets_informer, self.pdbs_informer, self.namespaces_informer, self.pvcs_informer,
                self.pvs_informer, self.storageclasses_informer, self.volumeattachments_informer,
                self.pods_informer]

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        """Start every informer's list+watch loop."""
        return [i.start(stop) for i in self.informers]

    def wait_synced(self, stop: threading.Event, timeout: float = 120.0) -> bool:
        """Block until synced (or stop/timeout)."""
        deadline = time.monotonic() + timeout
        while not stop.is_set() and time.monotonic() < deadline:
            if self.synced():
                return True
            stop.wait(0.05)
        return self.synced()

    # ---- index maintenance (informer threads) ------------------------------------------------------------------
    def _on_pod(self, event: str, old: Obj | None, new: Obj | None) -> None:
        obj = new if new is not None else old
        if obj is None:
            return
        key = key_of(obj)
        gone = event == "DELETED" or new is None
        node = "" if gone or new is None else str((new.get("spec") or {}).get("nodeName") or "")
        owner = "" if gone or new is None else daemonset_controller(new)
        with self._lock:
            _reindex(self._pod_node, self._pods_by_node, key, node)
            _reindex(self._pod_daemonset, self._pods_by_daemonset, key, owner)
            if not gone and new is not None and is_provisionable(new):
                self._provisionable.add(key)
            else:
                self._provisionable.discard(key)

    def _on_node(self, event: str, old: Obj | None, new: Obj | None) -> None:
        with self._lock:
            if old is not None and provider_id(old):
                self._node_by_pid.pop(provider_id(old), None)
            if new is not None and event != "DELETED" and provider_id(new):
                self._node_by_pid[provider_id(new)] = new["metadata"]["name"]

    def _on_nodeclaim(self, event: str, old: Obj | None, new: Obj | None) -> None:
        with self._lock:
            if old is not None and provider_id(old):
                self._nodeclaim_by_pid.pop(provider_id(old), None)
            if new is not None and event != "DELETED":
                name = new["metadata"]["name"]
                self._created.pop(name, None)
                if provider_id(new):
                    self._nodeclaim_by_pid[provider_id(new)] = name

    # ---- the synced gate ---------------------------------------------------------------------------------------
    def mark_created(self, name: str) -> None:
        """Remember a NodeClaim this process created: state is not synced until the informer shows it."""
        with self._lock:
            if self.nodeclaims_informer.get(name) is None:
                self._created[name] = self.clock()

    def synced(self) -> bool:
        """Every informer has listed and every NodeClaim created here is visible (those older than a minute are
        given up on: the informer relists and will say)."""
        if not all(i.has_synced() for i in self.informers):
            return False
        with self._lock:
            now = self.clock()
            for name, at in list(self._created.items()):
                if now - at > 60:
                    del self._created[name]
            return not self._created

    # ---- reads -------------------------------------------------------------------------------------------------
    def nodeclaim(self, name: str) -> NodeClaimView | None:
        """The NodeClaim of that name."""
        return cast(NodeClaimView | None, self.nodeclaims_informer.get(name))

    def node(self, name: str) -> NodeView | None:
        """The Node of that name."""
        return cast(NodeView | None, self.nodes_informer.get(name))

    def nodeclaims(self) -> list[NodeClaimView]:
        """Every NodeClaim."""
        return cast(list[NodeClaimView], self.nodeclaims_informer.items())

    def nodes(self) -> list[NodeView]:
        """Every Node."""
        return cast(list[NodeView], self.nodes_informer.items())

    def pods(self) -> list[PodView]:
        """Every pod."""
        return cast(list[PodView], self.pods_informer.items())

    def pod(self, key: str) -> PodView | None:
        """The pod namespace/name."""
        return cast(PodView | None, self.pods_informer.get(key))

    def nodeclaim_for_provider_id(self, pid: str) -> NodeClaimView | None:
        """The NodeClaim whose status.providerID is pid."""
        with self._lock:
            name = self._nodeclaim_by_pid.get(pid)
        return self.nodeclaim(name) if name else None

    def node_for_provider_id(self, pid: str) -> NodeView | None:
        """The Node whose spec.providerID is pid."""
        with self._lock:
            name = self._node_by_pid.get(pid)
        return self.node(name) if name else None

    def nodeclaim_for_node(self, node: Obj) -> NodeClaimView | None:
        """The NodeClaim behind a Node, by providerID."""
        pid = provider_id(node)
        return self.nodeclaim_for_provider_id(pid) if pid else None

    def pods_on_node(self, node_name: str) -> list[PodView]:
        """Pods bound to the node."""
        with self._lock:
            keys = list(self._pods_by_node.get(node_name, ()))
        return [p for p in (self.pod(k) for k in keys) if p is not None]

    def nodepool_usage(self, unlaunched: Callable[[NodeClaimView], Mapping[str, int]] | None = None
                       ) -> dict[str, dict[str, int]]:
        """What each NodePool's nodes hold against its limits, by Karpenter's rule (controller.state.usage)."""
        return usage.nodepool_usage(self.nodeclaims(), self.nodes(), unlaunched=unlaunched)

    def volume_attachments_on_node(self, node_name: str) -> list[Obj]:
        """VolumeAttachments whose spec.nodeName is the node (from the index: no list call)."""
        return self.volumeattachments_informer.by_index("node", node_name)

    def persistent_volume_claim(self, namespace: str, name: str) -> Obj | None:
        """A PersistentVolumeClaim from the informer's cache."""
        return self.pvcs_informer.get(f"{namespace}/{name}")

    def pending_pods(self) -> list[PodView]:
        """Provisionable pods, in a stable order (from the index: no pass over every pod)."""
        with self._lock:
            keys = sorted(self._provisionable)
        return [p for p in (self.pod(k) for k in keys) if p is not None and is_provisionable(p)]

    def has_provisionable_pods(self) -> bool:
        """Whether any pod is provisionable."""
        with self._lock:
            return bool(self._provisionable)

    def pdbs(self) -> list[Obj]:
        """Every PodDisruptionBudget."""
        return self.pdbs_informer.items()

    def daemonsets(self) -> list[Obj]:
        """Every DaemonSet."""
        return self.daemonsets_informer.items()

    def daemonset_pod(self, daemonset: Obj) -> Obj | None:
        """The newest live pod the DaemonSet controls (as Karpenter's cluster state keeps it): its requests are what
        LimitRanges and admission webhooks made of the template, so they size the per-node overhead best."""
        uid = str((daemonset.get("metadata") or {}).get("uid") or "")
        if not uid:
            return None
        with self._lock:
            keys = list(self._pods_by_daemonset.get(uid, ()))
        from controller.provisioning.inputs import newest_daemonset_pod

        return newest_daemonset_pod(p for p in (self.pods_informer.get(k) for k in keys) if p is not None)

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        """Every namespace's labels, by name (for pod affinity terms' namespaceSelector)."""
        return {str(ns["metadata"]["name"]): dict((ns.get("metadata") or {}).get("labels") or {})
                for ns in self.namespaces_informer.items()}

    def volume_topology(self) -> VolumeTopology:
        """PVCs, PVs and StorageClasses as the scheduler's inputs read them, straight from the informers' caches."""
        return VolumeTopology(pvcs=InformerView(self.pvcs_informer, lambda k: f"{k[0]}/{k[1]}"),
                              pvs=InformerView(self.pvs_informer),
                              storage_classes=InformerView(self.storageclasses_informer))

    def nodepools(self) -> list[Obj]:
        """Every NodePool."""
        return self.nodepools_informer.items()

    def nodepool(self, name: str) -> Obj | None:
        """The NodePool of that name."""
        return self.nodepools_informer.get(name)

    def nodeclasses(self) -> list[Obj]:
        """Every EC2NodeClass."""
        return self.nodeclasses_informer.items()

    def nodeclass(self, name: str) -> Obj | None:
        """The EC2NodeClass of that name."""
        return self.nodeclasses_informer.get(name)

    def nodeclaims_for_nodeclass(self, name: str) -> list[NodeClaimView]:
        """NodeClaims whose nodeClassRef names this EC2NodeClass."""
        return [c for c in self.nodeclaims() if c.nodeclass_name == name]

    def nodeclaims_for_nodepool(self, name: str) -> list[NodeClaimView]:
        """NodeClaims created from this NodePool (by the karpenter.sh/nodepool label)."""
        return [c for c in self.nodeclaims() if c.nodepool == name]
