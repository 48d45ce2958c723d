"""The sandbox contract (agent/sandbox/contract.py), run against every backend as Inspect's sandbox self-check
runs against every SandboxEnvironment: each backend the registry finds (agent/sandbox/registry.py: Docker,
Kubernetes on the fake cluster of tests/k8s_fake.py with real HTTP and real pods as containers, and any
other), the static helper on a plain Debian image without python3 on each backend with the "harbor"
capability, and the in-memory FakeSandbox the loop's tests use. Each behaviour is checked the same way on
each; the commands are argv lists of coreutils so that the fake can run them too.

Also: every sandbox class has the contract's members with its signatures, and the modules above the
sandbox use no other member."""

from __future__ import annotations

import ast
import contextlib
import inspect
import shutil
from pathlib import Path

import pytest

from agent.sandbox import SandboxDied, SandboxSpec, sandbox_backend
from agent.sandbox.contract import Sandbox, SandboxPool, sandbox_members
from agent.sandbox.registry import names
from results.errors import InfraError, UserError
from tests.conftest import ROOT, run
from tests.helpers import FakePool, FakeSandbox

SMALL = SandboxSpec(memory_mb=256, pids=64, workspace_mb=32, tmp_mb=16)
UNKNOWN = "no-such-backend"  # a name no backend registers


def _cases() -> list[str]:
    """Every registered backend; "NAME+native" for each one with the harbor capability; and the fake."""
    cases = []
    for name in names():
        cases.append(name)
        if sandbox_backend(name).has("harbor"):
            cases.append(f"{name}+native")
    return cases + ["fake"]


CASES = _cases()


def _on_this_host(request, tmp_path, monkeypatch, backend, limits: SandboxSpec):
    """The pool of a backend that runs the images built on this host (own_images): the base image."""
    if not backend.has("own_images"):
        # fails rather than skips: a registered backend the contract suite cannot run is untested
        pytest.fail(f"--sandbox {backend.name} names its own images: give it a setup in CONTRACT_SETUP")
    return backend.pool()(run_id="contract", warm=0, max_containers=2), request.getfixturevalue("image")


def _fake_cluster(request, tmp_path, monkeypatch, backend, limits: SandboxSpec):
    """k8s: its pods are containers of the fake API server (tests/k8s_fake.py), of this host's base image."""
    from tests.k8s_fake import FakeCluster

    image = request.getfixturevalue("image")
    cluster = FakeCluster(namespace="contract")
    request.addfinalizer(cluster.stop)
    monkeypatch.setenv("KUBECONFIG", cluster.kubeconfig(tmp_path / "kubeconfig"))
    Pool = backend.pool({"namespace": "contract"})  # as run_eval makes it
    return Pool(run_id="contract", warm=0, max_containers=2), image


# Backends whose sandboxes need an environment made for the test; any other runs on this host's images.
CONTRACT_SETUP = {"k8s": _fake_cluster}


@pytest.fixture(params=CASES)
def open_sandbox(request, tmp_path, monkeypatch):
    """A factory of async context managers: `async with open_sandbox() as sb`, a fresh sandbox of the case."""
    case = request.param
    if case == "fake":
        return _pooled(FakePool(), "fake-image", SMALL)
    name, _, native = case.partition("+")
    backend = sandbox_backend(name)
    if native:
        from agent.sandbox import NativeSpec
        from agent.sandbox.backends.docker.images import ensure_minbase_image

        if shutil.which("debootstrap") is None:
            pytest.skip("debootstrap is not installed (make setup installs it)")
        limits = SandboxSpec(memory_mb=256, pids=64, native=NativeSpec(workdir="/contract"))
        pool, _ = _on_this_host(request, tmp_path, monkeypatch, backend, limits)
        return _pooled(pool, ensure_minbase_image(log=lambda m: None), limits)
    setup = CONTRACT_SETUP.get(name, _on_this_host)
    pool, image = setup(request, tmp_path, monkeypatch, backend, SMALL)
    return _pooled(pool, image, SMALL)


