"""The hardened sandbox against a real Docker engine."""

import asyncio
import resource
import subprocess
import uuid

import docker
import pytest

import agent.sandbox.backends.docker.pool as pool_module
from agent.sandbox import LABEL_RUN, SandboxSpec
from agent.sandbox.backends.docker.cleanup import prune
from agent.sandbox.backends.docker.pool import DockerPool
from tests.conftest import run

SMALL = SandboxSpec(memory_mb=256, pids=64, workspace_mb=32, tmp_mb=16)


def containers(run_id):
    # The low-level list: removals still going on in the background must not make the listing fail.
    return docker.from_env().api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})


async def one_sandbox(image, body, limits=SMALL):
    async with DockerPool(warm=0) as pool:
        async with pool.sandbox(image, limits) as sb:
            return await body(sb)


def test_runs_as_unprivileged_user_without_capabilities(image):
    async def body(sb):
        return await sb.exec("id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status", 10)

    r = run(one_sandbox(image, body))
    lines = r.stdout.split()
    assert lines[0] == "10001"
    assert "CapEff:" in r.stdout and "0000000000000000" in r.stdout
    assert "NoNewPrivs:" in r.stdout and lines[-1] == "1"


def test_network_is_isolated(image):
    async def body(sb):
        ifaces = await sb.exec("ls /sys/class/net", 10)
        # Resolution only: no packet is ever sent to an address outside this machine.
        dns = await sb.exec("python3 -c \"import socket; socket.getaddrinfo('example.com', 80)\"", 20)
        return ifaces, dns

    ifaces, dns = run(one_sandbox(image, body))
    assert ifaces.stdout.split() == ["lo"]
    assert dns.exit_code != 0 and "gaierror" in dns.stderr


def test_fork_bomb_is_contained_and_sandbox_recovers(image):
    async def body(sb):
        await sb.exec("bomb() { bomb | bomb & }; bomb", timeout=5)
        return await sb.exec("echo alive; ps -e --no-headers | wc -l", timeout=10)

    after = run(one_sandbox(image, body))
    alive, processes = after.stdout.split()
    assert after.exit_code == 0 and alive == "alive"
    assert (
        int(processes) < 10
    )  # the bomb's processes ended with its command; only the server and this are left
    # The host can still start processes: the bomb was held to the container's pids limit.
    assert subprocess.run(["true"], timeout=60).returncode == 0


def test_memory_bomb_is_killed_and_reported(image):
    async def body(sb):
        return await sb.exec("python3 -c \"x=[]\nwhile True: x.append(' ' * 10**6)\"", timeout=60)

    r = run(one_sandbox(image, body))
    assert r.exit_code != 0
    assert r.oom, r


@pytest.mark.slow
def test_timeout_kills_the_process_tree(image):
    async def body(sb):
        r = await sb.exec("sleep 1000 & sleep 1000; echo finished", timeout=2)
        ps = await sb.exec("ps -eo comm", 10)
        return r, ps

    r, ps = run(one_sandbox(image, body))
    assert r.timed_out and "finished" not in r.stdout
    assert "sleep" not in ps.stdout  # both sleeps (the background one too) were killed


def test_background_process_does_not_outlive_its_command(image):
    async def body(sb):
        await sb.exec("setsid sleep 500 >/dev/null 2>&1 < /dev/null & echo started", 10)
        return await sb.exec("ps -eo comm", 10)

    assert "sleep" not in run(one_sandbox(image, body)).stdout


def test_output_flood_is_truncated_with_bounded_memory(image):
    async def body(sb):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        r = await sb.exec("head -c 50000000 /dev/zero | tr '\\0' x; echo END", timeout=60)
        return r, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before

    r, grown_kb = run(one_sandbox(image, body))
    assert r.dropped_bytes > 49_000_000
    assert len(r.stdout) < 200_000
    assert r.stdout.startswith("xxx") and r.stdout.rstrip().endswith("END")
    assert "bytes of output cut here" in r.stdout
    assert grown_kb < 40_000  # the 50 MB never reached this process


def test_writes_outside_workspace_and_tmp_fail(image):
    async def body(sb):
        return [await sb.exec(f"touch {p}", 10) for p in ("/etc/x", "/usr/x", "/x", "/grader/x")] + [
            await sb.exec("touch /workspace/ok /tmp/ok", 10)
        ]

    *bad, good = run(one_sandbox(image, body))
    assert all(r.exit_code != 0 for r in bad)
    assert good.exit_code == 0


def test_workspace_size_is_limited(image):
    async def body(sb):
        return await sb.exec("dd if=/dev/zero of=/workspace/big bs=1M count=100", 30)

    r = run(one_sandbox(image, body))
    assert r.exit_code != 0 and "No space left" in r.stderr


