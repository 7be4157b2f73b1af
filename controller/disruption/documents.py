"""A disruption Snapshot from Kubernetes documents, for `karpy disruption` (the offline twin of the controller's).

Reads what `karpy simulate` reads plus NodeClaims and PodDisruptionBudgets, e.g. the output of
`kubectl get nodes,pods,nodeclaims,nodepools,ec2nodeclasses,pdb -A -o yaml`. Documents are validated the way
simulate validates them (one line naming file and field); what is valid but keeps a NodeClaim from being a candidate
(its Node or NodePool missing, an instance type the catalog does not know, a Node without the labels a candidate
needs) is reported as Blocked rather than refused. The NodeClaims' Consolidatable condition is recomputed at `now`
with the controller's rule, and karpy's own drift checks fill Snapshot.drifted, so the pass decides as the controller
would at that moment.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from controller.api import conditions as C
from controller.api import labels as L
from controller.api import validate_document
from controller.api.documents import Document, short
from controller.api.kinds import KINDS
from controller.api.models import ec2nodeclass_from_manifest, nodepool_from_manifest
from controller.api.schema import apply_defaults
from controller.api.shapes import shape_errors
from controller.catalog.snapshot import Catalog, load_catalog
from controller.disruption.types import Blocked, Obj, Snapshot
from controller.provisioning import inputs
from controller.simulate.run import errors_message
from controller.simulate.workloads import WORKLOAD_KINDS, classify, nodeclass_instance_types, pool_not_ready
from controller.termination.drain import has_disrupted_taint

# the labels without which a Node cannot be a candidate (Karpenter reads them from the Node)
CANDIDATE_LABELS = (L.NODEPOOL, L.INSTANCE_TYPE, L.CAPACITY_TYPE, L.ZONE)
PROPOSABLE_KINDS = frozenset({"NodePool", "EC2NodeClass"})


class DisruptionInputError(ValueError):
    """Input `karpy disruption` cannot run on; the message names every document and field at fault."""


@dataclass
class DisruptionInput:
    """The Snapshot a pass reads, with what the input itself keeps from being candidates and notes for the reader.

    `nodepools` and `nodeclasses` are the defaulted manifests by name (the proposed ones after `propose`);
    `documents` are the cluster's documents other than NodePools and EC2NodeClasses, kept so a proposal can be
    assembled again over them."""

    snapshot: Snapshot
    catalog: Catalog
    blocked: list[Blocked] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    nodepools: dict[str, Obj] = field(default_factory=dict)
    nodeclasses: dict[str, Obj] = field(default_factory=dict)
    nodeclass_given: bool = False


def _validate(documents: list[Document]) -> None:
    errors = [str(e) for d in documents for e in validate_document(d)]
    errors += [e for d in documents for e in shape_errors(d)]
    errors += [e for d in documents if d.kind == "PodDisruptionBudget" for e in pdb_errors(d)]
    if errors:
        raise DisruptionInputError(errors_message(errors))


def _int_or_percent(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    if isinstance(value, str) and value.endswith("%"):
        return value[:-1].isdigit()
    return isinstance(value, str) and value.isdigit()


def pdb_errors(doc: Document) -> list[str]:
    """What is wrong with a PodDisruptionBudget's spec, as `file: document N Kind/name: field: message` lines."""
    spec = doc.raw.get("spec")
    if spec is None:
        return []  # selects nothing, allows everything (an empty PDB is valid in the API)
    if not isinstance(spec, dict):
        return [f"{doc.ref}: spec: must be an object, got {type(spec).__name__}"]
    out = []
    for key in ("minAvailable", "maxUnavailable"):
        if key in spec and spec[key] is not None and not _int_or_percent(spec[key]):
            out.append(f"{doc.ref}: spec.{key}: must be a non-negative integer or a percentage, got "
                       f"{short(spec[key])}")
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        out.append(f"{doc.ref}: spec: minAvailable and maxUnavailable cannot both be set")
    selector = spec.get("selector")
    if selector is not None:
        if not isinstance(selector, dict):
            out.append(f"{doc.ref}: spec.selector: must be a label selector (an object), got "
                       f"{type(selector).__name__}")
        else:
            labels = selector.get("matchLabels")
            if labels is not None and (not isinstance(labels, dict)
                                       or not all(isinstance(v, str) for v in labels.values())):
                out.append(f"{doc.ref}: spec.selector.matchLabels: must map label keys to strings")
            exprs = selector.get("matchExpressions")
            if exprs is not None:
                if not isinstance(exprs, list):
                    out.append(f"{doc.ref}: spec.selector.matchExpressions: must be a list")
                else:
                    for i, e in enumerate(exprs):
                        ok = isinstance(e, dict) and isinstance(e.get("key"), str) and e.get("operator") in (
                            "In", "NotIn", "Exists", "DoesNotExist")
                        if not ok:
                            out.append(f"{doc.ref}: spec.selector.matchExpressions[{i}]: needs a key and an "
                                       "operator In, NotIn, Exists or DoesNotExist")
    return out


