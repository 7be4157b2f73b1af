"""The offline apiserver (controller.api.crdeval) does what kube-apiserver does with a CRD on create and update:
drops status, nulls and (strictly) unknown fields, defaults, validates the structural schema, runs CEL rules with
self/oldSelf, and fails a rule whose evaluation errors."""

from __future__ import annotations

import copy
from typing import Any

from controller.api.crdeval import CRDEvaluator, compile_errors

PARTS: dict[str, Any] = {
    "type": "array",
    "items": {"type": "object", "properties": {"kind": {"type": "string"},
                                               "values": {"type": "array", "items": {"type": "string"}}}},
    "x-kubernetes-validations": [
        {"rule": "self.all(x, x.kind == 'In' ? x.values.size() > 0 : true)", "message": "In needs values"},
        {"rule": "self.all(x, x.kind.find('^[a-z]+') == '' || x.kind.split('-').size() == 2)",
         "message": "lowercase kinds are two words"}],
}
SPEC: dict[str, Any] = {
    "type": "object", "required": ["size"],
    "x-kubernetes-validations": [
        {"rule": "self.size <= 10 || has(self.big)", "message": "big widgets say so"},
        {"rule": "self.size >= oldSelf.size", "message": "widgets do not shrink"}],
    "properties": {
        "size": {"type": "integer", "minimum": 1},
        "big": {"type": "boolean"},
        "color": {"type": "string", "default": "red", "enum": ["red", "blue"]},
        "name": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
        "quantity": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True},
        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set", "maxItems": 3},
        "parts": PARTS,
        "labels": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 2},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"}, "scope": "Cluster",
             "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {
                               "type": "object",
                               "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                              "metadata": {"type": "object"}, "spec": SPEC,
                                              "status": {"type": "object", "properties": {"ok": {"type": "boolean"}}}},
                           }}}]},
}


def widget(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1, **spec}}


def errors(obj: dict[str, Any]) -> list[str]:
    return [str(e) for e in CRDEvaluator(CRD).create(obj)[1]]


def test_defaults_nulls_status_and_preserved_fields():
    stored, errs = CRDEvaluator(CRD).create({**widget(color=None, free={"any": {"thing": [1]}}), "status": {"ok": 1}})
    assert errs == []
    assert stored["spec"] == {"size": 1, "color": "red", "free": {"any": {"thing": [1]}}}
    assert "status" not in stored  # a status subresource: create ignores it, its type is never checked


def test_structural_schema():
    assert errors(widget()) == []
    assert any("spec.size" in e and "greater than or equal to 1" in e for e in errors(widget(size=0)))
    assert any("spec.size" in e and "must be of type integer" in e for e in errors(widget(size="1")))
    assert any("spec.size: Required value" in e for e in errors({**widget(), "spec": {}}))
    assert any("Unsupported value" in e for e in errors(widget(color="green")))
    assert any("Too long" in e for e in errors(widget(name="abcdef")))
    assert any("should match" in e for e in errors(widget(name="ABC")))
    assert errors(widget(quantity=3)) == errors(widget(quantity="3")) == []
    assert any("integer or string" in e for e in errors(widget(quantity=True)))
    assert any("Duplicate value" in e for e in errors(widget(tags=["a", "a"])))
    assert any("Too many" in e for e in errors(widget(tags=["a", "b", "c", "d"])))
    assert any("Too many" in e for e in errors(widget(labels={"a": "1", "b": "2", "c": "3"})))
    assert any('unknown field "spec.colour"' in e for e in errors(widget(colour="red")))


def test_cel_rules_with_kubernetes_functions():
    assert any("big widgets say so" in e for e in errors(widget(size=11)))
    assert errors(widget(size=11, big=True)) == []
    assert errors(widget(parts=[{"kind": "two-words"}, {"kind": "UPPER"}])) == []
    assert any("lowercase kinds are two words" in e for e in errors(widget(parts=[{"kind": "one"}])))
    # a rule whose evaluation errors (no values to size) fails, naming the rule
    errs = errors(widget(parts=[{"kind": "In"}]))
    assert any("evaluating rule: In needs values" in e for e in errs), errs
    assert errors(widget(parts=[{"kind": "In", "values": ["a"]}])) == []
    # no CEL when a type is wrong: the type error alone
    assert errors(widget(size=11, big="yes")) == ['spec.big: Invalid value: "string": spec.big must be of type '
                                                  'boolean']


def test_transition_rules_on_update_only():
    ev = CRDEvaluator(CRD)
    stored, errs = ev.create(widget(size=5))
    assert errs == []
    assert ev.update(stored, widget(size=6))[1] == []
    assert any("widgets do not shrink" in str(e) for e in ev.update(stored, widget(size=4))[1])
    new = copy.deepcopy(stored)
    new["status"] = {"ok": True}
    updated, errs = ev.update(stored, new)
    assert errs == [] and "status" not in updated  # the main resource does not write status


def test_compile_errors_name_the_rule():
    bad = copy.deepcopy(CRD)
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"].append(
        {"rule": "self.size +", "message": "broken"})
    size = bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"]
    size["x-kubernetes-validations"] = [{"rule": "self.startsWith('a')", "message": "a string function on an int"},
                                        {"rule": "self + 1", "message": "not a bool"}]
    errs = compile_errors(bad)
    assert len(errs) == 3, errs
    assert errs[0].startswith("spec: self.size +")
    assert errs[1].startswith("spec.size: self.startsWith('a')")
    assert errs[2].startswith("spec.size: self + 1: returns ") and errs[2].endswith("not bool")
    assert compile_errors(CRD) == []
