"""A NodeClaim's disruption conditions, as Karpenter's nodeclaim/disruption controller keeps them.

`Consolidatable`: True once consolidateAfter has passed since the last pod event on the node (status.
lastPodEventTime, else when the NodeClaim initialized); absent while it has not, before initialization, and when
consolidateAfter is Never. `Drifted` (reason = why): the NodePool's static template hash differs from the NodeClaim's
(NodePoolDrifted), the NodeClaim's labels no longer meet the NodePool's requirements (RequirementsDrifted), its
instance type or offering is gone (InstanceTypeNotFound), or the cloud provider says so (AMIDrift, SubnetDrift,
SecurityGroupDrift, NodeClassDrift, CapacityReservationDrift). With karpy's RebalanceRecommendationDrift gate, an EC2
rebalance recommendation marks it Drifted/RebalanceRecommendation and that stays until the NodeClaim goes.

Hash versions: a NodeClaim whose hash version is not karpy's current one (Karpenter's, or an older karpy's) is
re-stamped with the current hash, never drifted, as Karpenter does after a hash version bump. The pure rules here
also serve `karpy disruption`.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from controller.api import conditions as C
from controller.api import labels as L
from controller.api.nodeclasshash import EC2NODECLASS_HASH_VERSION, hash_annotations
from controller.catalog.types import InstanceType
from controller.cloud.drift import nodeclass_static_drift
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import ConflictError, NotFoundError
from controller.kube.workqueue import Result
from controller.provisioning.nodeclaimtemplate import NODEPOOL_HASH_VERSION, nodepool_hash
from controller.scheduling.requirements import Requirements
from controller.state.cluster import Cluster

log = logging.getLogger("karpy.nodeclaim.disruption")

Obj = dict[str, Any]
CONSOLIDATABLE = "Consolidatable"
DRIFTED = "Drifted"
NODEPOOL_DRIFTED = "NodePoolDrifted"
REQUIREMENTS_DRIFTED = "RequirementsDrifted"
INSTANCE_TYPE_NOT_FOUND = "InstanceTypeNotFound"
REBALANCE_RECOMMENDATION = "RebalanceRecommendation"
RECHECK = 5 * 60.0  # Karpenter requeues drift every 5 minutes (its cloud provider caches live that long)
INSTANCE_TYPE_CHECK_AFTER = 3600.0  # instance-type drift is looked at only once a NodeClaim is an hour old
INSTANCE_TYPE_CHECK_EVERY = 1800.0  # and, once found offered, not again for 30 minutes (as Karpenter caches it)
MAX_DURATION_SECONDS = 10 * 365 * 86400.0


class DisruptionRuleError(ValueError):
    """A field the disruption rules cannot read; the message names it."""


def parse_go_duration(value: Any, field: str) -> float | None:
    """A Go duration string (`30s`, `1h30m`) in seconds; None for `Never`. Raises naming the field."""
    from controller.disruption.budgets import BudgetError, parse_duration

    text = str(value).strip()
    if text == "Never":
        return None
    try:
        seconds = parse_duration(text)
    except BudgetError:
        raise DisruptionRuleError(f"{field}: {text[:100]!r} is not a duration such as 30s, 5m or 1h, nor Never") \
            from None
    return min(seconds, MAX_DURATION_SECONDS)


def _meta(obj: Mapping[str, Any] | None, key: str) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get(key) or {})


def consolidatable_at(nodeclaim: Obj, nodepool: Obj) -> float | None:
    """When the NodeClaim becomes consolidatable (epoch seconds); None while it cannot (consolidateAfter Never or
    unset, or not initialized)."""
    after = ((nodepool.get("spec") or {}).get("disruption") or {}).get("consolidateAfter")
    if after is None:
        return None
    seconds = parse_go_duration(after, "spec.disruption.consolidateAfter")
    if seconds is None:
        return None
    status = nodeclaim.get("status") or {}
    initialized = C.get(status, "Initialized")
    if initialized is None or initialized.get("status") != "True":
        return None
    since = C.parse_time(status.get("lastPodEventTime")) or C.parse_time(initialized.get("lastTransitionTime"))
    if since is None:
        since = 0.0  # initialized with no time recorded: the window has long passed
    return since + seconds


def consolidatable(nodeclaim: Obj, nodepool: Obj, now: float) -> bool:
    """Whether the NodeClaim's Consolidatable condition is True at `now`."""
    at = consolidatable_at(nodeclaim, nodepool)
    return at is not None and now >= at


