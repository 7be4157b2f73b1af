"""`karpy status`: NodePools (usage against limits, Ready), NodeClaims (state, age, instance type, zone, capacity type,
price, node, and their disruption state: Drifted and why, Consolidatable, blocked and why) and the pods waiting for
capacity with the last reason the scheduler gave, read from the cluster in six list calls."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from controller.api import conditions as C
from controller.api import labels as L
from controller.api.quantity import QuantityError, format_quantity, resources_from_dict
from controller.catalog.pricing import PriceTable
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import KubeError, NotFoundError
from controller.ops.connect import kube_error
from controller.ops.errors import OpsError
from controller.ops.output import age, dump, machine, table, terminal_width, wrap
from controller.state.usage import NODES, nodepool_usage

PRICE_SOURCE = "bundled aws-us-east-1 catalog (estimates; `karpy catalog show`)"
# the order in which a NodeClaim comes up, and what it is doing while the condition is not yet true
LIFECYCLE = (("Launched", "Launching"), ("Registered", "Registering"), ("Initialized", "Initializing"))
SHOWN_RESOURCES = ("cpu", "memory", "nodes")


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _name(obj: dict[str, Any]) -> str:
    return str(_meta(obj).get("name"))


def _created(obj: dict[str, Any]) -> float | None:
    return C.parse_time(_meta(obj).get("creationTimestamp"))


def nodeclaim_state(claim: dict[str, Any]) -> tuple[str, str]:
    """(state, why): Deleting, a failed condition's reason, Launching/Registering/Initializing, or Ready."""
    status = claim.get("status") or {}
    if _meta(claim).get("deletionTimestamp"):
        return "Deleting", ""
    for type_, doing in LIFECYCLE:
        cond = C.get(status, type_)
        if cond is None or cond.get("status") != "True":
            if cond is not None and cond.get("status") == "False" and cond.get("reason"):
                return str(cond["reason"]), str(cond.get("message") or "")
            return doing, str((cond or {}).get("message") or "")
    return "Ready", ""


def price(prices: PriceTable, instance_type: str, capacity_type: str, zone: str) -> float | None:
    """$/h of an offering in the catalog; None when the catalog does not price it (another region, unknown type)."""
    zones = {z for (_, z) in prices.spot}
    if not instance_type or zone not in zones:
        return None
    if capacity_type == L.CAPACITY_TYPE_SPOT:
        return prices.spot.get((instance_type, zone))
    return prices.on_demand.get(instance_type)


def owner_of(pod: dict[str, Any]) -> str:
    """Kind/name of the pod's controller, a ReplicaSet named after its Deployment's template hash shown as that
    Deployment; "Pod/<name>" for a bare pod."""
    meta = _meta(pod)
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            kind, name = str(ref.get("kind")), str(ref.get("name"))
            template_hash = (meta.get("labels") or {}).get("pod-template-hash")
            if kind == "ReplicaSet" and template_hash and name.endswith("-" + template_hash):
                return f"Deployment/{name[: -len(template_hash) - 1]}"
            return f"{kind}/{name}"
    return f"Pod/{meta.get('name')}"


