"""Helpers for tests against the real apiserver: karpy's CRDs (created, or brought up to date on a reused server, and
established), and polling until something holds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client

from controller.api.crds import crd_manifests

T = TypeVar("T")


def _established(ext: Any, name: str) -> bool:
    conditions = ext.read_custom_resource_definition(name).status.conditions or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def _served(custom: Any, crd: dict[str, Any]) -> bool:
    """Whether the apiserver serves the CRD's resource yet: Established can turn True before its handler answers, and
    a create in that gap is a 404 (a busy machine widens it)."""
    spec = crd["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("storage"))
    try:
        custom.list_cluster_custom_object(spec["group"], version, spec["names"]["plural"], limit=1)
    except client.ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def install_crds(api: Any) -> None:
    """Create karpy's CRDs (if absent) and wait until they are established and their resources served."""
    ext = client.ApiextensionsV1Api(api)
    for crd in crd_manifests():
        try:
            ext.create_custom_resource_definition(crd)
        except client.ApiException as e:
            if e.status != 409:
                raise
            # a reused server: bring its CRD up to this version of karpy
            current = ext.read_custom_resource_definition(crd["metadata"]["name"])
            crd = {**crd, "metadata": {**crd["metadata"], "resourceVersion": current.metadata.resource_version}}
            ext.replace_custom_resource_definition(crd["metadata"]["name"], crd)
    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + 180  # generous: the machine is shared
    for crd in crd_manifests():
        while not (_established(ext, crd["metadata"]["name"]) and _served(custom, crd)):
            assert time.monotonic() < deadline, f"CRD {crd['metadata']['name']} not established and served in 180 s"
            time.sleep(0.2)


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.25) -> T:
    """Poll probe until it returns something truthy; fail naming what was awaited."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except client.ApiException as e:
            last = f"ApiException {e.status}"
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {str(last)[:300]})")


def remove_claims_and_nodes(kc: Any, claims: list[str], nodes: list[str]) -> None:
    """Delete a test's NodeClaims and Nodes, finalizers dropped first (nothing runs to remove them)."""
    from controller.kube import resources as R
    from controller.kube.errors import NotFoundError

    for res, names in ((R.NODECLAIMS, claims), (R.NODES, nodes)):
        for name in names:
            try:
                kc.patch(res, name, {"metadata": {"finalizers": []}})
                kc.delete(res, name)
            except NotFoundError:
                continue
