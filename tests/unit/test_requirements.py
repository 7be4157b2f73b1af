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
