"""The requirements algebra: each operator, intersections, complements, bounds, compatibility."""

import pytest

from controller.scheduling.requirements import Requirement, Requirements

K = "karpenter.k8s.aws/instance-cpu"


@pytest.mark.parametrize(("op", "values", "yes", "no"), [
    ("In", ["4", "8"], ["4", "8"], ["2", "16"]),
    ("NotIn", ["4"], ["2", "8"], ["4"]),
    ("Exists", [], ["1", "anything"], []),
    ("Gt", ["4"], ["5", "64"], ["4", "1", "x"]),
    ("Gte", ["4"], ["4", "5"], ["3"]),
    ("Lt", ["4"], ["3", "0"], ["4", "5"]),
    ("Lte", ["4"], ["4", "3"], ["5"]),
])
def test_operator_membership(op, values, yes, no):
    r = Requirement.new(K, op, values)
    assert all(r.has(v) for v in yes)
    assert not any(r.has(v) for v in no)


def test_does_not_exist_admits_only_absence():
    r = Requirement.new(K, "DoesNotExist")
    assert not r.has("4")
    assert r.allows_absent()
    assert not Requirement.new(K, "In", ["4"]).allows_absent()
    assert Requirement.new(K, "NotIn", ["4"]).allows_absent()


@pytest.mark.parametrize("op", ["Gt", "Lt", "Gte", "Lte"])
def test_bounds_need_exactly_one_integer(op):
    with pytest.raises(ValueError, match="exactly one integer"):
        Requirement.new(K, op, ["a"])
    with pytest.raises(ValueError):
        Requirement.new(K, op, ["1", "2"])


def test_unknown_operator_is_named():
    with pytest.raises(ValueError, match="unknown operator 'Equals'"):
        Requirement.new(K, "Equals", ["1"])


def test_intersections():
    a = Requirement.new(K, "In", ["2", "4", "8"])
    assert a.intersect(Requirement.new(K, "NotIn", ["4"])).values == {"2", "8"}
    assert a.intersect(Requirement.new(K, "Gt", ["3"])).values == {"4", "8"}
    both = Requirement.new(K, "NotIn", ["1"]).intersect(Requirement.new(K, "NotIn", ["2"]))
    assert both.complement and both.values == {"1", "2"}
    window = Requirement.new(K, "Gt", ["2"]).intersect(Requirement.new(K, "Lt", ["5"]))
    assert window.has("3") and window.has("4") and not window.has("5") and not window.has("2")
    assert Requirement.new(K, "Gt", ["4"]).intersect(Requirement.new(K, "Lt", ["5"])).is_empty()
    assert a.intersect(Requirement.new(K, "In", ["16"])).is_empty()


def test_min_values_keeps_the_larger():
    a = Requirement.new(K, "Exists", min_values=2)
    assert a.intersect(Requirement.new(K, "In", ["1", "2", "3"], min_values=3)).min_values == 3


def test_incompatibility_names_the_conflict():
    pool = Requirements.from_node_selector_requirements([
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
    ])
    pod = Requirements.from_labels({"karpenter.sh/capacity-type": "on-demand"})
    why = pool.incompatibility(pod)
    assert why is not None and "karpenter.sh/capacity-type" in why
    assert pool.incompatibility(Requirements.from_labels({"karpenter.sh/capacity-type": "spot"})) is None


def test_custom_labels_must_be_defined_by_the_pool_but_well_known_need_not():
    pool = Requirements.from_labels({"team": "a"})
    assert pool.incompatibility(Requirements.from_labels({"team": "a"})) is None
    assert "not defined" in (pool.incompatibility(Requirements.from_labels({"tier": "gold"})) or "")
    assert pool.incompatibility(Requirements.from_labels({"kubernetes.io/arch": "arm64"})) is None
    assert pool.incompatibility(Requirements([Requirement.new("tier", "NotIn", ["gold"])])) is None


