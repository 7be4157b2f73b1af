"""Output conventions shared by the commands: tables and text that fit the width, machine output with apiVersion and
kind, ages, progress on a TTY only, and the grouping of unschedulable pods and pending pods."""

from __future__ import annotations

import io
import json
import time

import yaml

from controller.api.documents import parse_documents
from controller.catalog.pricing import PriceTable
from controller.ops.output import API_VERSION, Progress, age, dump, machine, table, truncate, wrap
from controller.ops.status import group_pending, nodeclaim_state, owner_of, price, render_table
from controller.simulate.render import render, split_reason, to_dict
from controller.simulate.run import simulate_documents


def test_table_fits_the_width_and_marks_cuts():
    rows = [("system-critical-pool", "m7a.medium", "on-demand", "us-east-1a"), ("a", "b", "c", "d")]
    lines = table(("NODEPOOL", "TYPE", "CAPACITY", "ZONE"), rows, width=40, gap=2)
    assert all(len(line) <= 40 for line in lines)
    assert lines[1].startswith("system-…") or "…" in lines[1]
    assert lines[0].split() == ["NODEPOOL", "TYPE", "CAPACITY", "ZONE"]
    # columns named in shrink give way first: the zone survives whole
    lines = table(("NODEPOOL", "TYPE", "CAPACITY", "ZONE"), rows, width=44, gap=2, shrink=(0,))
    assert "us-east-1a" in lines[1] and "system-critical-pool" not in lines[1]
    wide = table(("NODEPOOL", "TYPE"), [r[:2] for r in rows], width=200)
    assert "system-critical-pool" in wide[1] and "…" not in wide[1]


def test_truncate_wrap_and_age():
    assert truncate("abcdef", 4) == "abc…" and truncate("abc", 4) == "abc"
    lines = wrap("word " * 40, width=30, indent="  ")
    assert len(lines) > 1 and all(len(line) <= 30 for line in lines)
    assert lines[0].startswith("  word") and lines[1].startswith("    word")
    assert [age(s) for s in (5, 119, 150, 3600, 4 * 3600 + 60, 30 * 3600, 5 * 86400)] == \
        ["5s", "119s", "2m30s", "60m", "4h1m", "30h", "5d"]


def test_machine_output_has_api_version_and_kind_first():
    doc = machine("Status", {"count": 3, "price": 0.25})
    assert list(doc)[:2] == ["apiVersion", "kind"] and doc["apiVersion"] == API_VERSION
    assert json.loads(dump(doc, "json")) == doc
    assert yaml.safe_load(dump(doc, "yaml")) == doc
    assert isinstance(json.loads(dump(doc, "json"))["count"], int)


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_only_on_a_tty_and_only_when_slow():
    tty = _Stream(True)
    with Progress("simulating", stream=tty, after=0.05, interval=0.02):
        time.sleep(0.2)
    text = tty.getvalue()
    assert "simulating" in text and text.endswith("\r")  # shown, then cleared
    quick = _Stream(True)
    with Progress("simulating", stream=quick, after=1.0):
        pass
    assert quick.getvalue() == ""
    piped = _Stream(False)
    with Progress("simulating", stream=piped, after=0.0, interval=0.01):
        time.sleep(0.05)
    assert piped.getvalue() == ""


def test_split_reason_one_entry_per_nodepool():
    reason = ('nodepool "a": taint x=y:NoSchedule not tolerated; nodepool "b": limits exceeded; '
              'nodepool "a": taint x=y:NoSchedule not tolerated')
    assert split_reason(reason) == [{"nodePool": "a", "reason": "taint x=y:NoSchedule not tolerated"},
                                    {"nodePool": "b", "reason": "limits exceeded"}]
    assert split_reason("no nodepool can take it") == [{"nodePool": None, "reason": "no nodepool can take it"}]


BIG = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: huge, namespace: batch}
spec:
  replicas: 3000
  selector: {matchLabels: {app: huge}}
  template:
    metadata: {labels: {app: huge}}
    spec: {containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: gpu, namespace: ml}
spec: {containers: [{name: c, resources: {requests: {cpu: "1"}, limits: {nvidia.com/gpu: "99"}}}]}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: small}
spec:
  limits: {cpu: "100"}
  template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}, requirements: []}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: tainted}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}
      requirements: []
      taints: [{key: dedicated, value: gpu, effect: NoSchedule}]
