"""The informer's watch loop: a BOOKMARK advances the resourceVersion the next watch resumes from and is not an
object change."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from controller.kube import resources as R
from controller.kube.informer import Informer


class _BookmarkingClient:
    """A client whose list is empty at rv 10 and whose first watch sends one BOOKMARK at rv 50, then closes."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.watched_from: list[str] = []

    def list(self, res: R.Resource, namespace: str | None = None) -> tuple[list[dict[str, Any]], str]:
        return [], "10"

    def watch(self, res: R.Resource, resource_version: str, timeout_seconds: int = 300,
              namespace: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        self.watched_from.append(resource_version)
        if len(self.watched_from) == 1:
            yield "BOOKMARK", {"kind": "ConfigMap", "metadata": {"resourceVersion": "50"}}
        else:
            self.stop.set()


def test_a_bookmark_moves_the_resume_point_and_changes_nothing() -> None:
    stop = threading.Event()
    client = _BookmarkingClient(stop)
    inf = Informer(client, R.CONFIGMAPS)
    events: list[str] = []
    inf.add_handler(lambda e, old, new: events.append(e))
    inf.run(stop)
    assert client.watched_from == ["10", "50"]
    assert inf.items() == [] and events == []


class _ListingClient:
    """A client whose list answers the objects given, and whose watch sends the events given, then stops."""

    def __init__(self, stop: threading.Event, items: list[dict[str, Any]],
                 events: list[tuple[str, dict[str, Any]]]) -> None:
        self.stop, self.items, self.events = stop, items, events

    def list(self, res: R.Resource, namespace: str | None = None) -> tuple[list[dict[str, Any]], str]:
        return self.items, "1"

    def watch(self, res: R.Resource, resource_version: str, timeout_seconds: int = 300,
              namespace: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        yield from self.events
        self.stop.set()


def _va(name: str, node: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}, "spec": {"nodeName": node}}


def test_an_index_follows_list_moves_and_deletes() -> None:
    stop = threading.Event()
    client = _ListingClient(stop, [_va("a", "n1", "1"), _va("b", "n1", "1")],
                            [("MODIFIED", _va("b", "n2", "2")), ("DELETED", _va("a", "n1", "3")),
                             ("ADDED", _va("c", "n2", "4"))])
    inf = Informer(client, R.VOLUMEATTACHMENTS)
    inf.add_index("node", lambda o: [str((o.get("spec") or {}).get("nodeName") or "")])
    inf.run(stop)
    assert inf.by_index("node", "n1") == []
    assert sorted(o["metadata"]["name"] for o in inf.by_index("node", "n2")) == ["b", "c"]
    assert inf.by_index("node", "elsewhere") == []
