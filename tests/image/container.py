"""Running the controller image with buildah (no container daemon), the way a kubelet would run the Deployment's pod:
as the image's user, its entrypoint, the host network, a read-only root filesystem with a writable /tmp.

`buildah run` has no --read-only flag, so `Container.read_only()` makes the container's root read-only on the host
side: the rootfs directory is bind-mounted onto itself read-only, with writable host directories bound over /tmp (the
Deployment's emptyDir) and /run (buildah's own bookkeeping: it creates and removes /run/.containerenv there). buildah
bind-mounts the rootfs recursively, so the process sees exactly that: any write outside /tmp fails with EROFS.

`buildah run` with chroot isolation kills the container's process on SIGTERM instead of passing it on, so
`python -m tests.image.container` (the command the e2e harness starts) forwards SIGTERM/SIGINT to the process inside,
as a container runtime delivers them to the container's PID 1, and exits with buildah's exit code (the process's).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

BUILDAH = ["buildah", "--storage-driver", "vfs"]
RUN = ["run", "--isolation", "chroot", "--network", "host"]
# The lines buildah itself prints when the process it ran exits non-zero; everything else on stderr is the process's.
BUILDAH_TRAILERS = ("subprocess exited with status ", "subprocess exited on ", "Error: exit status ")
KUBE_FILE_KEYS = {"cluster": ("certificate-authority",), "user": ("client-certificate", "client-key", "tokenFile")}


def buildah(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """buildah with the vfs storage driver; a failure raises with buildah's stderr."""
    res = subprocess.run([*BUILDAH, *args], capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError(f"buildah {' '.join(args[:2])} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    return res


def process_stderr(stderr: str) -> list[str]:
    """The lines the containerized process wrote to stderr, without buildah's own exit report."""
    return [line for line in stderr.splitlines() if not line.startswith(BUILDAH_TRAILERS)]


class Container:
    """A working container of an image; `read_only()` gives it a read-only root with writable /tmp and /run."""

    def __init__(self, image: str, workdir: Path) -> None:
        self.image = image
        self.name = buildah("from", "--pull=never", "-q", image).stdout.strip()
        self.rootfs = Path(buildah("mount", self.name).stdout.strip())
        self.tmp = workdir / "tmp"  # the container's /tmp
        self.run_dir = workdir / "run"  # the container's /run
        self._mounts: list[Path] = []

    def config(self) -> dict[str, Any]:
        """The image's OCI config (User, Entrypoint, Env, Labels...)."""
        import json

        return dict(json.loads(buildah("inspect", "--type", "image", self.image).stdout)["OCIv1"]["config"])

    def read_only(self) -> None:
        for d in (self.tmp, self.run_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.tmp.chmod(0o1777)  # as an emptyDir: any uid writes there
        self._mount("--bind", self.rootfs, self.rootfs)
        self._mount("-o", "remount,bind,ro", self.rootfs, self.rootfs, new=False)
        self._mount("--bind", self.run_dir, self.rootfs / "run")
        self._mount("--bind", self.tmp, self.rootfs / "tmp")

    def _mount(self, *args: str | Path, new: bool = True) -> None:
        subprocess.run(["mount", *map(str, args)], check=True, capture_output=True, text=True)
        if new:
            self._mounts.append(Path(args[-1]))

    def remove(self) -> None:
        for target in reversed(self._mounts):
            subprocess.run(["umount", str(target)], capture_output=True)
        self._mounts.clear()
        buildah("rm", self.name, check=False)

    def run(self, argv: Sequence[str], env: dict[str, str] | None = None, volumes: Sequence[str] = (),
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(run_command(self.name, argv, env or {}, volumes), capture_output=True, text=True,
                              timeout=timeout)


def run_command(container: str, argv: Sequence[str], env: dict[str, str], volumes: Sequence[str]) -> list[str]:
    """The `buildah run` command line for argv in the container, with env passed in and volumes mounted."""
    cmd = [*BUILDAH, *RUN]
    for key, value in env.items():
        cmd += ["--env", f"{key}={value}"]
    for volume in volumes:
        cmd += ["--volume", volume]
    return [*cmd, container, "--", *argv]


def kube_volumes(kubeconfig: str, stage: Path) -> tuple[list[str], str]:
    """Read-only volumes that bring a kubeconfig and every file it references into the container under /run/kube,
    and the kubeconfig's path there. The copy staged on the host names the files by their paths in the container."""
    source = Path(kubeconfig).resolve()
    doc = yaml.safe_load(source.read_text()) or {}
    stage.mkdir(parents=True, exist_ok=True)
    volumes: list[str] = []
    for section, keys in KUBE_FILE_KEYS.items():
        for i, entry in enumerate(doc.get(f"{section}s") or []):
            body = entry.get(section) or {}
            for key in keys:
                if body.get(key):
                    path = Path(body[key]) if Path(body[key]).is_absolute() else source.parent / body[key]
                    inside = f"/run/kube/{section}{i}-{key}"
                    volumes.append(f"{path.resolve()}:{inside}:ro")
                    body[key] = inside
    staged = stage / "kubeconfig"
    staged.write_text(yaml.safe_dump(doc))
    return [f"{staged}:/run/kube/config:ro", *volumes], "/run/kube/config"


def _leaves(pid: int) -> list[int]:
    """The deepest descendants of pid: the containerized process under buildah's chroot runtime and exec helpers."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):  # any thread of buildah may have started the child
        with contextlib.suppress(OSError, ValueError):
            children += [int(c) for c in (task / "children").read_text().split()]
    if not Path(f"/proc/{pid}").exists():
        return []
    if not children:
        return [pid]
    return [leaf for child in children for leaf in _leaves(child)]


def contained(pid: int) -> list[dict[str, Any]]:
    """What the kernel says of the processes run under the `buildah run` (or wrapper) pid: their uid, root directory
    (the container's rootfs when chrooted) and command line."""
    out = []
    for leaf in _leaves(pid):
        if leaf == pid:
            continue
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{leaf}/status").read_text()
            uid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:")))
            out.append({"pid": leaf, "uid": uid, "root": os.readlink(f"/proc/{leaf}/root"),
                        "cmdline": Path(f"/proc/{leaf}/cmdline").read_bytes().decode().split("\0")[:-1]})
    return out


def _forward(proc: subprocess.Popen[bytes], signum: int) -> None:
    deadline = time.monotonic() + 5
    while proc.poll() is None and time.monotonic() < deadline:
        leaves = [p for p in _leaves(proc.pid) if p != proc.pid]
        if leaves:
            for leaf in leaves:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(leaf, signum)
            return
        time.sleep(0.1)  # not started yet
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()


@contextlib.contextmanager
def _forwarding(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    handler = lambda signum, _frame: _forward(proc, signum)  # noqa: E731
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def main(argv: Sequence[str] | None = None) -> int:
    """`buildah run` of a prepared container with the named variables of this environment (KUBECONFIG's files
    mounted read-only), signals forwarded to the process inside; exits with its exit code."""
    parser = argparse.ArgumentParser(prog="python -m tests.image.container")
    parser.add_argument("--container", required=True)
    parser.add_argument("--pass", dest="names", default="", help="comma-separated variables to pass in")
    parser.add_argument("--stage", required=True, help="host directory for the staged kubeconfig")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    env = {name: os.environ[name] for name in args.names.split(",") if name and name in os.environ}
    volumes: list[str] = []
    if "KUBECONFIG" in env:
        volumes, env["KUBECONFIG"] = kube_volumes(env["KUBECONFIG"], Path(args.stage))
    proc = subprocess.Popen(run_command(args.container, args.command, env, volumes))
    with _forwarding(proc):
        while True:
            with contextlib.suppress(InterruptedError):
                return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
