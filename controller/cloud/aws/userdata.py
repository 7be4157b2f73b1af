"""User data for AL2023 nodes: a nodeadm NodeConfig in a MIME multi-part document.

The user's EC2NodeClass userData is merged the way Karpenter does it: the user's parts come first (a MIME document's
parts as they are; a bare NodeConfig or shell script as a part of its own), then Karpenter's NodeConfig, whose values
nodeadm applies last.
"""

from __future__ import annotations

import email
from dataclasses import dataclass, field
from email.mime.multipart import MIMEMultipart
from email.mime.nonmultipart import MIMENonMultipart
from typing import Any

import yaml

from controller.api.models import Taint

BOUNDARY = "//"
NODECONFIG_TYPE = "application/node.eks.aws"


@dataclass
class ClusterInfo:
    """What a node needs to join the cluster."""

    name: str
    endpoint: str
    certificate_authority: str  # base64 PEM, as DescribeCluster returns it
    service_cidr: str = "10.100.0.0/16"


@dataclass
class NodeSettings:
    """Per-NodeClaim kubelet settings Karpenter passes to the node."""

    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    kubelet: dict[str, Any] = field(default_factory=dict)  # EC2NodeClass spec.kubelet


def nodeconfig(cluster: ClusterInfo, node: NodeSettings) -> dict[str, Any]:
    """Karpenter's NodeConfig for one node."""
    config: dict[str, Any] = {}
    k = node.kubelet
    for src, dst in (("maxPods", "maxPods"), ("clusterDNS", "clusterDNS"), ("kubeReserved", "kubeReserved"),
                     ("systemReserved", "systemReserved"), ("evictionHard", "evictionHard"),
                     ("evictionSoft", "evictionSoft"), ("evictionSoftGracePeriod", "evictionSoftGracePeriod"),
                     ("evictionMaxPodGracePeriod", "evictionMaxPodGracePeriod"),
                     ("imageGCHighThresholdPercent", "imageGCHighThresholdPercent"),
                     ("imageGCLowThresholdPercent", "imageGCLowThresholdPercent"), ("cpuCFSQuota", "cpuCFSQuota"),
                     ("podsPerCore", "podsPerCore")):
        if k.get(src) is not None:
            config[dst] = k[src]
    if node.taints:
        config["registerWithTaints"] = [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.taints]
    flags = []
    if node.labels:
        flags.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(node.labels.items())))
    kubelet: dict[str, Any] = {"config": config}
    if flags:
        kubelet["flags"] = flags
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


def _kubelet_args(node: NodeSettings) -> str:
    args = []
    if node.labels:
        args.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(node.labels.items())))
    if node.taints:
        args.append("--register-with-taints=" + ",".join(
            f"{t.key}={t.value}:{t.effect}" for t in node.taints))
    if node.kubelet.get("maxPods") is not None:
        args.append(f"--max-pods={int(node.kubelet['maxPods'])}")
    return " ".join(args)


def al2_user_data(cluster: ClusterInfo, node: NodeSettings, user_data: str | None = None) -> str:
    """The MIME document an AL2 node boots with: the user's shell part first, then /etc/eks/bootstrap.sh."""
    msg = MIMEMultipart("mixed", boundary=BOUNDARY)
    for part in _user_parts(user_data or ""):
        msg.attach(part)
    script = (f"#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n"
              f"/etc/eks/bootstrap.sh '{cluster.name}' --apiserver-endpoint '{cluster.endpoint}' "
              f"--b64-cluster-ca '{cluster.certificate_authority}'")
    if node.kubelet.get("maxPods") is not None:
        script += " --use-max-pods false"
    extra = _kubelet_args(node)
    if extra:
        script += f" \\\n--kubelet-extra-args '{extra}'"
    msg.attach(_part(script + "\n", "text/x-shellscript"))
    return msg.as_string()


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
    """Bottlerocket TOML settings: the user's settings with Karpenter's kubernetes settings merged over them."""
    import tomllib

    try:
        user = tomllib.loads(user_data or "")
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"userData: not valid TOML for Bottlerocket: {e}") from None
    k8s: dict[str, Any] = {"cluster-name": cluster.name, "api-server": cluster.endpoint,
                           "cluster-certificate": cluster.certificate_authority}
    if node.kubelet.get("maxPods") is not None:
        k8s["max-pods"] = int(node.kubelet["maxPods"])
    if node.kubelet.get("clusterDNS"):
        k8s["cluster-dns-ip"] = node.kubelet["clusterDNS"][0]
    if node.labels:
        k8s["node-labels"] = dict(sorted(node.labels.items()))
    if node.taints:
        taints: dict[str, list[str]] = {}
        for t in node.taints:
            taints.setdefault(t.key, []).append(f"{t.value}:{t.effect}")
        k8s["node-taints"] = taints
    return to_toml(_merge(user, {"settings": {"kubernetes": k8s}})) + "\n"
