"""Harbor / Terminal-Bench 2 tasks: the schema field by field, the runtime contract, the verifier modes.

The fixture corpus (tests/fixtures/harbor) is written from Harbor's task template and task-format docs. Docker
tests build their images locally: tasks FROM our base image, and a Python-less Debian minbase (debootstrap).
"""

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.sandbox.backends.docker.pool import DockerPool
from evaluators.grading.harbor import runtime, verifier
from evaluators.harbor_export import export_task
from evaluators.run.attempt import run_attempt
from evaluators.run.policies import null_policy, oracle_policy
from evaluators.run.task_images import build_images
from evaluators.validate import validate
from results.errors import UserError
from tasks.loader import load_suite
from tasks.task_folder import load_task
from tests.conftest import run
from tests.helpers import write_files

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harbor"


def harbor_task(
    tmp_path: Path,
    toml: str,
    name: str = "t",
    dockerfile: str = "FROM harness/base:latest\n",
    test_sh: str = "echo 1 > /logs/verifier/reward.txt\n",
) -> Path:
    root = tmp_path / name
    write_files(
        root,
        {
            "task.toml": toml,
            "instruction.md": "Do it.\n",
            "solution/solve.sh": "true\n",
            "tests/test.sh": test_sh,
            "environment/Dockerfile": dockerfile,
        },
    )
    return root


def error_of(toml: str, tmp_path: Path, **kw) -> str:
    with pytest.raises(UserError) as e:
        load_task(harbor_task(tmp_path, toml, **kw))
    return str(e.value)


# ---------------------------------------------------------------------------------------------- schema (fast)


def test_fixture_corpus_loads_every_field():
    tasks = {t.id: t for t in load_suite(FIXTURES)}
    assert set(tasks) == {"hello-world", "no-python", "shared-mode", "separate-mode", "busybox-only"}
    bb = tasks["busybox-only"].harbor
    assert (bb.docker_image, bb.verifier_user, bb.verifier_mode) == (
        "harness/busybox:latest",
        "65534",
        "shared",
    )
    hw = tasks["hello-world"]
    spec = hw.harbor
    assert hw.evaluator.kind == "harbor" and hw.version == "1.4"
    assert (spec.name, spec.description, spec.source) == (
        "harness/fixtures__hello-world",
        "Write a greeting file in the working folder.",
        "fixtures",
    )
    assert spec.authors == ("Harness Team <team@example.invalid>",) and spec.keywords == ("fixture", "files")
    assert hw.tags == ("fixture", "files") and hw.difficulty == 1
    assert dict(spec.metadata)["category"] == "programming" and "anything" in dict(spec.metadata)["extra"]
    assert (hw.agent.timeout_sec, hw.verifier_timeout_sec) == (120.0, 120.0)
    assert dict(spec.verifier_env) == {"GREETING": "Hello, world!"} and dict(spec.env) == {
        "APP_MODE": "fixture"
    }
    assert dict(spec.solution_env) == {"SOLVER": "oracle"}
    assert spec.healthcheck.command == "test -f /app/config.ini" and spec.healthcheck.retries == 3
    assert (hw.environment.cpus, hw.environment.memory_mb, hw.environment.allow_internet) == (
        1.0,
        1024,
        False,
    )
    # The build context stays out of the workspace: files reach the image only through the Dockerfile's COPY
    assert hw.workspace_files == {} and set(hw.build_context) == {"config.ini", "not-copied.txt"}
    assert spec.verifier_mode == "shared" and spec.workdir is None and spec.agent_user is None
    np = tasks["no-python"].harbor
    assert (np.docker_image, np.verifier_user, tasks["no-python"].difficulty) == (
        "harness/minbase:latest",
        "nobody",
        3,
    )
    sm = tasks["shared-mode"].harbor
    assert (sm.verifier_mode, sm.agent_user, sm.workdir) == ("shared", "sandbox", "/home/work")
    sep = tasks["separate-mode"].harbor
    assert (sep.verifier_mode, sep.verifier_docker_image) == ("fresh", "harness/base:latest")


