"""`karpy controller`: wires the informers, the controllers, leader election, metrics and health into one process.

Every replica keeps its caches warm and serves /metrics, /healthz and /readyz; only the leader's controllers act.
SIGTERM/SIGINT: the leader stops acting, releases its Lease and the process exits 0. Losing the Lease to another
replica exits 1 so the pod restarts as a follower, as controller-runtime does.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller.api import labels as L
from controller.cloud.metered import MeteredCloudProvider
from controller.cloud.provider import CloudProvider
from controller.kube.client import KubeClient
from controller.kube.events import Recorder
from controller.kube.informer import Informer
from controller.kube.leaderelection import LeaderElector
from controller.kube.workqueue import Controller, linear_scale_reconciles
from controller.settings import Settings
from controller.state.cluster import Cluster, provider_id

log = logging.getLogger("karpy.controller")
SHUTDOWN_SECONDS = 10.0  # worker threads finish their pass; a long-poll in flight is not waited on


@dataclass
class Runtime:
    """The running parts, for tests and for shutdown."""

    cluster: Cluster
    controllers: list[Controller] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    lead_stop: threading.Event = field(default_factory=threading.Event)


def _cluster_facts(settings: Settings, client: KubeClient, clients: Any) -> Any:
    """Cluster facts for node bootstrap: settings first, then EKS DescribeCluster, then the cluster itself (the
    default/kubernetes Service's ClusterIP for the Service CIDR, the kube client's endpoint and CA)."""
    from controller.cloud.aws.clusterfacts import ClusterFacts
    from controller.kube import resources as R

    def kubernetes_service_ip() -> str:
        return str(client.get(R.SERVICES, "kubernetes", "default")["spec"]["clusterIP"])

    return ClusterFacts(name=settings.cluster_name, endpoint=settings.cluster_endpoint,
                        ca_bundle=settings.cluster_ca_bundle, eks=clients.eks,
                        kubernetes_service_ip=kubernetes_service_ip, fallback_endpoint=client.host,
                        fallback_ca_file=client.ca_file)


def build_cloud(settings: Settings, client: KubeClient) -> tuple[CloudProvider, Any]:
    """The CloudProvider named by CLOUD_PROVIDER (aws by default; fake is the in-memory one for trying karpy and for
    benchmarks), and the AWS clients when there are any."""
    if settings.cloud_provider == "fake":
        from controller.cloud.fake.provider import FakeCloudProvider

        return MeteredCloudProvider(FakeCloudProvider(), "fake"), None
    from botocore.exceptions import BotoCoreError, ClientError

    from controller.catalog.snapshot import load_prices
    from controller.cloud.aws.clients import make_clients
    from controller.cloud.aws.instancetypes import InstanceTypeProvider
    from controller.cloud.aws.pricing import PricingProvider
    from controller.cloud.aws.provider import AWSCloudProvider

    # no AWS_REGION: botocore's chain (AWS_DEFAULT_REGION, the config file, instance metadata) decides
    clients = make_clients(settings.aws_region or None, settings.aws_endpoint_url or None,
                           pricing=not settings.isolated_vpc)  # EKS always: the service CIDR comes from it
    region = str(clients.ec2.meta.region_name)
    fallback = load_prices()  # the bundled prices stand in until (or where) the Pricing API answers
    pricing = PricingProvider(clients.pricing, clients.ec2, region, fallback, background=True)
    types = InstanceTypeProvider(clients.ec2, pricing, region,
                                 vm_memory_overhead_percent=settings.vm_memory_overhead_percent,
                                 reserved_enis=settings.reserved_enis)
    # as Karpenter's operator does before it serves: instance types and their zones are read once at start, so the
    # first pending pods find them; the prices refresh in the background meanwhile (the bundled ones answer)
    pricing.current_version()
    try:
        types.refresh()
    except (BotoCoreError, ClientError) as e:  # the first listing asks again and says why
        log.warning("describing instance types failed", extra={"error": str(e)[:300]})
    facts = _cluster_facts(settings, client, clients)
    provider = AWSCloudProvider(cluster=facts.get(), region=region,
                                k8s_version=client.server_version(), ec2=clients.ec2, ssm=clients.ssm,
                                iam=clients.iam, instance_types=types, facts=facts.get,
                                reserved_capacity=settings.feature_gates.get("ReservedCapacity", True))
    return MeteredCloudProvider(provider, "aws"), clients


def _identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def wire(settings: Settings, client: KubeClient, cloud: CloudProvider, aws: Any, recorder: Recorder,
         is_leader: Callable[[], bool]) -> tuple[Runtime, Callable[[], None]]:
    """Build the controllers and connect informer events to their queues; returns the runtime and the function that
    starts the leader's work."""
    from controller.lifecycle.controller import LifecycleController, lifecycle_queue
    from controller.nodeclaim.termination import NodeClaimTerminationController
    from controller.nodepool.status import NodePoolStatusController
    from controller.provisioning.batcher import Batcher
    from controller.provisioning.provisioner import Provisioner
    from controller.termination.controller import TerminationController

    cluster = Cluster(client)
    rt = Runtime(cluster=cluster)
    provisioner = Provisioner(cluster, client, cloud, recorder,
                              Batcher(settings.batch_idle_duration, settings.batch_max_duration), is_leader,
                              preference_policy=settings.preference_policy,
                              min_values_policy=settings.min_values_policy,
                              ignore_dra_requests=settings.ignore_dra_requests)
    lifecycle = LifecycleController(cluster, client, cloud, recorder, on_deleted=provisioner.trigger)
    disruption = _disruption(settings, cluster, client, provisioner, recorder, is_leader)
    claim_termination = NodeClaimTerminationController(client, cluster, cloud, recorder)
    node_termination = TerminationController(client, cluster, cloud, recorder)
    nodepools = NodePoolStatusController(cluster, client)
    # worker threads scale with CPU_REQUESTS by Karpenter's LinearScaleReconciles, between karpy's own bounds (a
    # thread per worker: Karpenter's goroutine counts, 100-5000, are not threads a Python process should run)
    workers = linear_scale_reconciles(settings.cpu_requests, 4, 64)
    c_lifecycle = Controller("nodeclaim.lifecycle", lifecycle.reconcile, workers=workers, queue=lifecycle_queue(),
                             recorder=recorder, lookup=cluster.nodeclaim)
    c_claim_term = Controller("nodeclaim.termination", claim_termination.reconcile, workers=workers,
                              recorder=recorder, lookup=cluster.nodeclaim)
    c_node_term = Controller("node.termination", node_termination.reconcile, workers=workers, recorder=recorder,
                             lookup=cluster.node)
    c_nodepool = Controller("nodepool.status", nodepools.reconcile, workers=1, recorder=recorder,
                            lookup=cluster.nodepool)
    rt.controllers = [c_lifecycle, c_claim_term, c_node_term, c_nodepool]
    from controller.nodeclaim.controllers import build as build_nodeclaim_controllers

    nodeclaims = build_nodeclaim_controllers(cluster, client, cloud, recorder, settings.feature_gates, is_leader)
    rt.controllers.extend(nodeclaims.controllers)
    if aws is not None:
        from controller.nodeclass.status import NodeClassController

        # one pass resolves AMIs and subnets together: it runs as often as the more frequent of the two asks
        nodeclasses = NodeClassController(cluster=cluster, client=client, provider=cloud, recorder=recorder,
                                          dry_run=not settings.disable_dry_run,
                                          reserved_capacity=settings.feature_gates.get("ReservedCapacity", True),
                                          refresh_seconds=min(settings.ami_refresh_interval,
                                                              settings.subnet_refresh_interval))
        c_nodeclass = Controller("nodeclass.status", nodeclasses.reconcile, workers=1, recorder=recorder,
                                 lookup=cluster.nodeclass)
    else:
        from controller.nodeclass.fake import FakeNodeClassController

        c_nodeclass = Controller("nodeclass.status", FakeNodeClassController(cluster, client).reconcile, workers=1,
                                 recorder=recorder, lookup=cluster.nodeclass)
    rt.controllers.append(c_nodeclass)
    c_static: Controller | None = None
    static: Any = None
    if settings.feature_gate("StaticCapacity"):
        from controller.provisioning.static import StaticProvisioner

        static = StaticProvisioner(cluster, client)
        c_static = Controller("static.provisioning", static.reconcile, workers=1, recorder=recorder,
                              lookup=cluster.nodepool)
        rt.controllers.append(c_static)
    c_tagging: Controller | None = None
    if aws is not None:
        from controller.cloud.aws.tagging import TaggingController, is_taggable

        # one worker: CreateTags shares EC2's budget of mutating calls with CreateFleet
        c_tagging = Controller("nodeclaim.tagging", TaggingController(client, aws.ec2, settings.cluster_name,
                                                                      cluster.nodeclaim).reconcile,
                               workers=1, recorder=recorder, lookup=cluster.nodeclaim)
        rt.controllers.append(c_tagging)

    c_health: Controller | None = None
    if settings.feature_gate("NodeRepair"):
        from controller.cloud.repair import AWS_REPAIR_POLICIES
        from controller.nodehealth.controller import NodeHealthController

        health = NodeHealthController(cluster, client, recorder, AWS_REPAIR_POLICIES)
        c_health = Controller("node.health", health.reconcile, workers=linear_scale_reconciles(
            settings.cpu_requests, 1, 16), recorder=recorder, lookup=cluster.node)
        rt.controllers.append(c_health)

    def on_nodeclaim(event: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        obj = new if new is not None else old
        if obj is None:
            return
        name = obj["metadata"]["name"]
        if event == "DELETED":
            provisioner.trigger()
            # a node class being deleted waits on its NodeClaims: look again now that one is gone
            ref = ((obj.get("spec") or {}).get("nodeClassRef") or {}).get("name")
            if ref:
                c_nodeclass.queue.add(str(ref))
        elif obj["metadata"].get("deletionTimestamp"):
            c_claim_term.queue.add(name)
            if old is None or not old["metadata"].get("deletionTimestamp"):
                provisioner.trigger()  # its node's pods are rescheduled now, while it drains
        else:
            c_lifecycle.queue.add(name)
            if c_tagging is not None and is_taggable(obj):
                c_tagging.queue.add(name)
        pool = (obj["metadata"].get("labels") or {}).get(L.NODEPOOL)
        if pool:
            c_nodepool.queue.add(pool)
        gone = event == "DELETED" or (obj["metadata"].get("deletionTimestamp")
                                      and (old is None or not old["metadata"].get("deletionTimestamp")))
        if c_static is not None and gone and static.pool_of(obj):
            c_static.queue.add(static.pool_of(obj))  # a static pool lost a NodeClaim: make up the count

    def on_node(event: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        obj = new if new is not None else old
        if obj is None:
            return
        if event == "DELETED":
            provisioner.trigger()
            # a deleted NodeClaim's finalizer waits for its Node to go: this is its turn
            claim = cluster.nodeclaim_for_provider_id(provider_id(obj))
            if claim is not None and claim["metadata"].get("deletionTimestamp"):
                c_claim_term.queue.add(claim["metadata"]["name"])
            return
        if obj["metadata"].get("deletionTimestamp"):
            c_node_term.queue.add(obj["metadata"]["name"])
        elif c_health is not None:
            c_health.queue.add(obj["metadata"]["name"])
        if _going_away(obj) and (old is None or not _going_away(old)):
            provisioner.trigger()  # its pods are rescheduled now, while it drains
        claim = cluster.nodeclaim_for_provider_id(provider_id(obj))
        if claim is not None:
            if claim["metadata"].get("deletionTimestamp"):
                c_claim_term.queue.add(claim["metadata"]["name"])
            else:
                c_lifecycle.queue.add(claim["metadata"]["name"])

    def on_nodepool(event: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        obj = new if new is not None else old
        if obj is not None:
            c_nodepool.queue.add(obj["metadata"]["name"])  # a deleted pool's gauges are cleared there
            if c_static is not None and event != "DELETED":
                c_static.queue.add(obj["metadata"]["name"])
            if event != "DELETED":
                provisioner.trigger()

    def on_nodeclass(event: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        obj = new if new is not None else old
        if obj is None:
            return
        if event != "DELETED":
            c_nodeclass.queue.add(obj["metadata"]["name"])
        for np_ in cluster.nodepools():
            ref = ((((np_.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {})
            if ref.get("name") == obj["metadata"]["name"]:
                c_nodepool.queue.add(np_["metadata"]["name"])
        provisioner.trigger()

    def on_pod(event: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        provisioner.on_pod(event, old, new)
        # a pod that leaves a draining node lets the drain move on
        if event == "DELETED" and old is not None:
            node = cluster.node(str((old.get("spec") or {}).get("nodeName") or ""))
            if node is not None and node["metadata"].get("deletionTimestamp"):
                c_node_term.queue.add(node["metadata"]["name"])

    cluster.nodeclaims_informer.add_handler(on_nodeclaim)
    cluster.nodes_informer.add_handler(on_node)
    cluster.nodepools_informer.add_handler(on_nodepool)
    cluster.nodeclasses_informer.add_handler(on_nodeclass)
    cluster.pods_informer.add_handler(on_pod)

    def start_leading() -> None:
        log.info("starting controllers", extra={"controller": "controller"})
        for informer, handler in ((cluster.nodeclaims_informer, on_nodeclaim), (cluster.nodes_informer, on_node),
                                  (cluster.nodepools_informer, on_nodepool),
                                  (cluster.nodeclasses_informer, on_nodeclass)):
            _replay(informer, handler)
        nodeclaims.replay(cluster)
        for c in rt.controllers:
            rt.threads.extend(c.start(rt.lead_stop))
        rt.threads.append(_thread("provisioner", provisioner.run, rt.lead_stop))
        _thread("warm-instance-types", provisioner.warm, rt.lead_stop)
        rt.threads.append(_thread("provisioner-requeue", provisioner.requeue_loop, rt.lead_stop))
        rt.threads.append(_thread("disruption", disruption.run, rt.lead_stop))
        provisioner.trigger()
        if aws is not None:
            from controller.garbagecollection.controller import GarbageCollector

            gc = GarbageCollector(cluster=cluster, client=client, cloud=cloud)
            rt.threads.append(_thread("garbagecollection", gc.run, rt.lead_stop))
            from controller.interruption.instancehealth import InstanceStatusController

            # DescribeInstanceStatus every minute: instance health with or without an interruption queue
            health = InstanceStatusController(cluster, client, aws.ec2, recorder, is_leader=is_leader)
            rt.threads.append(_thread("interruption.instancestatus", health.run, rt.lead_stop))
            if settings.feature_gates.get("ReservedCapacity", True):
                from controller.capacityreservation.controllers import CapacityTypeController, ExpirationController

                # every minute: reserved nodes whose reservation ended become on-demand; expiring capacity blocks
                # have their nodes replaced
                rt.threads.append(_thread("capacityreservation.capacitytype",
                                          CapacityTypeController(cluster, client, cloud).run, rt.lead_stop))
                rt.threads.append(_thread("capacityreservation.expiration",
                                          ExpirationController(cluster, client, aws.ec2).run, rt.lead_stop))
            if settings.interruption_queue:
                from controller.interruption.controller import InterruptionController

                interruption = InterruptionController(cluster=cluster, client=client, cloud=cloud, sqs=aws.sqs,
                                                      queue_name=settings.interruption_queue, recorder=recorder,
                                                      is_leader=is_leader, rebalance_drift=settings.feature_gates.get(
                                                          "RebalanceRecommendationDrift", False))
                rt.threads.append(_thread("interruption", interruption.run, rt.lead_stop))

    return rt, start_leading


def _disruption(settings: Settings, cluster: Cluster, client: KubeClient, provisioner: Any, recorder: Recorder,
                is_leader: Callable[[], bool]) -> Any:
    """The disruption loop and its orchestration queue, deciding with the settings' gates and policies."""
    from controller.disruption.controller import DisruptionController
    from controller.disruption.queue import Queue as DisruptionQueue
    from controller.disruption.types import GATE_N_TO_M, Options

    options = Options(spot_to_spot=settings.feature_gates.get("SpotToSpotConsolidation", False),
                      many_to_many=settings.feature_gates.get(GATE_N_TO_M, False),
                      preference_policy=settings.preference_policy, min_values_policy=settings.min_values_policy,
                      ignore_dra_requests=settings.ignore_dra_requests)
    return DisruptionController(cluster, provisioner, recorder, DisruptionQueue(cluster, client, recorder),
                                is_leader, options=options)


def _going_away(node: dict[str, Any]) -> bool:
    """A Node deleted or tainted karpenter.sh/disrupted."""
    from controller.termination.drain import has_disrupted_taint

    return bool(node["metadata"].get("deletionTimestamp")) or has_disrupted_taint(node)


def _replay(informer: Informer, handler: Callable[[str, dict[str, Any] | None, dict[str, Any] | None], None]) -> None:
    for obj in informer.items():
        handler("MODIFIED", obj, obj)


def _thread(name: str, target: Callable[[threading.Event], None], stop: threading.Event) -> threading.Thread:
    t = threading.Thread(target=target, args=(stop,), name=name, daemon=True)
    t.start()
    return t


def run(settings: Settings, sources: dict[str, str] | None = None) -> int:
    """Run until SIGTERM/SIGINT; returns the process exit code."""
    from controller.health import serve

    stop = threading.Event()
    exit_code = [0]

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("received signal, shutting down", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    client = KubeClient.from_environment(settings.kubeconfig, settings.kube_client_qps, settings.kube_client_burst)
    try:
        cloud, aws = build_cloud(settings, client)
    except Exception as e:
        log.error("building the cloud provider failed", extra={"error": str(e)[:300]})
        return 1
    recorder = Recorder(client)
    recorder.start(stop)
    elector: LeaderElector | None = None
    if not settings.disable_leader_election:
        elector = LeaderElector(client, settings.leader_election_name, settings.leader_election_namespace,
                                _identity())

    def is_leader() -> bool:
        return elector is None or elector.is_leader()

    rt, start_leading = wire(settings, client, cloud, aws, recorder, is_leader)
    servers = serve(settings.metrics_port, settings.health_probe_port, ready=rt.cluster.synced)
    rt.cluster.start(stop)
    _observe_state(rt.cluster, stop)
    if not rt.cluster.wait_synced(stop, timeout=120):
        if stop.is_set():
            servers.stop()
            return 0
        log.error("cluster state did not sync in 120s; continuing to wait", extra={"controller": "state"})

    def stopped_leading() -> None:
        rt.lead_stop.set()
        if not stop.is_set():
            log.error("leader election lost", extra={"controller": "controller"})
            exit_code[0] = 1
            stop.set()

    if elector is None:
        start_leading()
        stop.wait()
    else:
        elector.run(stop, on_started=start_leading, on_stopped=stopped_leading, release=False)
    stop_leading(rt, elector)
    servers.stop()
    log.info("stopped", extra={"controller": "controller"})
    return exit_code[0]


def stop_leading(rt: Runtime, elector: LeaderElector | None, timeout: float = SHUTDOWN_SECONDS) -> list[str]:
    """Stop the leader's work, wait (up to timeout) for its threads to finish their pass, and only then release the
    Lease, so a standby never leads while this process still writes. Returns the threads still running at the
    release (they do not stop a release: the process exits right after, and a Lease left to expire would cost the
    standby 15 s)."""
    rt.lead_stop.set()
    deadline = time.monotonic() + timeout
    for t in rt.threads:
        t.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in rt.threads if t.is_alive()]
    if alive:
        log.warning("threads still running at shutdown", extra={"controller": "controller",
                                                               "threads": ", ".join(alive[:10])})
    if elector is not None:
        elector.release()  # a no-op unless this process holds the Lease
    return alive


def state_tick(cluster: Cluster, synced_at: float, now: float) -> float:
    """One update of karpenter_cluster_state_synced, _unsynced_time_seconds (how long state has been unsynced, 0
    while synced, as Karpenter reports it) and _node_count; returns when state was last seen synced."""
    from controller import metrics as M

    synced = cluster.synced()
    if synced:
        synced_at = now
    M.CLUSTER_STATE_SYNCED.set(1 if synced else 0)
    M.CLUSTER_STATE_UNSYNCED_TIME.set(now - synced_at)
    M.CLUSTER_STATE_NODE_COUNT.set(len(cluster.nodes()))
    return synced_at


def _observe_state(cluster: Cluster, stop: threading.Event) -> None:
    """Keep the cluster-state gauges current (synced, unsynced time, node count)."""
    from controller import metrics as M

    def loop(stop: threading.Event) -> None:
        ticks = 0
        synced_at = time.monotonic()
        while not stop.wait(1.0):
            synced_at = state_tick(cluster, synced_at, time.monotonic())
            ticks += 1
            if ticks % 10 == 1:
                _pod_states(cluster, M.PODS_STATE)

    _thread("state-metrics", loop, stop)


def _pod_states(cluster: Cluster, gauge: Any) -> None:
    """karpenter_pods_state: one series per pod, with its node's NodePool, zone, arch, capacity and instance type.
    Rebuilt from the cache each time, so deleted pods leave no series behind."""
    nodes = {n.name: n.labels for n in cluster.nodes()}
    gauge.clear()
    for pod in cluster.pods():
        node = pod.node_name
        labels = nodes.get(node, {})
        ref = pod.controller_ref
        owner = f"{ref.get('kind')}/{ref.get('name')}" if ref is not None else ""
        gauge.labels(name=pod.name, namespace=pod.namespace, owner=owner, node=node,
                     scheduled=str(bool(node)).lower(), nodepool=labels.get(L.NODEPOOL, ""),
                     zone=labels.get(L.ZONE, ""), arch=labels.get(L.ARCH, ""),
                     capacity_type=labels.get(L.CAPACITY_TYPE, ""), instance_type=labels.get(L.INSTANCE_TYPE, ""),
                     phase=pod.phase, ready=str(pod.ready).lower(),
                     managed=str(L.NODEPOOL in labels).lower()).set(1)


if __name__ == "__main__":  # pragma: no cover - `karpy controller` is the entry point
    raise SystemExit("run `karpy controller`")