"""


def test_unschedulable_pods_grouped_by_owner_with_reasons_per_nodepool():
    result = simulate_documents(parse_documents(BIG, "big.yaml"))
    data = to_dict(result)
    assert data["apiVersion"] == API_VERSION and data["kind"] == "SimulationResult"
    huge = next(g for g in data["unschedulable"] if g["owner"] == "Deployment/huge")
    placed = sum(len(c["pods"]) for c in data["nodeClaims"])
    assert huge["count"] == len(huge["pods"]) == 3000 - placed > 2000
    assert {r["nodePool"] for r in huge["reasons"]} == {"small", "tainted"}
    assert isinstance(huge["count"], int) and isinstance(data["cost"]["totalPerHour"], float)
    text = render(result, "table", width=80)
    lines = text.splitlines()
    assert len(lines) < 60  # one group, not thousands of lines
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert any("Deployment/huge in batch:" in line and f"{huge['count']} pod(s)" in line for line in lines)
    assert sum("nodepool tainted: taint dedicated=gpu:NoSchedule not tolerated" in line for line in lines) == 2
    narrow = render(result, "table", width=60).splitlines()
    assert all(len(line) <= 60 for line in narrow)


def _claim(conditions, deleting=False):
    meta = {"name": "c", "creationTimestamp": "2026-01-01T00:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    return {"metadata": meta, "status": {"conditions": [{"type": t, "status": s, "reason": r, "message": m}
                                                        for t, s, r, m in conditions]}}


def test_nodeclaim_state_follows_the_lifecycle():
    assert nodeclaim_state(_claim([]))[0] == "Launching"
    assert nodeclaim_state(_claim([("Launched", "True", "Launched", "")]))[0] == "Registering"
    assert nodeclaim_state(_claim([("Launched", "False", "InsufficientCapacity", "no capacity")])) == \
        ("InsufficientCapacity", "no capacity")
    ready = [("Launched", "True", "", ""), ("Registered", "True", "", ""), ("Initialized", "True", "", "")]
    assert nodeclaim_state(_claim(ready))[0] == "Ready"
    assert nodeclaim_state(_claim(ready, deleting=True))[0] == "Deleting"


def test_owner_and_price():
    pod = {"metadata": {"name": "web-7d9f8-abcde", "labels": {"pod-template-hash": "7d9f8"},
                        "ownerReferences": [{"kind": "ReplicaSet", "name": "web-7d9f8", "controller": True}]}}
    assert owner_of(pod) == "Deployment/web"
    assert owner_of({"metadata": {"name": "p"}}) == "Pod/p"
    table_ = PriceTable(on_demand={"m5.large": 0.096}, spot={("m5.large", "us-east-1a"): 0.04})
    assert price(table_, "m5.large", "on-demand", "us-east-1a") == 0.096
    assert price(table_, "m5.large", "spot", "us-east-1a") == 0.04
    assert price(table_, "m5.large", "on-demand", "eu-west-1a") is None  # not the catalog's region


def test_status_table_groups_pending_pods_and_fits():
    pending = [{"namespace": "shop", "name": f"web-{i}", "owner": "Deployment/web", "ageSeconds": 30 + i,
                "reason": "0/3 nodes are available: 3 Insufficient cpu."} for i in range(500)]
    pending.append({"namespace": "ml", "name": "train", "owner": "Pod/train", "ageSeconds": None, "reason": None})
    groups = group_pending(pending)
    assert [(g["owner"], g["count"], g["oldestSeconds"]) for g in groups] == [("Deployment/web", 500, 529),
                                                                             ("Pod/train", 1, None)]
    doc = machine("Status", {"cluster": "https://k", "nodePools": [], "pendingPods": pending, "prices": "p",
                             "nodeClaims": [{"name": "default-abcde", "nodePool": "default", "state": "Ready",
                                             "ageSeconds": 3600, "instanceType": "m7i-flex.8xlarge",
                                             "zone": "us-east-1a", "capacityType": "on-demand",
                                             "pricePerHour": 1.5, "node": "ip-10-0-1-23.ec2.internal"}]})
    text = render_table(doc, width=80)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "PENDING PODS (501)" in text and "0/3 nodes are available: 3 Insufficient cpu." in text
    assert text.count("Insufficient cpu") == 1 and "no FailedScheduling event yet" in text
    assert "total: $1.5000/h" in text


class _NoEvents:
    """A cluster that refuses to list events (403). The test control plane authorizes everything (AlwaysAllow), so
    no real server here can refuse; this stand-in answers the four list calls status makes."""

    host = "https://k"

    def list(self, res, namespace=None, label_selector=None, field_selector=None):
        from controller.kube import resources as R
        from controller.kube.errors import KubeError

        if res == R.EVENTS:
            raise KubeError(403, "Forbidden", 'events is forbidden: User "viewer" cannot list resource "events"')
        if res == R.PODS:
            return [{"metadata": {"name": "p", "namespace": "ns"}}], "1"
        return [], "1"


def test_status_without_permission_to_read_events_still_reports():
    from controller.ops.status import collect

    doc = collect(_NoEvents(), PriceTable())
    assert doc["pendingPods"] == [{"namespace": "ns", "name": "p", "owner": "Pod/p", "ageSeconds": None,
                                   "reason": None}]
    assert doc["notes"] == ["not allowed to list events: the pending pods' scheduling reasons are not shown"]
    assert "note: not allowed to list events" in render_table(doc, width=80)
