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