def static_drift(nodeclaim: Obj, nodepool: Obj) -> str:
    """NodePoolDrifted when the NodeClaim's nodepool-hash differs from the NodePool's current static hash under the
    same hash version; another version (Karpenter's, an older karpy's) is re-stamped, never drift."""
    ann = _meta(nodeclaim, "annotations")
    have = ann.get(L.NODEPOOL_HASH)
    if not have or ann.get(L.NODEPOOL_HASH_VERSION) != NODEPOOL_HASH_VERSION:
        return ""
    return NODEPOOL_DRIFTED if have != nodepool_hash(nodepool) else ""


def requirements_drift(nodeclaim: Obj, nodepool: Obj) -> str:
    """RequirementsDrifted when the NodeClaim's labels no longer meet the NodePool's requirements."""
    reqs = (((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("requirements") or []
    if not isinstance(reqs, list):
        raise DisruptionRuleError("spec.template.spec.requirements: not a list")
    wanted = Requirements.from_node_selector_requirements(r for r in reqs if isinstance(r, dict))
    have = Requirements.from_labels(_meta(nodeclaim, "labels"))
    return REQUIREMENTS_DRIFTED if have.incompatibility(wanted) is not None else ""


def instance_type_drift(nodeclaim: Obj, instance_types: Iterable[InstanceType] | None) -> str:
    """InstanceTypeNotFound when the NodeClaim's instance type is not offered any more, or none of its offerings
    matches the NodeClaim's zone and capacity type (a reserved one may fall back to on-demand). No list, or an empty
    one, means the offerings are not known (a NodeClass not ready), not that there are none: no drift."""
    its = list(instance_types or [])
    if not its:
        return ""
    labels = _meta(nodeclaim, "labels")
    it = next((t for t in its if t.name == labels.get(L.INSTANCE_TYPE)), None)
    if it is None:
        return INSTANCE_TYPE_NOT_FOUND
    zone, ct, zone_id = labels.get(L.ZONE), labels.get(L.CAPACITY_TYPE), labels.get(L.ZONE_ID)
    cts = {ct, L.CAPACITY_TYPE_ON_DEMAND} if ct == L.CAPACITY_TYPE_RESERVED else {ct}
    for o in it.offerings:
        if (zone is None or o.zone == zone) and (ct is None or o.capacity_type in cts) and \
                (zone_id is None or not o.zone_id or o.zone_id == zone_id):
            return ""
    return INSTANCE_TYPE_NOT_FOUND


def drift_reason(nodeclaim: Obj, nodepool: Obj, instance_types: Iterable[InstanceType] | None = None) -> str | None:
    """The core's drift reason for a NodeClaim (static, then requirements, then instance type), None when none."""
    return static_drift(nodeclaim, nodepool) or requirements_drift(nodeclaim, nodepool) or \
        instance_type_drift(nodeclaim, instance_types) or None


def _stamped_otherwise(ann: dict[str, str], hash_key: str, version_key: str, version: str) -> bool:
    """A hash stamped under another version, or with none (what Karpenter re-stamps on a version change); a
    NodeClaim with neither annotation was stamped by no one and is left alone."""
    return (hash_key in ann or version_key in ann) and ann.get(version_key) != version


def restamp(nodeclaim: Obj, nodepool: Obj | None, nodeclass: Obj | None) -> dict[str, str]:
    """The annotations to write so the NodeClaim's hashes carry karpy's current versions: a NodeClaim stamped under
    another version gets the current version, and the current hash unless it is already Drifted (whether it still
    is cannot be told across hash functions), as Karpenter's hash controllers do. Empty when nothing to write."""
    ann = _meta(nodeclaim, "annotations")
    drifted = C.get(nodeclaim.get("status"), DRIFTED) is not None
    out: dict[str, str] = {}
    if nodepool is not None and _stamped_otherwise(ann, L.NODEPOOL_HASH, L.NODEPOOL_HASH_VERSION,
                                                   NODEPOOL_HASH_VERSION):
        out[L.NODEPOOL_HASH_VERSION] = NODEPOOL_HASH_VERSION
        if not drifted:
            out[L.NODEPOOL_HASH] = nodepool_hash(nodepool)
    if nodeclass is not None and _stamped_otherwise(ann, L.EC2NODECLASS_HASH, L.EC2NODECLASS_HASH_VERSION,
                                                    EC2NODECLASS_HASH_VERSION):
        out[L.EC2NODECLASS_HASH_VERSION] = EC2NODECLASS_HASH_VERSION
        if not drifted:
            out[L.EC2NODECLASS_HASH] = hash_annotations(nodeclass)[L.EC2NODECLASS_HASH]
    return out


def nodepool_hash_annotations(nodepool: Obj) -> dict[str, str]:
    """The nodepool-hash and -hash-version annotations the NodePool should carry (Karpenter's nodepool hash
    controller writes them; karpy writes its own version, so Karpenter taking the cluster back sees a version not
    its own and re-stamps every NodeClaim instead of comparing hashes of another function)."""
    return {L.NODEPOOL_HASH: nodepool_hash(nodepool), L.NODEPOOL_HASH_VERSION: NODEPOOL_HASH_VERSION}


def reconcile_nodepool_hash(cluster: Cluster, client: KubeClient, name: str) -> Result:
    """Annotate the NodePool with its current hash and karpy's hash version (one patch, none when current)."""
    pool = cluster.nodepool(name)
    if pool is None or pool["metadata"].get("deletionTimestamp"):
        return Result()
    want = nodepool_hash_annotations(pool)
    have = _meta(pool, "annotations")
    if all(have.get(k) == v for k, v in want.items()):
        return Result()
    with contextlib.suppress(NotFoundError):
        client.patch(R.NODEPOOLS, name, {"metadata": {"annotations": want}})
    return Result()


class NodeClaimDisruptionController:
    """Keeps each NodeClaim's Consolidatable and Drifted conditions current (one status patch per pass), and
    re-stamps hashes written under another hash version (one metadata patch)."""

    def __init__(self, cluster: Cluster, client: KubeClient, cloud: Any, *, rebalance_drift: bool = False,
                 clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self.client = client
        self.cloud = cloud
        self.rebalance_drift = rebalance_drift
        self.clock = clock
        self._offered: dict[str, float] = {}  # NodeClaim uid -> when its instance type was last found offered

    def reconcile(self, name: str) -> Result:
        """One pass over a NodeClaim."""
        current = self.cluster.nodeclaim(name)
        if current is None or current.deleting:
            return Result()
        nodepool = self.cluster.nodepool(current.nodepool) if current.nodepool else None
        if nodepool is None:
            return Result()
        nodeclass = self.cluster.nodeclass(current.nodeclass_name) if current.nodeclass_name else None
        stamp = restamp(current, nodepool, nodeclass)
        if stamp:
            try:
                self.client.patch(R.NODECLAIMS, name, {"metadata": {"annotations": stamp}})
            except NotFoundError:
                return Result()
            log.info("re-stamped nodeclaim hash annotations written under another hash version",
                     extra={"controller": "nodeclaim.disruption", "NodeClaim": {"name": name}, "annotations": stamp})
            return Result(requeue_after=1.0)  # evaluated on the re-stamped copy the watch brings
        claim: Obj = copy.deepcopy(current)  # a plain dict to change
        status = claim.setdefault("status", {})
        now = self.clock()
        requeue = RECHECK
        try:
            at = consolidatable_at(claim, nodepool)
        except DisruptionRuleError as e:
            log.error("cannot evaluate consolidatable", extra={"controller": "nodeclaim.disruption",
                                                               "NodeClaim": {"name": name}, "error": str(e)})
            at = None
        if at is not None and now >= at:
            if C.get(status, CONSOLIDATABLE) is None:
                log.debug("marking consolidatable", extra={"NodeClaim": {"name": name}})
            C.set_condition(status, CONSOLIDATABLE, True, now=now)
        else:
            self._clear(status, CONSOLIDATABLE)
            if at is not None:
                requeue = min(requeue, max(at - now, 0.1))
        why = self._drift(claim, nodepool, nodeclass, now)
        if why:
            if C.get(status, DRIFTED) is None:
                log.debug("marking drifted", extra={"NodeClaim": {"name": name}, "reason": why})
            C.set_condition(status, DRIFTED, True, reason=why, message=why, now=now)
        else:
            self._clear(status, DRIFTED)
        if status.get("conditions") != current.status.get("conditions"):
            # the list is replaced whole by a merge patch: the resourceVersion makes a concurrent write (another
            # controller's condition) a conflict to retry rather than a condition lost
            try:
                self.client.patch(R.NODECLAIMS, name, {
                    "metadata": {"resourceVersion": current.resource_version or None},
                    "status": {"conditions": status["conditions"]}}, subresource="status")
            except NotFoundError:
                return Result()
            except ConflictError:
                return Result(requeue_after=0.5)
        return Result(requeue_after=requeue)

    @staticmethod
    def _clear(status: Obj, type_: str) -> None:
        conds = status.get("conditions") or []
        if any(isinstance(c, dict) and c.get("type") == type_ for c in conds):
            status["conditions"] = [c for c in conds if not (isinstance(c, dict) and c.get("type") == type_)]

    def _drift(self, claim: Obj, nodepool: Obj, nodeclass: Obj | None, now: float) -> str:
        """Why the NodeClaim is drifted ("" when it is not): the core's rules first, then the cloud provider's."""
        status = claim.get("status") or {}
        if not C.is_true(status, "Launched"):
            return ""
        held = C.get(status, DRIFTED)
        if self.rebalance_drift and held is not None and held.get("reason") == REBALANCE_RECOMMENDATION:
            return REBALANCE_RECOMMENDATION
        try:
            why = static_drift(claim, nodepool) or requirements_drift(claim, nodepool)
        except DisruptionRuleError as e:
            log.error("cannot evaluate drift", extra={"controller": "nodeclaim.disruption",
                                                      "NodeClaim": {"name": claim["metadata"]["name"]},
                                                      "error": str(e)})
            return ""
        if why:
            return why
        created = C.parse_time(claim["metadata"].get("creationTimestamp")) or now
        uid = str(claim["metadata"].get("uid") or claim["metadata"]["name"])
        if nodeclass is not None and now - created > INSTANCE_TYPE_CHECK_AFTER and \
                now - self._offered.get(uid, float("-inf")) > INSTANCE_TYPE_CHECK_EVERY:
            why = self._instance_type_drift(claim, nodeclass)
            if why:
                return why
            if len(self._offered) > 100_000:
                self._offered.clear()  # a bound; at worst one more look per NodeClaim
            self._offered[uid] = now
        checker = getattr(self.cloud, "is_drifted", None)
        if checker is None:
            return nodeclass_static_drift(claim, nodeclass)
        try:
            return str(checker(claim, nodeclass) or "")
        except Exception as e:  # the cloud's view is retried on the next pass
            log.warning("checking cloud provider drift failed", extra={
                "controller": "nodeclaim.disruption", "NodeClaim": {"name": claim["metadata"]["name"]},
                "error": str(e)[:300]})
            return str((C.get(status, DRIFTED) or {}).get("reason") or "") if C.is_true(status, DRIFTED) else ""

    def _instance_type_drift(self, claim: Obj, nodeclass: Obj) -> str:
        from controller.cloud.provider import NodeClass

        if self.cloud is None:
            return ""
        try:
            its = self.cloud.get_instance_types(NodeClass.from_manifest(nodeclass))
        except Exception as e:
            log.warning("listing instance types for drift failed", extra={
                "controller": "nodeclaim.disruption", "error": str(e)[:300]})
            return ""
        return instance_type_drift(claim, its)
