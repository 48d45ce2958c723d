"""The docker CLI backend's sandbox: `docker run -i` of a hardened, single-use container whose main process is
our command server (agent/sandbox/server.py), reached over the CLI's own stdin/stdout (a socket pair), and
CliContainer, the Host of its ServedSandbox (OOM from `docker inspect`, removal by `docker rm -f`).

The hardening is the Docker SDK backend's, as flags: root only for the command server (all capabilities
dropped but SETUID/SETGID/KILL/DAC_OVERRIDE, no new privileges), the task's memory (no swap), CPU and pids
limits, nofile/fsize/core ulimits, no network unless the task asks (then the pool's own network), a
read-only root with size-limited tmpfs /workspace, /tmp and /grader, init as PID 1, the harness labels, and
no logs on the host's disk."""

from __future__ import annotations

import collections
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from typing import Optional

from agent.sandbox.backends.docker_cli.cli import DockerCli, error
from agent.sandbox.contract import AGENT_UID, PATH, WORKSPACE, SandboxSpec
from agent.sandbox.labels import owner_labels
from agent.sandbox.served import ServedSandbox
from agent.sandbox.transport import SERVER_SOURCE, SandboxDied
from results.errors import UserError

SERVER_ARGV = ["python3", "-u", "-I", "-c", "import os; exec(os.environ.pop('HARNESS_SERVER'))"]


def run_flags(limits: SandboxSpec, name: str, labels: dict[str, str], network: Optional[str]) -> list[str]:
    """The `docker run` flags of one sandbox: those of the Docker backend (hardened, create_sandbox)."""
    if limits.native is not None:
        raise UserError("--sandbox docker-cli has no static helper (NativeSpec): run Harbor tasks on docker")
    flags = ["--interactive", "--pull", "never", "--init", "--user", "0:0", "--name", name]
    for key, value in labels.items():
        flags += ["--label", f"{key}={value}"]
    flags += ["--network", (network or "bridge") if limits.network else "none"]
    flags += ["--memory", f"{limits.memory_mb}m", "--memory-swap", f"{limits.memory_mb}m"]
    flags += ["--cpus", f"{limits.cpus:g}", "--pids-limit", str(limits.pids)]
    flags += ["--security-opt", "no-new-privileges", "--log-driver", "none"]
    fsize = limits.fsize_mb << 20
    flags += ["--ulimit", f"nofile={limits.nofile}:{limits.nofile}", "--ulimit", f"fsize={fsize}:{fsize}"]
    flags += ["--ulimit", "core=0:0", "--cap-drop", "ALL"]
    for cap in ("SETUID", "SETGID", "KILL", "DAC_OVERRIDE"):  # the server's and our root commands' only
        flags += ["--cap-add", cap]
    if limits.read_only:
        flags.append("--read-only")
    flags += [
        "--tmpfs",
        f"{WORKSPACE}:size={limits.workspace_mb}m,uid={AGENT_UID},gid={AGENT_UID},mode=0755,exec",
        "--tmpfs",
        f"/tmp:size={limits.tmp_mb}m,mode=1777,exec",
        "--tmpfs",
        "/grader:size=64m,uid=0,gid=0,mode=0700,exec",  # hidden tests go here when grading
        "--workdir",
        WORKSPACE,
    ]
    if limits.runtime:
        flags += ["--runtime", limits.runtime]
    environment = {"HARNESS_UID": str(AGENT_UID), "HOME": "/tmp", "PATH": PATH, "LANG": "C.UTF-8"}
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    for key, value in environment.items():
        flags += ["--env", f"{key}={value}"]
    return flags + ["--env", "HARNESS_SERVER"]  # its value comes from the CLI's environment: no argv limit


class CliContainer:
    """The docker CLI backend's Host (agent/sandbox/served.py): a container that `docker run -i` (`process`)
    attached to a socket pair; the server's stdout alone comes back (no multiplexing)."""

    multiplexed = False

    def __init__(self, cli: DockerCli, name: str, process: subprocess.Popen):
        self.cli, self.name, self.process = cli, name, process
        self.stderr: collections.deque[str] = collections.deque(maxlen=20)  # the CLI's own words, and ours
        self._removed = False
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.process.stderr:
            self.stderr.append(line.decode("utf-8", "replace").strip())

    def died_of_oom(self, wait: float = 5.0) -> bool:
        """Whether the engine says the container's memory cgroup ran out (once it has stopped)."""
        end = time.monotonic() + wait
        while True:
            try:
                running, oom = self.cli.run(
                    "inspect", "--format", "{{.State.Running}} {{.State.OOMKilled}}", self.name
                ).split()
            except Exception:
                return False
            if running == "false" or time.monotonic() >= end:
                return oom == "true"
            time.sleep(0.2)

    def remove(self):
        """Ends the CLI and removes the container; safe to call twice."""
        if self._removed:
            return
        self._removed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.process.wait(timeout=10)
        with contextlib.suppress(Exception):
            self.cli.run("rm", "--force", "--volumes", self.name, timeout=60)


def create_sandbox(
    cli: DockerCli,
    image: str,
    limits: SandboxSpec,
    run_id: str,
    task: str = "pool",
    pool_id: str = "",
    network: Optional[str] = None,
) -> ServedSandbox:
    """Runs one hardened container of `image` with our command server, attached to a socket pair, and returns
    its started ServedSandbox (blocking: call from a thread)."""
    name = f"harness-{run_id[:12]}-{secrets.token_hex(4)}"
    argv = cli.argv("run", *run_flags(limits, name, owner_labels(run_id, pool_id, task), network), image)
    mine, theirs = socket.socketpair()
    try:
        process = subprocess.Popen(
            argv + SERVER_ARGV,
            stdin=theirs,
            stdout=theirs,
            stderr=subprocess.PIPE,
            env={**os.environ, "HARNESS_SERVER": SERVER_SOURCE},
            start_new_session=True,  # its own process group: removal kills the CLI and nothing else
        )
    except BaseException:
        mine.close()
        raise
    finally:
        theirs.close()
    host = CliContainer(cli, name, process)
    try:
        sb = ServedSandbox(mine, host, name=name, image=image, limits=limits)
        try:
            sb.wait_ready()
        except SandboxDied:
            if process.poll() is not None or _waited(process):
                raise _failed(cli.binary, image, host) from None
            raise
        return sb
    except BaseException:
        mine.close()
        host.remove()
        raise


def _waited(process: subprocess.Popen, timeout: float = 2.0) -> bool:
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout)
        return True
    return False


def _failed(binary: str, image: str, host: CliContainer) -> Exception:
    """Why `docker run` ended before the server was ready (a missing image: the user's to fix)."""
    time.sleep(0.1)  # the drain thread takes the CLI's last words
    said = " ".join(host.stderr)
    if "No such image" in said or "pull access denied" in said or "Unable to find image" in said:
        return UserError(f"image {image} not found: build it with `harness images build`")
    return error(binary, ("run",), said or f"exit {host.process.returncode}")
