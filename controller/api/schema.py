"""One field schema per Karpenter kind drives three things: validation (types, enums, required fields, unknown fields
with a did-you-mean hint), defaulting, and the openAPIV3Schema of the generated CRDs. Rules that span fields live in
controller.api.validation."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller.api.documents import short
from controller.api.quantity import QuantityError, parse_quantity

Check = Callable[[Any], str | None]  # returns an error message, or None when the value is fine


@dataclass(frozen=True)
class Rule:
    """A rule over one field's value, written twice: as the CEL expression the generated CRD carries
    (x-kubernetes-validations, Karpenter's rule and message) and as the Python predicate `karpy validate` runs, so
    both reject the same documents with the same message. A transition rule (oldSelf) only applies on update."""

    cel: str
    message: str
    check: Callable[[Any], bool] | None = None
    transition: bool = False


@dataclass
class ValidationIssue:
    """An error at a field path (the document is added by the caller)."""

    path: str
    message: str
    blocking: bool = False  # a value of the wrong type: the rules above it cannot run


@dataclass
class Field:
    """A node of the schema."""

    type: str  # string, integer, boolean, object, array, map, quantity, int-or-string
    description: str = ""
    fields: dict[str, Field] = field(default_factory=dict)  # object
    required: tuple[str, ...] = ()
    items: Field | None = None  # array
    values: Field | None = None  # map values
    enum: tuple[str, ...] = ()
    default: Any = None
    minimum: int | None = None
    maximum: int | None = None
    max_items: int | None = None
    min_items: int | None = None
    pattern: str | None = None
    check: Check | None = None
    preserve_unknown: bool = False
    rules: tuple[Rule, ...] = ()
    min_length: int | None = None
    max_length: int | None = None
    max_properties: int | None = None
    format: str | None = None
    list_type: str | None = None  # x-kubernetes-list-type
    list_map_keys: tuple[str, ...] = ()  # x-kubernetes-list-map-keys of a list-type map
    pattern_message: str | None = None  # what karpy says when the pattern does not match
    open_crd: bool = False  # the CRD serves an open map (Karpenter's kubelet); karpy still types the known fields


def S(description: str = "", **kw: Any) -> Field:
    """A string field."""
    return Field("string", description, **kw)


def I(description: str = "", **kw: Any) -> Field:  # noqa: E743
    """An integer field."""
    return Field("integer", description, **kw)


def B(description: str = "", **kw: Any) -> Field:
    """A boolean field."""
    return Field("boolean", description, **kw)


def Q(description: str = "", **kw: Any) -> Field:
    """A resource quantity (string or number)."""
    return Field("quantity", description, **kw)


def O(description: str = "", required: tuple[str, ...] = (), default: Any = None,  # noqa: E743
      rules: tuple[Rule, ...] = (), **fields: Field) -> Field:
    """An object with known fields (`default` fills it in when absent)."""
    return Field("object", description, fields=fields, required=required, default=default, rules=rules)


def A(items: Field, description: str = "", **kw: Any) -> Field:
    """An array."""
    return Field("array", description, items=items, **kw)


def M(values: Field, description: str = "", **kw: Any) -> Field:
    """A map with string keys."""
    return Field("map", description, values=values, **kw)


_TYPE_NAMES = {"string": "a string", "integer": "an integer", "boolean": "true or false", "object": "an object",
               "array": "a list", "map": "a map", "quantity": "a quantity such as 100m or 2Gi",
               "int-or-string": "an integer or a string"}


# one check per type, looked up once per value (validate runs for every field of every document: 20k-pod files)
_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "map": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "quantity": lambda v: isinstance(v, str | int | float) and not isinstance(v, bool),
    "int-or-string": lambda v: isinstance(v, str | int) and not isinstance(v, bool),
}


def validate(value: Any, schema: Field, path: str, issues: list[ValidationIssue]) -> None:
    """Check value against schema, appending every problem found (not just the first)."""
    t = schema.type
    before = len(issues)
    if not _TYPE_CHECKS[t](value):
        issues.append(ValidationIssue(path, f"must be {_TYPE_NAMES[t]}, got {type(value).__name__} {short(value)}",
                                      blocking=True))
        return
    if t == "object":
        for name in schema.required:
            if name not in value or value[name] is None:
                issues.append(ValidationIssue(_join(path, name), "required"))
        for name, child in value.items():
            sub = schema.fields.get(name)
            if sub is None:
                if schema.preserve_unknown:
                    continue
                hint = difflib.get_close_matches(str(name), list(schema.fields), n=1, cutoff=0.6)
                suffix = f'; did you mean "{hint[0]}"?' if hint else f"; known fields: {', '.join(schema.fields)}"
                issues.append(ValidationIssue(_join(path, str(name)), "unknown field" + suffix))
                continue
            if child is None:
                continue
            validate(child, sub, _join(path, str(name)), issues)
    elif t == "map":
        assert schema.values is not None
        if schema.max_properties is not None and len(value) > schema.max_properties:
            issues.append(ValidationIssue(path, f"takes at most {schema.max_properties} entries, got {len(value)}"))
        for k, v in value.items():
            validate(v, schema.values, f"{path}[{k}]", issues)
    elif t == "array":
        assert schema.items is not None
        if schema.min_items is not None and len(value) < schema.min_items:
            issues.append(ValidationIssue(path, f"needs at least {schema.min_items} item(s)"))
        if schema.max_items is not None and len(value) > schema.max_items:
            issues.append(ValidationIssue(path, f"takes at most {schema.max_items} item(s), got {len(value)}"))
        if schema.list_type == "map" and schema.list_map_keys:
            keys: list[tuple[Any, ...]] = []
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    key = tuple(item.get(k) for k in schema.list_map_keys)
                    if key in keys:
                        issues.append(ValidationIssue(f"{path}[{i}]", f"duplicate entry for {key}"))
                    keys.append(key)
        if schema.list_type == "set":
            seen: list[Any] = []
            for i, item in enumerate(value):
                if item in seen:
                    issues.append(ValidationIssue(f"{path}[{i}]", f"duplicate value {item!r}"))
                seen.append(item)
        for i, item in enumerate(value):
            validate(item, schema.items, f"{path}[{i}]", issues)
    elif t == "quantity":
        try:
            parse_quantity(value)
        except QuantityError as e:
            issues.append(ValidationIssue(path, str(e)))
            return
    if schema.enum and value not in schema.enum:
        issues.append(ValidationIssue(path, f"{short(value)} is not one of {', '.join(schema.enum)}"))
    if t == "integer":
        if schema.minimum is not None and value < schema.minimum:
            issues.append(ValidationIssue(path, f"must be >= {schema.minimum}, got {value}"))
        if schema.maximum is not None and value > schema.maximum:
            issues.append(ValidationIssue(path, f"must be <= {schema.maximum}, got {value}"))
    if isinstance(value, str):
        if schema.min_length is not None and len(value) < schema.min_length:
            issues.append(ValidationIssue(path, f"must be at least {schema.min_length} character(s)"))
        if schema.max_length is not None and len(value) > schema.max_length:
            issues.append(ValidationIssue(path, f"must be at most {schema.max_length} characters, got {len(value)}"))
    if schema.pattern and isinstance(value, str) and not re.search(schema.pattern, value):
        what = schema.pattern_message or f"does not match {schema.pattern}"
        issues.append(ValidationIssue(path, f"{short(value)} {what}"))
    elif schema.check is not None:
        msg = schema.check(value)
        if msg:
            issues.append(ValidationIssue(path, msg))
    if any(i.blocking for i in issues[before:]):
        return  # as the apiserver: rules run unless a value below has the wrong type
    for rule in schema.rules:
        if rule.check is None or rule.transition:
            continue
        try:
            passed = rule.check(value)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            passed = False  # CEL fails a rule whose evaluation errors (a missing field, a non-integer)
        if not passed:
            issues.append(ValidationIssue(path, rule.message))


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def apply_defaults(value: Any, schema: Field) -> Any:
    """A copy of value with every schema default filled in where the field is absent."""
    if schema.type == "object" and isinstance(value, dict):
        out = {}
        for name, sub in schema.fields.items():
            if name in value and value[name] is not None:
                out[name] = apply_defaults(value[name], sub)
            elif sub.default is not None:
                out[name] = apply_defaults(_copy(sub.default), sub)
        for name, v in value.items():
            if name not in out and name not in schema.fields:
                out[name] = v
        return out
    if schema.type == "array" and isinstance(value, list) and schema.items is not None:
        return [apply_defaults(v, schema.items) for v in value]
    if schema.type == "map" and isinstance(value, dict) and schema.values is not None:
        return {k: apply_defaults(v, schema.values) for k, v in value.items()}
    return value


def _copy(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copy(x) for x in v]
    return v


QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")


def openapi(schema: Field) -> dict[str, Any]:
    """The structural openAPIV3Schema (apiextensions.k8s.io/v1) for a schema node, with Karpenter's bounds, formats
    and x-kubernetes-validations rules."""
    out: dict[str, Any] = {}
    t = schema.type
    if t == "quantity":
        out = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True,
               "pattern": QUANTITY_PATTERN}
    elif t == "int-or-string":
        out = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    elif t == "object" and schema.open_crd:
        out = {"type": "object", "additionalProperties": {"x-kubernetes-preserve-unknown-fields": True},
               "x-kubernetes-preserve-unknown-fields": True}
    elif t == "object":
        out = {"type": "object", "properties": {k: openapi(v) for k, v in schema.fields.items()}}
        if schema.required:
            out["required"] = list(schema.required)
        if schema.preserve_unknown:
            out["x-kubernetes-preserve-unknown-fields"] = True
    elif t == "map":
        assert schema.values is not None
        out = {"type": "object", "additionalProperties": openapi(schema.values)}
    elif t == "array":
        assert schema.items is not None
        out = {"type": "array", "items": openapi(schema.items)}
        if schema.max_items is not None:
            out["maxItems"] = schema.max_items
        if schema.min_items is not None:
            out["minItems"] = schema.min_items
    else:
        out = {"type": t}
    if schema.description:
        out["description"] = schema.description
    if schema.enum:
        out["enum"] = list(schema.enum)
    if schema.default is not None:
        out["default"] = schema.default
    if schema.format:
        out["format"] = schema.format
    if schema.minimum is not None:
        out["minimum"] = schema.minimum
    if schema.maximum is not None:
        out["maximum"] = schema.maximum
    if schema.min_length is not None:
        out["minLength"] = schema.min_length
    if schema.max_length is not None:
        out["maxLength"] = schema.max_length
    if schema.max_properties is not None:
        out["maxProperties"] = schema.max_properties
    if schema.pattern and t == "string":
        out["pattern"] = schema.pattern
    if schema.list_type:
        out["x-kubernetes-list-type"] = schema.list_type
    if schema.list_map_keys:
        out["x-kubernetes-list-map-keys"] = list(schema.list_map_keys)
    if schema.rules:
        out["x-kubernetes-validations"] = [{"message": r.message, "rule": r.cel} for r in schema.rules]
    return out


def walk_paths(schema: Field, prefix: str = "") -> list[str]:
    """Every field path the schema defines (for tests that the CRD covers each field)."""
    out = []
    if schema.type == "object" and not schema.open_crd:
        for name, sub in schema.fields.items():
            p = _join(prefix, name)
            out.append(p)
            out.extend(walk_paths(sub, p))
    elif schema.type == "array" and schema.items is not None:
        out.extend(walk_paths(schema.items, prefix + "[]"))
    elif schema.type == "map" and schema.values is not None:
        out.extend(walk_paths(schema.values, prefix + "{}"))
    return out
