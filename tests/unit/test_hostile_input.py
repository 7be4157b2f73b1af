"""Hostile and malformed files: every one gets a bounded, one-line answer naming the file, the document or line and
the field, from every command that reads files (simulate, validate, convert, explain), never a traceback.

The corpus is generated here, table-driven: each entry is a file and the exact error it must produce."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from cli import main
from controller.api.convert import ConvertError, convert_and_validate
from controller.api.documents import MAX_ALIAS_EXPANSION, MAX_DEPTH, Document, DocumentError, parse_documents
from controller.api.shapes import MAX_PODS, shape_errors
from controller.api.validation import validate_document
from controller.provisioning.inputs import InputError
from controller.simulate.run import SimulationError, simulate_documents

NODEPOOL: dict[str, Any] = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]}},
                "limits": {"cpu": "1000"}, "weight": 10}}
NODECLASS: dict[str, Any] = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                             "metadata": {"name": "default"},
             "spec": {"role": "NodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                      "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
                      "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
                      "kubelet": {"maxPods": 110, "systemReserved": {"cpu": "100m"}},
                      "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": True,
                                               "ebs": {"volumeSize": "40Gi", "volumeType": "gp3"}}]}}
POD_SPEC: dict[str, Any] = {
    "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                    "ports": [{"containerPort": 80, "hostPort": 8080}]}],
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}],
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "podAffinityTerm": {
            "labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}}]}},
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                   "whenUnsatisfiable": "DoNotSchedule",
                                   "labelSelector": {"matchLabels": {"app": "web"}}}],
}
POD: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {"app": "web"}},
                       "spec": POD_SPEC}
TEMPLATE: dict[str, Any] = {"metadata": {"labels": {"app": "web"}}, "spec": POD_SPEC}
DEPLOYMENT: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
              "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE}}
DAEMONSET: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
             "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
                 "metadata": {"labels": {"app": "agent"}},
                 "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "50m"}}}]}}}}
STATEFULSET: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "db"}}, "template": TEMPLATE}}
JOB: dict[str, Any] = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
       "spec": {"parallelism": 2, "completions": 2, "template": TEMPLATE}}
CRONJOB: dict[str, Any] = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj"},
           "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": TEMPLATE}}}}
NODE: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {
    "node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "us-east-1a"}},
    "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
    "status": {"allocatable": {"cpu": "2", "memory": "7Gi", "pods": "29"},
               "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"}}}
NODECLAIM: dict[str, Any] = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "nc"},
             "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                      "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                        "values": ["m5.large"]}]}}
LEGAL = [NODEPOOL, NODECLASS, POD, DEPLOYMENT, DAEMONSET, STATEFULSET, JOB, CRONJOB, NODE, NODECLAIM]

OK_ERRORS = (SimulationError, DocumentError, InputError, ConvertError)


def _yaml(*docs: dict[str, Any]) -> bytes:
    return yaml.safe_dump_all(list(docs), sort_keys=False).encode()


def _pod_with(requests: str) -> bytes:
    pod = copy.deepcopy(POD)
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "__Q__"
    return _yaml(pod).replace(b"__Q__", requests.encode())


def _billion_laughs() -> bytes:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 10) + "]")
    return ("\n".join(lines) + "\napiVersion: v1\nkind: Pod\nmetadata: {name: lol}\nspec: {containers: [{name: c}], "
            "tolerations: *l9}\n").encode()


def _np(**spec: Any) -> dict[str, Any]:
    doc = copy.deepcopy(NODEPOOL)
    doc["spec"].update(spec)
    return doc


# file name, content, the one error line it must produce (a fragment after "error: <file>")
CORPUS: list[tuple[str, bytes, str]] = [
    ("not-utf8.yaml", b"apiVersion: v1\nkind: Pod\nmetadata: {name: \xff\xfe}\n",
     ": line 3: not UTF-8 text (byte 0xff at offset 42)"),
    ("no-apiversion.yaml", _yaml({k: v for k, v in NODEPOOL.items() if k != "apiVersion"}),
     ": document 1 NodePool/default: apiVersion: required (a string)"),
    ("foreign-apiversion.yaml", _yaml({**NODEPOOL, "apiVersion": "example.com/v1"}),
     ": document 1 NodePool/default: apiVersion: 'example.com/v1' does not serve NodePool"),
    ("foreign-pod-apiversion.yaml", _yaml({**POD, "apiVersion": "apps/v1"}),
     ": document 1 Pod/web: apiVersion: 'apps/v1' does not serve Pod (known: v1)"),
    ("no-kind.yaml", b"apiVersion: v1\nmetadata: {name: x}\n", ": document 1: kind: required (a string)"),
    ("scalar-document.yaml", b"--- 5\n", ": document 1: expected a Kubernetes object (a mapping), got int 5"),
    ("spec-5.yaml", _yaml({**NODEPOOL, "spec": 5}),
     ": document 1 NodePool/default: spec: must be an object, got int 5"),
    ("pod-spec-5.yaml", _yaml({**POD, "spec": 5}), ": document 1 Pod/web: spec: must be an object, got int 5"),
    ("list-for-map.yaml", _yaml({**POD, "metadata": {"name": "web", "labels": ["a", "b"]}}),
     ": document 1 Pod/web: metadata.labels: must be a map, got list ['a', 'b']"),
    ("deployment-resources-list.yaml",
     _yaml({**DEPLOYMENT, "spec": {**DEPLOYMENT["spec"], "template": {"spec": {"containers": [
         {"name": "c", "resources": [1, 2]}]}}}}),
     ": document 1 Deployment/web: spec.template.spec.containers[0].resources: must be an object, got list [1, 2]"),
    ("daemonset-tolerations-map.yaml",
     _yaml({**DAEMONSET, "spec": {"template": {"spec": {"containers": [], "tolerations": {"a": 1}}}}}),
     ": document 1 DaemonSet/agent: spec.template.spec.tolerations: must be a list, got dict {'a': 1}"),
    ("nodeclass-kubelet-list.yaml", _yaml({**NODECLASS, "spec": {**NODECLASS["spec"], "kubelet": [1]}}),
     ": document 1 EC2NodeClass/default: spec.kubelet: must be an object, got list [1]"),
    ("nodeclaim-requirements-string.yaml",
     _yaml({**NODECLAIM, "spec": {**NODECLAIM["spec"], "requirements": "all"}}),
     ": document 1 NodeClaim/nc: spec.requirements: must be a list, got str 'all'"),
    ("duplicate-key.yaml", _yaml(NODEPOOL) + b"  weight: 20\n",
     ": line 24: duplicate key 'weight' (first at line 23)"),
    ("billion-laughs.yaml", _billion_laughs(), f": aliases expand to more than {MAX_ALIAS_EXPANSION} nodes"),
    ("recursive-alias.yaml", b"apiVersion: v1\nkind: Pod\nmetadata: &m {name: x, labels: {a: *m}}\n",
     ": line 3: recursive alias (a node that contains itself)"),
    ("deep-flow.yaml", b"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: " + b"[" * 200_000 + b"]" * 200_000,
     f": line 4: nested deeper than {MAX_DEPTH} levels"),
    ("deep-block.yaml", b"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n" + b"".join(
        b" " * i + b"a:\n" for i in range(1, 300)) + b" " * 300 + b"b: 1\n",
     f": nested deeper than {MAX_DEPTH} levels"),
    ("deep-compact-sequence.yaml", b"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  x:\n  " + b"- " * 50_000
     + b"1\n", f": line 6: nested deeper than {MAX_DEPTH} levels"),
    ("deep.json", b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": ' + b"[" * 100_000
     + b"]" * 100_000 + b"}", f": nested deeper than {MAX_DEPTH} levels"),
    ("duplicate-key.json", b'{"apiVersion": "v1", "kind": "Pod", "kind": "Pod"}',
     ": not valid JSON: duplicate key 'kind'"),
    ("nan.json", b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"priority": NaN}}',
     ": not valid JSON: NaN is not a JSON number"),
    ("huge-int.json", b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"priority": '
     + b"9" * 5000 + b"}}", ": not valid JSON: number '99999999999999999999999… has more than 30 digits"),
    ("huge-quantity.yaml", _pod_with("1e400"),
     ": document 1 Pod/web: spec.containers[0].resources.requests[cpu]: '1e400' is too large a quantity"),
    ("inf-quantity.yaml", _pod_with(".inf"),
     ": document 1 Pod/web: spec.containers[0].resources.requests[cpu]: inf is not a finite quantity"),
    ("nan-quantity.yaml", _pod_with(".nan"),
     ": document 1 Pod/web: spec.containers[0].resources.requests[cpu]: nan is not a finite quantity"),
    ("negative-request.yaml", _pod_with("-1"),
     ": document 1 Pod/web: spec.containers[0].resources.requests[cpu]: -1 is negative; resource amounts must be >= 0"),
    ("long-quantity.yaml", _pod_with("'" + "9" * 100_000 + "x'"),
     ": document 1 Pod/web: spec.containers[0].resources.requests[cpu]: '999999999999999999999999999999"),
    ("negative-reserved.yaml", _yaml({**NODECLASS, "spec": {**NODECLASS["spec"], "kubelet": {
        "systemReserved": {"cpu": "-100m"}}}}),
     ": document 1 EC2NodeClass/default: spec.kubelet.systemReserved[cpu]: '-100m' can't be a negative resource "
     "quantity"),
    ("small-volume.yaml", _yaml({**NODECLASS, "spec": {**NODECLASS["spec"], "blockDeviceMappings": [
        {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Mi"}}]}}),
     ": document 1 EC2NodeClass/default: spec.blockDeviceMappings[0].ebs.volumeSize: '100Mi' must be a size from "
     "1G/1Gi"),
    ("negative-pvc.yaml", _yaml({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"},
                                 "spec": {"resources": {"requests": {"storage": "-5Gi"}}}}),
     ": document 1 PersistentVolumeClaim/c: spec.resources.requests[storage]: '-5Gi' is negative"),
    ("negative-emptydir.yaml", _yaml({**POD, "spec": {**POD_SPEC, "volumes": [
        {"name": "scratch", "emptyDir": {"sizeLimit": "-1Gi"}}]}}),
     ": document 1 Pod/web: spec.volumes[0].emptyDir.sizeLimit: '-1Gi' is negative"),
    ("billion-replicas.yaml", _yaml({**DEPLOYMENT, "spec": {**DEPLOYMENT["spec"], "replicas": 10**9}}),
     f": document 1 Deployment/web: spec.replicas: 1000000000 is more than {MAX_PODS}, the most pods karpy simulate"),
    ("long-name.yaml", _yaml({**POD, "spec": {"containers": {"x" * 10_000: 1}}}),
     ": document 1 Pod/web: spec.containers: must be a list, got dict {'xxxxxxxxxxxxxxxxxxxxxxx"),
]

def _one_line(output: str) -> str:
    """The one error line (warnings about the input as a whole, such as "no Karpenter documents", may precede it)."""
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("warning: ")]
    assert len(lines) == 1, output[:2000]
    return lines[0]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    for name, content, _ in CORPUS:
        (root / name).write_bytes(content)
    return root


COMMANDS = [["simulate"], ["validate"], ["convert"], ["explain", "web"], ["disruption"]]


@pytest.mark.parametrize(("name", "expected"), [(n, e) for n, _, e in CORPUS], ids=[n for n, _, _ in CORPUS])
def test_every_command_answers_a_hostile_file_with_one_line(corpus: Path, name: str, expected: str) -> None:
    path = corpus / name
    for command in COMMANDS:
        started = time.monotonic()
        res = CliRunner().invoke(main, [*command, "-f", str(path)])
        took = time.monotonic() - started
        assert res.exit_code == 1, (command, res.output[:500])
        assert "Traceback" not in res.output and isinstance(res.exception, SystemExit), res.exception
        line = _one_line(res.output)
        assert line.startswith(f"error: {path}"), (command, line)
        assert expected in line, (command, line)
        assert len(line) < 400 + len(str(path)), (command, line[:500])
        assert took < 30, (command, took)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def _replaced(doc: dict[str, Any], path: tuple[Any, ...], new: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    target: Any = out
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return out


WRONG = [5, -1, "x", None, [1], {"a": 1}, 10**20]


@pytest.mark.parametrize("legal", LEGAL, ids=[d["kind"] for d in LEGAL])
def test_a_wrong_type_at_any_depth_is_an_error_never_a_crash(legal: dict[str, Any]) -> None:
    """Every field of a legal document replaced by values of every other type: simulate, validate and convert end
    with their error types (or succeed), never with anything else, and the error names a field."""
    others = [d for d in (NODEPOOL, NODECLASS, POD) if d["kind"] != legal["kind"]]
    checked = 0
    for path in _paths(legal):
        if len(path) < 2 or path in (("metadata", "name"),):
            continue
        for new in WRONG:
            doc = _replaced(legal, path, new)
            text = yaml.safe_dump_all([*others, doc], sort_keys=False)
            try:
                docs = parse_documents(text, "f.yaml")
                errors = [str(e) for d in docs for e in validate_document(d)]
                errors += [e for d in docs for e in shape_errors(d)]
                convert_and_validate(docs)
                if not errors or checked % 10 == 0:  # what validates must simulate; the rest fail fast in it
                    simulate_documents(docs, catalog="benchmark")
            except OK_ERRORS as e:
                assert "f.yaml" in str(e) or "/" in str(e), str(e)[:300]
                assert all(len(line) < 600 for line in str(e).splitlines()), str(e)[:700]
            checked += 1
    assert checked > 50


def test_legal_documents_simulate() -> None:
    docs = parse_documents(yaml.safe_dump_all(LEGAL, sort_keys=False), "legal.yaml")
    result = simulate_documents(docs, catalog="benchmark")
    assert len(result.pods) == 1 + 2 + 1 + 2 + 1  # Pod, Deployment x2, StatefulSet, Job x2, CronJob
    assert not [e for d in docs for e in shape_errors(d)]


def test_the_loader_reads_what_pyyaml_reads() -> None:
    """The iterative builder against PyYAML's constructor: merge keys, aliases, YAML 1.1 scalars, several
    documents, List kinds."""
    text = """
