"""Karpenter's nodeclass hash controller (pkg/controllers/nodeclass/hash): the EC2NodeClass carries the hash of its
spec and the hash version as annotations; NodeClaims get the same pair at launch (LifecycleController._populate)."""

from __future__ import annotations

import contextlib
from typing import Any

from controller.api import conditions as C
from controller.api import labels as L
from controller.api.nodeclasshash import EC2NODECLASS_HASH_VERSION, hash_annotations
from controller.kube import resources as R
from controller.kube.client import KubeClient
from controller.kube.errors import NotFoundError
from controller.state.cluster import Cluster


def reconcile_hash(client: KubeClient, cluster: Cluster, nodeclass: dict[str, Any]) -> dict[str, Any]:
    """Karpenter's nodeclass hash controller: annotate the EC2NodeClass with the hash of its spec and the hash
    version; when the class's stored version is not the current one, first re-stamp its NodeClaims whose version
    differs (a new hash function is not a drift; a Drifted NodeClaim gets the version only, as in Karpenter).
    Returns the class as written (or as given when nothing changed)."""
    meta = nodeclass["metadata"]
    have = meta.get("annotations") or {}
    want = hash_annotations(nodeclass)
    if all(have.get(k) == v for k, v in want.items()):
        return nodeclass
    if have.get(L.EC2NODECLASS_HASH_VERSION) != EC2NODECLASS_HASH_VERSION:
        for claim in cluster.nodeclaims_for_nodeclass(meta["name"]):
            cmeta = claim["metadata"]
            if (cmeta.get("annotations") or {}).get(L.EC2NODECLASS_HASH_VERSION) == EC2NODECLASS_HASH_VERSION:
                continue
            # an already Drifted NodeClaim keeps its hash: whether it still is cannot be told across hash functions
            stamp = {L.EC2NODECLASS_HASH_VERSION: EC2NODECLASS_HASH_VERSION} if C.get(claim.get("status"), "Drifted") \
                is not None else want
            with contextlib.suppress(NotFoundError):
                client.patch(R.NODECLAIMS, cmeta["name"], {"metadata": {"annotations": stamp}})
    try:
        return client.patch(R.EC2NODECLASSES, meta["name"], {"metadata": {
            "annotations": want, "resourceVersion": meta.get("resourceVersion")}})
    except NotFoundError:
        return nodeclass