def test_fresh_state_per_attempt(image):
    async def main():
        async with DockerPool(warm=1) as pool:
            async with pool.sandbox(image, SMALL) as sb:
                await sb.exec("echo secret > /workspace/left.txt; echo x > /tmp/left.txt", 10)
            await asyncio.sleep(0.5)
            async with pool.sandbox(image, SMALL) as sb:
                return await sb.exec("cat /workspace/left.txt /tmp/left.txt", 10)

    r = run(main())
    assert r.exit_code != 0 and "secret" not in r.stdout


def test_files_in_and_out_and_changes(image):
    async def body(sb):
        await sb.put_files({"a.txt": b"one\n", "sub/b.py": b"print(2)\n"})
        await sb.mark_baseline()
        await sb.exec("echo two >> a.txt; rm sub/b.py; echo new > c.txt; ln -s /etc/passwd link", 10)
        return await sb.changes(), await sb.diff()

    changes, diff = run(one_sandbox(image, body))
    assert changes.files == {"a.txt": b"one\ntwo\n", "c.txt": b"new\n"}
    assert changes.deleted == ["sub/b.py"]
    assert changes.rejected == ["symlink link"]
    assert "+two" in diff and "-print(2)" in diff


def test_changes_come_back_in_the_listings_round_trip_unless_past_the_caps(image):
    """Within the caps, the changed files are read in the same command that lists them (capture.py's
    `changed`); past them, the listing reads nothing and the caps' order (changed starting files, then the
    smallest) picks what a second command reads."""

    async def body(sb):
        calls = []
        capture = sb.capture._capture

        async def counted(args, *a, **kw):
            calls.append(args[0])
            return await capture(args, *a, **kw)

        sb.capture._capture = counted
        await sb.put_files({"start.txt": b"s\n", "keep.txt": b"k\n"})
        await sb.mark_baseline()
        await sb.exec("echo more >> start.txt; echo small > a.txt; head -c 3000 /dev/zero > big.bin", 10)
        within = await sb.changes()
        within_calls, calls[:] = list(calls), []
        past = await sb.changes(max_bytes=100)
        return within, within_calls, past, list(calls)

    within, within_calls, past, past_calls = run(one_sandbox(image, body))
    assert within_calls == ["list", "changed"]  # the baseline, then one command for the changes
    assert within.files == {"start.txt": b"s\nmore\n", "a.txt": b"small\n", "big.bin": bytes(3000)}
    assert within.rejected == []
    assert past_calls == ["changed", "read"]
    assert past.files == {"start.txt": b"s\nmore\n", "a.txt": b"small\n"}
    assert any("past the caps" in r for r in past.rejected)


@pytest.mark.slow
def test_pool_under_concurrent_users_leaks_nothing(image):
    run_id = "t-" + uuid.uuid4().hex[:8]

    async def main():
        async with DockerPool(run_id=run_id, warm=2, max_containers=6) as pool:

            async def user(i):
                for _ in range(2):
                    async with pool.sandbox(image, SMALL) as sb:
                        r = await sb.exec(f"echo {i}", 10)
                        assert r.stdout.strip() == str(i)

            await asyncio.gather(*(user(i) for i in range(8)))
            assert len(containers(run_id)) <= 6

    run(main())
    assert containers(run_id) == []


def test_warm_acquire_takes_a_ready_container_and_creates_none(image, monkeypatch):
    """The warm path: acquire() hands out a container created in advance; no container is created for it."""
    created: list[str] = []  # ids, in the order create_sandbox returned them
    real_create = pool_module.create_sandbox  # patched where SandboxPool looks it up

    def counting_create(*args, **kw):
        sb = real_create(*args, **kw)
        created.append(sb.id)
        return sb

    monkeypatch.setattr(pool_module, "create_sandbox", counting_create)

    async def main():
        async with DockerPool(warm=1) as pool:
            first = await pool.acquire(image, SMALL)  # cold: created for this call; the pool then refills
            await pool.release(first)
            for _ in range(600):  # until the refill exists (a bound on waiting, not a speed assertion)
                if len(created) >= 2:
                    break
                await asyncio.sleep(0.1)
            warm_ids = list(created)
            second = await pool.acquire(image, SMALL)
            await pool.release(second)
            return first.id, warm_ids, second.id

    first, warm_ids, second = run(main())
    assert warm_ids[0] == first and len(warm_ids) == 2
    assert second == warm_ids[1]  # the container made in advance, not a new one


def test_prune_removes_leftovers(image):
    run_id = "t-" + uuid.uuid4().hex[:8]

    async def leave_one():
        pool = DockerPool(run_id=run_id, warm=0)
        await pool.acquire(image, SMALL)  # never released: a leftover

    run(leave_one())
    assert len(containers(run_id)) == 1
    assert prune(run_id) == 1
    assert containers(run_id) == []