base: &base {x: 1, y: [1, 2]}
b: {<<: *base, y: 3, z: 0x10, w: 1_000, n: ~, t: yes, d: 2024-01-01, f: 1.5e3, g: 2.5, s: '1'}
c: {<<: [*base, {q: 1}]}
l: &l [a, b]
m: [*l, *l]
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Pod, metadata: {name: a}}
"""
    from controller.api.documents import _yaml_documents

    assert _yaml_documents(text, "x") == list(yaml.safe_load_all(text))
    for example in sorted(Path("examples").rglob("*.yaml")):
        content = example.read_text()
        assert _yaml_documents(content, str(example)) == list(yaml.safe_load_all(content)), example
    docs = parse_documents(text.split("---")[1], "list.yaml")
    assert [(d.kind, d.name, d.position, d.ref) for d in docs] == [
        ("Pod", "a", "1.items[0]", "list.yaml: document 1.items[0] Pod/a")]


def test_aliases_within_the_limit_are_read() -> None:
    # a few shared templates are ordinary YAML; only an expansion past the limit is refused
    text = "t: &t {cpu: 1, memory: 2Gi}\nitems: [" + ", ".join(["*t"] * 1000) + "]\n"
    from controller.api.documents import _yaml_documents

    value = _yaml_documents(text, "x")[0]
    assert len(value["items"]) == 1000 and value["items"][0] == {"cpu": 1, "memory": "2Gi"}


def test_a_billion_replicas_are_refused_without_expanding() -> None:
    doc = parse_documents(yaml.safe_dump({**DEPLOYMENT, "spec": {**DEPLOYMENT["spec"], "replicas": 10**9}}), "d.yaml")
    started = time.monotonic()
    with pytest.raises(SimulationError, match=r"^d\.yaml: document 1 Deployment/web: spec\.replicas: 1000000000 is "
                                              rf"more than {MAX_PODS}"):
        simulate_documents(doc, catalog="benchmark")
    assert time.monotonic() - started < 10
    # under the per-document bound but over the run's: ten Deployments of MAX_PODS / 5 pods
    many = [{**DEPLOYMENT, "metadata": {"name": f"w{i}"}, "spec": {**DEPLOYMENT["spec"], "replicas": MAX_PODS // 5}}
            for i in range(10)]
    docs = parse_documents(yaml.safe_dump_all(many), "many.yaml")
    with pytest.raises(SimulationError, match=rf"many\.yaml: document 6 Deployment/w5: 20000 pod\(s\) .* make more "
                                              rf"than {MAX_PODS} pods in this run"):
        simulate_documents(docs, catalog="benchmark")


def test_convert_never_prints_what_validate_rejects(tmp_path: Path) -> None:
    # a v1beta1 NodePool whose budgets carry a value v1 refuses: convert copies it, so the output would not validate
    beta: dict[str, Any] = {"apiVersion": "karpenter.sh/v1beta1", "kind": "NodePool", "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"nodeClassRef": {"name": "default"}, "requirements": []}},
                     "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s",
                                    "budgets": [{"nodes": "ten"}]}}}
    path = tmp_path / "beta.yaml"
    path.write_text(yaml.safe_dump(beta))
    res = CliRunner().invoke(main, ["convert", "-f", str(path)])
    assert res.exit_code == 1
    assert res.stdout == ""
    line = _one_line(res.output)
    assert line == (f"error: {path}: document 1 NodePool/web: spec.disruption.budgets[0].nodes: 'ten' must be a "
                    "non-negative integer or a percentage from 0% to 100% (in the v1 output); nothing printed")
    # the same pool with a good budget converts, and what it prints validates
    beta["spec"]["disruption"]["budgets"] = [{"nodes": "10%"}]
    path.write_text(yaml.safe_dump(beta))
    res = CliRunner().invoke(main, ["convert", "-f", str(path)])
    assert res.exit_code == 0, res.output
    out = tmp_path / "v1.yaml"
    out.write_text(res.stdout)
    assert CliRunner().invoke(main, ["validate", "-f", str(out)]).exit_code == 0
    # an old kind whose fields have the wrong types is an error naming the document, not a traceback
    path.write_text(yaml.safe_dump({"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
                                    "metadata": {"name": "p"}, "spec": {"providerRef": 5}}))
    res = CliRunner().invoke(main, ["convert", "-f", str(path)])
    assert res.exit_code == 1 and "Traceback" not in res.output and res.stdout == ""
    assert _one_line(res.output).startswith(f"error: {path}: document 1 Provisioner/p: not a karpenter.sh/v1alpha5 "
                                            "Provisioner karpy can convert: a field has the wrong type")


@pytest.mark.parametrize(("content", "expected"), [
    (b"garbage", "not a readable catalog snapshot: BadGzipFile"),
    (b"", "not a readable catalog snapshot"),
])
def test_catalog_show_on_a_broken_gzip_is_one_line(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "broken.json.gz"
    path.write_bytes(content)
    res = CliRunner().invoke(main, ["catalog", "show", "--catalog", str(path)])
    assert res.exit_code == 1
    line = _one_line(res.output)
    assert line.startswith(f"error: {path}: ") and expected in line, line


@pytest.mark.parametrize(("doc", "expected"), [
    ("{", "not a readable catalog snapshot: JSONDecodeError"),
    ('{"format": 99, "instanceTypes": []}', "not a karpy catalog snapshot (format 1 expected)"),
    ('{"format": 1, "instanceTypes": []}', "not a karpy catalog snapshot: missing or malformed 'region'"),
    ('{"format": 1, "region": "r", "zones": [], "priceSource": "", "generated": "", "instanceTypes": '
     '[{"info": 5, "zones": ["a"], "onDemand": 1, "spot": {}}]}',
     "instanceTypes[0]: malformed entry (TypeError"),
    ('{"format": 1, "region": "r", "zones": [], "priceSource": "", "generated": "", "instanceTypes": '
     '[{"info": {}, "zones": ["a"], "onDemand": "NaN", "spot": {}}]}',
     "instanceTypes[0]: malformed entry (ValueError: price 'NaN' is not a finite non-negative number)"),
])
def test_catalog_show_on_a_broken_file_is_one_line(tmp_path: Path, doc: str, expected: str) -> None:
    path = tmp_path / "broken.json"
    path.write_text(doc)
    res = CliRunner().invoke(main, ["catalog", "show", "--catalog", str(path)])
    assert res.exit_code == 1
    line = _one_line(res.output)
    assert line.startswith(f"error: {path}: ") and expected in line, line


def test_errors_quote_values_short() -> None:
    huge = "v" * 1_000_000
    docs = parse_documents(json.dumps({**NODEPOOL, "spec": {**NODEPOOL["spec"], "weight": huge}}), "w.yaml")
    errors = [str(e) for e in validate_document(docs[0])]
    assert errors and all(len(e) < 400 for e in errors), [e[:500] for e in errors]
    assert any("spec.weight: must be an integer, got str 'vvvv" in e for e in errors), errors


def test_document_refs_name_file_position_and_object() -> None:
    text = yaml.safe_dump_all([POD, DEPLOYMENT])
    docs = parse_documents(text, "two.yaml")
    assert [d.ref for d in docs] == ["two.yaml: document 1 Pod/web", "two.yaml: document 2 Deployment/web"]
    assert Document("t.yaml", 0, "v1", "Pod", "p", None, {}).ref == "t.yaml: Pod/p"


@pytest.mark.parametrize("name", ["deep-flow.yaml", "deep-compact-sequence.yaml", "billion-laughs.yaml",
                                  "not-utf8.yaml", "duplicate-key.yaml"])
def test_the_real_process_exits_1_with_one_line(corpus: Path, name: str) -> None:
    """In a process of its own (a crash in libyaml would kill it, not raise): exit 1, one line on stderr, nothing on
    stdout; the file read from stdin as well as by name."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    expected = next(e for n, _, e in CORPUS if n == name)
    path = corpus / name
    for args, stdin in ((["-f", str(path)], None), (["-f", "-"], path.read_bytes())):
        proc = subprocess.run([sys.executable, "-m", "cli", "validate", *args], input=stdin, capture_output=True,
                              cwd=root, timeout=120, check=False)
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert proc.stdout == b""
        line = _one_line(proc.stderr.decode())
        source = str(path) if stdin is None else "stdin"
        assert line.startswith(f"error: {source}") and expected in line, line