def test_labels_are_the_pinned_keys():
    reqs = Requirements.from_node_selector_requirements([
        {"key": "a", "operator": "In", "values": ["1"]}, {"key": "b", "operator": "In", "values": ["1", "2"]},
        {"key": "c", "operator": "Exists"}])
    assert reqs.labels() == {"a": "1"}


# ---- found by mutation testing: each operator, bound, description and message pinned ------------------------------
_R, _Rs = Requirement, Requirements  # short names for the many literals below


@pytest.mark.parametrize(("op", "values", "want"), [
    ("In", ["b", "a"], _R("k", False, frozenset({"a", "b"}))),
    ("NotIn", ["a"], _R("k", True, frozenset({"a"}))),
    ("Exists", [], _R("k", True, frozenset())),
    ("DoesNotExist", [], _R("k", False, frozenset())),
    ("Gt", ["5"], _R("k", True, frozenset(), gt=5)),
    ("Gte", ["5"], _R("k", True, frozenset(), gt=4)),
    ("Lt", ["5"], _R("k", True, frozenset(), lt=5)),
    ("Lte", ["5"], _R("k", True, frozenset(), lt=6)),
])
def test_each_operator_builds_its_set(op, values, want):
    assert _R.new("k", op, values) == want
    assert _R.new("k", op, values, min_values=2).min_values == 2


@pytest.mark.parametrize(("op", "values", "message"), [
    ("Gt", [], r"^k: Gt takes exactly one integer, got \[\]$"),
    ("Lt", ["1", "2"], r"^k: Lt takes exactly one integer, got \['1', '2'\]$"),
    ("Gte", ["x"], r"^k: Gte takes exactly one integer, got \['x'\]$"),
    ("Has", [], r"^k: unknown operator 'Has' \(expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte\)$"),
])
def test_bad_operators_are_named(op, values, message):
    with pytest.raises(ValueError, match=message):
        _R.new("k", op, values)


def test_membership_absence_and_emptiness():
    gt = _R.new("k", "Gt", ["5"])
    assert [gt.has(v) for v in ("5", "6", "x")] == [False, True, False]
    lt = _R.new("k", "Lt", ["5"])
    assert [lt.has(v) for v in ("4", "5", "-1")] == [True, False, True]
    notin = _R.new("k", "NotIn", ["a"])
    assert [notin.has(v) for v in ("a", "b")] == [False, True]
    assert _R("k", False, frozenset({"7"}), gt=7).has("7") is False  # bounds narrow an In set too
    absent = {op: _R.new("k", op, vals).allows_absent() for op, vals in (
        ("In", ["a"]), ("NotIn", ["a"]), ("Exists", []), ("DoesNotExist", []), ("Gt", ["1"]), ("Lt", ["1"]))}
    assert absent == {"In": False, "NotIn": True, "Exists": False, "DoesNotExist": True, "Gt": False, "Lt": False}
    assert _R("k", True, frozenset({"a"}), gt=1).allows_absent() is False
    assert _R("k", True, frozenset(), gt=5, lt=6).is_empty() is True
    assert _R("k", True, frozenset(), gt=5, lt=7).is_empty() is False
    assert _R("k", True, frozenset(), gt=5).is_empty() is False
    assert _R.new("k", "In", []).is_empty() is True and _R.new("k", "In", ["a"]).is_empty() is False


def test_intersections_keep_the_narrowest_bounds_and_min_values():
    a = _R("k", True, frozenset({"1"}), gt=1, lt=10, min_values=2)
    b = _R("k", True, frozenset({"2"}), gt=3, lt=8, min_values=5)
    assert a.intersect(b) == _R("k", True, frozenset({"1", "2"}), gt=3, lt=8, min_values=5)
    inset = _R.new("k", "In", ["1", "4", "5", "9", "x"])
    assert inset.intersect(b) == _R("k", False, frozenset({"4", "5"}), min_values=5)
    assert b.intersect(inset) == _R("k", False, frozenset({"4", "5"}), min_values=5)
    assert _R.new("k", "In", ["a", "b"]).intersect(_R.new("k", "In", ["b", "c"])) == _R.new("k", "In", ["b"])


