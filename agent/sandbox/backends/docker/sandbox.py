"""The Docker backend's sandbox: create_sandbox() makes, attaches and starts one hardened, single-use
container whose main process is our command server (agent/sandbox/server.py), and returns a ServedSandbox
(the one Sandbox implementation) on its DockerContainer host; a SandboxSpec that carries a NativeSpec gets
the static helper instead (native.py). Commands travel over the attached stdin/stdout (transport.py)."""

from __future__ import annotations

import contextlib
from typing import Optional

import docker.errors

from agent.sandbox.backends.docker.client import docker_client, docker_retry
from agent.sandbox.backends.docker.container import hardened, served_container
from agent.sandbox.backends.docker.native import create_native
from agent.sandbox.contract import AGENT_UID, PATH, WORKSPACE, SandboxSpec
from agent.sandbox.served import ServedSandbox
from agent.sandbox.transport import SERVER_SOURCE
from results.errors import UserError


def create_sandbox(
    image: str,
    limits: SandboxSpec,
    run_id: str,
    task: str = "pool",
    pool_id: str = "",
    network: Optional[str] = None,
) -> ServedSandbox:
    """Creates, attaches and starts one hardened container (blocking: call from a thread). A networked
    sandbox joins `network` (its pool's own, see DockerPool.network_for); others have only lo."""
    if limits.native is not None:  # the static helper: any image, Harbor's runtime contract
        return create_native(image, limits, run_id, task, pool_id, network)
    client = docker_client()
    tmpfs = {
        WORKSPACE: f"size={limits.workspace_mb}m,uid={AGENT_UID},gid={AGENT_UID},mode=0755,exec",
        "/tmp": f"size={limits.tmp_mb}m,mode=1777,exec",
        # root-owned and not writable by the sandbox user: hidden tests go here when grading
        "/grader": "size=64m,uid=0,gid=0,mode=0700,exec",
    }
    kwargs = hardened(limits, run_id, task, pool_id, network)
    kwargs.update(
        command=["python3", "-u", "-I", "-c", "import os; exec(os.environ.pop('HARNESS_SERVER'))"],
        working_dir=WORKSPACE,
        # For the server and the harness's own root commands (capture, the grader's test runner) only: a
        # command of the sandbox user gets none (a uid change drops them; no-new-privileges keeps them off).
        cap_drop=["ALL"],
        cap_add=["SETUID", "SETGID", "KILL", "DAC_OVERRIDE"],
        read_only=limits.read_only,
        tmpfs=tmpfs,
        environment={
            "HARNESS_SERVER": SERVER_SOURCE,
            "HARNESS_UID": str(AGENT_UID),
            "HOME": "/tmp",
            "PATH": PATH,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
    )
    try:
        container = docker_retry(client.containers.create)(image, **kwargs)
    except docker.errors.ImageNotFound:
        raise UserError(f"image {image} not found: build it with `harness images build`") from None
    try:
        sb = served_container(container, image, limits)
        docker_retry(container.start)()
        sb.wait_ready()
        return sb
    except BaseException:
        with contextlib.suppress(Exception):
            container.remove(force=True)
        raise
