"""The cloud provider, metered: Karpenter's cloudprovider/metrics decorator over any CloudProvider."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from controller.cloud.provider import LaunchedNode, LaunchRequest, NodeClass
from controller.metrics import (
    CLOUDPROVIDER_DURATION,
    CLOUDPROVIDER_ERROR_TYPES,
    CLOUDPROVIDER_ERRORS,
    bounded,
    controller_name,
)


class MeteredCloudProvider:
    """A CloudProvider whose Create, Delete, Get, List and GetInstanceTypes are timed into
    karpenter_cloudprovider_duration_seconds and whose errors are counted in karpenter_cloudprovider_errors_total,
    labelled by controller, method and provider ("aws", "fake"); everything else is the wrapped provider's."""

    def __init__(self, inner: Any, provider: str) -> None:
        self.inner = inner
        self.provider = provider

    def _call(self, method: str, fn: Callable[..., Any], *args: Any) -> Any:
        labels = {"controller": controller_name(), "method": method, "provider": self.provider}
        start = time.perf_counter()
        try:
            return fn(*args)
        except Exception as e:
            CLOUDPROVIDER_ERRORS.labels(**labels, error=bounded(type(e).__name__, CLOUDPROVIDER_ERROR_TYPES, "")).inc()
            raise
        finally:
            CLOUDPROVIDER_DURATION.labels(**labels).observe(time.perf_counter() - start)

    def create(self, request: LaunchRequest, nodeclass: NodeClass) -> LaunchedNode:
        """CloudProvider.create, metered."""
        launched: LaunchedNode = self._call("Create", self.inner.create, request, nodeclass)
        return launched

    def delete(self, provider_id: str) -> None:
        """CloudProvider.delete, metered."""
        self._call("Delete", self.inner.delete, provider_id)

    def get(self, provider_id: str) -> Any:
        """CloudProvider.get, metered."""
        return self._call("Get", self.inner.get, provider_id)

    def list(self) -> Any:
        """CloudProvider.list, metered."""
        return self._call("List", self.inner.list)

    def get_instance_types(self, nodeclass: NodeClass) -> Any:
        """CloudProvider.get_instance_types, metered."""
        return self._call("GetInstanceTypes", self.inner.get_instance_types, nodeclass)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
