"""Documents -> disruption Snapshot (controller/disruption/documents.py): what `karpy disruption` hands the pass.

Built on the bundled example (examples/disruption/cluster.yaml, a `kubectl get -o yaml` List), changed per test."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.api import conditions as C
from controller.api import labels as L
from controller.api.documents import Document, load_documents, parse_documents
from controller.disruption.documents import DisruptionInputError, load, parse_now, propose

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "disruption" / "cluster.yaml"
LATER = parse_now("2026-11-28T12:00:00Z")  # well past every consolidateAfter of the example


def _docs(change: Callable[[list[dict[str, Any]]], None] | None = None) -> list[Document]:
    """The example's documents, their raw objects changed in place by `change` (on a copy)."""
    docs = load_documents([str(EXAMPLE)])
    raws = [copy.deepcopy(d.raw) for d in docs]
    if change is not None:
        change(raws)
    return [Document(source=d.source, index=d.index, api_version=r["apiVersion"], kind=r["kind"],
                     name=r["metadata"]["name"], namespace=r["metadata"].get("namespace"), raw=r,
                     position=d.position) for d, r in zip(docs, raws, strict=True)]


def _find(raws: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(r for r in raws if r["kind"] == kind and r["metadata"]["name"] == name)


def _claim(inp: Any, name: str) -> dict[str, Any]:
    return next(c for c in inp.snapshot.nodeclaims if c["metadata"]["name"] == name)


def test_the_example_becomes_a_snapshot_with_every_role_filled():
    inp = load(_docs(), now=LATER)
    snap = inp.snapshot
    assert snap.now == LATER
    assert [p["metadata"]["name"] for p in snap.nodepools] == ["general"]
    assert set(snap.nodeclasses) == {"default"}
    assert len(snap.nodeclaims) == 5 and len(snap.nodes) == 6 and len(snap.pods) == 6 and len(snap.pdbs) == 1
    assert snap.instance_types["general"] and not snap.nodepool_not_ready
    assert inp.blocked == [] and snap.drifted == {} and snap.disrupting == set()
    # defaults applied as the apiserver would (the example's NodeClaims omit terminationGracePeriod etc.)
    assert snap.nodepools[0]["spec"]["disruption"]["consolidateAfter"] == "5m"
    assert any("1 Node(s) without a NodeClaim" in n for n in inp.notes)


def test_consolidatable_is_recomputed_from_last_pod_event_time_at_now():
    # lastPodEventTime 2026-11-03T10:00:00Z, consolidateAfter 5m
    before = load(_docs(), now=parse_now("2026-11-03T10:04:00Z"))
    after = load(_docs(), now=parse_now("2026-11-03T10:06:00Z"))
    assert not C.is_true(_claim(before, "general-x7k2p")["status"], "Consolidatable")
    assert C.is_true(_claim(after, "general-x7k2p")["status"], "Consolidatable")


def test_consolidatable_counts_from_initialized_without_a_pod_event():
    def drop_event(raws: list[dict[str, Any]]) -> None:
        del _find(raws, "NodeClaim", "general-x7k2p")["status"]["lastPodEventTime"]

    # Initialized at 2026-11-02T08:03:00Z
    early = load(_docs(drop_event), now=parse_now("2026-11-02T08:07:00Z"))
    late = load(_docs(drop_event), now=parse_now("2026-11-02T08:09:00Z"))
    assert not C.is_true(_claim(early, "general-x7k2p")["status"], "Consolidatable")
    assert C.is_true(_claim(late, "general-x7k2p")["status"], "Consolidatable")


def test_the_input_does_not_change_the_documents_it_reads():
    docs = _docs()
    before = copy.deepcopy([d.raw for d in docs])
    load(docs, now=LATER)
    assert [d.raw for d in docs] == before


def test_nodeclaims_the_input_cannot_make_candidates_are_blocked_with_the_reason():
    def break_things(raws: list[dict[str, Any]]) -> None:
        gone = _find(raws, "NodeClaim", "general-x7k2p")["status"]
        gone["nodeName"], gone["providerID"] = "ip-gone", "aws:///us-east-1a/i-gone"  # (matched by either)
        _find(raws, "NodeClaim", "general-b9mqd")["metadata"]["labels"][L.NODEPOOL] = "retired"
        del _find(raws, "Node", "ip-10-0-3-30")["metadata"]["labels"][L.ZONE]
        node = _find(raws, "Node", "ip-10-0-1-40")
        node["metadata"]["labels"][L.INSTANCE_TYPE] = "m99.huge"

    inp = load(_docs(break_things), now=LATER)
    reasons = {b.nodeclaim: b.reason for b in inp.blocked}
    assert reasons["general-x7k2p"] == 'its Node "ip-gone" is not in the input'
    assert reasons["general-b9mqd"] == 'NodePool "retired" is not in the input'
    assert reasons["general-r4tvn"] == f"its Node lacks the label(s) {L.ZONE}"
    assert reasons["general-c8wzl"] == 'instance type "m99.huge" is not in catalog aws-us-east-1 (no price for it)'
    assert "general-h2sfj" not in reasons


def test_a_changed_nodepool_template_is_drift():
    def relabel(raws: list[dict[str, Any]]) -> None:
        _find(raws, "NodePool", "general")["spec"]["template"]["metadata"]["labels"]["team"] = "web"

    inp = load(_docs(relabel), now=LATER)
    assert set(inp.snapshot.drifted) == {c["metadata"]["name"] for c in inp.snapshot.nodeclaims}
    assert set(inp.snapshot.drifted.values()) == {"NodePoolDrifted"}


def test_a_changed_nodeclass_is_drift_unless_its_hash_version_differs():
    def user_data(raws: list[dict[str, Any]]) -> None:
        _find(raws, "EC2NodeClass", "default")["spec"]["userData"] = "echo hello"

    inp = load(_docs(user_data), now=LATER)
    assert set(inp.snapshot.drifted.values()) == {"NodeClassDrift"}

    def other_version(raws: list[dict[str, Any]]) -> None:
        user_data(raws)
        for r in raws:
            if r["kind"] == "NodeClaim":
                r["metadata"]["annotations"][L.EC2NODECLASS_HASH_VERSION] = "v0-other"

    assert load(_docs(other_version), now=LATER).snapshot.drifted == {}


def test_a_drifted_condition_stands_and_is_not_found_again():
    def drifted(raws: list[dict[str, Any]]) -> None:
        claim = _find(raws, "NodeClaim", "general-x7k2p")
        claim["status"]["conditions"].append({"type": "Drifted", "status": "True", "reason": "AMIDrift",
                                              "lastTransitionTime": "2026-11-04T00:00:00Z"})

    inp = load(_docs(drifted), now=LATER)
    assert inp.snapshot.drifted == {}
    condition = C.get(_claim(inp, "general-x7k2p")["status"], "Drifted")
    assert condition is not None and condition["reason"] == "AMIDrift"


def test_a_node_with_the_disrupted_taint_is_already_being_disrupted():
    def taint(raws: list[dict[str, Any]]) -> None:
        _find(raws, "Node", "ip-10-0-1-10")["spec"]["taints"] = [{"key": L.DISRUPTED_TAINT_KEY,
                                                                  "effect": "NoSchedule"}]

    assert load(_docs(taint), now=LATER).snapshot.disrupting == {"general-x7k2p"}


def test_a_nodeclass_reported_not_ready_keeps_its_pools_from_launching():
    def not_ready(raws: list[dict[str, Any]]) -> None:
        _find(raws, "EC2NodeClass", "default")["status"] = {"conditions": [
            {"type": "Ready", "status": "False", "reason": "AMINotFound", "message": "no AMI matches",
             "lastTransitionTime": "2026-11-01T00:00:00Z"}]}

    inp = load(_docs(not_ready), now=LATER)
    assert inp.snapshot.nodepool_not_ready == {"general": 'EC2NodeClass "default" is not ready: no AMI matches'}


def test_pending_pods_join_and_workloads_are_not_expanded():
    extra = parse_documents("""
apiVersion: v1
kind: Pod
metadata: {name: waiting, namespace: shop}
spec: {containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 30
  selector: {matchLabels: {app: web}}
  template: {metadata: {labels: {app: web}}, spec: {containers: [{name: c, image: x}]}}
""", "extra.yaml")
    inp = load(_docs() + extra, now=LATER)
    names = [p["metadata"]["name"] for p in inp.snapshot.pods]
    assert len(names) == 7 and "waiting" in names
    assert any("1 workload(s)" in n and "not expanded" in n for n in inp.notes)


@pytest.mark.parametrize(("yaml_text", "message"), [
    ("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: p, namespace: a}\n"
     "spec: {minAvailable: lots}\n",
     "bad.yaml: document 1 PodDisruptionBudget/p: spec.minAvailable: must be a non-negative integer or a "
     "percentage, got 'lots'"),
    ("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: p, namespace: a}\n"
     "spec: {minAvailable: 1, maxUnavailable: 1}\n",
     "bad.yaml: document 1 PodDisruptionBudget/p: spec: minAvailable and maxUnavailable cannot both be set"),
    ("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: p, namespace: a}\n"
     "spec: {selector: {matchExpressions: [{key: app, operator: Like}]}}\n",
     "bad.yaml: document 1 PodDisruptionBudget/p: spec.selector.matchExpressions[0]: needs a key and an operator "
     "In, NotIn, Exists or DoesNotExist"),
    ("apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: c}\n"
     "spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}, requirements: 3}\n",
     "bad.yaml: document 1 NodeClaim/c: spec.requirements: must be a list, got int 3"),
])
def test_an_invalid_document_is_one_line_naming_file_and_field(yaml_text, message):
    with pytest.raises(DisruptionInputError) as e:
        load(_docs() + parse_documents(yaml_text, "bad.yaml"), now=LATER)
    text = str(e.value)
    assert "\n" not in text and text.startswith(message), text


def test_parse_now_takes_rfc3339_with_an_offset_only():
    assert parse_now("2026-01-01T00:00:00Z") == parse_now("2026-01-01T01:00:00+01:00") == 1767225600.0
    for bad in ("2026-01-01", "2026-01-01T00:00:00", "yesterday", ""):
        with pytest.raises(ValueError, match="RFC 3339"):
            parse_now(bad)


def test_propose_puts_the_proposed_pools_in_place_by_name():
    base = load(_docs(), now=LATER)
    proposal = (EXAMPLE.parent / "proposed" / "nodepool-no-m.yaml").read_text()
    proposed = parse_documents(proposal, "no-m.yaml") + parse_documents(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: y}\n", "no-m.yaml")
    changed = propose(base, proposed)
    reqs = changed.nodepools["general"]["spec"]["template"]["spec"]["requirements"]
    assert next(r for r in reqs if r["key"] == L.INSTANCE_CATEGORY)["values"] == ["c", "r"]
    assert set(changed.snapshot.drifted.values()) == {"RequirementsDrifted"}
    assert len(changed.snapshot.drifted) == 5 and base.snapshot.drifted == {}
    assert any("--apply reads only NodePools and EC2NodeClasses" in n for n in changed.notes)
    with pytest.raises(DisruptionInputError, match="no NodePool or EC2NodeClass"):
        propose(base, parse_documents("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "p.yaml"))


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def test_a_wrong_value_anywhere_is_an_input_error_a_block_or_a_plan_never_a_crash():
    """Fields of one NodeClaim, Node, Pod, PDB, NodePool and EC2NodeClass of the example replaced by values of other
    types (fixed seed): reading the snapshot and running the pass end in DisruptionInputError or PassError, or in
    a plan, and an error names a file or an object."""
    import random

    from controller.disruption.preview import PassError, plan

    picks = [("NodeClaim", "general-x7k2p"), ("Node", "ip-10-0-1-10"), ("Pod", "web-5d8f7c9b6-2xkqp"),
             ("PodDisruptionBudget", "db"), ("NodePool", "general"), ("EC2NodeClass", "default")]
    base = [copy.deepcopy(d.raw) for d in load_documents([str(EXAMPLE)])]
    targets = [(kind, name, path) for kind, name in picks
               for path in _paths(_find(base, kind, name)) if len(path) >= 2 and path[:2] != ("metadata", "name")]
    rng = random.Random(14)
    wrong = [5, -1, "x", None, [1], {"a": 1}, 10**20, True, ""]
    outcomes = {"error": 0, "plan": 0}
    for kind, name, path in rng.sample(targets, min(150, len(targets))):
        new = rng.choice(wrong)

        def change(raws: list[dict[str, Any]], kind: str = kind, name: str = name, path: tuple[Any, ...] = path,
                   new: Any = new) -> None:
            target: Any = _find(raws, kind, name)
            for step in path[:-1]:
                target = target[step]
            target[path[-1]] = new

        try:
            plan(_docs(change), now=LATER)
            outcomes["plan"] += 1
        except (DisruptionInputError, PassError) as e:
            text = str(e)
            assert "cluster.yaml" in text or "/" in text or "pass" in text, (kind, path, new, text[:300])
            assert all(len(line) < 600 for line in text.splitlines()), text[:700]
            outcomes["error"] += 1
    assert outcomes["error"] > 10 and outcomes["plan"] > 10, outcomes


@pytest.mark.parametrize(("spec", "api", "allowed"), [
    ({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}, "policy/v1", 0),  # 3 expected, 2 healthy
    ({"maxUnavailable": 2, "selector": {"matchLabels": {"app": "web"}}}, "policy/v1", 1),
    ({"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "web"}}}, "policy/v1", 1),  # 2 of 3, 1 unready
    ({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}, "policy/v1", 0),
    ({"minAvailable": "34%", "selector": {"matchLabels": {"app": "web"}}}, "policy/v1", 0),  # ceil(1.02) = 2
    ({"minAvailable": 0, "selector": {}}, "policy/v1", 3),  # every pod of the namespace: 2 web + 1 other ready
    ({"minAvailable": 0, "selector": {}}, "policy/v1beta1", 0),  # selects nothing in v1beta1
    ({"maxUnavailable": 0}, "policy/v1", 0),  # no selector: nothing selected, nothing healthy
])
def test_a_pdb_without_status_gets_the_disruption_controllers_count(spec, api, allowed):
    from controller.disruption.documents import pdb_status

    def pod(name: str, app: str, ready: str | None) -> dict[str, Any]:
        status = None if ready is None else {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]}
        return {"metadata": {"name": name, "namespace": "shop", "labels": {"app": app}},
                **({"status": status} if status else {})}

    pods = [pod("w1", "web", "True"), pod("w2", "web", None), pod("w3", "web", "False"), pod("o", "other", "True"),
            {"metadata": {"name": "elsewhere", "namespace": "b", "labels": {"app": "web"}}}]
    pdb = {"apiVersion": api, "kind": "PodDisruptionBudget", "metadata": {"name": "p", "namespace": "shop"},
           "spec": spec}
    assert pdb_status(pdb, pods)["disruptionsAllowed"] == allowed


def test_a_pdb_manifest_without_status_is_counted_and_noted():
    def strip(raws: list[dict[str, Any]]) -> None:
        del _find(raws, "PodDisruptionBudget", "db")["status"]

    inp = load(_docs(strip), now=LATER)
    assert inp.snapshot.pdbs[0]["status"] == {"expectedPods": 1, "currentHealthy": 1, "desiredHealthy": 1,
                                              "disruptionsAllowed": 0}
    assert any("1 PodDisruptionBudget(s) without status" in n for n in inp.notes)


def test_a_budget_that_cannot_be_read_is_a_note_that_it_fails_closed():
    def bad_budget(raws: list[dict[str, Any]]) -> None:
        budgets = _find(raws, "NodePool", "general")["spec"]["disruption"]["budgets"]
        budgets[1]["schedule"] = "CRON_TZ=Mars/Olympus 0 9 * * mon-fri"

    inp = load(_docs(bad_budget), now=LATER)
    notes = [n for n in inp.notes if n.startswith("NodePool general: spec.disruption.budgets[1]")]
    assert len(notes) == 1 and "fail closed" in notes[0] and "Mars/Olympus" in notes[0], inp.notes