def test_pool_makes_no_warm_container_past_the_expected_acquires(image, monkeypatch):
    """expect(n): the pool keeps containers warm only for acquires still to come; the last one leaves none
    behind to be created and destroyed unused (issue 25)."""
    created: list[str] = []
    real_create = pool_module.create_sandbox

    def counting_create(*args, **kw):
        sb = real_create(*args, **kw)
        created.append(sb.id)
        return sb

    monkeypatch.setattr(pool_module, "create_sandbox", counting_create)

    async def main():
        async with DockerPool(warm=3, max_containers=6) as pool:
            pool.expect(2)
            first = await pool.acquire(image, SMALL)  # cold; then at most one warm (one acquire left)
            await pool.release(first)
            for _ in range(600):
                if len(created) >= 2:
                    break
                await asyncio.sleep(0.1)
            second = await pool.acquire(image, SMALL)  # the warm one; nothing more is expected
            await pool.release(second)
            await asyncio.sleep(1.0)  # a refill would have started by now
            return first.id, second.id

    first, second = run(main())
    assert created == [first, second]


def test_pool_warms_no_container_of_an_image_that_no_acquire_will_ask_for():
    """expect(n, per_image): with an image per task (Terminal-Bench's), warming by the total alone left each
    image's last warm containers to be made and destroyed unused; per image, the pool makes only what its
    acquires take (an image the caller leaves out: none warm). Engine-free: a pool of placeholders."""
    from agent.sandbox.warm import WarmPool

    class Placeholder:
        dead = False

        def __init__(self, key):
            self.pool_key = key

        def kill(self):
            pass

    class Placeholders(WarmPool):
        made: list[str] = []

        def create(self, image, limits, task, network):
            self.made.append(image)
            return Placeholder((image, limits))

        def prune_pool(self):
            pass

    async def main():
        async with Placeholders(warm=3, max_containers=8) as pool:
            pool.expect(4, {"a": 2, "b": 1})
            first = await pool.acquire("a", SMALL)  # cold; then one warm "a" (one more "a" to come)
            for _ in range(100):
                if len(pool.made) == 2:
                    break
                await asyncio.sleep(0.01)
            second = await pool.acquire("a", SMALL)
            third = await pool.acquire("b", SMALL)  # cold, and nothing warm after it
            fourth = await pool.acquire("c", SMALL)  # not in per_image: cold, nothing warm
            for sb in (first, second, third, fourth):
                await pool.release(sb)
            await asyncio.sleep(0.2)  # a refill would have started by now
            return second.warm_start, list(pool.made)

    warm_hit, made = run(main())
    assert warm_hit and made == ["a", "a", "b", "c"]


def test_a_full_pool_reclaims_a_sandbox_kept_idle_for_reuse(image):
    """A user that keeps an acquired sandbox idle (batch grading's containers) gives it up when the pool is
    full: acquire() destroys it instead of waiting for ever."""

    async def main():
        async with DockerPool(warm=0, max_containers=1) as pool:
            kept = [await pool.acquire(image, SMALL)]
            pool.add_reclaimer(lambda: kept.pop() if kept else None)
            other = await asyncio.wait_for(pool.acquire(image, SMALL), 120)
            r = await other.exec("echo fine", 10)
            await pool.release(other)
            return r.stdout.strip(), kept

    out, kept = run(main())
    assert out == "fine" and kept == []


def test_a_command_runs_as_the_user_number_it_names_never_root(image):
    """Batch grading runs each attempt as its own user: a number picks it; 0 (or a bool) is not root."""

    async def main():
        async with DockerPool(warm=0, max_containers=1) as pool:
            async with pool.sandbox(image, SMALL) as sb:
                out = {}
                for user in (10005, 0, True, "agent"):
                    r = await sb.exec(["id", "-u"], user=user, cwd="/")
                    out[user] = r.stdout.strip()
                return out

    out = run(main())
    assert out == {10005: "10005", 0: "10001", True: "10001", "agent": "10001"}


def test_exec_gives_both_streams_capped_and_a_spawn_error(image):
    """exec's typed result: each stream's head, tail and the bytes cut between them; a program that does
    not exist is a spawn error with exit code 127."""

    async def body(sb):
        argv = ["sh", "-c", "printf o; printf e >&2; head -c 5000 /dev/zero; exit 3"]
        return await sb.exec(argv, cap=1000), await sb.exec(["nope-x"])

    typed, missing = run(one_sandbox(image, body))
    assert typed.exit_code == 3 and typed.out.dropped == 5001 - 1000
    assert typed.out.head.startswith(b"o") and len(typed.out.head) == 500 and len(typed.out.tail) == 500
    assert (typed.err.head, typed.err.tail, typed.err.dropped) == (b"e", b"", 0)
    assert typed.timed_out is False and typed.oom is False and typed.duration >= 0 and not typed.spawn_error
    assert missing.spawn_error is True and missing.exit_code == 127


