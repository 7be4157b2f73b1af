"""User data per AMI family, as Karpenter's AWS provider writes it.

AL2023: a nodeadm NodeConfig in a MIME multi-part document; AL2: MIME with /etc/eks/bootstrap.sh last; Bottlerocket:
TOML settings; Windows: a PowerShell Start-EKSBootstrap.ps1 call; Custom: the user's userData untouched. The user's
EC2NodeClass userData is merged the way Karpenter does it: the user's parts come first (a MIME document's parts as
they are; a bare NodeConfig or shell script as a part of its own), then Karpenter's, which the node applies last.
"""

from __future__ import annotations

import email
import ipaddress
from dataclasses import dataclass, field
from email.mime.multipart import MIMEMultipart
from email.mime.nonmultipart import MIMENonMultipart
from typing import Any

import yaml

from controller.api import labels as L
from controller.api.models import Taint
from controller.api.taints import UNREGISTERED_TAINT

BOUNDARY = "//"
NODECONFIG_TYPE = "application/node.eks.aws"


@dataclass
class ClusterInfo:
    """What a node needs to join the cluster."""

    name: str
    endpoint: str
    certificate_authority: str  # base64 PEM, as DescribeCluster returns it
    service_cidr: str = ""  # the cluster's Service range (IPv4, or IPv6 on IPv6 clusters); "" while unknown
    ip_family: str = "ipv4"  # ipv4 | ipv6

    def dns_ip(self) -> str:
        """The cluster DNS address nodeadm and bootstrap.sh derive from the Service range: its tenth address."""
        if not self.service_cidr:
            return ""
        return str(ipaddress.ip_network(self.service_cidr, strict=False).network_address + 10)


# Label namespaces the NodeRestriction admission keeps kubelet from setting on its own Node (Karpenter drops every
# label in them from kubelet's flags; registration applies them through the API instead).
KUBELET_FORBIDDEN_LABEL_DOMAINS = ("node-restriction.kubernetes.io", "kubernetes.io", "k8s.io")


def kubelet_labels(labels: dict[str, str]) -> dict[str, str]:
    """The labels kubelet may register itself with: those outside the kubernetes.io and k8s.io namespaces."""
    def forbidden(key: str) -> bool:
        domain = L.label_domain(key)
        return any(domain == d or domain.endswith("." + d) for d in KUBELET_FORBIDDEN_LABEL_DOMAINS)
    return {k: v for k, v in labels.items() if not forbidden(k)}


def with_unregistered_taint(taints: list[Taint]) -> list[Taint]:
    """The taints a node registers with: the NodeClaim's, then karpenter.sh/unregistered:NoExecute, which
    registration removes once it has synced the Node."""
    if any(UNREGISTERED_TAINT.matches(t) for t in taints):
        return list(taints)
    return [*taints, UNREGISTERED_TAINT]


@dataclass
class NodeSettings:
    """Per-NodeClaim kubelet settings Karpenter passes to the node."""

    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    kubelet: dict[str, Any] = field(default_factory=dict)  # EC2NodeClass spec.kubelet


class MissingClusterFactError(ValueError):
    """A cluster fact an AMI family's bootstrap needs (e.g. the service CIDR) could not be resolved."""


def missing_cluster_fact(family: str, cluster: ClusterInfo) -> str:
    """Why an AMI family's bootstrap cannot be written for this cluster ("" when it can): AL2023's NodeConfig needs
    the Service CIDR; every family but Custom needs the API server endpoint."""
    if family == "custom":
        return ""
    if not cluster.endpoint:
        return "the cluster endpoint is unknown (set CLUSTER_ENDPOINT or allow eks:DescribeCluster)"
    if family == "al2023" and not cluster.service_cidr:
        return ("the cluster's service CIDR is unknown (eks:DescribeCluster did not answer and the default/kubernetes "
                "Service could not be read)")
    return ""


def _taint_dict(t: Taint) -> dict[str, str]:
    return {"key": t.key, "value": t.value, "effect": t.effect} if t.value else {"key": t.key, "effect": t.effect}


