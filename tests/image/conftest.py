"""The controller image, built by scripts/build-image.sh (which reuses an image built from the same inputs), and a
working container of it with a read-only root. The e2e world's fixtures come from tests/e2e/conftest.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import kubelet, start_controller, world  # noqa: F401 - fixtures used by the image tests
from tests.image.container import Container

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class BuiltImage:
    name: str  # repository:tag
    archive: Path  # the OCI archive the script wrote
    output: str  # what the script printed


@pytest.fixture(scope="session")
def image() -> BuiltImage:
    """The image of this checkout, as scripts/build-image.sh builds it."""
    if shutil.which("buildah") is None:
        pytest.fail("buildah is not installed: run scripts/test.sh (or scripts/install-buildah.sh)")
    if os.geteuid() != 0:
        pytest.fail("the image tests run buildah with the vfs driver and bind mounts: they need root")
    res = subprocess.run(["bash", str(ROOT / "scripts" / "build-image.sh")], cwd=ROOT, capture_output=True, text=True,
                         timeout=1500)
    if res.returncode != 0:
        pytest.fail(f"scripts/build-image.sh failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    name = re.search(r"^image: (\S+)$", res.stdout, re.M)
    archive = re.search(r"^archive: (\S+)$", res.stdout, re.M)
    assert name and archive, res.stdout
    return BuiltImage(name=name.group(1), archive=ROOT / archive.group(1), output=res.stdout)


@pytest.fixture(scope="module")
def container(image: BuiltImage, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    """A working container of the image whose root filesystem is read-only, /tmp writable (see container.py)."""
    ctr = Container(image.name, tmp_path_factory.mktemp("container"))
    try:
        ctr.read_only()
        yield ctr
    finally:
        ctr.remove()
