"""`karpy synth`, `karpy diff` and `karpy deploy`: check up front what they need (the infra extra, a recent
Node.js, the CDK Terrain CLI of the cdktn package's version, terraform), say exactly what is missing, keep jsii's
Node.js banner away from the user, and run the real CDK Terrain CLI (which runs Terraform) for one environment.

Nothing here imports cdktn: the checks run in well under a second, before any slow work."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from stacks.environments import environment_names, environments_dir, project_root

CLI_PACKAGE = "cdktn-cli"  # the npm package of the CDK Terrain CLI; its version follows the cdktn Python package's
CLI_BINARY = "cdktn"
# cdktn-cli 0.24.0's package.json "engines": {"node": ">=22.19.0"} (`npm view cdktn-cli@0.24.0 engines`); used only
# when the CLI's own package.json cannot be found beside it (e.g. a wrapper script on PATH)
MIN_NODE = (22, 19, 0)
INFRA_MODULES = ("cdktn", "cdktn_provider_aws", "cdktn_provider_kubernetes")
# jsii (the Node.js process behind cdktn's Python classes) prints a banner about the Node.js release unless these are
# set (@jsii/check-node): END_OF_LIFE takes the silenced major versions, the others any value
SILENCE_END_OF_LIFE = "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"
SILENCE_ANY = ("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION",
               "JSII_SILENCE_WARNING_KNOWN_BROKEN_NODE_VERSION")
TOOL_TIMEOUT = 60.0  # seconds for `node --version` / `cdktn --version`: a hung tool is reported, not waited on

Version = tuple[int, ...]


class MissingTool(Exception):
    """A tool karpy synth/diff/deploy needs is missing or the wrong version; the message says which, and the fix."""


@dataclass(frozen=True)
class Toolchain:
    """What `diff`/`deploy` run: the CDK Terrain CLI (its path), and the Node.js major version jsii will see."""

    cli: str
    node_major: int


def parse_version(text: str) -> Version | None:
    """The first X.Y.Z (or X.Y) in text as a tuple of ints: `v20.20.2` -> (20, 20, 2); None when there is none."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if m is None:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


def show(version: Version) -> str:
    """(22, 19, 0) -> 22.19.0."""
    return ".".join(map(str, version))


def cdktn_version() -> str:
    """The installed cdktn Python package's version (read from its metadata: cdktn is not imported)."""
    return importlib.metadata.version("cdktn")


