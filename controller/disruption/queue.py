"""The orchestration queue (Karpenter's pkg/controllers/disruption/queue.go): carries out the commands a pass decided.

A command taints its candidates' Nodes karpenter.sh/disrupted:NoSchedule, launches its replacements, waits until
they are Initialized and then deletes the candidates' NodeClaims, which the termination controller drains. On a
failure, or when the command outlives its retry window, the taints come off and the replacements are deleted.

Karpenter keeps commands in memory only and, on restart, takes the taint off every node its queue does not hold; its
replacements survive as ordinary NodeClaims. karpy does the same with the taints and also marks each replacement
with the command that launched it (and the candidates it replaces), so that a new process deletes the replacements of
a command that never reached its deletions instead of leaving them to be consolidated later.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller import failpoints
from controller import metrics as M
from controller.api import conditions as C
from controller.api import labels as L
from controller.disruption import events as E
from controller.disruption.types import (
    EMPTINESS,
    MULTI_NODE_CONSOLIDATION,
    SINGLE_NODE_CONSOLIDATION,
    Command,
    Replacement,
)
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import ConflictError, KubeError, NotFoundError
from controller.kube.events import Recorder
from controller.kube.workqueue import Result
from controller.provisioning.nodeclaimtemplate import nodeclaim_manifest
from controller.provisioning.provisioner import min_values_relaxed
from controller.state.cluster import Cluster, is_true
from controller.termination.drain import DISRUPTED_TAINT
from controller.termination.instance import DISRUPTION_REASON, write_conditions

log = logging.getLogger("karpy.disruption")
Obj = dict[str, Any]

# karpy's marks on a replacement NodeClaim: the command that launched it and the NodeClaims it replaces
REPLACEMENT_OF = "karpy.sh/disruption-command"
REPLACES = "karpy.sh/disruption-replaces"
# Karpenter's retry window: 80 ms per command in flight, clamped to [10 min, 1 h]
MIN_RETRY_SECONDS = 600.0
MAX_RETRY_SECONDS = 3600.0
RETRY_SCALE_SECONDS = 0.08


class QueueError(Exception):
    """A command could not be started (it was rolled back)."""


def new_id() -> str:
    """A command's id, unique across processes (a restarted controller tells its own commands from older ones)."""
    return uuid.uuid4().hex[:12]


def consolidation_type(method: str) -> str:
    """Karpenter's consolidation_type label: empty, multi, single, or "" for drift."""
    return {EMPTINESS: "empty", MULTI_NODE_CONSOLIDATION: "multi", SINGLE_NODE_CONSOLIDATION: "single"}.get(method, "")


def snake(reason: str) -> str:
    """Karpenter's pretty.ToSnakeCase of a reason (Underutilized -> underutilized)."""
    out = []
    for i, ch in enumerate(reason):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def termination_mode(nodeclaim: Obj) -> str:
    """graceful without terminationGracePeriod, forceful at 0, eventual otherwise (Karpenter's metric label)."""
    tgp = (nodeclaim.get("spec") or {}).get("terminationGracePeriod")
    if tgp in (None, ""):
        return "graceful"
    return "forceful" if str(tgp).strip("0hms") == "" else "eventual"


def describe(cmd: Command, cmd_id: str) -> str:
    """Karpenter's Command.String(): reason/id: decision: nodepools=[...]: [nodes] -> [n replacements] (savings)."""
    pools = ",".join(dict.fromkeys(c.nodepool for c in cmd.candidates))
    sources = ", ".join(c.node_name for c in cmd.candidates)
    head = f"{cmd.reason}/{cmd_id}: {cmd.decision}: nodepools=[{pools}]: [{sources}]"
    if cmd.replacements:
        n = len(cmd.replacements)
        head += f" -> [{n} replacement{'' if n == 1 else 's'}]"
    return f"{head} (savings: ${cmd.savings_per_hour:.2f})"


