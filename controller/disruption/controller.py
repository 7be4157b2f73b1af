"""The disruption loop (Karpenter's pkg/controllers/disruption/controller.go and validation.go).

Every 10 s, while this replica leads and cluster state is synced: take karpenter.sh/disrupted off the nodes no command
holds, move the commands in flight along, build a Snapshot, compute one pass with the decision core, publish its
events and metrics, and hand its commands to the queue. Emptiness and consolidation commands wait 15 s and are
checked again against a fresh Snapshot before they start (Karpenter's validation); the loop decides nothing else
meanwhile, as Karpenter's blocks on that wait.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from controller import metrics as M
from controller.disruption import events as E
from controller.disruption.queue import Queue, QueueError, consolidation_type, describe, new_id
from controller.disruption.state import build_snapshot
from controller.disruption.types import (
    DRIFT,
    EMPTINESS,
    MULTI_NODE_CONSOLIDATION,
    SINGLE_NODE_CONSOLIDATION,
    STATIC_DRIFT,
    Command,
    Options,
    Pass,
    Snapshot,
)
from controller.kube.events import Recorder
from controller.provisioning.provisioner import Provisioner
from controller.state.cluster import Cluster

log = logging.getLogger("karpy.disruption")

POLL_SECONDS = 10.0  # Karpenter's pollingPeriod
BUSY_SECONDS = 1.0  # while commands are in flight or waiting on validation
VALIDATION_SECONDS = 15.0  # Karpenter's consolidationTTL
VALIDATED = (EMPTINESS, MULTI_NODE_CONSOLIDATION, SINGLE_NODE_CONSOLIDATION)
# the reason label Karpenter's per-method metrics carry
METHOD_REASON = {EMPTINESS: "empty", STATIC_DRIFT: "drifted", DRIFT: "drifted",
                 MULTI_NODE_CONSOLIDATION: "underutilized", SINGLE_NODE_CONSOLIDATION: "underutilized"}

ComputePass = Callable[[Snapshot, Options], Pass]
Validate = Callable[[Snapshot, Command, Options], "str | None"]  # why the command is no longer valid, else None


def _core_compute(snapshot: Snapshot, options: Options) -> Pass:
    from controller.disruption.core import compute_pass

    return compute_pass(snapshot, options)


def _core_validate(snapshot: Snapshot, command: Command, options: Options) -> str | None:
    from controller.disruption.core import validate

    return validate(command, snapshot, options)


@dataclass
class Pending:
    """A command waiting out its validation period."""

    command: Command
    due: float
    id: str = field(default_factory=new_id)


class DisruptionController:
    """Runs the disruption loop on one thread while this replica leads."""

    def __init__(self, cluster: Cluster, provisioner: Provisioner, recorder: Recorder, queue: Queue,
                 is_leader: Callable[[], bool] = lambda: True, options: Options | None = None,
                 compute: ComputePass = _core_compute, validate: Validate = _core_validate,
                 clock: Callable[[], float] = time.monotonic, now: Callable[[], float] = time.time,
                 poll_seconds: float = POLL_SECONDS, validation_seconds: float = VALIDATION_SECONDS) -> None:
        self.cluster = cluster
        self.provisioner = provisioner
        self.recorder = recorder
        self.queue = queue
        self.is_leader = is_leader
        self.options = options or Options()
        self.compute = compute
        self.validate = validate
        self.clock = clock
        self.now = now
        self.poll_seconds = poll_seconds
        self.validation_seconds = validation_seconds
        self.pending: list[Pending] = []
        self._last_error: tuple[str, float] = ("", 0.0)

    def run(self, stop: threading.Event) -> None:
        """Reconcile until stop; a failed pass is logged and retried, never the end of the loop. The queue moves its
        commands along on a thread of its own, so a long consolidation search does not hold up a launched command."""
        driver = threading.Thread(target=self._drive_queue, args=(stop,), name="disruption.queue", daemon=True)
        driver.start()
        while not stop.is_set():
            wait = self.poll_seconds
            if self.is_leader() and self.cluster.synced():
                try:
                    wait = self.reconcile()
                except Exception as e:  # one bad pass must not end disruption for the process's lifetime
                    self._report(str(e)[:300] or type(e).__name__)
            else:
                wait = BUSY_SECONDS
            stop.wait(wait)
        driver.join(BUSY_SECONDS + 5)  # writes end before the Lease is released

    def _drive_queue(self, stop: threading.Event) -> None:
        while not stop.wait(BUSY_SECONDS):
            if self.is_leader() and self.queue.commands():
                try:
                    self.queue.tick()
                except Exception as e:  # the next tick tries again
                    self._report(str(e)[:300] or type(e).__name__)

    def _report(self, error: str) -> None:
        """Log a failed pass; the same error again is logged at most once a minute, not every pass."""
        now = self.clock()
        if error == self._last_error[0] and now - self._last_error[1] < 60:
            return
        self._last_error = (error, now)
        log.error("disruption pass failed", extra={"controller": "disruption", "error": error})

    def held(self) -> set[str]:
        """NodeClaims in flight or waiting on validation."""
        return self.queue.holds() | {c.name for p in self.pending for c in p.command.candidates}

    def snapshot(self) -> Snapshot:
        """The cluster as the core sees it now."""
        return build_snapshot(self.cluster, self.provisioner, self.held(), self.now)

    def reconcile(self) -> float:
        """One pass; returns how long to wait before the next."""
        self.queue.sweep()
        self.queue.tick()
        if self.pending:
            return self._validate_pending()
        snapshot = self.snapshot()
        result = self.compute(snapshot, self.options)
        self._observe(result)
        expired = {e.nodeclaim for e in result.expired}  # expiration's own controller deletes these
        commands = [c for c in result.commands if not any(x.name in expired for x in c.candidates)]
        if not commands:
            return BUSY_SECONDS if self.queue.commands() else self.poll_seconds
        if result.method in VALIDATED:
            due = self.clock() + self.validation_seconds
            self.pending = [Pending(cmd, due) for cmd in commands]
            for p in self.pending:
                if consolidation_type(p.command.method) in ("multi", "single"):
                    for c in p.command.candidates:
                        E.publish(self.recorder, E.consolidation_candidate(
                            self.cluster.node(c.node_name), c.nodeclaim, describe(p.command, p.id),
                            p.command.savings_per_hour))
            return min(BUSY_SECONDS, self.validation_seconds)
        self._start(commands)
        return BUSY_SECONDS

    def _validate_pending(self) -> float:
        """Once the validation period is over, start the commands still valid and drop the others."""
        if self.clock() < min(p.due for p in self.pending):
            return BUSY_SECONDS
        pending, self.pending = self.pending, []
        snapshot = self.snapshot()
        valid: list[Pending] = []
        for p in pending:
            cmd = p.command
            try:
                why = self.validate(snapshot, cmd, self.options) or ""
            except Exception as e:  # a validation that cannot run is a failed one
                why = f"validation failed, {str(e)[:200]}"
            if not why:
                valid.append(p)
                continue
            M.DISRUPTION_FAILED_VALIDATIONS.labels(consolidation_type=consolidation_type(cmd.method)).inc()
            self.queue.drop(cmd)
            log.info("abandoning disruption command", extra={
                "controller": "disruption", "reason": why[:300],
                "command": describe(cmd, p.id)})
        for p in valid:
            self._start_one(p.command, p.id)
        return BUSY_SECONDS

    def _start(self, commands: list[Command]) -> None:
        for cmd in commands:
            self._start_one(cmd, new_id())

    def _start_one(self, cmd: Command, cmd_id: str) -> None:
        try:
            self.queue.start(cmd, cmd_id)
        except QueueError as e:
            log.error("disrupting candidates failed", extra={"controller": "disruption", "command-id": cmd_id,
                                                             "error": str(e)[:300]})

    def _observe(self, result: Pass) -> None:
        """The pass's events (blocked nodes, NodePools out of budget) and metrics (eligible nodes, allowed
        disruptions, evaluation time, consolidation timeouts)."""
        for b in result.blocked:
            node = self.cluster.node(b.node) if b.node else None
            claim = self.cluster.nodeclaim(b.nodeclaim) if b.nodeclaim else None
            make = E.unconsolidatable if b.unconsolidatable else E.blocked
            E.publish(self.recorder, make(node, claim, b.reason))
        for reason, mapping in result.budgets.items():
            for pool, allowed in mapping.allowed.items():
                # as Karpenter: the budgets' own figure (before the nodes already consuming it) and those nodes
                M.NODEPOOLS_ALLOWED_DISRUPTIONS.labels(nodepool=pool, reason=reason.lower()).set(allowed)
                M.NODEPOOLS_NODES_CONSUMING_BUDGETS.labels(nodepool=pool, reason=reason.lower()).set(
                    mapping.consuming.get(pool, 0))
                if allowed == 0 and mapping.nodes.get(pool) and (nodepool := self.cluster.nodepool(pool)) is not None:
                    E.publish(self.recorder, E.nodepool_blocked(nodepool, reason))
        for method, n in result.eligible.items():
            M.DISRUPTION_ELIGIBLE_NODES.labels(reason=METHOD_REASON.get(method, method.lower())).set(n)
        for method, seconds in result.evaluation_seconds.items():
            M.DISRUPTION_EVALUATION_DURATION.labels(reason=METHOD_REASON.get(method, method.lower()),
                                                    consolidation_type=consolidation_type(method)).observe(seconds)
        for method in result.timeouts:
            M.DISRUPTION_CONSOLIDATION_TIMEOUTS.labels(consolidation_type=consolidation_type(method)).inc()