def _scaled(value: Any, total: int) -> int:
    """An int-or-percent PDB field against `total` pods, percentages rounded up (as the disruption controller does)."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def _healthy(pod: Obj) -> bool:
    """Ready as the disruption controller counts it; a pod without status (a manifest) is taken as running."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status")
    if not status:
        return True
    return C.is_true(status, "Ready")


def pdb_status(pdb: Obj, pods: list[Obj]) -> dict[str, int]:
    """The status the disruption controller would give a PodDisruptionBudget over these pods: expectedPods,
    currentHealthy, desiredHealthy and disruptionsAllowed (the expected count is the matching pods: the
    workloads' scale is not in a snapshot). Called for a PDB given without status, e.g. a manifest from git."""
    from controller.scheduling.pod import LabelSelector, PodError, _selector

    spec = pdb.get("spec") or {}
    meta = pdb.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    raw = spec.get("selector")
    try:  # no selector selects nothing
        selector = _selector(raw, "spec.selector")
    except PodError:
        selector = LabelSelector(nothing=True)  # refused by pdb_errors before it gets here
    if raw == {} and str(pdb.get("apiVersion")) != "policy/v1":
        selector = LabelSelector(nothing=True)  # an empty selector: every pod of the namespace in policy/v1 only
    matched = [p for p in pods if ((p.get("metadata") or {}).get("namespace") or "default") == namespace
               and selector.matches({str(k): str(v) for k, v in ((p.get("metadata") or {}).get("labels")
                                                                  or {}).items()})
               and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    expected = len(matched)
    healthy = sum(1 for p in matched if _healthy(p))
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    elif spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    else:
        desired = 0
    return {"expectedPods": expected, "currentHealthy": healthy, "desiredHealthy": desired,
            "disruptionsAllowed": max(0, healthy - desired)}


def name_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def labels_of(obj: Obj) -> dict[str, str]:
    return {str(k): str(v) for k, v in ((obj.get("metadata") or {}).get("labels") or {}).items()}


def parse_now(text: str) -> float:
    """An RFC 3339 time with its offset (`2024-05-01T12:00:00Z`, `...+02:00`) as epoch seconds; ValueError says the
    expected form."""
    import datetime as dt

    try:
        value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        value = None
    if value is None or value.tzinfo is None or "T" not in text.upper():
        raise ValueError(f"{short(text)} is not an RFC 3339 time with an offset (e.g. 2024-05-01T12:00:00Z)")
    return value.timestamp()


def load(documents: list[Document], catalog: str = "aws-us-east-1", now: float | None = None) -> DisruptionInput:
    """The Snapshot of these documents at `now` (default: the current time) against a catalog (bundled name or
    snapshot file). DisruptionInputError names every invalid document and field."""
    _validate(documents)
    try:
        cat = load_catalog(catalog)
    except ValueError as e:
        raise DisruptionInputError(str(e)) from None
    notes: list[str] = []
    cluster_docs: list[Document] = []
    claims: list[Obj] = []
    pdbs: list[Obj] = []
    pools: dict[str, Obj] = {}
    classes: dict[str, Obj] = {}
    workloads = 0
    for doc in documents:
        if doc.kind == "NodeClaim":
            claims.append(_parsed(doc))
        elif doc.kind == "PodDisruptionBudget":
            pdbs.append(doc.raw)
        elif doc.kind == "NodePool":
            pools[doc.name] = _parsed(doc)
        elif doc.kind == "EC2NodeClass":
            classes[doc.name] = _parsed(doc)
        elif doc.kind in WORKLOAD_KINDS:
            workloads += 1  # a snapshot's Pods are the workloads' pods; expanding them again would count them twice
        else:
            cluster_docs.append(doc)
    if workloads:
        notes.append(f"{workloads} workload(s) (Deployments, StatefulSets, ...) not expanded: disruption reads the "
                     "Pods they run (give `kubectl get pods -A -o yaml`)")
    try:
        sim = classify(cluster_docs)
    except inputs.InputError as e:
        raise DisruptionInputError(str(e)) from None
    notes += sim.notes
    pods: list[Obj] = []
    for node_doc in sim.nodes:
        try:
            inputs.existing_node(node_doc.raw, [])
        except inputs.InputError as e:
            raise DisruptionInputError(f"{node_doc.source}: {e}") from None
    for bound in sim.bound_pods.values():
        pods.extend(bound)
    pods.extend(sim.pending_pods)
    pod_source = {id(p): ref for p, ref in zip(sim.pending_pods, sim.pending_refs, strict=True)}
    converted = {}  # read once here; the passes reuse them
    for p in pods:
        try:
            converted[inputs.pod_key(p)] = inputs.scheduling_pod(p, sim.volumes, sim.namespaces)
        except inputs.InputError as e:
            where = pod_source.get(id(p))
            raise DisruptionInputError(f"{where}: {e}" if where else str(e)) from None
    daemonsets = [d.raw for d in sim.daemonsets]
    for d in daemonsets:
        try:
            inputs.daemonset_pod(d)
        except inputs.InputError as e:
            raise DisruptionInputError(str(e)) from None
    computed = 0
    for i, pdb in enumerate(pdbs):
        if not isinstance(pdb.get("status"), dict) or "disruptionsAllowed" not in pdb["status"]:
            pdbs[i] = {**pdb, "status": pdb_status(pdb, pods)}
            computed += 1
    if computed:
        notes.append(f"{computed} PodDisruptionBudget(s) without status: disruptionsAllowed computed from the pods "
                     "they select, as the disruption controller would")
    snapshot = Snapshot(now=time.time() if now is None else now, nodeclaims=claims,
                        nodes=[d.raw for d in sim.nodes], pods=pods, pdbs=pdbs, daemonsets=daemonsets,
                        volumes=sim.volumes, namespace_labels=sim.namespaces, converted=converted)
    out = DisruptionInput(snapshot=snapshot, catalog=cat, notes=notes, nodeclass_given=bool(classes))
    if not classes and pools:
        out.notes.append("no EC2NodeClass given: NodePools are assumed ready, with default kubelet settings")
    if not pools:
        out.notes.append("no NodePool given: no NodeClaim can be a candidate")
    unclaimed = _unclaimed_nodes(snapshot)
    if unclaimed:
        out.notes.append(f"{unclaimed} Node(s) without a NodeClaim: capacity for moved pods, never candidates")
    _assemble(out, pools, classes)
    return out


def _parsed(doc: Document) -> Obj:
    """A validated Karpenter document with the schema's defaults filled in, as the apiserver stores it (validated
    once, above; leaves are shared with the input, which is never changed: _assemble works on copies)."""
    return dict(apply_defaults(doc.raw, KINDS[(doc.api_version, doc.kind)]))


def _unclaimed_nodes(snapshot: Snapshot) -> int:
    claimed = {str((c.get("status") or {}).get("nodeName") or "") for c in snapshot.nodeclaims}
    ids = {str((c.get("status") or {}).get("providerID") or "") for c in snapshot.nodeclaims}
    return sum(1 for n in snapshot.nodes
               if name_of(n) not in claimed and str((n.get("spec") or {}).get("providerID") or "") not in ids)


def propose(base: DisruptionInput, documents: list[Document]) -> DisruptionInput:
    """The same cluster with proposed NodePools and EC2NodeClasses in place of the snapshot's (by name; new names
    are added): the input of the drift preview. Documents of other kinds are noted and left out."""
    _validate(documents)
    pools = dict(base.nodepools)
    classes = dict(base.nodeclasses)
    notes: list[str] = []
    others: dict[str, int] = {}
    for doc in documents:
        if doc.kind == "NodePool":
            pools[doc.name] = _parsed(doc)
        elif doc.kind == "EC2NodeClass":
            classes[doc.name] = _parsed(doc)
        else:
            others[doc.kind] = others.get(doc.kind, 0) + 1
    if others:  # what `karpy render` prints besides the pools (CRDs, RBAC, the Deployment...)
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(others.items()))
        notes.append(f"--apply reads only NodePools and EC2NodeClasses; left out: {kinds}")
    if not any(d.kind in PROPOSABLE_KINDS for d in documents):
        raise DisruptionInputError("--apply: no NodePool or EC2NodeClass in the proposed files")
    snap = base.snapshot
    claims = [c for c in snap.nodeclaims]
    out = DisruptionInput(snapshot=Snapshot(now=snap.now, nodeclaims=claims, nodes=snap.nodes, pods=snap.pods,
                                            pdbs=snap.pdbs, daemonsets=snap.daemonsets, volumes=snap.volumes,
                                            namespace_labels=snap.namespace_labels, converted=snap.converted,
                                            disrupting=set(snap.disrupting)),
                          catalog=base.catalog, notes=[*base.notes, *notes],
                          nodeclass_given=base.nodeclass_given or bool(classes))
    _assemble(out, pools, classes)
    return out