def _pooled(pool: SandboxPool, image: str, limits: SandboxSpec):
    @contextlib.asynccontextmanager
    async def open_one():
        assert isinstance(pool, SandboxPool)  # every member of the pool contract
        pool.expect(1)
        try:
            async with pool.sandbox(image, limits, task="contract") as sb:
                yield sb
        finally:
            await pool.close()

    return open_one


def test_every_registered_backend_is_in_this_suite():
    assert {"docker", "k8s"} <= set(names()) and set(names()) <= set(CASES)
    for name in names():
        assert sandbox_backend(name).name == name
    assert "docker+native" in CASES  # the static helper, on each backend that serves any image
    with pytest.raises(UserError, match=f"sandbox backend '{UNKNOWN}': choose one of {', '.join(names())}$"):
        sandbox_backend(UNKNOWN)


def test_eval_takes_any_registered_backend_and_names_them_for_another(tmp_path):
    """`harness eval --sandbox NAME` looks NAME up in the registry: a name none registered stops the run with
    one line naming the choices, before the model loads or a run folder is made."""
    from tests.helpers import harness

    out = tmp_path / "run"
    r = harness("eval", "--model", "replay:/nonexistent.json", "--sandbox", UNKNOWN, "--out", str(out))
    # the replay file does not exist either: loading the model first would have failed on it instead
    last = r.stderr.strip().splitlines()[-1]
    expected = f"harness: error: sandbox backend '{UNKNOWN}': choose one of {', '.join(names())}"
    assert r.returncode == 2 and last == expected, r.stderr
    assert not out.exists()


def test_commands_exit_codes_output_stdin_cwd_and_env(open_sandbox):
    async def go():
        async with open_sandbox() as sb:
            assert isinstance(sb, Sandbox)  # every member of the contract, on a live one
            assert isinstance(sb.id, str) and sb.workdir.startswith("/") and sb.dead is False
            echo = await sb.exec(["echo", "hello", "world"], 10)
            false = await sb.exec(["false"], 10)
            missing = await sb.exec(["cat", "no-such-file"], 10)
            unknown = await sb.exec(["no-such-program-xyz"], 10)
            data = b"line\n\x00\xff binary"
            cat = await sb.exec(["cat"], 10, stdin=data)
            here = await sb.exec(["pwd"], 10)
            tmp = await sb.exec(["pwd"], 10, cwd="/tmp")
            env = await sb.exec(["printenv", "CONTRACT_VAR"], 10, env={"CONTRACT_VAR": "v=1 two"})
            return sb.workdir, echo, false, missing, unknown, data, cat, here, tmp, env

    workdir, echo, false, missing, unknown, data, cat, here, tmp, env = run(go())
    assert (echo.exit_code, echo.stdout, echo.stderr, echo.out.data) == (
        0,
        "hello world\n",
        "",
        b"hello world\n",
    )
    assert not echo.timed_out and echo.dropped_bytes == 0 and echo.output == "hello world\n"
    assert false.exit_code == 1 and false.stdout == ""
    assert missing.exit_code == 1 and "No such file" in missing.stderr and missing.err.dropped == 0
    assert unknown.exit_code == 127
    assert cat.exit_code == 0 and cat.out.data == data
    assert here.stdout == workdir + "\n" and tmp.stdout == "/tmp\n"
    assert (env.exit_code, env.stdout) == (0, "v=1 two\n")


def test_a_timeout_ends_the_command_and_the_sandbox_stays_usable(open_sandbox):
    async def go():
        async with open_sandbox() as sb:
            slow = await sb.exec(["sleep", "30"], timeout=1)
            return slow, await sb.exec(["echo", "after"], 10), sb.dead

    slow, after, dead = run(go())
    assert slow.timed_out and slow.exit_code != 0
    assert after.stdout == "after\n" and not dead


