"""Output of `karpy simulate` (table, JSON, YAML) and `karpy explain`.

Unschedulable pods are grouped by owner (and namespace and reason), with a count and the reason split into one line
per NodePool, so a 60,000-pod Deployment that does not fit prints one group, not 60,000 lines."""

from __future__ import annotations

import re
from typing import Any

from controller.api.quantity import CPU, MEMORY, format_quantity
from controller.ops.output import dump, machine, table, terminal_width, wrap
from controller.scheduling.pod import Pod
from controller.simulate.run import SimulationResult

MAX_OPTIONS = 60  # Karpenter hands CreateFleet at most 60 instance types per launch
MAX_LISTED = 10  # candidates and example pods named in one line
_POOL_PREFIX = re.compile(r'(?:^|; )nodepool "([^"]+)": ')


def split_reason(reason: str) -> list[dict[str, Any]]:
    """The scheduler's reason ('nodepool "a": why; nodepool "b": why') as one entry per NodePool, in order; text
    that names no NodePool comes as an entry with nodePool None. Repeated NodePools keep their distinct reasons."""
    marks = list(_POOL_PREFIX.finditer(reason))
    out: dict[str | None, list[str]] = {}
    head = reason[: marks[0].start()] if marks else reason
    for part in (p.strip() for p in head.split("; ")):
        if part:
            out.setdefault(None, []).append(part)
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(reason)
        text = reason[m.end():end].strip().rstrip(";")
        reasons = out.setdefault(m.group(1), [])
        if text and text not in reasons:
            reasons.append(text)
    return [{"nodePool": pool, "reason": "; ".join(texts)} for pool, texts in out.items()]


def owner_key(pod: Pod) -> str:
    """The owner a pod is grouped under: its controller (Kind/name), or the pod itself."""
    return pod.owner or f"Pod/{pod.name}"


def unschedulable_groups(result: SimulationResult) -> list[dict[str, Any]]:
    """Unschedulable pods grouped by (namespace, owner, reason), in input order: count, pods, reasons per NodePool."""
    by_key = {p.key: p for p in result.pods}
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for key, reason in result.plan.unschedulable.items():
        pod = by_key.get(key)
        namespace, owner = (pod.namespace, owner_key(pod)) if pod else (key.split("/")[0], f"Pod/{key}")
        g = groups.get((namespace, owner, reason))
        if g is None:
            g = groups[(namespace, owner, reason)] = {"namespace": namespace, "owner": owner, "count": 0, "pods": [],
                                                      "reasons": split_reason(reason)}
        g["count"] += 1
        g["pods"].append(key)
    return list(groups.values())


def to_dict(result: SimulationResult) -> dict[str, Any]:
    """The plan as plain data: nodeClaims, existingNodes, unschedulable, cost (the JSON/YAML output)."""
    plan = result.plan
    claims = []
    for c in plan.node_claims:
        requests: dict[str, int] = {}
        for p in c.pods:
            for k, v in p.requests.items():
                requests[k] = requests.get(k, 0) + v
        claims.append({
            "name": c.hostname,
            "nodePool": c.node_pool,
            "instanceType": c.instance_type.name if c.instance_type else None,
            "capacityType": c.capacity_type,
            "zone": c.zone,
            "pricePerHour": round(c.price_per_hour, 5),
            "requests": {k: format_quantity(k, v) for k, v in sorted(requests.items())},
            "pods": [p.key for p in c.pods],
            "instanceTypeOptions": [it.name for it in c.instance_type_options[:MAX_OPTIONS]],
            "instanceTypeOptionsTotal": len(c.instance_type_options),
        })
    return machine("SimulationResult", {
        "catalog": {"name": result.catalog.name, "region": result.catalog.region,
                    "prices": result.catalog.price_source},
        "nodeClaims": claims,
        "existingNodes": [{"name": name, "pods": [p.key for p in pods]} for name, pods in plan.existing.items()],
        "unschedulable": unschedulable_groups(result),
        "cost": {"totalPerHour": round(plan.cost_per_hour, 5), "lowerBoundPerHour": round(plan.lower_bound_per_hour, 5),
                 "gap": round(plan.gap, 4)},
        "notes": result.notes,
    })