def test_harbor_template_as_shipped_loads(tmp_path):
    """Harbor's own template task.toml (schema_version 1.0, comments and all), only the TODOs filled in."""
    toml = """schema_version = "1.0"
[task]
name = "org/bench__t1"
authors = [{ name = "A", email = "a@b.c" }]
keywords = ["x"]
[metadata]
difficulty = "easy"
category = "programming"
[verifier]
timeout_sec = 120.0
[agent]
timeout_sec = 120.0
[environment]
build_timeout_sec = 600.0
"""
    task = load_task(harbor_task(tmp_path, toml))
    assert task.evaluator.kind == "harbor" and task.harbor.verifier_mode == "shared" and task.version == "1.0"


def test_unknown_keys_give_one_warning_not_an_error(tmp_path, capsys):
    toml = (
        'schema_version = "1.4"\nfuture_field = 1\n[agent]\nthinking = true\n[environment]\nshiny = "yes"\n'
    )
    task = load_task(harbor_task(tmp_path, toml))
    err = capsys.readouterr().err
    assert err.count("unknown keys ignored") == 1
    assert "future_field" in err and "agent.thinking" in err and "environment.shiny" in err
    assert any("unknown keys ignored" in w for w in task.harbor.warnings)


@pytest.mark.parametrize(
    "fragment,field",
    [
        ("[environment]\ngpus = 1\n", "gpus"),
        ('[environment]\ngpu_types = ["H100"]\n', "gpu_types"),
        ('[environment]\ntpu = { type = "v5e", topology = "2x2" }\n', "tpu"),
        (
            '[[environment.mcp_servers]]\nname = "fs"\ntransport = "stdio"\ncommand = "mcp-fs"\n',
            "mcp_servers",
        ),
        ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n', "allowlist"),
        ('[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n', "[agent] network_mode"),
        ('[environment]\nos = "windows"\n', "os"),
        ('[[steps]]\nname = "one"\n[[steps.verifier.environment]]\n', "separate verifier environment"),
        (
            '[verifier]\nenvironment_mode = "shared"\n[verifier.environment]\ndocker_image = "x"\n',
            "environment_mode",
        ),
        ("[verifier.environment]\ngpus = 2\n", "[verifier.environment] gpus"),
    ],
)
def test_fields_we_cannot_honour_are_refused_by_name(tmp_path, fragment, field):
    msg = error_of('schema_version = "1.4"\n' + fragment, tmp_path)
    assert field in msg and "task.toml" in msg and "\n" not in msg


