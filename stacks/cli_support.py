"""`karpy diff` and `karpy deploy`: run the real CDK Terrain CLI (which runs Terraform) for one environment, and say
exactly what is missing when a tool is."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from stacks.app import environments

ROOT = Path(__file__).resolve().parent.parent


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


def run_cdk(action: str, env: str) -> int:
    """Run `<cli> diff|deploy <env>` from the project root; returns its exit code."""
    if action not in ("diff", "deploy"):
        raise ValueError(f"action {action!r}: expected diff or deploy")
    if env not in environments():
        raise ValueError(f"unknown environment {env!r}; known: {', '.join(environments())}")
    if shutil.which("terraform") is None and shutil.which("tofu") is None:
        raise MissingTool("terraform (or OpenTofu) is not installed: the CDK Terrain CLI runs it to plan and apply "
                          "(https://developer.hashicorp.com/terraform/install)")
    cmd = [*cdk_command(), action, env]
    if action == "deploy":
        cmd.append("--auto-approve")
    return subprocess.run(cmd, cwd=ROOT, check=False).returncode
