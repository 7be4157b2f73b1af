"""Pods as the scheduler sees them: effective requests and scheduling constraints, read once from the manifest.

Pods with the same requests, labels and constraints share a `class_key`, so a ReplicaSet's pods are placed in bulk.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.api.labels import HOSTNAME
from controller.api.quantity import PODS, QuantityError, to_canonical
from controller.api.taints import Toleration, toleration_from_dict
from controller.scheduling.requirements import Requirement, Requirements

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes label selector (matchLabels and matchExpressions). An empty selector matches every pod; a
    missing one (`nothing`) matches none, as Kubernetes reads a null labelSelector in affinity and spread terms."""

    expressions: tuple[tuple[str, str, frozenset[str]], ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether labels satisfy every expression."""
        if self.nothing:
            return False
        for key, op, values in self.expressions:
            present = key in labels
            if op == "In" and (not present or labels[key] not in values):
                return False
            if op == "NotIn" and present and labels[key] in values:
                return False
            if op == "Exists" and not present:
                return False
            if op == "DoesNotExist" and present:
                return False
        return True


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A topology spread constraint."""

    max_skew: int
    topology_key: str
    hard: bool  # whenUnsatisfiable: DoNotSchedule
    selector: LabelSelector
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"  # count only nodes meeting the pod's required node affinity (the default)
    node_taints_policy: str = "Ignore"  # count nodes whatever their taints (Kubernetes' default)


# In a term's namespaces: every namespace (an empty namespaceSelector). No namespace can be named "*".
ALL_NAMESPACES = "*"


def in_namespaces(namespace: str, namespaces: frozenset[str]) -> bool:
    """Whether a namespace is one of a term's namespaces (which may be all of them)."""
    return namespace in namespaces or ALL_NAMESPACES in namespaces


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A pod (anti-)affinity term: pods matching selector in namespaces, within topology_key."""

    selector: LabelSelector
    topology_key: str
    namespaces: frozenset[str]

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether a pod with this namespace and labels is one the term refers to."""
        return in_namespaces(namespace, self.namespaces) and self.selector.matches(labels)


class ClassKey:
    """A pod class's identity: what makes two pods interchangeable to the scheduler. Interned, so the pods of one
    class share one object, whose hash is computed once: the scheduler looks classes up at every step, and hashing
    or comparing the underlying tuple of constraints each time cost a tenth of a large solve."""

    __slots__ = ("__weakref__", "_hash", "items")

    def __init__(self, items: tuple[object, ...]) -> None:
        self.items = items
        self._hash = hash(items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, ClassKey):
            return NotImplemented
        return self._hash == other._hash and self.items == other.items

    def __repr__(self) -> str:
        return f"ClassKey{self.items!r}"


# the class keys of live pods (an entry goes with the last pod that holds it)
_CLASS_KEYS: weakref.WeakValueDictionary[tuple[object, ...], ClassKey] = weakref.WeakValueDictionary()


def class_key(items: tuple[object, ...]) -> ClassKey:
    """The interned class key for these constraints."""
    key = _CLASS_KEYS.get(items)
    if key is None:
        key = _CLASS_KEYS[items] = ClassKey(items)
    return key


@dataclass(slots=True)
class Pod:
    """One pod to place (or already placed, on an existing node)."""

    namespace: str
    name: str
    labels: dict[str, str]
    requests: dict[str, int]
    uid: str = ""
    node_terms: tuple[Requirements, ...] = ()  # OR of terms, nodeSelector folded into each
    # alternatives the pod's volumes allow (any one will do): where its node may be, but, as in Karpenter, not part
    # of the node affinity its topology spread counts with
    volume_terms: tuple[Requirements, ...] = ()
    preferred_node: tuple[tuple[int, Requirements], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    affinity: tuple[AffinityTerm, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[tuple[int, AffinityTerm], ...] = ()
    preferred_anti_affinity: tuple[tuple[int, AffinityTerm], ...] = ()
    host_ports: frozenset[tuple[str, str, int]] = frozenset()
    owner: str = ""
    class_key: Any = field(default=None)

    @property
    def key(self) -> str:
        """namespace/name."""
        return f"{self.namespace}/{self.name}"

    def __post_init__(self) -> None:
        if self.class_key is None:
            self.class_key = class_key((
                self.namespace, tuple(sorted(self.labels.items())), tuple(sorted(self.requests.items())),
                tuple(repr(t) for t in self.node_terms), tuple(repr(t) for t in self.volume_terms),
                repr(self.preferred_node), self.tolerations, self.spread,
                self.affinity, self.anti_affinity, self.preferred_affinity, self.preferred_anti_affinity,
                self.host_ports))


class PodError(ValueError):
    """A pod manifest the scheduler cannot read, naming the field."""


def _selector(raw: Any, path: str) -> LabelSelector:
    if raw is None:
        return LabelSelector(nothing=True)
    if not isinstance(raw, dict):
        raise PodError(f"{path}: must be a label selector object")
    exprs: list[tuple[str, str, frozenset[str]]] = [
        (str(k), "In", frozenset([str(v)])) for k, v in (raw.get("matchLabels") or {}).items()]
    for i, e in enumerate(raw.get("matchExpressions") or []):
        op = e.get("operator")
        if op not in SELECTOR_OPERATORS:
            raise PodError(f"{path}.matchExpressions[{i}].operator: {op!r} is not one of "
                           f"{', '.join(SELECTOR_OPERATORS)}")
        exprs.append((str(e.get("key")), op, frozenset(str(v) for v in e.get("values") or [])))
    return LabelSelector(tuple(exprs))


def label_selector(raw: Any, path: str) -> LabelSelector:
    """A label selector object (None: one that matches nothing); a malformed one raises PodError naming `path`."""
    return _selector(raw, path)


def _resources(raw: Any, path: str) -> dict[str, int]:
    if not raw:
        return {}
    if not isinstance(raw, dict):
        raise PodError(f"{path}: must be a map of resource quantities")
    out = {}
    for name, value in raw.items():
        try:
            out[str(name)] = to_canonical(str(name), value)
        except QuantityError:
            raise PodError(f"{path}.{name}: {value!r} is not a quantity") from None
    return out


def _container_requests(c: dict[str, Any], path: str) -> dict[str, int]:
    res = c.get("resources") or {}
    requests = _resources(res.get("requests"), f"{path}.resources.requests")
    # Kubernetes defaults requests to limits when only limits are set
    for name, amount in _resources(res.get("limits"), f"{path}.resources.limits").items():
        requests.setdefault(name, amount)
    return requests


def _acc(into: dict[str, int], add: dict[str, int]) -> None:
    for k, v in add.items():
        into[k] = into.get(k, 0) + v


def effective_requests(spec: dict[str, Any]) -> dict[str, int]:
    """Requests as the scheduler counts them: max(app containers + sidecars, the largest init step) + overhead."""
    running: dict[str, int] = {}
    for i, c in enumerate(spec.get("containers") or []):
        _acc(running, _container_requests(c, f"spec.containers[{i}]"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, c in enumerate(spec.get("initContainers") or []):
        req = _container_requests(c, f"spec.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            _acc(sidecars, req)
            step = dict(sidecars)
        else:
            step = dict(sidecars)
            _acc(step, req)
        for k, v in step.items():
            init_peak[k] = max(init_peak.get(k, 0), v)
    _acc(running, sidecars)
    out = {k: max(running.get(k, 0), init_peak.get(k, 0)) for k in set(running) | set(init_peak)}
    _acc(out, _resources(spec.get("overhead"), "spec.overhead"))
    out[PODS] = 1
    return {k: v for k, v in out.items() if v > 0}


def _node_requirements(items: Any, path: str) -> Requirements:
    if not isinstance(items, list):
        raise PodError(f"{path}: must be a list")
    try:
        return Requirements.from_node_selector_requirements(items)
    except (KeyError, ValueError) as e:
        raise PodError(f"{path}: {e}") from None


def term_namespaces(term: Mapping[str, Any], namespace: str,
                    namespace_labels: Mapping[str, Mapping[str, str]] | None, path: str) -> frozenset[str]:
    """The namespaces an affinity term refers to, as Kubernetes (and Karpenter) resolve them: the pod's own when the
    term names none and has no namespaceSelector; else the named ones plus those the selector matches, an empty
    selector matching every namespace. A selector is matched against `namespace_labels` (no namespaces known: none
    match)."""
    names = term.get("namespaces") or []
    if not isinstance(names, list):
        raise PodError(f"{path}.namespaces: must be a list of namespace names")
    raw = term.get("namespaceSelector")
    if raw is None:
        return frozenset(str(n) for n in names) or frozenset([namespace])
    if not isinstance(raw, dict):
        raise PodError(f"{path}.namespaceSelector: must be a label selector object")
    if not raw.get("matchLabels") and not raw.get("matchExpressions"):
        return frozenset([ALL_NAMESPACES])
    selector = _selector(raw, f"{path}.namespaceSelector")
    selected = {ns for ns, labels in (namespace_labels or {}).items() if selector.matches(labels)}
    return frozenset(selected | {str(n) for n in names})


def _affinity_terms(items: Any, namespace: str, path: str,
                    namespace_labels: Mapping[str, Mapping[str, str]] | None = None) -> list[AffinityTerm]:
    out = []
    for i, t in enumerate(items or []):
        if not t.get("topologyKey"):
            raise PodError(f"{path}[{i}].topologyKey: required")
        namespaces = term_namespaces(t, namespace, namespace_labels, f"{path}[{i}]")
        out.append(AffinityTerm(_selector(t.get("labelSelector"), f"{path}[{i}].labelSelector"), str(t["topologyKey"]),
                                namespaces))
    return out


def pod_from_dict(d: dict[str, Any], namespace_labels: Mapping[str, Mapping[str, str]] | None = None) -> Pod:
    """Read a Pod manifest into the scheduler's Pod; bad fields raise PodError naming them. `namespace_labels` (every
    namespace's labels, by name) resolves the namespaceSelectors of pod affinity terms."""
    meta = d.get("metadata") or {}
    spec = d.get("spec")
    if not isinstance(spec, dict):
        raise PodError("spec: required")
    namespace = str(meta.get("namespace") or "default")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    node_selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    base = Requirements.from_labels(node_selector)
    affinity = spec.get("affinity") or {}
    node_aff = affinity.get("nodeAffinity") or {}
    required = (node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    terms = tuple(
        base.intersect(_node_requirements(t.get("matchExpressions") or [],
                                          f"spec.affinity.nodeAffinity.required.nodeSelectorTerms[{i}].matchExpressions"))
        for i, t in enumerate(required)) or ((base,) if len(base) else ())
    preferred = tuple(
        (int(p.get("weight", 1)), _node_requirements((p.get("preference") or {}).get("matchExpressions") or [],
                                                     f"spec.affinity.nodeAffinity.preferred[{i}].preference"))
        for i, p in enumerate(node_aff.get("preferredDuringSchedulingIgnoredDuringExecution") or []))
    tolerations = tuple(toleration_from_dict(t) for t in spec.get("tolerations") or [])
    spread = []
    for i, c in enumerate(spec.get("topologySpreadConstraints") or []):
        path = f"spec.topologySpreadConstraints[{i}]"
        if not c.get("topologyKey"):
            raise PodError(f"{path}.topologyKey: required")
        skew = c.get("maxSkew", 1)
        if not isinstance(skew, int) or skew < 1:
            raise PodError(f"{path}.maxSkew: must be an integer >= 1, got {skew!r}")
        when = c.get("whenUnsatisfiable", "DoNotSchedule")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise PodError(f"{path}.whenUnsatisfiable: {when!r} is not DoNotSchedule or ScheduleAnyway")
        selector = _selector(c.get("labelSelector"), f"{path}.labelSelector")
        if selector.nothing:
            continue  # counts no pod, so the skew is always 0: Kubernetes never rejects a node for it
        policies = []
        for name in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            value = c.get(name) or ("Honor" if name == "nodeAffinityPolicy" else "Ignore")
            if value not in ("Honor", "Ignore"):
                raise PodError(f"{path}.{name}: {str(value)[:64]!r} is not Honor or Ignore")
            policies.append(str(value))
        keys = c.get("matchLabelKeys") or []
        if not isinstance(keys, list):
            raise PodError(f"{path}.matchLabelKeys: must be a list of label keys")
        # matchLabelKeys: the pod's own values of those labels narrow the selector (keys it lacks are ignored)
        extra = tuple((str(k), "In", frozenset([labels[str(k)]])) for k in keys if str(k) in labels)
        if extra:
            selector = LabelSelector(selector.expressions + extra)
        spread.append(SpreadConstraint(skew, str(c["topologyKey"]), when == "DoNotSchedule", selector,
                                       c.get("minDomains"), policies[0], policies[1]))
    pod_aff = affinity.get("podAffinity") or {}
    pod_anti = affinity.get("podAntiAffinity") or {}
    rq = "requiredDuringSchedulingIgnoredDuringExecution"
    pf = "preferredDuringSchedulingIgnoredDuringExecution"

    def preferred_terms(items: Any, path: str) -> tuple[tuple[int, AffinityTerm], ...]:
        return tuple((int(p.get("weight", 1)), term) for p, term in zip(
            items or [], _affinity_terms([p.get("podAffinityTerm") or {} for p in items or []], namespace, path,
                                         namespace_labels), strict=True))

    ports = set()
    for i, c in enumerate(spec.get("containers") or []):
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                ports.add((str(port.get("protocol") or "TCP"), str(port.get("hostIP") or "0.0.0.0"),
                           int(port["hostPort"])))
        if not isinstance(c, dict):
            raise PodError(f"spec.containers[{i}]: must be an object")
    refs = meta.get("ownerReferences") or []
    owner = next((f"{r.get('kind')}/{r.get('name')}" for r in refs if r.get("controller")), "")
    return Pod(namespace=namespace, name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""), labels=labels,
               requests=effective_requests(spec), node_terms=terms, preferred_node=preferred,
               tolerations=tolerations, spread=tuple(spread),
               affinity=tuple(_affinity_terms(pod_aff.get(rq), namespace, "spec.affinity.podAffinity.required",
                                              namespace_labels)),
               anti_affinity=tuple(_affinity_terms(pod_anti.get(rq), namespace,
                                                   "spec.affinity.podAntiAffinity.required", namespace_labels)),
               preferred_affinity=preferred_terms(pod_aff.get(pf), "spec.affinity.podAffinity.preferred"),
               preferred_anti_affinity=preferred_terms(pod_anti.get(pf), "spec.affinity.podAntiAffinity.preferred"),
               host_ports=frozenset(ports), owner=owner)


def hostname_requirement(name: str) -> Requirement:
    """kubernetes.io/hostname In [name]."""
    return Requirement(HOSTNAME, False, frozenset([name]))
