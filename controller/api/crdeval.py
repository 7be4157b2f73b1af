"""An offline apiserver for custom resources: applies a CustomResourceDefinition's structural schema and its CEL
rules to an object the way kube-apiserver does on create and update, so the generated CRDs can be tested without a
CEL-capable cluster (the 1.20 apiserver of the test world ignores x-kubernetes-validations).

What it does, in the apiserver's order: drops the status of a resource with a status subresource (create ignores it),
drops nulls, reports unknown fields (fieldValidation=Strict, as kubectl sends by default) and prunes them, applies
defaults, then checks types, enums, patterns, bounds, lengths, item/property counts, required fields, set lists, and
every x-kubernetes-validations rule with `self` (and `oldSelf` on update, where the old object has the field).
What it does not: CEL cost estimation, metadata validation, formats other than the shape of the value.

CEL runs on cel-expr-python (the C++ runtime, with its strings extension); Kubernetes' regex library (`find`,
`findAll`) is added as custom functions. The module is imported only by tests and tooling: cel-expr-python is a dev
dependency.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

_MISSING = object()


@dataclass(frozen=True)
class FieldError:
    """One rejection, at a field path like spec.template.spec.requirements[0].key."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _find(s: str, pattern: str) -> str:
    m = re.search(pattern, s)
    return m.group(0) if m else ""


def _find_all(s: str, pattern: str) -> list[str]:
    return [m.group(0) for m in re.finditer(pattern, s)]


class _Cel:
    """One CEL environment with `self`, `oldSelf`, the strings extension and Kubernetes' regex functions; compiled
    programs are cached by expression."""

    def __init__(self) -> None:
        from cel_expr_python import cel
        from cel_expr_python.ext import ext_strings

        string, lst = cel.Type.STRING, cel.Type.List(cel.Type.STRING)
        functions = [
            cel.FunctionDecl("find", [cel.Overload("k8s_string_find_string", string, [string, string],
                                                   is_member=True, impl=_find)]),
            cel.FunctionDecl("findAll", [cel.Overload("k8s_string_find_all_string", lst, [string, string],
                                                      is_member=True, impl=_find_all)]),
        ]
        self._cel = cel
        self._ext = ext_strings.ExtStrings
        self._functions = functions
        self._env = cel.NewEnv(variables={"self": cel.Type.DYN, "oldSelf": cel.Type.DYN},
                               extensions=[ext_strings.ExtStrings()], functions=functions)
        self._programs: dict[str, Any] = {}

    def _type(self, schema: dict[str, Any]) -> Any:
        """The CEL type of a schema node, as far as the apiserver types it (objects as maps of dyn)."""
        t, T = schema.get("type"), self._cel.Type
        if schema.get("x-kubernetes-int-or-string") or t is None:
            return T.DYN
        if t == "array":
            return T.List(self._type(schema.get("items") or {}))
        if t == "object":
            if "properties" in schema or not isinstance(schema.get("additionalProperties"), dict):
                return T.Map(T.STRING, T.DYN)
            return T.Map(T.STRING, self._type(schema["additionalProperties"]))
        return {"string": T.STRING, "integer": T.INT, "boolean": T.BOOL, "number": T.DOUBLE}.get(t, T.DYN)

    def compile_error(self, rule: str, schema: dict[str, Any] | None = None) -> str | None:
        """Why a rule does not compile with `self` typed from its schema node, or does not return a bool (None
        when it is fine)."""
        t = self._type(schema or {})
        env = self._cel.NewEnv(variables={"self": t, "oldSelf": t}, extensions=[self._ext()],
                               functions=self._functions)
        try:
            returns = env.compile(rule).return_type()
        except Exception as e:  # the binding raises plain RuntimeError/ValueError
            return str(e)
        if returns.name().lower() not in ("bool", "dyn"):
            return f"returns {returns.name()}, not bool"
        return None

    def evaluate(self, rule: str, value: Any, old: Any) -> tuple[bool | None, str]:
        """(True/False, "") for a rule that evaluated to a bool, (None, error) when compiling or evaluating failed."""
        program = self._programs.get(rule)
        if program is None:
            try:
                program = self._env.compile(rule)
            except Exception as e:  # the binding raises plain RuntimeError/ValueError
                return None, f"compilation failed: {e}"
            self._programs[rule] = program
        data = {"self": value}
        if old is not _MISSING:
            data["oldSelf"] = old
        try:
            result = program.eval(data=data)
        except Exception as e:  # an evaluation error fails the rule, as in the apiserver
            return None, str(e)
        if result.type() == self._cel.Type.ERROR:
            return None, str(result.value())
        out = result.plain_value()
        if not isinstance(out, bool):
            return None, f"rule evaluated to {out!r}, not a bool"
        return out, ""


