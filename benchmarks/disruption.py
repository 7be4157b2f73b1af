"""The disruption pass on a large cluster snapshot, and `karpy disruption` end to end.

    python benchmarks/disruption.py --nodes 1000 --pods 10000 -o json
    python benchmarks/disruption.py --sizes 1000:10000,5000:50000

The snapshot: one NodePool (WhenEmptyOrUnderutilized, consolidateAfter 0s, the default 10% budget), its
EC2NodeClass, N initialized NodeClaims with their Nodes (m5.2xlarge, on-demand, three zones, bundled aws-us-east-1
catalog prices), and P pods of 10 Deployments spread evenly over the nodes at about a third of their CPU, so
consolidation is possible; a PodDisruptionBudget per Deployment. Each size runs in its own process (peak RSS is
honest) and prints: seconds (wall time of one full pass, the controller's compute_pass alone: the figure the target
applies to, <= 1 s at 1,000 nodes / 10,000 pods), cpuSeconds (its CPU time; wall well above CPU means the machine
was busy), method and commands (what the pass decided), loadSeconds (documents -> Snapshot), peakRssMiB; then
the baseline measured in the same process: one provisioning solve of the same pods onto new NodeClaims by the same
scheduler (ratio = pass / solve); and, with --e2e (on by default for sizes up to 1,000 nodes), `karpy disruption -f
snapshot -o json` run as a process on the snapshot written as `kubectl get -o json` and `-o yaml` print it
(endToEndSeconds, target <= 3 s; reading YAML is most of the difference between the two).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.api.documents import Document  # noqa: E402

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
INSTANCE_TYPE = "m5.2xlarge"
APPS = 10
NOW = "2026-06-01T12:00:00Z"
CREATED = "2026-05-30T12:00:00Z"


def make_cluster(nodes: int, pods: int) -> list[dict[str, Any]]:
    """The snapshot's objects, as `kubectl get ... -o yaml` lists them."""
    from controller.api.documents import parse_documents
    from controller.api.models import parse_ec2nodeclass, parse_nodepool
    from controller.api.nodeclasshash import hash_annotations
    from controller.api.quantity import format_quantity
    from controller.catalog.snapshot import load_catalog
    from controller.provisioning.nodeclaimtemplate import NODEPOOL_HASH_VERSION, nodepool_hash

    it = next(t for t in load_catalog().instance_types if t.name == INSTANCE_TYPE)
    capacity = {k: format_quantity(k, v) for k, v in it.capacity.items() if v}
    allocatable = {k: format_quantity(k, v) for k, v in it.allocatable.items() if v}
    ref = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    nodeclass = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
                 "spec": {"role": "bench", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                          "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]}}
    pool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "bench"},
            "spec": {"template": {"spec": {"nodeClassRef": ref, "expireAfter": "Never", "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]}]}},
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}}}
    defaulted_pool = parse_nodepool(parse_documents(json.dumps(pool), "b", json_text=True)[0]).manifest
    defaulted_class = parse_ec2nodeclass(parse_documents(json.dumps(nodeclass), "b", json_text=True)[0]).manifest
    annotations = {"karpenter.sh/nodepool-hash": nodepool_hash(defaulted_pool),
                   "karpenter.sh/nodepool-hash-version": NODEPOOL_HASH_VERSION, **hash_annotations(defaulted_class)}
    out: list[dict[str, Any]] = [nodeclass, pool]
    conditions = [{"type": t, "status": "True", "reason": t, "lastTransitionTime": CREATED}
                  for t in ("Launched", "Registered", "Initialized", "Ready")]
    for i in range(nodes):
        zone = ZONES[i % len(ZONES)]
        name, claim = f"ip-10-{i // 250}-{i % 250}-1.ec2.internal", f"bench-{i:05d}"
        labels = {"karpenter.sh/nodepool": "bench", "karpenter.k8s.aws/ec2nodeclass": "default",
                  "node.kubernetes.io/instance-type": INSTANCE_TYPE, "karpenter.sh/capacity-type": "on-demand",
                  "topology.kubernetes.io/zone": zone, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                  "karpenter.k8s.aws/instance-category": "m"}
        provider = f"aws:///{zone}/i-{i:017x}"
        out.append({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                    "metadata": {"name": claim, "creationTimestamp": CREATED, "labels": labels,
                                 "annotations": annotations},
                    "spec": {"nodeClassRef": ref, "expireAfter": "Never", "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE]}]},
                    "status": {"nodeName": name, "providerID": provider, "capacity": capacity,
                               "allocatable": allocatable, "lastPodEventTime": CREATED, "conditions": conditions}})
        out.append({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "creationTimestamp": CREATED,
                                 "labels": {**labels, "kubernetes.io/hostname": name,
                                            "karpenter.sh/initialized": "true", "karpenter.sh/registered": "true"}},
                    "spec": {"providerID": provider},
                    "status": {"capacity": capacity, "allocatable": allocatable,
                               "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": CREATED}]}})
    for j in range(pods):
        app = f"app{j % APPS}"
        node = f"ip-10-{(j % nodes) // 250}-{(j % nodes) % 250}-1.ec2.internal"
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{app}-{j:06d}", "namespace": "bench", "creationTimestamp": CREATED,
                                 "labels": {"app": app},
                                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app,
                                                      "uid": f"rs-{app}", "controller": True}]},
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "pause", "resources": {
                        "requests": {"cpu": "250m", "memory": "512Mi"}}}]},
                    "status": {"phase": "Running"}})
    for a in range(APPS):
        out.append({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": f"app{a}", "namespace": "bench"},
                    "spec": {"maxUnavailable": "10%", "selector": {"matchLabels": {"app": f"app{a}"}}},
                    "status": {"disruptionsAllowed": max(1, pods // APPS // 10),
                               "currentHealthy": pods // APPS, "desiredHealthy": pods // APPS - pods // APPS // 10,
                               "expectedPods": pods // APPS}})
    return out


def _documents(objects: list[dict[str, Any]]) -> list[Document]:
    return [Document(source="bench", index=i, api_version=o["apiVersion"], kind=o["kind"], name=o["metadata"]["name"],
                     namespace=o["metadata"].get("namespace"), raw=o) for i, o in enumerate(objects)]


def run_once(nodes: int, pods: int) -> dict[str, Any]:
    """Load the snapshot, time one full pass, and the baseline solve, in this process."""
    from controller.disruption.core import compute_pass
    from controller.disruption.documents import load, parse_now
    from controller.disruption.types import Options
    from controller.provisioning import inputs
    from controller.scheduling.scheduler import Scheduler

    objects = make_cluster(nodes, pods)
    start = time.perf_counter()
    inp = load(_documents(objects), now=parse_now(NOW))
    load_seconds = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    result = compute_pass(inp.snapshot, Options())
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    pool = inputs.node_pool(inp.nodepools["bench"], inp.snapshot.instance_types["bench"], {})
    start = time.perf_counter()
    sched_pods = [inputs.scheduling_pod(p) for p in inp.snapshot.pods]
    Scheduler([pool], [], []).solve(sched_pods)
    solve_seconds = time.perf_counter() - start
    return {"nodes": nodes, "pods": pods, "seconds": round(seconds, 3), "cpuSeconds": round(cpu, 3),
            "method": result.method or None, "commands": len(result.commands),
            "candidatesInCommands": sum(len(c.candidates) for c in result.commands),
            "savingsPerHour": round(sum(c.savings_per_hour for c in result.commands), 4),
            "timeouts": list(result.timeouts), "loadSeconds": round(load_seconds, 3),
            "baseline": {"description": "one provisioning solve of the same pods by the same scheduler",
                         "seconds": round(solve_seconds, 3), "ratio": round(seconds / max(solve_seconds, 1e-9), 2)},
            "peakRssMiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def end_to_end(nodes: int, pods: int, fmt: str = "yaml") -> dict[str, Any]:
    """`karpy disruption -f snapshot -o json` as a process, on the snapshot written as kubectl prints it."""
    import yaml

    doc = {"apiVersion": "v1", "kind": "List", "items": make_cluster(nodes, pods)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"snapshot.{fmt}"
        # kubectl never writes YAML anchors; PyYAML would alias the dicts the generator shares between objects
        plain = type("NoAliases", (yaml.SafeDumper,), {"ignore_aliases": lambda self, data: True})
        path.write_text(json.dumps(doc) if fmt == "json" else yaml.dump(doc, Dumper=plain, sort_keys=False))
        size = path.stat().st_size
        rss = Path(tmp) / "rss"
        # the command's own peak RSS, written at exit (RUSAGE_CHILDREN would be the largest child of this run)
        wrapper = ("import atexit, resource, sys; out = sys.argv.pop(1); atexit.register(lambda: open(out, 'w')"
                   ".write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))); import cli; cli.main()")
        cmd = [sys.executable, "-c", wrapper, str(rss), "disruption", "-f", str(path), "--now", NOW, "-o", "json"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak = int(rss.read_text()) if rss.exists() else 0
    if proc.returncode != 0:
        raise RuntimeError(f"karpy disruption failed: {proc.stderr[-2000:]}")
    plan = json.loads(proc.stdout)
    return {"format": fmt, "fileMiB": round(size / 2**20, 1), "endToEndSeconds": round(seconds, 3),
            "endToEndCpuSeconds": round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 3),
            "commands": len(plan["commands"]), "peakRssMiB": round(peak / 1024, 1)}


def main() -> None:
    """Each size in a fresh process, then the end-to-end runs."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=None)
    ap.add_argument("--pods", type=int, default=None)
    ap.add_argument("--sizes", default="1000:10000,5000:50000", help="NODES:PODS,...")
    ap.add_argument("--e2e", choices=("auto", "yes", "no"), default="auto",
                    help="run `karpy disruption` end to end (auto: for sizes up to 1,000 nodes)")
    ap.add_argument("-o", "--output", choices=("json", "table"), default="table")
    ap.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._child:
        print(json.dumps(run_once(a.nodes, a.pods)))
        return
    if a.nodes:
        sizes = [(a.nodes, a.pods if a.pods is not None else a.nodes * 10)]
    else:
        sizes = [(int(n), int(p)) for n, p in (s.split(":") for s in a.sizes.split(","))]
    load = round(os.getloadavg()[0], 2)
    results = []
    for n, p in sizes:
        out = subprocess.run([sys.executable, __file__, "--_child", "--nodes", str(n), "--pods", str(p)],
                             check=True, capture_output=True, text=True)
        r = dict(json.loads(out.stdout))
        r["loadAverage1m"] = load
        if a.e2e == "yes" or (a.e2e == "auto" and n <= 1000):
            r["endToEnd"] = [end_to_end(n, p, fmt) for fmt in ("json", "yaml")]
        results.append(r)
    if a.output == "json":
        print(json.dumps(results[0] if len(results) == 1 else {"results": results, "loadAverage1m": load}, indent=2))
        return
    cols = ("nodes", "pods", "seconds", "cpuSeconds", "method", "commands", "loadSeconds", "peakRssMiB")
    print(f"load average at start: {load}; seconds and cpuSeconds are the pass alone")
    print("  ".join(f"{c:>12}" for c in cols))
    for r in results:
        print("  ".join(f"{r[c]!s:>12}" for c in cols))
    for r in results:
        b = r["baseline"]
        print(f"{r['nodes']} nodes: baseline ({b['description']}) {b['seconds']} s -> pass/solve {b['ratio']}x")
        for e in r.get("endToEnd", []):
            print(f"{r['nodes']} nodes: karpy disruption end to end on {e['fileMiB']} MiB of {e['format']}: "
                  f"{e['endToEndSeconds']} s ({e['endToEndCpuSeconds']} s CPU, {e['peakRssMiB']} MiB peak)")


if __name__ == "__main__":
    main()