def _claim_rows(claims: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """NodeClaims of the same pool, type, capacity type and zone as one row with a count and their sums."""
    groups: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for c in claims:
        key = (c["nodePool"], c["instanceType"] or "-", c["capacityType"], c["zone"])
        g = groups.setdefault(key, {"count": 0, "price": 0.0, "pods": 0, "cpu": [], "memory": []})
        g["count"] += 1
        g["price"] += c["pricePerHour"]
        g["pods"] += len(c["pods"])
        g["cpu"].append(c["requests"].get(CPU, "0"))
        g["memory"].append(c["requests"].get(MEMORY, "0"))
    rows: list[tuple[str, ...]] = []
    for (pool, it, ct, zone), g in groups.items():
        def span(values: list[str]) -> str:
            unique = list(dict.fromkeys(values))
            return unique[0] if len(unique) == 1 else f"{unique[0]}.."
        rows.append((str(g["count"]), pool, it, ct, zone, f"{g['price']:.4f}", span(g["cpu"]), span(g["memory"]),
                     str(g["pods"])))
    return rows


def _table(result: SimulationResult, width: int | None = None) -> str:
    width = terminal_width() if width is None else width
    data = to_dict(result)
    lines = [*wrap(f"catalog: {data['catalog']['name']} ({data['catalog']['region']})", width),
             *wrap(f"prices: {data['catalog']['prices']}", width), ""]
    claims = data["nodeClaims"]
    lines.append(f"NEW NODECLAIMS ({len(claims)})")
    header: tuple[str, ...] = ("COUNT", "NODEPOOL", "TYPE", "CAPACITY", "ZONE", "$/HOUR", "CPU", "MEMORY", "PODS")
    rows = _claim_rows(claims)
    if all(r[0] == "1" for r in rows):  # nothing grouped: the column would only cost width
        header, rows = header[1:], [r[1:] for r in rows]
    lines += table(header, rows, width, gap=2, shrink=(header.index("NODEPOOL"),))
    if data["existingNodes"]:
        lines += ["", f"PODS ON EXISTING NODES ({sum(len(n['pods']) for n in data['existingNodes'])})"]
        for n in data["existingNodes"]:
            shown = ", ".join(n["pods"][:MAX_LISTED]) + (f" and {len(n['pods']) - MAX_LISTED} more"
                                                         if len(n["pods"]) > MAX_LISTED else "")
            lines += wrap(f"{n['name']} ({len(n['pods'])}): {shown}", width, "  ", "      ")
    groups = data["unschedulable"]
    if groups:
        lines += ["", f"UNSCHEDULABLE ({sum(g['count'] for g in groups)} pod(s))"]
        for g in groups:
            if g["owner"].startswith("Pod/") and g["count"] == 1:
                head = g["pods"][0]
            else:
                head = f"{g['owner']} in {g['namespace']}: {g['count']} pod(s), e.g. {g['pods'][0]}"
            lines += wrap(head, width, "  ")
            for r in g["reasons"]:
                text = f"nodepool {r['nodePool']}: {r['reason']}" if r["nodePool"] else r["reason"]
                lines += wrap(text, width, "    ", "      ")
    cost = data["cost"]
    lines += ["", f"cost: ${cost['totalPerHour']:.4f}/h   lower bound: ${cost['lowerBoundPerHour']:.4f}/h   "
                  f"gap: {cost['gap'] * 100:.1f}%"]
    for n in data["notes"]:
        lines += wrap(f"note: {n}", width)
    return "\n".join(lines) + "\n"


def render(result: SimulationResult, output: str, width: int | None = None) -> str:
    """The result in the requested format: table (fitting width, default the terminal's), json or yaml."""
    if output == "table":
        return _table(result, width)
    return dump(to_dict(result), output)


class AmbiguousPod(KeyError):
    """A query that matches pods of more than one owner; the message lists the candidates."""


def _listed(names: list[str]) -> str:
    more = len(names) - MAX_LISTED
    return ", ".join(names[:MAX_LISTED]) + (f" and {more} more" if more > 0 else "")


def find_pods(result: SimulationResult, query: str) -> list[Pod]:
    """The pods a query names: namespace/name or name; an owner (Kind/name, namespace/Kind/name, or the owner's
    name); or a name prefix. KeyError when none, AmbiguousPod when they belong to several owners."""
    pods = result.pods
    exact = [p for p in pods if p.key == query]
    if exact:
        return exact
    by_name = [p for p in pods if p.name == query]
    if len(by_name) == 1:
        return by_name
    owned = [p for p in pods if query in (owner_key(p), f"{p.namespace}/{owner_key(p)}")
             or owner_key(p).split("/", 1)[-1] == query]
    matches = by_name or owned or [p for p in pods if p.name.startswith(query) or p.key.startswith(query)]
    if not matches:
        raise KeyError(f"pod {query!r} is not among the {len(pods)} pending pods of the input (give namespace/name, "
                       "an owner such as Deployment/web, or a name prefix)")
    owners = list(dict.fromkeys(f"{p.namespace}/{owner_key(p)}" for p in matches))
    if len(owners) > 1:
        raise AmbiguousPod(f"{query!r} matches {len(matches)} pods of {len(owners)} owners: {_listed(owners)}; "
                           "name one of them")
    return matches


def _outcome(result: SimulationResult, pod: Pod) -> dict[str, Any]:
    plan = result.plan
    out: dict[str, Any] = {"pod": pod.key, "owner": owner_key(pod)}
    if pod.key in plan.unschedulable:
        return {**out, "outcome": "Unschedulable", "reasons": split_reason(plan.unschedulable[pod.key])}
    for name, placed in plan.existing.items():
        if any(q is pod for q in placed):
            return {**out, "outcome": "ExistingNode", "node": name}
    for c in plan.node_claims:
        if any(q is pod for q in c.pods):
            return {**out, "outcome": "NewNodeClaim", "nodeClaim": {
                "name": c.hostname, "nodePool": c.node_pool,
                "instanceType": c.instance_type.name if c.instance_type else None, "capacityType": c.capacity_type,
                "zone": c.zone, "pricePerHour": round(c.price_per_hour, 5), "sharedWith": len(c.pods) - 1,
                "requirements": c.requirements.describe(),
                "cheapestOptions": [it.name for it in c.instance_type_options[:MAX_LISTED]]}}
    return {**out, "outcome": "NotPlaced"}


def explain(result: SimulationResult, query: str) -> dict[str, Any]:
    """Where the pods a query names go, or why they cannot be scheduled (the machine form of `karpy explain`)."""
    pods = find_pods(result, query)
    return machine("Explanation", {"query": query, "pods": [_outcome(result, p) for p in pods]})


def _one_text(o: dict[str, Any], width: int) -> list[str]:
    if o["outcome"] == "Unschedulable":
        lines = wrap(f"{o['pod']} cannot be scheduled:", width)
        for r in o["reasons"]:
            lines += wrap(f"nodepool {r['nodePool']}: {r['reason']}" if r["nodePool"] else r["reason"], width,
                          "  ", "    ")
        return lines
    if o["outcome"] == "ExistingNode":
        return wrap(f"{o['pod']} fits on existing node {o['node']}", width)
    if o["outcome"] == "NewNodeClaim":
        c = o["nodeClaim"]
        return [*wrap(f"{o['pod']} goes to a new NodeClaim {c['name']} from nodepool {c['nodePool']}: "
                      f"{c['instanceType'] or '-'} {c['capacityType']} in {c['zone']} at ${c['pricePerHour']:.4f}/h, "
                      f"shared with {c['sharedWith']} other pod(s)", width),
                *wrap(f"requirements: {c['requirements']}", width, "  ", "    "),
                *wrap(f"cheapest options: {', '.join(c['cheapestOptions'])}", width, "  ", "    ")]
    return [f"{o['pod']}: not placed"]


def explain_text(doc: dict[str, Any], width: int | None = None) -> str:
    """The explanation for people: one pod in full; several (an owner) summarised by outcome, one example each."""
    width = terminal_width() if width is None else width
    pods = doc["pods"]
    if len(pods) == 1:
        return "\n".join(_one_text(pods[0], width)) + "\n"
    lines = [f"{pods[0]['owner']} ({pods[0]['pod'].split('/')[0]}): {len(pods)} pods"]
    kinds: dict[str, list[dict[str, Any]]] = {}
    for o in pods:
        key = o["outcome"] + (str(o.get("reasons")) if o["outcome"] == "Unschedulable" else "")
        kinds.setdefault(key, []).append(o)
    said = {"Unschedulable": "cannot be scheduled", "ExistingNode": "fit on existing nodes",
            "NewNodeClaim": "go to new NodeClaims", "NotPlaced": "are not placed"}
    for group in kinds.values():
        claims = {o["nodeClaim"]["name"] for o in group if "nodeClaim" in o}
        spread = f" ({len(claims)} NodeClaims)" if len(claims) > 1 else ""
        lines += ["", f"{len(group)} pod(s) {said[group[0]['outcome']]}{spread}, for example:"]
        lines += ["  " + line for line in _one_text(group[0], width - 2)]
    return "\n".join(lines) + "\n"


def explain_pod(result: SimulationResult, pod: str) -> str:
    """The explanation text of one query (see explain); KeyError if it names no pod."""
    return explain_text(explain(result, pod)).rstrip("\n")
