"""Preferences: a pod's soft constraints are first treated as required and relaxed one at a time when the pod cannot
be placed, as Karpenter's scheduler does (pkg/controllers/provisioning/scheduling/preferences.go)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from controller.scheduling.instancetypes import PREFER_NO_SCHEDULE, tolerates_prefer_no_schedule
from controller.scheduling.pod import AffinityTerm, Pod, SpreadConstraint, Toleration
from controller.scheduling.requirements import Requirements

T = TypeVar("T")


@dataclass(frozen=True)
class View:
    """A pod's constraints at one relaxation level."""

    pod: Pod
    node_terms: tuple[Requirements, ...]  # the required term tried, with the heaviest preferred node term held
    strict_terms: tuple[Requirements, ...]  # the same term from required node affinity alone (topology domains):
    # neither preferences nor volumes narrow the domains a spread counts, as in Karpenter
    tolerations: tuple[Toleration, ...]
    spread: tuple[SpreadConstraint, ...]
    affinity: tuple[AffinityTerm, ...]
    anti_affinity: tuple[AffinityTerm, ...]
    host_ports: frozenset[tuple[str, str, int]]


def _by_weight(items: tuple[tuple[int, T], ...]) -> list[tuple[int, T]]:
    """Heaviest first, ties in the pod's order (Karpenter's stable sort)."""
    return sorted(items, key=lambda wt: -wt[0])


def _schedule_anyway_steps(spread: tuple[SpreadConstraint, ...]) -> list[tuple[SpreadConstraint, ...]]:
    """The pod's spread constraints after 0, 1, 2 ... ScheduleAnyway removals: Karpenter removes the first
    ScheduleAnyway constraint by moving the last constraint into its place."""
    steps = [spread]
    cur = list(spread)
    while True:
        i = next((i for i, c in enumerate(cur) if not c.hard), None)
        if i is None:
            return steps
        cur[i] = cur[-1]
        cur.pop()
        steps.append(tuple(cur))


def relaxed(pod: Pod, level: int, tolerate_prefer_no_schedule: bool = True) -> View | None:
    """The pod's constraints after `level` relaxations, or None when nothing is left to relax.

    Level 0 holds the first required node-affinity term, every preferred pod (anti-)affinity term, the heaviest
    preferred node-affinity term and every ScheduleAnyway spread. Each further level relaxes one thing, in Karpenter's
    order: the next required OR-term (the first ones are the most preferred), then preferred pod affinity terms, then
    preferred pod anti-affinity terms, then preferred node affinity terms (each heaviest first, so lighter ones are
    tried), then ScheduleAnyway spreads, and last a toleration for PreferNoSchedule taints (only when some NodePool
    has such a taint: `tolerate_prefer_no_schedule`)."""
    # each required OR-term with each alternative the pod's volumes allow: (where the node may be, the term alone)
    terms = pod.node_terms or (Requirements(),)
    required = ([(t.intersect(v), t) for t in terms for v in pod.volume_terms] if pod.volume_terms
                else [(t, t) for t in terms])
    aff = _by_weight(pod.preferred_affinity)
    anti = _by_weight(pod.preferred_anti_affinity)
    node = _by_weight(pod.preferred_node)
    spreads = _schedule_anyway_steps(pod.spread)
    tolerate = tolerate_prefer_no_schedule and not tolerates_prefer_no_schedule(pod.tolerations)
    steps = (len(required) - 1) + len(aff) + len(anti) + len(node) + (len(spreads) - 1) + (1 if tolerate else 0)
    if level > steps:
        return None
    rest = level
    taken = []
    for size in (len(required) - 1, len(aff), len(anti), len(node), len(spreads) - 1):
        n = min(rest, size)
        taken.append(n)
        rest -= n
    t_req, t_aff, t_anti, t_node, t_spread = taken
    term, strict = required[t_req]
    if t_node < len(node):
        term = term.intersect(node[t_node][1])
    tolerations = (*pod.tolerations, PREFER_NO_SCHEDULE) if rest >= 1 else pod.tolerations
    return View(pod=pod, node_terms=(term,), strict_terms=(strict,), tolerations=tolerations,
                spread=spreads[t_spread],
                affinity=pod.affinity + tuple(t for _, t in aff[t_aff:]),
                anti_affinity=pod.anti_affinity + tuple(t for _, t in anti[t_anti:]),
                host_ports=pod.host_ports)
