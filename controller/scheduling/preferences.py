"""Preferences: a pod's soft constraints are first treated as required and relaxed one at a time when the pod cannot
be placed, as Karpenter's scheduler does (pkg/controllers/provisioning/scheduling/preferences.go)."""

from __future__ import annotations

from dataclasses import dataclass

from controller.scheduling.pod import AffinityTerm, Pod, SpreadConstraint, Toleration
from controller.scheduling.requirements import Requirements

# tolerating every PreferNoSchedule taint is the last relaxation
PREFER_NO_SCHEDULE = Toleration(operator="Exists", effect="PreferNoSchedule")


@dataclass(frozen=True)
class View:
    """A pod's constraints at one relaxation level."""

    pod: Pod
    node_terms: tuple[Requirements, ...]  # OR-terms, with the preferred node affinity still held folded in
    strict_terms: tuple[Requirements, ...]  # the same terms from required node affinity alone (topology domains)
    tolerations: tuple[Toleration, ...]
    spread: tuple[SpreadConstraint, ...]
    affinity: tuple[AffinityTerm, ...]
    anti_affinity: tuple[AffinityTerm, ...]
    host_ports: frozenset[tuple[str, str, int]]


def relaxed(pod: Pod, level: int) -> View | None:
    """Level 0: every preference as required. Each further level drops one preference, in this order: preferred pod
    anti-affinity, preferred pod affinity, preferred node affinity (lowest weight first), ScheduleAnyway spreads, then
    PreferNoSchedule taints become tolerated. None when nothing is left to relax."""
    anti = sorted(pod.preferred_anti_affinity, key=lambda wt: -wt[0])
    aff = sorted(pod.preferred_affinity, key=lambda wt: -wt[0])
    node = sorted(pod.preferred_node, key=lambda wt: -wt[0])
    soft = [c for c in pod.spread if not c.hard]
    steps = len(anti) + len(aff) + len(node) + len(soft) + 1
    if level > steps:
        return None
    drop = level
    k_anti = max(0, len(anti) - drop)
    drop = max(0, drop - len(anti))
    k_aff = max(0, len(aff) - drop)
    drop = max(0, drop - len(aff))
    k_node = max(0, len(node) - drop)
    drop = max(0, drop - len(node))
    k_soft = max(0, len(soft) - drop)
    drop = max(0, drop - len(soft))
    tolerations = pod.tolerations
    if drop >= 1:
        tolerations = (*tolerations, PREFER_NO_SCHEDULE)
    strict = pod.node_terms or (Requirements(),)
    terms = strict
    prefs = [r for _, r in node[:k_node]]
    if prefs:
        extra = Requirements()
        for r in prefs:
            extra = extra.intersect(r)
        terms = tuple(t.intersect(extra) for t in strict)
    return View(pod=pod, node_terms=terms, strict_terms=strict, tolerations=tolerations,
                spread=tuple(c for c in pod.spread if c.hard) + tuple(soft[:k_soft]),
                affinity=pod.affinity + tuple(t for _, t in aff[:k_aff]),
                anti_affinity=pod.anti_affinity + tuple(t for _, t in anti[:k_anti]), host_ports=pod.host_ports)
