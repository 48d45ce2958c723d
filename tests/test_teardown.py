"""Setup and teardown leave nothing behind and nothing fragile: the Docker engine that .ci/setup starts runs
in a session of its own (stopping the `make` that started it does not stop it), and an interrupted test run
(Ctrl-C, SIGTERM, kill -9) stops the local Ray cluster it started (tests/ray_cluster.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import signals_as_in_a_shell
from tests.ray_cluster import available

ROOT = Path(__file__).resolve().parent.parent


def engine_start_line() -> str:
    """The line of .ci/setup that starts the Docker engine."""
    lines = [ln.strip() for ln in (ROOT / ".ci/setup").read_text().splitlines() if "/usr/sbin/dockerd" in ln]
    assert len(lines) == 1, lines
    return lines[0]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_the_engine_setup_starts_outlives_the_command_that_started_it(tmp_path, sig):
    # The real start line of .ci/setup, with a harmless stand-in for dockerd (this machine's engine is shared:
    # it is never restarted here), run by a shell in a process group of its own, as `make test` is; then the
    # whole group gets the signal a Ctrl-C or a timeout sends it.
    stand_in = tmp_path / "dockerd"
    stand_in.write_text(f"#!/bin/sh\necho $$ > {tmp_path}/pid\nexec sleep 300\n")
    stand_in.chmod(0o755)
    line = engine_start_line().replace("/usr/sbin/dockerd", str(stand_in))
    line = line.replace("/tmp/harness-dockerd.log", str(tmp_path / "log"))
    caller = subprocess.Popen(
        ["bash", "-c", f"{line}\nsleep 300"],
        start_new_session=True,
        stdin=subprocess.PIPE,
        preexec_fn=signals_as_in_a_shell,
    )
    try:
        end = time.monotonic() + 20
        while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text().strip():
            assert time.monotonic() < end, "the stand-in did not start"
            time.sleep(0.05)
        engine = int((tmp_path / "pid").read_text())
        assert os.getsid(engine) != os.getsid(caller.pid)  # a session of its own (setsid)
        assert os.readlink(f"/proc/{engine}/fd/0") == "/dev/null"  # not reading the caller's terminal
        os.killpg(caller.pid, sig)
        caller.wait(timeout=10)
        time.sleep(0.5)
        assert alive(engine), "the engine stopped with the command that started it"
    finally:
        if caller.poll() is None:
            os.killpg(caller.pid, signal.SIGKILL)
        if (tmp_path / "pid").exists() and (tmp_path / "pid").read_text().strip():
            pid = int((tmp_path / "pid").read_text())
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


CLUSTER_TEST = """
import os, time
import pytest
from tests.ray_cluster import LocalCluster

@pytest.fixture(scope="session")
def cluster():
    c = LocalCluster(cpus_per_node=1).start(workers=1)
    yield c
    c.stop()

def test_waits(cluster):
    holder = cluster.holder.pid
    print("READY", holder, os.readlink(f"/proc/{holder}/ns/net"), flush=True)
    time.sleep(600)
"""


def in_namespace(ns: str) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.readlink(f"/proc/{d}/ns/net") == ns and alive(int(d)):
                    pids.append(int(d))
            except OSError:
                pass
    return pids


@pytest.mark.slow
@pytest.mark.skipif(bool(available()), reason=available() or "")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_an_interrupted_test_run_stops_its_ray_cluster(tmp_path, sig):
    (tmp_path / "test_cluster_wait.py").write_text(CLUSTER_TEST)
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_cluster_wait.py"),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=signals_as_in_a_shell,
    )
    ns = ""
    try:
        for line in run.stdout:
            found = re.search(r"READY (\d+) (net:\[\d+\])", line)
            if found:
                ns = found.group(2)
                break
        assert ns, "the cluster did not start"
        assert len(in_namespace(ns)) > 2  # the holder, the head's and the worker's Ray processes
        run.send_signal(sig)  # the test run itself, as `timeout` or kill does (Ctrl-C: the same signal)
        run.wait(timeout=60)
        end = time.monotonic() + 60
        while in_namespace(ns) and time.monotonic() < end:
            time.sleep(0.5)
        assert in_namespace(ns) == [], "Ray processes of the stopped run are still running"
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        for pid in in_namespace(ns) if ns else []:
            os.kill(pid, signal.SIGKILL)
