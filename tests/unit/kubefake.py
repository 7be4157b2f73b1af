"""An in-memory apiserver for the controllers' unit tests: objects by (plural, namespace, name), merge patches, deletion
with finalizers, generateName, resourceVersion conflicts, and every write fed to a real Cluster's informers as the
watch would, so the controllers under test read their own writes through the same cache as in production."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
from typing import Any

from controller.kube import resources as R
from controller.kube.errors import ConflictError, InvalidError, NotFoundError
from controller.state.cluster import Cluster

Obj = dict[str, Any]


def stamp(epoch: float) -> str:
    """An RFC 3339 timestamp."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge(into: Obj, patch: Obj) -> None:
    """RFC 7386 merge patch: None removes, dicts merge, anything else replaces."""
    for k, v in patch.items():
        if v is None:
            into.pop(k, None)
        elif isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


class FakeKube:
    """Just enough of KubeClient for the provisioner, the lifecycle, the nodepool status and the hash controller."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.now = now
        self._rv = itertools.count(1)
        self._uid = itertools.count(1)
        self.cluster = Cluster(self)
        for informer in self.cluster.informers:
            informer._synced.set()
        self.writes: list[tuple[str, str, str]] = []  # (verb, plural, name)

    # ---- plumbing ----------------------------------------------------------------------------------------------
    def _feed(self, res: R.Resource, event: str, obj: Obj) -> None:
        for informer in self.cluster.informers:
            if informer.res.plural == res.plural:
                informer._apply(event, copy.deepcopy(obj))

    def _key(self, res: R.Resource, name: str, namespace: str | None) -> tuple[str, str, str]:
        key = (res.plural, namespace or "", name)
        if key not in self.objects:
            raise NotFoundError(404, "NotFound", f"{res.plural} {name!r} not found")
        return key

    def add(self, res: R.Resource, obj: Obj) -> Obj:
        """Store an object as if someone else created it (and the watch delivered it)."""
        return self.create(res, obj, (obj.get("metadata") or {}).get("namespace"), record=False)

    # ---- the KubeClient surface --------------------------------------------------------------------------------
    def create(self, res: R.Resource, body: Obj, namespace: str | None = None, record: bool = True) -> Obj:
        """Create (generateName honoured)."""
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName', 'x-')}{next(self._uid):05d}"
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("creationTimestamp", stamp(self.now))
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(next(self._rv))
        obj.setdefault("kind", res.kind)
        obj.setdefault("apiVersion", res.api_version)
        key = (res.plural, namespace or meta.get("namespace") or "", meta["name"])
        if key in self.objects:
            raise ConflictError(409, "AlreadyExists", meta["name"])
        self.objects[key] = obj
        if record:
            self.writes.append(("create", res.plural, meta["name"]))
        self._feed(res, "ADDED", obj)
        return copy.deepcopy(obj)

    def get(self, res: R.Resource, name: str, namespace: str | None = None) -> Obj:
        """Get."""
        return copy.deepcopy(self.objects[self._key(res, name, namespace)])

    def list(self, res: R.Resource, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[Obj], str]:
        """List."""
        return [copy.deepcopy(o) for (p, ns, _), o in self.objects.items()
                if p == res.plural and (namespace is None or ns == namespace)], "1"

    def patch(self, res: R.Resource, name: str, body: Any, namespace: str | None = None,
              subresource: str | None = None, patch_type: str = "merge") -> Obj:
        """Merge patch (a resourceVersion in the body is a precondition); JSON patches are taken as applied."""
        key = self._key(res, name, namespace)
        obj = self.objects[key]
        if isinstance(body, dict):
            body = copy.deepcopy(body)
            rv = (body.get("metadata") or {}).pop("resourceVersion", None)
            if rv is not None and rv != obj["metadata"]["resourceVersion"]:
                raise ConflictError(409, "Conflict", "the object has been modified")
            if subresource == "status":
                body = {"status": body.get("status")}
            _merge(obj, body)
        else:  # JSON patch: test and remove, the ops the controllers send
            for op in body:
                *parents, last = op["path"].strip("/").split("/")
                target: Any = obj
                for part in parents:
                    target = target[int(part)] if isinstance(target, list) else target[part]
                index = int(last) if isinstance(target, list) else last
                if op["op"] == "test" and target[index] != op["value"]:
                    raise InvalidError(422, "Invalid", f"test failed at {op['path']}")
                if op["op"] == "remove":
                    del target[index]
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self.writes.append(("patch" + (f"/{subresource}" if subresource else ""), res.plural, name))
        if obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
            del self.objects[key]
            self._feed(res, "DELETED", obj)
        else:
            self._feed(res, "MODIFIED", obj)
        return copy.deepcopy(obj)

    def delete(self, res: R.Resource, name: str, namespace: str | None = None,
               grace_period_seconds: int | None = None, uid: str | None = None) -> None:
        """Delete: with finalizers, only a deletionTimestamp."""
        key = self._key(res, name, namespace)
        obj = self.objects[key]
        self.writes.append(("delete", res.plural, name))
        if obj["metadata"].get("finalizers"):
            if not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = stamp(self.now)
                obj["metadata"]["resourceVersion"] = str(next(self._rv))
                self._feed(res, "MODIFIED", obj)
            return
        del self.objects[key]
        self._feed(res, "DELETED", obj)


class FakeRecorder:
    """Events published, as (object name, type, reason, message)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def publish(self, obj: Obj, type_: str, reason: str, message: str, **dedupe: Any) -> None:
        """Record one event (every one: the dedupe values and window are the real Recorder's to apply)."""
        self.events.append((str((obj.get("metadata") or {}).get("name")), type_, reason, message))