@dataclass
class Running:
    """A command the queue carries out: its replacements by name, and which of them are initialized."""

    id: str
    command: Command
    created: float
    replacements: list[str] = field(default_factory=list)
    initialized: set[str] = field(default_factory=set)

    @property
    def candidates(self) -> list[str]:
        """The candidates' NodeClaim names."""
        return [c.name for c in self.command.candidates]


class Queue:
    """Commands in flight, keyed by their candidates' NodeClaims; one thread (the disruption loop) drives it."""

    def __init__(self, cluster: Cluster, client: KubeClient, recorder: Recorder,
                 clock: Callable[[], float] = time.monotonic, retry_seconds: float | None = None) -> None:
        self.cluster = cluster
        self.client = client
        self.recorder = recorder
        self.clock = clock
        self.retry_seconds = retry_seconds  # None: Karpenter's window for the number of commands in flight
        self._lock = threading.Lock()
        self._tick_lock = threading.Lock()
        self._running: dict[str, Running] = {}

    # ---- what the queue holds ----------------------------------------------------------------------------------
    def holds(self) -> set[str]:
        """NodeClaims an in-flight command is disrupting."""
        with self._lock:
            return {name for r in self._running.values() for name in r.candidates}

    def commands(self) -> list[Running]:
        """The commands in flight."""
        with self._lock:
            return list(self._running.values())

    def _retry_window(self) -> float:
        if self.retry_seconds is not None:
            return self.retry_seconds
        with self._lock:
            n = len(self._running)
        return min(max(RETRY_SCALE_SECONDS * n, MIN_RETRY_SECONDS), MAX_RETRY_SECONDS)

    # ---- starting a command ------------------------------------------------------------------------------------
    def start(self, cmd: Command, cmd_id: str = "") -> Running:
        """Taint the candidates, launch the replacements and enqueue the command (under cmd_id, or a new id); on
        failure undo what was done and raise QueueError."""
        held = self.holds()
        if any(c.name in held for c in cmd.candidates):
            raise QueueError("candidate is being disrupted")
        run = Running(id=cmd_id or new_id(), command=cmd, created=self.clock())
        log.info("disrupting node(s)", extra={
            "controller": "disruption", "command": describe(cmd, run.id), "reason": cmd.reason,
            "decision": cmd.decision, "disrupted-node-count": len(cmd.candidates),
            "replacement-node-count": len(cmd.replacements)})
        tainted: list[str] = []
        marked: list[str] = []
        try:
            for c in cmd.candidates:  # Karpenter's markDisrupted: the taint, then the NodeClaim's DisruptionReason
                self._taint(c.node_name)
                tainted.append(c.node_name)
                marked.append(c.name)
                self._disruption_reason(c.name, cmd.reason)
            failpoints.failpoint("disruption.after-taint")
            for rep in cmd.replacements:
                run.replacements.append(self._launch(rep, run, cmd))
        except (KubeError, QueueError) as e:
            self._undo(tainted, run.replacements, marked)
            raise QueueError(f"launching replacement nodeclaim, {str(e)[:300]}") from e
        failpoints.failpoint("disruption.after-launch")
        with self._lock:
            self._running[run.id] = run
        for pool in dict.fromkeys(c.nodepool for c in cmd.candidates):
            M.DISRUPTION_DECISIONS_BY_NODEPOOL.labels(nodepool=pool, decision=cmd.decision,
                                                     reason=cmd.reason.lower(),
                                                     consolidation_type=consolidation_type(cmd.method)).inc()
        M.DISRUPTION_DECISIONS.labels(decision=cmd.decision, reason=cmd.reason.lower(),
                                      consolidation_type=consolidation_type(cmd.method)).inc()
        return run

    def _launch(self, rep: Replacement, run: Running, cmd: Command) -> str:
        """Create one replacement NodeClaim from its NodePool, marked with the command and what it replaces."""
        planned = rep.planned
        nodepool = self.cluster.nodepool(planned.node_pool)
        if nodepool is None:
            raise QueueError(f"nodepool {planned.node_pool} not found")
        requests: dict[str, int] = {}
        for p in planned.pods:
            for k, v in p.requests.items():
                requests[k] = requests.get(k, 0) + v
        body = nodeclaim_manifest(nodepool, planned.requirements, planned.instance_type_options, requests)
        annotations = body["metadata"]["annotations"]
        if min_values_relaxed(nodepool, planned.instance_type_options):
            annotations[L.NODECLAIM_MIN_VALUES_RELAXED] = "true"
        annotations[REPLACEMENT_OF] = run.id
        annotations[REPLACES] = ",".join(run.candidates)
        created = self.client.create(R.NODECLAIMS, body)
        name = str(created["metadata"]["name"])
        self.cluster.mark_created(name)
        M.NODECLAIMS_CREATED.labels(reason=cmd.reason.lower(), nodepool=planned.node_pool,
                                    min_values_relaxed=annotations.get(L.NODECLAIM_MIN_VALUES_RELAXED, "false")).inc()
        log.info("created nodeclaim", extra={"controller": "disruption", "NodePool": {"name": planned.node_pool},
                                             "NodeClaim": {"name": name}, "command-id": run.id})
        E.publish(self.recorder, E.launching(created, cmd.reason))
        return name

    # ---- driving commands --------------------------------------------------------------------------------------
    def tick(self) -> None:
        """One look at every command in flight: delete the candidates of those whose replacements are initialized,
        roll back those that failed or ran out of time."""
        with self._tick_lock:  # the loop and the queue's own thread both drive it
            for run in self.commands():
                self._tick_one(run)

    def _tick_one(self, run: Running) -> None:
        """Move one command along: finish it, roll it back, or leave it waiting."""
        try:
            done = self._wait_or_terminate(run)
        except QueueError as e:
            self._fail(run, str(e))
            return
        except KubeError as e:  # retried on the next tick, within the retry window
            done = False
            log.debug("disruption command waits", extra={"command-id": run.id, "error": str(e)[:200]})
        if done:
            log.info("command succeeded", extra={"controller": "disruption", "command-id": run.id,
                                                 "command": describe(run.command, run.id)})
            self._finish(run)
        elif self.clock() - run.created > self._retry_window():
            self._fail(run, f"command reached timeout after {self.clock() - run.created:.0f}s")

    def _wait_or_terminate(self, run: Running) -> bool:
        """True once every replacement is initialized and every candidate's NodeClaim is deleted."""
        waiting = False
        for name in run.replacements:
            if name in run.initialized:
                continue
            claim: dict[str, Any] | None = self.cluster.nodeclaim(name)
            if claim is None:
                try:
                    claim = self.client.get(R.NODECLAIMS, name)
                except NotFoundError:
                    raise QueueError(f"replacement {name} was deleted") from None
            if claim["metadata"].get("deletionTimestamp"):
                raise QueueError(f"replacement {name} is being deleted")
            E.publish(self.recorder, E.launching(claim, run.command.reason))
            if not is_true(claim, "Initialized"):
                E.publish(self.recorder, E.waiting_on_readiness(claim))
                waiting = True
                continue
            run.initialized.add(name)
        if waiting:
            return False
        failpoints.failpoint("disruption.before-delete")
        cmd = run.command
        for c in cmd.candidates:
            try:
                self.client.delete(R.NODECLAIMS, c.name)
            except NotFoundError:
                continue
            E.publish(self.recorder, E.terminating(c.node, c.nodeclaim, cmd.reason))
            policy = ""
            if consolidation_type(cmd.method):
                pool = self.cluster.nodepool(c.nodepool) or {}
                policy = snake(str(((pool.get("spec") or {}).get("disruption") or {}).get("consolidationPolicy", "")))
            labels = {"reason": snake(cmd.reason), "nodepool": c.nodepool, "capacity_type": c.capacity_type,
                      "consolidation_policy": policy, "termination_mode": termination_mode(c.nodeclaim)}
            M.NODECLAIMS_DISRUPTED.labels(**labels).inc()
            M.NODES_DISRUPTED.labels(reason=snake(cmd.reason), nodepool=c.nodepool,
                                     capacity_type=c.capacity_type).inc()
            M.PODS_DISRUPTION_INITIATED.labels(**labels).inc(len(c.reschedulable_pods))
        return True

    def _finish(self, run: Running) -> None:
        """The candidates are deleted: the replacements are ordinary NodeClaims from now on."""
        for name in run.replacements:
            self._unmark(name)
        with self._lock:
            self._running.pop(run.id, None)

    def _fail(self, run: Running, why: str) -> None:
        """Untaint the candidates, clear their DisruptionReason and delete the replacements that did not initialize,
        as Karpenter does."""
        cmd = run.command
        failed = [n for n in run.replacements if n not in run.initialized]
        M.DISRUPTION_QUEUE_FAILURES.labels(decision=cmd.decision, reason=snake(cmd.reason),
                                           consolidation_type=consolidation_type(cmd.method)).inc(len(failed))
        log.error("failed terminating nodes while executing a disruption command", extra={
            "controller": "disruption", "command-id": run.id, "command": describe(cmd, run.id), "error": why[:300]})
        self._undo([c.node_name for c in cmd.candidates], run.replacements, run.candidates)
        with self._lock:
            self._running.pop(run.id, None)

    def drop(self, cmd: Command) -> None:
        """Forget a command that never started (a failed validation): nothing to undo."""
        log.debug("dropping disruption command", extra={"nodes": [c.node_name for c in cmd.candidates]})

    def _undo(self, nodes: list[str], replacements: list[str], candidates: list[str]) -> None:
        for node in nodes:
            try:
                self._untaint(node)
            except KubeError as e:  # the next pass's sweep takes it off
                log.error("removing taint from node failed", extra={"Node": {"name": node}, "error": str(e)[:200]})
        for name in candidates:
            try:
                self._disruption_reason(name, None)
            except KubeError as e:  # the next pass's sweep clears it
                log.error("removing condition from nodeclaim failed", extra={
                    "NodeClaim": {"name": name}, "condition": DISRUPTION_REASON, "error": str(e)[:200]})
        for name in replacements:
            try:
                self.client.delete(R.NODECLAIMS, name)
                log.info("deleted replacement nodeclaim", extra={"controller": "disruption",
                                                                 "NodeClaim": {"name": name}})
            except NotFoundError:
                pass
            except KubeError as e:  # marked: the sweep deletes it once the command is gone
                log.error("deleting replacement failed", extra={"NodeClaim": {"name": name}, "error": str(e)[:200]})

    # ---- the sweep: state rebuilt from the cluster -------------------------------------------------------------
    def sweep(self) -> None:
        """Take karpenter.sh/disrupted off every Node no command holds and that is not being deleted, and the
        DisruptionReason condition off such NodeClaims (Karpenter's rule), delete the replacements of commands no
        longer in flight whose candidates are all still there, and unmark those whose command reached its
        deletions."""
        held = self.holds()
        with self._lock:
            ids = set(self._running)
        for node in self.cluster.nodes():
            if not node.disrupted or node.deleting:
                continue
            claim = self.cluster.nodeclaim_for_node(node)
            if claim is None or claim.deleting or claim.name in held or not claim.nodepool:
                continue
            try:
                self._untaint(node.name)
            except KubeError as e:
                log.error("removing taint from node failed", extra={"Node": {"name": node.name},
                                                                    "error": str(e)[:200]})
        for claim in self.cluster.nodeclaims():
            if C.get(claim.get("status"), DISRUPTION_REASON) is not None and claim.name not in held \
                    and not claim.deleting:
                try:
                    self._disruption_reason(claim.name, None)
                except KubeError as e:
                    log.error("removing condition from nodeclaim failed", extra={
                        "NodeClaim": {"name": claim.name}, "condition": DISRUPTION_REASON, "error": str(e)[:200]})
        for claim in self.cluster.nodeclaims():
            ann = claim.annotations
            cmd_id = ann.get(REPLACEMENT_OF)
            if not cmd_id or cmd_id in ids or claim.deleting:
                continue
            name = claim.name
            replaced = [n for n in str(ann.get(REPLACES, "")).split(",") if n]
            reached_deletion = any(self._gone_or_deleting(n) for n in replaced)
            try:
                if reached_deletion or not replaced:
                    self._unmark(name)
                else:
                    self.client.delete(R.NODECLAIMS, name)
                    log.info("deleted replacement of an unfinished disruption command", extra={
                        "controller": "disruption", "NodeClaim": {"name": name}, "command-id": cmd_id})
            except NotFoundError:
                pass
            except KubeError as e:
                log.error("cleaning up replacement failed", extra={"NodeClaim": {"name": name}, "error": str(e)[:200]})

    def _gone_or_deleting(self, name: str) -> bool:
        claim = self.cluster.nodeclaim(name)
        return claim is None or claim.deleting

    # ---- API writes --------------------------------------------------------------------------------------------
    def _taint(self, node_name: str) -> None:
        """Add karpenter.sh/disrupted:NoSchedule (a strategic merge keyed by the taint's key)."""
        node = self.cluster.node(node_name)
        if node is not None and node.disrupted:
            return
        self.client.patch(R.NODES, node_name, {"spec": {"taints": [dict(DISRUPTED_TAINT)]}}, patch_type="strategic")

    def _untaint(self, node_name: str) -> None:
        """Remove karpenter.sh/disrupted, guarded by the resourceVersion read (retried on conflict)."""
        for _ in range(5):
            try:
                node = self.client.get(R.NODES, node_name)
            except NotFoundError:
                return
            taints = [t for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]
            kept = [t for t in taints if t.get("key") != DISRUPTED_TAINT["key"]]
            if len(kept) == len(taints):
                return
            body = {"metadata": {"resourceVersion": node["metadata"].get("resourceVersion")},
                    "spec": {"taints": kept or None}}
            try:
                self.client.patch(R.NODES, node_name, body)
            except ConflictError:
                continue
            except NotFoundError:
                return
            log.info("removed taint from node", extra={"controller": "disruption", "Node": {"name": node_name},
                                                       "taint.Key": DISRUPTED_TAINT["key"]})
            return
        raise ConflictError(409, "Conflict", f"node {node_name} kept changing while removing its taint")

    def _disruption_reason(self, name: str, reason: str | None) -> None:
        """Set the NodeClaim's DisruptionReason condition True with the command's reason (what termination reports
        its evictions under), or clear it (None); locked on the resourceVersion read, retried on conflict."""
        for _ in range(5):
            try:
                claim = self.client.get(R.NODECLAIMS, name)
            except NotFoundError:
                return
            status = copy.deepcopy(claim.get("status") or {})
            if reason is None:
                conditions = [c for c in status.get("conditions") or []
                              if not (isinstance(c, dict) and c.get("type") == DISRUPTION_REASON)]
                if len(conditions) == len(status.get("conditions") or []):
                    return
                status["conditions"] = conditions
            elif not C.set_condition(status, DISRUPTION_REASON, True, reason, reason,
                                     claim["metadata"].get("generation")):
                return
            if not isinstance(write_conditions(self.client, claim, status), Result):
                return
        raise ConflictError(409, "Conflict", f"nodeclaim {name} kept changing while writing its {DISRUPTION_REASON}")

    def _unmark(self, name: str) -> None:
        """Drop the replacement marks from a NodeClaim."""
        claim = self.cluster.nodeclaim(name)
        ann = claim.annotations if claim is not None else {}
        if claim is not None and REPLACEMENT_OF not in ann and REPLACES not in ann:
            return
        with contextlib.suppress(NotFoundError):
            self.client.patch(R.NODECLAIMS, name, {"metadata": {"annotations": {REPLACEMENT_OF: None,
                                                                                 REPLACES: None}}})
