"""One accept/reject table, in Karpenter's terms (most cases are ports of Karpenter's own NodePool, NodeClaim and
EC2NodeClass validation tests), run through both `karpy validate` and the generated CRDs as an apiserver applies them
(controller.api.crdeval: structural schema, defaults, strict unknown fields and the CEL rules). The two verdicts must
agree case by case, and where Karpenter's CEL rule has a message both must give it.

Karpenter itself admits some documents that its controllers then reject (label key syntax, overlong keys, unknown
capacity types, kubelet settings): those cases are marked `runtime` — the CRD admits them, karpy validate rejects
them, exactly as Karpenter's admission and runtime validation split. Transition rules (oldSelf) only exist on update,
which karpy validate (one document at a time) cannot see; they are checked through the evaluator's update.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from controller.api import Document, validate_document
from controller.api.crdeval import CRDEvaluator, compile_errors
from controller.api.crds import crd_manifests

DELETE = object()

NODEPOOL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "np"},
    "spec": {"template": {"spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}]}}},
}
NODECLAIM: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "nc"},
    "spec": {"nodeClassRef": {"group": "karpenter.test.sh", "kind": "TestNodeClaim", "name": "default"},
             "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}]},
}
EC2NODECLASS: dict[str, Any] = {
    "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "ec2nc"},
    "spec": {"amiFamily": "AL2023", "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "role-1",
             "securityGroupSelectorTerms": [{"tags": {"*": "*"}}], "subnetSelectorTerms": [{"tags": {"*": "*"}}]},
}
BASES = {"NodePool": NODEPOOL, "NodeClaim": NODECLAIM, "EC2NodeClass": EC2NODECLASS}


@dataclass
class Case:
    """A document (base of `kind` with `changes` at dotted paths) and Karpenter's verdict on it."""

    name: str
    kind: str
    changes: dict[str, Any]
    valid: bool
    message: str | None = None  # Karpenter's CEL message, expected from both
    runtime: bool = False  # admitted by the CRD, rejected by Karpenter's runtime validation (and karpy validate)
    update: dict[str, Any] | None = field(default=None)  # a second version, admitted as an update of the first

    def document(self, changes: dict[str, Any] | None = None) -> dict[str, Any]:
        raw = copy.deepcopy(BASES[self.kind])
        for path, value in (self.changes if changes is None else changes).items():
            node = raw
            parts = path.split(".")
            for p in parts[:-1]:
                node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
            if value is DELETE:
                node.pop(parts[-1], None)
            elif isinstance(node, list):
                node[int(parts[-1])] = value
            else:
                node[parts[-1]] = value
        return raw


TS = "spec.template.spec"
REQ = f"{TS}.requirements"
LABELS = "spec.template.metadata.labels"
LONG = "a" * 250


def req(key: str, op: str, *values: str, min_values: int | None = None) -> list[dict[str, Any]]:
    r: dict[str, Any] = {"key": key, "operator": op}
    if values:
        r["values"] = list(values)
    if min_values is not None:
        r["minValues"] = min_values
    return [r]


def budget(nodes: str = "10", schedule: str | None = None, duration: str | None = None,
           reasons: list[str] | None = None) -> dict[str, Any]:
    b: dict[str, Any] = {"nodes": nodes}
    if schedule is not None:
        b["schedule"] = schedule
    if duration is not None:
        b["duration"] = duration
    if reasons is not None:
        b["reasons"] = reasons
    return b


def taint(key: str, effect: str = "NoSchedule", value: str | None = None) -> dict[str, Any]:
    t = {"key": key, "effect": effect}
    if value is not None:
        t["value"] = value
    return t


def bdm(**ebs: Any) -> dict[str, Any]:
    root = ebs.pop("rootVolume", False)
    return {"deviceName": "map-device-1", "ebs": ebs, "rootVolume": root}


def ni(card: int, device: int, kind: str = "interface") -> dict[str, Any]:
    return {"networkCardIndex": card, "deviceIndex": device, "interfaceType": kind}


AWS_WELL_KNOWN = ["karpenter.k8s.aws/instance-tenancy", "karpenter.k8s.aws/capacity-reservation-id",
                  "karpenter.k8s.aws/capacity-reservation-type", "karpenter.k8s.aws/capacity-reservation-interruptible",
                  "karpenter.k8s.aws/nitro-sandbox", "karpenter.k8s.aws/placement-group-id",
                  "karpenter.k8s.aws/placement-group-partition", "karpenter.k8s.aws/instance-cpu",
                  "karpenter.k8s.aws/instance-memory", "karpenter.k8s.aws/instance-family",
                  "topology.k8s.aws/zone-id", "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone",
                  "kubernetes.io/arch", "kubernetes.io/os", "node.kubernetes.io/windows-build"]