def test_output_past_the_cap_keeps_its_head_and_tail(open_sandbox):
    async def go():
        async with open_sandbox() as sb:
            return await sb.exec(["head", "-c", "300000", "/dev/zero"], 30, cap=1000)

    r = run(go())
    assert r.exit_code == 0
    assert (len(r.out.head), len(r.out.tail), r.out.dropped) == (500, 500, 299_000)
    assert r.dropped_bytes == 299_000 and r.out.data == bytes(1000)
    assert "299000 bytes of output cut here" in r.stdout and len(r.stdout) < 1200


def test_files_round_trip(open_sandbox):
    files = {"a.txt": b"one\n", "sub/deeper/b.bin": bytes(range(256))}

    async def go():
        async with open_sandbox() as sb:
            await sb.put_files(files)
            back = await sb.get_files(["a.txt", "sub/deeper/b.bin", "not-there.txt"])
            seen = await sb.exec(["cat", "a.txt"], 10)
            await sb.put_files({"x.txt": b"elsewhere"}, dest="/tmp/contract")
            elsewhere = await sb.get_files(["x.txt"], root="/tmp/contract")
            with pytest.raises(InfraError):
                await sb.get_files(["sub/deeper/b.bin"], max_bytes=100)
            return back, seen, elsewhere

    back, seen, elsewhere = run(go())
    assert back == files
    assert seen.out.data == b"one\n"
    assert elsewhere == {"x.txt": b"elsewhere"}


def test_changes_since_the_baseline(open_sandbox):
    async def go():
        async with open_sandbox() as sb:
            await sb.put_files({"keep.txt": b"same\n", "edit.txt": b"before\n", "gone.txt": b"bye\n"})
            await sb.mark_baseline()
            await sb.put_files({"edit.txt": b"after\n", "new/added.txt": b"hello\n"})
            rm = await sb.exec(["rm", "gone.txt"], 10)
            return rm, await sb.changes()

    rm, ch = run(go())
    assert rm.exit_code == 0
    assert ch.files == {"edit.txt": b"after\n", "new/added.txt": b"hello\n"}
    assert ch.deleted == ["gone.txt"] and ch.rejected == []
    assert ch.paths == ["edit.txt", "gone.txt", "new/added.txt"]


@pytest.mark.slow
def test_a_killed_sandbox_is_dead_and_not_the_agents_doing(open_sandbox):
    async def go():
        async with open_sandbox() as sb:
            await sb.exec(["true"], 10)
            sb.kill()
            sb.kill()  # safe twice
            with pytest.raises(SandboxDied):
                await sb.exec(["echo", "no"], 10)
            return sb.dead, sb.death_cause(wait=2)

    dead, cause = run(go())
    assert dead is True and cause is None  # killed from outside: an infrastructure error, never "oom"


# -- the contract lists what its users call -------------------------------------------------------------


def _classes():
    from agent.sandbox.backends.docker.native import NativeSandbox
    from agent.sandbox.served import ServedSandbox

    return [ServedSandbox, NativeSandbox, FakeSandbox]


@pytest.mark.parametrize("cls", _classes(), ids=lambda c: c.__name__)
def test_every_sandbox_class_has_the_contracts_methods_with_its_signatures(cls):
    methods = [n for n, v in vars(Sandbox).items() if inspect.isfunction(v) and not n.startswith("_")]
    assert sorted(methods) == [
        "changes",
        "death_cause",
        "exec",
        "get_files",
        "kill",
        "mark_baseline",
        "put_files",
    ]
    assert isinstance(getattr(cls, "workdir", None), str), cls
    for name in methods:
        want, have = getattr(Sandbox, name), getattr(cls, name)
        assert inspect.iscoroutinefunction(have) == inspect.iscoroutinefunction(want), (cls, name)
        wanted, has = inspect.signature(want).parameters, inspect.signature(have).parameters
        positional = [p for p in wanted.values() if p.kind == p.POSITIONAL_OR_KEYWORD]
        assert list(has)[: len(positional)] == [p.name for p in positional], (cls, name, list(has))
        for p in wanted.values():
            q = has.get(p.name)
            assert q is not None and (q.kind, q.default) == (p.kind, p.default), (cls, name, p, q)
        extra = [q for q in has.values() if q.name not in wanted]
        assert all(q.default is not q.empty or q.kind in (q.VAR_POSITIONAL, q.VAR_KEYWORD) for q in extra), (
            cls,
            name,
            extra,
        )


