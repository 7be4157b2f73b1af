"""`karpy status` shows each NodeClaim's disruption state against the real control plane: Drifted and why and
Consolidatable from the conditions the controller writes, blocked and why from its latest DisruptionBlocked or
Unconsolidatable event, and being disrupted from the DisruptionReason condition."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from cli import main
from controller.api import labels as L
from controller.kube import resources as R
from controller.kube.errors import NotFoundError

pytestmark = [pytest.mark.kube, pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")]


def _now(offset: float = 0) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cond(type_: str, status: str = "True", reason: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason or type_, "message": type_,
            "lastTransitionTime": _now()}


@pytest.fixture(scope="module")
def claims(kube, kubeconfig) -> Iterator[dict[str, Any]]:
    """Four NodeClaims of one NodePool: drifted, consolidatable, blocked (an event says why), being disrupted."""
    kc, _, _ = kube
    suffix = uuid.uuid4().hex[:6]
    pool = f"dstat-{suffix}"
    names = {k: f"{pool}-{k}" for k in ("drifted", "quiet", "blocked", "going")}
    extra = {"drifted": [_cond("Drifted", reason="NodePoolDrifted"), _cond("Consolidatable", "False")],
             "quiet": [_cond("Consolidatable")],
             "blocked": [_cond("Consolidatable")],
             "going": [_cond("DisruptionReason", reason="Underutilized")]}
    try:
        for key, name in names.items():
            kc.create(R.NODECLAIMS, {
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "labels": {L.NODEPOOL: pool}},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                         "requirements": []}})
            kc.patch(R.NODECLAIMS, name, {"status": {"conditions": [
                _cond("Launched"), _cond("Registered"), _cond("Initialized"), _cond("Ready"), *extra[key]]}},
                     subresource="status")
        blocked = kc.get(R.NODECLAIMS, names["blocked"])
        for offset, message in ((-120, "an older message"),
                                (0, 'pdb "shop/db" prevents pod evictions')):
            kc.create(R.EVENTS, {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{names['blocked']}.{uuid.uuid4().hex[:8]}", "namespace": "default"},
                "involvedObject": {"kind": "NodeClaim", "name": names["blocked"], "apiVersion": "karpenter.sh/v1",
                                   "uid": blocked["metadata"]["uid"]},
                "reason": "DisruptionBlocked", "message": message, "type": "Normal",
                "firstTimestamp": _now(offset), "lastTimestamp": _now(offset), "source": {"component": "karpenter"}})
        yield {"kubeconfig": kubeconfig, "names": names}
    finally:
        for name in names.values():
            with contextlib.suppress(NotFoundError):
                kc.delete(R.NODECLAIMS, name)


def _karpy(kubeconfig: str, *args: str) -> Any:
    return CliRunner().invoke(main, [*args, "--kubeconfig", kubeconfig], prog_name="karpy")


def test_status_json_reports_each_nodeclaims_disruption_state(claims):
    res = _karpy(claims["kubeconfig"], "status", "-o", "json")
    assert res.exit_code == 0, res.output
    by_name = {c["name"]: c["disruption"] for c in json.loads(res.stdout)["nodeClaims"]}
    names = claims["names"]
    assert by_name[names["drifted"]] == {"drifted": "NodePoolDrifted", "consolidatable": False, "disrupting": None,
                                         "blocked": None}
    assert by_name[names["quiet"]] == {"drifted": None, "consolidatable": True, "disrupting": None, "blocked": None}
    assert by_name[names["blocked"]]["blocked"] == 'pdb "shop/db" prevents pod evictions'  # the latest event
    assert by_name[names["going"]]["disrupting"] == "Underutilized"


def test_status_table_has_a_disruption_section_within_80_columns(claims):
    res = _karpy(claims["kubeconfig"], "status")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    start = next(i for i, line in enumerate(lines) if line.startswith("DISRUPTION ("))
    section = lines[start:]
    names = claims["names"]
    # each NodeClaim's line, with the reason wrapped under it
    row = {key: " ".join(section[i:i + 2]) for key, name in names.items()
           for i, line in enumerate(section) if line.startswith(name)}
    assert "Drifted" in row["drifted"] and "NodePoolDrifted" in row["drifted"]
    assert "Consolidatable" in row["quiet"]
    assert "Blocked" in row["blocked"] and "prevents pod evictions" in row["blocked"]
    assert "Disrupting" in row["going"] and "Underutilized" in row["going"]
