"""Instance termination and the NodeClaim conditions termination writes, shared by node termination (Karpenter's
awaitInstanceTermination) and the NodeClaim finalizer, which both ask the cloud provider to delete the instance and
both mark the NodeClaim InstanceTerminating."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from controller.api import conditions as C
from controller.cloud.errors import NodeClaimNotFoundError
from controller.cloud.provider import CloudProvider
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import ConflictError, NotFoundError
from controller.kube.workqueue import Result
from controller.state.views import NodeClaimView
from controller.termination import drain as D

Obj = dict[str, Any]

DRAINED = "Drained"
VOLUMES_DETACHED = "VolumesDetached"
INSTANCE_TERMINATING = "InstanceTerminating"
DISRUPTION_REASON = "DisruptionReason"


def instance_gone(cloud: CloudProvider, pid: str) -> bool:
    """Whether the cloud no longer has the instance."""
    try:
        cloud.get(pid)
    except NodeClaimNotFoundError:
        return True
    return False


def terminate_instance(cloud: CloudProvider, pid: str, status: Obj, now: float, generation: int | None) -> bool:
    """Ask the cloud to terminate the instance once (InstanceTerminating turns True in `status`), then only look;
    True once the cloud says it is gone."""
    if not C.is_true(status, INSTANCE_TERMINATING):
        with contextlib.suppress(NodeClaimNotFoundError):
            cloud.delete(pid)
        D.set_condition(status, INSTANCE_TERMINATING, "True", INSTANCE_TERMINATING, "", now, generation)
    return instance_gone(cloud, pid)


def write_conditions(client: KubeClient, claim: Mapping[str, Any], status: Obj) -> NodeClaimView | Result | None:
    """Write the NodeClaim's conditions to the status subresource, locked on the resourceVersion read at the start of
    the pass (a merge patch replaces the whole list); the NodeClaim as written, None when it is gone, or a requeue
    when another writer moved first."""
    view = NodeClaimView.of(claim)
    body = {"metadata": {"resourceVersion": view.resource_version or None},
            "status": {"conditions": status.get("conditions") or []}}
    try:
        return NodeClaimView.of(client.patch(R.NODECLAIMS, view.name, body, subresource="status"))
    except NotFoundError:
        return None
    except ConflictError:
        return Result(requeue_after=0.1)
