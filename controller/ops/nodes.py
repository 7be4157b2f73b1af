"""`karpy drain`, `cordon`, `uncordon`: what operators do to a node by hand, done Karpenter's way.

Draining a Karpenter node means deleting its NodeClaim: the controller's termination then taints the node
karpenter.sh/disrupted, evicts its pods through the Eviction API (respecting PodDisruptionBudgets and
terminationGracePeriod), terminates the instance and removes the finalizer. `kubectl drain` would evict the pods but
leave the node and the instance to be noticed later."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller.api.pods import owned_by_daemonset
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import KubeError, NotFoundError
from controller.ops.connect import kube_error
from controller.ops.errors import OpsError, did_you_mean
from controller.termination.drain import has_disrupted_taint

POLL_INTERVAL = 2.0


def _node_name_of(claim: dict[str, Any]) -> str:
    return str((claim.get("status") or {}).get("nodeName") or "")


def nodeclaim_for_node(client: KubeClient, node: dict[str, Any]) -> dict[str, Any] | None:
    """The NodeClaim behind a Node: its owner reference, the same providerID, or a status.nodeName naming it."""
    meta = node.get("metadata") or {}
    owners = [r.get("name") for r in meta.get("ownerReferences") or []
              if isinstance(r, dict) and r.get("kind") == "NodeClaim"]
    provider_id = str((node.get("spec") or {}).get("providerID") or "")
    claims, _ = client.list(R.NODECLAIMS)
    for claim in claims:
        cmeta = claim.get("metadata") or {}
        if cmeta.get("name") in owners:
            return claim
    for claim in claims:
        if provider_id and (claim.get("status") or {}).get("providerID") == provider_id:
            return claim
    for claim in claims:
        if _node_name_of(claim) == meta.get("name"):
            return claim
    return None


def resolve_nodeclaim(client: KubeClient, name: str) -> dict[str, Any]:
    """A NodeClaim by its name, or by the name of its Node; OpsError naming what was looked for."""
    try:
        try:
            return client.get(R.NODECLAIMS, name)
        except NotFoundError:
            pass
        try:
            node = client.get(R.NODES, name)
        except NotFoundError:
            claims, _ = client.list(R.NODECLAIMS)
            names = sorted({str(c["metadata"]["name"]) for c in claims} | {_node_name_of(c) for c in claims} - {""})
            raise OpsError(f"unknown NodeClaim or Node {name!r}{did_you_mean(name, names)}") from None
        claim = nodeclaim_for_node(client, node)
    except KubeError as e:
        raise kube_error(e, client) from None
    if claim is None:
        raise OpsError(f"node {name} has no NodeClaim (not launched by karpy); drain it with kubectl drain")
    return claim


def resolve_node(client: KubeClient, name: str) -> str:
    """A Node's name from a Node or NodeClaim name; OpsError when neither exists or the NodeClaim has no node yet."""
    try:
        try:
            client.get(R.NODES, name)
            return name
        except NotFoundError:
            pass
        try:
            claim = client.get(R.NODECLAIMS, name)
        except NotFoundError:
            nodes, _ = client.list(R.NODES)
            raise OpsError(f"unknown node {name!r}"
                           f"{did_you_mean(name, sorted(str(n['metadata']['name']) for n in nodes))}") from None
    except KubeError as e:
        raise kube_error(e, client) from None
    node_name = _node_name_of(claim)
    if not node_name:
        raise OpsError(f"NodeClaim {name} has no node yet")
    return node_name


def set_unschedulable(client: KubeClient, name: str, value: bool) -> str:
    """Cordon (value True) or uncordon a node; the line kubectl would print."""
    node_name = resolve_node(client, name)
    verb = "cordoned" if value else "uncordoned"
    try:
        node = client.get(R.NODES, node_name)
        if bool((node.get("spec") or {}).get("unschedulable")) == value:
            return f"node/{node_name} already {verb}"
        client.patch(R.NODES, node_name, {"spec": {"unschedulable": value or None}})
    except KubeError as e:
        raise kube_error(e, client, f"node {node_name}") from None
    return f"node/{node_name} {verb}"


@dataclass
class DrainProgress:
    """Where a drain stands: the NodeClaim still there, its node, the pods left on it."""

    nodeclaim: str
    present: bool
    node: str = ""
    node_present: bool = False
    tainted: bool = False
    pods_left: int = 0

    def line(self) -> str:
        """One human line."""
        if not self.present:
            return f"nodeclaim/{self.nodeclaim} deleted"
        if self.node and self.node_present:
            taint = "tainted karpenter.sh/disrupted, " if self.tainted else ""
            return f"nodeclaim/{self.nodeclaim}: draining node {self.node} ({taint}{self.pods_left} pod(s) left)"
        if self.node:
            return f"nodeclaim/{self.nodeclaim}: node {self.node} gone, terminating the instance"
        return f"nodeclaim/{self.nodeclaim}: terminating the instance"


def _evictable(pod: dict[str, Any]) -> bool:
    """Pods the drain waits for: not finished, not owned by a DaemonSet, not a static (mirror) pod."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    meta = pod.get("metadata") or {}
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    return not owned_by_daemonset(pod)


def drain_progress(client: KubeClient, nodeclaim: str) -> DrainProgress:
    """Where the drain of nodeclaim stands now."""
    try:
        try:
            claim = client.get(R.NODECLAIMS, nodeclaim)
        except NotFoundError:
            return DrainProgress(nodeclaim, False)
        node_name = _node_name_of(claim)
        state = DrainProgress(nodeclaim, True, node_name)
        if node_name:
            try:
                node = client.get(R.NODES, node_name)
            except NotFoundError:
                return state
            state.node_present = True
            state.tainted = has_disrupted_taint(node)
            pods, _ = client.list(R.PODS, field_selector=f"spec.nodeName={node_name}")
            state.pods_left = sum(1 for p in pods if _evictable(p))
        return state
    except KubeError as e:
        raise kube_error(e, client) from None


def drain(client: KubeClient, name: str) -> tuple[str, str]:
    """Delete the NodeClaim of a NodeClaim or Node name: (NodeClaim name, the line to print)."""
    claim = resolve_nodeclaim(client, name)
    meta = claim["metadata"]
    claim_name = str(meta["name"])
    if meta.get("deletionTimestamp"):
        return claim_name, f"nodeclaim/{claim_name} is already being deleted"
    try:
        client.delete(R.NODECLAIMS, claim_name, uid=meta.get("uid"))
    except NotFoundError:
        return claim_name, f"nodeclaim/{claim_name} already deleted"
    except KubeError as e:
        raise kube_error(e, client, f"nodeclaim {claim_name}") from None
    node = _node_name_of(claim)
    return claim_name, f"nodeclaim/{claim_name} deleted{f' (node {node})' if node else ''}: the controller drains it"


def wait_gone(client: KubeClient, nodeclaim: str, report: Callable[[DrainProgress], None], timeout: float = 0,
              interval: float = POLL_INTERVAL, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> None:
    """Poll until the NodeClaim is gone, reporting each change; OpsError after timeout seconds (0: no limit)."""
    deadline = clock() + timeout if timeout else None
    last: DrainProgress | None = None
    while True:
        state = drain_progress(client, nodeclaim)
        if state != last:
            report(state)
            last = state
        if not state.present:
            return
        if deadline is not None and clock() >= deadline:
            raise OpsError(f"nodeclaim/{nodeclaim} still there after {timeout:.0f}s ({state.line()}); is the karpy "
                           "controller running?")
        sleep(interval)
