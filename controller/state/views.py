"""Typed views of the objects the controllers read most: NodeClaims, Nodes and Pods, made once at the informer's edge.

A view IS the API's JSON object (a dict subclass with no per-object state beyond the dict itself), so a write still
sends it, or a copy of it, as JSON, and code that reads the dict keeps working; reads go through the typed properties
below, which compute from the object on demand (nothing cached: the cluster holds tens of thousands of pods). Views
are shared read-only between controllers: changing one raises, and a copy (`dict(view)`, `copy.copy`,
`copy.deepcopy`) is a plain dict to change and send.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, NoReturn, Self

import yaml

from controller.api import conditions as C
from controller.api import labels as L
from controller.api.quantity import resources_from_dict

Obj = dict[str, Any]

_EMPTY: Mapping[str, Any] = {}


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


class ObjectView(dict[str, Any]):
    """An API object read through typed properties (metadata, conditions); the dict itself is the raw object."""

    __slots__ = ()

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Self:
        """The object as this view: itself when it already is one (from an informer), else a view over a shallow copy
        (a manifest, a test's dict)."""
        return obj if isinstance(obj, cls) else cls(obj)

    # ---- read-only -----------------------------------------------------------------------------------------------
    def _readonly(self, *_: Any, **__: Any) -> NoReturn:
        raise TypeError(f"{type(self).__name__} {self.key!r} is shared read-only: change a copy (dict(view) or "
                        "copy.deepcopy(view)) and send that")

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = __ior__ = _readonly

    def __copy__(self) -> Obj:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Obj:
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))

    # ---- the raw object ------------------------------------------------------------------------------------------
    @property
    def raw(self) -> Obj:
        """The API's JSON object (this view), for writes and for functions that take manifests."""
        return self

    # ---- metadata ------------------------------------------------------------------------------------------------
    @property
    def metadata(self) -> Mapping[str, Any]:
        """metadata ({} when absent)."""
        return _map(self.get("metadata"))

    @property
    def name(self) -> str:
        """metadata.name."""
        return str(self.metadata.get("name") or "")

    @property
    def namespace(self) -> str:
        """metadata.namespace ("" for cluster-scoped objects)."""
        return str(self.metadata.get("namespace") or "")

    @property
    def key(self) -> str:
        """The informer's key: namespace/name, or name for cluster-scoped objects."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def uid(self) -> str:
        """metadata.uid."""
        return str(self.metadata.get("uid") or "")

    @property
    def resource_version(self) -> str:
        """metadata.resourceVersion."""
        return str(self.metadata.get("resourceVersion") or "")

    @property
    def labels(self) -> Mapping[str, str]:
        """metadata.labels."""
        return _map(self.metadata.get("labels"))

    @property
    def annotations(self) -> Mapping[str, str]:
        """metadata.annotations."""
        return _map(self.metadata.get("annotations"))

    @property
    def owner_references(self) -> list[Mapping[str, Any]]:
        """metadata.ownerReferences (entries that are not objects left out)."""
        return [r for r in _list(self.metadata.get("ownerReferences")) if isinstance(r, Mapping)]

    @property
    def finalizers(self) -> list[str]:
        """metadata.finalizers."""
        return [str(f) for f in _list(self.metadata.get("finalizers"))]

    @property
    def created(self) -> float | None:
        """metadata.creationTimestamp as epoch seconds."""
        return C.parse_time(self.metadata.get("creationTimestamp"))

    @property
    def deletion_timestamp(self) -> float | None:
        """metadata.deletionTimestamp as epoch seconds (None when not being deleted)."""
        return C.parse_time(self.metadata.get("deletionTimestamp"))

    @property
    def deleting(self) -> bool:
        """Whether the object has a deletionTimestamp."""
        return bool(self.metadata.get("deletionTimestamp"))

    # ---- status conditions ---------------------------------------------------------------------------------------
    @property
    def status(self) -> Mapping[str, Any]:
        """status ({} when absent)."""
        return _map(self.get("status"))

    def condition(self, type_: str) -> Mapping[str, Any] | None:
        """The status condition of that type, if any."""
        for c in _list(self.status.get("conditions")):
            if isinstance(c, Mapping) and c.get("type") == type_:
                return c
        return None

    def is_true(self, type_: str) -> bool:
        """Whether the condition of that type is True."""
        c = self.condition(type_)
        return c is not None and c.get("status") == "True"

    def is_false(self, type_: str) -> bool:
        """Whether the condition of that type is False (not merely absent or Unknown)."""
        c = self.condition(type_)
        return c is not None and c.get("status") == "False"

    @property
    def spec(self) -> Mapping[str, Any]:
        """spec ({} when absent)."""
        return _map(self.get("spec"))

    @property
    def nodepool(self) -> str:
        """The karpenter.sh/nodepool label ("" when it has none)."""
        return str(self.labels.get(L.NODEPOOL) or "")


# a view dumps as the mapping it is (PyYAML's safe dumper represents only plain dicts on its own)
yaml.SafeDumper.add_multi_representer(ObjectView, yaml.representer.SafeRepresenter.represent_dict)


def _has_taint(taints: list[Any], key: str, effect: str) -> bool:
    return any(isinstance(t, Mapping) and t.get("key") == key and t.get("effect") == effect for t in taints)


class _Machine(ObjectView):
    """What Nodes and NodeClaims both carry: taints, capacity and allocatable."""

    __slots__ = ()

    @property
    def taints(self) -> list[Mapping[str, Any]]:
        """spec.taints."""
        return [t for t in _list(self.spec.get("taints")) if isinstance(t, Mapping)]

    @property
    def capacity(self) -> dict[str, int]:
        """status.capacity in canonical units (raises QuantityError on a malformed quantity)."""
        return resources_from_dict(dict(_map(self.status.get("capacity"))))

    @property
    def allocatable(self) -> dict[str, int]:
        """status.allocatable in canonical units (raises QuantityError on a malformed quantity)."""
        return resources_from_dict(dict(_map(self.status.get("allocatable"))))


class NodeView(_Machine):
    """A Node."""

    __slots__ = ()

    @property
    def provider_id(self) -> str:
        """spec.providerID ("" when the cloud has not set it yet)."""
        return str(self.spec.get("providerID") or "")

    @property
    def unschedulable(self) -> bool:
        """spec.unschedulable (cordoned)."""
        return bool(self.spec.get("unschedulable"))

    @property
    def ready(self) -> bool:
        """Whether the Ready condition is True (the kubelet is posting status)."""
        return self.is_true("Ready")

    @property
    def registered(self) -> bool:
        """Whether Karpenter has registered it (karpenter.sh/registered=true)."""
        return self.labels.get(L.REGISTERED) == "true"

    @property
    def initialized(self) -> bool:
        """Whether Karpenter has initialized it (karpenter.sh/initialized=true)."""
        return self.labels.get(L.INITIALIZED) == "true"

    @property
    def disrupted(self) -> bool:
        """Whether it carries karpenter.sh/disrupted:NoSchedule (a disruption command is replacing it)."""
        return _has_taint(_list(self.spec.get("taints")), L.DISRUPTED_TAINT_KEY, "NoSchedule")


class NodeClaimView(_Machine):
    """A NodeClaim."""

    __slots__ = ()

    @property
    def provider_id(self) -> str:
        """status.providerID ("" until launched)."""
        return str(self.status.get("providerID") or "")

    @property
    def node_name(self) -> str:
        """status.nodeName ("" until registered)."""
        return str(self.status.get("nodeName") or "")

    @property
    def nodeclass_name(self) -> str:
        """spec.nodeClassRef.name."""
        return str(_map(self.spec.get("nodeClassRef")).get("name") or "")

    @property
    def requirements(self) -> list[Mapping[str, Any]]:
        """spec.requirements."""
        return [r for r in _list(self.spec.get("requirements")) if isinstance(r, Mapping)]

    @property
    def instance_type_options(self) -> list[str]:
        """The instance types its node.kubernetes.io/instance-type In requirement allows ([] when none)."""
        return next((list(r.get("values") or []) for r in self.requirements
                     if r.get("key") == L.INSTANCE_TYPE and r.get("operator") == "In"), [])

    @property
    def startup_taints(self) -> list[Mapping[str, Any]]:
        """spec.startupTaints."""
        return [t for t in _list(self.spec.get("startupTaints")) if isinstance(t, Mapping)]

    @property
    def requests(self) -> dict[str, int]:
        """spec.resources.requests in canonical units (raises QuantityError on a malformed quantity)."""
        return resources_from_dict(dict(_map(_map(self.spec.get("resources")).get("requests"))))

    @property
    def launched(self) -> bool:
        """Whether Launched is True."""
        return self.is_true("Launched")

    @property
    def instance_terminating(self) -> bool:
        """Whether InstanceTerminating is True (the cloud instance is going away)."""
        return self.is_true("InstanceTerminating")


class PodView(ObjectView):
    """A Pod (as the informer compacts it: what scheduling and draining read)."""

    __slots__ = ()

    @property
    def node_name(self) -> str:
        """spec.nodeName ("" while unbound)."""
        return str(self.spec.get("nodeName") or "")

    @property
    def phase(self) -> str:
        """status.phase."""
        return str(self.status.get("phase") or "")

    @property
    def terminal(self) -> bool:
        """Succeeded or Failed."""
        return self.phase in ("Succeeded", "Failed")

    @property
    def nominated_node_name(self) -> str:
        """status.nominatedNodeName (kube-scheduler's preemption nominee)."""
        return str(self.status.get("nominatedNodeName") or "")

    @property
    def mirror(self) -> bool:
        """A static pod's mirror (managed by the kubelet, never evicted or provisioned for)."""
        return "kubernetes.io/config.mirror" in self.annotations

    @property
    def controller_ref(self) -> Mapping[str, Any] | None:
        """The ownerReference marked controller, if any."""
        return next((r for r in self.owner_references if r.get("controller")), None)

    @property
    def daemonset_uid(self) -> str:
        """The UID of the DaemonSet that controls it ("" when none does)."""
        ref = self.controller_ref
        return str(ref.get("uid") or "") if ref is not None and ref.get("kind") == "DaemonSet" else ""

    @property
    def ready(self) -> bool:
        """Whether the pod's Ready condition is True."""
        return self.is_true("Ready")

    @property
    def unhealthy(self) -> bool:
        """Whether its Ready condition is False: the pod a PodDisruptionBudget with unhealthyPodEvictionPolicy
        AlwaysAllow lets be evicted (Karpenter's pdb limits check exactly this)."""
        return self.is_false("Ready")
