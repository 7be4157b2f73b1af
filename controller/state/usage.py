"""What a NodePool uses against its limits, by Karpenter's one rule (its cluster state's NodePoolResourcesFor): the
NodePool's status.resources and status.nodes, the usage gauge, `karpy status`, the provisioner's and the disruption
simulation's limits and `karpy simulate` all read it from here.

Karpenter's cluster state holds one node per provider ID: a launched NodeClaim paired with its Node, or a Node of a
NodePool without a NodeClaim. Each counts one node and its capacity (the Node's once initialized; before that the
Node's with the NodeClaim's filling what the kubelet has not reported, or the NodeClaim's alone while no Node has
registered), under the NodePool label of the NodeClaim until the Node registers and of the Node after. Nodes marked for
deletion count nothing: a deleting NodeClaim, one whose instance is terminating, a deleting Node without a NodeClaim,
and a Node a disruption command is replacing (karpenter.sh/disrupted, the mark that outlives a restart). NodeClaims not
launched yet are not in Karpenter's state; the provisioner, which plans onto them across batches, sizes them itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from controller.api import labels as L
from controller.api.quantity import QuantityError
from controller.state.views import NodeClaimView, NodeView

NODES = "nodes"  # Karpenter's resources.Node: the count of nodes, kept with the resources


class UsageError(ValueError):
    """A NodeClaim or Node whose capacity cannot be read (names the object and field)."""


def _capacity(view: NodeView | NodeClaimView, kind: str, strict: bool) -> dict[str, int]:
    try:
        return view.capacity
    except QuantityError as e:
        if strict:
            raise UsageError(f"{kind}/{view.name}: status.capacity: {e}") from None
        return {}  # a capacity the API accepted but we cannot parse counts as the node alone


def node_capacity(claim: NodeClaimView | None, node: NodeView | None, strict: bool = False) -> dict[str, int]:
    """Karpenter's StateNode capacity: the Node's when initialized (or not Karpenter's); else the Node's with zero or
    missing values taken from the NodeClaim; the NodeClaim's while no Node exists."""
    if node is None:
        return _capacity(claim, "NodeClaim", strict) if claim is not None else {}
    ret = _capacity(node, "Node", strict)
    if claim is not None and not node.initialized:
        for k, v in _capacity(claim, "NodeClaim", strict).items():
            if not ret.get(k):
                ret[k] = v
    return ret


def nodepool_usage(nodeclaims: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]], *,
                   unlaunched: Callable[[NodeClaimView], Mapping[str, int]] | None = None,
                   strict: bool = False) -> dict[str, dict[str, int]]:
    """Per NodePool, the capacity its nodes hold and how many there are (under "nodes"), by the rule above; pools
    with nothing counted are absent. `unlaunched` sizes NodeClaims not launched yet (not counted without it);
    `strict` raises UsageError on a capacity that cannot be read instead of counting the node alone."""
    claims = [NodeClaimView.of(c) for c in nodeclaims]
    by_pid: dict[str, NodeView] = {}
    for raw in nodes:
        n = NodeView.of(raw)
        if not n.nodepool:
            continue  # not a NodePool's node: Karpenter's state keeps it, no limit counts it
        if not n.initialized and not n.labels.get(L.INSTANCE_TYPE) and n.provider_id:
            continue  # Karpenter's state waits for the instance-type label before it tracks a new node
        # a Node without a provider ID (a hand-written document) stands alone, as Karpenter keys unmanaged nodes
        by_pid[n.provider_id or f"node/{n.name}"] = n
    out: dict[str, dict[str, int]] = {}

    def add(pool: str, capacity: Mapping[str, int]) -> None:
        if not pool:
            return
        used = out.setdefault(pool, {NODES: 0})
        used[NODES] += 1
        for k, v in capacity.items():
            if k != NODES:
                used[k] = used.get(k, 0) + v

    for claim in claims:
        pid = claim.provider_id
        if not pid:
            if unlaunched is not None and not claim.deleting:
                add(claim.nodepool, unlaunched(claim))
            continue
        node = by_pid.pop(pid) if pid in by_pid else None
        if claim.deleting or claim.instance_terminating or (node is not None and node.disrupted):
            continue
        pool = node.nodepool if node is not None and node.registered else claim.nodepool
        add(pool, node_capacity(claim, node, strict))
    for node in by_pid.values():  # Nodes without a NodeClaim
        if node.deleting or node.disrupted:
            continue
        add(node.nodepool, node_capacity(None, node, strict))
    return out
