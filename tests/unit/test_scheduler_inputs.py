"""The one translation into the scheduler's inputs (inputs.scheduler_inputs), and Karpenter's scheduling cases for
what it carries, run through each face that uses it: `karpy simulate`'s documents, `karpy disruption`'s documents
and snapshot, and the translation itself (the provisioner's cluster state goes through the same call; its own tests
are in test_provisioning*.py)."""

from __future__ import annotations

import pytest

from controller.api import labels as L
from controller.api.documents import parse_documents
from controller.disruption import documents as disruption_documents
from controller.disruption.candidates import build_candidates
from controller.disruption.simulation import build
from controller.disruption.types import Options
from controller.provisioning import inputs
from controller.scheduling.policies import solve
from controller.simulate.render import to_dict
from controller.simulate.run import SimulationError, simulate_documents

POOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}, requirements: []}}
"""

# a DaemonSet asking 1 cpu in its template; its live pod (after a LimitRange) asks 2 cpu
DAEMONSET = """
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system, uid: ds-uid}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {tolerations: [{operator: Exists}], containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
"""
LIVE_DAEMONSET_POD = """
---
apiVersion: v1
kind: Node
metadata: {name: busy, labels: {kubernetes.io/arch: amd64}}
spec: {taints: [{key: dedicated, value: other, effect: NoSchedule}]}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}, capacity: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata:
  name: agent-x
  namespace: kube-system
  labels: {app: agent}
  ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: ds-uid, controller: true}]
spec:
  nodeName: busy
  tolerations: [{operator: Exists}]
  containers: [{name: c, resources: {requests: {cpu: "2"}}}]
"""
PENDING = """
---
apiVersion: v1
kind: Pod
metadata: {name: app, namespace: default}
spec: {containers: [{name: c, resources: {requests: {cpu: "1", memory: 1Gi}}}]}
"""


def _instance_type(text: str) -> str:
    data = to_dict(simulate_documents(parse_documents(text, "in.yaml"), catalog="benchmark"))
    [claim] = data["nodeClaims"]
    return str(claim["instanceType"])


def test_should_account_for_overhead_using_daemonset_pod_spec_instead_of_daemonset_spec_in_simulate():
    """Karpenter's suite, through `karpy simulate`: with the DaemonSet's live pod among the documents, its requests
    (2 cpu), not its template's (1 cpu), size the overhead of the node opened for a 1-cpu pod."""
    from_template = _instance_type(POOL + DAEMONSET + PENDING)
    from_live_pod = _instance_type(POOL + DAEMONSET + LIVE_DAEMONSET_POD + PENDING)
    assert (from_template, from_live_pod) == ("fake-it-2", "fake-it-3")


def test_should_account_for_overhead_using_daemonset_pod_spec_in_the_disruption_simulation():
    """The same case through `karpy disruption`'s snapshot: the pass's simulation sizes replacements with the live
    pod's requests."""
    docs = parse_documents(POOL + DAEMONSET + LIVE_DAEMONSET_POD, "snap.yaml")
    inp = disruption_documents.load(docs, catalog="benchmark", now=0.0)
    sim = build(inp.snapshot, build_candidates(inp.snapshot), Options())
    [overhead] = sim.daemonsets
    assert overhead.requests["cpu"] == 2000 and not sim.errors


NOT_READY_POOL = POOL + """status:
  conditions: [{type: Ready, status: "False", reason: NodeClassNotReady, message: EC2NodeClass d not ready}]
"""


def test_should_not_schedule_pods_with_nodepool_which_is_not_ready_in_every_offline_face():
    """Karpenter's suite: a NodePool whose Ready condition is False takes no pods. `karpy simulate` says why for the
    pod; `karpy disruption` reads the same rule, so the pool gets no replacements."""
    result = simulate_documents(parse_documents(NOT_READY_POOL + PENDING, "in.yaml"), catalog="benchmark")
    assert 'NodePool "default" is not ready: EC2NodeClass d not ready' in result.plan.unschedulable["default/app"]
    inp = disruption_documents.load(parse_documents(NOT_READY_POOL, "snap.yaml"), catalog="benchmark", now=0.0)
    assert inp.snapshot.nodepool_not_ready == {"default": 'NodePool "default" is not ready: EC2NodeClass d not ready'}


CHAIN = "".join(f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, labels: {{type: {name}}}}}
spec:
  containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]
