"""Fault injection: Docker and the sandbox fail under a running evaluation; the harness retries a bounded
number of times, records every attempt exactly once, and leaves no container behind."""

import asyncio
import os
import shutil
import signal
import subprocess
import time

import docker
import docker.errors
import pytest
import requests
from docker.models.containers import ContainerCollection

from agent.sandbox import LABEL_RUN, SandboxSpec, ServedSandbox
from agent.sandbox.backends.docker.cleanup import prune
from agent.sandbox.backends.docker.pool import DockerPool
from agent.sandbox.transport import CommandChannel
from evaluators.run.attempt import INFRA_RETRIES
from tests.adversarial.adv_util import containers_of, evaluate, script, task, unique
from tests.conftest import run

TRIES_PER_SANDBOX = 4  # agent.sandbox.backends.docker.client.docker_retry: stop_after_attempt(4)


def api_error(status: int = 500) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError(
        f"{status} Server Error", response=response, explanation="injected by the test"
    )


def test_create_fails_once_then_a_bounded_retry_succeeds(image, tmp_path, monkeypatch):
    calls = []
    original = ContainerCollection.create

    def flaky(self, image, command=None, **kw):
        calls.append(kw.get("name"))
        if len(calls) == 1:
            raise api_error(500)
        return original(self, image, command, **kw)

    monkeypatch.setattr(ContainerCollection, "create", flaky)
    recs, lines, out = evaluate(tmp_path, [task("t1")], {"t1": script("echo hi")})
    assert recs["t1"].status == "solved", recs["t1"].error
    assert len(lines) == 1 and len(calls) >= 2
    assert containers_of(out.name) == []


@pytest.mark.slow
def test_create_always_fails_for_one_task_others_unaffected(image, tmp_path, monkeypatch):
    doomed = []
    original = ContainerCollection.create

    def broken(self, image, command=None, **kw):
        if (
            kw.get("mem_limit") == "200m"
        ):  # only the doomed task's sandboxes (its own pool key: no warm reuse)
            doomed.append(kw.get("name"))
            raise api_error(500)
        return original(self, image, command, **kw)

    monkeypatch.setattr(ContainerCollection, "create", broken)
    tasks = [task("doomed", memory_mb=200), task("fine")]
    recs, lines, out = evaluate(tmp_path, tasks, {"doomed": script("echo hi"), "fine": script("echo hi")})
    bad, good = recs["doomed"], recs["fine"]
    assert (bad.status, bad.reason, bad.reward) == ("error", "infra_error", 0.0)
    assert "injected by the test" in bad.error
    assert good.status == "solved"
    assert 1 + INFRA_RETRIES <= len(doomed) <= (1 + INFRA_RETRIES) * TRIES_PER_SANDBOX  # bounded
    assert len(lines) == 2
    assert containers_of(out.name) == []


@pytest.mark.slow
def test_an_exec_that_never_answers_trips_the_host_watchdog(image, tmp_path, monkeypatch):
    """The command server never answers one request (it is lost): the host-side watchdog gives up, kills
    that sandbox, and the attempt is run again in a fresh one."""
    lost = []
    original = CommandChannel.request

    async def request(self, req, host_timeout):
        if "LOSE-ME" in str(req.get("cmd", "")) and not lost:
            lost.append(self.id)
            self._send = lambda data: None  # the request never reaches the server
            host_timeout = 3.0  # the watchdog's wait (command timeout + 15 s), shortened for the test
        return await original(self, req, host_timeout)

    monkeypatch.setattr(CommandChannel, "request", request)
    recs, lines, out = evaluate(tmp_path, [task("t1")], {"t1": script("echo LOSE-ME")})
    assert lost, "the fault was not injected"
    assert recs["t1"].status == "solved"  # the retry in a fresh sandbox went through
    assert len(lines) == 1
    with pytest.raises(docker.errors.NotFound):
        docker.from_env().containers.get(lost[0])  # the stuck sandbox was killed and removed
    assert containers_of(out.name) == []


def test_sandbox_killed_from_outside_mid_attempt(image, tmp_path, monkeypatch):
    """`docker kill` from outside, mid-attempt: when the agent's command is about to run in the victim's
    sandbox the test kills that container through the Docker API (no polling of its processes: nothing to
    outrun)."""
    killed = []
    original = ServedSandbox.exec

    async def exec_after_a_kill(self, cmd, *args, **kw):
        if "KILL-ME" in str(cmd) and not killed:
            await asyncio.to_thread(docker.from_env().api.kill, self.id)
            killed.append(self.id)
        return await original(self, cmd, *args, **kw)

    monkeypatch.setattr(ServedSandbox, "exec", exec_after_a_kill)
    recs, lines, out = evaluate(
        tmp_path,
        [task("victim"), task("next")],
        {"victim": script("echo KILL-ME"), "next": script("echo hi")},
    )
    assert len(killed) == 1, "the sandbox was never killed"
    victim = recs["victim"]
    # Killed from outside is infrastructure, not the agent: retried in a fresh sandbox (then solved).
    assert (victim.status, victim.reward) == ("solved", 1.0), victim
    assert recs["next"].status == "solved"
    keys = [line.split('"key":"', 1)[1].split('"', 1)[0] for line in lines]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 2  # no duplicates
    assert containers_of(out.name) == []


