"""Each environment's NodePools and EC2NodeClasses, as v1 manifests built by small helpers.

Per-purpose pools, the shape platform teams run: system-critical (tainted CriticalAddonsOnly), monitoring, cicd and
cron (tainted dedicated=<purpose>), service, and default. dev runs mostly on spot; prod keeps system-critical and
monitoring on on-demand.
"""

from __future__ import annotations

from typing import Any

NODECLASS_REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}


def nodepool(name: str, *, weight: int, capacity_types: list[str], categories: list[str],
             taint: tuple[str, str] | None = None, limits: dict[str, str] | None = None,
             disruption: dict[str, Any] | None = None, expire_after: str = "720h",
             min_generation: int = 5) -> dict[str, Any]:
    """A NodePool manifest: labelled workload-type=<name>, optionally tainted, within limits."""
    spec: dict[str, Any] = {
        "weight": weight,
        "template": {
            "metadata": {"labels": {"workload-type": name}},
            "spec": {"nodeClassRef": NODECLASS_REF, "expireAfter": expire_after, "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": categories},
                {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": [str(min_generation)]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]},
        },
    }
    if taint:
        spec["template"]["spec"]["taints"] = [{"key": taint[0], "value": taint[1], "effect": "NoSchedule"}]
    if limits:
        spec["limits"] = limits
    if disruption:
        spec["disruption"] = disruption
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def nodeclass(cluster: str, name: str = "default", alias: str = "al2023@latest") -> dict[str, Any]:
    """An EC2NodeClass selecting the cluster's discovery-tagged subnets and security groups; the stack fills `role`
    with a reference to the node role it creates."""
    selector = [{"tags": {"karpenter.sh/discovery": cluster}}]
    return {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name},
            "spec": {"amiSelectorTerms": [{"alias": alias}], "subnetSelectorTerms": selector,
                     "securityGroupSelectorTerms": selector,
                     "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": True,
                                              "ebs": {"volumeSize": "50Gi", "volumeType": "gp3", "encrypted": True}}]}}


def pools(env: str, cluster: str) -> list[dict[str, Any]]:
    """The environment's EC2NodeClass and NodePools."""
    spot_first = ["spot", "on-demand"]
    on_demand = ["on-demand"]
    prod = env == "prod"
    empty = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1m"}
    return [
        nodeclass(cluster),
        nodepool("system-critical", weight=100, capacity_types=on_demand if env != "dev" else spot_first,
                 categories=["m"], taint=("CriticalAddonsOnly", "true"), limits={"cpu": "64"},
                 disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m",
                             "budgets": [{"nodes": "1"}]}),
        nodepool("monitoring", weight=50, capacity_types=on_demand if prod else spot_first, categories=["r"],
                 taint=("dedicated", "monitoring"), limits={"cpu": "128", "memory": "1024Gi"}),
        nodepool("cicd", weight=40, capacity_types=["spot"], categories=["c", "m"], taint=("dedicated", "cicd"),
                 limits={"cpu": "256"}, disruption=empty, expire_after="24h"),
        nodepool("cron", weight=30, capacity_types=spot_first, categories=["c", "m", "r"],
                 taint=("dedicated", "cron"), disruption=empty, expire_after="168h"),
        nodepool("service", weight=20, capacity_types=spot_first, categories=["c", "m", "r"],
                 limits={"cpu": "1000" if prod else "200"},
                 disruption={"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5m",
                             "budgets": [{"nodes": "10%"}, {"nodes": "0", "schedule": "0 9 * * mon-fri",
                                                            "duration": "8h", "reasons": ["Underutilized"]}]}),
        nodepool("default", weight=10, capacity_types=spot_first, categories=["c", "m", "r"],
                 limits={"cpu": "2000" if prod else "400"}),
    ]