def _assemble(out: DisruptionInput, pools: dict[str, Obj], classes: dict[str, Obj]) -> None:
    """Fill what depends on the NodePools and NodeClasses: each pool's instance types and readiness, the
    NodeClaims' recomputed Consolidatable condition, drift, what is already being disrupted, and the input's
    blocks."""
    from controller.cloud.drift import nodeclass_drift
    from controller.nodeclaim.disruption import consolidatable, drift_reason

    snap = out.snapshot
    out.nodepools, out.nodeclasses = pools, classes
    snap.nodepools = list(pools.values())
    snap.nodeclasses = dict(classes)
    snap.instance_types = {}
    snap.nodepool_not_ready = {}
    from controller.disruption.budgets import budget_errors

    budget_notes = []
    typed_classes = {name: ec2nodeclass_from_manifest(nc, name) for name, nc in classes.items()}
    for name, pool in pools.items():
        budget_notes += [f"NodePool {name}: {e} (the pool disrupts nothing until it is fixed: budgets fail closed)"
                         for e in budget_errors(pool, snap.now)]
        ref = str((((pool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef", {})
                  .get("name", ""))
        typed = nodepool_from_manifest(pool, name)
        snap.instance_types[name] = nodeclass_instance_types(out.catalog, typed_classes.get(ref))
        why = pool_not_ready(typed, typed_classes if out.nodeclass_given else None)
        if why:
            snap.nodepool_not_ready[name] = why
    nodes = {name_of(n): n for n in snap.nodes}
    by_provider = {str((n.get("spec") or {}).get("providerID")): n for n in snap.nodes
                   if (n.get("spec") or {}).get("providerID")}
    known_types = {it.name for it in out.catalog.instance_types}
    out.blocked = []
    snap.drifted = {}
    claims = []
    for raw in snap.nodeclaims:
        # only the status conditions are written (Consolidatable): copy down to that list, share the rest
        status = dict(raw["status"]) if isinstance(raw.get("status"), dict) else {}
        conditions = status.get("conditions")
        status["conditions"] = [c for c in conditions if isinstance(c, dict)] if isinstance(conditions, list) else []
        claim = {**raw, "status": status}
        claims.append(claim)
        name = name_of(claim)
        node_name = str(status.get("nodeName") or "")
        node = nodes.get(node_name) or by_provider.get(str(status.get("providerID") or ""))
        pool_name = labels_of(claim).get(L.NODEPOOL) or (labels_of(node).get(L.NODEPOOL) if node else None)
        nodepool = pools.get(pool_name or "")
        reason = _input_block(claim, node, node_name, pool_name, nodepool, known_types, out.catalog.name)
        if reason:
            out.blocked.append(Blocked(nodeclaim=name, node=name_of(node) if node else node_name, reason=reason))
        if node is not None and has_disrupted_taint(node):
            snap.disrupting.add(name)  # a command of the controller already holds it (the disrupted taint)
        if nodepool is None:
            continue
        try:
            ok = consolidatable(claim, nodepool, snap.now)
            C.set_condition(status, "Consolidatable", bool(ok), now=snap.now)
            if C.is_true(status, "Drifted"):
                continue  # the controller's own finding stands (its reason is on the condition)
            # the core's reasons, then the EC2NodeClass's as far as a snapshot tells them (its static hash, the
            # image among its resolved AMIs; the instance's subnet and security groups are not in a snapshot)
            why = drift_reason(claim, nodepool, snap.instance_types.get(pool_name or "", [])) or nodeclass_drift(
                claim, classes.get(str((claim.get("spec") or {}).get("nodeClassRef", {}).get("name", ""))))
        except (ValueError, TypeError, KeyError, AttributeError) as e:  # a field the rules cannot read
            if not reason:
                out.blocked.append(Blocked(nodeclaim=name, node=node_name, reason=f"its disruption state cannot "
                                           f"be evaluated: {' '.join(str(e).split())[:200]}"))
            continue
        if why:
            snap.drifted[name] = why
    snap.nodeclaims = claims
    out.notes = [n for n in out.notes if not n.startswith("NodePool ") or "budgets fail closed" not in n]
    out.notes += budget_notes


def _input_block(claim: Obj, node: Obj | None, node_name: str, pool_name: str | None, pool: Obj | None,
                 known_types: set[str], catalog: str) -> str:
    """Why the input keeps this NodeClaim from being a candidate ("" when nothing does)."""
    if (claim.get("metadata") or {}).get("deletionTimestamp"):
        return ""  # being deleted: the pass counts it against budgets and says so itself
    if node is None:
        if node_name:
            return f'its Node "{node_name}" is not in the input'
        return ""  # not registered yet: in flight, the pass treats it as such
    if not pool_name:
        return f"its Node has no {L.NODEPOOL} label"
    if pool is None:
        return f'NodePool "{pool_name}" is not in the input'
    labels = labels_of(node)
    missing = [k for k in CANDIDATE_LABELS if not labels.get(k)]
    if missing:
        return f"its Node lacks the label(s) {', '.join(missing)}"
    it = labels[L.INSTANCE_TYPE]
    if it not in known_types:
        return f'instance type "{it}" is not in catalog {catalog} (no price for it)'
    return ""
