"""Topology: pod counts per domain for topology spread and pod (anti-)affinity, and the domains a pod may go to
(Karpenter's scheduling.Topology, TopologyGroup and TopologyDomainGroup).

A TopologyGroup counts the pods one selector matches (within namespaces, on nodes its node filter accepts) per value
of one topology key. `counts` holds pods whose domain is decided; `possible` also counts a pod on a NodeClaim whose
domain is not decided yet in every domain that NodeClaim could still take, which is what anti-affinity must avoid
(Karpenter records anti-affinity that way). Hostname groups also count per bin, so one vector test rules out every
node a pod's hostname constraints forbid. Inverse groups hold the required anti-affinity terms of pods already placed
or bound, so a new pod they select keeps out of their domains.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from controller.api import labels as L
from controller.scheduling.instancetypes import CAPACITY_TYPES, OFFERING_KEYS, InstanceTypeIndex, fit_count
from controller.scheduling.nodeclaim import Bin
from controller.scheduling.pod import AffinityTerm, LabelSelector, Pod, SpreadConstraint, Toleration, in_namespaces
from controller.scheduling.preferences import View
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.types import ExistingNode, untolerated

UNBOUNDED = 1 << 30
MAX_OPTIONS = 32  # domain combinations tried per placement when several constraints each offer several domains


def _some_domain(r: Requirement | None) -> bool:
    """Whether a requirement on a topology key still allows some domain (an empty In set is no domain here)."""
    return r is None or r.complement or bool(r.values)


@dataclass(frozen=True)
class NodeFilter:
    """Which nodes a spread constraint counts (Kubernetes' nodeAffinityPolicy and nodeTaintsPolicy): with Honor,
    only nodes that meet the pod's required node affinity / whose taints the pod tolerates."""

    terms: tuple[Requirements, ...]  # empty: every node
    tolerations: tuple[Toleration, ...] | None  # None: taints ignored

    @property
    def key(self) -> tuple[object, ...]:
        """A hashable identity (Requirements compare by identity)."""
        return tuple(repr(t) for t in self.terms), self.tolerations

    def matches(self, b: Bin) -> bool:
        """Whether bin b's node counts."""
        if self.terms and all(b.incompatibility(t) is not None for t in self.terms):
            return False
        return self.tolerations is None or untolerated(b.taints, self.tolerations) is None


def node_filter(pod: Pod, c: SpreadConstraint) -> NodeFilter | None:
    """The node filter of pod's spread constraint c (None when it accepts every node)."""
    terms = pod.node_terms if c.node_affinity_policy == "Honor" else ()
    tolerations = pod.tolerations if c.node_taints_policy == "Honor" else None
    if not terms and tolerations is None:
        return None
    return NodeFilter(tuple(terms), tolerations)


@dataclass
class TopologyGroup:
    """Pods that some topology constraint counts: selector within namespaces, by topology key."""

    namespaces: frozenset[str]
    selector: LabelSelector
    key: str
    filter: NodeFilter | None = None
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    possible: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    by_bin: np.ndarray = field(default_factory=lambda: np.zeros(64, dtype=np.int64))  # hostname groups, per bin

    def matches(self, pod: Pod) -> bool:
        """Whether the group counts this pod."""
        return in_namespaces(pod.namespace, self.namespaces) and self.selector.matches(pod.labels)

    def per_bin(self, n: int) -> np.ndarray:
        """Counts of the first n bins (hostname groups), as a view: read, never write. The array grows (doubling)
        rather than being padded on every call, as the bins outnumber the ones counted so far."""
        a = self.by_bin
        if len(a) < n:
            a = self.by_bin = np.concatenate([a, np.zeros(max(n, 2 * len(a)) - len(a), dtype=a.dtype)])
        return a[:n]


@dataclass
class InverseGroup:
    """A required anti-affinity term held by pods already placed or bound, and the domains those pods may be in."""

    term: AffinityTerm
    possible: dict[str, int] = field(default_factory=lambda: defaultdict(int))


@dataclass
class _SpreadState:
    """A spread constraint's group and domains under one required node-affinity term, as of `seen` counted domains."""

    constraint: SpreadConstraint
    strict: Requirements
    group: TopologyGroup
    seen: int = -1
    domains: list[str] = field(default_factory=list)
    eligible: list[str] = field(default_factory=list)


class Topology:
    """The topology groups of one solve and the domains pods may take."""

    def __init__(self, indexes: list[InstanceTypeIndex], existing_nodes: list[ExistingNode]) -> None:
        self.indexes = indexes
        self.existing_nodes = existing_nodes
        self.groups: dict[tuple[object, ...], TopologyGroup] = {}
        self.inverse: dict[tuple[object, ...], InverseGroup] = {}
        self._universe: dict[tuple[object, ...], frozenset[str]] = {}
        self._matching: dict[object, list[TopologyGroup]] = {}  # per pod class: the groups that count its pods
        # requirements options() builds again and again, kept so that it hands out the same objects (whose
        # describe() and key() are cached) for the same domain: `key In [domain]`, and a view's term narrowed to it
        self._pins: dict[tuple[str, str], Requirement] = {}
        self._narrowed: dict[tuple[int, Requirement], tuple[Requirements, Requirements]] = {}
        self._spreads: dict[tuple[int, int], _SpreadState] = {}

    # ---- counting ----------------------------------------------------------------------------------------------
    def group(self, selector: LabelSelector, namespaces: frozenset[str], key: str,
              filt: NodeFilter | None = None) -> TopologyGroup:
        """The group for this selector, namespaces, key and node filter (created empty the first time)."""
        gk = (selector, namespaces, key, None if filt is None else filt.key)
        g = self.groups.get(gk)
        if g is None:
            g = self.groups[gk] = TopologyGroup(namespaces, selector, key, filt)
            self._matching.clear()
        return g

    def spread_group(self, pod: Pod, c: SpreadConstraint) -> TopologyGroup:
        """The group pod's spread constraint c counts in."""
        return self.group(c.selector, frozenset([pod.namespace]), c.topology_key, node_filter(pod, c))

    def register(self, pods: list[Pod]) -> None:
        """Create the groups the pods' spread constraints and (anti-)affinity terms count in."""
        seen: set[object] = set()
        for p in pods:
            if p.class_key in seen:
                continue  # a class's pods share their constraints and namespace
            seen.add(p.class_key)
            for c in p.spread:
                self.spread_group(p, c)
            for t in (*p.affinity, *p.anti_affinity, *(t for _, t in p.preferred_affinity),
                      *(t for _, t in p.preferred_anti_affinity)):
                self.group(t.selector, t.namespaces, t.topology_key)

    def count(self, b: Bin, pod: Pod, n: int = 1) -> None:
        """Count n pods like `pod` placed on bin b in every group that matches them, and record the required
        anti-affinity terms they hold (inverse groups) in every domain b may be in."""
        labels = b.labels()
        groups = self._matching.get(pod.class_key)
        if groups is None:
            groups = self._matching[pod.class_key] = [g for g in self.groups.values() if g.matches(pod)]
        for g in groups:
            if g.filter is not None and not g.filter.matches(b):
                continue
            domain = labels.get(g.key)
            if domain is not None:
                g.counts[domain] += n
                g.possible[domain] += n
            else:
                for d in b.possible(g.key):
                    g.possible[d] += n
            if g.key == L.HOSTNAME and b.position >= 0:
                if b.position >= len(g.by_bin):
                    grow = max(len(g.by_bin), b.position + 1 - len(g.by_bin))
                    g.by_bin = np.concatenate([g.by_bin, np.zeros(grow, dtype=np.int64)])
                g.by_bin[b.position] += n
        for t in pod.anti_affinity:
            if t.topology_key == L.HOSTNAME:
                continue  # per bin (Bin.anti_terms)
            ig = self.inverse.get((t.selector, t.namespaces, t.topology_key))
            if ig is None:
                ig = self.inverse[(t.selector, t.namespaces, t.topology_key)] = InverseGroup(t)
            domain = labels.get(t.topology_key)
            for d in ([domain] if domain is not None else b.possible(t.topology_key)):
                ig.possible[d] += n

    # ---- domains -----------------------------------------------------------------------------------------------
    def _pin(self, key: str, domain: str) -> Requirement:
        """`key In [domain]` (one shared object per key and domain)."""
        r = self._pins.get((key, domain))
        if r is None:
            r = self._pins[(key, domain)] = Requirement(key, False, frozenset([domain]))
        return r

    def _narrow(self, reqs: Requirements, r: Requirement) -> Requirements:
        """reqs narrowed by r; the same object each time for the same reqs object and r."""
        hit = self._narrowed.get((id(reqs), r))
        if hit is not None and hit[0] is reqs:
            return hit[1]
        out = reqs.intersect(Requirements([r]))
        self._narrowed[(id(reqs), r)] = (reqs, out)  # holding reqs keeps its id from being reused
        return out

    def compatible_pools(self, view: View, term: Requirements) -> list[InstanceTypeIndex]:
        """Pools that could take the pod at all: ready, taints tolerated, requirements compatible."""
        return [ix for ix in self.indexes if ix.admits(view.tolerations, term)]

    @staticmethod
    def pool_domains(ix: InstanceTypeIndex, key: str) -> set[str]:
        """The values of key a NodePool's nodes can have: its requirements' values, and its instance types' labels
        and offerings within them (Karpenter's topology domain groups)."""
        pool = ix.pool
        req = pool.requirements.get(key)
        out: set[str] = set()
        if key == L.ZONE:
            live = np.isfinite(ix.price).any(axis=(0, 2)) if len(ix.types) else np.zeros(0, dtype=bool)
            out = {z for i, z in enumerate(ix.zones) if i < len(live) and live[i]}
        elif key == L.CAPACITY_TYPE:
            live = np.isfinite(ix.price).any(axis=(0, 1)) if len(ix.types) else np.zeros(0, dtype=bool)
            out = {ct for i, ct in enumerate(CAPACITY_TYPES) if i < len(live) and live[i]}
        else:
            out = {v for v in ix.column(key).tolist() if v is not None}
        if req is not None:
            out = {d for d in out if req.has(d)}
            if not req.complement:
                out |= set(req.values)
        return out

    def universe(self, key: str, tolerations: tuple[Toleration, ...] | None,
                 affinity: Requirements | None = None) -> frozenset[str]:
        """Every domain of key (Karpenter's topology domain groups): from ready NodePools and existing nodes; only
        those whose taints `tolerations` tolerate, unless None, and only those that meet `affinity` (the pod's
        required node affinity, for nodeAffinityPolicy Honor), unless None."""
        ck = (key, tolerations, None if affinity is None else repr(affinity))
        hit = self._universe.get(ck)
        if hit is None:
            found: set[str] = set()
            for ix in self.indexes:
                if ix.pool.not_ready_reason:
                    continue
                if tolerations is not None and untolerated(ix.pool.taints, tolerations) is not None:
                    continue
                if affinity is not None and ix.pool.requirements.incompatibility(affinity) is not None:
                    continue
                found |= self.pool_domains(ix, key)
            for n in self.existing_nodes:
                if key not in n.labels or (tolerations is not None and untolerated(n.taints, tolerations) is not None):
                    continue
                if affinity is not None and Requirements.from_labels(n.labels).incompatibility(
                        affinity, frozenset()) is not None:
                    continue
                found.add(n.labels[key])
            hit = self._universe[ck] = frozenset(found)
        return hit

    def _spread_domains(self, view: View, c: SpreadConstraint, g: TopologyGroup, strict: Requirements) -> list[str]:
        """The domains a spread constraint counts, as Kubernetes defines them: those of NodePools and nodes that
        meet the pod's required node affinity (nodeAffinityPolicy Honor, the default) and whose taints it tolerates
        (nodeTaintsPolicy Honor), plus domains already holding counted pods."""
        tolerations = view.pod.tolerations if c.node_taints_policy == "Honor" else None
        affinity = strict if c.node_affinity_policy == "Honor" else None
        found = set(self.universe(c.topology_key, tolerations, affinity))
        found.update(d for d, n in g.counts.items() if n > 0)
        return sorted(found)

    def _spread_state(self, view: View, c: SpreadConstraint, strict: Requirements) -> tuple[
            TopologyGroup, list[str], list[str]]:
        """Spread constraint c's group, its domains and those the pod's required node affinity (strict) allows.
        Kept per constraint and term until the group counts a new domain (a group's domains only ever grow)."""
        ck = (id(c), id(strict))
        st = self._spreads.get(ck)
        if st is None or st.constraint is not c or st.strict is not strict:  # holding both keeps their ids unique
            st = self._spreads[ck] = _SpreadState(c, strict, self.spread_group(view.pod, c))
        g = st.group
        if st.seen != len(g.counts):
            st.seen = len(g.counts)
            st.domains = self._spread_domains(view, c, g, strict)
            pod_domains = strict.get(c.topology_key) if c.node_affinity_policy == "Honor" else None
            st.eligible = [d for d in st.domains if pod_domains is None or pod_domains.has(d)]
        return g, st.domains, st.eligible

    def options(self, view: View, term: Requirements, strict: Requirements, req: np.ndarray) -> tuple[
            list[tuple[Requirements, int, int]], str]:
        """The ways the pod's topology constraints let it go right now: (requirements with a domain, most pods of
        the class per node, most pods of the class in all before the counts must be looked at again), best first;
        or no way and why.

        Spread: the domains whose count stays within maxSkew of the minimum (computed over the domains the pod's
        required node affinity allows: preferred node affinity never narrows them, as in Karpenter), fewest pods
        first, so a domain that cannot take the pod gives way to the next. Affinity: the domains holding a matching
        pod, or for a pod that matches its own term and finds none, the domains it can reach. Anti-affinity: the
        domains where no matching pod may be, including pods on NodeClaims whose domain is not decided yet, and the
        domains of pods whose own required anti-affinity selects this pod."""
        reqs = term
        cap = UNBOUNDED  # per node (hostname constraints)
        total = UNBOUNDED  # in all (zonal constraints whose counts the placement changes)
        proto = view.pod
        choices: list[list[tuple[Requirement, int]]] = []
        touched: set[str] = set()  # keys given a set of domains here: an empty set means no domain, not "absent"
        for ig in self.inverse.values():
            if ig.term.selects(proto.namespace, proto.labels):
                taken = frozenset(d for d, n in ig.possible.items() if n > 0)
                if taken:
                    reqs = reqs.intersect(Requirements([Requirement(ig.term.topology_key, True, taken)]))
        for t in view.anti_affinity:
            if t.topology_key == L.HOSTNAME:
                if t.selects(proto.namespace, proto.labels):
                    cap = 1
                continue
            g = self.group(t.selector, t.namespaces, t.topology_key)
            taken = frozenset(d for d, n in g.possible.items() if n > 0)
            free = self.universe(t.topology_key, view.tolerations) - taken
            if free:
                # only domains known to be empty: a NodeClaim keeps all of them open until it launches
                reqs = reqs.intersect(Requirements([Requirement(t.topology_key, False, free)]))
                touched.add(t.topology_key)
            elif t.topology_key in OFFERING_KEYS:
                return [], f"pod anti-affinity on {t.topology_key}: every domain may hold a matching pod"
            else:  # no free domain: only a node without the label (in no domain) can take the pod
                reqs = reqs.intersect(Requirements([Requirement(t.topology_key, False, frozenset())]))
            if t.selects(proto.namespace, proto.labels):
                total = 1  # the next one must see where this one may be
        for t in view.affinity:
            if t.topology_key == L.HOSTNAME:
                continue  # per bin, and when opening a NodeClaim
            g = self.group(t.selector, t.namespaces, t.topology_key)
            pod_domains = strict.get(t.topology_key)
            held = [d for d, n in g.counts.items() if n > 0 and (pod_domains is None or pod_domains.has(d))]
            if held:
                reqs = reqs.intersect(Requirements([Requirement(t.topology_key, False, frozenset(held))]))
                touched.add(t.topology_key)
            elif not t.selects(proto.namespace, proto.labels):
                return [], f"pod affinity on {t.topology_key}: no pod matches the selector"
            else:  # the first of a self-affine group: any domain it can reach
                reach = self._reachable(view, reqs, t.topology_key, req)
                if not reach:
                    return [], f"pod affinity on {t.topology_key}: no domain the pod can reach"
                choices.append([(self._pin(t.topology_key, d), UNBOUNDED) for d in reach])
        for c in view.spread:
            if c.topology_key == L.HOSTNAME:
                if c.selector.matches(proto.labels):
                    cap = min(cap, c.max_skew)
                continue
            g, domains, eligible = self._spread_state(view, c, strict)
            counts = {d: g.counts.get(d, 0) for d in domains}
            too_few = bool(c.min_domains) and len(eligible) < (c.min_domains or 0)
            low = 0 if too_few or not eligible else min(counts[d] for d in eligible)
            me = 1 if c.selector.matches(proto.labels) else 0
            allowed = reqs.get(c.topology_key)
            within = sorted((d for d in domains if (allowed is None or allowed.has(d))
                             and counts[d] + me - low <= c.max_skew), key=lambda d: (counts[d], d))
            if not within:
                if not [d for d in domains if allowed is None or allowed.has(d)]:
                    return [], f"topology spread on {c.topology_key}: no eligible domain"
                return [], f"topology spread on {c.topology_key} would exceed maxSkew {c.max_skew}"
            opts = []
            for d in within:
                if not me:
                    opts.append((self._pin(c.topology_key, d), UNBOUNDED))
                    continue
                # how many can go to d before the skew to the lowest other eligible domain passes maxSkew
                others = [counts[e] for e in eligible if e != d]
                floor = 0 if too_few else (min(others) if others else UNBOUNDED)
                opts.append((self._pin(c.topology_key, d), max(1, floor + c.max_skew - counts[d])))
            choices.append(opts)
        out = []
        for combo in itertools.islice(itertools.product(*choices), MAX_OPTIONS):
            r = reqs
            k = total
            keys = set(touched)
            for requirement, n in combo:
                r = self._narrow(r, requirement)
                k = min(k, n)
                keys.add(requirement.key)
            if all(_some_domain(r.get(key)) for key in keys):
                out.append((r, cap, k))
        if not out:
            return [], "the pod's topology constraints leave no domain"
        return out, ""

    def _reachable(self, view: View, reqs: Requirements, key: str, req: np.ndarray) -> list[str]:
        """Domains of key where the pod could open a node now (a compatible pool offers a type that holds it),
        or where an existing node could take it; in order."""
        found: set[str] = set()
        allowed = reqs.get(key)
        for ix in self.compatible_pools(view, reqs):
            for d in sorted(self.pool_domains(ix, key)):
                if d in found or (allowed is not None and not allowed.has(d)):
                    continue
                merged = ix.pool.requirements.intersect(reqs).intersect(
                    Requirements([Requirement(key, False, frozenset([d]))]))
                zm, cm = ix.offer_masks(merged)
                mask = ix.offered(ix.all_mask & ix.mask(merged), zm, cm)
                if mask.any() and fit_count(ix.free0[mask], req).max(initial=0) > 0:
                    found.add(d)
        for n in self.existing_nodes:
            if key in n.labels and (allowed is None or allowed.has(n.labels[key])):
                found.add(n.labels[key])
        return sorted(found)

    # ---- per bin -----------------------------------------------------------------------------------------------
    def hostname_room(self, view: View, room: np.ndarray, start: int) -> np.ndarray:
        """room (a mask over bins start..) narrowed to the bins the pod's hostname spread and anti-affinity still
        allow, by counts alone."""
        end = start + len(room)
        for c in view.spread:
            if c.topology_key == L.HOSTNAME:
                g = self.spread_group(view.pod, c)
                me = 1 if c.selector.matches(view.pod.labels) else 0
                room &= g.per_bin(end)[start:end] + me <= c.max_skew
        for t in view.anti_affinity:
            if t.topology_key == L.HOSTNAME:
                g = self.group(t.selector, t.namespaces, t.topology_key)
                room &= g.per_bin(end)[start:end] == 0
        return room

    def blocks(self, b: Bin, view: View) -> bool:
        """Whether host ports or hostname (anti-)affinity keep the pod off bin b."""
        pod = view.pod
        if view.host_ports & b.host_ports:
            return True
        for t in b.anti_terms:
            if t.topology_key == L.HOSTNAME and t.selects(pod.namespace, pod.labels):
                return True
        for t in view.anti_affinity:
            if t.topology_key == L.HOSTNAME and any(t.selects(p.namespace, p.labels) for p in b.pods):
                return True
        for t in view.affinity:
            if t.topology_key == L.HOSTNAME:
                here = any(t.selects(p.namespace, p.labels) for p in b.pods)
                if not here and not self.may_bootstrap(view, t):
                    return True
        return False

    def may_bootstrap(self, view: View, t: AffinityTerm) -> bool:
        """Whether a pod with hostname affinity term t may start its group on a node without a matching pod: only
        when it matches its own term and no matching pod is anywhere yet (Karpenter's nextDomainAffinity)."""
        if not t.selects(view.pod.namespace, view.pod.labels):
            return False
        g = self.group(t.selector, t.namespaces, t.topology_key)
        return not any(n > 0 for n in g.counts.values())

    def opens(self, view: View) -> str:
        """Why the pod cannot be the first pod of a new NodeClaim because of hostname pod affinity ("" if it can)."""
        for t in view.affinity:
            if t.topology_key == L.HOSTNAME and not self.may_bootstrap(view, t):
                return "pod affinity on kubernetes.io/hostname: no node with a matching pod can take it"
        return ""

    def hostname_cap(self, b: Bin, view: View, cap: int) -> int:
        """cap lowered so the pod's hostname spread stays within maxSkew on bin b."""
        for c in view.spread:
            if c.topology_key == L.HOSTNAME and c.selector.matches(view.pod.labels):
                g = self.spread_group(view.pod, c)
                here = int(g.per_bin(b.position + 1)[b.position]) if b.position >= 0 else 0
                cap = min(cap, c.max_skew - here)
        return cap
