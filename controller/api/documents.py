"""Kubernetes documents from YAML or JSON files, as kubectl reads them: multi-document YAML, `kind: List`.

Files are untrusted input, so reading them is bounded: UTF-8 only, at most MAX_FILE_BYTES, nesting at most MAX_DEPTH,
aliases that expand to at most MAX_ALIAS_EXPANSION nodes, duplicate keys refused (kubectl refuses them too), and
every error is one line naming the file, the line or document, and the field, with any quoted value cut short.
YAML is parsed by libyaml (CSafeLoader's parser and composer) and turned into Python values by an iterative builder
here, which is several times faster than PyYAML's constructor and checks the limits on the way.
"""

from __future__ import annotations

import gc
import json
import re
import sys
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_FILE_BYTES = 256 * 2**20
MAX_DEPTH = 100  # Kubernetes objects nest ~20 deep (a CronJob's pod affinity); 100 leaves room, never the C stack
MAX_ALIAS_EXPANSION = 1_000_000  # nodes a document may reach through aliases (a "billion laughs" reaches 10^9)
_COMPOSE_SAFE_DEPTH = 2000  # libyaml's composer recurses in C: it crashes the process somewhere past 10^4 levels
SHORT = 60

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_COLLECTION_TAGS = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})
MAX_INT_TEXT = 32
MAX_DOCUMENTS = 1_000_000
_MERGE = "tag:yaml.org,2002:merge"
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):
    """libyaml's parser and composer with the implicit tag of repeated plain scalars (keys, common values) cached:
    resolving tags by regex in Python is most of the composer's time on large files."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._tags: dict[str, str] = {}

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is ScalarNode and implicit[0] and isinstance(value, str) and len(value) <= 64:
            tag = self._tags.get(value)
            if tag is None:
                tag = super().resolve(kind, value, implicit)
                if len(self._tags) < 100_000:
                    self._tags[value] = tag
            return tag
        return super().resolve(kind, value, implicit)

# kind -> the API groups/versions it is served under (a NodePool from another group is not Karpenter's)
API_VERSIONS: dict[str, frozenset[str]] = {
    "NodePool": frozenset({"karpenter.sh/v1", "karpenter.sh/v1beta1"}),
    "NodeClaim": frozenset({"karpenter.sh/v1", "karpenter.sh/v1beta1"}),
    "EC2NodeClass": frozenset({"karpenter.k8s.aws/v1", "karpenter.k8s.aws/v1beta1"}),
    "Provisioner": frozenset({"karpenter.sh/v1alpha5"}),
    "Machine": frozenset({"karpenter.sh/v1alpha5"}),
    "AWSNodeTemplate": frozenset({"karpenter.k8s.aws/v1alpha1"}),
    "Pod": frozenset({"v1"}),
    "Node": frozenset({"v1"}),
    "PersistentVolume": frozenset({"v1"}),
    "PersistentVolumeClaim": frozenset({"v1"}),
    "ReplicationController": frozenset({"v1"}),
    "Deployment": frozenset({"apps/v1", "apps/v1beta1", "apps/v1beta2", "extensions/v1beta1"}),
    "ReplicaSet": frozenset({"apps/v1", "apps/v1beta2", "extensions/v1beta1"}),
    "DaemonSet": frozenset({"apps/v1", "apps/v1beta2", "extensions/v1beta1"}),
    "StatefulSet": frozenset({"apps/v1", "apps/v1beta1", "apps/v1beta2"}),
    "Job": frozenset({"batch/v1"}),
    "CronJob": frozenset({"batch/v1", "batch/v1beta1"}),
    "StorageClass": frozenset({"storage.k8s.io/v1", "storage.k8s.io/v1beta1"}),
}


class DocumentError(ValueError):
    """A file that is not a set of Kubernetes documents, named with the line or document where known."""


def short(value: Any, limit: int = SHORT) -> str:
    """repr(value) cut to about `limit` characters, saying how long it was: a bad value is quoted, never dumped."""
    if isinstance(value, str | bytes) and len(value) > 4 * limit:
        value = value[:limit + 1]  # no repr of a huge string just to cut it
        text = repr(value)
        return text[:limit] + "…"
    if isinstance(value, dict | list | tuple | set) and len(value) > limit:
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # a recursive structure, an int too long for repr
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


@dataclass
class Document:
    """One Kubernetes object and where it came from (`position`: "3", or "2.items[0]" inside a List)."""

    source: str
    index: int
    api_version: str
    kind: str
    name: str
    namespace: str | None
    raw: dict[str, Any]
    position: str = ""

    @property
    def ref(self) -> str:
        """`file: document N Kind/name`, the prefix of every message about this document."""
        where = f"document {self.position} " if self.position else ""
        return f"{self.source}: {where}{self.kind}/{self.name}"


def _read(path: str) -> str:
    if path == "-":
        data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
    else:
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except OSError as e:
            raise DocumentError(f"{path}: {e.strerror}") from None
    source = "stdin" if path == "-" else path
    if len(data) > MAX_FILE_BYTES:
        raise DocumentError(f"{source}: larger than {MAX_FILE_BYTES // 2**20} MiB, the most karpy reads from a file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DocumentError(f"{source}: line {line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                            f"{e.start})") from None


# ---- YAML ------------------------------------------------------------------------------------------------------------

_LEADING_INDICATORS = re.compile(r"^[ \t?:-]*", re.MULTILINE)


def _nesting_bound(text: str) -> int:
    """An upper bound on how deep the YAML text nests: block collections nest only where a line's indentation or
    its leading `- `/`? ` indicators grow, flow collections only inside brackets (quoted brackets may overcount)."""
    block = max(map(len, text.splitlines()), default=0)  # a line's indentation is at most its length
    if block > _COMPOSE_SAFE_DEPTH // 2:  # long lines (e.g. an annotation): count only the leading indicators
        block = max((len(m) for m in _LEADING_INDICATORS.findall(text)), default=0)
    if "[" not in text and "{" not in text:
        return block + 1
    opens = text.count("[") + text.count("{")
    if block + opens < _COMPOSE_SAFE_DEPTH:
        return block + opens + 1
    import numpy as np

    raw = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    delta = ((raw == 0x5B).astype(np.int32) + (raw == 0x7B) - (raw == 0x5D) - (raw == 0x7D))
    flow = int(np.cumsum(delta).max()) if len(delta) else 0
    return block + max(flow, 0) + 1


def _check_nesting_by_events(text: str, source: str) -> None:
    """Exact nesting check on libyaml's event stream (iterative), stopping at the first level past MAX_DEPTH."""
    loader = _Loader(text)
    depth = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    mark = event.start_mark
                    line = f" line {mark.line + 1}:" if mark is not None else ""
                    raise DocumentError(f"{source}:{line} nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as e:
        # libyaml from PyYAML 6.0.4 on stops deep flow collections itself, scanning ahead of the events counted here
        if "nesting depth" not in str(e.problem):
            raise
        line = f" line {e.problem_mark.line + 1}:" if e.problem_mark is not None else ""
        raise DocumentError(f"{source}:{line} nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


class _Builder:
    """Python values from composed YAML nodes, iteratively (no recursion, whatever the depth), with Kubernetes'
    limits: duplicate keys, depth, alias expansion and recursive aliases are errors."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.scalars = yaml.constructor.SafeConstructor()
        self.built: dict[int, Any] = {}  # id(node) -> value: an alias yields the value its anchor built
        self.aliased = False

    def error(self, node: Node, message: str) -> DocumentError:
        return DocumentError(f"{self.source}: line {node.start_mark.line + 1}: {message}")

    def scalar(self, node: ScalarNode) -> Any:
        if node.tag == _STR:
            return node.value
        if node.tag == _INT and len(node.value) > MAX_INT_TEXT:  # Kubernetes' integers are int64: 19 digits
            raise self.error(node, f"{short(node.value, 30)}: an integer of more than {MAX_INT_TEXT} characters")
        try:
            return self.scalars.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as e:
            problem = getattr(e, "problem", None) or str(e)
            problem = problem if len(problem) <= 120 else problem[:120] + "…"
            raise self.error(node, f"{short(node.value)}: {problem}") from None

    def start(self, node: Node) -> tuple[Any, bool]:
        """The value for node, and whether its children are still to be filled in."""
        hit = self.built.get(id(node))
        if hit is not None:
            self.aliased = True
            return hit, False
        if isinstance(node, ScalarNode):
            return self.scalar(node), False
        if node.tag not in _COLLECTION_TAGS:  # PyYAML's safe loader refuses these too (e.g. !!python/object)
            raise self.error(node, f"tag {short(node.tag)} is not supported")
        value: Any = {} if isinstance(node, MappingNode) else []
        self.built[id(node)] = value
        return value, True

    def build(self, root: Node, depth0: int = 1) -> Any:
        result, open_ = self.start(root)
        stack: list[tuple[Node, Any, int]] = [(root, result, depth0)] if open_ else []
        start, scalar, push = self.start, self.scalar, stack.append
        while stack:
            node, value, depth = stack.pop()
            if depth > MAX_DEPTH:
                raise self.error(node, f"nested deeper than {MAX_DEPTH} levels")
            if node.__class__ is SequenceNode:
                for child in node.value:
                    if child.__class__ is ScalarNode:  # the common case, inline: no tuple, no call for strings
                        value.append(child.value if child.tag == _STR else scalar(child))
                        continue
                    v, open_ = start(child)
                    value.append(v)
                    if open_:
                        push((child, v, depth + 1))
                continue
            merges: list[Node] = []
            for key_node, child in node.value:
                if key_node.__class__ is not ScalarNode:
                    raise self.error(key_node, "a mapping key must be a string, not a list or a mapping")
                tag = key_node.tag
                if tag == _MERGE:
                    merges.append(child)
                    continue
                key = key_node.value if tag == _STR else scalar(key_node)
                try:
                    duplicate = key in value
                except TypeError:
                    raise self.error(key_node, f"key {short(key)} cannot be a mapping key") from None
                if duplicate:
                    raise self._duplicate(node, key_node, key)
                if child.__class__ is ScalarNode:
                    value[key] = child.value if child.tag == _STR else scalar(child)
                    continue
                v, open_ = start(child)
                value[key] = v
                if open_:
                    push((child, v, depth + 1))
            if merges:
                self._merge(node, value, merges, depth)
        if self.aliased:
            self._check_expansion(root)
        return result

    def _duplicate(self, node: Node, key_node: Node, key: Any) -> DocumentError:
        """Kubernetes refuses a mapping with a key twice (YAML says keys are unique); PyYAML would keep the last."""
        first = next((k.start_mark.line + 1 for k, _ in node.value
                      if k.__class__ is ScalarNode and k.tag != _MERGE and k is not key_node
                      and (k.value if k.tag == _STR else self.scalar(k)) == key), None)
        where = f" (first at line {first})" if first is not None else ""
        return self.error(key_node, f"duplicate key {short(key)}{where}")

    def _merge(self, node: Node, value: dict[Any, Any], merges: list[Node], depth: int) -> None:
        """`<<: *base` (or a list of them): keys of the merged mappings that the mapping does not set itself."""
        sources: list[Node] = []
        for m in merges:
            sources.extend(m.value if isinstance(m, SequenceNode) else [m])
        for src in sources:
            if not isinstance(src, MappingNode):
                raise self.error(src, "<< merges only mappings")
            # built afresh: the anchor's own mapping may still be waiting on the stack, half filled
            built = _Builder(self.source).build(src, depth + 1)
            for k, v in built.items():
                value.setdefault(k, v)

    def _check_expansion(self, root: Node) -> None:
        """Aliases share nodes; count the nodes a reader would visit with every alias expanded (post-order, memoized,
        iterative), refusing recursive aliases and documents that expand past MAX_ALIAS_EXPANSION."""
        size: dict[int, int] = {}
        on_path: set[int] = set()
        stack: list[tuple[Node, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            key = id(node)
            if done:
                on_path.discard(key)
                children = _children(node)
                total = 1 + sum(size[id(c)] for c in children)
                if total > MAX_ALIAS_EXPANSION:
                    raise self.error(node, f"aliases expand to more than {MAX_ALIAS_EXPANSION} nodes")
                size[key] = total
                continue
            if key in size:
                continue
            if key in on_path:
                raise self.error(node, "recursive alias (a node that contains itself)")
            on_path.add(key)
            stack.append((node, True))
            for c in _children(node):
                if id(c) in on_path:
                    raise self.error(c, "recursive alias (a node that contains itself)")
                if id(c) not in size:
                    stack.append((c, False))


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def _yaml_documents(text: str, source: str) -> list[Any]:
    if _nesting_bound(text) > _COMPOSE_SAFE_DEPTH:
        _check_nesting_by_events(text, source)
    loader = _Loader(text)
    out: list[Any] = []
    # no cyclic garbage is made here (recursive aliases are refused), and the collector's passes over the growing
    # heap cost a large file a fifth of its load time
    collecting = gc.isenabled()
    gc.disable()
    try:
        while loader.check_node():
            if len(out) >= MAX_DOCUMENTS:
                raise DocumentError(f"{source}: more than {MAX_DOCUMENTS} documents, the most karpy reads from a file")
            node = loader.get_node()
            out.append(_Builder(source).build(node) if node is not None else None)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise DocumentError(f"{source}:{where} not valid YAML: {short(problem, 120)}") from None
    finally:
        loader.dispose()
        if collecting:
            gc.enable()
    return out


# ---- JSON ------------------------------------------------------------------------------------------------------------

def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DocumentError(f"duplicate key {short(k)}")
        out[k] = v
    return out


def _json_constant(name: str) -> Any:
    raise DocumentError(f"{name} is not a JSON number")


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > 30:
        raise DocumentError(f"number {short(text, 24)} has more than 30 digits")
    return int(text)


def _json_document(text: str, source: str) -> Any:
    try:
        value = json.loads(text, object_pairs_hook=_json_pairs, parse_constant=_json_constant, parse_int=_json_int)
    except json.JSONDecodeError as e:
        raise DocumentError(f"{source}: line {e.lineno}: not valid JSON: {e.msg}") from None
    except DocumentError as e:
        raise DocumentError(f"{source}: not valid JSON: {e}") from None
    except RecursionError:
        raise DocumentError(f"{source}: nested deeper than {MAX_DEPTH} levels") from None
    _check_depth(value, source)
    return value


def _check_depth(value: Any, source: str) -> None:
    """Refuse a value nested deeper than MAX_DEPTH (iteratively; json.loads stops only at Python's recursion limit)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children: Any = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        if depth > MAX_DEPTH:
            raise DocumentError(f"{source}: nested deeper than {MAX_DEPTH} levels")
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))


# ---- documents -------------------------------------------------------------------------------------------------------

def _documents(raws: list[Any], source: str) -> list[Document]:
    out: list[Document] = []

    def add(raw: Any, position: str) -> None:
        if raw is None:
            return
        if not isinstance(raw, dict):
            raise DocumentError(f"{source}: document {position}: expected a Kubernetes object (a mapping), got "
                                f"{type(raw).__name__} {short(raw)}")
        kind = raw.get("kind")
        api_version = raw.get("apiVersion")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(raw.get("items"), list):
            for j, item in enumerate(raw["items"]):
                add(item, f"{position}.items[{j}]")
            return
        if not isinstance(kind, str) or not kind:
            got = "" if kind is None else f", got {short(kind)}"
            raise DocumentError(f"{source}: document {position}: kind: required (a string){got}")
        meta = raw.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise DocumentError(f"{source}: document {position} {kind}: metadata: must be an object, got "
                                f"{type(meta).__name__} {short(meta)}")
        meta = meta or {}
        name = meta.get("name") or meta.get("generateName") or "(unnamed)"
        if not isinstance(name, str):
            raise DocumentError(f"{source}: document {position} {kind}: metadata.name: must be a string, got "
                                f"{type(name).__name__} {short(name)}")
        namespace = meta.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise DocumentError(f"{source}: document {position} {kind}/{short(name, 40)}: metadata.namespace: must be "
                                f"a string, got {type(namespace).__name__} {short(namespace)}")
        ref = f"{source}: document {position} {kind}/{short(name, 80) if len(name) > 80 else name}"
        if not isinstance(api_version, str) or not api_version:
            got = "" if api_version is None else f", got {short(api_version)}"
            raise DocumentError(f"{ref}: apiVersion: required (a string){got}")
        served = API_VERSIONS.get(kind)
        if served is not None and api_version not in served:
            raise DocumentError(f"{ref}: apiVersion: {short(api_version)} does not serve {kind} (known: "
                                f"{', '.join(sorted(served))})")
        out.append(Document(source=source, index=len(out), api_version=api_version, kind=kind, name=name,
                            namespace=namespace, raw=raw, position=position))

    for i, raw in enumerate(raws):
        add(raw, str(i + 1))
    return out


def parse_documents(text: str, source: str, *, json_text: bool = False) -> list[Document]:
    """The Kubernetes objects in one YAML (or, with json_text, JSON) text; List kinds are flattened into their
    items. DocumentError names the line or the document and field at fault."""
    raws = [_json_document(text, source)] if json_text else _yaml_documents(text, source)
    return _documents(raws, source)


def load_documents(paths: list[str]) -> list[Document]:
    """Every Kubernetes object in the given files ("-" is stdin), in order."""
    docs: list[Document] = []
    for path in paths:
        text = _read(path)
        source = "stdin" if path == "-" else path
        json_text = path.endswith(".json") and text.lstrip().startswith("{")
        docs.extend(parse_documents(text, source, json_text=json_text))
    return docs
