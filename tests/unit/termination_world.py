"""An in-memory world for the termination controllers' unit tests: just enough of the API server (finalizers,
merge / strategic / JSON patches, evictions with the UID precondition), the informer reads, the cloud and the event
recorder, with a deleted NodeClaim c1 (Registered) and its Node n1, both holding karpenter.sh/termination."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from controller.cloud.errors import NodeClaimNotFoundError
from controller.kube import resources as R
from controller.kube.errors import ConflictError, InvalidError, NotFoundError
from controller.nodeclaim.termination import NodeClaimTerminationController
from controller.state.views import NodeClaimView, NodeView, PodView
from controller.termination import drain as D
from controller.termination.controller import TerminationController

NOW = 1_700_000_000.0


class FakeAPI:
    """Just enough of KubeClient for the termination controllers: objects by (plural, namespace, name), deletion with
    finalizers, merge / strategic / JSON patches of the shapes they send, evictions."""

    def __init__(self, clock: list[float]) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.clock = clock
        self.rv = 1
        self.evicted: list[str] = []

    def add(self, res: Any, obj: dict[str, Any]) -> None:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(self.rv)
        self.rv += 1
        obj.setdefault("kind", res.kind)
        self.objects[(res.plural, meta.get("namespace") or "", meta["name"])] = obj

    def _key(self, res: Any, name: str, namespace: str | None) -> tuple[str, str, str]:
        key = (res.plural, namespace or "", name)
        if key not in self.objects:
            raise NotFoundError(404, "NotFound", name)
        return key

    def get(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        assert res.plural != "persistentvolumeclaims", "termination reads PVCs from the informer"
        return copy.deepcopy(self.objects[self._key(res, name, namespace)])

    def list(self, res: Any, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[dict[str, Any]], str]:
        assert res.plural != "volumeattachments", "termination reads VolumeAttachments from the indexed informer"
        return [copy.deepcopy(o) for (p, ns, _), o in self.objects.items()
                if p == res.plural and (namespace is None or ns == namespace)], str(self.rv)

    def patch(self, res: Any, name: str, body: Any, namespace: str | None = None, subresource: str | None = None,
              patch_type: str = "merge") -> dict[str, Any]:
        key = self._key(res, name, namespace)
        obj = self.objects[key]
        if patch_type == "json":
            for op in body:
                index = int(op["path"].rsplit("/", 1)[1])
                if op["op"] == "test" and obj["metadata"]["finalizers"][index] != op["value"]:
                    raise InvalidError(422, "Invalid", "test failed")
                if op["op"] == "remove":
                    del obj["metadata"]["finalizers"][index]
        else:
            body = dict(body)
            meta = dict(body.pop("metadata", {}) or {})
            rv = meta.pop("resourceVersion", None)
            if rv is not None and rv != obj["metadata"]["resourceVersion"]:
                raise ConflictError(409, "Conflict", "stale")
            drop = meta.pop("$deleteFromPrimitiveList/finalizers", [])
            obj["metadata"]["finalizers"] = [f for f in obj["metadata"].get("finalizers") or [] if f not in drop]
            for k, v in meta.items():
                obj["metadata"].setdefault(k, {}).update(v)
            for section, value in body.items():
                if patch_type == "strategic" and section == "spec" and "taints" in value:
                    taints = [t for t in obj["spec"].get("taints") or []
                              if t["key"] not in {n["key"] for n in value["taints"]}]
                    obj["spec"]["taints"] = taints + value["taints"]
                else:
                    obj.setdefault(section, {}).update(value)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.rv += 1
        if obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
            del self.objects[key]
        return self.get(res, name, namespace) if key in self.objects else obj

    def delete(self, res: Any, name: str, namespace: str | None = None, grace_period_seconds: int | None = None,
               uid: str | None = None) -> None:
        key = self._key(res, name, namespace)
        obj = self.objects[key]
        if obj["metadata"].get("finalizers"):
            obj["metadata"].setdefault("deletionTimestamp", D.format_time(self.clock[0]))
        else:
            del self.objects[key]

    def evict(self, namespace: str, name: str, grace_period_seconds: int | None = None,
              uid: str | None = None) -> None:
        self._key(type("P", (), {"plural": "pods"}), name, namespace)
        if uid != self.objects[("pods", namespace, name)]["metadata"]["uid"]:  # the API's precondition check
            raise ConflictError(409, "Conflict", "Precondition failed: UID in precondition does not match")
        self.evicted.append(name)
        del self.objects[("pods", namespace, name)]


class FakeState:
    """The Cluster reads the termination controllers make, straight from the FakeAPI, as the Cluster's informers
    give them: Pods, Nodes and NodeClaims as typed views."""

    def __init__(self, api: FakeAPI) -> None:
        self.api = api

    def pods_on_node(self, node: str) -> list[PodView]:
        return [PodView(o) for (p, _, _), o in self.api.objects.items()
                if p == "pods" and o["spec"].get("nodeName") == node]

    def node_for_provider_id(self, pid: str) -> NodeView | None:
        return next((NodeView(o) for (p, _, _), o in self.api.objects.items()
                     if p == "nodes" and o["spec"].get("providerID") == pid), None)

    def nodeclaim_for_provider_id(self, pid: str) -> NodeClaimView | None:
        return next((NodeClaimView(o) for (p, _, _), o in self.api.objects.items()
                     if p == "nodeclaims" and (o.get("status") or {}).get("providerID") == pid), None)

    def volume_attachments_on_node(self, node: str) -> list[dict[str, Any]]:
        return [o for (p, _, _), o in self.api.objects.items()
                if p == "volumeattachments" and o["spec"].get("nodeName") == node]

    def persistent_volume_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.api.objects.get(("persistentvolumeclaims", namespace, name))


class FakeCloud:
    def __init__(self, pid: str) -> None:
        self.instances = {pid}
        self.deleted: list[str] = []

    def get(self, pid: str) -> None:
        if pid not in self.instances:
            raise NodeClaimNotFoundError(pid)

    def delete(self, pid: str) -> None:
        self.get(pid)
        self.deleted.append(pid)


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def publish(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], reason, message))


PID = "aws:///us-east-1a/i-0abc"


def world(*, registered: bool = True) -> Any:
    """The fake world: a deleted NodeClaim c1 (Registered unless told otherwise) and its Node n1; `claims()` and
    `nodes()` build fresh controllers over it (nothing carried between passes, as after a restart)."""
    clock = [NOW]
    api = FakeAPI(clock)
    api.add(R.NODES, {"metadata": {"name": "n1", "finalizers": ["karpenter.sh/termination"], "labels": {}},
                      "spec": {"providerID": PID},
                      "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    conditions = [{"type": "Registered", "status": "True", "reason": "Registered",
                   "lastTransitionTime": D.format_time(NOW - 600)}] if registered else []
    api.add(R.NODECLAIMS, {"metadata": {"name": "c1", "finalizers": ["karpenter.sh/termination"]},
                           "spec": {}, "status": {"providerID": PID, "nodeName": "n1", "conditions": conditions}})
    api.delete(R.NODECLAIMS, "c1")
    cloud = FakeCloud(PID)
    recorder = FakeRecorder()
    state = FakeState(api)
    return SimpleNamespace(
        api=api, clock=clock, cloud=cloud, recorder=recorder,
        claims=lambda: NodeClaimTerminationController(api, state, cloud, recorder,
                                                      clock=lambda: clock[0]),
        nodes=lambda: TerminationController(api, state, cloud, recorder,
                                            clock=lambda: clock[0]))


def conditions(w: Any) -> dict[str, str]:
    """c1's conditions by type, without Registered ({} once it is gone)."""
    claim = w.api.objects.get(("nodeclaims", "", "c1"))
    return {c["type"]: c["status"] for c in ((claim or {}).get("status") or {}).get("conditions") or []
            if c["type"] != "Registered"}


def counter(name: str) -> float:
    """A counter of controller.metrics by constant name, for the labels a label-less fake object gets (all empty)."""
    from controller import metrics
    metric = getattr(metrics, name)
    labels = dict.fromkeys(metric._labelnames, "")
    return metrics.REGISTRY.get_sample_value(f"{metric._name}_total", labels) or 0.0


def histogram(name: str, suffix: str) -> float:
    """A histogram's _count or _sum (by the metric's constant name), for empty labels."""
    from controller import metrics
    metric = getattr(metrics, name)
    labels = dict.fromkeys(metric._labelnames, "")
    return metrics.REGISTRY.get_sample_value(f"{metric._name}_{suffix}", labels) or 0.0
