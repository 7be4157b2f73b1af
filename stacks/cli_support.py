"""`karpy diff` and `karpy deploy`: run the real CDK Terrain CLI (which runs Terraform) for one environment, and say
exactly what is missing when a tool is."""

from __future__ import annotations

import shutil
import subprocess

from stacks.environments import environment_names, environments_dir, project_root


class MissingTool(Exception):
    """A tool `karpy diff/deploy` needs is not installed; the message says which and how to get it."""


def cdk_command() -> list[str]:
    """The CDK Terrain CLI to run: cdktn or cdktf on PATH, else through npx."""
    if shutil.which("node") is None:
        raise MissingTool("Node.js is not installed: the CDK Terrain CLI needs it (https://nodejs.org, or your "
                          "package manager's nodejs package)")
    for name in ("cdktn", "cdktf"):
        if shutil.which(name):
            return [name]
    if shutil.which("npx"):
        return ["npx", "--yes", "cdktn-cli"]
    raise MissingTool("the CDK Terrain CLI is not installed: npm install --global cdktn-cli")


def stacks_of(env: str) -> list[str]:
    """An environment's stacks in deploy order: the controller and its CRDs, then the pools that need the CRDs."""
    return [env, f"{env}-pools"]


def run_cdk(action: str, env: str) -> int:
    """Run the CDK Terrain CLI for env's stacks from the project directory; returns its exit code.

    deploy: one run over both stacks; the CLI applies `<env>-pools` only after `<env>` (its dependency) is applied,
    so the pools are planned once their CRDs exist, and not at all when `<env>` fails. diff: one run per stack, as
    the CLI diffs one stack at a time; the first failing exit code is returned."""
    if action not in ("diff", "deploy"):
        raise ValueError(f"action {action!r}: expected diff or deploy")
    known = environment_names()
    if env not in known:
        raise ValueError(f"unknown environment {env!r}; known: {', '.join(known) or '(none)'} "
                         f"(files in {environments_dir()})")
    if shutil.which("terraform") is None and shutil.which("tofu") is None:
        raise MissingTool("terraform (or OpenTofu) is not installed: the CDK Terrain CLI runs it to plan and apply "
                          "(https://developer.hashicorp.com/terraform/install)")
    cli = cdk_command()
    if action == "deploy":
        return subprocess.run([*cli, "deploy", *stacks_of(env), "--auto-approve"], cwd=project_root(),
                              check=False).returncode
    for stack in stacks_of(env):
        code = subprocess.run([*cli, "diff", stack], cwd=project_root(), check=False).returncode
        if code != 0:
            return code
    return 0
