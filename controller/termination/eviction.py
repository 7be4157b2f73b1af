"""Karpenter's eviction queue (pkg/controllers/node/termination/terminator/eviction.go): pods evicted through the
Eviction API with the pod's UID as a precondition, one exponential backoff per pod on refusals (100 ms doubling to
10 s), PDB refusals reported on the node, and pods acted on recently left alone while the cache catches up."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from controller import metrics as M
from controller.kube.client import KubeClient
from controller.kube.errors import ConflictError, KubeError, NotFoundError, TooManyRequestsError
from controller.kube.events import Recorder
from controller.termination import drain as D

log = logging.getLogger("karpy.termination")

Obj = dict[str, Any]

MULTIPLE_PDBS = "This pod has more than one PodDisruptionBudget"
RECENT_ACTION = 10.0  # seconds a pod we evicted or deleted is not acted on again while the cache catches up


def pod_key(pod: Obj) -> str:
    """The pod's UID (namespace/name when it has none): a replacement with the same name is another pod."""
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


class EvictionQueue:
    """Evictions of the pods the drain picks, with their backoff and recent-action bookkeeping (thread-safe)."""

    def __init__(self, client: KubeClient, recorder: Recorder) -> None:
        self.client = client
        self.recorder = recorder
        self._state = threading.Lock()
        self._backoff = D.PodBackoff()
        self._recent: dict[str, float] = {}

    def next_try(self, pods: Iterable[Obj], now: float) -> float | None:
        """Seconds until the earliest of these pods may be tried again (None when none is backing off)."""
        with self._state:
            return self._backoff.next_try([pod_key(p) for p in pods], now)

    def acted_recently(self, key: str, now: float) -> bool:
        """Whether the pod was evicted or deleted within RECENT_ACTION seconds (the cache may still show it)."""
        with self._state:
            for k, at in list(self._recent.items()):
                if now - at > RECENT_ACTION:
                    del self._recent[k]
            return key in self._recent

    def acted(self, key: str, now: float) -> None:
        """The pod was evicted or deleted now: leave it alone while the cache catches up, and forget its backoff."""
        with self._state:
            self._recent[key] = now
            self._backoff.forget(key)

    def evict(self, pod: Obj, node: Obj, now: float, reason: str) -> None:
        """Evict one pod through the Eviction API; a PDB refusal (429) backs that pod off and is reported."""
        key = pod_key(pod)
        meta = pod.get("metadata") or {}
        if self.acted_recently(key, now):
            return
        with self._state:
            if not self._backoff.ready(key, now):
                return
        try:
            self.client.evict(str(meta.get("namespace")), str(meta.get("name")), uid=meta.get("uid") or None)
        except (NotFoundError, ConflictError):  # gone, or another pod by now
            M.EVICTION_REQUESTS.labels(code="404").inc()
            self.acted(key, now)
            return
        except TooManyRequestsError:
            M.EVICTION_REQUESTS.labels(code="429").inc()
            with self._state:
                self._backoff.failed(key, now)
            self.recorder.publish(node, "Warning", "FailedDraining",
                                  "Failed to drain node, evicting pod violates a PDB")
            return
        except KubeError as e:
            M.EVICTION_REQUESTS.labels(code=str(e.status)).inc()
            with self._state:
                self._backoff.failed(key, now)
            if MULTIPLE_PDBS in (e.message or ""):
                self.recorder.publish(node, "Warning", "FailedDraining",
                                      "Failed to drain node, eviction does not support multiple PDBs")
            else:
                log.error("evicting pod failed", extra={"controller": "eviction-queue", "error": str(e),
                                                        "Pod": {"namespace": meta.get("namespace"),
                                                                "name": meta.get("name")}})
            return
        except Exception as e:  # connection trouble: that pod is tried again after its backoff
            with self._state:
                self._backoff.failed(key, now)
            log.error("evicting pod failed", extra={"controller": "eviction-queue", "error": str(e),
                                                    "Pod": {"namespace": meta.get("namespace"),
                                                            "name": meta.get("name")}})
            return
        M.EVICTION_REQUESTS.labels(code="200").inc()
        self.acted(key, now)
        self.recorder.publish(pod, "Normal", "Evicted", f"Evicted pod: {reason}")
        M.PODS_DRAINED.labels(reason=reason).inc()