def check_infra_extra(command: str) -> None:
    """MissingTool unless the infra extra's packages are importable (found without importing them)."""
    missing = [m for m in INFRA_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingTool(f"karpy {command} needs the infra extra ({', '.join(missing)} not installed): "
                          "pip install 'karpy[infra]'")


def _run_version(argv: list[str], what: str) -> str:
    """The output of `argv` (a --version call), or MissingTool when it cannot run or fails."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT, check=False,
                              env=quiet_environ(dict(os.environ)))
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MissingTool(f"{what} ({argv[0]}) does not run: {' '.join(str(e).split())[:200]}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise MissingTool(f"`{' '.join(argv)}` failed: {' '.join(last.split())[:200]}")
    return proc.stdout + proc.stderr


def node_version() -> Version:
    """The version of the `node` on PATH; MissingTool when there is none."""
    node = shutil.which("node")
    if node is None:
        raise MissingTool("Node.js is not installed: the CDK Terrain CLI and jsii need it (https://nodejs.org, or "
                          "your package manager's nodejs package)")
    found = parse_version(_run_version([node, "--version"], "Node.js"))
    if found is None:
        raise MissingTool(f"{node} --version printed no version")
    return found


def find_cli(root: Path) -> str | None:
    """The CDK Terrain CLI: the project's node_modules/.bin/cdktn (npm install --save-dev), else `cdktn` on PATH; the
    project's first, as npx and npm scripts pick it, so a project can pin its own beside another global one."""
    local = root / "node_modules" / ".bin" / CLI_BINARY
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(CLI_BINARY)


def cli_package(cli: str) -> dict[str, object] | None:
    """The package.json of the cdktn-cli package the `cli` executable belongs to (npm links bin/cdktn into PATH or
    node_modules/.bin), or None when it is not found beside it."""
    for parent in Path(os.path.realpath(cli)).parents:
        candidate = parent / "package.json"
        if candidate.is_file():
            try:
                doc = json.loads(candidate.read_text())
            except (OSError, ValueError):
                return None
            return doc if isinstance(doc, dict) and doc.get("name") == CLI_PACKAGE else None
    return None


def minimum_node(package: dict[str, object] | None) -> Version:
    """The lowest Node.js the CLI accepts: its package.json `engines.node` (a `>=X.Y.Z` range), else MIN_NODE."""
    engines = package.get("engines") if package else None
    wanted = engines.get("node") if isinstance(engines, dict) else None
    if isinstance(wanted, str):
        m = re.match(r"\s*>=?\s*v?(\d+(?:\.\d+){0,2})", wanted) or re.match(r"\s*\^?v?(\d+(?:\.\d+){0,2})", wanted)
        if m:
            return tuple(int(p) for p in m.group(1).split("."))
    return MIN_NODE


def install_hint(version: str) -> str:
    """How to install the CDK Terrain CLI of exactly `version`, globally or in the project."""
    return (f"npm install --global {CLI_PACKAGE}@{version} (or npm install --save-dev {CLI_PACKAGE}@{version} in the "
            "project directory)")


def terraform_binary() -> str:
    """The Terraform binary the CDK Terrain CLI runs: TERRAFORM_BINARY_NAME (e.g. tofu), else terraform."""
    return os.environ.get("TERRAFORM_BINARY_NAME") or "terraform"


def check_toolchain(command: str, root: Path | None = None) -> Toolchain:
    """Everything diff/deploy need, checked in the order a fix is made; MissingTool naming the first thing missing
    and how to get it. No network and no download: the CLI must already be installed at the pinned version."""
    root = root or project_root()
    check_infra_extra(command)
    wanted = cdktn_version()
    node = node_version()
    cli = find_cli(root)
    if cli is None:
        raise MissingTool(f"the CDK Terrain CLI ({CLI_BINARY}) is not installed: {install_hint(wanted)}")
    needed = minimum_node(cli_package(cli))
    if node < needed:
        raise MissingTool(f"Node.js {show(node)} is too old: the CDK Terrain CLI {wanted} needs Node.js >= "
                          f"{show(needed)} (https://nodejs.org, or your package manager's nodejs package)")
    found = parse_version(_run_version([cli, "--version"], "the CDK Terrain CLI"))
    if found is None or show(found) != wanted:
        got = show(found) if found else "an unknown version"
        raise MissingTool(f"the CDK Terrain CLI at {cli} is {got}, the cdktn Python package is {wanted}; they must "
                          f"match: {install_hint(wanted)}")
    binary = terraform_binary()
    if shutil.which(binary) is None:
        raise MissingTool(f"{binary} is not installed: the CDK Terrain CLI runs it to plan and apply "
                          "(https://developer.hashicorp.com/terraform/install; for OpenTofu set "
                          "TERRAFORM_BINARY_NAME=tofu)")
    return Toolchain(cli, node[0])


def quiet_environ(environ: MutableMapping[str, str], node_major: int | None = None) -> MutableMapping[str, str]:
    """environ with jsii's Node.js banner silenced (set in place and returned): jsii inherits its environment from
    this process (synth) or from the CDK Terrain CLI (diff, deploy). Values the user set are kept."""
    majors = [m for m in environ.get(SILENCE_END_OF_LIFE, "").split(",") if m.strip()]
    if node_major is not None and str(node_major) not in majors:
        majors.append(str(node_major))
    if majors:
        environ[SILENCE_END_OF_LIFE] = ",".join(majors)
    for name in SILENCE_ANY:
        environ.setdefault(name, "1")
    return environ


def quiet_jsii() -> None:
    """Silence jsii's Node.js banner in this process before jsii starts (karpy synth, synth-app)."""
    major: int | None
    try:
        major = node_version()[0]
    except MissingTool:
        major = None  # jsii will say itself that node is missing
    quiet_environ(os.environ, major)


def stacks_of(env: str) -> list[str]:
    """An environment's stacks in deploy order: the controller and its CRDs, then the pools that need the CRDs."""
    return [env, f"{env}-pools"]


def run_cdk(action: str, env: str, auto_approve: bool = False, toolchain: Toolchain | None = None) -> int:
    """Run the CDK Terrain CLI for env's stacks from the project directory; returns its exit code.

    deploy: one run over both stacks; the CLI applies `<env>-pools` only after `<env>` (its dependency) is applied,
    so the pools are planned once their CRDs exist, and not at all when `<env>` fails. `--auto-approve` only when the
    caller says the user approved (`karpy deploy --yes`, or yes at its prompt). diff: one run per stack, as the CLI
    diffs one stack at a time; the first failing exit code is returned."""
    if action not in ("diff", "deploy"):
        raise ValueError(f"action {action!r}: expected diff or deploy")
    known = environment_names()
    if env not in known:
        raise ValueError(f"unknown environment {env!r}; known: {', '.join(known) or '(none)'} "
                         f"(files in {environments_dir()})")
    tools = toolchain or check_toolchain(action)
    child_env = dict(quiet_environ(dict(os.environ), tools.node_major))
    if action == "deploy":
        approve = ["--auto-approve"] if auto_approve else []
        return subprocess.run([tools.cli, "deploy", *stacks_of(env), *approve], cwd=project_root(), env=child_env,
                              check=False).returncode
    for stack in stacks_of(env):
        code = subprocess.run([tools.cli, "diff", stack], cwd=project_root(), env=child_env, check=False).returncode
        if code != 0:
            return code
    return 0