CASES: list[Case] = [
    # --- NodePool: disruption ---------------------------------------------------------------------------------------
    Case("should succeed on a disabled expireAfter", "NodePool", {f"{TS}.expireAfter": "Never"}, True),
    *[Case(f"expireAfter {v}", "NodePool", {f"{TS}.expireAfter": v}, True) for v in ("30s", "1h30m5s", "Never")],
    *[Case(f"expireAfter {v}", "NodePool", {f"{TS}.expireAfter": v}, False) for v in ("-1s", "1hr", "FooNever")],
    Case("should succeed on a disabled consolidateAfter", "NodePool", {"spec.disruption.consolidateAfter": "Never"},
         True),
    *[Case(f"consolidateAfter {v}", "NodePool", {"spec.disruption.consolidateAfter": v}, True)
      for v in ("30s", "1h30m5s")],
    *[Case(f"consolidateAfter {v}", "NodePool", {"spec.disruption.consolidateAfter": v}, False)
      for v in ("-1s", "1hr", "FooNever")],
    Case("should succeed when setting consolidateAfter with consolidationPolicy=WhenEmpty", "NodePool",
         {"spec.disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"}}, True),
    Case("should succeed when setting consolidateAfter to 'Never' with consolidationPolicy=WhenEmptyOrUnderutilized",
         "NodePool", {"spec.disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                                          "consolidateAfter": "Never"}}, True),
    *[Case(f"consolidationPolicy {v}", "NodePool", {"spec.disruption.consolidationPolicy": v}, True)
      for v in ("WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced")],
    *[Case(f"consolidationPolicy {v!r}", "NodePool", {"spec.disruption.consolidationPolicy": v}, False)
      for v in ("1", "0", "4", "balanced", "whenempty", "", "WhenUnderutilized", "foo")],
    Case("should fail when creating a budget with an invalid cron", "NodePool",
         {"spec.disruption.budgets": [budget(schedule="*", duration="20m0s")]}, False),
    Case("should fail when creating a schedule with less than 5 entries", "NodePool",
         {"spec.disruption.budgets": [budget(schedule="* * * * ", duration="20m0s")]}, False),
    Case("should fail when creating a budget with a negative duration", "NodePool",
         {"spec.disruption.budgets": [budget(schedule="* * * * *", duration="-20m0s")]}, False),
    Case("should fail when creating a budget with a seconds duration", "NodePool",
         {"spec.disruption.budgets": [budget(schedule="* * * * *", duration="30s")]}, False),
    Case("should fail when creating a budget with a negative value int", "NodePool",
         {"spec.disruption.budgets": [budget("-10")]}, False),
    Case("should fail when creating a budget with a negative value percent", "NodePool",
         {"spec.disruption.budgets": [budget("-10%")]}, False),
    Case("should fail when creating a budget with a value percent with more than 3 digits", "NodePool",
         {"spec.disruption.budgets": [budget("1000%")]}, False),
    Case("should fail when creating a budget with a cron but no duration", "NodePool",
         {"spec.disruption.budgets": [budget(schedule="* * * * *")]}, False,
         "'schedule' must be set with 'duration'"),
    Case("should fail when creating a budget with a duration but no cron", "NodePool",
         {"spec.disruption.budgets": [budget(duration="20m0s")]}, False, "'schedule' must be set with 'duration'"),
    Case("should succeed when creating a budget with both duration and cron", "NodePool",
         {"spec.disruption.budgets": [budget(schedule="* * * * *", duration="20m0s")]}, True),
    Case("should succeed when creating a budget with hours and minutes in duration", "NodePool",
         {"spec.disruption.budgets": [budget(schedule="* * * * *", duration="2h20m0s")]}, True),
    Case("should succeed when creating a budget with neither duration nor cron", "NodePool",
         {"spec.disruption.budgets": [budget()]}, True),
    Case("should succeed when creating a budget with special cased crons", "NodePool",
         {"spec.disruption.budgets": [budget(schedule="@annually", duration="20m0s")]}, True),
    Case("should fail when creating two budgets where one has an invalid crontab", "NodePool",
         {"spec.disruption.budgets": [budget(schedule="@annually", duration="20m0s"),
                                      budget(schedule="*", duration="20m0s")]}, False),
    Case("should fail when creating multiple budgets where one doesn't have both schedule and duration", "NodePool",
         {"spec.disruption.budgets": [budget(duration="20m0s"), budget(schedule="* * * * *", duration="20m0s"),
                                      budget()]}, False, "'schedule' must be set with 'duration'"),
    *[Case(f"should allow disruption reason {r}", "NodePool",
           {"spec.disruption.budgets": [budget(schedule="* * * * *", duration="20m0s", reasons=[r])]}, True)
      for r in ("Drifted", "Underutilized", "Empty")],
    *[Case(f"should not allow disruption reason {r!r}", "NodePool",
           {"spec.disruption.budgets": [budget(schedule="* * * * *", duration="20m0s", reasons=[r])]}, False)
      for r in ("invalid", "expired", "")],
    Case("should allow setting multiple reasons", "NodePool",
         {"spec.disruption.budgets": [budget(schedule="* * * * *", duration="20m0s",
                                             reasons=["Drifted", "Empty"])]}, True),
    Case("a budget's reasons are a set", "NodePool",
         {"spec.disruption.budgets": [budget(reasons=["Empty", "Empty"])]}, False),
    Case("a cron with five fields that is not a schedule", "NodePool",
         {"spec.disruption.budgets": [budget(schedule="61 * * * *", duration="1h")]}, False, runtime=True),
    # --- NodePool: taints ---------------------------------------------------------------------------------------------
    Case("should succeed for valid taints", "NodePool", {f"{TS}.taints": [
        taint("a", "NoSchedule", "b"), taint("c", "NoExecute", "d"), taint("e", "PreferNoSchedule", "f"),
        taint("Test", "PreferNoSchedule", "f"), taint("test.com/Test", "PreferNoSchedule", "f"),
        taint("test.com.com/test", "PreferNoSchedule", "f"), taint("key-only", "NoExecute")]}, True),
    *[Case(f"should fail for invalid taint key {k!r}", "NodePool", {f"{TS}.taints": [taint(k)]}, False)
      for k in ("test.com.com}", "Test.com/test", "test/test/test", "test/", "/test")],
    Case("should fail at runtime for taint keys that are too long (prefix)", "NodePool",
         {f"{TS}.taints": [taint(f"test.com.test.{LONG}/test")]}, False, runtime=True),
    Case("should fail at runtime for taint keys that are too long (name)", "NodePool",
         {f"{TS}.taints": [taint(f"test.com.test/test-{LONG}")]}, False, runtime=True),
    Case("should fail for missing taint key", "NodePool", {f"{TS}.taints": [{"effect": "NoSchedule"}]}, False),
    Case("should fail for invalid taint value", "NodePool", {f"{TS}.taints": [taint("invalid-value", value="???")]},
         False),
    Case("should fail for invalid taint effect", "NodePool", {f"{TS}.taints": [taint("invalid-effect", "???")]},
         False),
    Case("should not fail for same key with different effects", "NodePool",
         {f"{TS}.taints": [taint("a", "NoSchedule"), taint("a", "NoExecute")]}, True),
    Case("duplicate taint key/effect pairs across taints and startupTaints", "NodePool",
         {f"{TS}.taints": [taint("a")], f"{TS}.startupTaints": [taint("a")]}, False, runtime=True),
    # --- NodePool: requirements ---------------------------------------------------------------------------------------
    Case("should succeed for valid requirement keys", "NodePool", {REQ: [
        {"key": "Test", "operator": "Exists"}, {"key": "test.com/Test", "operator": "Exists"},
        {"key": "test.com.com/test", "operator": "Exists"}, {"key": "key-only", "operator": "Exists"}]}, True),
    *[Case(f"should fail for invalid requirement key {k!r}", "NodePool", {REQ: req(k, "Exists")}, False)
      for k in ("test.com.com}", "Test.com/test", "test/test/test", "test/", "/test")],
    Case("should fail at runtime for requirement keys that are too long (prefix)", "NodePool",
         {REQ: req(f"test.com.test.{LONG}/test", "Exists")}, False, runtime=True),
    Case("should fail at runtime for requirement keys that are too long (name)", "NodePool",
         {REQ: req(f"test.com.test/test-{LONG}", "Exists")}, False, runtime=True),
    Case("should fail for the karpenter.sh/nodepool label", "NodePool", {REQ: req("karpenter.sh/nodepool", "In", "x")},
         False, 'label "karpenter.sh/nodepool" is restricted'),
    Case("should allow supported ops", "NodePool", {REQ: [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test"]},
        {"key": "topology.kubernetes.io/zone", "operator": "Gt", "values": ["1"]},
        {"key": "topology.kubernetes.io/zone", "operator": "Lt", "values": ["1"]},
        {"key": "topology.kubernetes.io/zone", "operator": "NotIn"},
        {"key": "topology.kubernetes.io/zone", "operator": "Exists"}]}, True),
    Case("should fail for unsupported ops", "NodePool", {REQ: req("topology.kubernetes.io/zone", "unknown", "test")},
         False),
    Case("should fail for restricted domains (karpenter.sh)", "NodePool", {REQ: req("karpenter.sh/test", "In", "test")},
         False, 'label domain "karpenter.sh" is restricted'),
    Case("should fail for restricted domains (karpenter.k8s.aws)", "NodePool",
         {REQ: req("karpenter.k8s.aws/test", "In", "test")}, False, 'label domain "karpenter.k8s.aws" is restricted'),
    Case("should fail for restricted subdomains", "NodePool", {REQ: req("sub.karpenter.sh/test", "In", "test")}, False,
         'label domain "karpenter.sh" is restricted'),
    Case("should fail for restricted labels", "NodePool", {REQ: req("kubernetes.io/hostname", "In", "test")}, False,
         'label "kubernetes.io/hostname" is restricted'),
    *[Case(f"should allow kubernetes domains ({d})", "NodePool", {REQ: req(f"{d}/test", "In", "test")}, True)
      for d in ("kubernetes.io", "k8s.io")],
    *[Case(f"should allow kubernetes subdomains exceptions ({d})", "NodePool",
           {REQ: req(f"subdomain.{d}/test", "In", "test")}, True) for d in ("kubernetes.io", "k8s.io")],
    *[Case(f"should allow well known label exceptions ({k})", "NodePool", {REQ: req(k, "In", "test")}, True)
      for k in AWS_WELL_KNOWN if k != "karpenter.k8s.aws/instance-tenancy"],
    Case("should allow non-empty set after removing overlapped value", "NodePool", {REQ: [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test", "foo"]},
        {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["test", "bar"]}]}, True),
    Case("should allow empty requirements", "NodePool", {REQ: []}, True),
    *[Case(f"should fail with invalid {op} values {vals}", "NodePool",
           {REQ: req("topology.kubernetes.io/zone", op, *vals)}, False,
           "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value")
      for op in ("Gt", "Lt", "Gte", "Lte") for vals in (("1", "2"), ("a",), ("-1",))],
    *[Case(f"should fail with no {op} values", "NodePool", {REQ: req("topology.kubernetes.io/zone", op)}, False)
      for op in ("Gt", "Lte")],
    Case("should fail for In with no values", "NodePool", {REQ: [{"key": "k", "operator": "In", "values": []}]}, False,
         "requirements with operator 'In' must have a value defined"),
    Case("numeric well-known labels take numeric values", "NodePool",
         {REQ: req("karpenter.k8s.aws/instance-cpu", "Gte", "4")}, True),
    Case("should error when minValues is negative", "NodePool",
         {REQ: req("node.kubernetes.io/instance-type", "In", "insance-type-1", min_values=-1)}, False),
    Case("should error when minValues is zero", "NodePool",
         {REQ: req("node.kubernetes.io/instance-type", "In", "insance-type-1", min_values=0)}, False),
    Case("should error when minValues is more than 50", "NodePool",
         {REQ: req("node.kubernetes.io/instance-type", "Exists", min_values=51)}, False),
    Case("should allow more than 50 values if minValues is not specified", "NodePool",
         {REQ: req("node.kubernetes.io/instance-type", "In", *[f"instance{i}" for i in range(90)])}, True),
    Case("should error when minValues is greater than the number of unique values specified within In operator",
         "NodePool", {REQ: req("node.kubernetes.io/instance-type", "In", "insance-type-1", min_values=2)}, False,
         "requirements with 'minValues' must have at least that many values specified in the 'values' field"),
    Case("requirements are at most 100", "NodePool",
         {REQ: [{"key": f"k{i}", "operator": "Exists"} for i in range(101)]}, False),
    Case("should fail validation with only invalid capacity types", "NodePool",
         {REQ: req("karpenter.sh/capacity-type", "In", "xspot")}, False, runtime=True),
    Case("should pass validation with valid capacity types", "NodePool",
         {REQ: req("karpenter.sh/capacity-type", "In", "on-demand")}, True),
    Case("should fail open if invalid and valid capacity types are present", "NodePool",
         {REQ: req("karpenter.sh/capacity-type", "In", "on-demand", "xspot")}, True),
    Case("reserved is a capacity type", "NodePool", {REQ: req("karpenter.sh/capacity-type", "In", "reserved")}, True),
    Case("should fail validation with only invalid tenancy types", "NodePool",
         {REQ: req("karpenter.k8s.aws/instance-tenancy", "In", "xdedicated")}, False, runtime=True),
    Case("should pass validation with valid tenancy types", "NodePool",
         {REQ: req("karpenter.k8s.aws/instance-tenancy", "In", "default")}, True),
    Case("should fail open if invalid and valid tenancy types are present", "NodePool",
         {REQ: req("karpenter.k8s.aws/instance-tenancy", "In", "default", "xdedicated")}, True),
    Case("requirement values are label values", "NodePool", {REQ: req("team", "In", "/ is not allowed")}, False),
    # --- NodePool: labels ---------------------------------------------------------------------------------------------
    Case("should allow unrecognized labels", "NodePool", {LABELS: {"foo": "bar"}}, True),
    Case("should fail for the karpenter.sh/nodepool label (labels)", "NodePool",
         {LABELS: {"karpenter.sh/nodepool": "x"}}, False, 'label "karpenter.sh/nodepool" is restricted'),
    Case("should fail for invalid label keys", "NodePool", {LABELS: {"spaces are not allowed": "x"}}, False,
         runtime=True),
    Case("should fail at runtime for label keys that are too long (prefix)", "NodePool",
         {LABELS: {f"test.com.test.{LONG}/test": "x"}}, False, runtime=True),
    Case("should fail at runtime for label keys that are too long (name)", "NodePool",
         {LABELS: {f"test.com.test/test-{LONG}": "x"}}, False, runtime=True),
    Case("should fail for invalid label values", "NodePool", {LABELS: {"foo": "/ is not allowed"}}, False),
    Case("label values are at most 63 characters", "NodePool", {LABELS: {"foo": "a" * 64}}, False),
    Case("should fail for restricted label domains (karpenter.sh)", "NodePool", {LABELS: {"karpenter.sh/unknown": "x"}},
         False, 'label domain "karpenter.sh" is restricted'),
    Case("should fail for restricted label domains (karpenter.k8s.aws)", "NodePool",
         {LABELS: {"karpenter.k8s.aws/unknown": "x"}}, False, 'label domain "karpenter.k8s.aws" is restricted'),
    Case("should fail for the hostname label", "NodePool", {LABELS: {"kubernetes.io/hostname": "x"}}, False,
         'label "kubernetes.io/hostname" is restricted'),
    Case("should allow labels kOps require", "NodePool",
         {LABELS: {"kops.k8s.io/instancegroup": "karpenter-nodes", "kops.k8s.io/gpu": "1"}}, True),
    *[Case(f"should allow labels in kubernetes domains ({d})", "NodePool", {LABELS: {d: "test-value"}}, True)
      for d in ("kubernetes.io", "k8s.io")],
    *[Case(f"should allow labels prefixed with the kubernetes domain ({d})", "NodePool",
           {LABELS: {f"{d}/key": "test-value"}}, True) for d in ("kubernetes.io", "k8s.io")],
    *[Case(f"should allow subdomain labels prefixed with the kubernetes domain ({d})", "NodePool",
           {LABELS: {f"subdomain.{d}/key": "test-value"}}, True) for d in ("kubernetes.io", "k8s.io")],
    *[Case(f"should allow well known label exceptions in labels ({k})", "NodePool", {LABELS: {k: "test"}}, True)
      for k in AWS_WELL_KNOWN],
    Case("numeric well-known labels take numeric values in labels", "NodePool",
         {LABELS: {"karpenter.k8s.aws/instance-cpu": "4", "karpenter.k8s.aws/placement-group-partition": "2"}}, True),
    Case("at most 100 labels", "NodePool", {LABELS: {f"l{i}": "v" for i in range(101)}}, False),
    # --- NodePool: terminationGracePeriod, nodeClassRef, weight ----------------------------------------------------
    *[Case(f"terminationGracePeriod {v}", "NodePool", {f"{TS}.terminationGracePeriod": v}, True)
      for v in ("30s", "1h30m5s")],
    *[Case(f"terminationGracePeriod {v}", "NodePool", {f"{TS}.terminationGracePeriod": v}, False)
      for v in ("-1s", "1hr", "Never", "FooNever")],
    Case("should fail if group is unset", "NodePool", {f"{TS}.nodeClassRef.group": ""}, False,
         "group may not be empty"),
    Case("should fail if kind is unset", "NodePool", {f"{TS}.nodeClassRef.kind": ""}, False, "kind may not be empty"),
    Case("should fail if name is unset", "NodePool", {f"{TS}.nodeClassRef.name": ""}, False, "name may not be empty"),
    Case("nodeClassRef group may not hold a version", "NodePool", {f"{TS}.nodeClassRef.group": "karpenter.k8s.aws/v1"},
         False),
    Case("nodeClassRef is required", "NodePool", {f"{TS}.nodeClassRef": DELETE}, False),
    Case("should fail to mutate group", "NodePool", {}, True,
         update={f"{TS}.nodeClassRef.group": "karpenter.test.mutated.sh"}),
    Case("should fail to mutate kind", "NodePool", {}, True, update={f"{TS}.nodeClassRef.kind": "TestNodeClass2"}),
    Case("the node class name may change", "NodePool", {}, True, update={f"{TS}.nodeClassRef.name": "other"}),
    *[Case(f"weight {w}", "NodePool", {"spec.weight": w}, w in (1, 100)) for w in (0, 1, 100, 101)],
    Case("an unknown field is rejected (strict field validation)", "NodePool", {"spec.wieght": 10}, False),
    # --- NodePool: replicas (static pools) --------------------------------------------------------------------------
    *[Case(f"should succeed when replicas is set to {n}", "NodePool", {"spec.replicas": n}, True)
      for n in (5, 0, 1000)],
    Case("should fail when replicas is set to a negative value", "NodePool", {"spec.replicas": -100}, False),
    *[Case(f"static pools reject limits.{r}", "NodePool", {"spec.replicas": 5, "spec.limits": {r: "10"}}, False,
           "only 'limits.nodes' is supported on static NodePools")
      for r in ("cpu", "memory", "pods", "ephemeral-storage")],
    Case("static pools reject weight", "NodePool", {"spec.replicas": 5, "spec.weight": 10}, False,
         "'weight' is not supported on static NodePools"),
    Case("static pools take limits.nodes", "NodePool", {"spec.replicas": 5, "spec.limits": {"nodes": "10"}}, True),
    Case("static pools take disruption budgets", "NodePool",
         {"spec.replicas": 5, "spec.disruption.budgets": [budget("1"), budget("0", "@daily", "10m")]}, True),
    Case("static pools take labels, taints, requirements and durations", "NodePool",
         {"spec.replicas": 5, LABELS: {"team": "a"}, f"{TS}.taints": [taint("a")],
          f"{TS}.startupTaints": [taint("b")], f"{TS}.expireAfter": "24h", f"{TS}.terminationGracePeriod": "1h",
          REQ: req("node.kubernetes.io/instance-type", "In", "m5.large")}, True),
    Case("should succeed when consolidateAfter is omitted on a static NodePool", "NodePool",
         {"spec.replicas": 5, "spec.disruption": {"consolidationPolicy": "WhenEmpty"}}, True),
    Case("dynamic pools take any limits", "NodePool", {"spec.limits": {"cpu": "1000", "memory": "1000Gi"}}, True),
    Case("should succeed when increasing replicas in a NodePool", "NodePool", {"spec.replicas": 5}, True,
         update={"spec.replicas": 10}),
    Case("should fail when changing the NodePool from static to dynamic", "NodePool", {"spec.replicas": 5}, True,
         update={"spec.replicas": DELETE}),
    Case("should fail when changing the NodePool from dynamic to static", "NodePool", {}, True,
         update={"spec.replicas": 5}),
    Case("should succeed when changing the static NodePool nodes limit", "NodePool",
         {"spec.replicas": 5, "spec.limits": {"nodes": "10"}}, True,
         update={"spec.replicas": 5, "spec.limits": {"nodes": "20"}}),
    # --- metadata, as the apiserver checks it on any object ----------------------------------------------------------
    Case("object labels are qualified names", "NodePool", {"metadata.labels": {"team": "a", "example.com/x": "b"}},
         True),
    Case("object label keys are qualified names", "NodePool", {"metadata.labels": {"bad key": "a"}}, False),
    Case("object label values are label values", "EC2NodeClass", {"metadata.labels": {"team": "not ok!"}}, False),
    Case("object label names are at most 63 characters", "NodeClaim", {"metadata.labels": {"x" * 64: "a"}}, False),
    Case("names are DNS subdomains", "NodePool", {"metadata.name": "Default_Pool"}, False),
    # --- NodeClaim ----------------------------------------------------------------------------------------------------
    Case("NodeClaim: should succeed for valid taints", "NodeClaim", {"spec.taints": [
        taint("a", "NoSchedule", "b"), taint("test.com/Test", "PreferNoSchedule", "f"),
        taint("key-only", "NoExecute")]}, True),
    Case("NodeClaim: should fail for invalid taint keys", "NodeClaim", {"spec.taints": [taint("test.com.com}")]},
         False),
    Case("NodeClaim: should fail for missing taint key", "NodeClaim", {"spec.taints": [{"effect": "NoSchedule"}]},
         False),
    Case("NodeClaim: should fail for invalid taint value", "NodeClaim",
         {"spec.taints": [taint("invalid-value", value="???")]}, False),
    Case("NodeClaim: should fail for invalid taint effect", "NodeClaim", {"spec.taints": [taint("e", "???")]}, False),
    Case("NodeClaim: should succeed for valid group", "NodeClaim",
         {"spec.nodeClassRef": {"group": "karpenter.test.sh", "kind": "TestNodeClass", "name": "nodeclass-test"}},
         True),
    Case("NodeClaim: should fail for invalid group", "NodeClaim", {"spec.nodeClassRef.group": "karpenter.test.sh/v1"},
         False),
    Case("NodeClaim: should allow supported ops", "NodeClaim", {"spec.requirements": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test"]},
        {"key": "topology.kubernetes.io/zone", "operator": "Gt", "values": ["1"]},
        {"key": "topology.kubernetes.io/zone", "operator": "NotIn"},
        {"key": "topology.kubernetes.io/zone", "operator": "Exists"}]}, True),
    Case("NodeClaim: should fail for unsupported ops", "NodeClaim",
         {"spec.requirements": req("topology.kubernetes.io/zone", "unknown", "test")}, False),
    Case("NodeClaim: karpenter.sh/test is restricted", "NodeClaim",
         {"spec.requirements": req("karpenter.sh/test", "In", "test")}, False,
         'label domain "karpenter.sh" is restricted'),
    Case("NodeClaim: karpenter.k8s.aws/test is restricted", "NodeClaim",
         {"spec.requirements": req("karpenter.k8s.aws/test", "In", "test")}, False,
         'label domain "karpenter.k8s.aws" is restricted'),
    Case("NodeClaim: should fail for restricted labels", "NodeClaim",
         {"spec.requirements": req("kubernetes.io/hostname", "In", "test")}, False,
         'label "kubernetes.io/hostname" is restricted'),
    Case("NodeClaim: the nodepool label is allowed", "NodeClaim",
         {"spec.requirements": req("karpenter.sh/nodepool", "In", "default")}, True),
    *[Case(f"NodeClaim: should allow kubernetes domains ({d})", "NodeClaim",
           {"spec.requirements": req(f"{d}/test", "In", "test")}, True)
      for d in ("kubernetes.io", "k8s.io", "subdomain.kubernetes.io", "subdomain.k8s.io")],
    *[Case(f"NodeClaim: should allow well known label exceptions ({k})", "NodeClaim",
           {"spec.requirements": req(k, "In", "test")}, True) for k in AWS_WELL_KNOWN[:8]],
    Case("NodeClaim: should fail with invalid GT values", "NodeClaim",
         {"spec.requirements": req("topology.kubernetes.io/zone", "Gt", "a")}, False,
         "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"),
    Case("NodeClaim: should error when minValues is greater than the number of values", "NodeClaim",
         {"spec.requirements": req("node.kubernetes.io/instance-type", "In", "a", min_values=2)}, False,
         "requirements with 'minValues' must have at least that many values specified in the 'values' field"),
    Case("NodeClaim: should error when requirements is greater than 100", "NodeClaim",
         {"spec.requirements": [{"key": f"k{i}", "operator": "Exists"} for i in range(101)]}, False),
    *[Case(f"NodeClaim: terminationGracePeriod {v}", "NodeClaim", {"spec.terminationGracePeriod": v}, ok)
      for v, ok in (("30s", True), ("1h30m5s", True), ("-1s", False), ("1hr", False), ("Never", False))],
    *[Case(f"NodeClaim: expireAfter {v}", "NodeClaim", {"spec.expireAfter": v}, ok)
      for v, ok in (("30s", True), ("Never", True), ("-1s", False), ("FooNever", False))],
    Case("NodeClaim: an overlong key (karpy checks label syntax everywhere; the CRD admits it)", "NodeClaim",
         {"spec.requirements": req(f"example.com/{LONG}", "Exists")}, False, runtime=True),
    Case("NodeClaim: resources requests are quantities", "NodeClaim",
         {"spec.resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}, True),
    Case("NodeClaim: spec is immutable", "NodeClaim", {}, True, update={"spec.expireAfter": "1h"}),
    # --- EC2NodeClass: role, instance profile, amiFamily -------------------------------------------------------------
    Case("should succeed if just specifying role", "EC2NodeClass", {}, True),
    Case("should succeed if just specifying instance profile", "EC2NodeClass",
         {"spec.role": DELETE, "spec.instanceProfile": "test-instance-profile"}, True),
    Case("should fail if specifying both instance profile and role", "EC2NodeClass",
         {"spec.instanceProfile": "test-instance-profile"}, False,
         "must specify exactly one of ['role', 'instanceProfile']"),
    Case("should fail if not specifying one of instance profile and role", "EC2NodeClass", {"spec.role": DELETE},
         False, "must specify exactly one of ['role', 'instanceProfile']"),
    Case("role cannot be empty", "EC2NodeClass", {"spec.role": ""}, False, "role cannot be empty"),
    Case("instanceProfile cannot be empty", "EC2NodeClass", {"spec.role": DELETE, "spec.instanceProfile": ""}, False,
         "instanceProfile cannot be empty"),
    Case("should succeed if user data is empty", "EC2NodeClass", {"spec.userData": ""}, True),
    *[Case(f"should succeed with valid family {f}", "EC2NodeClass",
           {"spec.amiSelectorTerms": [{"id": "ami-0123456789abcdef"}], "spec.amiFamily": f}, True)
      for f in ("AL2", "AL2023", "Bottlerocket", "Windows2019", "Windows2022", "Windows2025", "Custom")],
    Case("should fail with the ubuntu family", "EC2NodeClass",
         {"spec.amiSelectorTerms": [{"id": "ami-0123456789abcdef"}], "spec.amiFamily": "Ubuntu"}, False),
    *[Case(f"should succeed when the amiFamily {f} matches its alias", "EC2NodeClass",
           {"spec.amiSelectorTerms": [{"alias": f"{f.lower()}@latest"}], "spec.amiFamily": f}, True)
      for f in ("AL2", "AL2023", "Bottlerocket", "Windows2019", "Windows2022", "Windows2025")],
    *[Case(f"should succeed when the amiFamily is custom with alias {f.lower()}@latest", "EC2NodeClass",
           {"spec.amiSelectorTerms": [{"alias": f"{f.lower()}@latest"}], "spec.amiFamily": "Custom"}, True)
      for f in ("AL2", "Bottlerocket", "Windows2025")],
    *[Case(f"should fail when amiFamily {f} does not match alias {a}", "EC2NodeClass",
           {"spec.amiSelectorTerms": [{"alias": a}], "spec.amiFamily": f}, False, msg)
      for f, a, msg in (
          ("AL2023", "al2@latest", "if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias"),
          ("AL2", "al2023@latest", "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias"),
          ("AL2023", "bottlerocket@latest",
           "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias"),
          ("Windows2022", "windows2019@latest",
           "if set, amiFamily must be 'Windows2019' or 'Custom' when using a Windows2019 alias"),
          ("Windows2025", "windows2022@latest",
           "if set, amiFamily must be 'Windows2022' or 'Custom' when using a Windows2022 alias"),
          ("Bottlerocket", "windows2025@latest",
           "if set, amiFamily must be 'Windows2025' or 'Custom' when using a Windows2025 alias"))],
    Case("should fail when neither amiFamily nor an alias are specified", "EC2NodeClass",
         {"spec.amiSelectorTerms": [{"id": "ami-01234567890abcdef"}], "spec.amiFamily": DELETE}, False,
         "must specify amiFamily if amiSelectorTerms does not contain an alias"),
    Case("an alias alone needs no amiFamily", "EC2NodeClass", {"spec.amiFamily": DELETE}, True),
    # --- EC2NodeClass: tags -------------------------------------------------------------------------------------------
    Case("should succeed when tags are empty", "EC2NodeClass", {"spec.tags": {}}, True),
    Case("should succeed if tags aren't in restricted tag keys", "EC2NodeClass",
         {"spec.tags": {"karpenter.sh/custom-key": "value", "karpenter.sh/managed": "true",
                        "kubernetes.io/role/key": "value"}}, True),
    *[Case(f"should fail if tags contain a restricted domain key ({k})", "EC2NodeClass", {"spec.tags": {k: "v"}},
           False, f"tag contains a restricted tag matching {m}")
      for k, m in (("karpenter.sh/nodepool", "karpenter.sh/nodepool"),
                   ("kubernetes.io/cluster/test", "kubernetes.io/cluster/"),
                   ("eks:eks-cluster-name", "eks:eks-cluster-name"),
                   ("karpenter.k8s.aws/ec2nodeclass", "karpenter.k8s.aws/ec2nodeclass"),
                   ("karpenter.sh/nodeclaim", "karpenter.sh/nodeclaim"))],
    Case("empty tag keys aren't supported", "EC2NodeClass", {"spec.tags": {"": "v"}}, False,
         "empty tag keys aren't supported"),
    # --- EC2NodeClass: subnet, security group, capacity reservation selector terms ---------------------------------
    Case("should succeed with a valid subnet selector on tags", "EC2NodeClass",
         {"spec.subnetSelectorTerms": [{"tags": {"test": "testvalue"}}]}, True),
    Case("should succeed with a valid subnet selector on id", "EC2NodeClass",
         {"spec.subnetSelectorTerms": [{"id": "subnet-12345749"}]}, True),
    Case("should fail when subnet selector terms is set to nil", "EC2NodeClass", {"spec.subnetSelectorTerms": DELETE},
         False),
    Case("should fail when no subnet selector terms exist", "EC2NodeClass", {"spec.subnetSelectorTerms": []}, False,
         "subnetSelectorTerms cannot be empty"),
    Case("should fail when a subnet selector term has no values", "EC2NodeClass", {"spec.subnetSelectorTerms": [{}]},
         False, "expected at least one, got none, ['tags', 'id']"),
    Case("should fail when a subnet selector term has a tag map key that is empty", "EC2NodeClass",
         {"spec.subnetSelectorTerms": [{"tags": {"": "testvalue"}}]}, False,
         "empty tag keys or values aren't supported"),
    Case("should fail when a subnet selector term has a tag map value that is empty", "EC2NodeClass",
         {"spec.subnetSelectorTerms": [{"tags": {"test": ""}}]}, False, "empty tag keys or values aren't supported"),
    Case("should fail when the last subnet selector is invalid", "EC2NodeClass", {"spec.subnetSelectorTerms": [
        {"tags": {"test": "testvalue"}}, {"tags": {"test2": "testvalue2"}}, {"tags": {"test3": "testvalue3"}},
        {"tags": {"": "testvalue4"}}]}, False, "empty tag keys or values aren't supported"),
    Case("should fail when specifying id with tags (subnet)", "EC2NodeClass",
         {"spec.subnetSelectorTerms": [{"id": "subnet-12345749", "tags": {"test": "testvalue"}}]}, False,
         "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term"),
    Case("id with tags in one of several terms passes (Karpenter's rule fires only when every term combines them)",
         "EC2NodeClass",
         {"spec.subnetSelectorTerms": [{"id": "subnet-12345749", "tags": {"a": "b"}}, {"tags": {"c": "d"}}]}, True),
    Case("a subnet id must look like one", "EC2NodeClass", {"spec.subnetSelectorTerms": [{"id": "sn-1"}]}, False),
    Case("at most 20 tags in a selector term", "EC2NodeClass",
         {"spec.subnetSelectorTerms": [{"tags": {f"t{i}": "v" for i in range(21)}}]}, False),
    Case("should succeed with a valid security group selector on tags", "EC2NodeClass",
         {"spec.securityGroupSelectorTerms": [{"tags": {"test": "testvalue"}}]}, True),
    Case("should succeed with a valid security group selector on id", "EC2NodeClass",
         {"spec.securityGroupSelectorTerms": [{"id": "sg-12345749"}]}, True),
    Case("should succeed with a valid security group selector on name", "EC2NodeClass",
         {"spec.securityGroupSelectorTerms": [{"name": "testname"}]}, True),
    Case("should fail when no security group selector terms exist", "EC2NodeClass",
         {"spec.securityGroupSelectorTerms": []}, False, "securityGroupSelectorTerms cannot be empty"),
    Case("should fail when a security group selector term has no values", "EC2NodeClass",
         {"spec.securityGroupSelectorTerms": [{}]}, False, "expected at least one, got none, ['tags', 'id', 'name']"),
    Case("should fail when a security group selector term has a tag map value that is empty", "EC2NodeClass",
         {"spec.securityGroupSelectorTerms": [{"tags": {"test": ""}}]}, False,
         "empty tag keys or values aren't supported"),
    Case("should fail when specifying id with tags (security group)", "EC2NodeClass",
         {"spec.securityGroupSelectorTerms": [{"id": "sg-12345749", "tags": {"test": "testvalue"}}]}, False,
         "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector "
         "term"),
    Case("should fail when specifying id with name (security group)", "EC2NodeClass",
         {"spec.securityGroupSelectorTerms": [{"id": "sg-12345749", "name": "my-security-group"}]}, False,
         "'id' is mutually exclusive"),
    Case("should fail when specifying name with tags", "EC2NodeClass",
         {"spec.securityGroupSelectorTerms": [{"name": "my-security-group", "tags": {"test": "testvalue"}}]}, False,
         "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group "
         "selector term"),
    Case("should succeed with a valid capacity reservation selector on tags", "EC2NodeClass",
         {"spec.capacityReservationSelectorTerms": [{"tags": {"test": "testvalue"}}]}, True),
    Case("should succeed with a valid capacity reservation selector on id", "EC2NodeClass",
         {"spec.capacityReservationSelectorTerms": [{"id": "cr-12345749"}]}, True),
    Case("should succeed for a valid ownerID", "EC2NodeClass",
         {"spec.capacityReservationSelectorTerms": [{"ownerID": "012345678901", "tags": {"test": "testvalue"}}]},
         True),
    Case("should fail with a capacity reservation selector on a malformed id", "EC2NodeClass",
         {"spec.capacityReservationSelectorTerms": [{"id": "r-12345749"}]}, False),
    Case("should succeed when capacity group selector terms is set to nil", "EC2NodeClass",
         {"spec.capacityReservationSelectorTerms": DELETE}, True),
    Case("should fail when a capacity reservation selector term has no values", "EC2NodeClass",
         {"spec.capacityReservationSelectorTerms": [{}]}, False,
         "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']"),
    Case("should fail when a capacity reservation selector term has a tag map key that is empty", "EC2NodeClass",
         {"spec.capacityReservationSelectorTerms": [{"tags": {"": "testvalue"}}]}, False,
         "empty tag keys or values aren't supported"),
    Case("should fail when specifying id with tags in a single term", "EC2NodeClass",
         {"spec.capacityReservationSelectorTerms": [{"id": "cr-12345749", "tags": {"test": "testvalue"}}]}, False,
         "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term"),
    Case("should fail when specifying id with ownerID in a single term", "EC2NodeClass",
         {"spec.capacityReservationSelectorTerms": [{"ownerID": "012345678901", "id": "cr-12345749"}]}, False,
         "'id' is mutually exclusive"),
    Case("should fail when the ownerID is malformed", "EC2NodeClass",
         {"spec.capacityReservationSelectorTerms": [{"ownerID": "01234567890", "tags": {"test": "testvalue"}}]},
         False),
    Case("should fail when the ownerID is set by itself", "EC2NodeClass",
         {"spec.capacityReservationSelectorTerms": [{"ownerID": "012345678901"}]}, False,
         "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']"),
    *[Case(f"should succeed with a valid instanceMatchCriteria {c!r}", "EC2NodeClass",
           {"spec.capacityReservationSelectorTerms": [{"instanceMatchCriteria": c}]}, True)
      for c in ("open", "targeted")],
    Case("should succeed with instanceMatchCriteria combined with ownerID and tags", "EC2NodeClass",
         {"spec.capacityReservationSelectorTerms": [{"instanceMatchCriteria": "targeted", "ownerID": "012345678901",
                                                     "tags": {"test": "testvalue"}}]}, True),
    Case("should fail with invalid instanceMatchCriteria value", "EC2NodeClass",
         {"spec.capacityReservationSelectorTerms": [{"instanceMatchCriteria": "invalid"}]}, False),
    Case("should fail when specifying id with instanceMatchCriteria", "EC2NodeClass",
         {"spec.capacityReservationSelectorTerms": [{"id": "cr-12345749", "instanceMatchCriteria": "open"}]}, False,
         "'id' is mutually exclusive"),
    # --- EC2NodeClass: AMI selector terms and aliases ----------------------------------------------------------------
    Case("should succeed with a valid ami selector on tags", "EC2NodeClass",
         {"spec.amiSelectorTerms": [{"tags": {"test": "testvalue"}}]}, True),
    Case("should succeed with a valid ami selector on id", "EC2NodeClass",
         {"spec.amiSelectorTerms": [{"id": "ami-12345749"}]}, True),
    Case("should succeed with a valid ami selector on name and owner", "EC2NodeClass",
         {"spec.amiSelectorTerms": [{"name": "testname", "owner": "testowner"}]}, True),
    Case("should succeed when an ami selector term has an owner key with tags", "EC2NodeClass",
         {"spec.amiSelectorTerms": [{"owner": "testowner", "tags": {"test": "testvalue"}}]}, True),
    Case("an SSM parameter selects an AMI", "EC2NodeClass",
         {"spec.amiSelectorTerms": [{"ssmParameter": "/aws/service/custom/ami"}]}, True),
    Case("should fail when a ami selector term has no values", "EC2NodeClass", {"spec.amiSelectorTerms": [{}]}, False,
         "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']"),
    Case("should fail when a ami selector term has a tag map value that is empty", "EC2NodeClass",
         {"spec.amiSelectorTerms": [{"tags": {"test": ""}}]}, False, "empty tag keys or values aren't supported"),
    Case("amiSelectorTerms may not be empty", "EC2NodeClass", {"spec.amiSelectorTerms": []}, False),
    *[Case(f"should fail when specifying id with {k}", "EC2NodeClass",
           {"spec.amiSelectorTerms": [{"id": "ami-1234749", k: v}]}, False,
           "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms")
      for k, v in (("alias", "al2023@latest"), ("tags", {"test": "testvalue"}), ("name", "my-custom-ami"),
                   ("owner", "123456789"))],
    *[Case(f"should fail when specifying alias with {k}", "EC2NodeClass",
           {"spec.amiSelectorTerms": [{"alias": "al2023@latest", k: v}]}, False,
           "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms")
      for k, v in (("tags", {"test": "testvalue"}), ("name", "my-custom-ami"), ("owner", "123456789"))],
    Case("should fail when specifying alias with other terms", "EC2NodeClass",
         {"spec.amiSelectorTerms": [{"alias": "al2023@latest"}, {"tags": {"test": "testvalue"}}]}, False,
         "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"),
    *[Case(f"should succeed for valid alias {a}", "EC2NodeClass",
           {"spec.amiSelectorTerms": [{"alias": a}], "spec.amiFamily": f}, True)
      for a, f in (("al2@latest", "AL2"), ("al2@v20240625", "AL2"), ("al2023@latest", "AL2023"),
                   ("al2023@v20240625", "AL2023"), ("bottlerocket@latest", "Bottlerocket"),
                   ("bottlerocket@1.10.0", "Bottlerocket"), ("windows2019@latest", "Windows2019"),
                   ("windows2022@latest", "Windows2022"), ("windows2025@latest", "Windows2025"))],
    *[Case(f"should fail for incorrectly formatted alias {a!r}", "EC2NodeClass",
           {"spec.amiSelectorTerms": [{"alias": a}]}, False)
      for a in ("@latest", "al2023", "al2023@", "al2023-latest")],
    Case("should fail for an alias with an invalid family", "EC2NodeClass",
         {"spec.amiSelectorTerms": [{"alias": "ubuntu@latest"}], "spec.amiFamily": DELETE}, False,
         "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', "
         "'windows2022', 'windows2025'"),
    *[Case(f"should fail when specifying non-latest versions with Windows alias {a}", "EC2NodeClass",
           {"spec.amiSelectorTerms": [{"alias": a}], "spec.amiFamily": DELETE}, False,
           "windows families may only specify version 'latest'")
      for a in ("windows2019@v1.0.0", "windows2022@v1.0.0", "windows2025@v1.0.0")],
    Case("an alias is at most 30 characters", "EC2NodeClass",
         {"spec.amiSelectorTerms": [{"alias": "al2023@v" + "1" * 30}]}, False),
    # --- EC2NodeClass: kubelet ---------------------------------------------------------------------------------------
    Case("kubelet: should succeed for valid inputs", "EC2NodeClass", {"spec.kubelet": {
        "maxPods": 110, "podsPerCore": 10, "kubeReserved": {"cpu": "200m", "memory": "100Mi"},
        "systemReserved": {"cpu": "200m", "memory": "100Mi"}, "evictionHard": {"memory.available": "5%"}}}, True),
    Case("kubelet: should persist a field Karpenter has no Go representation for", "EC2NodeClass",
         {"spec.kubelet": {"serializeImagePulls": False}}, True),
    Case("kubelet: should preserve a nested subtree unaltered", "EC2NodeClass",
         {"spec.kubelet": {"logging": {"format": "json", "flushFrequency": "5s",
                                       "options": {"json": {"infoBufferSize": "100Mi", "splitStream": True}}}}}, True),
    Case("kubelet: podsPerCore must be an integer", "EC2NodeClass", {"spec.kubelet": {"podsPerCore": "ten"}}, False,
         runtime=True),
    Case("kubelet: negative kubeReserved", "EC2NodeClass", {"spec.kubelet": {"kubeReserved": {"cpu": "-1"}}}, False,
         runtime=True),
    Case("kubelet: negative systemReserved", "EC2NodeClass", {"spec.kubelet": {"systemReserved": {"memory": "-1Gi"}}},
         False, runtime=True),
    Case("kubelet: unknown reserved resource", "EC2NodeClass", {"spec.kubelet": {"kubeReserved": {"gpu": "1"}}},
         False, runtime=True),
    Case("kubelet: unknown eviction signal", "EC2NodeClass", {"spec.kubelet": {"evictionHard": {"memory.free": "1"}}},
         False, runtime=True),
    Case("kubelet: evictionSoft without a grace period", "EC2NodeClass",
         {"spec.kubelet": {"evictionSoft": {"memory.available": "10%"}}}, False, runtime=True),
    Case("kubelet: image GC thresholds out of order", "EC2NodeClass",
         {"spec.kubelet": {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60}}, False,
         runtime=True),
    Case("kubelet: negative maxPods", "EC2NodeClass", {"spec.kubelet": {"maxPods": -1}}, False, runtime=True),
    Case("kubelet: registerWithTaints is Karpenter's", "EC2NodeClass",
         {"spec.kubelet": {"registerWithTaints": []}}, False, runtime=True),
    # Karpenter's ValidateKubeletConfig table: the CRD admits every map; the controller (and karpy validate) rejects
    *[Case(f"kubelet: should accept {n}", "EC2NodeClass", {"spec.kubelet": k}, True) for n, k in (
        ("an empty configuration", {}),
        ("the fields Karpenter reads for scheduling", {
            "maxPods": 110, "podsPerCore": 10, "kubeReserved": {"cpu": "200m", "memory": "100Mi"},
            "systemReserved": {"ephemeral-storage": "1Gi", "pid": "1000"}, "evictionHard": {"memory.available": "5%"}}),
        ("an eviction threshold as a quantity rather than a percentage",
         {"evictionHard": {"nodefs.available": "500Mi"}}),
        ("matching evictionSoft and evictionSoftGracePeriod", {"evictionSoft": {"memory.available": "10%"},
                                                               "evictionSoftGracePeriod": {"memory.available": "1m"}}),
        ("imageGC thresholds in the correct order", {"imageGCHighThresholdPercent": 80,
                                                     "imageGCLowThresholdPercent": 60}),
        ("zero-valued fields", {"maxPods": 0, "podsPerCore": 0, "evictionMaxPodGracePeriod": 0}),
        ("clusterDNS and cpuCFSQuota", {"clusterDNS": ["10.100.0.10"], "cpuCFSQuota": False}))],
    *[Case(f"kubelet: should reject {n}", "EC2NodeClass", {"spec.kubelet": k}, False, runtime=True) for n, k in (
        ("a field the kubelet library doesn't declare", {"notAKubeletField": True}),
        ("arbitrary junk", {"a": {"b": [1, "two", True]}}),
        ("a negative maxPods", {"maxPods": -1}), ("a negative podsPerCore", {"podsPerCore": -1}),
        ("a negative evictionMaxPodGracePeriod", {"evictionMaxPodGracePeriod": -1}),
        ("imageGCHighThresholdPercent above 100", {"imageGCHighThresholdPercent": 101}),
        ("imageGCHighThresholdPercent below 0", {"imageGCHighThresholdPercent": -1}),
        ("imageGCLowThresholdPercent above 100", {"imageGCLowThresholdPercent": 101}),
        ("imageGCLowThresholdPercent below 0", {"imageGCLowThresholdPercent": -1}),
        ("an unreservable resource in kubeReserved", {"kubeReserved": {"gpu": "1"}}),
        ("an unreservable resource in systemReserved", {"systemReserved": {"gpu": "1"}}),
        ("a negative reservation in kubeReserved", {"kubeReserved": {"cpu": "-1"}}),
        ("a negative reservation in systemReserved", {"systemReserved": {"cpu": "-1"}}),
        ("an invalid eviction signal in evictionHard", {"evictionHard": {"notASignal": "5%"}}),
        ("an invalid eviction signal in evictionSoft", {"evictionSoft": {"notASignal": "5%"}}),
        ("an invalid eviction signal in evictionMinimumReclaim", {"evictionMinimumReclaim": {"notASignal": "500Mi"}}),
        ("an invalid eviction signal in evictionSoftGracePeriod", {"evictionSoftGracePeriod": {"notASignal": "1m"}}),
        ("a threshold that is neither a percentage nor a quantity in evictionHard",
         {"evictionHard": {"memory.available": "lots"}}),
        ("a threshold that is neither a percentage nor a quantity in evictionMinimumReclaim",
         {"evictionMinimumReclaim": {"memory.available": "lots"}}),
        ("an evictionSoftGracePeriod that isn't a duration", {"evictionSoft": {"memory.available": "10%"},
                                                              "evictionSoftGracePeriod": {"memory.available": "soon"}}),
        ("a negative evictionSoftGracePeriod", {"evictionSoft": {"memory.available": "10%"},
                                                "evictionSoftGracePeriod": {"memory.available": "-1m"}}),
        ("an evictionSoft threshold with no matching grace period", {
            "evictionSoft": {"memory.available": "10%"}, "evictionSoftGracePeriod": {"nodefs.available": "1m"}}),
        ("an evictionSoftGracePeriod with no matching threshold",
         {"evictionSoftGracePeriod": {"memory.available": "1m"}}),
        ("an imageGC high threshold at the low threshold", {"imageGCHighThresholdPercent": 70,
                                                           "imageGCLowThresholdPercent": 70}),
        ("clusterDNS as a string rather than a list", {"clusterDNS": "10.0.0.10"}),
        ("maxPods as a bool", {"maxPods": True}), ("podsPerCore as a string", {"podsPerCore": "10"}),
        ("kubeReserved with non-string values", {"kubeReserved": {"cpu": 1}}),
        ("systemReserved with non-string values", {"systemReserved": {"cpu": 1}}),
        ("evictionHard with non-string values", {"evictionHard": {"memory.available": 5}}),
        ("evictionSoft with non-string values", {"evictionSoft": {"memory.available": 5}}),
        ("evictionMaxPodGracePeriod as a string", {"evictionMaxPodGracePeriod": "30"}),
        ("imageGCHighThresholdPercent as a string", {"imageGCHighThresholdPercent": "80"}),
        ("cpuCFSQuota as a string", {"cpuCFSQuota": "true"}))],
    # --- EC2NodeClass: metadata options ------------------------------------------------------------------------------
    Case("metadataOptions: should succeed for valid inputs", "EC2NodeClass", {"spec.metadataOptions": {
        "httpEndpoint": "disabled", "httpProtocolIPv6": "enabled", "httpPutResponseHopLimit": 2,
        "httpTokens": "optional"}}, True),
    Case("should fail for invalid for HTTPEndpoint", "EC2NodeClass", {"spec.metadataOptions.httpEndpoint": "test"},
         False),
    Case("should fail for invalid for HTTPProtocolIPv6", "EC2NodeClass",
         {"spec.metadataOptions.httpProtocolIPv6": "test"}, False),
    *[Case(f"should fail for invalid for HTTPPutResponseHopLimit {n}", "EC2NodeClass",
           {"spec.metadataOptions.httpPutResponseHopLimit": n}, False) for n in (-1, 0, 65)],
    Case("should fail for invalid for HTTPTokens", "EC2NodeClass", {"spec.metadataOptions.httpTokens": "test"}, False),
    # --- EC2NodeClass: block device mappings -------------------------------------------------------------------------
    Case("should succeed if more than one root volume is specified", "EC2NodeClass", {"spec.blockDeviceMappings": [
        bdm(volumeSize="500G", rootVolume=True), bdm(volumeSize="50T")]}, True),
    *[Case(f"should succeed for valid VolumeSize {v}", "EC2NodeClass",
           {"spec.blockDeviceMappings": [bdm(volumeSize=v)]}, True)
      for v in ("58G", "45T", "100Gi", "1Ti", "64000G", "59000Gi")],
    Case("should fail if more than one root volume is specified", "EC2NodeClass", {"spec.blockDeviceMappings": [
        bdm(volumeSize="50G", rootVolume=True), bdm(volumeSize="50G", rootVolume=True)]}, False,
        "must have only one blockDeviceMappings with rootVolume"),
    *[Case(f"should fail VolumeSize {v}", "EC2NodeClass", {"spec.blockDeviceMappings": [bdm(volumeSize=v)]}, False)
      for v in ("1m", "100T", "0", "-10Gi", "65T", "10", "10Mi")],
    Case("volumeSize is a string", "EC2NodeClass", {"spec.blockDeviceMappings": [bdm(volumeSize=100)]}, False),
    Case("snapshotID or volumeSize must be defined", "EC2NodeClass",
         {"spec.blockDeviceMappings": [bdm(volumeType="gp3")]}, False, "snapshotID or volumeSize must be defined"),
    Case("a snapshot needs no volumeSize", "EC2NodeClass", {"spec.blockDeviceMappings": [bdm(snapshotID="snap-1")]},
         True),
    Case("should fail if VolumeInitializationRate set but SnapshotID not specified", "EC2NodeClass",
         {"spec.blockDeviceMappings": [bdm(volumeSize="10Gi", volumeInitializationRate=100)]}, False,
         "snapshotID must be set when volumeInitializationRate is set"),
    Case("volumeInitializationRate with a snapshot", "EC2NodeClass",
         {"spec.blockDeviceMappings": [bdm(snapshotID="snap-1", volumeInitializationRate=200)]}, True),
    *[Case(f"should fail if VolumeInitializationRate {r}", "EC2NodeClass",
           {"spec.blockDeviceMappings": [bdm(volumeSize="10Gi", snapshotID="snap-1", volumeInitializationRate=r)]},
           False) for r in (99, 888)],
    Case("volumeType must be an EBS type", "EC2NodeClass",
         {"spec.blockDeviceMappings": [bdm(volumeSize="10Gi", volumeType="gp9")]}, False),
    # --- EC2NodeClass: network interfaces, connection tracking, cpu options, placement group -------------------------
    Case("should succeed with valid multiple network interfaces", "EC2NodeClass", {"spec.networkInterfaces": [
        ni(0, 0), ni(0, 1, "efa-only"), ni(1, 0, "efa-only"), ni(1, 1)]}, True),
    Case("should succeed when network interfaces is empty", "EC2NodeClass", {"spec.networkInterfaces": []}, True),
    Case("should fail with an invalid interface type", "EC2NodeClass", {"spec.networkInterfaces": [ni(0, 0, "efa")]},
         False),
    Case("should fail with a negative NetworkCardIndex", "EC2NodeClass",
         {"spec.networkInterfaces": [ni(0, 0), ni(-1, 0)]}, False),
    Case("should fail with a negative DeviceIndex", "EC2NodeClass", {"spec.networkInterfaces": [ni(-1, 0), ni(0, -1)]},
         False),
    Case("should fail with duplicate Network Interface and Device Index fields", "EC2NodeClass",
         {"spec.networkInterfaces": [ni(0, 0), ni(0, 1, "efa-only"), ni(1, 0), ni(1, 0, "efa-only")]}, False,
         "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one "
         "efa device per network card"),
    Case("should fail with no primary network interface", "EC2NodeClass", {"spec.networkInterfaces": [ni(0, 1)]},
         False, "networkInterfaces must include a primary interface with interfaceType='interface'"),
    Case("should fail when primary network interface is not ENA", "EC2NodeClass",
         {"spec.networkInterfaces": [ni(0, 0, "efa-only")]}, False,
         "networkInterfaces must include a primary interface with interfaceType='interface'"),
    Case("should fail when multiple EFA devices on one network card", "EC2NodeClass",
         {"spec.networkInterfaces": [ni(0, 0), ni(1, 0, "efa-only"), ni(1, 1, "efa-only")]}, False,
         "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs"),
    Case("a network interface names its card, device and type", "EC2NodeClass",
         {"spec.networkInterfaces": [{"deviceIndex": 0, "networkCardIndex": 0}]}, False),
    Case("should fail when connectionTracking is specified with no fields set", "EC2NodeClass",
         {"spec.connectionTracking": {}}, False,
         "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set"),
    *[Case(f"connectionTracking {k}={v}", "EC2NodeClass", {"spec.connectionTracking": {k: v}}, ok)
      for k, v, ok in (("tcpEstablishedTimeout", 60, True), ("udpStreamTimeout", 120, True), ("udpTimeout", 45, True),
                       ("tcpEstablishedTimeout", 59, False), ("tcpEstablishedTimeout", 432001, False),
                       ("udpStreamTimeout", 59, False), ("udpStreamTimeout", 181, False), ("udpTimeout", 29, False),
                       ("udpTimeout", 61, False))],
    Case("should succeed with all valid connection tracking settings", "EC2NodeClass", {"spec.connectionTracking": {
        "tcpEstablishedTimeout": 432000, "udpStreamTimeout": 180, "udpTimeout": 60}}, True),
    *[Case(f"cpuOptions nestedVirtualization {v}", "EC2NodeClass", {"spec.cpuOptions": {"nestedVirtualization": v}},
           v != "invalid") for v in ("enabled", "disabled", "invalid")],
    Case("should succeed with empty CPUOptions", "EC2NodeClass", {"spec.cpuOptions": {}}, True),
    Case("placement group by name", "EC2NodeClass", {"spec.placementGroupSelector": {"name": "pg"}}, True),
    Case("placement group by id", "EC2NodeClass", {"spec.placementGroupSelector": {"id": "pg-0123abc"}}, True),
    Case("placement group needs name or id", "EC2NodeClass", {"spec.placementGroupSelector": {}}, False,
         "expected at least one, got none, ['name', 'id']"),
    Case("placement group name and id are exclusive", "EC2NodeClass",
         {"spec.placementGroupSelector": {"name": "pg", "id": "pg-0123abc"}}, False,
         "'name' and 'id' are mutually exclusive"),
    Case("ipPrefixCount is not negative", "EC2NodeClass", {"spec.ipPrefixCount": -1}, False),
    Case("ipPrefixCount", "EC2NodeClass", {"spec.ipPrefixCount": 2}, True),
    Case("associatePublicIPAddress, detailedMonitoring, instanceStorePolicy", "EC2NodeClass",
         {"spec.associatePublicIPAddress": False, "spec.detailedMonitoring": True, "spec.instanceStorePolicy": "RAID0"},
         True),
    Case("should succeed when updating the role", "EC2NodeClass", {"spec.role": "test-role"}, True,
         update={"spec.role": "test-role2"}),
    Case("should succeed to switch between an unmanaged and managed instance profile", "EC2NodeClass",
         {"spec.role": DELETE, "spec.instanceProfile": "test-instance-profile"}, True,
         update={"spec.role": "test-role", "spec.instanceProfile": DELETE}),
]

# Where karpy knowingly differs from Karpenter: the CRD admits these as Karpenter's does, and Karpenter's controller
# also accepts the first group (kubelet CEL expressions, which karpy's launch path cannot evaluate yet) and rejects the
# second (nested kubelet fields, which karpy does not check below the top level).
KARPY_REJECTS_KARPENTER_ACCEPTS = [
    ({"maxPods": "vcpus * 10"}, "maxPods expressions are not supported by karpy"),
    ({"kubeReserved": {"memory": "memory * 0.1"}}, "reservation expressions are not supported by karpy"),
    ({"systemReserved": {"cpu": "vcpus * 10m"}}, "reservation expressions are not supported by karpy"),
]
KARPY_ACCEPTS_KARPENTER_REJECTS = [
    {"logging": {"bogusLoggingField": True}},
    {"logging": {"options": {"json": {"nope": "x"}}}},
    {"logging": {"format": 12345}},
]


def test_known_kubelet_deviations_are_explicit(evaluators):
    for kubelet, message in KARPY_REJECTS_KARPENTER_ACCEPTS:
        raw = Case("", "EC2NodeClass", {"spec.kubelet": kubelet}, True).document()
        assert evaluators["EC2NodeClass"].create(raw)[1] == []
        assert any(message in e for e in _karpy(raw)), kubelet
    for kubelet in KARPY_ACCEPTS_KARPENTER_REJECTS:
        raw = Case("", "EC2NodeClass", {"spec.kubelet": kubelet}, True).document()
        assert evaluators["EC2NodeClass"].create(raw)[1] == []
        assert _karpy(raw) == []


# update cases whose second version Karpenter rejects
UPDATE_REJECTED = {
    "should fail to mutate group": "nodeClassRef.group is immutable",
    "should fail to mutate kind": "nodeClassRef.kind is immutable",
    "should fail when changing the NodePool from static to dynamic":
        "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
    "should fail when changing the NodePool from dynamic to static":
        "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
    "NodeClaim: spec is immutable": "spec is immutable",
}


@pytest.fixture(scope="module")
def evaluators() -> dict[str, CRDEvaluator]:
    return {crd["spec"]["names"]["kind"]: CRDEvaluator(crd) for crd in crd_manifests()}


def _karpy(raw: dict[str, Any]) -> list[str]:
    doc = Document("case.yaml", 0, raw["apiVersion"], raw["kind"], raw["metadata"]["name"], None, raw)
    return [str(e) for e in validate_document(doc)]


def test_every_crd_rule_compiles_and_karpy_checks_it():
    from controller.api.kinds import KINDS
    from controller.api.schema import Field

    crds = crd_manifests()
    assert all(compile_errors(crd) == [] for crd in crds), [compile_errors(crd) for crd in crds]

    def rules(f: Field) -> list[Any]:
        out = list(f.rules)
        for child in [*f.fields.values(), f.items, f.values]:
            if child is not None:
                out.extend(rules(child))
        return out

    every = [r for schema in KINDS.values() for r in rules(schema)]
    assert len(every) >= 40
    assert [r.cel for r in every if r.check is None and not r.transition] == []
    in_crds = sum(str(crd).count("'rule':") for crd in crds)
    assert in_crds == len(every)


def test_the_table_is_large_and_has_both_verdicts():
    names = [c.name for c in CASES]
    assert len(set(names)) == len(names), [n for n in names if names.count(n) > 1]
    assert len(CASES) >= 250
    assert sum(c.valid for c in CASES) >= 80 and sum(not c.valid for c in CASES) >= 150
    assert {c.kind for c in CASES} == set(BASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_karpy_validate_and_the_crd_agree(case: Case, evaluators: dict[str, CRDEvaluator]):
    raw = case.document()
    karpy = _karpy(raw)
    _, crd_errors = evaluators[case.kind].create(raw)
    crd = [str(e) for e in crd_errors]
    assert (not karpy) == case.valid, f"karpy validate: {karpy}"
    assert (not crd) == (case.valid or case.runtime), f"CRD: {crd}"
    if case.message:
        assert any(case.message in e for e in karpy), karpy
        assert any(case.message in e for e in crd), crd


UPDATES = [c for c in CASES if c.update is not None]


@pytest.mark.parametrize("case", UPDATES, ids=[c.name for c in UPDATES])
def test_updates_apply_the_transition_rules(case: Case, evaluators: dict[str, CRDEvaluator]):
    assert case.update is not None
    old = case.document()
    new = case.document({**case.changes, **case.update})
    stored, errors = evaluators[case.kind].create(old)
    assert errors == []
    _, errors = evaluators[case.kind].update(stored, new)
    message = UPDATE_REJECTED.get(case.name)
    if message is None:
        assert errors == []
    else:
        assert any(message in str(e) for e in errors), errors
    assert _karpy(new) == []  # one document at a time: the transition is the apiserver's to refuse


def test_the_crd_defaults_what_the_models_default(evaluators: dict[str, CRDEvaluator]):
    from controller.api import parse_ec2nodeclass, parse_nodepool

    for kind, parse in (("NodePool", parse_nodepool), ("EC2NodeClass", parse_ec2nodeclass)):
        raw = copy.deepcopy(BASES[kind])
        stored, errors = evaluators[kind].create(raw)
        assert errors == []
        doc = Document("case.yaml", 0, raw["apiVersion"], kind, raw["metadata"]["name"], None, raw)
        assert stored["spec"] == parse(doc).to_dict()["spec"]
