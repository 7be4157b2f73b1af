"""User data of every AMI family, field by field, and the cluster facts it is written from."""

from __future__ import annotations

import base64
import email
import shlex
import tomllib

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from controller.api.models import Taint
from controller.cloud.aws.clusterfacts import ClusterFacts, cidr_from_cluster_ip
from controller.cloud.aws.userdata import (
    RENDERERS,
    ClusterInfo,
    MissingClusterFactError,
    NodeSettings,
    kubelet_args,
    kubelet_labels,
    missing_cluster_fact,
)

CLUSTER = ClusterInfo("prod", "https://ABC.gr7.us-east-1.eks.amazonaws.com", "LS0tQ0E=", "172.20.0.0/16")
KUBELET = {"maxPods": 42, "podsPerCore": 4, "systemReserved": {"cpu": "100m", "memory": "100Mi"},
           "kubeReserved": {"cpu": "200m"}, "evictionHard": {"memory.available": "5%"},
           "evictionSoft": {"nodefs.available": "10%"}, "evictionSoftGracePeriod": {"nodefs.available": "1m0s"},
           "evictionMaxPodGracePeriod": 60, "imageGCHighThresholdPercent": 85, "imageGCLowThresholdPercent": 80,
           "cpuCFSQuota": False}
LABELS = {"karpenter.sh/nodepool": "default", "team": "a", "kubernetes.io/foo": "x",
          "node-restriction.kubernetes.io/x": "y", "example.k8s.io/z": "1", "topology.kubernetes.io/zone": "us-east-1a"}
NODE = NodeSettings(LABELS, [Taint("dedicated", "gpu", "NoSchedule")], KUBELET)


def _parts(doc: str) -> list[tuple[str, str]]:
    msg = email.message_from_string(doc)
    return [(p.get_content_type(), str(p.get_payload())) for p in msg.walk() if not p.is_multipart()]


def test_kubelet_labels_leave_out_what_node_restriction_refuses():
    assert kubelet_labels(LABELS) == {"karpenter.sh/nodepool": "default", "team": "a"}