_CEL: _Cel | None = None


def compile_errors(crd: dict[str, Any]) -> list[str]:
    """Every x-kubernetes-validations rule of a CRD that does not compile, with where it is and why."""
    out: list[str] = []

    def walk(schema: dict[str, Any], path: str) -> None:
        for rule in schema.get("x-kubernetes-validations", []):
            err = _cel().compile_error(rule["rule"], schema)
            if err:
                out.append(f"{path or '<root>'}: {rule['rule']}: {err}")
        for k, sub in (schema.get("properties") or {}).items():
            walk(sub, _join(path, k))
        for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
            if isinstance(schema.get(key), dict):
                walk(schema[key], path + suffix)

    for v in crd["spec"]["versions"]:
        walk(v["schema"]["openAPIV3Schema"], "")
    return out


def _cel() -> _Cel:
    global _CEL
    if _CEL is None:
        _CEL = _Cel()
    return _CEL


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object" if isinstance(v, dict) else type(v).__name__


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                             r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _object_meta(meta: Any, errors: list[FieldError]) -> None:
    """The apiserver's ObjectMeta checks that concern these objects: a custom resource's name is a DNS subdomain;
    label keys are qualified names (prefix at most 253, name at most 63) and values label values (at most 63)."""
    if not isinstance(meta, dict):
        return
    name = meta.get("name")
    if isinstance(name, str) and (len(name) > 253 or not _DNS_SUBDOMAIN.match(name)):
        errors.append(FieldError("metadata.name", f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain"))
    for k, v in (meta.get("labels") or {}).items():
        prefix, _, last = str(k).rpartition("/")
        if not _QUALIFIED_NAME.match(str(k)) or len(last) > 63 or len(prefix) > 253:
            errors.append(FieldError("metadata.labels", f"Invalid value: {k!r}: name part must consist of "
                                                        "alphanumeric characters, '-', '_' or '.'"))
        if not isinstance(v, str) or len(v) > 63 or not _LABEL_VALUE.match(v):
            errors.append(FieldError("metadata.labels", f"Invalid value: {v!r}: a valid label must be an empty "
                                                        "string or consist of alphanumeric characters"))


def _is_transition(rule: str) -> bool:
    return re.search(r"\boldSelf\b", rule) is not None


class CRDEvaluator:
    """Admission of custom resources against one served version of a CRD."""

    def __init__(self, crd: dict[str, Any], version: str | None = None) -> None:
        versions = crd["spec"]["versions"]
        v = next((x for x in versions if x["name"] == version), versions[0]) if version else versions[0]
        self.schema: dict[str, Any] = v["schema"]["openAPIV3Schema"]
        self.status_subresource = "status" in (v.get("subresources") or {})
        self.kind: str = crd["spec"]["names"]["kind"]

    # --- the apiserver's steps ---------------------------------------------------------------------------------------

    def create(self, obj: dict[str, Any]) -> tuple[dict[str, Any], list[FieldError]]:
        """The object as stored (pruned, defaulted) and every error a create would get ([] = admitted)."""
        return self._admit(obj, _MISSING)

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, Any], list[FieldError]]:
        """As create, with transition rules (oldSelf) evaluated against the stored old object."""
        stored_old, _ = self._admit(old, _MISSING, check=False)
        return self._admit(new, stored_old)

    def _admit(self, obj: dict[str, Any], old: Any, check: bool = True) -> tuple[dict[str, Any], list[FieldError]]:
        errors: list[FieldError] = []
        obj = copy.deepcopy(obj)
        if self.status_subresource:
            if old is _MISSING:
                obj.pop("status", None)
            elif isinstance(old, dict) and "status" in old:
                obj["status"] = copy.deepcopy(old["status"])
            else:
                obj.pop("status", None)
        obj = self._prune(obj, self.schema, "", errors)
        obj = self._default(obj, self.schema)
        if check:
            _object_meta(obj.get("metadata"), errors)
            blocking: list[FieldError] = []
            self._validate(obj, self.schema, "", errors, blocking)
            if not blocking:  # as the apiserver: CEL runs unless a value has the wrong type
                self._rules(obj, self.schema, "", errors, old)
        return obj, errors if check else []

    def _prune(self, value: Any, schema: dict[str, Any], path: str, errors: list[FieldError]) -> Any:
        if path == "metadata":
            return value
        if isinstance(value, dict) and "properties" in schema:
            out = {}
            for k, v in value.items():
                sub = schema["properties"].get(k)
                if sub is None:
                    if not schema.get("x-kubernetes-preserve-unknown-fields"):
                        errors.append(FieldError(_join(path, k), f'unknown field "{_join(path, k)}"'))
                        continue
                    out[k] = v
                    continue
                if v is None and not sub.get("nullable"):
                    continue
                out[k] = self._prune(v, sub, _join(path, k), errors)
            return out
        if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
            sub = schema["additionalProperties"]
            return {k: self._prune(v, sub, f"{path}[{k}]", errors) for k, v in value.items()
                    if v is not None or sub.get("nullable")}
        if isinstance(value, list) and isinstance(schema.get("items"), dict):
            return [self._prune(v, schema["items"], f"{path}[{i}]", errors) for i, v in enumerate(value)]
        return value

    def _default(self, value: Any, schema: dict[str, Any]) -> Any:
        if isinstance(value, dict) and "properties" in schema:
            for k, sub in schema["properties"].items():
                if k not in value and "default" in sub:
                    value[k] = copy.deepcopy(sub["default"])
                if k in value:
                    value[k] = self._default(value[k], sub)
        elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
            for k in value:
                value[k] = self._default(value[k], schema["additionalProperties"])
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            return [self._default(v, schema["items"]) for v in value]
        return value

    def _validate(self, value: Any, schema: dict[str, Any], path: str, errors: list[FieldError],
                  blocking: list[FieldError]) -> None:
        if path == "metadata":
            return
        if not self._type_ok(value, schema):
            want = "integer or string" if schema.get("x-kubernetes-int-or-string") else schema.get("type")
            err = FieldError(path, f'Invalid value: "{_type_name(value)}": {path or "body"} must be of type {want}')
            errors.append(err)
            blocking.append(err)
            return
        if "enum" in schema and value not in schema["enum"]:
            supported = ", ".join(f'"{e}"' for e in schema["enum"])
            errors.append(FieldError(path, f"Unsupported value: {value!r}: supported values: {supported}"))
        if isinstance(value, str):
            n = len(value)
            if "maxLength" in schema and n > schema["maxLength"]:
                errors.append(FieldError(path, f"Too long: may not be more than {schema['maxLength']} bytes"))
            if "minLength" in schema and n < schema["minLength"]:
                errors.append(FieldError(path, f"Invalid value: {value!r}: {path} in body should be at least "
                                               f"{schema['minLength']} chars long"))
            if "pattern" in schema and not re.search(schema["pattern"], value):
                errors.append(FieldError(path, f"Invalid value: {value!r}: {path} in body should match "
                                               f"'{schema['pattern']}'"))
        if isinstance(value, int) and not isinstance(value, bool):
            if "minimum" in schema and value < schema["minimum"]:
                errors.append(FieldError(path, f"Invalid value: {value}: {path} in body should be greater than or "
                                               f"equal to {schema['minimum']}"))
            if "maximum" in schema and value > schema["maximum"]:
                errors.append(FieldError(path, f"Invalid value: {value}: {path} in body should be less than or "
                                               f"equal to {schema['maximum']}"))
        if isinstance(value, list):
            if "maxItems" in schema and len(value) > schema["maxItems"]:
                errors.append(FieldError(path, f"Too many: {len(value)}: must have at most {schema['maxItems']} "
                                               "items"))
            if "minItems" in schema and len(value) < schema["minItems"]:
                errors.append(FieldError(path, f"Invalid value: {len(value)}: {path} in body should have at least "
                                               f"{schema['minItems']} items"))
            map_keys = schema.get("x-kubernetes-list-map-keys") or []
            if schema.get("x-kubernetes-list-type") == "map" and map_keys:
                seen: list[tuple[Any, ...]] = []
                for i, item in enumerate(value):
                    if isinstance(item, dict):
                        key = tuple(item.get(k) for k in map_keys)
                        if key in seen:
                            errors.append(FieldError(f"{path}[{i}]", f"Duplicate value: {key}"))
                        seen.append(key)
            if schema.get("x-kubernetes-list-type") == "set":
                for i, item in enumerate(value):
                    if item in value[:i]:
                        errors.append(FieldError(f"{path}[{i}]", f"Duplicate value: {item!r}"))
            items = schema.get("items")
            if isinstance(items, dict):
                for i, item in enumerate(value):
                    self._validate(item, items, f"{path}[{i}]", errors, blocking)
        if isinstance(value, dict):
            if "maxProperties" in schema and len(value) > schema["maxProperties"]:
                errors.append(FieldError(path, f"Too many: {len(value)}: must have at most {schema['maxProperties']} "
                                               "items"))
            for name in schema.get("required", []):
                if name not in value:
                    errors.append(FieldError(_join(path, name), "Required value"))
            for _, v, sub, p in self._children(value, schema, path):
                self._validate(v, sub, p, errors, blocking)

    @staticmethod
    def _children(value: dict[str, Any], schema: dict[str, Any], path: str) -> list[tuple[str, Any, dict[str, Any],
                                                                                          str]]:
        props = schema.get("properties")
        if props is not None:
            return [(k, v, props[k], _join(path, k)) for k, v in value.items() if k in props]
        if isinstance(schema.get("additionalProperties"), dict):
            return [(k, v, schema["additionalProperties"], f"{path}[{k}]") for k, v in value.items()]
        return []

    def _rules(self, value: Any, schema: dict[str, Any], path: str, errors: list[FieldError], old: Any) -> None:
        """Every x-kubernetes-validations rule, depth first; oldSelf is the old value at the same path (through
        object properties and map keys; list items are not correlated, as for atomic lists)."""
        if path == "metadata":
            return
        if isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                self._rules(item, schema["items"], f"{path}[{i}]", errors, _MISSING)
        if isinstance(value, dict):
            for k, v, sub, p in self._children(value, schema, path):
                o = old.get(k, _MISSING) if isinstance(old, dict) else _MISSING
                self._rules(v, sub, p, errors, o)
        for rule in schema.get("x-kubernetes-validations", []):
            expr = rule["rule"]
            if _is_transition(expr) and old is _MISSING:
                continue
            ok, err = _cel().evaluate(expr, value, old)
            message = rule.get("message") or f"failed rule: {expr}"
            if ok is None:
                errors.append(FieldError(path, f"Invalid value: {err} evaluating rule: {message}"))
            elif not ok:
                errors.append(FieldError(path, f"Invalid value: {_type_name(value)!r}: {message}"))

    @staticmethod
    def _type_ok(value: Any, schema: dict[str, Any]) -> bool:
        if schema.get("x-kubernetes-int-or-string"):
            return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
        t = schema.get("type")
        if t is None:
            return True
        return {
            "object": isinstance(value, dict),
            "array": isinstance(value, list),
            "string": isinstance(value, str),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, int | float) and not isinstance(value, bool),
            "boolean": isinstance(value, bool),
        }.get(t, True)