# What a `python3 -I -c` program sees of its process: parent, session, open descriptors, folder, environment,
# arguments, stdin, and whether pytest was imported before its first line ran.
_PROBE = r"""
import json, os, sys
print(json.dumps({
    "ppid": os.getppid(), "leader": os.getsid(0) == os.getpid(), "fds": sorted(os.listdir("/proc/self/fd")),
    "cwd": os.getcwd(), "env": dict(os.environ), "argv": sys.argv, "stdin": sys.stdin.read(),
    "pytest_loaded": "pytest" in sys.modules, "uid": os.getuid(),
}))
sys.stderr.write("to stderr")
sys.exit(int(sys.argv[1]))
"""


def test_a_forked_python_command_sees_what_a_fresh_one_sees(image):
    """exec(fork=...) runs a root `python3 -I -c` argv as a fork of the command server (pytest already
    imported) and the program sees the same as a fresh one: a new session, only fds 0-2 (never the
    server's stream), its folder, exactly its environment, its arguments and stdin, its exit code. A
    timeout kills it; a missing folder is a spawn error; a request not as root runs as usual."""
    import json

    async def body(sb):
        pid = int((await sb.exec(["sh", "-c", "echo $PPID"], cwd="/", user="root")).stdout)
        argv = ["python3", "-I", "-c", _PROBE, "3"]
        kw = dict(user="root", cwd="/tmp", env={"A": "1", "PATH": "/usr/bin:/bin"}, stdin=b"in")
        fresh = await sb.exec(argv, 30, **kw)
        forked = await sb.exec(argv, 30, fork=("pytest",), **kw)
        again = await sb.exec(argv, 30, fork=("pytest",), **kw)
        as_agent = await sb.exec(argv, 30, fork=("pytest",), cwd="/tmp", stdin=b"in")
        slow = await sb.exec(["python3", "-I", "-c", "import time; time.sleep(30)"], 1, user="root", fork=())
        gone = await sb.exec(argv, 30, user="root", cwd="/nonexistent", fork=())
        others = 'for p in /proc/[0-9]*; do case ${p#/proc/} in 1|$PPID|$$) ;; *) echo "$p";; esac; done'
        left = await sb.exec(["sh", "-c", others], 10, user="root", cwd="/")
        return pid, fresh, forked, again, as_agent, slow, gone, left

    pid, fresh, forked, again, as_agent, slow, gone, left = run(one_sandbox(image, body))
    a, b = json.loads(fresh.stdout), json.loads(forked.stdout)
    # both are the server's children; only the fork had pytest imported before its first line
    assert a["ppid"] == b["ppid"] == pid and b["pytest_loaded"] and not a["pytest_loaded"]
    assert json.loads(again.stdout)["pytest_loaded"]
    for key in ("leader", "fds", "cwd", "env", "argv", "stdin", "uid"):
        assert a[key] == b[key], key
    assert b["fds"] == ["0", "1", "2", "3"]  # 3: the listing's own
    assert b["env"] == {"A": "1", "PATH": "/usr/bin:/bin", "LC_CTYPE": "C.UTF-8"}  # PEP 538, as a fresh one
    assert b["argv"] == ["-c", "3"] and b["stdin"] == "in" and b["cwd"] == "/tmp" and b["leader"]
    assert (fresh.exit_code, fresh.stderr) == (forked.exit_code, forked.stderr) == (3, "to stderr")
    c = json.loads(as_agent.stdout)  # not root: never a fork of the root server
    assert c["uid"] == 10001 and not c["pytest_loaded"]
    assert slow.timed_out and slow.exit_code == -9 and slow.duration < 10
    assert gone.spawn_error and gone.exit_code == 127
    assert left.stdout == ""  # but init, the server and this shell: nothing forked stayed


def test_a_forked_command_starts_with_the_preloaded_heap_frozen_and_inspects_cache_filled(image):
    """After its preload the server freezes what it imported out of the collector (a full collection in a
    forked child would otherwise write to every page it shares with the server) and fills inspect's
    module-by-file cache (a failing test's report would otherwise walk every loaded module): a fresh
    python3 has neither."""
    src = "import gc, inspect; print(gc.get_freeze_count() > 1000, len(inspect._filesbymodname) > 100)"

    async def body(sb):
        argv = ["python3", "-I", "-c", src]
        forked = await sb.exec(argv, 30, user="root", cwd="/", fork=("pytest",))
        fresh = await sb.exec(argv, 30, user="root", cwd="/")
        return forked.stdout.split(), fresh.stdout.split()

    forked, fresh = run(one_sandbox(image, body))
    assert forked == ["True", "True"] and fresh == ["False", "False"]
