"""The provisioner: provisionable pods -> one scheduling simulation per batch -> NodeClaims created, pods nominated.

The same input builder as `karpy simulate` (controller.provisioning.inputs) turns the cluster state into the
scheduler's inputs, so the dry run and the controller decide the same way. Binding is left to kube-scheduler.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from controller import metrics as M
from controller.api import conditions as C
from controller.api import labels as L
from controller.api.quantity import QuantityError
from controller.api.validation import spec_errors
from controller.catalog.types import InstanceType
from controller.cloud.provider import CloudProvider, NodeClass
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import KubeError
from controller.kube.events import Recorder
from controller.kube.informer import key_of
from controller.provisioning import inputs
from controller.provisioning.batcher import Batcher
from controller.provisioning.inputs import nodeclass_not_ready as nodeclass_not_ready  # re-exported
from controller.provisioning.inputs import nodepool_not_ready as nodepool_not_ready  # re-exported
from controller.provisioning.nodeclaimtemplate import nodeclaim_manifest
from controller.provisioning.pdb import PdbLimits
from controller.scheduling.pod import Pod
from controller.scheduling.policies import relax_min_values as relax_min_values  # re-exported
from controller.scheduling.policies import solve
from controller.scheduling.policies import without_preferences as without_preferences  # re-exported
from controller.scheduling.reservations import STRICT
from controller.scheduling.scheduler import Plan
from controller.scheduling.types import ExistingNode
from controller.settings import format_duration
from controller.state.cluster import Cluster
from controller.state.views import NodeClaimView, NodeView, PodView

log = logging.getLogger("karpy.provisioner")
CREATE_WORKERS = 8
# Karpenter's pod and node trigger controllers requeue a provisionable pod (or a disrupted node) this often while it
# stays so: a pass that left it pending (a failed create, a cloud error, an ICE that used up its offerings) is tried
# again without waiting for an unrelated event.
REQUEUE_PERIOD = 10.0


@dataclass
class Results:
    """What one scheduling pass decided and did."""

    created: list[str] = field(default_factory=list)
    nominated: dict[str, str] = field(default_factory=dict)  # pod key -> node or nodeclaim name
    unschedulable: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _obj_ref(obj: dict[str, Any]) -> dict[str, str]:
    """An object's namespace and name, as Karpenter's logs name it."""
    meta = obj.get("metadata") or {}
    return {"namespace": str(meta.get("namespace") or ""), "name": str(meta.get("name") or "")}


def min_values_relaxed(nodepool: dict[str, Any], options: list[InstanceType]) -> bool:
    """Whether a NodeClaim's instance-type options fall short of a minValues of its NodePool's requirements."""
    tspec = (((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {})
    for r in tspec.get("requirements") or []:
        need = r.get("minValues")
        if not need:
            continue
        key = str(r.get("key"))
        values = {it.name if key == L.INSTANCE_TYPE else it.labels.get(key) for it in options} - {None}
        if len(values) < int(need):
            return True
    return False


class Provisioner:
    """Runs scheduling passes on batches of provisionable pods and creates the NodeClaims they need."""

    def __init__(self, cluster: Cluster, client: KubeClient, cloud: CloudProvider, recorder: Recorder,
                 batcher: Batcher | None = None, is_leader: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic, preference_policy: str = "Respect",
                 min_values_policy: str = "Strict", ignore_dra_requests: bool = True) -> None:
        self.cluster = cluster
        self.min_values_policy = min_values_policy  # MIN_VALUES_POLICY: Strict, or BestEffort relaxation
        self.preference_policy = preference_policy  # PREFERENCE_POLICY: Respect, or Ignore preferences up front
        self.ignore_dra_requests = ignore_dra_requests  # IGNORE_DRA_REQUESTS: pods that claim devices are refused
        self.client = client
        self.cloud = cloud
        self.recorder = recorder
        self.batcher = batcher or Batcher()
        self.is_leader = is_leader
        self.clock = clock
        self._warmed: set[str] = set()  # node classes whose instance types the cloud provider has fetched
        # bound pods converted once: uid -> (resourceVersion, pod), dropped when the pod is deleted
        self._pods: dict[str, tuple[str, Pod]] = {}
        self._pods_lock = threading.Lock()
        # pod uid -> when first seen provisionable, until its first scheduling decision (pods_scheduling_decision)
        self._seen: dict[str, float] = {}
        self._decided: set[str] = set()
        self._said_not_ready: dict[str, str] = {}  # NodePool -> the not-ready reason last logged
        self._namespace_labels: dict[str, dict[str, str]] = {}  # this pass's namespaces, for namespaceSelectors

    # ---- loop --------------------------------------------------------------------------------------------------
    def trigger(self) -> None:
        """Something changed that may need capacity: open or extend the batch window."""
        self.batcher.trigger()

    def on_pod(self, event: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """Pod informer handler: a provisionable pod opens a batch; a pod seen unbound and now bound is observed in
        karpenter_pods_bound_duration_seconds (creation to its PodScheduled transition), as Karpenter's pod metrics
        controller does."""
        from controller.state.cluster import is_provisionable

        if event == "DELETED" or new is None:
            uid = PodView.of(old).uid if old is not None else ""
            self._seen.pop(uid, None)
            self._decided.discard(uid)
            with self._pods_lock:
                self._pods.pop(uid, None)
            return
        pod = PodView.of(new)  # the informer's view; a plain dict from elsewhere is viewed here
        if is_provisionable(pod):
            self._seen.setdefault(pod.uid, time.time())
            self.trigger()
        elif old is not None and not PodView.of(old).node_name and pod.node_name:
            scheduled = C.parse_time((pod.condition("PodScheduled") or {}).get("lastTransitionTime"))
            created = pod.created
            if scheduled is not None and created is not None:
                M.PODS_BOUND_DURATION.observe(max(0.0, scheduled - created))

    def reschedulable_pods(self) -> list[PodView]:
        """Pods on nodes being deleted (the Node or its NodeClaim has a deletionTimestamp, or the Node carries
        karpenter.sh/disrupted) that will move, by Karpenter's IsCurrentlyReschedulable: Karpenter schedules them
        with the pending pods, so their replacement launches while the old node drains. Terminal, terminating (but
        for a StatefulSet's), DaemonSet and static pods stay where they are, and so do pods the drain will not evict
        (an active do-not-disrupt, a PDB that never allows an eviction)."""
        out = []
        limits: PdbLimits | None = None
        now = time.time()
        for node in self.cluster.nodes():
            if not self._node_deleting(node):
                continue
            if limits is None:
                limits = PdbLimits(self.cluster.pdbs())
            for pod in self.cluster.pods_on_node(node.name):
                if limits.is_currently_reschedulable(pod, now):
                    out.append(pod)
        return out

    def _node_deleting(self, node: NodeView) -> bool:
        """Whether the Node is going away: deleted, its NodeClaim deleted, or tainted karpenter.sh/disrupted."""
        if node.deleting or node.disrupted:
            return True
        claim = self.cluster.nodeclaim_for_node(node)
        return claim is not None and claim.deleting

    def run(self, stop: threading.Event) -> None:
        """Wait for batches and schedule them, until stop; only the leader schedules."""
        failures = 0
        while not stop.is_set():
            if not self.batcher.wait(stop):
                return
            if not self.is_leader():
                continue
            if not self.cluster.synced():
                log.debug("waiting on cluster sync")
                stop.wait(0.2)
                self.trigger()
                continue
            try:
                with M.controller_context("provisioner"):
                    results = self.schedule()
                failed = bool(results.errors)
            except Exception:
                log.exception("provisioning failed", extra={"controller": "provisioner"})
                failed = True
            if not failed:
                failures = 0
                continue
            # an error is retried with backoff (1 s doubling to the requeue period), as Karpenter requeues one
            stop.wait(min(REQUEUE_PERIOD, 2.0 ** failures))
            failures += 1
            self.trigger()

    def requeue(self) -> bool:
        """Open a batch window when some pod is still provisionable, or a node going away still holds pods (Karpenter
        requeues each such pod and node every 10 s); whether it did."""
        if not self.is_leader() or self.batcher.pending():
            return False
        if self.cluster.has_provisionable_pods() or any(self._node_deleting(n) for n in self.cluster.nodes()):
            self.trigger()
            return True
        return False

    def requeue_loop(self, stop: threading.Event, period: float = REQUEUE_PERIOD) -> None:
        """Call requeue() every `period` seconds until stop."""
        while not stop.wait(period):
            try:
                self.requeue()
            except Exception:  # the next period tries again
                log.exception("requeueing provisionable pods failed", extra={"controller": "provisioner"})

    def warm(self, stop: threading.Event, within: float = 60.0) -> None:
        """Fetch each node class's instance types (and prices) as soon as it is ready, ahead of the first batch, so
        the first pending pods do not wait on the cloud's APIs."""
        deadline = self.clock() + within
        while not stop.is_set() and self.clock() < deadline:
            waiting = False
            for nodeclass in self.cluster.nodeclasses():
                name = nodeclass["metadata"]["name"]
                if name in self._warmed:
                    continue
                if nodeclass_not_ready(nodeclass, name):
                    waiting = True
                    continue
                try:
                    with M.controller_context("provisioner"):
                        self._instance_types(nodeclass)
                except Exception as e:  # the batch will try again and say why
                    log.debug("warming instance types failed", extra={"error": str(e)[:200]})
            if not waiting:
                return
            stop.wait(1.0)

    # ---- inputs ------------------------------------------------------------------------------------------------
    def _instance_types(self, nodeclass: dict[str, Any]) -> list[InstanceType]:
        """The node class's instance types, asked of the cloud provider every time: its cache is the only one, and
        it is rebuilt when offerings are marked unavailable, so a batch right after an ICE plans without them."""
        types = self.cloud.get_instance_types(NodeClass.from_manifest(nodeclass))
        self._warmed.add(nodeclass["metadata"]["name"])
        return types

    def _pod(self, raw: dict[str, Any]) -> Pod:
        """A bound pod as the scheduler sees it, converted once per resourceVersion."""
        meta = raw.get("metadata") or {}
        uid, rv = str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))
        with self._pods_lock:
            cached = self._pods.get(uid)
        if cached is not None and cached[0] == rv:
            return cached[1]
        pod = inputs.scheduling_pod(raw, namespace_labels=self._namespace_labels)
        with self._pods_lock:
            self._pods[uid] = (rv, pod)
        return pod

    def _usage(self, pool: str, types: list[InstanceType]) -> dict[str, int]:
        """What one NodePool uses against its limits (see _pool_usage)."""
        return self._pool_usage({pool: types}).get(pool, {"nodes": 0})

    def _pool_usage(self, types_by_pool: dict[str, list[InstanceType]]) -> dict[str, dict[str, int]]:
        """What each NodePool uses against its limits, by Karpenter's rule (controller.state.usage), with the
        NodeClaims not launched yet counted too: by their capacity when known, else their largest instance-type option
        (Karpenter's subtractMax for a batch's new NodeClaims, kept until launch, so two batches cannot both spend the
        last of a limit)."""
        by_pool = {pool: {it.name: it for it in types} for pool, types in types_by_pool.items()}

        def unlaunched(claim: NodeClaimView) -> dict[str, int]:
            try:
                capacity = claim.capacity
            except QuantityError:
                capacity = {}
            if capacity:
                return capacity
            by_name = by_pool.get(claim.nodepool, {})
            for option in claim.instance_type_options:
                if option in by_name:
                    for k, v in by_name[option].capacity.items():
                        capacity[k] = max(capacity.get(k, 0), v)
            return capacity

        return self.cluster.nodepool_usage(unlaunched)

    def pool_sources(self) -> list[inputs.PoolSource]:
        """The NodePools that may launch for pods (not being deleted, not static), each with its NodeClass's instance
        types from the cloud provider, what it uses against its limits and why it cannot launch ("" when it can)."""
        read: list[tuple[dict[str, Any], list[InstanceType], str]] = []
        for np_ in self.cluster.nodepools():
            meta = np_.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                continue
            name = meta["name"]
            if ((np_.get("spec") or {}).get("replicas")) is not None:
                continue  # static NodePools are sized by their replicas, not by pending pods
            ref = ((((np_.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {})
            nodeclass = self.cluster.nodeclass(str(ref.get("name", "")))
            invalid = spec_errors(np_)
            not_ready = (f"NodePool validation failed: {'; '.join(invalid)[:300]}" if invalid
                         else nodepool_not_ready(np_) or nodeclass_not_ready(nodeclass, str(ref.get("name", ""))))
            if not_ready and self._said_not_ready.get(name) != not_ready:
                log.error("ignoring nodepool, not ready", extra={"NodePool": {"name": name}, "error": not_ready})
            self._said_not_ready[name] = not_ready
            types: list[InstanceType] = []
            if not not_ready and nodeclass is not None:
                try:
                    types = self._instance_types(nodeclass)
                except Exception as e:  # a cloud error costs this pool this batch, not the others
                    not_ready = f"listing instance types failed: {str(e)[:200]}"
            read.append((np_, types, not_ready))
        usage = self._pool_usage({np_["metadata"]["name"]: types for np_, types, _ in read})
        return [inputs.PoolSource(np_, types, usage.get(np_["metadata"]["name"], {"nodes": 0}), not_ready)
                for np_, types, not_ready in read]

    def node_sources(self) -> list[inputs.NodeSource]:
        """Nodes that may take pods, with the pods bound to them, then NodeClaims in flight (launched or not, not yet
        registered); nodes going away are not capacity: their pods are rescheduled with the pending ones."""
        out: list[inputs.NodeSource] = []
        registered: set[str] = set()
        for node in self.cluster.nodes():
            if self._node_deleting(node):
                continue
            if node.provider_id:
                registered.add(node.provider_id)
            out.append(inputs.NodeSource(node=node, nodeclaim=self.cluster.nodeclaim_for_node(node),
                                         pods=[p for p in self.cluster.pods_on_node(node.name) if not p.terminal]))
        for claim in self.cluster.nodeclaims():
            if claim.deleting or (claim.provider_id and claim.provider_id in registered) or claim.node_name:
                continue
            try:
                allocatable = claim.allocatable
            except QuantityError:
                allocatable = {}
            out.append(inputs.NodeSource(node=None, nodeclaim=claim,
                                         allocatable=allocatable or self._expected_allocatable(claim)))
        return out

    def _log_issues(self, issues: list[inputs.InputIssue]) -> None:
        """Objects left out of a pass (a bound pod that cannot be read still holds its place on its node)."""
        for issue in issues:
            if issue.kind == "NodePool":
                log.error("ignoring nodepool", extra={"NodePool": {"name": issue.key}, "error": issue.message[:300]})
            elif issue.kind == "DaemonSet":
                log.debug("ignoring daemonset", extra={"controller": "provisioner", "error": issue.message[:300]})
            elif issue.kind in ("Node", "NodeClaim"):
                log.debug("skipping node", extra={issue.kind: {"name": issue.key}, "error": issue.message[:200]})

    def _expected_allocatable(self, claim: NodeClaimView) -> dict[str, int]:
        """Before launch, the smallest allocatable among the NodeClaim's instance-type options."""
        ref = claim.nodeclass_name
        nodeclass = self.cluster.nodeclass(ref)
        options = claim.instance_type_options
        types: list[InstanceType] | None = None
        if nodeclass is not None and options and not nodeclass_not_ready(nodeclass, str(ref)):
            try:
                types = self._instance_types(nodeclass)
            except Exception:  # the cloud cannot say now: the requests are the best estimate
                types = None
        if types is None:
            try:
                return claim.requests
            except QuantityError:
                return {}
        by_name = {it.name: it for it in types}
        allocs = [by_name[o].allocatable for o in options if o in by_name]
        if not allocs:
            return {}
        keys = set().union(*allocs)
        return {k: min(a.get(k, 0) for a in allocs) for k in keys}

    # ---- one pass ----------------------------------------------------------------------------------------------
    def schedule(self) -> Results:
        """One scheduling pass over the provisionable pods."""
        started = time.perf_counter()
        # nodes (with the pods bound to them) before the pending pods, as Karpenter reads them: a pod that binds in
        # between is counted on its node rather than provisioned for twice
        self._namespace_labels = self.cluster.namespace_labels()
        nodes = self.node_sources()
        pending = self.cluster.pending_pods()
        # pending pods first, then those of deleting nodes; a pod is scheduled once whatever lists it
        raw_by_key: dict[str, dict[str, Any]] = {}
        for view in [*pending, *self.reschedulable_pods()]:
            raw_by_key.setdefault(view.key, view)
        raw_pods = list(raw_by_key.values())
        M.SCHEDULER_QUEUE_DEPTH.labels(controller="provisioner", scheduling_id="").set(len(raw_pods))
        results = Results()
        if not raw_pods:
            M.UNSCHEDULABLE_PODS.labels(controller="provisioner").set(0)
            M.SCHEDULER_IGNORED_PODS.set(0)
            return results
        sources: list[inputs.PoolSource] = []

        def pools() -> list[inputs.PoolSource]:
            sources.extend(self.pool_sources())
            return sources

        built = inputs.scheduler_inputs(
            nodes=nodes, pods=[(raw, "") for raw in raw_pods], pools=pools,
            daemonsets=[(ds, "") for ds in self.cluster.daemonsets()], live_daemonset_pod=self.cluster.daemonset_pod,
            volumes=self.cluster.volume_topology(), namespace_labels=self._namespace_labels,
            ignore_dra_requests=self.ignore_dra_requests, convert_bound=self._pod)
        ignored = len(built.excluded)
        for raw, _ in built.excluded:  # Karpenter ignores these without an event: they asked for other capacity
            log.debug("ignoring pod", extra={"controller": "provisioner", "Pod": _obj_ref(raw),
                                             "error": inputs.KARPENTER_EXCLUDED})
        for key, reason in built.refused.items():
            results.unschedulable[key] = reason
            log.info("skipping pod with Dynamic Resource Allocation requirements, not yet supported by Karpenter",
                     extra={"controller": "provisioner", "Pod": _obj_ref(raw_by_key[key])})
            self.recorder.publish(raw_by_key[key], "Warning", "FailedScheduling", f"Failed to schedule pod, {reason}")
        for issue in built.issues:
            bad = raw_by_key.get(issue.key) if issue.kind == "Pod" else None
            if bad is None:
                continue  # a bound pod that cannot be read is skipped; other objects are logged below
            ignored += 1  # Karpenter's ignored pods: ones that fail validation before scheduling
            results.unschedulable[issue.key] = issue.message[:300]
            self.recorder.publish(bad, "Warning", "FailedScheduling", f"Failed to schedule pod, {issue.message[:300]}")
        self._log_issues(built.issues)
        M.SCHEDULER_IGNORED_PODS.set(ignored)
        if not built.pods:
            M.UNSCHEDULABLE_PODS.labels(controller="provisioner").set(len(results.unschedulable))
            return results
        pools_, existing, pods = built.pools, built.existing, built.pods
        manifests = {str(s.manifest["metadata"]["name"]): s.manifest for s in sources}
        log.debug("computing scheduling decision for provisionable pod(s)",
                  extra={"controller": "provisioner", "pending-pods": len(pending),
                         "deleting-pods": len(raw_pods) - len(pending), "nodepools": len(pools_),
                         "existing-nodes": len(existing)})
        # PREFERENCE_POLICY and MIN_VALUES_POLICY as `karpy simulate` applies them too
        plan = solve(pools_, existing, built.daemonsets, pods, self.preference_policy, self.min_values_policy,
                     reserved_mode=STRICT)
        if plan.deferred:
            # not unschedulable (no event, not counted): a later pass may find the reservation free or exhausted
            log.debug("deferring scheduling decision for provisionable pod(s) to future simulation due to limited "
                      "reserved offering capacity", extra={"controller": "provisioner",
                                                           "Pods": ", ".join(list(plan.deferred)[:5])})
        M.SCHEDULING_DURATION.labels(controller="provisioner").observe(time.perf_counter() - started)
        if plan.node_claims:
            log.info("found provisionable pod(s)", extra={
                "controller": "provisioner", "Pods": ", ".join(key_of(p) for p in raw_pods[:5])
                + (f" and {len(raw_pods) - 5} other(s)" if len(raw_pods) > 5 else ""),
                "duration": format_duration(time.perf_counter() - started)})
            log.info("computed new nodeclaim(s) to fit pod(s)", extra={
                "controller": "provisioner", "nodeclaims": len(plan.node_claims),
                "pods": sum(len(c.pods) for c in plan.node_claims)})
        in_flight = {n.name for n in existing if n.in_flight}
        unready = [k for k in plan.existing if k in in_flight]
        if unready:
            log.info("computed unready node(s) will fit pod(s)", extra={
                "controller": "provisioner", "nodes": len(unready),
                "pods": sum(len(plan.existing[k]) for k in unready)})
        self._act(plan, manifests, existing, raw_by_key, results)
        M.UNSCHEDULABLE_PODS.labels(controller="provisioner").set(len(results.unschedulable))
        self._observe_decisions(raw_pods)
        return results

    def _observe_decisions(self, raw_pods: list[dict[str, Any]]) -> None:
        """karpenter_pods_scheduling_decision_duration_seconds: once per pod, from when it was first seen
        provisionable to this pass's decision about it."""
        now = time.time()
        for raw in raw_pods:
            uid = str(raw["metadata"].get("uid", ""))
            if uid in self._decided:
                continue
            seen = self._seen.pop(uid, None)
            if seen is not None:
                M.PODS_SCHEDULING_DECISION_DURATION.observe(max(0.0, now - seen))
                self._decided.add(uid)

    def _act(self, plan: Plan, manifests: dict[str, dict[str, Any]], existing: list[ExistingNode],
             raw_by_key: dict[str, dict[str, Any]], results: Results) -> None:
        in_flight = {n.name for n in existing if n.in_flight}
        for node_name, placed in plan.existing.items():
            target = f"nodeclaim/{node_name}" if node_name in in_flight else f"node/{node_name}"
            for p in placed:
                results.nominated[p.key] = node_name
                raw = raw_by_key.get(p.key)
                if raw is not None:
                    self.recorder.publish(raw, "Normal", "Nominated", f"Pod should schedule on: {target}")
        for key, reason in plan.unschedulable.items():
            results.unschedulable[key] = reason
            raw = raw_by_key.get(key)
            if raw is not None:
                self.recorder.publish(raw, "Warning", "FailedScheduling",
                                      f"Failed to schedule pod, {reason}")  # the recorder bounds it
        claims = [c for c in plan.node_claims if c.instance_type is not None and c.node_pool in manifests]
        for c in plan.node_claims:
            if c not in claims:
                for p in c.pods:
                    results.unschedulable[p.key] = "no offering left for the planned node"
        if not claims:
            return

        def create(planned: Any) -> tuple[Any, dict[str, Any] | None, str]:
            requests: dict[str, int] = {}
            for p in planned.pods:
                for k, v in p.requests.items():
                    requests[k] = requests.get(k, 0) + v
            body = nodeclaim_manifest(manifests[planned.node_pool], planned.requirements,
                                      planned.instance_type_options, requests)
            if min_values_relaxed(manifests[planned.node_pool], planned.instance_type_options):
                body["metadata"]["annotations"][L.NODECLAIM_MIN_VALUES_RELAXED] = "true"
            try:
                return planned, self.client.create(R.NODECLAIMS, body), ""
            except KubeError as e:
                return planned, None, str(e)[:300]

        with ThreadPoolExecutor(max_workers=min(CREATE_WORKERS, len(claims))) as pool:
            outcomes = list(pool.map(create, claims))
        for planned, created, error in outcomes:
            if created is None:
                results.errors.append(error)
                log.error("creating nodeclaim failed", extra={"controller": "provisioner",
                                                              "NodePool": {"name": planned.node_pool},
                                                              "error": error})
                continue
            name = created["metadata"]["name"]
            self.cluster.mark_created(name)
            results.created.append(name)
            options = [it.name for it in planned.instance_type_options]
            log.info("created nodeclaim", extra={
                "controller": "provisioner", "NodePool": {"name": planned.node_pool}, "NodeClaim": {"name": name},
                "requests": created["spec"].get("resources", {}).get("requests", {}),
                "instance-types": ", ".join(options[:5]) + (f" and {len(options) - 5} other(s)"
                                                            if len(options) > 5 else "")})
            relaxed_mv = created["metadata"].get("annotations", {}).get(L.NODECLAIM_MIN_VALUES_RELAXED, "false")
            M.NODECLAIMS_CREATED.labels(reason="provisioned", nodepool=planned.node_pool,
                                        min_values_relaxed=relaxed_mv).inc()
            for p in planned.pods:
                results.nominated[p.key] = name
                raw = raw_by_key.get(p.key)
                if raw is not None:
                    self.recorder.publish(raw, "Normal", "Nominated", f"Pod should schedule on: nodeclaim/{name}")
