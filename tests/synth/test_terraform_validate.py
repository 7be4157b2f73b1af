"""Opt-in: `terraform validate` on the synthesized stacks. Terraform providers cannot be downloaded on the machines
this suite runs on, so it is skipped unless a terraform binary and a provider plugin cache are present."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from stacks.app import synth

pytestmark = pytest.mark.synth
PLUGINS = os.environ.get("TF_PLUGIN_CACHE_DIR", "")


@pytest.mark.skipif(shutil.which("terraform") is None or not (PLUGINS and os.path.isdir(PLUGINS)),
                    reason="needs a terraform binary and providers in TF_PLUGIN_CACHE_DIR (no provider downloads here)")
def test_terraform_validate(tmp_path):
    for stack in synth(None, str(tmp_path), Path(__file__).resolve().parents[2]):
        init = subprocess.run(["terraform", "init", "-backend=false", "-input=false"], cwd=stack, capture_output=True,
                              text=True)
        assert init.returncode == 0, init.stderr
        check = subprocess.run(["terraform", "validate"], cwd=stack, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
