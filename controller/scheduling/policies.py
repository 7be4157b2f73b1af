"""Karpenter's two scheduling policies, applied around one solve by the controller's provisioner and by `karpy
simulate` alike, so a dry run decides as the running controller would (the values: controller.settings):

- PREFERENCE_POLICY: Respect (preferences are tried, then relaxed one at a time) or Ignore (dropped up front).
- MIN_VALUES_POLICY: Strict (a NodePool's minValues must be met) or BestEffort (where they leave pods unschedulable,
  solve again without them and keep that plan if it places more pods).
"""

from __future__ import annotations

import dataclasses

from controller.scheduling.pod import Pod
from controller.scheduling.requirements import Requirements
from controller.scheduling.reservations import FALLBACK
from controller.scheduling.scheduler import Plan, Scheduler
from controller.scheduling.types import ExistingNode, SchedNodePool


def without_preferences(pod: Pod) -> Pod:
    """PREFERENCE_POLICY=Ignore, as Karpenter does it: preferred node and pod (anti-)affinity and ScheduleAnyway
    spread constraints dropped before scheduling, instead of relaxed one at a time."""
    return dataclasses.replace(pod, preferred_node=(), preferred_affinity=(), preferred_anti_affinity=(),
                               spread=tuple(c for c in pod.spread if c.hard), class_key=None)


def relax_min_values(pool: SchedNodePool) -> SchedNodePool:
    """The NodePool with its requirements' minValues dropped (MIN_VALUES_POLICY=BestEffort's second try)."""
    reqs = Requirements([dataclasses.replace(r, min_values=None) for r in pool.requirements])
    return dataclasses.replace(pool, requirements=reqs)


def solve(pools: list[SchedNodePool], existing: list[ExistingNode], daemonsets: list[Pod], pods: list[Pod],
          preference_policy: str = "Respect", min_values_policy: str = "Strict", lower_bound: bool = False,
          reserved_mode: str = FALLBACK) -> Plan:
    """One scheduling decision under the two policies (see the module's docstring); reserved_mode as
    controller.scheduling.reservations says (the provisioner and `karpy simulate` decide strictly)."""
    if preference_policy == "Ignore":
        pods = [without_preferences(p) for p in pods]
    plan = Scheduler(pools, existing, daemonsets, reserved_mode).solve(pods, lower_bound=lower_bound)
    if min_values_policy == "BestEffort" and plan.unschedulable and any(
            r.min_values for p in pools for r in p.requirements):
        # Karpenter's BestEffort: where minValues leaves pods unschedulable, launch with fewer distinct values
        # (and say so on the NodeClaim) rather than not at all
        relaxed = Scheduler([relax_min_values(p) for p in pools], existing, daemonsets, reserved_mode).solve(
            pods, lower_bound=lower_bound)
        if len(relaxed.unschedulable) < len(plan.unschedulable):
            plan = relaxed
    return plan