@pytest.mark.parametrize(("text", "expected"), [
    ("spec: {priority: " + "9" * 10_000 + "}",
     "line 4: '99999999999999999999999999999…: an integer of more than 32"),
    ("spec: {priority: 0x" + "f" * 100_000 + "}",
     "line 4: '0xfffffffffffffffffffffffffff…: an integer of more than 32"),
    ("spec: !!python/object:os.system {a: 1}", "line 4: tag 'tag:yaml.org,2002:python/object:os.system' is not "
                                               "supported"),
    ("spec: {nodeName: !!python/name:os.system x}", "line 4: 'x': could not determine a constructor for the tag"),
    ("spec: {}\nstatus: {startTime: 2024-13-45}", "line 5: '2024-13-45': month must be in 1..12"),
])
def test_scalars_and_tags_are_bounded(text: str, expected: str) -> None:
    with pytest.raises(DocumentError) as info:
        parse_documents("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n" + text, "s.yaml")
    assert str(info.value).startswith("s.yaml: ") and expected in str(info.value), str(info.value)
    assert len(str(info.value)) < 300


def test_documents_per_file_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import controller.api.documents as documents

    monkeypatch.setattr(documents, "MAX_DOCUMENTS", 1000)
    with pytest.raises(DocumentError, match=r"^d\.yaml: more than 1000 documents"):
        parse_documents("---\n" * 1001 + "a: 1\n", "d.yaml")