def test_compose_tasks_are_refused(tmp_path):
    root = harbor_task(tmp_path, 'schema_version = "1.4"\n')
    (root / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    with pytest.raises(UserError, match="docker-compose tasks are not supported"):
        load_task(root)


@pytest.mark.parametrize(
    "fragment,mode",
    [
        ("", "shared"),  # Harbor's default
        ('[verifier]\nenvironment_mode = "shared"\n', "shared"),
        ('[verifier]\nenvironment_mode = "separate"\n', "fresh"),
        ('[verifier.environment]\ndocker_image = "harness/base:latest"\n', "fresh"),
        ('[verifier]\nisolation = "fresh"\n', "fresh"),
        ('[verifier]\nenvironment_mode = "separate"\nisolation = "snapshot"\n', "snapshot"),
    ],
)
def test_verifier_modes_map_from_harbor(tmp_path, fragment, mode):
    assert (
        load_task(harbor_task(tmp_path, 'schema_version = "1.4"\n' + fragment)).harbor.verifier_mode == mode
    )


def test_the_harbor_kind_decides_what_its_modes_need(tmp_path):
    """Sandboxes per attempt, verification in place, and whether `harness rescore` can grade the kept changes
    again: the kind's, by the task's verifier mode (the runner and rescore ask, never test for Harbor)."""
    from evaluators.grading.kind import InPlace
    from evaluators.rescore import _why_not
    from evaluators.run.attempt_sandbox import sandbox_of
    from results.schema import Attempt
    from tasks import kinds

    seen = []
    for i, (fragment, mode) in enumerate(
        [
            ("", "shared"),
            ('[verifier]\nisolation = "fresh"\n', "fresh"),
            ('[verifier]\nisolation = "snapshot"\n', "snapshot"),
        ]
    ):
        task = load_task(harbor_task(tmp_path / str(i), 'schema_version = "1.4"\n' + fragment))
        kind = kinds.of(task)
        attempt = Attempt.model_construct(status="failed", changes=object())
        seen.append(
            (
                task.harbor.verifier_mode,
                sandbox_of(kind).containers(task),
                isinstance(kind, InPlace),
                _why_not(attempt, task),
            )
        )
    assert seen == [
        ("shared", 1, True, "verified in the agent's container (shared)"),
        ("fresh", 2, True, ""),
        ("snapshot", 1, True, "verified in the agent's container (snapshot)"),
    ]


@pytest.mark.parametrize(
    "fragment,net",
    [
        ("", True),  # Harbor's default: allow_internet = true
        ("[environment]\nallow_internet = true\n", True),
        ('[environment]\nnetwork_mode = "public"\n', True),
        ('[environment]\nnetwork_mode = "no-network"\n', False),
        ('[environment]\nnetwork_mode = "public"\n[agent]\nnetwork_mode = "no-network"\n', False),
    ],
)
def test_network_policy(tmp_path, fragment, net):
    assert (
        load_task(harbor_task(tmp_path, 'schema_version = "1.4"\n' + fragment)).environment.allow_internet
        is net
    )


@pytest.mark.parametrize(
    "fragment,verifier_net",
    [
        ("", True),
        (
            '[environment]\nnetwork_mode = "public"\n[agent]\nnetwork_mode = "no-network"\n',
            True,
        ),  # the baseline
        ('[verifier]\nnetwork_mode = "public"\n', True),
        ('[environment]\nnetwork_mode = "public"\n[verifier]\nnetwork_mode = "no-network"\n', False),
    ],
)
def test_verifier_network_policy(tmp_path, fragment, verifier_net):
    task = load_task(harbor_task(tmp_path, 'schema_version = "1.4"\n' + fragment))
    assert task.harbor.verifier_network is verifier_net
    assert runtime.verifier_limits(task).network is verifier_net


@pytest.mark.parametrize(
    "fragment,expected",
    [
        ('[environment]\nworkdir = "app"\n', "workdir must be an absolute path"),
        ('[verifier]\nenv = { "1X" = "a" }\n', "not a valid environment variable name"),
        ("[agent]\nuser = true\n", "[agent] user must be a user name or a uid"),
        ('[verifier]\nenvironment_mode = "elsewhere"\n', "environment_mode must be"),
        ("[environment.healthcheck]\ninterval_sec = 1\n", "healthcheck] needs command"),
        ("[task]\nauthors = [3]\n", "[task] authors"),
    ],
)
def test_bad_values_name_the_field(tmp_path, fragment, expected):
    assert expected in error_of('schema_version = "1.4"\n' + fragment, tmp_path)


def test_without_a_dockerfile_environment_files_start_in_the_workdir(tmp_path):
    root = harbor_task(tmp_path, 'schema_version = "1.4"\n')
    (root / "environment" / "Dockerfile").unlink()
    (root / "environment" / "data.txt").write_text("x\n")
    task = load_task(root)
    assert (
        task.dockerfile is None and task.workspace_files == {"data.txt": b"x\n"} and task.build_context == {}
    )


@pytest.mark.parametrize(
    "txt,js,reward,reason,detail",
    [
        (b"1\n", None, 1.0, "pass", '{"reward": 1.0}'),
        (b"0.25", b'{"reward": 1}', 1.0, "pass", "task reward = 'reward'"),  # reward.json wins, as in Harbor
        (None, b'{"reward": 1, "style": 0.5}', 1.0, "pass", '"style": 0.5'),
        (None, b'{"accuracy": 0.5}', 0.5, "fail", "task reward = 'accuracy'"),
        (None, b'{"a": 1, "b": 0}', 0.5, "fail", "mean of all"),
        (None, b'{"reward": "1"}', 0.0, "no_report", "names to numbers"),
        (b"NaN", None, 0.0, "no_report", "non-finite"),
        (b"yes", None, 0.0, "no_report", "not a number"),
        (None, None, 0.0, "no_report", "wrote neither"),
    ],
)
def test_reward_files(txt, js, reward, reason, detail):
    v = verifier.verdict(txt, js)
    assert (v.reward, v.reason) == (reward, reason) and detail in v.detail


# ---------------------------------------------------------------------------------------------- in Docker


@pytest.fixture(scope="module")
def minbase(image):
    from agent.sandbox.backends.docker.images import ensure_minbase_image

    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap is not installed (make setup installs it)")
    from agent.sandbox.backends.docker.images import ensure_busybox_image

    ensure_busybox_image(log=lambda m: None)  # the corpus's libc-less image
    return ensure_minbase_image(log=lambda m: None)


@pytest.mark.slow
def test_fixture_corpus_validates(minbase):
    """`harness tasks validate`: every oracle solved, every null agent not, hidden tests unreachable."""
    rows = run(validate(load_suite(FIXTURES), repeats=1, concurrency=2))
    assert [(r.task, r.oracle, r.null, r.problems) for r in rows] == [
        (r.task, "1/1", "not solved", []) for r in rows
    ]


def _attempt(task, policy=oracle_policy):
    async def go():
        images = await build_images([task], log=lambda m: None)
        async with DockerPool(run_id="harbor-test", warm=0) as pool:
            return await run_attempt(
                task, policy, pool, images[task.id], run_id="harbor-test", model_name="t"
            )

    return run(go())


def _with_mode(task, mode):
    return dataclasses.replace(task, harbor=dataclasses.replace(task.harbor, verifier_mode=mode))


@pytest.mark.slow
@pytest.mark.parametrize("mode,isolated", [("fresh", 1.0), ("snapshot", 0.0), ("shared", 0.0)])
def test_what_each_mode_keeps(image, mode, isolated):
    """fresh: only the working folder's changes reach the verifier; snapshot and shared: every change."""
    task = _with_mode(load_task(FIXTURES / "separate-mode"), mode)
    rec = _attempt(task)
    assert rec.solved, rec.detail
    assert f'"isolated": {isolated}' in rec.detail and "task reward = 'reward'" in rec.detail


@pytest.mark.slow
def test_python_less_image_in_fresh_mode_loses_changes_outside_the_workdir(minbase):
    task = _with_mode(load_task(FIXTURES / "no-python"), "fresh")
    rec = _attempt(task)
    assert (rec.solved, rec.reason) == (False, "fail")


CHEAT = r"""
mkdir -p /logs/verifier /tests
echo 1 > /logs/verifier/reward.txt; echo '{"reward": 1}' > /logs/verifier/reward.json
printf 'echo 1 > /logs/verifier/reward.txt\n' > /tests/test.sh
setsid nohup sh -c 'while true; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 0.01; done' \
  >/dev/null 2>&1 < /dev/null &
sleep 0.3
"""  # noqa: E501 -- the agent's script, byte for byte


# shared: the agent's processes run alongside test.sh, as under Harbor (README: what the agent can still do)
@pytest.mark.slow
@pytest.mark.parametrize("mode,writer", [("snapshot", True), ("fresh", True), ("shared", False)])
def test_planted_rewards_and_background_writers_do_not_count(image, mode, writer):
    async def cheat(task, sb):
        seen = await sb.exec("ls -A /tests 2>/dev/null; true", timeout=10)
        assert seen.stdout.strip() == "", "hidden tests were visible to the agent"
        script = CHEAT if writer else CHEAT.split("setsid")[0]
        r = await sb.exec(script, timeout=30)
        assert r.exit_code == 0, r.output

    task = _with_mode(load_task(FIXTURES / "hello-world"), mode)
    rec = _attempt(task, cheat)
    assert (rec.solved, rec.reward, rec.reason) == (False, 0.0, "fail"), rec.detail


@pytest.mark.slow
def test_null_agent_is_not_solved_in_every_mode(image):
    for mode in ("fresh", "snapshot", "shared"):
        rec = _attempt(_with_mode(load_task(FIXTURES / "hello-world"), mode), null_policy)
        assert not rec.solved, (mode, rec.detail)


def test_missing_docker_image_is_a_clear_error(tmp_path):
    root = harbor_task(tmp_path, 'schema_version = "1.4"\n[environment]\ndocker_image = "nowhere/none:1"\n')
    with pytest.raises(UserError, match="docker_image 'nowhere/none:1' is not on this machine"):
        run(build_images([load_task(root)], log=lambda m: None))


def test_image_cache_key_covers_the_whole_build_context(image, tmp_path):
    """Two tasks with the same Dockerfile but different environment/ files get different images."""
    tasks = []
    for name, content in (("a", "first\n"), ("b", "second\n")):
        root = harbor_task(
            tmp_path,
            'schema_version = "1.4"\n',
            name=name,
            dockerfile="FROM harness/base:latest\nCOPY data.txt /data.txt\n",
        )
        (root / "environment" / "data.txt").write_text(content)
        tasks.append(load_task(root))
    images = run(build_images(tasks, log=lambda m: None))
    assert images["a"] != images["b"]


# ---------------------------------------------------------------------------------------------- export


def _exported(tmp_path, tasks):
    from evaluators.harbor_export import export_suite

    export_suite(tasks, tmp_path / "out")
    return load_suite(tmp_path / "out")


def test_export_round_trip_keeps_what_defines_a_task(tmp_path):
    ours = load_suite("builtin")
    back = {t.id: t for t in _exported(tmp_path, ours)}
    assert set(back) == {t.id for t in ours}
    for t in ours:
        b = back[t.id]
        assert b.evaluator.kind == "harbor" and b.harbor.verifier_mode == "fresh"
        assert (b.domain, b.difficulty, b.tags, b.family, b.split) == (
            t.domain,
            t.difficulty,
            t.tags,
            t.family,
            t.split,
        )
        assert (b.agent, b.environment.memory_mb, b.environment.allow_internet) == (
            t.agent,
            t.environment.memory_mb,
            t.environment.allow_internet,
        )
        assert b.instruction == t.instruction and b.solution_files == t.solution_files
        assert b.build_context == {f"workspace/{p}": d for p, d in t.workspace_files.items()}
        assert b.dockerfile.startswith("FROM harness/base:latest") and b.harbor.agent_user == "sandbox"
        assert b.harbor.workdir == "/workspace" and "test.sh" in b.test_files


def test_exported_verdict_is_our_verdict_module_byte_for_byte(tmp_path):
    """The exported task's verdict.py is evaluators/grading/verdict.py itself, which imports only the
    standard library, and runs on its own (python -I: none of our packages reachable)."""
    import ast

    from evaluators.grading import verdict

    source = Path(verdict.__file__).read_bytes()
    for t in _one_of_each_kind():
        root = export_task(t, tmp_path / "out")
        assert (root / "tests" / "harness" / "verdict.py").read_bytes() == source
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    program = root / "tests" / "harness" / "verdict.py"
    for written, printed in ((b"0.5\n", "0.5"), (b"nan", "0.0"), (b"2", "0.0")):
        (tmp_path / "reward.txt").write_bytes(written)
        r = subprocess.run(
            [sys.executable, "-I", str(program), "script", str(tmp_path / "reward.txt")],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert (r.returncode, r.stdout.strip()) == (0, printed), r.stderr


def _one_of_each_kind():
    from tasks import kinds as registry

    kinds: dict[str, object] = {}
    for t in load_suite("builtin"):
        kinds.setdefault(t.evaluator.kind, t)
    assert set(kinds) == set(registry.task_toml_kinds())  # every kind a task.toml may name
    return list(kinds.values())


@pytest.mark.slow
def test_exported_tasks_validate_one_of_each_kind(image, tmp_path):
    rows = run(validate(_exported(tmp_path, _one_of_each_kind()), repeats=1, concurrency=2))
    assert [(r.oracle, r.null, r.problems) for r in rows] == [("1/1", "not solved", [])] * 3


@pytest.mark.slow
def test_exported_builtin_suite_validates(image, tmp_path):
    """The built-in suite exported to Harbor's format and loaded back grades as it does natively: one
    instance of every third family, each evaluator kind among them (a family's instances export alike; the
    round trip above checks every task's files without Docker; `harness tasks validate` on an export runs
    them all)."""
    from evaluators.cheats import one_per_family

    tasks = one_per_family(load_suite("builtin"))[::3]
    assert {t.evaluator.kind for t in tasks} == {"pytest", "answer", "script"}
    rows = run(validate(_exported(tmp_path, tasks), repeats=1, concurrency=4))
    bad = [(r.task, r.oracle, r.null, r.problems) for r in rows if not r.ok]
    assert bad == [] and len(rows) == len(tasks) >= 18


def test_export_cli(tmp_path, capsys):
    import harness

    assert harness.main(["tasks", "export", "--format", "harbor", str(tmp_path / "x"), "builtin:easy"]) == 0
    assert "Harbor tasks" in capsys.readouterr().out
    assert (tmp_path / "x" / "fizzbuzz" / "tests" / "test.sh").stat().st_mode & 0o111


@pytest.mark.slow
def test_bench_sandbox_smoke_prints_the_python_less_figure(minbase):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "bench/sandbox.py", "--smoke"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr[-500:]
    assert "exec `true` in a Python-less image (static helper): p50" in out.stdout and "ratio" in out.stdout


def test_change_capture_in_a_python_less_image(minbase):
    """The static helper walks the working folder itself: added, modified, deleted, executable, symlinks."""
    from agent.sandbox import NativeSpec, SandboxSpec

    async def go():
        async with DockerPool(run_id="harbor-test", warm=0) as pool:
            async with pool.sandbox(minbase, SandboxSpec(native=NativeSpec())) as sb:
                assert sb.workdir == "/app"
                assert (await sb.exec("command -v python3 python || echo none", 10)).stdout.strip() == "none"
                await sb.put_files({"keep.txt": b"k\n", "edit.txt": b"old\n", "gone.txt": b"x\n"})
                await sb.mark_baseline()
                r = await sb.exec(
                    "echo new > edit.txt; rm gone.txt; mkdir -p sub; printf '#!/bin/sh\\n' > sub/run.sh;"
                    " chmod +x sub/run.sh; ln -s /etc/passwd link; echo outside > /etc/elsewhere",
                    10,
                )
                assert r.exit_code == 0, r.output
                return await sb.changes()

    ch = run(go())
    assert ch.files == {"edit.txt": b"new\n", "sub/run.sh": b"#!/bin/sh\n"}
    assert ch.executable == {"sub/run.sh"} and ch.deleted == ["gone.txt"] and ch.rejected == ["symlink link"]


WRITER = """import os, time
if os.fork() == 0:  # left running, as an agent's daemon
    os.setsid()
    while True:
        try:
            os.makedirs("/d", exist_ok=True)
            open(f"/d/{os.getpid()}.{time.monotonic_ns()}", "w").close()
        except OSError:
            pass
"""


def test_a_folder_is_made_fresh_while_a_process_left_running_writes_into_it(image):
    """Harbor's shared mode: a process the agent left running may write into /logs/verifier while the
    helper empties it for the verifier; the folder is emptied again rather than the setup failing with
    ENOTEMPTY (the attempt then scored 0 as no_report: its verifier never ran)."""
    from agent.sandbox import NativeSpec, SandboxSpec

    async def go():
        async with DockerPool(run_id="harbor-test", warm=0) as pool:
            async with pool.sandbox(image, SandboxSpec(native=NativeSpec(keep_processes=True))) as sb:
                await sb.put_files({"writer.py": WRITER.encode()}, dest="/opt")
                for _ in range(3):
                    assert (await sb.exec(["python3", "/opt/writer.py"], 10)).exit_code == 0
                for _ in range(40):
                    await sb.mkdirs("/d", mode=0o700, fresh=True)  # raised FileOpError "Directory not empty"
                return (await sb.exec("ps -eo args | grep -c '^python3 /opt/writer.py'", 10)).stdout.strip()

    assert run(go()) == "3"  # the writers ran all along


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["snapshot", "fresh", "shared"])
def test_users_default_to_the_images_user(image, tmp_path, mode):
    root = harbor_task(
        tmp_path,
        f'schema_version = "1.4"\n[verifier]\nisolation = "{mode}"\n',
        dockerfile="FROM harness/base:latest\nRUN mkdir /w && chown sandbox /w\nUSER sandbox\nWORKDIR /w\n",
        test_sh='[ "$(cat /w/who)" = sandbox ] && [ "$(id -un)" = sandbox ] && r=1 || r=0\n'
        "echo $r > /logs/verifier/reward.txt\n",
    )
    (root / "solution" / "solve.sh").write_text("id -un > who\n")
    rec = _attempt(load_task(root))
    assert rec.solved, rec.detail


def test_harbor_sandbox_keeps_the_hardening(image, tmp_path):
    """Writable root and root user (Harbor's contract), but no network, limits, no-new-privileges, and at most
    Docker's default capabilities (0xa80425fb: no SYS_ADMIN, NET_ADMIN, SYS_PTRACE, ...)."""
    task = load_task(
        harbor_task(
            tmp_path, 'schema_version = "1.4"\n[environment]\nmemory_mb = 512\nallow_internet = false\n'
        )
    )

    async def go():
        async with DockerPool(run_id="harbor-test", warm=0) as pool:
            async with pool.sandbox(image, runtime.limits(task)) as sb:
                r = await sb.exec(
                    "id -u; ls /sys/class/net; grep -E '^(NoNewPrivs|CapEff)' /proc/self/status;"
                    " touch /etc/x && echo rw",
                    10,
                )
                sb.container.reload()
                return r, sb.container.attrs["HostConfig"]

    r, host = run(go())
    out = r.stdout.split()
    assert out[0] == "0" and out[1] == "lo" and out[-1] == "rw"
    assert out[out.index("NoNewPrivs:") + 1] == "1"
    assert int(out[out.index("CapEff:") + 1], 16) & ~0xA80425FB == 0
    assert (host["Memory"], host["MemorySwap"], host["PidsLimit"], host["NetworkMode"]) == (
        512 << 20,
        512 << 20,
        256,
        "none",
    )
    assert (
        host["Privileged"] is False and not host.get("CapAdd") and "no-new-privileges" in host["SecurityOpt"]
    )


def test_agent_loop_end_to_end_on_a_harbor_task(image, tmp_path):
    """`harness eval` on a Harbor task: the loop works in the WORKDIR (/app) and its prompt says so."""
    import json

    from evaluators.run.config import EvalConfig
    from evaluators.run.runner import run_eval

    reply = "```bash\necho 'Hello, world!' > hello.txt && echo \"$APP_MODE\" > mode.txt\n```"
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"hello-world": [reply, "Done.\n```bash\nsubmit\n```"]}))
    out = tmp_path / "run"
    run(
        run_eval(
            EvalConfig(model=f"replay:{script}", out=out, concurrency=1),
            [load_task(FIXTURES / "hello-world")],
            progress=False,
        )
    )
    rec = json.loads((out / "attempts.jsonl").read_text().splitlines()[0])
    assert rec["solved"], (rec["status"], rec["reason"], rec["error"], rec["detail"])
    assert "/app" in rec["messages"][0]["content"] and "/workspace" not in rec["messages"][0]["content"]
    assert rec["patch_files"] == 2


