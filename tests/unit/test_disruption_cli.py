"""`karpy disruption` (CliRunner and the real command as a process on the bundled example), its DisruptionPlan
output and table, the drift preview, and `karpy status`'s disruption state rendering."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from cli import main
from controller.api import conditions as C
from controller.catalog.snapshot import load_catalog
from controller.disruption.documents import DisruptionInput, parse_now
from controller.disruption.render import DisruptionResult, DriftEntry, render, to_dict
from controller.disruption.types import Blocked, BudgetMapping, Candidate, Command, Expired, Pass, Replacement, Snapshot
from controller.ops.output import API_VERSION
from controller.scheduling.nodeclaim import PlannedNodeClaim
from controller.scheduling.requirements import Requirements

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "disruption" / "cluster.yaml"
PROPOSAL = ROOT / "examples" / "disruption" / "proposed" / "nodepool-no-m.yaml"
SATURDAY = "2026-11-28T12:00:00Z"  # the example's drift budget (Berlin business hours) is not active
MONDAY_BERLIN_MORNING = "2026-11-30T09:30:00Z"  # 10:30 in Berlin: the Drifted budget allows none


def _karpy(*args: str) -> Any:
    return CliRunner().invoke(main, ["disruption", *args], prog_name="karpy", env={"COLUMNS": "80"})


# ---- rendering (a Pass built by hand: the renderer's own contract) --------------------------------------------------

def _candidate(i: int, price: float = 0.192) -> Candidate:
    return Candidate(nodeclaim={"metadata": {"name": f"claim-{i}"}}, node={"metadata": {"name": f"node-{i}"}},
                     nodepool="general", instance_type="m5.xlarge", capacity_type="on-demand", zone="us-east-1a",
                     price=price, disruption_cost=1.25)


def _result(p: Pass, blocked: list[Blocked] | None = None, drift: list[DriftEntry] | None = None) -> DisruptionResult:
    inp = DisruptionInput(snapshot=Snapshot(now=parse_now(SATURDAY)), catalog=load_catalog(),
                          blocked=blocked or [], notes=["a note"])
    return DisruptionResult(input=inp, pass_=p, drift=drift, passes=2 if drift is not None else 0)


def test_the_plan_document_has_every_field_of_a_command():
    it = next(t for t in load_catalog().instance_types if t.name == "m5.large")
    planned = PlannedNodeClaim(node_pool="general", requirements=Requirements(), instance_type_options=[it],
                               instance_type=it, capacity_type="on-demand", zone="us-east-1a", price_per_hour=0.096,
                               pods=[])
    cmd = Command(method="SingleNodeConsolidation", reason="Underutilized", candidates=[_candidate(1)],
                  replacements=[Replacement(planned)])
    p = Pass(method="SingleNodeConsolidation", commands=[cmd], expired=[Expired("old", "node-old", "general")],
             blocked=[Blocked("claim-9", "node-9", "pdb prevents pod evictions"),
                      Blocked("claim-8", "node-8", "pass says something else")],
             budgets={"Underutilized": BudgetMapping(remaining={"general": 2})})
    doc = to_dict(_result(p, blocked=[Blocked("claim-8", "node-8", 'NodePool "x" is not in the input')]))
    assert doc["apiVersion"] == API_VERSION and doc["kind"] == "DisruptionPlan"
    assert doc["now"] == SATURDAY and doc["method"] == "SingleNodeConsolidation"
    assert doc["commands"] == [{
        "method": "SingleNodeConsolidation", "reason": "Underutilized", "decision": "replace",
        "candidates": [{"nodeClaim": "claim-1", "node": "node-1", "nodePool": "general", "instanceType": "m5.xlarge",
                        "capacityType": "on-demand", "zone": "us-east-1a", "pricePerHour": 0.192,
                        "disruptionCost": 1.25}],
        "replacements": [{"nodePool": "general", "instanceType": "m5.large", "instanceTypeOptions": ["m5.large"],
                          "capacityType": "on-demand", "zone": "us-east-1a", "pricePerHour": 0.096, "pods": []}],
        "savingsPerHour": 0.096}]
    assert doc["expired"] == [{"nodeClaim": "old", "node": "node-old", "nodePool": "general"}]
    # the input's reason first, one entry per NodeClaim
    assert doc["blocked"] == [{"nodeClaim": "claim-8", "node": "node-8", "reason": 'NodePool "x" is not in the input'},
                              {"nodeClaim": "claim-9", "node": "node-9", "reason": "pdb prevents pod evictions"}]
    assert doc["allowedDisruptions"] == [{"nodePool": "general", "reason": "Underutilized", "allowed": 2}]
    assert "drift" not in doc and doc["notes"] == ["a note"]


def test_the_table_is_one_line_per_command_and_groups_blocked_nodes_within_80_columns():
    commands = [Command(method="Emptiness", reason="Empty", candidates=[_candidate(i)]) for i in range(3)]
    blocked = [Blocked(f"claim-{i}", f"node-{i}", 'pod "shop/db-0" has "karpenter.sh/do-not-disrupt" annotation')
               for i in range(1000)] + [Blocked("other", "node-x", "node isn't initialized")]
    text = render(_result(Pass(method="Emptiness", commands=commands, blocked=blocked)), "table", width=80)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert "NEXT PASS: Emptiness, 3 command(s), saves $0.5760/h" in text
    assert sum(1 for line in lines if line.startswith("Emptiness")) == 3
    assert "BLOCKED (1001)" in text
    group = next(i for i, line in enumerate(lines) if "do-not-disrupt" in line)
    assert lines[group].startswith("  1000 NodeClaims: ") and "and 990 more" in " ".join(lines[group:group + 4])
    assert "  other: node isn't initialized" in lines
    assert len(lines) < 30


def test_the_table_and_document_of_a_drift_preview():
    drift = [DriftEntry(f"claim-{i}", f"node-{i}", "general", "RequirementsDrifted", 1 + i // 3, "Drift")
             for i in range(7)] + [DriftEntry("stuck", "node-s", "general", "NodePoolDrifted", 0)]
    result = _result(Pass(), drift=drift)
    doc = to_dict(result)
    assert doc["passes"] == 2 and len(doc["drift"]) == 8
    assert doc["drift"][0] == {"nodeClaim": "claim-0", "node": "node-0", "nodePool": "general",
                               "reason": "RequirementsDrifted", "pass": 1, "method": "Drift"}
    assert doc["drift"][-1]["pass"] is None and doc["drift"][-1]["method"] is None
    lines = render(result, "table", width=80).splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "NEXT PASS: no command (nothing to disrupt now)" in lines
    assert any(line.startswith("DRIFT PREVIEW (8 NodeClaim(s) would drift") for line in lines)
    rows = [line for line in lines if line[:1].isdigit() or line.startswith("not within")]
    assert [r.split()[:2] for r in rows[:3]] == [["1", "3"], ["2", "3"], ["3", "1"]]
    assert rows[-1].startswith("not within the preview")


# ---- the command on the bundled example ----------------------------------------------------------------------------

def test_the_bundled_example_shows_consolidation_and_blocked_nodes():
    res = _karpy("-f", str(EXAMPLE), "--now", SATURDAY, "-o", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["kind"] == "DisruptionPlan" and doc["method"] in ("MultiNodeConsolidation", "SingleNodeConsolidation")
    assert doc["commands"] and all(c["reason"] == "Underutilized" for c in doc["commands"])
    moved = {c["nodeClaim"] for cmd in doc["commands"] for c in cmd["candidates"]}
    assert moved <= {"general-x7k2p", "general-b9mqd", "general-r4tvn"}  # the half-empty m5.xlarge nodes
    assert all(cmd["savingsPerHour"] > 0 for cmd in doc["commands"])
    reasons = {b["nodeClaim"]: b["reason"] for b in doc["blocked"]}
    assert "do-not-disrupt" in reasons["general-c8wzl"]
    assert "pdb" in reasons["general-h2sfj"].lower()
    assert not any(b["node"] == "ip-10-0-3-60" for b in doc["blocked"])  # no NodeClaim: capacity, not blocked


def test_table_and_yaml_outputs_of_the_example():
    res = _karpy("-f", str(EXAMPLE), "--now", SATURDAY)
    assert res.exit_code == 0, res.output
    assert all(len(line) <= 80 for line in res.output.splitlines()), res.output
    assert "NEXT PASS:" in res.output and "BLOCKED (2)" in res.output
    res = _karpy("-f", str(EXAMPLE), "--now", SATURDAY, "-o", "yaml")
    assert res.exit_code == 0 and yaml.safe_load(res.stdout)["kind"] == "DisruptionPlan"


def test_the_drift_preview_of_the_example_follows_the_budgets():
    res = _karpy("-f", str(EXAMPLE), "--apply", str(PROPOSAL), "--now", SATURDAY, "-o", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    drift = {d["nodeClaim"]: d for d in doc["drift"]}
    assert set(drift) == {"general-x7k2p", "general-b9mqd", "general-r4tvn", "general-c8wzl", "general-h2sfj"}
    assert {d["reason"] for d in drift.values()} == {"RequirementsDrifted"}
    # the budget (50% of 5 nodes: 3) lets at most 3 go in a pass; the do-not-disrupt and PDB nodes never go
    counts: dict[int, int] = {}
    for d in drift.values():
        if d["pass"]:
            counts[d["pass"]] = counts.get(d["pass"], 0) + 1
    assert counts and max(counts.values()) <= 3 and min(counts) == 1
    assert drift["general-c8wzl"]["pass"] is None and drift["general-h2sfj"]["pass"] is None
    assert any("not disrupted" in n for n in doc["notes"])


def test_a_budget_in_the_proposals_time_zone_holds_the_rollout():
    res = _karpy("-f", str(EXAMPLE), "--apply", str(PROPOSAL), "--now", MONDAY_BERLIN_MORNING, "-o", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert not any(d["pass"] and d["method"] == "Drift" for d in doc["drift"])
    assert {"nodePool": "general", "reason": "Drifted", "allowed": 0} in doc["allowedDisruptions"]
    table = _karpy("-f", str(EXAMPLE), "--now", MONDAY_BERLIN_MORNING).output
    assert "  general: Drifted 0, Empty 3, Underutilized 3" in table.splitlines()


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--now", "tomorrow"], 2, "Invalid value for --now: 'tomorrow' is not an RFC 3339 time"),
    (["--feature-gates", "Drift=true"], 2, "Drift is always on"),
    (["--feature-gates", "SpotToSpot=true"], 2, "unknown feature gate SpotToSpot"),
    (["--catalog", "nowhere"], 1, "catalog 'nowhere': neither a bundled catalog"),
    (["--apply", str(EXAMPLE.parent.parent / "workloads.yaml")], 1, "--apply: no NodePool or EC2NodeClass"),
])
def test_bad_flags_are_one_line(args, code, message):
    res = _karpy("-f", str(EXAMPLE), *args)
    assert res.exit_code == code, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], res.output


def test_an_invalid_document_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: p, namespace: a}\n"
                   "spec: {maxUnavailable: -1}\n")
    res = _karpy("-f", str(EXAMPLE), "-f", str(bad))
    assert res.exit_code == 1
    assert res.output.strip() == (f"error: {bad}: document 1 PodDisruptionBudget/p: spec.maxUnavailable: must be a "
                                  "non-negative integer or a percentage, got -1")


def test_the_real_command_runs_on_the_bundled_example():
    proc = subprocess.run([sys.executable, "-c", "import cli; cli.main()", "disruption", "-f", str(EXAMPLE),
                           "--now", SATURDAY, "-o", "json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "DisruptionPlan" and doc["commands"]


# ---- karpy status: the disruption state ---------------------------------------------------------------------------

def test_status_disruption_state_from_conditions_and_events():
    from controller.ops.status import disruption_state, render_table

    def claim(*conds: tuple[str, str, str]) -> dict[str, Any]:
        return {"status": {"conditions": [{"type": t, "status": s, "reason": r} for t, s, r in conds]}}

    drifted = disruption_state(claim(("Drifted", "True", "AMIDrift"), ("Consolidatable", "True", "Consolidatable")))
    assert drifted == {"drifted": "AMIDrift", "consolidatable": True, "disrupting": None, "blocked": None}
    assert disruption_state(claim(("Drifted", "False", "NotDrifted")))["drifted"] is None
    assert disruption_state(claim(), "pdb prevents pod evictions")["blocked"] == "pdb prevents pod evictions"
    assert disruption_state(claim(("DisruptionReason", "True", "Drifted")))["disrupting"] == "Drifted"
    row = {"name": "c1", "nodePool": "p", "state": "Ready", "ageSeconds": 60, "instanceType": "m5.large",
           "zone": "us-east-1a", "capacityType": "spot", "pricePerHour": 0.04, "node": "n1"}
    doc = {"cluster": "https://k", "nodePools": [], "pendingPods": [], "prices": "x", "notes": [],
           "nodeClaims": [{**row, "disruption": drifted},
                          {**row, "name": "c2", "disruption": disruption_state(claim(), "x " * 100)},
                          {**row, "name": "c3", "disruption": disruption_state(claim())}]}
    lines = render_table(doc, width=80).splitlines()
    assert all(len(line) <= 80 for line in lines)
    start = lines.index("DISRUPTION (2)")
    assert lines[start + 2].startswith("c1") and "Drifted,Consolidatable" in lines[start + 2]
    assert lines[start + 3].strip() == "AMIDrift"
    assert lines[start + 4].startswith("c2") and "Blocked" in lines[start + 4]
    assert not any(line.startswith("c3") for line in lines[start:])


# ---- the preview's own bookkeeping, apart from the core's decisions ---------------------------------------------

def test_the_preview_holds_commands_within_a_pass_and_completes_them_between_passes():
    """The pass here is a scripted function over the core's contract (Snapshot in, Pass out: at most two drift
    commands in flight, as a budget of 2 would allow), so what is checked is the preview's own work: commands of a
    pass hold their nodes (Snapshot.disrupting) until the pass ends, then the candidates go, the replacements come up
    as initialized nodes stamped from the proposed NodePool (not drifted by the real rules), and the displaced pods
    are bound again by the real scheduler. The CLI tests above run the controller's own pass."""
    from controller.api.documents import load_documents
    from controller.disruption.preview import plan
    from controller.nodeclaim.disruption import drift_reason

    seen: list[Snapshot] = []
    held: list[set[str]] = []

    def scripted(snap: Snapshot, options: Any) -> Pass:
        seen.append(snap)
        held.append(set(snap.disrupting))
        if len(snap.disrupting) >= 2:
            return Pass()
        nodes = {n["metadata"]["name"]: n for n in snap.nodes}
        for claim in sorted(snap.nodeclaims, key=lambda c: c["metadata"]["name"]):
            name = claim["metadata"]["name"]
            if name in snap.disrupting or name not in snap.drifted:
                continue
            it = next(t for t in snap.instance_types["general"] if t.name == "c5.xlarge")
            planned = PlannedNodeClaim(node_pool="general", requirements=Requirements(), instance_type_options=[it],
                                       instance_type=it, capacity_type="on-demand", zone="us-east-1a",
                                       price_per_hour=0.17, pods=[])
            cand = Candidate(nodeclaim=claim, node=nodes[claim["status"]["nodeName"]], nodepool="general",
                             instance_type="m5.xlarge", capacity_type="on-demand", zone="us-east-1a", price=0.192,
                             disruption_cost=1.0)
            return Pass(method="Drift", commands=[Command("Drift", "Drifted", [cand], [Replacement(planned)])])
        return Pass()

    result = plan(load_documents([str(EXAMPLE)]), now=parse_now(SATURDAY), proposed=load_documents([str(PROPOSAL)]),
                  compute=scripted)
    assert result.drift is not None and result.passes == 3
    assert [(d.nodeclaim, d.pass_number) for d in result.drift] == [
        ("general-b9mqd", 1), ("general-c8wzl", 1), ("general-h2sfj", 2), ("general-r4tvn", 2),
        ("general-x7k2p", 3)]
    # within pass 1 the second command was computed with the first one's node held
    assert {"general-b9mqd"} in held and {"general-b9mqd", "general-c8wzl"} in held
    last = seen[-1]
    names = {c["metadata"]["name"] for c in last.nodeclaims}
    assert not names & {d.nodeclaim for d in result.drift}  # every drifted NodeClaim replaced
    launched = [c for c in last.nodeclaims if "-preview-" in c["metadata"]["name"]]
    assert len(launched) >= 5 and all(C.is_true(c["status"], "Initialized") for c in launched)
    pool = result.input.nodepools["general"]
    assert all(drift_reason(c, pool, last.instance_types["general"]) is None for c in launched)
    node_names = {n["metadata"]["name"] for n in last.nodes}
    bound = [p for p in last.pods if p["spec"].get("nodeName")]
    assert len(bound) == 6 and all(p["spec"]["nodeName"] in node_names for p in bound)


