"""The docker command: DockerCli runs one subcommand of a Docker-compatible CLI (--docker-cli-binary) and
turns its failures into the harness's errors (a missing CLI or engine: UserError; anything else: CliError,
an infrastructure error; NotFound for what is gone already)."""

from __future__ import annotations

import os
import shutil
import subprocess

from results.errors import InfraError, UserError


class CliError(InfraError):
    """A docker command failed: its exit code and what it said."""


class NotFound(CliError):
    """What the command names (container, network, image) does not exist (any more)."""


NO_ENGINE = ("Cannot connect to the Docker daemon", "Is the docker daemon running", "error during connect")


class DockerCli:
    """Runs `binary SUBCOMMAND ...` (blocking: call from a thread), with this process's environment."""

    def __init__(self, binary: str = "docker"):
        self.binary = binary

    def path(self) -> str:
        """The CLI's path; a UserError with the fix when there is none."""
        found = shutil.which(self.binary)
        if found is None:
            raise UserError(
                f"--sandbox docker-cli needs the {self.binary!r} command: install the Docker CLI "
                "(apt-get install docker.io) or name another with --docker-cli-binary"
            )
        return found

    def argv(self, *args: str) -> list[str]:
        return [self.path(), *args]

    def run(self, *args: str, timeout: float = 120, env: dict | None = None) -> str:
        """The command's stdout; NotFound, UserError (no engine) or CliError when it fails."""
        try:
            proc = subprocess.run(
                self.argv(*args),
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**os.environ, **(env or {})},
            )
        except subprocess.TimeoutExpired:
            raise CliError(f"{self.binary} {args[0]} took over {timeout:.0f}s") from None
        if proc.returncode != 0:
            raise error(self.binary, args, proc.stderr)
        return proc.stdout


def error(binary: str, args: tuple, stderr: str) -> Exception:
    """The error a failed `binary args...` raises, from what it wrote to stderr."""
    said = " ".join(stderr.split())[-400:]
    if any(m in said for m in NO_ENGINE):
        return UserError(
            f"no Docker engine answers {binary} ({said[:160]}): start one (`make setup`, or `sudo dockerd &`)"
        )
    if "No such" in said or "not found" in said:
        return NotFound(f"{binary} {args[0]}: {said}")
    return CliError(f"{binary} {' '.join(args[:2])} failed: {said}")