def test_our_tasks_are_graded_fresh_only(tmp_path):
    from tests.tasks.test_tasks_loader import TOML  # task_folder: the loader tests' folder builder
    from tests.tasks.test_tasks_loader import task_folder as make_task

    assert (
        load_task(
            make_task(tmp_path / "a", TOML.replace("[verifier]\n", '[verifier]\nisolation = "fresh"\n'))
        ).harbor
        is None
    )
    with pytest.raises(UserError, match="graded in a fresh container only"):
        load_task(
            make_task(tmp_path / "b", TOML.replace("[verifier]\n", '[verifier]\nisolation = "snapshot"\n'))
        )


@pytest.mark.slow
def test_exported_humaneval_tasks_validate(image, tmp_path):
    from tasks.humaneval import import_humaneval

    suite = load_suite(import_humaneval(tmp_path / "he"))[:2]
    rows = run(validate(_exported(tmp_path, suite), repeats=1, concurrency=2))
    assert [(r.oracle, r.null, r.problems) for r in rows] == [("1/1", "not solved", [])] * 2


def test_a_failing_healthcheck_is_an_infrastructure_error(image, tmp_path):
    from results.errors import InfraError

    root = harbor_task(
        tmp_path,
        'schema_version = "1.4"\n[environment.healthcheck]\ncommand = "test -e /ready"\n'
        "interval_sec = 0.1\nretries = 2\n",
    )
    with pytest.raises(InfraError, match="healthcheck"):
        _attempt(load_task(root))