def test_the_drift_preview_takes_what_karpy_render_prints(tmp_path):
    """`karpy render --env dev` prints CRDs, RBAC and the Deployment besides the pools: the preview reads the pools
    and the EC2NodeClass (whose spec differs from the snapshot's: NodeClassDrift for every NodeClaim of it) and
    notes the rest in one line."""
    rendered = CliRunner().invoke(main, ["render", "--env", "dev"], prog_name="karpy")
    assert rendered.exit_code == 0, rendered.output
    proposal = tmp_path / "dev.yaml"
    proposal.write_text(rendered.stdout)
    res = _karpy("-f", str(EXAMPLE), "--apply", str(proposal), "--now", SATURDAY, "-o", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert {d["reason"] for d in doc["drift"]} == {"NodeClassDrift"} and len(doc["drift"]) == 5
    left_out = [n for n in doc["notes"] if n.startswith("--apply reads only NodePools and EC2NodeClasses")]
    assert len(left_out) == 1 and "3 CustomResourceDefinition" in left_out[0] and "1 Deployment" in left_out[0]


def test_nodeclaims_past_expire_after_are_listed_as_expired(tmp_path):
    """expireAfter counts from the NodeClaim's creation (2026-11-02T08:00:00Z in the example): 24h later it has
    expired, a day before that it has not."""
    snapshot = yaml.safe_load(EXAMPLE.read_text())
    for item in snapshot["items"]:
        if item["kind"] == "NodeClaim" and item["metadata"]["name"] == "general-x7k2p":
            item["spec"]["expireAfter"] = "24h"
    path = tmp_path / "expiring.yaml"
    path.write_text(yaml.safe_dump(snapshot))
    res = _karpy("-f", str(path), "--now", SATURDAY, "-o", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["expired"] == [{"nodeClaim": "general-x7k2p", "node": "ip-10-0-1-10", "nodePool": "general"}]
    assert "general-x7k2p" not in {c["nodeClaim"] for cmd in doc["commands"] for c in cmd["candidates"]}
    res = _karpy("-f", str(path), "--now", "2026-11-03T07:00:00Z", "-o", "json")
    assert res.exit_code == 0 and json.loads(res.stdout)["expired"] == []


def test_flags_reach_the_pass_as_the_controllers_options(monkeypatch):
    """--feature-gates and the two policies become the Options the controller's pass runs under (the real pass,
    wrapped to see what it was given)."""
    from controller.disruption import preview
    from controller.disruption.core import compute_pass

    given: list[Any] = []

    def seen(snapshot: Snapshot, options: Any) -> Pass:
        given.append(options)
        return compute_pass(snapshot, options)

    monkeypatch.setattr(preview, "default_compute", lambda: seen)
    res = _karpy("-f", str(EXAMPLE), "--now", SATURDAY, "--feature-gates",
                 "SpotToSpotConsolidation=true,ManyToManyConsolidation=true", "--preference-policy", "Ignore",
                 "--min-values-policy", "BestEffort", "-o", "json")
    assert res.exit_code == 0, res.output
    assert given and all(o.spot_to_spot and o.many_to_many and o.preference_policy == "Ignore"
                         and o.min_values_policy == "BestEffort" for o in given)
    given.clear()
    assert _karpy("-f", str(EXAMPLE), "--now", SATURDAY, "-o", "json").exit_code == 0
    assert given and not any(o.spot_to_spot or o.many_to_many for o in given)


def test_a_broken_snapshot_is_reported_under_blocked_by_the_real_pass(tmp_path):
    """A NodeClaim whose Node is missing, one of a NodePool not in the input, a Node without its zone label and an
    instance type the catalog does not know: each is blocked with the input's reason, and the pass still plans the
    rest."""
    snapshot = yaml.safe_load(EXAMPLE.read_text())
    items = snapshot["items"]
    items[:] = [i for i in items if not (i["kind"] == "Node" and i["metadata"]["name"] == "ip-10-0-1-10")]
    for item in items:
        name = item["metadata"]["name"]
        if item["kind"] == "NodeClaim" and name == "general-b9mqd":
            item["metadata"]["labels"]["karpenter.sh/nodepool"] = "retired"
        if item["kind"] == "Node" and name == "ip-10-0-3-30":
            del item["metadata"]["labels"]["topology.kubernetes.io/zone"]
        if item["kind"] == "Node" and name == "ip-10-0-1-40":
            item["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "m99.huge"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(snapshot))
    res = _karpy("-f", str(path), "--now", SATURDAY, "-o", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    reasons = {b["nodeClaim"]: b["reason"] for b in doc["blocked"]}
    assert reasons["general-x7k2p"] == 'its Node "ip-10-0-1-10" is not in the input'
    assert reasons["general-b9mqd"] == 'NodePool "retired" is not in the input'
    assert reasons["general-r4tvn"] == "its Node lacks the label(s) topology.kubernetes.io/zone"
    assert reasons["general-c8wzl"] == 'instance type "m99.huge" is not in catalog aws-us-east-1 (no price for it)'
    moved = {c["nodeClaim"] for cmd in doc["commands"] for c in cmd["candidates"]}
    assert not moved & set(reasons)