""" + (f"""  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {{topologyKey: kubernetes.io/hostname, labelSelector: {{matchLabels: {{type: {target}}}}}}}
""" if target else "") for name, target in (("ui", "cache"), ("cache", "web"), ("web", "db"), ("db", None)))


def test_should_handle_multiple_dependent_affinities_in_simulate():
    """Karpenter's suite: DB <- Web <- Cache <- UI, each with hostname affinity to the one before, given last to
    first: all four schedule, on one node."""
    data = to_dict(simulate_documents(parse_documents(POOL + CHAIN, "chain.yaml"), catalog="benchmark"))
    assert not data["unschedulable"]
    [claim] = data["nodeClaims"]
    assert sorted(claim["pods"]) == ["default/cache", "default/db", "default/ui", "default/web"]


EMPTY_SELECTOR = """
---
apiVersion: v1
kind: Pod
metadata: {name: target, namespace: empty-ns-selector, labels: {security: s2}}
spec: {containers: [{name: c, resources: {requests: {cpu: 100m}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: follower, namespace: default}
spec:
  containers: [{name: c, resources: {requests: {cpu: 100m}}}]
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {security: s2}}, namespaceSelector: {}}
"""


def test_should_filter_pod_affinity_topologies_by_namespace_empty_namespace_selector_in_simulate():
    """Karpenter's suite: an empty namespaceSelector selects every namespace, so the follower joins its target from
    another namespace (no Namespace documents needed)."""
    data = to_dict(simulate_documents(parse_documents(POOL + EMPTY_SELECTOR, "ns.yaml"), catalog="benchmark"))
    assert not data["unschedulable"]
    [claim] = data["nodeClaims"]
    assert sorted(claim["pods"]) == ["default/follower", "empty-ns-selector/target"]


# ---- the translation itself ---------------------------------------------------------------------------------------

def _pod(name: str, **spec: object) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}], **spec}}


def test_what_cannot_be_read_is_named_not_raised_and_the_rest_is_built():
    bad_node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "lots"}}}
    good_node = {"metadata": {"name": "n2"}, "status": {"allocatable": {"cpu": "4"}}}
    bad_pod = _pod("bad", containers=[{"name": "c", "resources": {"requests": {"cpu": "much"}}}])
    bad_pool = {"metadata": {"name": "p"}, "spec": {"weight": "heavy"}}
    built = inputs.scheduler_inputs(
        nodes=[inputs.NodeSource(node=bad_node, where="nodes.yaml"), inputs.NodeSource(node=good_node)],
        pods=[(bad_pod, "pods.yaml"), (_pod("good"), "pods.yaml")],
        pools=lambda: [inputs.PoolSource(bad_pool, [], where="pools.yaml")])
    assert [n.name for n in built.existing] == ["n2"] and [p.key for p in built.pods] == ["default/good"]
    assert [(i.kind, i.key, i.where) for i in built.issues] == [
        ("Node", "n1", "nodes.yaml"), ("Pod", "default/bad", "pods.yaml"), ("NodePool", "p", "pools.yaml")]
    assert str(built.issues[0]).startswith("nodes.yaml: Node/n1: status.allocatable.cpu")
    assert "spec.weight" in str(built.issues[2])


def test_pods_asking_for_other_capacity_or_devices_are_set_aside_and_pools_are_read_only_for_pods_to_place():
    """Screening as the provisioner does it: a pod that excludes Karpenter's nodes is set aside, one with a DRA
    claim refused; with nothing left to place, the pools (a cloud call in the controller) are never read."""
    excluded = _pod("elsewhere", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": L.NODEPOOL, "operator": "DoesNotExist"}]}]}}})
    dra = _pod("gpu", resourceClaims=[{"name": "g"}])

    def pools() -> list[inputs.PoolSource]:
        raise AssertionError("pools read with no pod to place")

    built = inputs.scheduler_inputs(nodes=[], pods=[(excluded, "a"), (dra, "b")], pools=pools)
    assert [where for _, where in built.excluded] == ["a"]
    assert built.refused == {"default/gpu": inputs.DRA_UNSUPPORTED} and not built.pods and not built.issues
    kept = inputs.scheduler_inputs(nodes=[], pods=[(dra, "b")], pools=list, ignore_dra_requests=False)
    assert [p.key for p in kept.pods] == ["default/gpu"]


ALLOC = {"cpu": 2000, "memory": 4 * 2**30, "pods": 110}


def test_in_flight_nodeclaims_and_known_pods():
    """A NodeClaim without a Node is capacity with the allocatable its face expects; pods the face converted
    already are taken as they are, not converted again."""
    claim = {"metadata": {"name": "c1", "labels": {L.NODEPOOL: "default"}},
             "spec": {"requirements": [{"key": L.ZONE, "operator": "In", "values": ["z1"]}]}}
    known = inputs.scheduling_pod(_pod("p"))
    built = inputs.scheduler_inputs(
        nodes=[inputs.NodeSource(node=None, nodeclaim=claim, allocatable=ALLOC, uninitialized="nodeclaim/c1")],
        pods=[(_pod("p"), "")], pools=list, known={"default/p": known})
    [node] = built.existing
    assert node.in_flight and node.labels[L.ZONE] == "z1" and node.allocatable == ALLOC
    assert built.uninitialized == {"c1": "nodeclaim/c1"} and built.pods == [known]
    plan = solve(built.pools, built.existing, built.daemonsets, built.pods, "Respect", "Strict")
    assert plan.existing["c1"][0] is known


def test_karpy_disruption_converts_each_pod_once(monkeypatch: pytest.MonkeyPatch):
    """`karpy disruption` reads every pod into the scheduler's form once, when the documents are loaded; the pass's
    simulation reuses them."""
    from pathlib import Path

    from controller.api import load_documents
    from controller.disruption.preview import plan

    calls: dict[str, int] = {}
    convert = inputs.scheduling_pod

    def counting(raw, *args, **kwargs):
        key = inputs.pod_key(raw)
        calls[key] = calls.get(key, 0) + 1
        return convert(raw, *args, **kwargs)

    monkeypatch.setattr(inputs, "scheduling_pod", counting)
    examples = Path(__file__).resolve().parents[2] / "examples" / "disruption" / "cluster.yaml"
    result = plan(load_documents([str(examples)]), now=1767582000.0)
    assert calls and max(calls.values()) == 1, {k: n for k, n in calls.items() if n > 1}
    assert result.pass_ is not None


def test_simulate_names_the_file_of_an_unreadable_bound_pod():
    bound = """
---
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "4"}, capacity: {cpu: "4"}}
---
apiVersion: v1
kind: Pod
metadata: {name: odd, namespace: default}
spec: {nodeName: n1, containers: [{name: c}], topologySpreadConstraints: [{maxSkew: 1}]}
"""
    with pytest.raises(SimulationError, match=r"^nodes\.yaml: Pod/default/odd: "):
        simulate_documents(parse_documents(POOL + bound + PENDING, "nodes.yaml"), catalog="benchmark")