def _nodepool(pool: dict[str, Any], claims: list[dict[str, Any]], used: dict[str, int]) -> dict[str, Any]:
    spec = pool.get("spec") or {}
    status = pool.get("status") or {}
    ready = C.get(status, "Ready")
    try:
        limits = resources_from_dict(spec.get("limits"))
    except QuantityError:
        limits = {}
    used = {NODES: 0, **used}  # what the pool's nodes hold, as Karpenter's counter sums it
    resources = {}
    for name in sorted(set(used) | set(limits), key=lambda n: (n not in SHOWN_RESOURCES, n)):
        entry: dict[str, Any] = {"used": format_quantity(name, used.get(name, 0))}
        if name in limits:
            entry["limit"] = format_quantity(name, limits[name])
            entry["percent"] = round(100 * used.get(name, 0) / limits[name], 1) if limits[name] else None
        resources[name] = entry
    ref = ((spec.get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
    return {"name": _meta(pool).get("name"), "ready": None if ready is None else ready.get("status") == "True",
            "readyMessage": (ready or {}).get("message") or "", "nodeClass": ref.get("name"),
            "weight": spec.get("weight"), "nodeClaims": len(claims), "resources": resources}


def _nodeclaim(claim: dict[str, Any], prices: PriceTable, now: float, blocked: str | None = None) -> dict[str, Any]:
    labels = _meta(claim).get("labels") or {}
    status = claim.get("status") or {}
    state, why = nodeclaim_state(claim)
    created = _created(claim)
    it, ct, zone = labels.get(L.INSTANCE_TYPE, ""), labels.get(L.CAPACITY_TYPE, ""), labels.get(L.ZONE, "")
    return {"name": _meta(claim).get("name"), "nodePool": labels.get(L.NODEPOOL), "state": state, "message": why,
            "ageSeconds": None if created is None else int(now - created), "instanceType": it or None,
            "zone": zone or None, "capacityType": ct or None, "pricePerHour": price(prices, it, ct, zone),
            "node": status.get("nodeName") or None, "providerID": status.get("providerID") or None,
            "disruption": disruption_state(claim, blocked)}


# Karpenter's event reasons on a NodeClaim that say why it is not a disruption candidate
BLOCKED_REASONS = ("DisruptionBlocked", "Unconsolidatable")


def _event_time(ev: dict[str, Any]) -> float:
    return (C.parse_time(ev.get("lastTimestamp")) or C.parse_time(ev.get("eventTime"))
            or C.parse_time(_meta(ev).get("creationTimestamp")) or 0.0)


def _last_blocked(events: list[dict[str, Any]]) -> dict[str, str]:
    """NodeClaim name -> the message of its latest DisruptionBlocked/Unconsolidatable event."""
    latest: dict[str, tuple[float, str]] = {}
    for ev in events:
        if ev.get("reason") not in BLOCKED_REASONS:
            continue
        name = str((ev.get("involvedObject") or {}).get("name"))
        when = _event_time(ev)
        if name not in latest or when >= latest[name][0]:
            latest[name] = (when, " ".join(str(ev.get("message") or "").split())[:300])
    return {k: v[1] for k, v in latest.items()}


def disruption_state(claim: dict[str, Any], blocked: str | None = None) -> dict[str, Any]:
    """A NodeClaim's disruption state as the controller keeps it: Drifted (and why), Consolidatable, being disrupted
    (the DisruptionReason condition) and, from the latest event, why it is not a candidate."""
    status = claim.get("status") or {}
    drifted = C.get(status, "Drifted")
    consolidatable = C.get(status, "Consolidatable")
    disrupting = C.get(status, "DisruptionReason")
    return {"drifted": str(drifted.get("reason") or "Drifted") if drifted and drifted.get("status") == "True"
            else None,
            "consolidatable": None if consolidatable is None else consolidatable.get("status") == "True",
            "disrupting": str(disrupting.get("reason") or "") or None
            if disrupting and disrupting.get("status") == "True" else None,
            "blocked": blocked or None}


def _disruption_cell(d: dict[str, Any]) -> tuple[str, str]:
    """(state, why) for the table: Disrupting, Drifted, Blocked, Consolidatable, or ("", "") when none applies."""
    if d["disrupting"]:
        return "Disrupting", d["disrupting"]
    parts = []
    if d["drifted"]:
        parts.append(("Drifted", d["drifted"]))
    if d["blocked"]:
        parts.append(("Blocked", d["blocked"]))
    if d["consolidatable"]:
        parts.append(("Consolidatable", ""))
    if not parts:
        return "", ""
    return ",".join(p[0] for p in parts), "; ".join(p[1] for p in parts if p[1])


def _last_failed_scheduling(events: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(namespace, pod) -> the message of its latest FailedScheduling event."""
    latest: dict[tuple[str, str], tuple[float, str]] = {}
    for ev in events:
        obj = ev.get("involvedObject") or {}
        key = (str(obj.get("namespace")), str(obj.get("name")))
        when = (C.parse_time(ev.get("lastTimestamp")) or C.parse_time(ev.get("eventTime"))
                or C.parse_time(_meta(ev).get("creationTimestamp")) or 0.0)
        if key not in latest or when >= latest[key][0]:
            latest[key] = (when, " ".join(str(ev.get("message") or "").split()))
    return {k: v[1] for k, v in latest.items()}


def collect(client: KubeClient, prices: PriceTable, now: float | None = None) -> dict[str, Any]:
    """The status document (machine form): nodePools, nodeClaims and pendingPods."""
    now = time.time() if now is None else now
    notes: list[str] = []
    try:
        pools, _ = client.list(R.NODEPOOLS)
        claims, _ = client.list(R.NODECLAIMS)
        try:
            nodes, _ = client.list(R.NODES)
        except KubeError as e:
            if e.status != 403:
                raise
            nodes = []  # the NodeClaims' capacity stands in for their Nodes'
            notes.append("not allowed to list nodes: NodePool usage is counted from NodeClaims alone")
        pods, _ = client.list(R.PODS, field_selector="status.phase=Pending,spec.nodeName=")
        events_readable = True
        try:
            events, _ = client.list(R.EVENTS, field_selector="reason=FailedScheduling,involvedObject.kind=Pod")
        except KubeError as e:
            if e.status != 403:
                raise
            events, events_readable = [], False  # the rest is still worth showing to someone who may not read events
            notes.append("not allowed to list events: the pending pods' scheduling reasons are not shown")
        claim_events: list[dict[str, Any]] = []
        if events_readable:  # why NodeClaims are not disruption candidates, from the controller's events
            claim_events, _ = client.list(R.EVENTS, field_selector="involvedObject.kind=NodeClaim")
    except NotFoundError:
        raise OpsError(f"the cluster at {client.host} has no NodePool/NodeClaim resources (karpenter.sh/v1 CRDs "
                       "are not installed: `karpy crds | kubectl apply -f -`)") from None
    except KubeError as e:
        raise kube_error(e, client) from None
    by_pool: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for claim in claims:
        by_pool[str((_meta(claim).get("labels") or {}).get(L.NODEPOOL, ""))].append(claim)
    used = nodepool_usage(claims, nodes)
    reasons = _last_failed_scheduling(events)
    blocked = _last_blocked(claim_events)
    pending = []
    for pod in sorted(pods, key=lambda p: (_meta(p).get("namespace", ""), _meta(p).get("name", ""))):
        meta = _meta(pod)
        created = _created(pod)
        key = (str(meta.get("namespace")), str(meta.get("name")))
        pending.append({"namespace": key[0], "name": key[1], "owner": owner_of(pod),
                        "ageSeconds": None if created is None else int(now - created),
                        "reason": reasons.get(key) or None})
    return machine("Status", {
        "cluster": client.host,
        "nodePools": [_nodepool(p, by_pool.get(_name(p), []), used.get(_name(p), {}))
                      for p in sorted(pools, key=_name)],
        "nodeClaims": [_nodeclaim(c, prices, now, blocked.get(str(_meta(c).get("name"))))
                       for c in sorted(claims, key=lambda c: str(_meta(c).get("name")))],
        "pendingPods": pending,
        "prices": PRICE_SOURCE,
        "notes": notes,
    })


def _usage_cell(resources: dict[str, Any], name: str) -> str:
    entry = resources.get(name)
    if entry is None:
        return "-"
    return f"{entry['used']}/{entry['limit']}" if "limit" in entry else entry["used"]


def group_pending(pending: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pending pods grouped by (namespace, owner, reason): one row per group with a count and an example pod."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for p in pending:
        key = (p["namespace"], p["owner"], p["reason"] or "")
        g = groups.setdefault(key, {"namespace": p["namespace"], "owner": p["owner"], "reason": p["reason"],
                                    "count": 0, "example": p["name"], "oldestSeconds": p["ageSeconds"]})
        g["count"] += 1
        if p["ageSeconds"] is not None and (g["oldestSeconds"] is None or p["ageSeconds"] > g["oldestSeconds"]):
            g["oldestSeconds"] = p["ageSeconds"]
    return list(groups.values())


def render_table(doc: dict[str, Any], width: int | None = None) -> str:
    """The status as kubectl-style tables fitting width, pending pods grouped by owner and reason."""
    width = terminal_width() if width is None else width
    out = [f"cluster: {doc['cluster']}", ""]
    pools = doc["nodePools"]
    out.append(f"NODEPOOLS ({len(pools)})")
    rows: list[tuple[str, ...]]
    if pools:
        rows = [(p["name"], {True: "True", False: "False", None: "Unknown"}[p["ready"]],
                 _usage_cell(p["resources"], "cpu"), _usage_cell(p["resources"], "memory"),
                 _usage_cell(p["resources"], "nodes"), str(p["nodeClass"] or "-")) for p in pools]
        out += table(("NAME", "READY", "CPU", "MEMORY", "NODES", "NODECLASS"), rows, width)
        for p in pools:
            if p["ready"] is False and p["readyMessage"]:
                out += wrap(f"{p['name']}: {p['readyMessage']}", width, "  ")
    else:
        out.append("  (none)")
    claims = doc["nodeClaims"]
    out += ["", f"NODECLAIMS ({len(claims)})"]
    if claims:
        rows = [(c["name"], c["nodePool"] or "-", c["state"],
                 "-" if c["ageSeconds"] is None else age(c["ageSeconds"]), c["instanceType"] or "-",
                 c["zone"] or "-", c["capacityType"] or "-",
                 "-" if c["pricePerHour"] is None else f"{c['pricePerHour']:.4f}", c["node"] or "-")
                for c in claims]
        out += table(("NAME", "NODEPOOL", "STATE", "AGE", "TYPE", "ZONE", "CAPACITY", "$/H", "NODE"), rows, width)
        total = sum(c["pricePerHour"] or 0.0 for c in claims)
        out += wrap(f"total: ${total:.4f}/h (prices: {doc['prices']})", width)
        states = [(c["name"], *_disruption_cell(c["disruption"])) for c in claims if c.get("disruption")]
        states = [s for s in states if s[1]]
        if states:
            out += ["", f"DISRUPTION ({len(states)})"]
            lines = table(("NAME", "STATE"), [(n, st) for n, st, _ in states], width, shrink=(0,))
            out.append(lines[0])
            for line, (_, _, why) in zip(lines[1:], states, strict=True):
                out.append(line)
                if why:
                    out += wrap(why, width, "    ")
    else:
        out.append("  (none)")
    pending = doc["pendingPods"]
    out += ["", f"PENDING PODS ({len(pending)})"]
    if pending:
        groups = group_pending(pending)
        rows = [(g["namespace"], g["owner"], str(g["count"]),
                 "-" if g["oldestSeconds"] is None else age(g["oldestSeconds"])) for g in groups]
        lines = table(("NAMESPACE", "OWNER", "PODS", "OLDEST"), rows, width)
        out.append(lines[0])
        for line, g in zip(lines[1:], groups, strict=True):
            out.append(line)
            out += wrap(g["reason"] or "no FailedScheduling event yet", width, "    ")
    else:
        out.append("  (none)")
    for note in doc.get("notes") or []:
        out += ["", *wrap(f"note: {note}", width)]
    return "\n".join(out) + "\n"


def render(doc: dict[str, Any], fmt: str, width: int | None = None) -> str:
    """table, json or yaml."""
    return render_table(doc, width) if fmt == "table" else dump(doc, fmt)