def test_snapshot_images_are_pruned_with_their_run(image):
    """A commit left behind by a crash between commit and removal goes with the run's containers."""
    import docker.errors

    from agent.sandbox import NativeSpec, SandboxSpec
    from agent.sandbox.backends.docker.cleanup import prune
    from agent.sandbox.backends.docker.client import docker_client
    from agent.sandbox.backends.docker.native import commit
    from agent.sandbox.backends.docker.sandbox import create_sandbox

    sb = create_sandbox(image, SandboxSpec(native=NativeSpec()), "harbor-prune-test")
    try:
        snap = commit(sb, "harbor-prune-test")
    finally:
        sb.kill()
    assert docker_client().images.get(snap)
    prune(run_id="harbor-prune-test")
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client().images.get(snap)


def test_public_network_mode_gives_an_interface(image, tmp_path):
    """network_mode = "public" joins the pool's own network (no traffic is sent: only the interfaces are
    listed)."""
    task = load_task(
        harbor_task(tmp_path, 'schema_version = "1.4"\n[environment]\nnetwork_mode = "public"\n')
    )

    async def go():
        async with DockerPool(run_id="harbor-test", warm=0) as pool:
            async with pool.sandbox(image, runtime.limits(task)) as sb:
                return (await sb.exec("ls /sys/class/net", 10)).stdout.split()

    assert "lo" in (nets := run(go())) and len(nets) >= 2