# What modules above the sandbox still use beyond the contract, each for a reason (REMOVE an entry when its
# module moves to the contract). Harbor tasks need the static helper's own file operations (native.py).
NATIVE_ONLY = {"mkdirs", "write_file", "read_file", "remove", "kinds", "list_files", "kill_all", "image_user"}
NATIVE_ONLY |= {"symlink"}  # fresh mode recreates the agent's links (Harbor's separate verifier keeps them)
# a root agent can kill the static helper: the sandbox goes on from a commit (revive, agent_container)
NATIVE_ONLY |= {"revive", "agent_container"}
# the model of what a Harbor verifier loads is asked of the task's image: its id and its environment
NATIVE_ONLY |= {"image", "env"}
HARBOR = NATIVE_ONLY | {"container", "capture", "kept_files", "limits"}
BEYOND_THE_CONTRACT = {
    # container: commit/diff (Docker only); kept_files: its own bookkeeping set on the sandbox object
    **{
        f"evaluators/grading/harbor/{m}.py": HARBOR
        for m in ("runtime", "tamper", "verifier", "steps", "loadmap")
    },
    "evaluators/grading/loads.py": NATIVE_ONLY,  # probes a pristine container of a Harbor task's image
}
POOL_BEYOND = {
    # batch grading: a backend with the batch_grading capability (run_eval and validate check)
    "evaluators/grading/grade.py": {"add_reclaimer"},
    # the labels of a committed snapshot image: a backend with harbor and diff (Docker's)
    "evaluators/grading/harbor/verifier.py": {"pool_id"},
}


def _used_on(names: set[str], path: Path) -> set[str]:
    """Attributes read on variables (or self.attributes) called one of `names` in a module."""
    used = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Attribute):
            v = n.value
            if (isinstance(v, ast.Name) and v.id in names) or (
                isinstance(v, ast.Attribute) and v.attr in names
            ):
                used.add(n.attr)
    return used


def _modules():
    for folder in ("agent", "evaluators"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(("agent/sandbox/", "evaluators/grading/grader/", "evaluators/selftest/")):
                yield rel, path


def test_the_users_of_a_sandbox_touch_only_the_contract():
    """Every attribute that agent/ and evaluators/ use on a sandbox (`sb`, `vb`) is a member of the contract,
    or listed in BEYOND_THE_CONTRACT; on a pool (`pool`), of SandboxPool."""
    members = sandbox_members()
    pool_members = {n for n in vars(SandboxPool) if not n.startswith("_")} | set(SandboxPool.__annotations__)
    seen_sandbox_users = 0
    problems = []
    for rel, path in _modules():
        used = _used_on({"sb", "vb"}, path)
        seen_sandbox_users += bool(used)
        extra = used - members - BEYOND_THE_CONTRACT.get(rel, set())
        if extra:
            problems.append(f"{rel}: {sorted(extra)} on a sandbox")
        extra = _used_on({"pool"}, path) - pool_members - POOL_BEYOND.get(rel, set())
        if extra:
            problems.append(f"{rel}: {sorted(extra)} on a pool")
    # the loop, run_attempt, the graders, validate, workflow: the scan sees them
    assert seen_sandbox_users >= 5
    assert not problems, "members outside agent/sandbox/contract.py:\n" + "\n".join(problems)


def test_the_scan_catches_a_member_outside_the_contract(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("async def f(sb):\n    await sb.exec('x')\n    return sb.container.id\n")
    assert _used_on({"sb"}, bad) - sandbox_members() == {"container"}
