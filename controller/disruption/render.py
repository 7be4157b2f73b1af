"""Output of `karpy disruption`: the DisruptionPlan document (JSON/YAML) and its table.

The table has one line per command and the nodes that could not be candidates grouped by reason, so a 1,000-node
cluster whose nodes are all blocked for the same reason prints one group, not 1,000 lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller.api import conditions as C
from controller.disruption.documents import DisruptionInput
from controller.disruption.types import Blocked, Candidate, Command, Pass, Replacement
from controller.ops.output import dump, machine, table, terminal_width, wrap

MAX_OPTIONS = 60  # Karpenter hands CreateFleet at most 60 instance types per launch
MAX_LISTED = 10  # names shown in one line of the table
SHORT_METHODS = {"MultiNodeConsolidation": "MultiNode", "SingleNodeConsolidation": "SingleNode"}


@dataclass
class DriftEntry:
    """A NodeClaim the proposed NodePools/EC2NodeClasses would drift: why, and in which pass budgets let it go
    (0 when no pass within the preview's bound did)."""

    nodeclaim: str
    node: str
    nodepool: str
    reason: str
    pass_number: int
    method: str = ""


@dataclass
class DisruptionResult:
    """One pass over the input, and with `--apply` the drift preview of the proposal."""

    input: DisruptionInput
    pass_: Pass
    drift: list[DriftEntry] | None = None
    passes: int = 0  # how many passes the preview simulated
    notes: list[str] = field(default_factory=list)


def _money(value: float) -> float:
    return round(value, 5)


def candidate_dict(c: Candidate) -> dict[str, Any]:
    return {"nodeClaim": c.name, "node": c.node_name, "nodePool": c.nodepool, "instanceType": c.instance_type,
            "capacityType": c.capacity_type, "zone": c.zone, "pricePerHour": _money(c.price),
            "disruptionCost": round(c.disruption_cost, 4)}


def replacement_dict(r: Replacement) -> dict[str, Any]:
    p = r.planned
    return {"nodePool": p.node_pool, "instanceType": p.instance_type.name if p.instance_type else None,
            "instanceTypeOptions": [it.name for it in p.instance_type_options[:MAX_OPTIONS]],
            "capacityType": p.capacity_type, "zone": p.zone, "pricePerHour": _money(p.price_per_hour),
            "pods": [pod.key for pod in p.pods]}


def command_dict(cmd: Command) -> dict[str, Any]:
    return {"method": cmd.method, "reason": cmd.reason, "decision": cmd.decision,
            "candidates": [candidate_dict(c) for c in cmd.candidates],
            "replacements": [replacement_dict(r) for r in cmd.replacements],
            "savingsPerHour": _money(cmd.savings_per_hour)}


def blocked(result: DisruptionResult) -> list[Blocked]:
    """What keeps nodes from being candidates: the input's reasons first, then the pass's, one entry per NodeClaim."""
    out = list(result.input.blocked)
    seen = {b.nodeclaim for b in out}
    for b in result.pass_.blocked:
        if b.nodeclaim not in seen:
            seen.add(b.nodeclaim)
            out.append(b)
    return out


def to_dict(result: DisruptionResult) -> dict[str, Any]:
    """The DisruptionPlan (the JSON/YAML output)."""
    inp, p = result.input, result.pass_
    doc: dict[str, Any] = {
        "now": C.format_time(inp.snapshot.now),
        "catalog": {"name": inp.catalog.name, "region": inp.catalog.region, "prices": inp.catalog.price_source},
        "method": p.method or None,
        "commands": [command_dict(c) for c in p.commands],
        "expired": [{"nodeClaim": e.nodeclaim, "node": e.node, "nodePool": e.nodepool} for e in p.expired],
        "blocked": [{"nodeClaim": b.nodeclaim, "node": b.node, "reason": b.reason} for b in blocked(result)],
        "allowedDisruptions": [{"nodePool": pool, "reason": reason, "allowed": n}
                               for (pool, reason), n in sorted(p.allowed.items())],
    }
    if result.drift is not None:
        doc["drift"] = [{"nodeClaim": d.nodeclaim, "node": d.node, "nodePool": d.nodepool, "reason": d.reason,
                         "pass": d.pass_number or None, "method": d.method or None} for d in result.drift]
        doc["passes"] = result.passes
    doc["notes"] = [*inp.notes, *result.notes]
    return machine("DisruptionPlan", doc)


def _listed(names: list[str]) -> str:
    more = len(names) - MAX_LISTED
    return ", ".join(names[:MAX_LISTED]) + (f" and {more} more" if more > 0 else "")


def _replacement_cell(cmd: dict[str, Any]) -> str:
    reps = cmd["replacements"]
    if not reps:
        return "-"
    first = reps[0]
    text = f"{first['instanceType'] or '-'} {first['capacityType']}"
    return text + (f" +{len(reps) - 1}" if len(reps) > 1 else "")


def _candidates_cell(cmd: dict[str, Any]) -> str:
    cands = cmd["candidates"]
    head = f"{cands[0]['nodeClaim']} ({cands[0]['instanceType']})"
    return head + (f" +{len(cands) - 1}" if len(cands) > 1 else "")


def _table(result: DisruptionResult, width: int | None = None) -> str:
    width = terminal_width() if width is None else width
    data = to_dict(result)
    lines = [*wrap(f"catalog: {data['catalog']['name']} ({data['catalog']['region']})   now: {data['now']}", width)]
    commands = data["commands"]
    if commands:
        saved = sum(c["savingsPerHour"] for c in commands)
        lines += ["", f"NEXT PASS: {data['method']}, {len(commands)} command(s), saves ${saved:.4f}/h"]
        rows = [(SHORT_METHODS.get(c["method"], c["method"]), c["decision"], _candidates_cell(c),
                 _replacement_cell(c), f"{c['savingsPerHour']:.4f}") for c in commands]
        lines += table(("METHOD", "DECISION", "CANDIDATES", "REPLACEMENT", "SAVES $/H"), rows, width, gap=2,
                       shrink=(2, 3))
    else:
        lines += ["", "NEXT PASS: no command (nothing to disrupt now)"]
    per_pool: dict[str, list[str]] = {}
    for a in data["allowedDisruptions"]:
        shown = "any" if a["allowed"] >= 2**31 - 1 else str(a["allowed"])
        per_pool.setdefault(a["nodePool"], []).append(f"{a['reason']} {shown}")
    if per_pool:
        lines += ["", "DISRUPTIONS ALLOWED NOW (budgets)"]
        for pool, parts in sorted(per_pool.items()):
            lines += wrap(f"{pool}: {', '.join(parts)}", width, "  ", "      ")
    if data["expired"]:
        lines += ["", f"EXPIRED ({len(data['expired'])}), deleted at once without budgets"]
        lines += wrap(_listed([e["nodeClaim"] for e in data["expired"]]), width, "  ")
    groups: dict[str, list[str]] = {}
    for b in data["blocked"]:
        groups.setdefault(b["reason"], []).append(b["nodeClaim"])
    if groups:
        lines += ["", f"BLOCKED ({len(data['blocked'])})"]
        for reason, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            text = f"{names[0]}: {reason}" if len(names) == 1 else f"{len(names)} NodeClaims: {reason}"
            lines += wrap(text, width, "  ", "      ")
            if len(names) > 1:
                lines += wrap(_listed(names), width, "      ", "      ")
    if "drift" in data:
        drift = data["drift"]
        lines += ["", f"DRIFT PREVIEW ({len(drift)} NodeClaim(s) would drift, {data['passes']} pass(es))"]
        by_pass: dict[int, list[dict[str, Any]]] = {}
        for d in drift:
            by_pass.setdefault(d["pass"] or 0, []).append(d)
        drift_rows: list[tuple[str, ...]] = []
        pass_claims: list[list[str]] = []
        for number in sorted(by_pass, key=lambda n: (n == 0, n)):
            entries = by_pass[number]
            reasons: dict[str, int] = {}
            for d in entries:
                reasons[d["reason"]] = reasons.get(d["reason"], 0) + 1
            drift_rows.append((str(number) if number else "not within the preview", str(len(entries)),
                               ", ".join(f"{r} ({n})" for r, n in reasons.items())))
            pass_claims.append([d["nodeClaim"] for d in entries])
        if drift_rows:
            rendered = table(("PASS", "NODES", "REASONS"), drift_rows, width, gap=2, shrink=(2,))
            lines.append(rendered[0])
            for line, claims in zip(rendered[1:], pass_claims, strict=True):
                lines.append(line)
                lines += wrap(_listed(claims), width, "    ", "      ")
    for n in data["notes"]:
        lines += wrap(f"note: {n}", width)
    return "\n".join(lines) + "\n"


def render(result: DisruptionResult, output: str, width: int | None = None) -> str:
    """The plan in the requested format: table (fitting width, default the terminal's), json or yaml."""
    if output == "table":
        return _table(result, width)
    return dump(to_dict(result), output)
