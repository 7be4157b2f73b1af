"""A small builder of disruption Snapshots for unit tests: NodePools, NodeClaims with their Nodes, pods, PDBs and
hand-made instance types with per-zone, per-capacity-type prices (Karpenter's test fixtures, as plain API dicts)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from controller.api import labels as L
from controller.catalog.types import InstanceType, Offering
from controller.disruption.types import Snapshot

Obj = dict[str, Any]
NOW = 1_800_000_000.0  # a fixed wall clock for every test
ZONES = ("test-zone-a", "test-zone-b")


def ts(epoch: float) -> str:
    """RFC 3339 of an epoch time."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def itype(name: str, cpu: float, mem_gib: float, od: float, spot: float | None = None, pods: int = 110,
          zones: tuple[str, ...] = ZONES, **labels: str) -> InstanceType:
    """An instance type with on-demand (and optionally spot) offerings in every zone at these prices."""
    offerings = [Offering(z, L.CAPACITY_TYPE_ON_DEMAND, od) for z in zones]
    if spot is not None:
        offerings += [Offering(z, L.CAPACITY_TYPE_SPOT, spot) for z in zones]
    base = {L.INSTANCE_TYPE: name, L.ARCH: "amd64", L.OS: "linux",
            L.INSTANCE_FAMILY: name.split(".")[0], L.INSTANCE_CPU: str(int(cpu))}
    base.update(labels)
    return InstanceType(name, base, {"cpu": int(cpu * 1000), "memory": int(mem_gib * 2**30), "pods": pods},
                        offerings=offerings)


def nodepool(name: str = "default", *, policy: str = "WhenEmptyOrUnderutilized", after: str | None = "0s",
             budgets: list[Obj] | None = None, requirements: list[Obj] | None = None,
             replicas: int | None = None, limits: Obj | None = None) -> Obj:
    """A NodePool (karpenter.sh/v1) with its disruption settings."""
    disruption: Obj = {"consolidationPolicy": policy, "budgets": budgets if budgets is not None else [
        {"nodes": "100%"}]}
    if after is not None:
        disruption["consolidateAfter"] = after
    spec: Obj = {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                        "name": "default"},
                                       "requirements": requirements or []}},
                 "disruption": disruption}
    if replicas is not None:
        spec["replicas"] = replicas
    if limits is not None:
        spec["limits"] = limits
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def pod(name: str, node: str | None = None, *, cpu: str = "100m", mem: str = "128Mi", ns: str = "default",
        labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, owner: str = "ReplicaSet",
        priority: int | None = None, started: float | None = None, phase: str = "Running",
        pending: bool = False) -> Obj:
    """A pod (bound to `node`, or pending and marked Unschedulable by the kube-scheduler when `pending`)."""
    meta: Obj = {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "labels": labels or {"app": name},
                 "annotations": annotations or {}, "creationTimestamp": ts(NOW - 3600)}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1" if owner != "Node" else "v1", "kind": owner,
                                    "name": f"{name}-owner", "uid": f"owner-{name}", "controller": True}]
    spec: Obj = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu,
                                                                                        "memory": mem}}}]}
    if node:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    status: Obj = {"phase": phase if not pending else "Pending",
                   "startTime": ts(started if started is not None else NOW - 3600)}
    if pending:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def pdb(name: str, match: dict[str, str], allowed: int, ns: str = "default", api: str = "policy/v1") -> Obj:
    """A PodDisruptionBudget with its status.disruptionsAllowed."""
    return {"apiVersion": api, "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": match}, "maxUnavailable": 1},
            "status": {"disruptionsAllowed": allowed}}


@dataclass
class World:
    """Objects for one Snapshot; add nodes and pods, then call snapshot()."""

    types: list[InstanceType]
    nodepools: list[Obj] = field(default_factory=lambda: [nodepool()])
    nodeclaims: list[Obj] = field(default_factory=list)
    nodes: list[Obj] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    pdbs: list[Obj] = field(default_factory=list)
    daemonsets: list[Obj] = field(default_factory=list)
    drifted: dict[str, str] = field(default_factory=dict)
    disrupting: set[str] = field(default_factory=set)

    def node(self, name: str, type_name: str, *, pool: str = "default", zone: str = ZONES[0],
             ct: str = L.CAPACITY_TYPE_ON_DEMAND, consolidatable: bool = True, drifted: float | None = None,
             initialized: bool = True, ready: bool = True, annotations: dict[str, str] | None = None,
             created: float = NOW - 86400, expire_after: str | None = None, labels: dict[str, str] | None = None,
             claim_spec: Obj | None = None, with_node: bool = True) -> Obj:
        """A NodeClaim and its Node (same name) of that instance type, launched a day ago; returns the Node."""
        it = next((t for t in self.types if t.name == type_name), None)
        cap = {"cpu": f"{it.capacity['cpu']}m", "memory": str(it.capacity["memory"]),
               "pods": str(it.capacity["pods"])} if it else {"cpu": "2", "memory": "8Gi", "pods": "110"}
        node_labels = {L.NODEPOOL: pool, L.INSTANCE_TYPE: type_name, L.ZONE: zone, L.CAPACITY_TYPE: ct,
                       L.HOSTNAME: name, L.ARCH: "amd64", L.OS: "linux", L.INITIALIZED: str(initialized).lower(),
                       L.REGISTERED: "true"}
        if labels is not None:
            node_labels.update(labels)
            node_labels = {k: v for k, v in node_labels.items() if v}
        conds = [{"type": "Launched", "status": "True", "lastTransitionTime": ts(created)},
                 {"type": "Registered", "status": "True", "lastTransitionTime": ts(created)}]
        if initialized:
            conds.append({"type": "Initialized", "status": "True", "lastTransitionTime": ts(created)})
        if consolidatable:
            conds.append({"type": "Consolidatable", "status": "True", "lastTransitionTime": ts(created)})
        if drifted is not None:
            conds.append({"type": "Drifted", "status": "True", "reason": "NodePoolDrifted",
                          "lastTransitionTime": ts(drifted)})
        pid = f"aws:///{zone}/i-{name}"
        spec: Obj = {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": [{"key": L.INSTANCE_TYPE, "operator": "In", "values": [type_name]}]}
        if expire_after is not None:
            spec["expireAfter"] = expire_after
        spec.update(claim_spec or {})
        self.nodeclaims.append({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": dict(node_labels), "creationTimestamp": ts(created)},
            "spec": spec,
            "status": {"providerID": pid, "nodeName": name if with_node else "", "capacity": cap,
                       "allocatable": cap, "conditions": conds}})
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": node_labels, "annotations": annotations or {},
                             "creationTimestamp": ts(created)},
                "spec": {"providerID": pid},
                "status": {"capacity": cap, "allocatable": cap,
                           "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
        if with_node:
            self.nodes.append(node)
        return node

    def snapshot(self, now: float = NOW) -> Snapshot:
        """The Snapshot of everything added, every NodePool offered every type."""
        return Snapshot(now=now, nodepools=self.nodepools, nodeclaims=self.nodeclaims, nodes=self.nodes,
                        pods=self.pods, pdbs=self.pdbs, daemonsets=self.daemonsets,
                        instance_types={str(np_["metadata"]["name"]): list(self.types) for np_ in self.nodepools},
                        drifted=dict(self.drifted), disrupting=set(self.disrupting))
