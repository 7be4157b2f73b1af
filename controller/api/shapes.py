"""The shape of the Kubernetes objects `karpy simulate` reads (Pods, workloads, Nodes, volumes): the type of every
field the simulation looks at, so a file with `spec: 5` or a list where a map belongs gets a one-line error naming
the document and the field path, as the apiserver would refuse it, instead of failing deep inside the scheduler.

Unknown fields are kept (these are open Kubernetes kinds); only the fields karpy reads are typed. Amounts of
resources must be non-negative quantities, and workload sizes are bounded by MAX_PODS, so no file can make the
simulation allocate without limit.
"""

from __future__ import annotations

from typing import Any

from controller.api.documents import Document, short
from controller.api.quantity import QuantityError, parse_quantity
from controller.api.schema import A, B, Field, I, M, Q, S, ValidationIssue, validate

# the most pods one simulation expands (replicas, parallelism, pods in the files): a run holds every pod in memory
MAX_PODS = 100_000


def non_negative(value: Any) -> str | None:
    """A resource amount: a quantity that is not negative (Kubernetes refuses negative requests and capacities)."""
    try:
        if parse_quantity(value) < 0:
            return f"{short(value)} is negative; resource amounts must be >= 0"
    except QuantityError:
        return None  # the quantity check reports it
    return None


def P(description: str = "", required: tuple[str, ...] = (), /, **fields: Field) -> Field:
    """An open object: the fields karpy reads are typed, any other field is kept as is (a field may be called
    `required`: the two parameters are positional)."""
    f = Field("object", description, fields=fields, required=required)
    f.preserve_unknown = True
    return f


def _amounts() -> Field:
    return M(Q(check=non_negative))


def _requirement() -> Field:
    return P(key=S(), operator=S(), values=A(S()))


def _node_selector_term() -> Field:
    return P(matchExpressions=A(_requirement()), matchFields=A(_requirement()))


def _label_selector() -> Field:
    return P(matchLabels=M(S()), matchExpressions=A(_requirement()))


def _pod_affinity_term() -> Field:
    return P(labelSelector=_label_selector(), namespaceSelector=_label_selector(), namespaces=A(S()),
             topologyKey=S(), matchLabelKeys=A(S()), mismatchLabelKeys=A(S()))


def _pod_affinity() -> Field:
    return P(requiredDuringSchedulingIgnoredDuringExecution=A(_pod_affinity_term()),
             preferredDuringSchedulingIgnoredDuringExecution=A(P(weight=I(minimum=1, maximum=100),
                                                                 podAffinityTerm=_pod_affinity_term())))


def _container() -> Field:
    return P(name=S(), image=S(),
             resources=P(requests=_amounts(), limits=_amounts()),
             ports=A(P(containerPort=I(minimum=0, maximum=65535), hostPort=I(minimum=0, maximum=65535),
                       protocol=S(), hostIP=S())),
             restartPolicy=S())


def _metadata() -> Field:
    return P(name=S(), generateName=S(), namespace=S(), uid=S(), labels=M(S()), annotations=M(S()),
             ownerReferences=A(P(apiVersion=S(), kind=S(), name=S(), uid=S(), controller=B())))


POD_SPEC = P(
    containers=A(_container()), initContainers=A(_container()), overhead=_amounts(),
    nodeSelector=M(S()), nodeName=S(), priority=I(), priorityClassName=S(), schedulerName=S(),
    affinity=P(nodeAffinity=P(requiredDuringSchedulingIgnoredDuringExecution=P(
                                  nodeSelectorTerms=A(_node_selector_term())),
                              preferredDuringSchedulingIgnoredDuringExecution=A(P(
                                  weight=I(minimum=1, maximum=100), preference=_node_selector_term()))),
               podAffinity=_pod_affinity(), podAntiAffinity=_pod_affinity()),
    tolerations=A(P(key=S(), operator=S(), value=S(), effect=S(), tolerationSeconds=I())),
    topologySpreadConstraints=A(P(maxSkew=I(minimum=1), topologyKey=S(), whenUnsatisfiable=S(),
                                  labelSelector=_label_selector(), minDomains=I(minimum=1),
                                  nodeAffinityPolicy=S(), nodeTaintsPolicy=S(), matchLabelKeys=A(S()))),
    volumes=A(P(name=S(), persistentVolumeClaim=P(claimName=S()), emptyDir=P(sizeLimit=Q(check=non_negative)),
                ephemeral=P(volumeClaimTemplate=P(spec=P(resources=P(requests=_amounts(), limits=_amounts())))))),
)