def test_descriptions_and_values_for_labels():
    assert _R.new("k", "In", ["b", "a"]).describe() == "k In [a b]"
    assert _R.new("k", "DoesNotExist").describe() == "k DoesNotExist"
    assert _R.new("k", "Exists").describe() == "k Exists"
    assert _R("k", True, frozenset({"b", "a"}), gt=1, lt=5).describe() == "k NotIn [a b] Gt 1 Lt 5"
    assert _R.new("k", "In", ["b", "a"]).any_value() == "a"
    assert _R.new("k", "DoesNotExist").any_value() is None and _R.new("k", "Exists").any_value() is None
    assert _R.new("k", "Gt", ["3"]).any_value() == "4"
    assert _R("k", True, frozenset(), gt=3, lt=5).any_value() == "4"
    assert _R("k", True, frozenset(), gt=3, lt=4).any_value() is None


def test_requirements_collection():
    reqs = _Rs.from_node_selector_requirements([
        {"key": "a", "operator": "In", "values": ["1", "2"], "minValues": 2},
        {"key": "a", "operator": "NotIn", "values": ["2"]},
        {"key": "b", "operator": "Exists"}])
    assert reqs.get("a") == _R("a", False, frozenset({"1"}), min_values=2)
    assert reqs.keys() == ["a", "b"] and len(reqs) == 2 and "b" in reqs and "c" not in reqs
    assert reqs.get("c") is None
    copied = reqs.copy()
    copied.add(_R.new("c", "In", ["x"]))
    assert "c" not in reqs and "c" in copied
    both = reqs.intersect(_Rs.from_labels({"b": "v", "d": 3}))  # type: ignore[dict-item]
    assert both.labels() == {"a": "1", "b": "v", "d": "3"} and "d" not in reqs
    assert reqs.labels() == {"a": "1"}
    assert reqs.describe() == "a In [1], b Exists"
    assert repr(reqs) == "Requirements(a In [1], b Exists)"
    assert [r.key for r in reqs] == ["a", "b"]


def test_incompatibility_names_the_key_and_both_sides():
    pool = _Rs.from_node_selector_requirements([{"key": "team", "operator": "In", "values": ["a"]}])
    assert pool.incompatibility(_Rs.from_labels({"team": "a"})) is None
    assert pool.incompatibility(_Rs.from_labels({"team": "b"})) == "team In [b] conflicts with team In [a]"
    assert pool.incompatibility(_Rs.from_labels({"tier": "x"})) == (
        "label tier is not defined by the nodepool (requirement tier In [x])")
    assert pool.incompatibility(_Rs.from_labels({"tier": "x"}), allow_undefined=frozenset({"tier"})) is None
    assert pool.incompatibility(_Rs([_R.new("tier", "NotIn", ["x"])])) is None  # absence satisfies NotIn
    assert pool.incompatibility(_Rs([_R.new("tier", "DoesNotExist")])) is None
    absent = _Rs([_R.new("gpu", "DoesNotExist")])
    assert absent.incompatibility(_Rs([_R.new("gpu", "NotIn", ["1"])])) is None  # both allow the label's absence
    assert absent.incompatibility(_Rs([_R.new("gpu", "In", ["1"])])) == "gpu In [1] conflicts with gpu DoesNotExist"


def test_incompatibility_checks_every_requirement_after_one_that_absence_satisfies():
    pool = _Rs.from_node_selector_requirements([{"key": "team", "operator": "In", "values": ["a"]}])
    pod = _Rs([_R.new("tier", "NotIn", ["x"]), _R.new("team", "In", ["b"])])
    assert pool.incompatibility(pod) == "team In [b] conflicts with team In [a]"
