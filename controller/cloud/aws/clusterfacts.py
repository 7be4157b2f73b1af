"""Cluster facts node bootstrap needs: API endpoint, CA bundle, Service CIDR and IP family.

Settings CLUSTER_ENDPOINT / CLUSTER_CA_BUNDLE win; then EKS DescribeCluster (endpoint, CA, kubernetesNetworkConfig's
serviceIpv4Cidr / serviceIpv6Cidr and ipFamily), as Karpenter's operator reads them; where DescribeCluster is not
available (no eks:DescribeCluster permission, self-managed clusters) the Service CIDR is learned from the cluster:
the default/kubernetes Service's ClusterIP is the first address of the range.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
import threading
from collections.abc import Callable
from typing import Any

from controller.cloud.aws.userdata import ClusterInfo

log = logging.getLogger("karpy.controller")

# The prefix EKS gives a Service range: /16 for IPv4 (10.100.0.0/16, 172.20.0.0/16), /108 for IPv6.
IPV4_SERVICE_PREFIX = 16
IPV6_SERVICE_PREFIX = 108


def cidr_from_cluster_ip(cluster_ip: str) -> str:
    """The Service range a kubernetes Service ClusterIP lies in, as EKS sizes it: 10.100.0.1 -> 10.100.0.0/16,
    172.20.0.1 -> 172.20.0.0/16, fd12:3456::1 -> fd12:3456::/108. ValueError when it is not an address."""
    try:
        ip = ipaddress.ip_address(cluster_ip.strip())
    except ValueError:
        raise ValueError(f"the kubernetes Service's clusterIP {cluster_ip[:64]!r} is not an IP address") from None
    prefix = IPV4_SERVICE_PREFIX if ip.version == 4 else IPV6_SERVICE_PREFIX
    return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))


def _describe_cluster(eks: Any, name: str) -> dict[str, Any]:
    try:
        return dict(eks.describe_cluster(name=name)["cluster"])
    except Exception as e:  # EKS is optional: no permission, or a self-managed cluster
        log.info("describing the EKS cluster failed; learning cluster facts from the cluster",
                 extra={"cluster": name, "error": str(e)[:200]})
        return {}


class ClusterFacts:
    """Resolves ClusterInfo once and caches it (the facts do not change while a cluster lives); a failed
    resolution is retried on the next call."""

    def __init__(self, *, name: str, endpoint: str = "", ca_bundle: str = "", eks: Any = None,
                 kubernetes_service_ip: Callable[[], str] | None = None, fallback_endpoint: str = "",
                 fallback_ca_file: str | None = None) -> None:
        self.name = name
        self._endpoint, self._ca = endpoint, ca_bundle
        self._eks = eks
        self._service_ip = kubernetes_service_ip
        self._fallback_endpoint, self._fallback_ca_file = fallback_endpoint, fallback_ca_file
        self._lock = threading.Lock()
        self._info: ClusterInfo | None = None

    def get(self) -> ClusterInfo:
        """The cluster facts; service_cidr is "" while it cannot be resolved (families that need it refuse to
        bootstrap and the EC2NodeClass says why)."""
        with self._lock:
            if self._info is not None and self._info.service_cidr:
                return self._info
        info = self._resolve()
        with self._lock:
            self._info = info
        return info

    def _resolve(self) -> ClusterInfo:
        endpoint, ca, cidr, family = self._endpoint, self._ca, "", "ipv4"
        if self._eks is not None:
            cluster = _describe_cluster(self._eks, self.name)
            endpoint = endpoint or str(cluster.get("endpoint") or "")
            ca = ca or str((cluster.get("certificateAuthority") or {}).get("data") or "")
            net = cluster.get("kubernetesNetworkConfig") or {}
            family = str(net.get("ipFamily") or "ipv4").lower()
            cidr = str(net.get("serviceIpv6Cidr" if family == "ipv6" else "serviceIpv4Cidr") or "")
            try:
                cidr = str(ipaddress.ip_network(cidr, strict=False)) if cidr else ""
            except ValueError:
                log.warning("DescribeCluster's service CIDR is not a network", extra={"cidr": cidr[:64]})
                cidr = ""
        if not cidr and self._service_ip is not None:
            try:
                cidr = cidr_from_cluster_ip(self._service_ip())
                family = "ipv6" if ":" in cidr else "ipv4"
            except Exception as e:  # the API server unreachable or the Service odd: unresolved, retried later
                log.warning("learning the service CIDR from the kubernetes Service failed",
                            extra={"error": str(e)[:200]})
        endpoint = endpoint or self._fallback_endpoint
        if not ca and self._fallback_ca_file:
            try:
                with open(self._fallback_ca_file, "rb") as f:
                    ca = base64.b64encode(f.read()).decode()
            except OSError:
                ca = ""
        return ClusterInfo(self.name, endpoint, ca, service_cidr=cidr, ip_family=family)
