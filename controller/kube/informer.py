"""list+watch of one resource into a store, as client-go's reflector and informer do.

The first list is delivered to handlers as ADDED events; then the watch streams changes. When the watch ends, drops,
or answers 410 Gone, the informer relists and replays the difference (ADDED, MODIFIED, DELETED) so that no change is
lost, then watches again from the new list's resourceVersion. Watches ask for BOOKMARKs (allowWatchBookmarks), whose
resourceVersion the next watch resumes from, so a quiet resource does not fall behind compaction into a 410 relist.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from controller.kube.client import KubeClient
from controller.kube.errors import GoneError
from controller.kube.resources import Resource

log = logging.getLogger("karpy.kube")
Obj = dict[str, Any]
Handler = Callable[[str, Obj | None, Obj | None], None]
IndexFunc = Callable[[Obj], list[str]]


def key_of(obj: Obj) -> str:
    """name, or namespace/name."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def strip_managed_fields(obj: Obj) -> Obj:
    """The object without metadata.managedFields (a shallow copy of metadata)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = dict(obj)
        obj["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return obj


class Informer:
    """One resource's objects, kept current by list+watch, with change handlers."""

    def __init__(self, client: KubeClient, res: Resource, transform: Callable[[Obj], Obj] = strip_managed_fields,
                 namespace: str | None = None, name: str = "", watch_timeout: int = 300) -> None:
        self.client = client
        self.res = res
        self.transform = transform
        self.namespace = namespace
        self.name = name or res.plural
        self.watch_timeout = watch_timeout
        self._store: dict[str, Obj] = {}
        self._lock = threading.Lock()
        self._handlers: list[Handler] = []
        self._synced = threading.Event()
        self.relists = 0
        self._index_funcs: dict[str, IndexFunc] = {}
        self._indexes: dict[str, dict[str, set[str]]] = {}  # index name -> value -> keys (client-go's Indexer)

    def add_index(self, name: str, fn: IndexFunc) -> None:
        """Index the store by fn(obj) (the values an object is found under), before the informer starts."""
        self._index_funcs[name] = fn
        self._indexes[name] = {}

    def by_index(self, name: str, value: str) -> list[Obj]:
        """The objects fn(obj) maps to value, for the index named."""
        with self._lock:
            keys = self._indexes[name].get(value, set())
            return [self._store[k] for k in keys if k in self._store]

    def _index(self, key: str, old: Obj | None, new: Obj | None) -> None:
        """Move key from old's index values to new's (with the store lock held)."""
        for name, fn in self._index_funcs.items():
            index = self._indexes[name]
            for value in fn(old) if old is not None else []:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]
            for value in fn(new) if new is not None else []:
                index.setdefault(value, set()).add(key)

    def add_handler(self, fn: Handler) -> None:
        """Call fn(event, old, new) on every change (from the informer's thread)."""
        self._handlers.append(fn)

    def get(self, key: str) -> Obj | None:
        """The object with that key."""
        with self._lock:
            return self._store.get(key)

    def items(self) -> list[Obj]:
        """Every object (a list copy)."""
        with self._lock:
            return list(self._store.values())

    def has_synced(self) -> bool:
        """Whether the first list has been delivered."""
        return self._synced.is_set()

    def _emit(self, event: str, old: Obj | None, new: Obj | None) -> None:
        for fn in self._handlers:
            try:
                fn(event, old, new)
            except Exception:
                log.exception("informer handler failed", extra={"controller": f"informer.{self.name}"})

    def _apply(self, event: str, obj: Obj) -> None:
        obj = self.transform(obj)
        key = key_of(obj)
        with self._lock:
            old = self._store.get(key)
            if event == "DELETED":
                self._store.pop(key, None)
            else:
                self._store[key] = obj
            self._index(key, old, None if event == "DELETED" else obj)
        if event == "DELETED":
            self._emit("DELETED", old, None)
        else:
            self._emit("ADDED" if old is None else "MODIFIED", old, obj)

    def _relist(self) -> str:
        items, rv = self.client.list(self.res, self.namespace)
        fresh = {key_of(o): self.transform(o) for o in items}
        with self._lock:
            old_store = self._store
            self._store = dict(fresh)
            for name in self._indexes:
                self._indexes[name] = {}
            for key, obj in fresh.items():
                self._index(key, None, obj)
        for key, obj in fresh.items():
            old = old_store.get(key)
            if old is None:
                self._emit("ADDED", None, obj)
            elif (old.get("metadata") or {}).get("resourceVersion") != (obj.get("metadata") or {}).get(
                    "resourceVersion"):
                self._emit("MODIFIED", old, obj)
        for key, old in old_store.items():
            if key not in fresh:
                self._emit("DELETED", old, None)
        self.relists += 1
        self._synced.set()
        return rv

    def run(self, stop: threading.Event) -> None:
        """List, then watch; relist on 410 or a dropped watch; back off on errors; return only on stop."""
        backoff = 0.5
        rv = ""
        while not stop.is_set():
            try:
                if not rv:
                    rv = self._relist()
                for event, obj in self.client.watch(self.res, rv, self.watch_timeout, self.namespace):
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if event == "BOOKMARK":  # progress only: a later watch resumes from here, not from a compacted rv
                        continue
                    self._apply(event, obj)
                    backoff = 0.5
                    if stop.is_set():
                        return
                # the server closed the watch (timeout): resume from the last resourceVersion seen
            except GoneError:
                log.info("watch expired, relisting", extra={"controller": f"informer.{self.name}"})
                rv = ""
            except Exception as e:
                log.warning("watch failed, relisting", extra={"controller": f"informer.{self.name}",
                                                              "error": str(e)[:300]})
                rv = ""
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def start(self, stop: threading.Event) -> threading.Thread:
        """Run in a daemon thread."""
        t = threading.Thread(target=self.run, args=(stop,), name=f"informer-{self.name}", daemon=True)
        t.start()
        return t
