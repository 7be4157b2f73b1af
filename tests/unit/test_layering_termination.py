"""Termination's layering: node termination (controller/termination) sits below the controllers that delete
NodeClaims (the NodeClaim finalizer, disruption, lifecycle, interruption): they may import it, it imports none of them,
only the bottom layers, the kube runtime, the CloudProvider seam and the cluster state."""

from __future__ import annotations

from tests.unit.test_layering import BOTTOM, ROOT, controller_imports

NODE_TERMINATION_MAY_IMPORT = (*BOTTOM, "controller.kube", "controller.cloud.errors", "controller.cloud.provider",
                               "controller.state", "controller.termination")


def test_node_termination_imports_nothing_above_it() -> None:
    modules = sorted((ROOT / "controller" / "termination").glob("*.py"))
    assert {p.name for p in modules} >= {"controller.py", "terminator.py", "eviction.py", "drain.py", "instance.py"}
    offenders = {str(p.relative_to(ROOT)): bad for p in modules
                 if (bad := [f"{line}: {m}" for line, m in controller_imports(p.read_text())
                             if not any(m == a or m.startswith(a + ".") for a in NODE_TERMINATION_MAY_IMPORT)])}
    assert offenders == {}


def test_the_nodeclaim_finalizer_leaves_tainting_and_draining_to_node_termination() -> None:
    """The NodeClaim finalizer uses what node termination shares (instance termination, the deadline, the object
    helpers), never its terminator or eviction queue: tainting and draining are the Node's finalizer's work."""
    used = {m for _, m in controller_imports((ROOT / "controller" / "nodeclaim" / "termination.py").read_text())
            if m.startswith("controller.termination")}
    assert "controller.termination.instance" in used
    assert not used & {"controller.termination.terminator", "controller.termination.eviction"}
