"""Topology: pod counts per domain for topology spread and pod (anti-)affinity, and the domains a pod may go to
(Karpenter's scheduling.Topology and TopologyGroup).

A TopologyGroup counts the pods one selector matches (within namespaces) per value of one topology key; hostname
groups also count per bin, so one vector test rules out every node a pod's hostname constraints forbid.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from controller.api import labels as L
from controller.scheduling.instancetypes import CAPACITY_TYPES, InstanceTypeIndex
from controller.scheduling.nodeclaim import Bin
from controller.scheduling.pod import LabelSelector, Pod
from controller.scheduling.preferences import View
from controller.scheduling.requirements import Requirement, Requirements
from controller.scheduling.types import ExistingNode

UNBOUNDED = 1 << 30


@dataclass
class TopologyGroup:
    """Pods that some topology constraint counts: selector within namespaces, by topology key."""

    namespaces: frozenset[str]
    selector: LabelSelector
    key: str
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    by_bin: np.ndarray = field(default_factory=lambda: np.zeros(64, dtype=np.int64))  # hostname groups, per bin

    def matches(self, pod: Pod) -> bool:
        """Whether the group counts this pod."""
        return pod.namespace in self.namespaces and self.selector.matches(pod.labels)

    def per_bin(self, n: int) -> np.ndarray:
        """Counts of the first n bins (hostname groups)."""
        a = self.by_bin
        return a[:n] if len(a) >= n else np.concatenate([a, np.zeros(n - len(a), dtype=a.dtype)])


class Topology:
    """The topology groups of one solve and the domains pods may take."""

    def __init__(self, indexes: list[InstanceTypeIndex], existing_nodes: list[ExistingNode]) -> None:
        self.indexes = indexes
        self.existing_nodes = existing_nodes
        self.groups: dict[tuple[LabelSelector, frozenset[str], str], TopologyGroup] = {}
        self._zone_cache: dict[object, list[str]] = {}

    # ---- counting ----------------------------------------------------------------------------------------------
    def group(self, selector: LabelSelector, namespaces: frozenset[str], key: str) -> TopologyGroup:
        """The group for this selector, namespaces and key (created empty the first time)."""
        gk = (selector, namespaces, key)
        g = self.groups.get(gk)
        if g is None:
            g = self.groups[gk] = TopologyGroup(namespaces, selector, key)
        return g

    def register(self, pods: list[Pod]) -> None:
        """Create the groups the pods' spread constraints and (anti-)affinity terms count in."""
        for p in pods:
            for c in p.spread:
                self.group(c.selector, frozenset([p.namespace]), c.topology_key)
            for t in (*p.affinity, *p.anti_affinity, *(t for _, t in p.preferred_affinity),
                      *(t for _, t in p.preferred_anti_affinity)):
                self.group(t.selector, t.namespaces, t.topology_key)

    def count(self, b: Bin, pod: Pod, n: int = 1) -> None:
        """Count n pods like `pod` placed on bin b in every group that matches them."""
        labels = b.labels()
        for g in self.groups.values():
            if g.matches(pod):
                domain = labels.get(g.key)
                if domain is not None:
                    g.counts[domain] += n
                if g.key == L.HOSTNAME and b.position >= 0:
                    if b.position >= len(g.by_bin):
                        grow = max(len(g.by_bin), b.position + 1 - len(g.by_bin))
                        g.by_bin = np.concatenate([g.by_bin, np.zeros(grow, dtype=np.int64)])
                    g.by_bin[b.position] += n

    # ---- domains -----------------------------------------------------------------------------------------------
    def compatible_pools(self, view: View, term: Requirements) -> list[InstanceTypeIndex]:
        """Pools that could take the pod at all: ready, taints tolerated, requirements compatible."""
        return [ix for ix in self.indexes if ix.admits(view.tolerations, term)]

    def capacity_types_for(self, view: View, term: Requirements) -> list[str]:
        """Capacity-type domains: those the compatible NodePools offer (spot, on-demand, reserved)."""
        found: set[str] = set()
        for ix in self.compatible_pools(view, term):
            merged = ix.pool.requirements.intersect(term)
            mask = ix.all_mask & ix.mask(merged)
            zm, cm = ix.offer_masks(merged)
            if mask.any():
                sub = ix.price[mask][:, zm, :]
                found.update(ct for i, ct in enumerate(CAPACITY_TYPES) if cm[i] and np.isfinite(sub[:, :, i]).any())
        found.update(n.labels[L.CAPACITY_TYPE] for n in self.existing_nodes if L.CAPACITY_TYPE in n.labels)
        return sorted(found)

    def zones_for(self, view: View, term: Requirements) -> list[str]:
        """Topology domains for zone constraints, as Karpenter computes them: the zones of the NodePools the pod is
        compatible with (within the pod's own zone requirement), plus zones of existing nodes."""
        key = (view.pod.class_key, view.tolerations, term.describe())
        zones = self._zone_cache.get(key)
        if zones is None:
            found: set[str] = set()
            for ix in self.compatible_pools(view, term):
                merged = ix.pool.requirements.intersect(term)
                mask = ix.all_mask & ix.mask(merged)
                if mask.any():
                    zm, cm = ix.offer_masks(merged)
                    sub = ix.price[mask][:, :, cm]
                    found.update(z for i, z in enumerate(ix.zones) if zm[i] and np.isfinite(sub[:, i, :]).any())
            found.update(n.labels[L.ZONE] for n in self.existing_nodes if L.ZONE in n.labels)
            zr = term.get(L.ZONE)
            zones = self._zone_cache[key] = sorted(z for z in found if zr is None or zr.has(z))
        return zones

    def requirements(self, view: View, term: Requirements, strict: Requirements | None = None) -> tuple[
            Requirements | None, int, str]:
        """The extra requirements (a domain) and per-node cap the pod's topology constraints impose right now, or
        None and why no domain is left. Spread domains and their minimum count come from `strict` (the required node
        affinity alone: preferred node affinity never narrows them, as in Karpenter); the chosen domain must also
        meet `term`."""
        strict = term if strict is None else strict
        candidates_zones = self.zones_for(view, term)
        reqs = term
        cap = UNBOUNDED
        proto = view.pod
        for c in view.spread:
            g = self.group(c.selector, frozenset([proto.namespace]), c.topology_key)
            if c.topology_key == L.HOSTNAME:
                cap = min(cap, c.max_skew)
                continue
            if c.topology_key == L.ZONE:
                eligible = self.zones_for(view, strict)
            elif c.topology_key == L.CAPACITY_TYPE:
                eligible = self.capacity_types_for(view, strict)
            else:
                eligible = sorted(g.counts)
            required = strict.get(c.topology_key)
            if required is not None:
                eligible = [d for d in eligible if required.has(d)]
            allowed = reqs.get(c.topology_key)
            domains = eligible if allowed is None else [d for d in eligible if allowed.has(d)]
            if not domains:
                return None, 0, f"topology spread on {c.topology_key}: no eligible domain"
            counts = {d: g.counts.get(d, 0) for d in eligible}
            too_few = bool(c.min_domains) and len(eligible) < (c.min_domains or 0)
            low = 0 if too_few else min(counts.values())  # fewer domains than minDomains: the global minimum is 0
            best = min(domains, key=lambda d: (counts[d], d))
            if counts[best] + 1 - low > c.max_skew:
                return None, 0, f"topology spread on {c.topology_key} would exceed maxSkew {c.max_skew}"
            # how many can go to best before the skew to the lowest other eligible domain passes maxSkew
            others = [counts[d] for d in eligible if d != best]
            floor = min(others) if others else UNBOUNDED
            if too_few:
                floor = 0
            cap = min(cap, max(1, floor + c.max_skew - counts[best]))
            reqs = reqs.intersect(Requirements([Requirement(c.topology_key, False, frozenset([best]))]))
        for t in view.affinity:
            g = self.group(t.selector, t.namespaces, t.topology_key)
            domains = [d for d, n in g.counts.items() if n > 0]
            if t.topology_key == L.HOSTNAME:
                continue  # handled per bin
            if domains:
                reqs = reqs.intersect(Requirements([Requirement(t.topology_key, False, frozenset(domains))]))
            elif not t.selects(proto.namespace, proto.labels):
                return None, 0, f"pod affinity on {t.topology_key}: no pod matches the selector"
            elif t.topology_key == L.ZONE and candidates_zones:
                allowed = reqs.get(L.ZONE)
                zones = [z for z in candidates_zones if allowed is None or allowed.has(z)]
                if zones:
                    reqs = reqs.intersect(Requirements([Requirement(L.ZONE, False, frozenset([zones[0]]))]))
        for t in view.anti_affinity:
            if t.topology_key == L.HOSTNAME:
                if t.selects(proto.namespace, proto.labels):
                    cap = 1
                continue
            g = self.group(t.selector, t.namespaces, t.topology_key)
            taken = [d for d, n in g.counts.items() if n > 0]
            if taken:
                reqs = reqs.intersect(Requirements([Requirement(t.topology_key, True, frozenset(taken))]))
            if t.selects(proto.namespace, proto.labels):
                cap = 1
        return reqs, cap, ""

    # ---- per bin -----------------------------------------------------------------------------------------------
    def hostname_room(self, view: View, room: np.ndarray, start: int) -> np.ndarray:
        """room (a mask over bins start..) narrowed to the bins the pod's hostname spread and anti-affinity still
        allow, by counts alone."""
        end = start + len(room)
        for c in view.spread:
            if c.topology_key == L.HOSTNAME:
                g = self.group(c.selector, frozenset([view.pod.namespace]), c.topology_key)
                room &= g.per_bin(end)[start:end] < c.max_skew
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
                g = self.group(t.selector, t.namespaces, t.topology_key)
                anywhere = any(n > 0 for n in g.counts.values())
                here = g.counts.get(b.name, 0) > 0 or any(t.selects(p.namespace, p.labels) for p in b.pods)
                if (anywhere or not t.selects(pod.namespace, pod.labels)) and not here:
                    return True
        return False

    def hostname_cap(self, b: Bin, view: View, cap: int) -> int:
        """cap lowered so the pod's hostname spread stays within maxSkew on bin b."""
        for c in view.spread:
            if c.topology_key == L.HOSTNAME:
                here = sum(1 for p in b.pods if p.namespace == view.pod.namespace and c.selector.matches(p.labels))
                cap = min(cap, c.max_skew - here)
        return cap