def test_random_edits_of_the_examples_end_in_an_error_or_a_plan() -> None:
    """Characters deleted, YAML syntax inserted (brackets, anchors, aliases, merges, tags, odd scalars) at random
    places of the examples, fixed seed: every command's path ends in its own error type or succeeds."""
    import random

    root = Path(__file__).resolve().parents[2] / "examples"
    base = "\n---\n".join((root / n).read_text() for n in ("workloads.yaml", "nodepools.yaml", "ec2nodeclasses.yaml"))
    tokens = ["[", "]", "{", "}", ": ", "- ", "&a ", "*a", "<<: ", "!!binary ", "\n", "  ", "-1", "1e999", ".nan",
              "null", "'", '"', "\t", "?", "|", ">", "!!set ", "0x" + "f" * 40]
    rng = random.Random(20)
    outcomes = {"error": 0, "plan": 0}
    for _ in range(300):
        chars = list(base)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(chars))
            if rng.random() < 0.4:
                del chars[pos:pos + rng.randint(1, 5)]
            else:
                chars.insert(pos, rng.choice(tokens))
        try:
            docs = parse_documents("".join(chars), "f.yaml")
            for d in docs:
                validate_document(d)
                shape_errors(d)
            convert_and_validate(docs)
            simulate_documents(docs, catalog="benchmark")
            outcomes["plan"] += 1
        except OK_ERRORS as e:
            assert all(len(line) < 600 for line in str(e).splitlines()), str(e)[:700]
            outcomes["error"] += 1
    assert outcomes["error"] > 50 and outcomes["plan"] > 0, outcomes
