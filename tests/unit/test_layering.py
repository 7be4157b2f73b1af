"""The package layering: the controller never imports infra/ (the stacks build on the controller's AWS provider,
not the other way round), and the provider's event definitions stay importable without boto3 or cdktn."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def infra_imports(source: str) -> list[str]:
    """Every import of the `infra` package in a module's source, as `line: statement`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name) \
                and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__") \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            names = [node.args[0].value]
        else:
            continue
        found += [f"{node.lineno}: {n}" for n in names if n == "infra" or n.startswith("infra.")]
    return found


def test_the_checker_sees_every_form_of_import():
    src = ("import infra\nimport os, infra.events as e\nfrom infra.events import X\nfrom infra import names\n"
           "import importlib\nimportlib.import_module('infra.policies')\n__import__('infra')\n"
           "import infrastructure\nfrom .infra import y\nfrom controller import infra_like\n")
    assert infra_imports(src) == ["1: infra", "2: infra.events", "3: infra.events", "4: infra",
                                  "6: infra.policies", "7: infra"]


def test_no_controller_module_imports_infra():
    modules = sorted((ROOT / "controller").rglob("*.py"))
    assert len(modules) > 50  # the walk really covers the package
    offenders = {str(p.relative_to(ROOT)): hits for p in modules if (hits := infra_imports(p.read_text()))}
    assert offenders == {}


def test_infra_reexports_the_providers_event_definitions():
    import controller.cloud.aws.events as provider
    import infra.events as stacks

    for name in stacks.__all__:
        assert getattr(stacks, name) is getattr(provider, name), name


def test_provider_events_import_without_boto3_or_cdktn():
    heavy = "('boto3', 'botocore', 'cdktn', 'cdktf', 'jsii')"
    code = ("import sys, controller.cloud.aws.events, infra.events; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# Layers point one way. The bottom (the API types, metric definitions, logging, failpoints) imports nothing above
# it; the kube runtime reads only the bottom; the cloud providers read the bottom, kube, catalog and scheduling types
# but no controller built on them (interruption, nodeclass, lifecycle, state, ...).
BOTTOM = ("controller.api", "controller.metrics", "controller.logs", "controller.failpoints")
LAYER_RULES: dict[str, tuple[str, ...]] = {
    "controller/api": BOTTOM,
    "controller/metrics.py": BOTTOM,
    "controller/logs.py": BOTTOM,
    "controller/failpoints.py": BOTTOM,
    "controller/kube": (*BOTTOM, "controller.kube"),
    "controller/cloud": (*BOTTOM, "controller.kube", "controller.cloud", "controller.catalog",
                         "controller.scheduling"),
}


def controller_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import of a controller module at run time (TYPE_CHECKING blocks skipped)."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for child in node.body for n in ast.walk(child)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, node.module)] if node.module != "controller" else \
                [(node.lineno, f"controller.{a.name}") for a in node.names]
    return [(line, m) for line, m in found if m == "controller" or m.startswith("controller.")]


def test_the_layer_checker_reads_from_imports_and_skips_type_checking():
    src = ("from controller import metrics as M\nimport controller.kube.client\nfrom typing import TYPE_CHECKING\n"
           "if TYPE_CHECKING:\n    from controller.state import cluster\n")
    assert controller_imports(src) == [(1, "controller.metrics"), (2, "controller.kube.client")]


def test_layers_point_one_way():
    offenders: dict[str, list[str]] = {}
    for where, allowed in LAYER_RULES.items():
        base = ROOT / where
        modules = [base] if base.is_file() else sorted(base.rglob("*.py"))
        assert modules, where
        for path in modules:
            bad = [f"{line}: {m}" for line, m in controller_imports(path.read_text())
                   if not any(m == a or m.startswith(a + ".") for a in allowed)]
            if bad:
                offenders[str(path.relative_to(ROOT))] = bad
    assert offenders == {}