def test_al2023_nodeconfig_field_by_field():
    parts = _parts(RENDERERS["al2023"](CLUSTER, NODE, "#!/bin/bash\necho user"))
    assert [t for t, _ in parts] == ["text/x-shellscript", "application/node.eks.aws"]
    spec = yaml.safe_load(parts[1][1])["spec"]
    assert spec["cluster"] == {"name": "prod", "apiServerEndpoint": CLUSTER.endpoint,
                               "certificateAuthority": "LS0tQ0E=", "cidr": "172.20.0.0/16"}
    config = spec["kubelet"]["config"]
    assert {k: v for k, v in config.items() if k != "registerWithTaints"} == KUBELET
    assert config["registerWithTaints"] == [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                                            {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]
    assert spec["kubelet"]["flags"] == ["--node-labels=karpenter.sh/nodepool=default,team=a"]


def test_al2023_without_service_cidr_refuses():
    with pytest.raises(MissingClusterFactError, match="service CIDR"):
        RENDERERS["al2023"](ClusterInfo("prod", "https://x", "Q0E="), NodeSettings(), None)
    assert "service CIDR" in missing_cluster_fact("al2023", ClusterInfo("prod", "https://x", "Q0E="))
    assert missing_cluster_fact("al2", ClusterInfo("prod", "https://x", "Q0E=")) == ""
    assert "endpoint" in missing_cluster_fact("bottlerocket", ClusterInfo("prod", "", ""))
    assert missing_cluster_fact("custom", ClusterInfo("prod", "", "")) == ""


def test_kubelet_args_carry_the_whole_kubelet_block():
    assert kubelet_args(NODE) == [
        "--node-labels=karpenter.sh/nodepool=default,team=a",
        "--register-with-taints=dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute",
        "--max-pods=42", "--pods-per-core=4", "--system-reserved=cpu=100m,memory=100Mi", "--kube-reserved=cpu=200m",
        "--eviction-hard=memory.available<5%", "--eviction-soft=nodefs.available<10%",
        "--eviction-soft-grace-period=nodefs.available=1m0s", "--eviction-max-pod-grace-period=60",
        "--image-gc-high-threshold=85", "--image-gc-low-threshold=80", "--cpu-cfs-quota=false"]


def test_al2_bootstrap_is_last_with_dns_from_the_service_cidr():
    parts = _parts(RENDERERS["al2"](CLUSTER, NODE, "#!/bin/bash\necho user"))
    assert [t for t, _ in parts] == ["text/x-shellscript", "text/x-shellscript"]
    assert parts[0][1] == "#!/bin/bash\necho user"
    words = shlex.split(parts[1][1].split("\n", 2)[2].replace("\\\n", " "))
    assert words[:2] == ["/etc/eks/bootstrap.sh", "prod"]
    flags = dict(zip(words[2::2], words[3::2], strict=True))
    assert flags["--apiserver-endpoint"] == CLUSTER.endpoint and flags["--b64-cluster-ca"] == "LS0tQ0E="
    assert flags["--dns-cluster-ip"] == "172.20.0.10" and flags["--use-max-pods"] == "false"
    assert "--ip-family" not in flags
    assert flags["--kubelet-extra-args"] == " ".join(kubelet_args(NODE))


def test_al2_ipv6_and_cluster_dns_wins():
    v6 = ClusterInfo("prod", "https://x", "Q0E=", "fd30:1c53:5f8a::/108", "ipv6")
    script = _parts(RENDERERS["al2"](v6, NodeSettings(), None))[0][1]
    assert "--ip-family ipv6" in script and "--dns-cluster-ip 'fd30:1c53:5f8a::a'" in script
    dns = NodeSettings(kubelet={"clusterDNS": ["10.0.0.53"]})
    assert "--dns-cluster-ip '10.0.0.53'" in _parts(RENDERERS["al2"](CLUSTER, dns, None))[0][1]


def test_bottlerocket_settings_field_by_field_with_karpenters_precedence():
    user = ('[settings.kubernetes]\ncluster-name = "other"\nmax-pods = 5\n[settings.kubernetes.node-labels]\n'
            'mine = "kept"\nteam = "theirs"\n[settings.kubernetes.node-taints]\nold = ["v:NoSchedule"]\n'
            '[settings.host-containers.admin]\nenabled = true\n')
    doc = tomllib.loads(RENDERERS["bottlerocket"](CLUSTER, NODE, user))
    k8s = doc["settings"]["kubernetes"]
    assert doc["settings"]["host-containers"] == {"admin": {"enabled": True}}  # the user's other settings stay
    assert k8s["cluster-name"] == "prod" and k8s["api-server"] == CLUSTER.endpoint
    assert k8s["cluster-certificate"] == "LS0tQ0E=" and k8s["cluster-dns-ip"] == "172.20.0.10"
    assert k8s["node-labels"] == {"karpenter.sh/nodepool": "default", "mine": "kept", "team": "a"}
    assert k8s["node-taints"] == {"dedicated": ["gpu:NoSchedule"], "karpenter.sh/unregistered": [":NoExecute"]}
    assert (k8s["max-pods"], k8s["pods-per-core"], k8s["eviction-max-pod-grace-period"]) == (42, 4, 60)
    assert k8s["system-reserved"] == {"cpu": "100m", "memory": "100Mi"} and k8s["kube-reserved"] == {"cpu": "200m"}
    assert k8s["eviction-hard"] == {"memory.available": "5%"} and k8s["eviction-soft"] == {"nodefs.available": "10%"}
    assert k8s["eviction-soft-grace-period"] == {"nodefs.available": "1m0s"}
    assert (k8s["image-gc-high-threshold-percent"], k8s["image-gc-low-threshold-percent"]) == ("85", "80")
    assert k8s["cpu-cfs-quota"] is False


def test_bottlerocket_bad_toml_is_named():
    with pytest.raises(ValueError, match="userData: not valid TOML"):
        RENDERERS["bottlerocket"](CLUSTER, NODE, "[settings")


@pytest.mark.parametrize("family", ["windows2019", "windows2022", "windows2025"])
def test_windows_powershell_bootstrap(family):
    script = RENDERERS[family](CLUSTER, NODE, "Write-Host hello")
    lines = script.split("\n")
    assert lines[0] == "<powershell>" and lines[1] == "Write-Host hello" and lines[-1] == "</powershell>"
    assert "Start-EKSBootstrap.ps1" in lines[2]
    call = lines[3]
    assert call.startswith("& $EKSBootstrapScriptFile -EKSClusterName 'prod' ")
    assert f"-APIServerEndpoint '{CLUSTER.endpoint}'" in call and "-Base64ClusterCA 'LS0tQ0E='" in call
    assert f"-KubeletExtraArgs '{' '.join(kubelet_args(NODE))}'" in call and "-DNSClusterIP '172.20.0.10'" in call


def test_custom_is_passed_through_untouched():
    user = "#!/bin/bash\n/opt/my-bootstrap --whatever\n"
    assert RENDERERS["custom"](ClusterInfo("prod", "", ""), NODE, user) == user
    assert RENDERERS["custom"](ClusterInfo("prod", "", ""), NODE, None) == ""


@pytest.mark.parametrize(("ip", "cidr"), [("10.100.0.1", "10.100.0.0/16"), ("172.20.0.1", "172.20.0.0/16"),
                                          ("10.96.0.1", "10.96.0.0/16"), ("fd12:3456::1", "fd12:3456::/108")])
def test_service_cidr_from_the_kubernetes_service(ip, cidr):
    assert cidr_from_cluster_ip(ip) == cidr


def test_bad_cluster_ip_is_named():
    with pytest.raises(ValueError, match="clusterIP 'None' is not an IP"):
        cidr_from_cluster_ip("None")


def _eks() -> tuple[object, Stubber]:
    # EKS is not served by LocalStack: DescribeCluster is stubbed
    eks = boto3.client("eks", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return eks, Stubber(eks)


def test_cluster_facts_from_describe_cluster_settings_win():
    eks, stub = _eks()
    stub.add_response("describe_cluster", {"cluster": {
        "name": "prod", "endpoint": "https://eks", "certificateAuthority": {"data": "RUtT"},
        "kubernetesNetworkConfig": {"serviceIpv4Cidr": "172.20.0.0/16", "ipFamily": "ipv4"}}}, {"name": "prod"})
    with stub:
        facts = ClusterFacts(name="prod", endpoint="https://mine", eks=eks,
                             kubernetes_service_ip=lambda: pytest.fail("DescribeCluster answered"))
        info = facts.get()
        assert facts.get() is info  # cached: one DescribeCluster
    assert (info.endpoint, info.certificate_authority, info.service_cidr, info.ip_family) == (
        "https://mine", "RUtT", "172.20.0.0/16", "ipv4")
    stub.assert_no_pending_responses()


def test_cluster_facts_ipv6_from_describe_cluster():
    eks, stub = _eks()
    stub.add_response("describe_cluster", {"cluster": {
        "name": "prod", "endpoint": "https://eks", "certificateAuthority": {"data": "RUtT"},
        "kubernetesNetworkConfig": {"serviceIpv6Cidr": "fd30:1c53:5f8a::/108", "ipFamily": "ipv6"}}},
        {"name": "prod"})
    with stub:
        info = ClusterFacts(name="prod", eks=eks).get()
    assert (info.service_cidr, info.ip_family, info.dns_ip()) == ("fd30:1c53:5f8a::/108", "ipv6", "fd30:1c53:5f8a::a")


def test_cluster_facts_learned_from_the_cluster_when_eks_refuses(tmp_path):
    eks, stub = _eks()
    stub.add_client_error("describe_cluster", "AccessDeniedException", "not authorized", 403)
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"PEM")
    answers = iter(["", "10.100.0.1"])

    def service_ip() -> str:
        ip = next(answers)
        if not ip:
            raise ConnectionError("apiserver not up yet")
        return ip

    stub.add_client_error("describe_cluster", "AccessDeniedException", "not authorized", 403)
    with stub:
        facts = ClusterFacts(name="prod", eks=eks, kubernetes_service_ip=service_ip,
                             fallback_endpoint="https://10.0.0.1:6443", fallback_ca_file=str(ca))
        first = facts.get()
        assert first.service_cidr == "" and missing_cluster_fact("al2023", first)
        second = facts.get()  # unresolved facts are asked again
    assert (second.endpoint, second.service_cidr) == ("https://10.0.0.1:6443", "10.100.0.0/16")
    assert base64.b64decode(second.certificate_authority) == b"PEM"


def test_a_malformed_describe_cluster_cidr_falls_back_to_the_cluster():
    eks, stub = _eks()
    stub.add_response("describe_cluster", {"cluster": {
        "name": "prod", "endpoint": "https://eks", "kubernetesNetworkConfig": {"serviceIpv4Cidr": "not-a-cidr"}}},
        {"name": "prod"})
    with stub:
        info = ClusterFacts(name="prod", eks=eks, kubernetes_service_ip=lambda: "172.20.0.1").get()
    assert info.service_cidr == "172.20.0.0/16"


def test_al2023_passes_any_kubelet_field_inline():
    node = NodeSettings(kubelet={"maxPods": 10, "shutdownGracePeriod": "30s"})
    config = yaml.safe_load(_parts(RENDERERS["al2023"](CLUSTER, node, None))[0][1])["spec"]["kubelet"]["config"]
    assert (config["maxPods"], config["shutdownGracePeriod"]) == (10, "30s")
