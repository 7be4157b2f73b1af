"""checkov over every environment's synthesized Terraform JSON: no failed check (skips, if any, live in .checkov.yaml
with their reasons). checkov runs from its own venv (scripts/install-checkov.sh) because its pins clash with ours."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from stacks.app import synth

pytestmark = pytest.mark.synth
ROOT = Path(__file__).resolve().parents[2]
CHECKOV = Path(os.environ.get("KARPY_CACHE", Path.home() / ".cache" / "karpy")) / "checkov-venv" / "bin" / "checkov"


def test_no_failed_checks(tmp_path):
    if not CHECKOV.exists():
        pytest.fail(f"checkov is not installed at {CHECKOV}: run scripts/test.sh (or scripts/install-checkov.sh)")
    synth(None, str(tmp_path), ROOT)
    proc = subprocess.run([str(CHECKOV), "--config-file", str(ROOT / ".checkov.yaml"), "-d", str(tmp_path / "stacks"),
                           "-o", "json"], capture_output=True, text=True)
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = [(f["check_id"], f["resource"], f["file_path"]) for r in reports
              for f in r.get("results", {}).get("failed_checks", [])]
    assert failed == []
    passed = sum(r["summary"]["passed"] for r in reports)
    assert passed >= 100  # the IAM policies, roles and queues of all three environments were really checked
