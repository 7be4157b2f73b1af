"""karpy's CRDs on a test apiserver: created, or brought up to date on a reused server, and established."""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from controller.api.crds import crd_manifests


def _established(ext: Any, name: str) -> bool:
    conditions = ext.read_custom_resource_definition(name).status.conditions or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def install_crds(api: Any) -> None:
    """Create karpy's CRDs (if absent) and wait until they are established."""
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
    deadline = time.monotonic() + 30
    for crd in crd_manifests():
        while not _established(ext, crd["metadata"]["name"]):
            assert time.monotonic() < deadline, f"CRD {crd['metadata']['name']} not established in 30 s"
            time.sleep(0.2)


