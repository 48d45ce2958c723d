"""The Docker backend's sandboxes for any image: the static command server, and the Harbor runtime contract
(the "harbor" and "diff" capabilities: NativeSandbox, create_native, commit).

Our own tasks run agent/sandbox/server.py on the image's python3 (sandbox.py). A sandbox whose SandboxSpec
carries a NativeSpec (agent/sandbox/contract.py) runs agent/sandbox/helper.c instead: the same JSON-lines
wire format, compiled `gcc -static` once per host (cached by source hash) and bind-mounted read-only at
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
from pathlib import Path
from typing import Optional

import docker.errors

from agent.sandbox.backends.docker.client import docker_client, docker_retry
from agent.sandbox.backends.docker.container import hardened, served_container
from agent.sandbox.changes import CaptureError
from agent.sandbox.contract import WORKSPACE, NativeSpec, SandboxSpec
from agent.sandbox.labels import LABEL_POOL, LABEL_RUN, LABEL_TASK, owner_labels
from agent.sandbox.served import ServedSandbox
from results.errors import InfraError, UserError

HELPER_SOURCE = Path(__file__).resolve().parents[2] / "helper.c"  # agent/sandbox/helper.c: runs inside
TRACE_SOURCE = HELPER_SOURCE.with_name("trace.c")  # the verifier's tracer, #included by helper.c
HELPER_IN_CONTAINER = "/.harness-helper"
CACHE_DIR = Path(os.environ.get("HARNESS_CACHE", Path.home() / ".cache" / "harness"))


def helper_path() -> Path:
    """The static helper binary for this host, compiled on first use (gcc -static) and cached by source
    hash."""
    source = HELPER_SOURCE.read_bytes() + TRACE_SOURCE.read_bytes()
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


class FileOpError(InfraError):
    """The helper could not do a file operation in the container (no space left, a path it cannot make):
    raised as InfraError for callers that do not expect it; the Harbor verifier turns it into a verdict."""


class NativeSandbox(ServedSandbox):
    """A sandbox served by the static helper (on a Docker host: create_native); its working folder is the
    image's `workdir` instead of /workspace.

    Files go in and out through the helper's own file operations (mkdirs, write, read), never through a
    program of the image: whatever the agent did to its sh, tar or ls, the harness's own work still works.
    A command's `env` is set on top of the container's environment (what `docker exec` gives: the image's
    ENV, the task's env, PATH and HOSTNAME as Docker sets them, HOME from the user's passwd entry)."""

    env_replaces = False
    forks = False  # the helper runs a `fork` request's argv as it is: the image may have no python3
    # the container's environment (image ENV + the task's env + Docker's PATH/HOSTNAME)
    env: dict[str, str] = {}
    image_user: str = "root"  # the image's USER
    # After revive(): the agent's own container (stopped: its filesystem, for `docker diff`) and the image
    # committed from it; both removed with this sandbox.
    agent_container = None
    revived_from: Optional[str] = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.channel._on_unresponsive = self._halt

    def _halt(self):
        """A server that stopped answering (e.g. the agent stopped it): the container is stopped, not
        removed, so that its filesystem can still be verified (revive())."""
        self.channel.close()
        with contextlib.suppress(Exception):
            self.container.kill()

    def death_cause(self, wait: float = 5.0) -> Optional[str]:
        """ "oom" as for any sandbox; else "helper" while the engine still has the container: its command
        server died or stopped answering with the engine healthy, which the agent (root here, with the
        default capabilities) can cause (README "Harbor tasks"). None: the engine failed (an infra error)."""
        if self.host.died_of_oom(wait):
            return "oom"
        try:
            self.container.reload()
        except docker.errors.NotFound:
            return None
        except Exception:
            return None
        return "helper"

    def revive(self) -> None:
        """After the command server died or stopped answering: this sandbox goes on in a new container of the
        same filesystem (a `docker commit` of the stopped one) with a new command server; what the agent
        left running does not survive. Blocking (from a thread). Raises docker.errors.NotFound when the
        container is gone (nothing left to verify), InfraError/APIError when the engine fails."""
        old = self.container
        with contextlib.suppress(docker.errors.APIError):  # stopped already when its server was killed
            old.kill()
        labels = old.labels  # the run's and the pool's, for the commit and the new container (prune())
        run_id, pool_id = labels.get(LABEL_RUN, ""), labels.get(LABEL_POOL, "")
        image = commit(self, run_id, pool_id)
        try:
            new = create_native(image, self.limits, run_id, labels.get(LABEL_TASK, "revived"), pool_id)
        except BaseException:
            remove_image(image)
            raise
        if self.agent_container is None:
            self.agent_container = old
        else:  # revived twice: the first container is the agent's; this one was a revival's
            with contextlib.suppress(docker.errors.APIError, docker.errors.NotFound):
                old.remove(force=True)
        if self.revived_from:
            remove_image(self.revived_from)
        self.revived_from = image
        self.host, self.channel, self.id = new.host, new.channel, new.id
        self.channel._on_unresponsive = self._halt

    def kill(self) -> None:
        super().kill()
        if self.agent_container is not None:
            with contextlib.suppress(Exception):
                self.agent_container.remove(force=True)
        if self.revived_from:
            remove_image(self.revived_from)

    async def _op(self, req: dict, timeout: float = 60.0) -> dict:
        reply = await self.channel.request(req, timeout + 15 + len(req.get("data", "")) / 5e6)
        if reply.get("ok") is not True:
            raise FileOpError(
                f"sandbox {self.id[:12]}: {reply.get('message') or reply.get('error') or reply}"
            )
        return reply

    async def mkdirs(self, *paths: str, mode: int = 0o755, owner: str = "root", fresh: bool = False):
        """Makes each path a real folder (components that are files or links are replaced); with fresh,
        empties it first. The last component gets mode and owner."""
        await self._op({"op": "mkdirs", "paths": list(paths), "mode": mode, "owner": owner, "fresh": fresh})

    async def write_file(self, path: str, data: bytes, mode: int = 0o644, owner: str = "root"):
        await self._op(
            {
                "op": "write",
                "path": path,
                "data": base64.b64encode(data).decode(),
                "mode": mode,
                "owner": owner,
            },
            timeout=120,
        )

    async def symlink(self, path: str, target: str, owner: str = "root"):
        """Makes path a link to `target`, its text as it is (never resolved: a link out of the working folder
        is the tamper rule's to judge), replacing what was there; parents as write_file makes them."""
        await self._op({"op": "symlink", "path": path, "target": target, "owner": owner})

    async def read_file(self, path: str, max_bytes: int = 1 << 20) -> tuple[bytes, int, bool]:
        """(the first max_bytes of the file, its size, whether it was longer); follows no link."""
        r = await self._op({"op": "read", "path": path, "max": max_bytes}, timeout=120)
        return base64.b64decode(r["data"]), int(r["size"]), bool(r["truncated"])

    async def remove(self, *paths: str):
        """Removes files or folders (with what they hold), following no link."""
        await self._op({"op": "remove", "paths": list(paths)})

    async def kinds(self, *paths: str) -> list[str]:
        """For each path: "f" file, "d" folder, "l" link, "o" other, "" none (lstat)."""
        return (await self._op({"op": "stat", "paths": list(paths)}))["kinds"]

    async def list_files(self, root: str, max_files: int = 200) -> Optional[dict]:
        """path (relative to root) -> [kind, size, hash, executable] of what root holds, walked by the helper
        without following links; None when it holds more than max_files."""
        reply = await self.channel.request({"op": "snapshot", "root": root, "max_files": max_files}, 150)
        snap = reply.get("snapshot")
        if not isinstance(snap, dict):
            raise FileOpError(f"sandbox {self.id[:12]}: listing {root} failed: {reply.get('error', reply)}")
        snap.pop("!rejected", None)  # what could not be listed (too deep, unreadable) is left out
        return None if reply.get("not_listed") else snap

    async def put_files(self, files, dest: str = WORKSPACE, user: str = "agent", executable=()) -> list[str]:
        """Writes files below dest (0644, or 0755 for the paths named in `executable`), owned by `user`.
        A name the helper cannot write raises FileOpError (nothing is left out: returns [])."""
        dest = self.workdir if dest == WORKSPACE else dest
        if dest == self.workdir and files:
            self.capture.initial_files.update(files)
        executable = set(executable)
        for name, data in sorted(files.items()):
            path = f"{dest.rstrip('/')}/{name.lstrip('/')}"
            await self.write_file(path, data, 0o755 if name in executable else 0o644, owner=user)
        return []

    async def get_files(self, paths, root: str = WORKSPACE, max_bytes: int = 16 << 20):
        """Reads regular files (relative to root); missing ones, links and other kinds are left out.
        Raises InfraError above max_bytes in all."""
        root = self.workdir if root == WORKSPACE else root
        out: dict[str, bytes] = {}
        left = max_bytes
        for p in paths:
            try:
                data, size, more = await self.read_file(f"{root.rstrip('/')}/{p}", max_bytes=left + 1)
            except FileOpError:
                continue
            left -= len(data)
            if more or left < 0:
                raise InfraError(f"files under {root} exceed {max_bytes} bytes")
            out[p] = data
        return out

    async def _capture(self, args: list[str], stdin: Optional[bytes] = None, cap: int = 64 << 20) -> dict:
        """Change capture without the image's python3 (agent/sandbox/capture.py's two modes): `list`
        walks the working folder in the helper itself (same filesystem only; past max_files, the baseline's
        paths and the smallest others, as capture.py), `read` reads the files by the helper's read op."""
        mode, root = args[0], (self.workdir if args[1] == WORKSPACE else args[1])
        if mode in ("list", "changed"):  # `changed` reads nothing here: the caller asks `read` for it
            req = {"op": "snapshot", "root": root, "max_files": int(args[2])}
            if mode == "changed":
                req["keep"] = sorted(json.loads(stdin or b"{}"))  # the baseline's paths: never cut
            reply = await self.channel.request(req, 150 + len(stdin or b"") / 5e6)
            snap = reply.get("snapshot")
            if not isinstance(snap, dict):
                raise CaptureError(f"sandbox {self.id[:12]}: listing failed: {reply.get('error', reply)}")
            rejected = snap.pop("!rejected", [])  # too deep or unreadable: listed as not captured
            return {"entries": snap, "rejected": rejected, "not_listed": reply.get("not_listed", 0)}
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
        await self.channel.request({"op": "killall"}, 30)


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
    limits: SandboxSpec,
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
    env = dict(spec.env)  # the container's environment is the image's ENV and the task's, nothing of ours
    image_env = {e.split("=", 1)[0] for e in config.get("Env") or []}
    args = [f"--agent={user}"]
    if spec.keep_processes:
        args.append("--procs=keep")
    if "HOME" in env or "HOME" in image_env:
        args.append("--keep-home")  # set by the image or the task; else per user, as docker exec does
    kwargs = hardened(limits, run_id, task, pool_id, network)
    kwargs.update(
        command=[HELPER_IN_CONTAINER, *args],
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
        sb = served_container(container, image, limits, cls=NativeSandbox, workdir=workdir)
        sb.image_user = config.get("User") or "root"  # Harbor's default user for the verifier
        docker_retry(container.start)()
        sb.wait_ready()
        container.reload()
        sb.env = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"] if "=" in e)
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
