"""Kubernetes documents from YAML or JSON files, as kubectl reads them: multi-document YAML, `kind: List`."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

import yaml


class DocumentError(ValueError):
    """A file that is not a set of Kubernetes documents, named with the line where known."""


@dataclass
class Document:
    """One Kubernetes object and where it came from."""

    source: str
    index: int
    api_version: str
    kind: str
    name: str
    namespace: str | None
    raw: dict[str, Any]

    @property
    def ref(self) -> str:
        """`file: Kind/name`, the prefix of every message about this document."""
        return f"{self.source}: {self.kind}/{self.name}"


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise DocumentError(f"{path}: {e.strerror}") from None


def parse_documents(text: str, source: str) -> list[Document]:
    """The Kubernetes objects in one YAML or JSON text; List kinds are flattened into their items."""
    try:
        raws = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise DocumentError(f"{source}:{where}: not valid YAML: {problem}") from None
    out: list[Document] = []

    def add(raw: Any, position: str) -> None:
        if raw is None:
            return
        if not isinstance(raw, dict):
            raise DocumentError(f"{source}: document {position}: expected a Kubernetes object (a mapping), got "
                                f"{type(raw).__name__}")
        kind = raw.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(raw.get("items"), list):
            for j, item in enumerate(raw["items"]):
                add(item, f"{position}.items[{j}]")
            return
        if not isinstance(kind, str) or not kind:
            raise DocumentError(f"{source}: document {position}: kind: required")
        meta: dict[str, Any] = raw["metadata"] if isinstance(raw.get("metadata"), dict) else {}
        name = meta.get("name") or meta.get("generateName") or "(unnamed)"
        out.append(Document(source=source, index=len(out), api_version=str(raw.get("apiVersion") or ""),
                            kind=kind, name=str(name), namespace=meta.get("namespace"), raw=raw))

    for i, raw in enumerate(raws):
        add(raw, str(i + 1))
    return out


def load_documents(paths: list[str]) -> list[Document]:
    """Every Kubernetes object in the given files ("-" is stdin), in order."""
    docs: list[Document] = []
    for path in paths:
        text = _read(path)
        if path.endswith(".json") and text.strip().startswith("{"):
            try:
                text = json.dumps(json.loads(text))
            except json.JSONDecodeError as e:
                raise DocumentError(f"{path}: line {e.lineno}: not valid JSON: {e.msg}") from None
        docs.extend(parse_documents(text, "stdin" if path == "-" else path))
    return docs