def _template() -> Field:
    return P("A pod template.", ("spec",), metadata=_metadata(), spec=POD_SPEC)


def _at_most_max_pods(value: Any) -> str | None:
    if isinstance(value, int) and value > MAX_PODS:
        return f"{value} is more than {MAX_PODS}, the most pods karpy simulate expands in one run"
    return None


def _count(description: str) -> Field:
    return I(description, minimum=0, check=_at_most_max_pods)


def _job_spec() -> Field:
    return P("", ("template",), parallelism=_count("Pods at once."), completions=_count("Pods to finish."),
             template=_template())


def _workload(**fields: Field) -> Field:
    return P("", ("spec",), metadata=_metadata(), spec=P("", ("template",), **fields))


def _object(**fields: Field) -> Field:
    return P(metadata=_metadata(), **fields)


SHAPES: dict[str, Field] = {
    "Pod": _object(spec=POD_SPEC, status=P(phase=S())),
    "Deployment": _workload(replicas=_count("Pods."), template=_template(), selector=_label_selector()),
    "ReplicaSet": _workload(replicas=_count("Pods."), template=_template(), selector=_label_selector()),
    "ReplicationController": _workload(replicas=_count("Pods."), template=_template(), selector=M(S())),
    "StatefulSet": _workload(replicas=_count("Pods."), template=_template(), selector=_label_selector(),
                             volumeClaimTemplates=A(P(metadata=_metadata(), spec=P(
                                 storageClassName=S(), resources=P(requests=_amounts(), limits=_amounts()))))),
    "DaemonSet": _workload(template=_template(), selector=_label_selector()),
    "Job": P("", ("spec",), metadata=_metadata(), spec=_job_spec()),
    "CronJob": P("", ("spec",), metadata=_metadata(),
                 spec=P("", ("jobTemplate",), schedule=S(),
                        jobTemplate=P("", ("spec",), metadata=_metadata(), spec=_job_spec()))),
    "Node": _object(spec=P(taints=A(P(key=S(), value=S(), effect=S())), unschedulable=B(), providerID=S()),
                    status=P(allocatable=_amounts(), capacity=_amounts())),
    "PersistentVolumeClaim": _object(spec=P(volumeName=S(), storageClassName=S(),
                                            resources=P(requests=_amounts(), limits=_amounts()))),
    "PersistentVolume": _object(spec=P(nodeAffinity=P(required=P(nodeSelectorTerms=A(_node_selector_term()))))),
    "StorageClass": _object(volumeBindingMode=S(), provisioner=S(),
                            allowedTopologies=A(P(matchLabelExpressions=A(P(key=S(), values=A(S())))))),
}


def shape_errors(doc: Document) -> list[str]:
    """Every field of the document (of a kind the simulation reads) whose type or bound is wrong, as
    `file: document N Kind/name: path: message` lines ([] when the shape is right or the kind is not one of these)."""
    schema = SHAPES.get(doc.kind)
    if schema is None:
        return []
    issues: list[ValidationIssue] = []
    validate(doc.raw, schema, "", issues)
    out = []
    for issue in issues:
        path = issue.path if len(issue.path) <= 200 else issue.path[:200] + "…"
        message = issue.message if len(issue.message) <= 300 else issue.message[:300] + "…"
        out.append(f"{doc.ref}: {path}: {message}")
    return out


def pod_count(doc: Document) -> int:
    """How many pods a document of a shape-checked kind stands for, without making them (0 for other kinds)."""
    raw_spec = doc.raw.get("spec")
    spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    if doc.kind == "Pod":
        return 1
    if doc.kind in ("Deployment", "ReplicaSet", "ReplicationController", "StatefulSet"):
        n = spec.get("replicas", 1)
        return n if isinstance(n, int) else 1
    if doc.kind == "CronJob":
        template = spec.get("jobTemplate")
        job = template.get("spec") if isinstance(template, dict) else None
        spec = job if isinstance(job, dict) else {}
    if doc.kind in ("Job", "CronJob"):
        p, c = spec.get("parallelism", 1), spec.get("completions", 1)
        p = p if isinstance(p, int) else 1
        c = c if isinstance(c, int) else 1
        return min(p, c or 1) if doc.kind == "CronJob" or spec.get("completions") is not None else p
    return 0
