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
    """Run `<cli> diff|deploy` for each of env's stacks in order, from the project directory; returns the first
    failing exit code (a failed `<env>` is not followed by its pools), else 0."""
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
    for stack in stacks_of(env):
        cmd = [*cli, action, stack]
        if action == "deploy":
            cmd.append("--auto-approve")
        code = subprocess.run(cmd, cwd=project_root(), check=False).returncode
        if code != 0:
            return code
    return 0
