"""A real local Ray cluster (a head and worker nodes) inside a loopback-only network namespace.

Outside such a namespace Ray registers the machine's primary address and probes an outside one to find
its own; inside `unshare -n` with lo up it uses 127.0.0.1 and no traffic can leave the machine. Every
node shares this machine's Docker engine (a unix socket, unaffected by the namespace). Commands that
talk to the cluster (the `harness eval --cluster` driver) run in the same namespace via `nsenter`.
Each node is a `ray start --block` in its own process group, so stopping one never touches Ray
processes this module did not start (`ray stop` would stop every Ray on the machine).
Nothing outlives the process that made the cluster: a reaper process (its own session, so a Ctrl-C or a
SIGTERM of the test run's process group does not reach it first) waits for that process to end, however
it ends (stop(), Ctrl-C, SIGTERM, kill -9), and then kills every process in the cluster's namespace.
Needs root (unshare, nsenter); used by tests/evaluators/run/test_cluster.py and bench/cluster.py.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PORT = 6379  # the namespace is private: no other Ray can hold it


def available() -> str:
    """'' when a namespaced cluster can run here, else why not."""
    try:
        import ray  # noqa: F401
    except ModuleNotFoundError:
        return "ray is not installed (pip install 'harness[cluster]')"
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"):
        return "needs root with unshare and nsenter for a loopback-only network namespace"
    r = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    return "" if r.returncode == 0 else f"unshare -n fails: {r.stderr.decode()[:200]}"


class LocalCluster:
    def __init__(self, cpus_per_node: int = 2):
        self.cpus = cpus_per_node
        self.tmp = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))  # short: Ray's unix socket paths
        self.env = {
            **os.environ,
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(16),  # the cluster's token, shared with every node
            "PYTHONPATH": str(ROOT),
        }
        self.holder = subprocess.Popen(
            ["unshare", "-n", "sh", "-c", "ip link set lo up && exec sleep infinity"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.nodes: list[subprocess.Popen] = []
        self.address = f"127.0.0.1:{PORT}"
        self._ns = ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net"]
        self.reaper = subprocess.Popen(
            [sys.executable, __file__, "--reap", str(os.getpid()), str(self.holder.pid), str(self.tmp)],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def wrap(self, argv: list[str]) -> list[str]:
        """argv run inside the cluster's network namespace."""
        return self._ns + argv

    def _ray(self, *args: str, log: str) -> subprocess.Popen:
        out = open(self.tmp / log, "w")
        return subprocess.Popen(
            self.wrap(
                [
                    str(Path(sys.executable).parent / "ray"),
                    "start",
                    "--block",
                    f"--num-cpus={self.cpus}",
                    "--disable-usage-stats",
                    *args,
                ]
            ),
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start(self, workers: int = 1, timeout: float = 90) -> "LocalCluster":
        try:
            return self._start(workers, timeout)
        except BaseException:  # a node that failed, or Ctrl-C while starting: stop what did start
            self.stop()
            raise

    def _start(self, workers: int, timeout: float) -> "LocalCluster":
        time.sleep(0.2)  # the holder brings lo up
        self.nodes.append(
            self._ray(
                "--head",
                f"--port={PORT}",
                "--include-dashboard=false",
                f"--temp-dir={self.tmp}/ray",
                log="head.log",
            )
        )
        self.wait_nodes(1, timeout)
        for i in range(workers):
            self.nodes.append(self._ray(f"--address={self.address}", log=f"worker{i}.log"))
        self.wait_nodes(1 + workers, timeout)
        return self

    def alive_nodes(self) -> int:
        code = (
            "import ray; ray.init(address=%r, logging_level='ERROR', log_to_driver=False); "
            "print(sum(n['Alive'] for n in ray.nodes()))" % self.address
        )
        r = subprocess.run(
            self.wrap([sys.executable, "-c", code]), env=self.env, capture_output=True, text=True, timeout=60
        )
        return int(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 and r.stdout.strip() else 0

    def wait_nodes(self, n: int, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for p in self.nodes:
                if p.poll() is not None:
                    raise RuntimeError(f"a ray node exited: see {self.tmp}/*.log")
            if self.alive_nodes() >= n:
                return
            time.sleep(0.5)
        raise RuntimeError(
            f"the local Ray cluster did not reach {n} nodes in {timeout:.0f}s (logs: {self.tmp})"
        )

    def add_worker(self, timeout: float = 90) -> int:
        """Starts one more worker node; returns its index for kill_node."""
        self.nodes.append(self._ray(f"--address={self.address}", log=f"worker{len(self.nodes)}.log"))
        self.wait_nodes(len(self.nodes), timeout)
        return len(self.nodes) - 1

    def kill_node(self, i: int) -> None:
        """Kills node i (0 = the head) and every process it started, abruptly: a lost machine."""
        p = self.nodes[i]
        children: dict[int, list[int]] = {}
        for pid in self._members():
            with contextlib.suppress(OSError):
                ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(pid)
        todo, tree = [p.pid], []
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo += children.get(pid, [])
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        p.wait()

    def _members(self) -> list[int]:
        """Every process in the cluster's network namespace: exactly what this cluster started."""
        return namespace_members(self.holder.pid)

    def stop(self) -> None:
        for p in reversed(self.nodes):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)  # ray start --block stops its node's processes
        for p in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        for pid in self._members():  # whatever did not stop (workers live in sessions of their own)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        end = time.monotonic() + 10
        while self._members() and time.monotonic() < end:
            time.sleep(0.1)
        self.holder.kill()
        self.holder.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.reaper.wait(timeout=30)  # it sees the holder gone and exits


def namespace_members(holder: int) -> list[int]:
    """The processes in the network namespace of process `holder`, but itself."""
    try:
        mine = os.readlink(f"/proc/{holder}/ns/net")
    except OSError:
        return []
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != holder:
            try:
                if os.readlink(f"/proc/{d}/ns/net") == mine:
                    pids.append(int(d))
            except OSError:
                pass
    return pids


def _started(pid: int) -> str:
    """A live process's start time (field 22 of /proc/PID/stat), which tells it from a later one with the
    same pid; "" once it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return ""
    return "" if len(fields) < 20 or fields[0] in ("Z", "X") else fields[19]


def reap(owner: int, holder: int, tmp: str) -> None:
    """Waits until the owner process or the holder is gone, then kills the cluster's processes: SIGTERM
    (`ray start --block` stops its node's processes), then SIGKILL for what is left, then the holder."""
    owner_start, holder_start = _started(owner), _started(holder)
    while _started(owner) == owner_start and _started(holder) == holder_start:
        time.sleep(0.5)
    if _started(holder) != holder_start:
        return  # stop() ran: nothing left
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        for pid in namespace_members(holder):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        end = time.monotonic() + wait
        while namespace_members(holder) and time.monotonic() < end:
            time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(holder, signal.SIGKILL)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__" and sys.argv[1:2] == ["--reap"]:
    reap(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