def _label_flag(labels: dict[str, str]) -> str:
    """kubelet's --node-labels with the labels NodeRestriction lets it set, sorted; "" when none."""
    allowed = kubelet_labels(labels)
    return ("--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(allowed.items()))) if allowed else ""


def nodeconfig(cluster: ClusterInfo, node: NodeSettings) -> dict[str, Any]:
    """Karpenter's NodeConfig for one node: the cluster's endpoint, CA and Service CIDR, the EC2NodeClass kubelet
    block as kubelet configuration with the registration taints, and kubelet-settable labels as a flag."""
    if not cluster.service_cidr:
        raise MissingClusterFactError("resolving cluster CIDR: the service CIDR is unknown")
    # nodeadm takes any kubelet configuration field: the whole block goes inline, as Karpenter passes it
    config: dict[str, Any] = {k: v for k, v in node.kubelet.items() if v is not None}
    config["registerWithTaints"] = [_taint_dict(t) for t in with_unregistered_taint(node.taints)]
    kubelet: dict[str, Any] = {"config": config}
    flag = _label_flag(node.labels)
    if flag:
        kubelet["flags"] = [flag]
    return {"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig",
            "spec": {"cluster": {"name": cluster.name, "apiServerEndpoint": cluster.endpoint,
                                 "certificateAuthority": cluster.certificate_authority, "cidr": cluster.service_cidr},
                     "kubelet": kubelet}}


def _user_parts(user_data: str) -> list[MIMENonMultipart]:
    text = user_data.strip()
    if not text:
        return []
    if text.lower().startswith(("mime-version", "content-type")):
        msg = email.message_from_string(text)
        if not msg.is_multipart():
            raise ValueError("userData: a MIME document must be multipart/mixed")
        parts = []
        for p in msg.walk():
            if p.is_multipart():
                continue
            payload = p.get_payload(decode=True)
            body = payload.decode() if isinstance(payload, bytes) else str(p.get_payload())
            parts.append(_part(body, p.get_content_type()))
        return parts
    if text.startswith("#!"):
        return [_part(text, "text/x-shellscript")]
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        doc = None
    if isinstance(doc, dict) and doc.get("kind") == "NodeConfig":
        return [_part(text, NODECONFIG_TYPE)]
    raise ValueError("userData: expected a MIME multi-part document, a NodeConfig or a shell script (#!)")


def _part(body: str, content_type: str) -> MIMENonMultipart:
    maintype, subtype = content_type.split("/", 1)
    part = MIMENonMultipart(maintype, subtype, charset="us-ascii")
    part.set_payload(body)
    return part


def al2023_user_data(cluster: ClusterInfo, node: NodeSettings, user_data: str | None = None) -> str:
    """The MIME document an AL2023 node boots with: the user's parts, then Karpenter's NodeConfig."""
    msg = MIMEMultipart("mixed", boundary=BOUNDARY)
    for part in _user_parts(user_data or ""):
        msg.attach(part)
    msg.attach(_part(yaml.safe_dump(nodeconfig(cluster, node), sort_keys=False), NODECONFIG_TYPE))
    return msg.as_string()


def _joined(flag: str, values: Any, sep: str) -> str:
    if not values:
        return ""
    return f"{flag}=" + ",".join(f"{k}{sep}{v}" for k, v in sorted(dict(values).items()))


def kubelet_args(node: NodeSettings) -> list[str]:
    """kubelet flags for the families configured by command line (AL2, Windows): labels kubelet may set, the
    registration taints and the EC2NodeClass kubelet block."""
    k = node.kubelet
    args = [_label_flag(node.labels),
            "--register-with-taints=" + ",".join(str(t) for t in with_unregistered_taint(node.taints))]
    if k.get("maxPods") is not None:
        args.append(f"--max-pods={int(k['maxPods'])}")
    if k.get("podsPerCore") is not None:
        args.append(f"--pods-per-core={int(k['podsPerCore'])}")
    args += [_joined("--system-reserved", k.get("systemReserved"), "="),
             _joined("--kube-reserved", k.get("kubeReserved"), "="),
             _joined("--eviction-hard", k.get("evictionHard"), "<"),
             _joined("--eviction-soft", k.get("evictionSoft"), "<"),
             _joined("--eviction-soft-grace-period", k.get("evictionSoftGracePeriod"), "=")]
    for src, flag in (("evictionMaxPodGracePeriod", "--eviction-max-pod-grace-period"),
                      ("imageGCHighThresholdPercent", "--image-gc-high-threshold"),
                      ("imageGCLowThresholdPercent", "--image-gc-low-threshold")):
        if k.get(src) is not None:
            args.append(f"{flag}={int(k[src])}")
    if k.get("cpuCFSQuota") is not None:
        args.append(f"--cpu-cfs-quota={'true' if k['cpuCFSQuota'] else 'false'}")
    return [a for a in args if a]


def _dns_ip(cluster: ClusterInfo, node: NodeSettings) -> str:
    """kubelet.clusterDNS's first address when set, else the one derived from the cluster's Service range."""
    dns = node.kubelet.get("clusterDNS") or []
    return str(dns[0]) if dns else cluster.dns_ip()


def _ipv6(cluster: ClusterInfo, node: NodeSettings) -> bool:
    dns = _dns_ip(cluster, node)
    return cluster.ip_family == "ipv6" or (bool(dns) and ipaddress.ip_address(dns).version == 6)


def al2_user_data(cluster: ClusterInfo, node: NodeSettings, user_data: str | None = None) -> str:
    """The MIME document an AL2 node boots with: the user's parts first, then /etc/eks/bootstrap.sh."""
    msg = MIMEMultipart("mixed", boundary=BOUNDARY)
    for part in _user_parts(user_data or ""):
        msg.attach(part)
    script = (f"#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n"
              f"/etc/eks/bootstrap.sh '{cluster.name}' --apiserver-endpoint '{cluster.endpoint}'")
    if cluster.certificate_authority:
        script += f" --b64-cluster-ca '{cluster.certificate_authority}'"
    if _ipv6(cluster, node):
        script += " \\\n--ip-family ipv6"
    dns = _dns_ip(cluster, node)
    if dns:
        script += f" \\\n--dns-cluster-ip '{dns}'"
    if node.kubelet.get("maxPods") is not None:
        script += " \\\n--use-max-pods false"
    script += f" \\\n--kubelet-extra-args '{' '.join(kubelet_args(node))}'"
    msg.attach(_part(script + "\n", "text/x-shellscript"))
    return msg.as_string()


def windows_user_data(cluster: ClusterInfo, node: NodeSettings, user_data: str | None = None) -> str:
    """The PowerShell a Windows node boots with: the user's script, then Start-EKSBootstrap.ps1 with the cluster's
    endpoint and CA, kubelet's flags and the cluster DNS address."""
    lines = ["<powershell>"]
    if user_data:
        lines.append(user_data)
    lines.append('[string]$EKSBootstrapScriptFile = "$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1"')
    call = f"& $EKSBootstrapScriptFile -EKSClusterName '{cluster.name}' -APIServerEndpoint '{cluster.endpoint}'"
    if cluster.certificate_authority:
        call += f" -Base64ClusterCA '{cluster.certificate_authority}'"
    call += f" -KubeletExtraArgs '{' '.join(kubelet_args(node))}'"
    dns = _dns_ip(cluster, node)
    if dns:
        call += f" -DNSClusterIP '{dns}'"
    lines += [call, "</powershell>"]
    return "\n".join(lines)


def custom_user_data(cluster: ClusterInfo, node: NodeSettings, user_data: str | None = None) -> str:
    """Custom AMIs boot with the EC2NodeClass userData exactly as written: the user bootstraps the node."""
    return user_data or ""


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_key(k: str) -> str:
    return k if k.replace("-", "").replace("_", "").isalnum() else _toml_value(k)


def to_toml(doc: dict[str, Any], prefix: str = "") -> str:
    """A minimal TOML writer for Bottlerocket settings (tables, strings, numbers, booleans, lists)."""
    scalars = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    out = ([f"[{prefix}]"] if prefix and scalars else []) + scalars
    for k, v in doc.items():
        if isinstance(v, dict):
            sub = to_toml(v, f"{prefix}.{_toml_key(k)}" if prefix else _toml_key(k))
            if sub:
                out.append(sub)
    return "\n".join(out)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def bottlerocket_user_data(cluster: ClusterInfo, node: NodeSettings, user_data: str | None = None) -> str:
    """Bottlerocket TOML settings: the user's settings with Karpenter's merged over them. Karpenter's cluster name,
    API server, certificate, kubelet block and taints replace the user's; node labels are merged (Karpenter's win)."""
    import tomllib

    try:
        user = tomllib.loads(user_data or "")
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"userData: not valid TOML for Bottlerocket: {e}") from None
    k = node.kubelet
    k8s: dict[str, Any] = {"cluster-name": cluster.name, "api-server": cluster.endpoint}
    if cluster.certificate_authority:
        k8s["cluster-certificate"] = cluster.certificate_authority
    dns = _dns_ip(cluster, node)
    if dns:
        k8s["cluster-dns-ip"] = dns
    for src, dst in (("maxPods", "max-pods"), ("podsPerCore", "pods-per-core"),
                     ("evictionMaxPodGracePeriod", "eviction-max-pod-grace-period")):
        if k.get(src) is not None:
            k8s[dst] = int(k[src])
    for src, dst in (("systemReserved", "system-reserved"), ("kubeReserved", "kube-reserved"),
                     ("evictionHard", "eviction-hard"), ("evictionSoft", "eviction-soft"),
                     ("evictionSoftGracePeriod", "eviction-soft-grace-period")):
        if k.get(src) is not None:
            k8s[dst] = {str(kk): str(vv) for kk, vv in sorted(dict(k[src]).items())}
    for src, dst in (("imageGCHighThresholdPercent", "image-gc-high-threshold-percent"),
                     ("imageGCLowThresholdPercent", "image-gc-low-threshold-percent")):
        if k.get(src) is not None:
            k8s[dst] = str(int(k[src]))
    if k.get("cpuCFSQuota") is not None:
        k8s["cpu-cfs-quota"] = bool(k["cpuCFSQuota"])
    user_k8s = ((user.get("settings") or {}).get("kubernetes") or {})
    labels = dict(user_k8s.get("node-labels") or {})
    labels.update(kubelet_labels(node.labels))
    if labels:
        k8s["node-labels"] = dict(sorted(labels.items()))
    taints: dict[str, list[str]] = {}
    for t in with_unregistered_taint(node.taints):
        taints.setdefault(t.key, []).append(f"{t.value}:{t.effect}")
    out = _merge(user, {"settings": {"kubernetes": k8s}})
    out["settings"]["kubernetes"]["node-taints"] = taints  # replaced, not merged, as Karpenter does
    return to_toml(out) + "\n"


RENDERERS = {"al2023": al2023_user_data, "al2": al2_user_data, "bottlerocket": bottlerocket_user_data,
             "custom": custom_user_data, "windows2019": windows_user_data, "windows2022": windows_user_data,
             "windows2025": windows_user_data}
