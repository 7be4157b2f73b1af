"""The disruption Snapshot built from the running controller: the informers' objects, and each NodePool's instance
types and readiness as the provisioner sees them (its own code, so both decide on the same inputs)."""

from __future__ import annotations

import time
from collections.abc import Callable

from controller.disruption.types import Snapshot
from controller.provisioning.provisioner import Provisioner
from controller.state.cluster import Cluster
from controller.termination.drain import has_disrupted_taint


def disrupting(cluster: Cluster, held: set[str]) -> set[str]:
    """NodeClaims being disrupted: those a command holds, and those whose Node carries karpenter.sh/disrupted."""
    out = set(held)
    for node in cluster.nodes():
        if has_disrupted_taint(node):
            claim = cluster.nodeclaim_for_node(node)
            if claim is not None:
                out.add(str(claim["metadata"]["name"]))
    return out


def build_snapshot(cluster: Cluster, provisioner: Provisioner, held: set[str],
                   now: Callable[[], float] = time.time) -> Snapshot:
    """One Snapshot of the cluster: every object the core reads, instance types per NodePool from the cloud provider
    (through the provisioner, which names the pools that cannot launch and why), and what is already disrupting."""
    pools = provisioner.pool_sources()  # the pass's simulation translates them (once) with the rest
    return Snapshot(
        now=now(),
        nodepools=cluster.nodepools(),
        nodeclasses={str(nc["metadata"]["name"]): nc for nc in cluster.nodeclasses()},
        nodeclaims=[*cluster.nodeclaims()],
        nodes=[*cluster.nodes()],
        pods=[*cluster.pods()],
        pdbs=cluster.pdbs(),
        daemonsets=cluster.daemonsets(),
        instance_types={str(p.manifest["metadata"]["name"]): p.instance_types for p in pools},
        nodepool_not_ready={str(p.manifest["metadata"]["name"]): p.not_ready for p in pools if p.not_ready},
        disrupting=disrupting(cluster, held),
        volumes=cluster.volume_topology(),
        namespace_labels=cluster.namespace_labels(),
    )