# ----------------------------------------------------------------------------------- engine restart


def restart_engine(timeout: float = 120.0):
    """Restarts the Docker engine by whatever supervises it here (systemd, the service script, or none)."""

    def up() -> bool:
        try:
            return docker.from_env(timeout=5).ping()
        except Exception:
            return False

    if (
        shutil.which("systemctl")
        and subprocess.run(["systemctl", "is-active", "--quiet", "docker"]).returncode == 0
    ):
        subprocess.run(["systemctl", "restart", "docker"], check=True, timeout=timeout)
    elif (
        shutil.which("service")
        and subprocess.run(["service", "docker", "status"], capture_output=True).returncode == 0
    ):
        subprocess.run(["service", "docker", "restart"], check=True, timeout=timeout)
    else:  # a bare dockerd: stop it and start it again with the same command line
        pid = int(
            subprocess.run(["pgrep", "-xo", "dockerd"], capture_output=True, text=True, check=True).stdout
        )
        argv = open(f"/proc/{pid}/cmdline", "rb").read().rstrip(b"\0").split(b"\0")
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.2)
        log = open("/tmp/harness-test-dockerd.log", "ab")
        subprocess.Popen([a.decode() for a in argv], stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + timeout
    while not up():
        assert time.monotonic() < deadline, "the Docker engine did not come back"
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("HARNESS_TEST_ENGINE_RESTART") != "1" or "PYTEST_XDIST_WORKER" in os.environ,
    reason="restarts the Docker engine, which kills every container on this machine (the other workers' "
    "too): set HARNESS_TEST_ENGINE_RESTART=1 and run it without -n",
)
def test_engine_restart_during_a_run(image, tmp_path, monkeypatch):
    restarted = []
    original = ServedSandbox.exec

    async def exec_after_a_restart(self, cmd, *args, **kw):
        # The engine restarts when the first attempt's command is about to run (no polling: nothing to
        # outrun).
        if "RESTART-ME" in str(cmd) and not restarted:
            restarted.append(True)
            await asyncio.to_thread(restart_engine)
        return await original(self, cmd, *args, **kw)

    monkeypatch.setattr(ServedSandbox, "exec", exec_after_a_restart)
    tasks = [task("a"), task("b"), task("c")]
    scripts = {t.id: script("echo RESTART-ME; sleep 3") for t in tasks}
    recs, lines, out = evaluate(tmp_path, tasks, scripts, concurrency=2)
    assert restarted, "the engine was never restarted"
    assert sorted(recs) == ["a", "b", "c"] and len(lines) == 3  # every attempt recorded exactly once
    assert all(r.status in ("solved", "error") for r in recs.values())
    assert all(r.status == "solved" or r.reason == "infra_error" for r in recs.values())
    assert containers_of(out.name) == []
    # and the harness works again afterwards, in the same process (its shared Docker client included)
    recs2, _, _ = evaluate(tmp_path, [task("after")], {"after": script("echo hi")})
    assert recs2["after"].status == "solved"


# ----------------------------------------------------------------------------------- pool bookkeeping

LIMITS = SandboxSpec(memory_mb=256, pids=64, workspace_mb=32, tmp_mb=16)


def test_closing_a_pool_spares_other_pools_with_the_same_run_id(image):
    run_id = unique("shared")

    async def main():
        other = DockerPool(run_id=run_id, warm=0)
        try:
            sb = await other.acquire(image, LIMITS)
            async with DockerPool(run_id=run_id, warm=0) as pool:
                async with pool.sandbox(image, LIMITS) as mine:
                    await mine.exec("true", 10)
            return (await sb.exec("echo alive", 10)).stdout.strip()
        finally:
            await other.close()

    assert run(main()) == "alive"
    assert containers_of(run_id) == []


def test_prune_tolerates_containers_that_vanish_meanwhile(image, monkeypatch):
    run_id = unique("vanish")

    async def leave_two():
        pool = DockerPool(run_id=run_id, warm=0)
        await pool.acquire(image, LIMITS)
        await pool.acquire(image, LIMITS)  # never released: leftovers for prune

    run(leave_two())
    assert len(containers_of(run_id)) == 2
    api = docker.api.client.APIClient
    inspect, remove, vanished = api.inspect_container, api.remove_container, []

    def vanish(self, container):  # someone else removes the first container prune looks at, just before
        if not vanished:
            vanished.append(container)
            remove(self, container, force=True)

    def inspect_late(self, container, *a, **kw):
        vanish(self, container)
        return inspect(self, container, *a, **kw)

    def remove_late(self, container, *a, **kw):
        vanish(self, container)
        return remove(self, container, *a, **kw)

    monkeypatch.setattr(api, "inspect_container", inspect_late)
    monkeypatch.setattr(api, "remove_container", remove_late)
    try:
        prune(run_id)
    finally:
        monkeypatch.undo()
        client = docker.from_env()
        leftovers = client.api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})
        for c in leftovers:  # what a failed prune left: never leave containers behind
            client.api.remove_container(c["Id"], force=True)
    assert leftovers == []
