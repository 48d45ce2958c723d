"""Host probes taken around each case: resource figures (disk, memory, this process's RSS, threads and
children), sandbox-user processes outside any container, new host files, a host file's digest, and the
run's containers.

Docker (and agent.sandbox) is imported only when a probe runs, so that
`harness selftest --list` imports nothing heavy."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from agent import AGENT_UID


@dataclass
class HostState:
    disk_root: int
    disk_docker: Optional[int]
    mem_available: int
    rss: int
    threads: int
    children: int


def _meminfo(key: str) -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _rss() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _children() -> int:
    me, n = str(os.getpid()), 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        n += fields[1] == me and fields[0] != "Z"  # ppid, not a zombie
    return n


def docker_root() -> Optional[str]:
    from agent.sandbox.backends.docker.client import docker_client

    try:
        return docker_client().info().get("DockerRootDir")
    except Exception:
        return None


def host_state(root: Optional[str]) -> HostState:
    def used(path):
        try:
            return shutil.disk_usage(path).used
        except OSError:
            return None

    return HostState(
        disk_root=used("/") or 0,
        disk_docker=used(root) if root else None,
        mem_available=_meminfo("MemAvailable"),
        rss=_rss(),
        threads=threading.active_count(),
        children=_children(),
    )


def _sandbox_processes() -> dict[str, set[str]]:
    """pid -> container ids named in its cgroup, for every process of the sandbox user on this host."""

    found = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid_line = next(line for line in status.read_text().splitlines() if line.startswith("Uid:"))
            if int(uid_line.split()[1]) != AGENT_UID:
                continue
            found[status.parent.name] = set(
                re.findall(r"[0-9a-f]{64}", (status.parent / "cgroup").read_text())
            )
        except (OSError, StopIteration, ValueError):
            continue
    return found


def stray_sandbox_processes() -> list[str]:
    """Sandbox-user processes that are not inside a running container (an escape or a leak). Looked at
    twice, a second apart, so that a container another process is stopping right now does not count."""
    from agent.sandbox.backends.docker.client import docker_client

    def strays() -> set[str]:
        running = {c["Id"] for c in docker_client().api.containers()}  # never inspects: no race with removals
        return {pid for pid, ids in _sandbox_processes().items() if not ids & running}

    first = strays()
    if not first:
        return []
    time.sleep(1.0)
    return sorted(first & strays(), key=int)


WATCHED = ("/tmp", "/var/tmp", "/dev/shm", "/etc", "/root", "/home", "/opt", "/usr/local", "/srv")
SKIP_DIRS = {".venv", ".git", "node_modules", "__pycache__", ".cache"}


def _entries(top: str, depth: int):
    """Paths under top, `depth` levels of folders deep (0: top's own entries), skipping caches."""
    try:
        with os.scandir(top) as it:
            entries = list(it)
    except OSError:
        return
    for e in entries:
        yield e.path
        if depth > 0 and e.name not in SKIP_DIRS and e.is_dir(follow_symlinks=False):
            yield from _entries(e.path, depth - 1)


def new_host_files(since: float, nonce: str, exclude: Path, extra: tuple[str, ...] = ()) -> list[str]:
    """Entries of / and of the watched host folders (3 levels deep) that are owned by the sandbox user
    and changed since `since`, or named with the nonce; the selftest's own folder excluded."""

    exclude_prefix = str(exclude).rstrip("/") + "/"
    paths = list(_entries("/", 0))
    for top in (*WATCHED, *extra):
        paths += _entries(top, 3)
    found = []
    for path in paths:
        if path == str(exclude) or path.startswith(exclude_prefix):
            continue
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if nonce in os.path.basename(path) or (
            st.st_uid == AGENT_UID and max(st.st_mtime, st.st_ctime) >= since
        ):
            found.append(path)
    return sorted(set(found))


def labeled_containers(run_id: str = "", pid: int = 0) -> list[str]:
    """Containers (any state) labeled with the run id, or with the process id that made them; the
    low-level list, which never inspects them."""
    from agent.sandbox import LABEL_PID, LABEL_RUN
    from agent.sandbox.backends.docker.client import docker_client

    label = f"{LABEL_RUN}={run_id}" if run_id else f"{LABEL_PID}={pid}"
    raw = docker_client().api.containers(all=True, filters={"label": label})
    return [c["Names"][0].lstrip("/") for c in raw]


def file_digest(path: str) -> str:
    """sha256 of a host file's bytes ("" when unreadable)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""
