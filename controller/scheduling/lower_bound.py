"""A lower bound on the hourly cost of the new capacity a plan launches: an LP relaxation solved with HiGHS.

Variables: x[p, t] >= 0 nodes of instance type t from NodePool p, and y[c, p] >= 0 pods of class c served by pool p
(only pools the class is compatible with: taints tolerated, requirements compatible).
Constraints: every placed pod is served (sum_p y[c, p] = n_c); in every pool and for every resource, the free capacity
(allocatable less DaemonSet overhead) of its nodes covers the requests of the pods it serves; and a class whose pods
cannot share a node beyond k each (required hostname anti-affinity to itself or a host port: k = 1; a DoNotSchedule
hostname spread that selects itself: k = maxSkew) has at least ceil(n_c / k) nodes, of types that hold one of its pods,
in the pools it may use.
Objective: sum x[p, t] x the cheapest offering price of t.

What it relaxes, so that it is a true lower bound on any plan for the same pods:
- nodes are fractional, and pods are fluid (only per-pool totals per resource must fit), so packing losses vanish;
- zonal topology constraints, affinity, and per-pod zone/type restrictions inside a pool are dropped; hostname
  constraints only count nodes;
- every type is priced at its cheapest offering in any zone and capacity type the pool allows.
Every real plan is a feasible point, so the LP optimum is <= the cost of any plan, the optimal one included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import lil_matrix, vstack

from controller.api.labels import HOSTNAME

if TYPE_CHECKING:
    from controller.scheduling.pod import Pod


def node_groups(pod: Pod) -> list[tuple[object, int]]:
    """The groups pod belongs to whose members cannot share a node beyond k each, as (group key, k): a required
    hostname anti-affinity term that selects the pod itself (every pod holding and matching it needs its own node),
    a host port (pods asking for it need distinct nodes), a DoNotSchedule hostname spread that selects the pod (a node
    takes at most maxSkew of the pods holding it: Karpenter counts hostname domains from 0)."""
    out: list[tuple[object, int]] = []
    for t in pod.anti_affinity:
        if t.topology_key == HOSTNAME and t.selects(pod.namespace, pod.labels):
            out.append((("anti", t), 1))
    out.extend((("port", port), 1) for port in pod.host_ports)
    for c in pod.spread:
        if c.hard and c.topology_key == HOSTNAME and c.selector.matches(pod.labels):
            out.append((("spread", pod.namespace, c), c.max_skew))
    return out


def lower_bound(pods: list[Pod], pools_of: dict[Any, list[Any]], indexes: list[Any], resources: list[str]) -> float:
    """The LP bound for serving `pods` with new nodes; pools_of maps a pod class to the pool indexes it may use."""
    if not pods or not indexes:
        return 0.0
    rindex = {r: i for i, r in enumerate(resources)}
    classes: dict[Any, tuple[np.ndarray, int]] = {}
    # per node group: its per-node limit, pod count, the smallest requests of a member, the classes in it
    groups: dict[object, tuple[int, int, np.ndarray, set[Any]]] = {}
    for p in pods:
        vec, n = classes.get(p.class_key, (None, 0))
        if vec is None:
            vec = np.zeros(len(resources))
            for k, v in p.requests.items():
                vec[rindex[k]] = v
        classes[p.class_key] = (vec, n + 1)
        for gk, limit in node_groups(p):
            g = groups.get(gk)
            if g is None:
                groups[gk] = (limit, 1, vec, {p.class_key})
            else:
                g[3].add(p.class_key)
                groups[gk] = (limit, g[1] + 1, np.minimum(g[2], vec), g[3])
    # per pool: the distinct (free capacity, price) rows of its types
    pool_rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for ix in indexes:
        if len(ix.types) == 0:
            continue
        ok = np.isfinite(ix.min_price) & (ix.free0 >= 0).all(axis=1)
        if not ok.any():
            continue
        rows = np.column_stack([ix.free0[ok].astype(float), ix.min_price[ok]])
        rows = np.unique(rows, axis=0)
        pool_rows[id(ix)] = (rows[:, :-1], rows[:, -1])
    if not pool_rows:
        return 0.0
    x_vars: list[tuple[int, int]] = [(pid, t) for pid, (cap, _) in pool_rows.items() for t in range(len(cap))]
    y_vars: list[tuple[Any, int]] = []
    usable_of: dict[Any, list[int]] = {}
    for key in classes:
        usable = [id(ix) for ix in pools_of.get(key, indexes) if id(ix) in pool_rows] or list(pool_rows)
        usable_of[key] = usable
        y_vars.extend((key, pid) for pid in usable)
    nx, ny = len(x_vars), len(y_vars)
    cost = np.concatenate([[pool_rows[pid][1][t] for pid, t in x_vars], np.zeros(ny)])
    demand_total = np.maximum(sum(vec * n for vec, n in classes.values()), 1.0)
    pids = list(pool_rows)
    prow = {pid: i for i, pid in enumerate(pids)}
    a_ub = lil_matrix((len(pids) * len(resources), nx + ny))
    for j, (pid, t) in enumerate(x_vars):
        cap = pool_rows[pid][0][t]
        for r in range(len(resources)):
            a_ub[prow[pid] * len(resources) + r, j] = -cap[r] / demand_total[r]
    for j, (key, pid) in enumerate(y_vars):
        vec = classes[key][0]
        for r in range(len(resources)):
            if vec[r]:
                a_ub[prow[pid] * len(resources) + r, nx + j] = vec[r] / demand_total[r]
    keys = list(classes)
    kindex = {k: i for i, k in enumerate(keys)}
    a_eq = lil_matrix((len(keys), nx + ny))
    for j, (key, _) in enumerate(y_vars):
        a_eq[kindex[key], nx + j] = 1.0
    b_eq = np.array([classes[k][1] for k in keys], dtype=float)
    # nodes the hostname constraints force: at least ceil(members / limit) nodes, of the group's pools and of types
    # that hold its smallest member: -sum of those x <= -needed
    b_ub = np.zeros(a_ub.shape[0] + len(groups))
    a_nodes = lil_matrix((len(groups), nx + ny))
    for row, (limit, n, vec, keys_in) in enumerate(groups.values()):
        pools_in = {pid for k in keys_in for pid in usable_of[k]}
        for j, (pid, t) in enumerate(x_vars):
            if pid in pools_in and (pool_rows[pid][0][t] >= vec).all():
                a_nodes[row, j] = -1.0
        b_ub[a_ub.shape[0] + row] = -float(-(-n // limit))
    a_all = vstack([a_ub.tocsr(), a_nodes.tocsr()]).tocsr()
    res = linprog(cost, A_ub=a_all, b_ub=b_ub, A_eq=a_eq.tocsr(), b_eq=b_eq, bounds=(0, None), method="highs")
    return float(res.fun) if res.status == 0 else 0.0