def test_a_dockerfile_from_an_image_not_here_is_a_clear_error(image, tmp_path):
    root = harbor_task(
        tmp_path, 'schema_version = "1.4"\n', dockerfile="FROM nowhere.invalid/none:24.04\nWORKDIR /app\n"
    )
    with pytest.raises(UserError, match="FROM nowhere.invalid/none:24.04 is not on this machine"):
        run(build_images([load_task(root)], log=lambda m: None))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["shared", "snapshot"])
def test_an_agent_that_ends_its_own_container_is_still_verified(image, mode):
    """kill -TERM 1 stops the agent's container; its filesystem is verified (a commit of the stopped
    container)."""
    from agent.sandbox import SandboxDied

    async def solve_then_stop(task, sb):
        await sb.exec("echo 'Hello, world!' > hello.txt; echo fixture > mode.txt", timeout=10)
        try:
            await sb.exec("kill -TERM 1; sleep 5", timeout=10)
        except SandboxDied:
            pass
        for _ in range(50):
            if sb.dead:
                break
            import asyncio

            await asyncio.sleep(0.1)
        assert sb.dead

    rec = _attempt(_with_mode(load_task(FIXTURES / "hello-world"), mode), solve_then_stop)
    assert rec.solved, (rec.reason, rec.detail)


@pytest.mark.slow
def test_an_agent_that_freezes_the_command_server_scores_zero_without_crashing_the_run(image):
    """A root agent can SIGSTOP the helper: the attempt goes on from its container's filesystem and is graded
    (0 here: its work is half done), with the reason in its detail."""
    import asyncio

    from agent.sandbox import SandboxDied

    async def freeze(task, sb):
        await sb.exec("echo 'Hello, world!' > hello.txt", timeout=10)
        try:
            await sb.channel.request(
                {"cmd": "kill -STOP $PPID; sleep 100", "timeout": 200, "user": "agent", "cwd": "/app"},
                host_timeout=2,
            )
        except SandboxDied:
            pass
        await asyncio.sleep(0.5)

    rec = _attempt(_with_mode(load_task(FIXTURES / "hello-world"), "snapshot"), freeze)
    assert (rec.solved, rec.reason) == (False, "fail") and "helper killed by the agent" in rec.detail
