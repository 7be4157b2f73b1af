"""Output of `karpy simulate` (table, JSON, YAML) and `karpy explain`."""

from __future__ import annotations

import json
from typing import Any

import yaml

from controller.api.quantity import CPU, MEMORY, format_quantity
from controller.simulate.run import SimulationResult

MAX_OPTIONS = 60  # Karpenter hands CreateFleet at most 60 instance types per launch


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
    return {
        "catalog": {"name": result.catalog.name, "region": result.catalog.region,
                    "prices": result.catalog.price_source},
        "nodeClaims": claims,
        "existingNodes": [{"name": name, "pods": [p.key for p in pods]} for name, pods in plan.existing.items()],
        "unschedulable": [{"pod": k, "reason": v} for k, v in plan.unschedulable.items()],
        "cost": {"totalPerHour": round(plan.cost_per_hour, 5), "lowerBoundPerHour": round(plan.lower_bound_per_hour, 5),
                 "gap": round(plan.gap, 4)},
        "notes": result.notes,
    }


def _table(result: SimulationResult) -> str:
    data = to_dict(result)
    lines = [f"catalog: {data['catalog']['name']} ({data['catalog']['region']})",
             f"prices:  {data['catalog']['prices']}", ""]
    claims = data["nodeClaims"]
    lines.append(f"NEW NODECLAIMS ({len(claims)})")
    header = ("NODEPOOL", "INSTANCE-TYPE", "CAPACITY", "ZONE", "$/HOUR", "CPU", "MEMORY", "PODS")
    rows = [(c["nodePool"], c["instanceType"] or "-", c["capacityType"], c["zone"], f"{c['pricePerHour']:.4f}",
             c["requests"].get(CPU, "0"), c["requests"].get(MEMORY, "0"), str(len(c["pods"]))) for c in claims]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    lines.extend("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows)
    if data["existingNodes"]:
        lines += ["", f"PODS ON EXISTING NODES ({sum(len(n['pods']) for n in data['existingNodes'])})"]
        lines.extend(f"  {n['name']}: {', '.join(n['pods'])}" for n in data["existingNodes"])
    if data["unschedulable"]:
        lines += ["", f"UNSCHEDULABLE ({len(data['unschedulable'])})"]
        lines.extend(f"  {u['pod']}: {u['reason']}" for u in data["unschedulable"])
    cost = data["cost"]
    lines += ["", f"cost: ${cost['totalPerHour']:.4f}/h   lower bound: ${cost['lowerBoundPerHour']:.4f}/h   "
                  f"gap: {cost['gap'] * 100:.1f}%"]
    lines.extend(f"note: {n}" for n in data["notes"])
    return "\n".join(lines) + "\n"


def render(result: SimulationResult, output: str) -> str:
    """The result in the requested format: table, json or yaml."""
    if output == "json":
        return json.dumps(to_dict(result), indent=2) + "\n"
    if output == "yaml":
        return str(yaml.safe_dump(to_dict(result), sort_keys=False))
    return _table(result)


def explain_pod(result: SimulationResult, pod: str) -> str:
    """Where one pod goes and why, or the binding reason it cannot be scheduled. KeyError if no such pod."""
    matches = [p for p in result.pods if p.key == pod or p.name == pod]
    if not matches:
        raise KeyError(f"pod {pod!r} is not among the {len(result.pods)} pending pods of the input")
    p = matches[0]
    plan = result.plan
    if p.key in plan.unschedulable:
        return f"{p.key} cannot be scheduled: {plan.unschedulable[p.key]}"
    for name, pods in plan.existing.items():
        if any(q is p for q in pods):
            return f"{p.key} fits on existing node {name}"
    for c in plan.node_claims:
        if any(q is p for q in c.pods):
            it = c.instance_type.name if c.instance_type else "-"
            return (f"{p.key} goes to a new NodeClaim {c.hostname} from nodepool {c.node_pool}: {it} "
                    f"{c.capacity_type} in {c.zone} at ${c.price_per_hour:.4f}/h, shared with {len(c.pods) - 1} "
                    f"other pod(s)\n  requirements: {c.requirements.describe()}\n"
                    f"  cheapest options: {', '.join(it.name for it in c.instance_type_options[:10])}")
    return f"{p.key}: not placed"
