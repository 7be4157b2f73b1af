"""Memory held per pod: the pod informer keeps only what the controllers read (and the scheduler sees the same pod
through it), and the provisioner's and the cluster's per-pod state follows pod churn instead of growing with it."""

from __future__ import annotations

import copy
import json

from controller.kube import resources as R
from controller.provisioning import inputs
from controller.scheduling.volumes import VolumeTopology
from controller.state.cluster import compact_pod, is_provisionable
from controller.termination.drain import undrainable_pod_claims
from tests.unit.test_provisioning import _node_with_pods, _pending, _world

APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _rich_pod() -> dict:
    container = {"name": "app", "image": "registry.example/app:1", "command": ["/srv"], "args": ["-v"],
                 "env": [{"name": f"E{i}", "value": "x" * 40} for i in range(10)],
                 "ports": [{"containerPort": 8080}, {"containerPort": 9090, "hostPort": 9090, "protocol": "UDP"}],
                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"},
                               "claims": [{"name": "gpu"}]},
                 "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
                 "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets"}]}
    sidecar = {"name": "proxy", "image": "proxy:1", "restartPolicy": "Always",
               "resources": {"requests": {"cpu": "100m"}}, "env": [{"name": "A", "value": "b"}]}
    init = {"name": "init", "image": "init:1", "resources": {"requests": {"cpu": "2"}}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                         "labels": {"app": "web"},
                         "annotations": {APPLIED: json.dumps({"spec": container}),
                                         "karpenter.sh/do-not-disrupt": "true"},
                         "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "web", "uid": "rs", "controller": True}]},
            "spec": {"containers": [container], "initContainers": [init, sidecar],
                     "ephemeralContainers": [{"name": "debug", "image": "busybox"}],
                     "nodeSelector": {"kubernetes.io/arch": "amd64"},
                     "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                                    "whenUnsatisfiable": "DoNotSchedule",
                                                    "labelSelector": {"matchLabels": {"app": "web"}}}],
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}],
                     "volumes": [{"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
                                 {"name": "cfg", "configMap": {"name": "cfg", "items": [{"key": "a", "path": "a"}]}},
                                 {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                                 {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                                 {"name": "host", "hostPath": {"path": "/var/log"}}],
                     "terminationGracePeriodSeconds": 45},
            "status": {"phase": "Pending", "podIP": "10.0.0.1",
                       "containerStatuses": [{"name": "app", "image": "registry.example/app:1", "ready": False}],
                       "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}


def test_the_compact_pod_keeps_what_the_controllers_read_and_drops_the_rest():
    raw = _rich_pod()
    before = copy.deepcopy(raw)
    small = compact_pod(raw)
    assert raw == before  # the decoded object is not changed
    assert len(json.dumps(small)) < len(json.dumps(raw)) / 2
    meta, spec = small["metadata"], small["spec"]
    assert "managedFields" not in meta and APPLIED not in meta["annotations"]
    assert meta["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert meta["ownerReferences"] == raw["metadata"]["ownerReferences"]
    assert spec["containers"] == [{"name": "app", "resources": raw["spec"]["containers"][0]["resources"],
                                   "ports": [{"containerPort": 9090, "hostPort": 9090, "protocol": "UDP"}]}]
    assert spec["initContainers"][1] == {"name": "proxy", "restartPolicy": "Always",
                                         "resources": {"requests": {"cpu": "100m"}}}
    assert "ephemeralContainers" not in spec
    assert spec["volumes"][:2] == [{"name": "token", "projected": {}}, {"name": "cfg", "configMap": {}}]
    assert spec["volumes"][2:] == raw["spec"]["volumes"][2:]
    assert spec["terminationGracePeriodSeconds"] == 45
    assert small["status"] == {"phase": "Pending", "conditions": raw["status"]["conditions"]}


def test_the_scheduler_and_the_drain_read_the_same_pod_through_the_compact_copy():
    raw = _rich_pod()
    small = compact_pod(raw)
    volumes = VolumeTopology(pvcs={("shop", "data"): {"spec": {}}, ("shop", "web-1-scratch"): {"spec": {}}},
                             pvs={}, storage_classes={})
    full_pod, compact = inputs.scheduling_pod(raw, volumes), inputs.scheduling_pod(small, volumes)
    assert compact.requests == full_pod.requests
    assert compact.host_ports == full_pod.host_ports == frozenset({("UDP", "0.0.0.0", 9090)})
    assert compact.class_key == full_pod.class_key
    assert inputs.has_dra_requirements(small) and is_provisionable(small)
    raw["spec"]["tolerations"].append({"operator": "Exists"})  # tolerates the disrupted taint: not drained
    claims = undrainable_pod_claims([compact_pod(raw)], 0.0)
    assert claims == undrainable_pod_claims([raw], 0.0) == [("shop", "data"), ("shop", "web-1-scratch")]


def test_pods_decoded_apart_share_their_common_strings():
    a, b = (compact_pod(json.loads(json.dumps(_rich_pod()))) for _ in range(2))
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert next(iter(a["spec"]["nodeSelector"])) is next(iter(b["spec"]["nodeSelector"]))


def test_per_pod_state_follows_churn_instead_of_growing_with_it():
    w = _world()
    w.kube.cluster.pods_informer.add_handler(w.prov.on_pod)  # as the controller wires it
    _node_with_pods(w.kube, "n1", 5)
    for wave in range(4):
        names = [f"w{wave}-{i}" for i in range(5)]
        for name in names:
            _pending(w.kube, name, cpu="100m")
        w.prov.schedule()
        for name in names:  # kube-scheduler binds them, then the workload goes away
            w.kube.patch(R.PODS, name, {"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}, "default")
        w.prov.schedule()
        for name in names:
            w.kube.delete(R.PODS, name, "default")
    bound = len(w.kube.cluster.pods_on_node("n1"))
    assert bound == 6  # the node's five pods and its DaemonSet pod
    assert len(w.kube.cluster.pods()) == bound
    assert len(w.prov._pods) <= bound
    assert not w.prov._seen and not w.prov._decided
    assert len(w.kube.cluster._pod_node) == bound and not w.kube.cluster._provisionable
