"""Sandboxes for any image: the static command server, and the Harbor runtime contract.

Our own tasks run agent/sandbox/server.py on the image's python3 (agent/sandbox/container.py). A sandbox
whose Limits carry a NativeSpec runs agent/sandbox/helper.c instead: the same JSON-lines protocol,
compiled `gcc -static` once per host (cached by source hash) and bind-mounted read-only at
/.harness-helper, so the image needs no interpreter (a Debian minbase, a busybox-only image, ...). It also
walks the working folder for change capture ("op": "snapshot") and kills every process but itself
("op": "killall").

A NativeSpec sandbox (Harbor tasks) differs from ours on purpose (README "Harbor tasks"):
  - the working folder is the image's WORKDIR (or the task's workdir), on a writable root filesystem
    (tasks install packages and edit system files); ours: a size-limited /workspace tmpfs on a read-only root;
  - commands run as the task's user (the image's USER, root for most images) with Docker's default
    capability set; ours: uid 10001 with no capabilities;
  - kept from ours: no network unless the task allows it, memory/CPU/pids limits, no swap, no-new-privileges,
    nofile/fsize/core ulimits, init as PID 1, labels for reaping, no host paths but the read-only helper.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import docker.errors

from agent.sandbox.changes import CaptureError
from agent.sandbox.client import docker_client, docker_retry
from agent.sandbox.container import Limits, Sandbox, hardened
from agent.sandbox.images import WORKSPACE
from agent.sandbox.labels import owner_labels
from results.errors import InfraError, UserError

HELPER_SOURCE = Path(__file__).parent / "helper.c"
HELPER_IN_CONTAINER = "/.harness-helper"
CACHE_DIR = Path(os.environ.get("HARNESS_CACHE", Path.home() / ".cache" / "harness"))


@dataclass(frozen=True)
class NativeSpec:
    """How a sandbox that runs the static helper is set up (hashable: part of the pool key)."""

    workdir: Optional[str] = None  # None -> the image's WORKDIR ("/" when it has none)
    user: Optional[str] = None  # the agent's user; None -> the image's USER, root when it has none
    env: tuple[tuple[str, str], ...] = ()  # set on top of the image's ENV
    writable_root: bool = True
    default_caps: bool = True  # Docker's default capability set (Harbor tasks run as root and need it)


def helper_path() -> Path:
    """The static helper binary for this host, compiled on first use (gcc -static) and cached by source
    hash."""
    source = HELPER_SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:12]
    target = CACHE_DIR / f"sandbox-helper-{digest}"
    if target.is_file():
        return target
    gcc = shutil.which("gcc")
    if gcc is None:
        raise UserError(
            "gcc is needed once to build the sandbox helper for images without python3: "
            "install it (`make setup`, or apt-get install build-essential)"
        )
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        out = Path(tmp) / "helper"
        proc = subprocess.run(
            [gcc, "-static", "-O2", "-o", str(out), str(HELPER_SOURCE)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise UserError(
                f"building the sandbox helper failed (gcc -static; is libc6-dev installed?): "
                f"{proc.stderr.strip()[-300:]}"
            )
        out.chmod(0o755)
        os.replace(out, target)  # atomic: concurrent builders agree
    return target


class NativeSandbox(Sandbox):
    """A Sandbox served by the static helper; its working folder is `workdir` instead of /workspace."""

    workdir: str = WORKSPACE
    env: dict[str, str] = {}  # the container's environment as commands see it (image ENV + the task's env)
    image_user: str = "root"  # the image's USER

    async def exec_raw(self, cmd, *, cwd: str = WORKSPACE, **kw) -> dict:
        return await super().exec_raw(cmd, cwd=self.workdir if cwd == WORKSPACE else cwd, **kw)

    async def put_files(self, files, dest: str = WORKSPACE, user: str = "agent", executable=()):
        if dest == WORKSPACE and files:
            self._initial_files.update(files)
            dest = self.workdir
        await super().put_files(files, dest=dest, user=user, executable=executable)

    async def get_files(self, paths, root: str = WORKSPACE, max_bytes: int = 16 << 20):
        return await super().get_files(
            paths, root=self.workdir if root == WORKSPACE else root, max_bytes=max_bytes
        )

    async def _capture(self, args: list[str], stdin: Optional[bytes] = None, cap: int = 64 << 20) -> dict:
        """Change capture without the image's python3 (agent/sandbox/capture.py's two modes): `list`
        walks the working folder in the helper itself (same filesystem only), `read` streams the files
        out by tar."""
        mode, root = args[0], (self.workdir if args[1] == WORKSPACE else args[1])
        if mode == "list":
            reply = await self._request({"op": "snapshot", "root": root, "max_files": int(args[2])}, 150)
            snap = reply.get("snapshot")
            if not isinstance(snap, dict):
                raise CaptureError(f"sandbox {self.id[:12]}: listing failed: {reply.get('error', reply)}")
            if "too_many" in snap:
                return {"too_many": snap["too_many"], "entries": {}, "rejected": []}
            return {"entries": snap, "rejected": []}
        wanted = json.loads(stdin or b"[]")
        try:
            files = await self.get_files(wanted, root=root, max_bytes=int(args[2]) + (1 << 20))
        except (InfraError, tarfile.TarError) as e:
            raise CaptureError(str(e)) from None
        return {
            "files": {p: base64.b64encode(d).decode() for p, d in files.items()},
            "rejected": [f"unreadable file {p}" for p in wanted if p not in files],
        }

    async def kill_all(self):
        """Kills every process in the container but init and the helper (nothing the agent started
        survives)."""
        await self._request({"op": "killall"}, 30)


def _image_config(client, image: str) -> dict:
    try:
        return client.api.inspect_image(image).get("Config") or {}
    except docker.errors.ImageNotFound:
        raise UserError(
            f"image {image} not found locally (no registry is used here: build or load it first, "
            "e.g. `docker load -i image.tar`)"
        ) from None


def create_native(
    image: str,
    limits: Limits,
    run_id: str,
    task: str = "pool",
    pool_id: str = "",
    network: Optional[str] = None,
) -> NativeSandbox:
    """Creates, attaches and starts one container served by the static helper (blocking: call from a
    thread)."""
    spec: NativeSpec = limits.native
    client = docker_client()
    helper = helper_path()
    config = _image_config(client, image)
    workdir = spec.workdir or config.get("WorkingDir") or "/"
    user = spec.user or config.get("User") or "root"
    env = {"HARNESS_UID": user, **dict(spec.env)}
    kwargs = hardened(limits, run_id, task, pool_id, network)
    kwargs.update(
        command=[HELPER_IN_CONTAINER],
        entrypoint=[],
        working_dir=workdir,
        read_only=not spec.writable_root,
        tmpfs={} if spec.writable_root else {"/tmp": f"size={limits.tmp_mb}m,mode=1777,exec"},
        volumes={str(helper): {"bind": HELPER_IN_CONTAINER, "mode": "ro"}},
        environment=env,
    )
    if not spec.default_caps:
        kwargs.update(cap_drop=["ALL"], cap_add=["SETUID", "SETGID", "KILL"])
    container = docker_retry(client.containers.create)(image, **kwargs)
    try:
        sb = NativeSandbox(container, image, limits, (image, limits))
        sb.workdir = workdir
        sb.image_user = config.get("User") or "root"  # Harbor's default user for the verifier
        docker_retry(container.start)()
        sb.wait_ready()
        container.reload()
        sb.env = dict(
            e.split("=", 1)
            for e in container.attrs["Config"]["Env"]
            if "=" in e and not e.startswith("HARNESS_")
        )
        return sb
    except BaseException:
        with contextlib.suppress(Exception):
            container.remove(force=True)
        raise


def commit(sb: NativeSandbox, run_id: str, pool_id: str = "") -> str:
    """An image of the sandbox's filesystem now (its processes are not part of it); labelled like containers,
    so that prune() removes it if this process dies before remove_image()."""
    img = sb.container.commit(
        repository="harness/snapshot",
        tag=secrets.token_hex(6),
        conf={"Labels": owner_labels(run_id, pool_id)},
    )
    return img.id


def remove_image(image_id: str):
    with contextlib.suppress(docker.errors.APIError):
        docker_client().images.remove(image_id, force=True, noprune=False)
