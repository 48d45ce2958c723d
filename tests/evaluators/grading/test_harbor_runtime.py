"""Harbor's runtime, faithfully: the environment of every command is what `docker exec` gives, processes the
agent starts live on (for its next command, and for a shared verifier), the network default, what a verdict
keeps, and the harness's own work never depends on the agent's programs (README "Harbor tasks").

Real Docker; the images are our base image and tasks built FROM it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from agent.sandbox.backends.docker.pool import DockerPool
from evaluators.grading.harbor import environment, runtime
from evaluators.run.attempt import run_attempt
from evaluators.run.network import network_lines, offline
from evaluators.run.policies import oracle_policy
from evaluators.run.task_images import build_images
from tasks.task_folder import load_task
from tests.conftest import run
from tests.helpers import make_task, write_files


def harbor_task(
    tmp_path: Path,
    toml: str = 'schema_version = "1.1"\n',
    *,
    name: str = "t",
    dockerfile: str = "FROM harness/base:latest\nWORKDIR /app\n",
    test_sh: str = "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    solve_sh: str = "#!/bin/bash\ntrue\n",
    extra: dict[str, str] | None = None,
):
    root = tmp_path / name
    files = {
        "task.toml": toml,
        "instruction.md": "Do it.\n",
        "solution/solve.sh": solve_sh,
        "tests/test.sh": test_sh,
        "environment/Dockerfile": dockerfile,
        **(extra or {}),
    }
    write_files(root, files)
    return environment.offline([load_task(root)])[0]


def attempt(task, policy=oracle_policy):
    async def go():
        images = await build_images([task], log=lambda m: None)
        async with DockerPool(run_id="harbor-rt-test", warm=0) as pool:
            return await run_attempt(
                task, policy, pool, images[task.id], run_id="harbor-rt-test", model_name="t"
            )

    return run(go())


def _env_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@pytest.mark.parametrize("user", ["root", "sandbox", "4242"])
def test_a_commands_environment_is_what_docker_exec_gives(image, tmp_path, user):
    """HOME from the user's passwd entry ("/" without one), PATH and HOSTNAME as Docker sets them, the image's
    ENV and the task's env: compared with `docker exec -u USER` on the same container."""
    task = harbor_task(
        tmp_path,
        'schema_version = "1.1"\n[environment.env]\nTASK_VAR = "from the task"\n',
        dockerfile="FROM harness/base:latest\nENV IMAGE_VAR=from-the-image\nWORKDIR /app\n",
    )

    async def go():
        images = await build_images([task], log=lambda m: None)
        async with DockerPool(run_id="harbor-rt-test", warm=0) as pool:
            async with pool.sandbox(images[task.id], runtime.limits(task)) as sb:
                ours = await sb.exec(["env"], timeout=10, user=user)
                for _ in range(3):  # the SDK's exec_run has come back empty on a loaded machine: ask again
                    theirs = sb.container.exec_run(["env"], user=user).output.decode()
                    if theirs:
                        break
                return ours.stdout, theirs

    ours, theirs = run(go())
    assert _env_lines(ours) == _env_lines(theirs)
    env = _env_lines(ours)
    assert (
        env["HOME"] == {"root": "/root", "sandbox": "/tmp", "4242": "/"}[user]
    )  # base image: sandbox:x:10001:10001::/tmp
    assert env["IMAGE_VAR"] == "from-the-image" and env["TASK_VAR"] == "from the task"
    assert "HOSTNAME" in env and "PATH" in env and not any(k.startswith("HARNESS_") for k in env)


def test_solve_and_test_scripts_get_home_and_the_oracle_gets_debian_frontend(image, tmp_path):
    """The standard TB2 verifier does `source $HOME/.local/bin/env`: without HOME it scores 0."""
    task = harbor_task(
        tmp_path,
        solve_sh='#!/bin/bash\n[ "$HOME" = /root ] && [ "$DEBIAN_FRONTEND" = noninteractive ] '
        "&& mkdir -p $HOME/.local/bin && echo 'export TOOL_READY=1' > $HOME/.local/bin/env\n",
        test_sh="#!/bin/bash\nsource $HOME/.local/bin/env\n"
        '[ "$TOOL_READY" = 1 ] && [ -z "$DEBIAN_FRONTEND" ] && r=1 || r=0\n'
        "echo $r > /logs/verifier/reward.txt\n",
    )
    rec = attempt(task)
    assert (rec.status, rec.reward) == ("solved", 1.0), (rec.error, rec.detail)


def test_no_internet_forces_the_network_off_and_the_default_follows_harbor(tmp_path):
    root = tmp_path / "n"
    write_files(
        root,
        {
            "task.toml": 'schema_version = "1.1"\n',
            "instruction.md": "x\n",
            "tests/test.sh": "true\n",
            "solution/solve.sh": "true\n",
        },
    )
    task = load_task(root)
    assert task.environment.allow_internet is True and task.harbor.network_why.startswith("no network key")
    off = environment.offline([task])[0]
    assert off.environment.allow_internet is False and off.harbor.verifier_network is False
    assert "--no-internet" in off.harbor.network_why
    assert dataclasses.replace(task, id="x").harbor.verifier_network is True


# ------------------------------------------------------------------------------------------- scripted agents

SUBMIT = "Done.\n```bash\nsubmit\n```"


def eval_replay(tmp_path: Path, scripts: dict, tasks: list):
    """`harness eval` with a replay model: each task's agent runs the given commands, one reply each. Returns
    the run folder and its records by task id."""
    import json

    from evaluators.run.config import EvalConfig
    from evaluators.run.runner import run_eval

    script = tmp_path / "replay.json"
    script.write_text(
        json.dumps({tid: [f"```bash\n{c}\n```" for c in cmds] + [SUBMIT] for tid, cmds in scripts.items()})
    )
    out = tmp_path / "run"
    run(run_eval(EvalConfig(model=f"replay:{script}", out=out, concurrency=2), tasks, progress=False))
    recs = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    return out, {r["task_id"]: r for r in recs}


SERVICE_TEST = r"""#!/bin/bash
python3 - <<'PY' && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
import urllib.request
assert urllib.request.urlopen("http://127.0.0.1:8765/page.txt", timeout=5).read() == b"served\n"
PY
"""
START_SERVICE = "echo served > page.txt && (python3 -m http.server 8765 &) && sleep 1"
USE_SERVICE = (
    "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8765/page.txt').read())\""
)


@pytest.mark.slow
def test_a_service_the_agent_starts_serves_its_next_command_and_a_shared_verifier(image, tmp_path):
    """Harbor's agent works in one persistent shell session: a server started in the background (logging to
    the command's output, which has ended) answers the next command, and the verifier in shared mode (the
    default). In snapshot mode no agent process survives, so the same work fails there."""
    shared = harbor_task(tmp_path, name="svc-shared", test_sh=SERVICE_TEST)
    snap = harbor_task(
        tmp_path,
        'schema_version = "1.1"\n[verifier]\nisolation = "snapshot"\n',
        name="svc-snap",
        test_sh=SERVICE_TEST,
    )
    assert shared.harbor.verifier_mode == "shared"
    out, recs = eval_replay(
        tmp_path, {t.id: [START_SERVICE, USE_SERVICE] for t in (shared, snap)}, [shared, snap]
    )
    r = recs["svc-shared"]
    assert "b'served\\n'" in r["steps"][1]["observation"], r["steps"][1]["observation"]
    assert (r["status"], r["reward"]) == ("solved", 1.0), (r["detail"], r["verifier_output"])
    assert (recs["svc-snap"]["status"], recs["svc-snap"]["reward"]) == ("failed", 0.0)


@pytest.mark.slow
def test_a_failing_verdict_keeps_the_verifier_output_and_its_files(image, tmp_path):
    """A reward of 0 because a tool was missing is visible from the record alone; test.sh's output, what it
    left in /logs/verifier (ctrf.json) and the artifacts are in the run folder, named by the record."""
    task = harbor_task(
        tmp_path,
        'schema_version = "1.1"\nartifacts = ["/app/result.txt"]\n',
        name="keeps",
        test_sh="#!/bin/bash\necho checking\nuvx-not-installed -p 3.13 pytest /tests\n"
        'echo \'{"results": {"summary": {"failed": 1}}}\' > /logs/verifier/ctrf.json\n'
        "echo 0 > /logs/verifier/reward.txt\n",
    )
    out, recs = eval_replay(
        tmp_path, {"keeps": ["echo 42 > result.txt && echo note > /logs/artifacts/note.txt"]}, [task]
    )
    r = recs["keeps"]
    assert (r["status"], r["reward"], r["reason"]) == ("failed", 0.0, "fail")
    assert (
        "uvx-not-installed: command not found" in r["verifier_output"] and "checking" in r["verifier_output"]
    )
    files = {f["name"]: f for f in r["files"]}
    assert set(files) >= {
        "verifier/test-stdout.txt",
        "verifier/ctrf.json",
        "verifier/reward.txt",
        "artifacts/logs/artifacts/note.txt",
        "artifacts/app/result.txt",
    }
    assert (out / files["verifier/ctrf.json"]["path"]).read_text().startswith('{"results"')
    assert b"command not found" in (out / files["verifier/test-stdout.txt"]["path"]).read_bytes()
    assert (out / files["artifacts/app/result.txt"]["path"]).read_text() == "42\n"
    from results.report.build import build_report

    page = build_report([out], echo=lambda m: None)["html"].read_text()
    assert "verifier output" in page and "uvx-not-installed: command not found" in page
    assert "verifier/ctrf.json" in page and "&quot;failed&quot;: 1" in page


def test_test_sh_sees_what_docker_exec_gives(image, tmp_path):
    """test.sh's environment (written to /logs/verifier, kept with the record) equals `env` in the same image
    as Docker starts it, plus [verifier] env; bash's own PWD/SHLVL/_ aside."""
    from agent.sandbox.backends.docker.client import docker_client

    task = harbor_task(
        tmp_path,
        'schema_version = "1.1"\n[environment.env]\nTASK_VAR = "t"\n[verifier.env]\nVERIFIER_VAR = "v"\n',
        name="envtest",
        dockerfile="FROM harness/base:latest\nENV IMAGE_VAR=i\nWORKDIR /app\n",
        test_sh="#!/bin/bash\nenv > /logs/verifier/env.txt\necho 1 > /logs/verifier/reward.txt\n",
    )
    out, recs = eval_replay(tmp_path, {"envtest": ["true"]}, [task])
    files = {f["name"]: f["path"] for f in recs["envtest"]["files"]}
    seen = _env_lines((out / files["verifier/env.txt"]).read_text())
    image_id = run(build_images([task], log=lambda m: None))["envtest"]
    docker_env = _env_lines(
        docker_client()
        .containers.run(image_id, ["env"], environment={"TASK_VAR": "t"}, network_mode="none", remove=True)
        .decode()
    )
    for bash_own in ("PWD", "SHLVL", "_", "OLDPWD"):
        seen.pop(bash_own, None)
    assert seen.pop("VERIFIER_VAR") == "v"
    assert seen.pop("HOSTNAME") and docker_env.pop("HOSTNAME")  # each container's own
    assert seen == docker_env and seen["HOME"] == "/root"


# ---------------------------------------------------------------------------------------------- attacks
# Each attack alone scores 0 (status failed, never error) and the run goes on; on top of the oracle's
# solution it is judged by the documented policy (README "Harbor tasks": tamper, or graded as usual).

SOLVE = "echo 'Hello' > /app/hello.txt"
CHECK = (
    "#!/bin/bash\nsleep 2\n"
    '[ "$(cat /app/hello.txt 2>/dev/null)" = Hello ] && echo 1 > /logs/verifier/reward.txt '
    "|| echo 0 > /logs/verifier/reward.txt\n"
)
TROJAN = "printf '#!/bin/sh\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n'"
ATTACKS = {
    # name: (mode, the agent's command, reason alone, (status, reason) on top of the oracle's solution)
    # a program the verifier never runs, deleted or trojaned: its traced run loads nothing of the agent's
    "deletes-tar": ("snapshot", "rm -f /usr/bin/tar /bin/tar", "fail", ("solved", "pass")),
    # a process left behind ends the container (kill -9 -1 reaches the helper) while it is verified
    "kills-the-helper-later": (
        "shared",
        "(sleep 1.5; kill -9 -1) > /dev/null 2>&1 &",
        "no_report|fail",  # while test.sh runs: nothing is read; before it: verified from its filesystem
        ("failed", "no_report"),
    ),
    # what a package upgrade or reinstall does: a program rewritten with the content dpkg recorded for it
    "rewrites-tar-as-dpkg-would": (
        "shared",
        "cp /usr/bin/tar /tmp/t && cat /tmp/t > /usr/bin/tar",
        "fail",
        ("solved", "pass"),
    ),
    "logs-is-a-file": ("snapshot", "rm -rf /logs && echo no > /logs", "fail", ("solved", "pass")),
    "logs-is-a-link": ("shared", "rm -rf /logs && ln -s /proc/self /logs", "fail", ("solved", "pass")),
    "trojan-tar": ("snapshot", f"{TROJAN} > /usr/bin/tar", "fail", ("solved", "pass")),
    "trojan-python3": (
        "snapshot",
        f"{TROJAN} > /usr/bin/python3.real; ln -sf python3.real /usr/bin/python3",
        "fail",
        ("solved", "pass"),
    ),
    # the bash that runs test.sh itself, shadowed on PATH: the verifier ran the agent's program
    "shadow-bash": (
        "shared",
        f"{TROJAN} > /usr/local/bin/bash; chmod +x /usr/local/bin/bash",
        "tamper",
        ("failed", "tamper"),
    ),
}


def _attack_tasks(tmp_path, with_oracle: bool):
    tasks, scripts = [], {}
    for name, (mode, cmd, _, _) in ATTACKS.items():
        tid = f"{name}-{'oracle' if with_oracle else 'alone'}"
        tasks.append(
            harbor_task(
                tmp_path,
                f'schema_version = "1.1"\n[verifier]\nisolation = "{mode}"\n',
                name=tid,
                test_sh=CHECK,
            )
        )
        scripts[tid] = ([SOLVE] if with_oracle else []) + [cmd]
    return tasks, scripts


@pytest.mark.slow
@pytest.mark.parametrize("with_oracle", [False, True], ids=["alone", "on-the-solution"])
def test_attacks_on_the_harness_own_work_are_graded_never_an_error(image, tmp_path, with_oracle):
    tasks, scripts = _attack_tasks(tmp_path, with_oracle)
    out, recs = eval_replay(tmp_path, scripts, tasks)
    assert len(recs) == len(ATTACKS)  # the run went on
    for name, (_, _, alone, on_top) in ATTACKS.items():
        r = recs[f"{name}-{'oracle' if with_oracle else 'alone'}"]
        wants = {on_top} if with_oracle else {("failed", a) for a in alone.split("|")}
        if name == "kills-the-helper-later" and with_oracle:  # timing: while test.sh runs, or before it
            wants = {("failed", "no_report"), ("solved", "pass")}
        got = (r["status"], r["reason"])
        assert got in wants, (name, r["detail"], r["error"], r["verifier_output"][-300:])


def test_a_shadowing_module_in_the_working_folder_is_tamper_in_fresh_mode(image, tmp_path):
    """test.sh runs `python3 -m pytest` in the working folder, so a json.py there would be imported by the
    verifier: tamper. A module the tests import and the instruction asks for is the agent's work."""
    tests = {
        "tests/test_outputs.py": "import json\nfrom answer import value\n\n"
        "def test_value():\n    assert value() == json.loads('42')\n",
    }
    test_sh = (
        "#!/bin/bash\ncd /app && python3 -m pytest -q -p no:cacheprovider /tests/test_outputs.py "
        "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    mk = lambda name: harbor_task(  # noqa: E731
        tmp_path,
        'schema_version = "1.1"\n[verifier]\nenvironment_mode = "separate"\n',
        name=name,
        test_sh=test_sh,
        extra={**tests, "instruction.md": "Write answer.py with value() returning 42.\n"},
    )
    honest, planted, on_top = mk("honest"), mk("planted"), mk("planted-on-top")
    good = "printf 'def value():\\n    return 42\\n' > answer.py"
    plant = "printf 'def loads(s):\\n    return 0\\n' > json.py"
    out, recs = eval_replay(
        tmp_path,
        {"honest": [good], "planted": [plant], "planted-on-top": [good, plant]},
        [honest, planted, on_top],
    )
    assert (recs["honest"]["status"], recs["honest"]["reward"]) == ("solved", 1.0), recs["honest"][
        "verifier_output"
    ]
    for tid in ("planted", "planted-on-top"):
        assert (recs[tid]["status"], recs[tid]["reason"]) == ("failed", "tamper"), recs[tid]["detail"]
        assert "json.py" in recs[tid]["detail"]


# ---------------------------------------------------------------------------------------------- multi-step

STEPS_TOML = """schema_version = "1.4"
multi_step_reward_strategy = "mean"
[task]
name = "harness/two-steps"
[[steps]]
name = "write"
min_reward = 1.0
[[steps]]
name = "extend"
[steps.verifier]
env = { EXPECT = "two" }
"""


def _steps_task(tmp_path):
    root = tmp_path / "two-steps"
    files = {
        "task.toml": STEPS_TOML,
        "environment/Dockerfile": "FROM harness/base:latest\nWORKDIR /app\n",
        "steps/write/instruction.md": "Write one into /app/a.txt.\n",
        "steps/write/tests/test.sh": '#!/bin/bash\n[ "$(cat /app/a.txt)" = one ] && echo 1 > '
        "/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
        "steps/write/solution/solve.sh": "#!/bin/bash\necho one > /app/a.txt\n",
        "steps/extend/instruction.md": "Now write two into /app/b.txt.\n",
        "steps/extend/workdir/given.txt": "from the step\n",
        "steps/extend/tests/test.sh": '#!/bin/bash\n[ "$(cat /app/a.txt)" = one ] '
        '&& [ "$(cat /app/b.txt)" = "$EXPECT" ] && r=1 || r=0\necho $r > /logs/verifier/reward.txt\n',
        "steps/extend/solution/solve.sh": "#!/bin/bash\n[ -f given.txt ] && [ ! -e /tests/test.sh ] "
        "&& echo two > b.txt\n",
    }
    write_files(root, files)
    return environment.offline([load_task(root)])[0]


@pytest.mark.slow
def test_multi_step_tasks_run_each_step_in_the_same_container(image, tmp_path):
    """[[steps]]: each step's instruction, workdir files, solution and verifier in turn; the next step's agent
    sees neither the tests nor the results of the one before; the reward is the mean of the steps."""
    from evaluators.validate import validate

    task = _steps_task(tmp_path)
    assert [s.name for s in task.harbor.steps] == ["write", "extend"] and task.instruction.startswith(
        "Write one"
    )
    rows = run(validate([task], repeats=1, concurrency=1))
    assert [(r.oracle, r.null, r.problems) for r in rows] == [("1/1", "not solved", [])], rows
    out, recs = eval_replay(
        tmp_path, {"two-steps": ["echo one > a.txt", SUBMIT[6:].strip("`\n"), "echo 2 > b.txt"]}, [task]
    )
    r = recs["two-steps"]
    assert (r["status"], r["reward"]) == ("failed", 0.5), r["detail"]
    assert "write=1 (pass)" in r["detail"] and "extend=0 (fail)" in r["detail"]
    assert {f["name"] for f in r["files"]} >= {
        "steps/write/verifier/reward.txt",
        "steps/extend/verifier/reward.txt",
    }


# ------------------------------------------------------------------------------------------ the rules (fast)


# The rule is tamper.loads_findings over a model probed from an image (here: the attack matrix's image, a
# task FROM harness/base; tests/evaluators/grading/test_attack_matrix.py generates its full matrix).
WD, STD, SITE, DIST = (
    "/app",
    "/usr/lib/python3.11",
    "/usr/local/lib/python3.11/dist-packages",
    "/usr/lib/python3/dist-packages",
)


@pytest.mark.parametrize(
    "changes,contents,original,expected,clear",
    [
        ({f"{WD}/json.py": "A"}, {}, [], "shadows the module 'json'", ""),
        ({f"{WD}/json.cpython-311-x86_64-linux-gnu.so": "A"}, {}, [], "shadows the module 'json'", ""),
        ({f"{WD}/six/__init__.py": "A"}, {}, [], "shadows the module 'six'", ""),
        ({f"{WD}/yaml/__init__.py": "A"}, {}, [], "", ""),  # the image has no yaml: the solution's output
        ({f"{WD}/kvstore_pb2.py": "A"}, {}, [], "", ""),  # TB 2.1 kv-store-grpc: the tests import it
        ({f"{WD}/sub/conftest.py": "A"}, {}, [], "test-run hook", ""),
        ({f"{WD}/x.pth": "A"}, {f"{WD}/x.pth": b"import os"}, [], ".pth import hook", ""),
        (
            {f"{WD}/pyproject.toml": "A"},
            {f"{WD}/pyproject.toml": b"[tool.pytest.ini_options]\n"},
            [],
            "pytest config",
            "",
        ),
        ({f"{WD}/pyproject.toml": "C"}, {}, [f"{WD}/pyproject.toml"], "", ""),  # the task's own
        ({f"{WD}/conftest.py": "C"}, {}, [f"{WD}/conftest.py"], "", ""),
        ({f"{WD}/src/json.py": "A"}, {}, [], "", ""),  # not at the top of the working folder
        ({"/pytest.ini": "A"}, {}, [], "pytest config above the tests", ""),  # rootdir / then
        ({"/conftest.py": "A"}, {}, [], "test-run hook above the tests", ""),
        ({"/opt/conftest.py": "A"}, {}, [], "", ""),
        ({"/usr/bin/tar": "C"}, {}, [], "changes /usr/bin/tar", "installer"),
        ({"/usr/bin/bash": "D"}, {}, [], "deletes /usr/bin/bash", "installer"),
        ({"/usr/bin/python3.11": "C"}, {}, [], "changes /usr/bin/python3.11", "installer"),
        ({"/usr/local/bin/python3": "A"}, {}, [], "shadowing the image's python3", "installer"),
        ({"/usr/local/bin/pytest": "A"}, {}, [], "shadowing the image's pytest", "installer"),  # pip: RECORD
        ({"/usr/bin/jq": "A", "/usr/bin": "C"}, {}, [], "", ""),  # apt install jq: a new program
        ({"/etc/ld.so.preload": "A"}, {}, [], "preloaded", ""),
        ({f"{STD}/json/__init__.py": "C"}, {}, [], "standard library", "dpkg"),
        ({f"{STD}/colorama.py": "A"}, {}, [], "standard library", "dpkg"),  # a name pytest imports if there
        ({f"{STD}/sitecustomize.py": "C"}, {}, [], "runs in every Python", "dpkg"),
        ({f"{DIST}/_pytest/main.py": "C"}, {}, [], "that the image provides", "installer"),
        ({f"{DIST}/__pycache__/six.cpython-311.pyc": "A"}, {}, [], "bytecode beside an image source", "pyc"),
        ({f"{SITE}/x.pth": "A"}, {f"{SITE}/x.pth": b"/opt/x\n"}, [], "", ""),  # a path line only
        # cleared only by what an installer recorded for it (pip: setuptools' distutils-precedence.pth)
        ({f"{SITE}/x.pth": "A"}, {f"{SITE}/x.pth": b"import x\n"}, [], ".pth import line", "installer"),
        (
            {f"{SITE}/colorama/__init__.py": "A"},
            {},
            [],
            "shadows the module 'colorama'",
            "installer",
        ),  # floor
        ({f"{SITE}/requests/__init__.py": "A"}, {}, [], "", ""),  # pip install requests: new to the image
    ],
)
def test_the_tamper_rule_over_the_probed_model(changes, contents, original, expected, clear):
    from tasks.tamper import loads_findings
    from tests.evaluators.grading.test_attack_matrix import model

    found = loads_findings(changes, model(), contents, original)
    if not expected:
        assert found == [], found
    else:
        assert found and expected in found[0][1] and found[0][2] == clear, found


def test_a_timeout_kills_the_commands_group_and_what_was_left_running_ends_with_kill_all(image, tmp_path):
    task = harbor_task(tmp_path, name="timeouts")

    async def go():
        images = await build_images([task], log=lambda m: None)
        async with DockerPool(run_id="harbor-rt-test", warm=0) as pool:
            async with pool.sandbox(images[task.id], runtime.limits(task)) as sb:
                left = await sb.exec("setsid sleep 300 > /dev/null 2>&1 & echo started", timeout=10)
                slow = await sb.exec("sleep 301 & sleep 302", timeout=1)
                # SIGKILL to the group is sent before the reply; on a loaded machine its members can take a
                # moment to die, so look a few times (they would live 300 s if the kill were never sent)
                for _ in range(20):
                    after_timeout = (await sb.exec("ps -eo args", timeout=10)).stdout
                    if "sleep 301" not in after_timeout and "sleep 302" not in after_timeout:
                        break
                    await asyncio.sleep(0.1)
                await sb.kill_all()
                after_kill_all = (await sb.exec("ps -eo args", timeout=10)).stdout
                return left, slow, after_timeout, after_kill_all

    left, slow, after_timeout, after_kill_all = run(go())
    assert left.exit_code == 0 and slow.timed_out
    assert "sleep 300" in after_timeout  # left running by a command that ended: lives on
    assert "sleep 301" not in after_timeout and "sleep 302" not in after_timeout  # the timed-out group
    assert "sleep 300" not in after_kill_all


def test_one_line_says_which_tasks_have_network_and_why(tmp_path):
    on = harbor_task(tmp_path, name="a")
    root = tmp_path / "b"
    write_files(
        root,
        {
            "task.toml": 'schema_version = "1.1"\n[environment]\nallow_internet = true\n',
            "instruction.md": "x\n",
            "tests/test.sh": "true\n",
            "solution/solve.sh": "true\n",
        },
    )
    line = environment.network_line([on, load_task(root)])
    assert "\n" not in line and line.startswith("Harbor tasks: ")
    assert "(b) network: [environment] allow_internet = true" in line
    assert "(a) no network: --no-internet (was: no network key: Harbor's default" in line
    # what the CLIs print: one line per kind with something to say; an ordinary task says nothing, and
    # --no-internet leaves it as it is
    ordinary = make_task()
    assert network_lines([ordinary, on, load_task(root)]) == [line]
    assert network_lines([ordinary]) == [] and offline([ordinary]) == [ordinary]
    off = offline([load_task(root)])[0]
    assert off.environment.allow_internet is False and "--no-internet" in off.harbor.network_why


@pytest.mark.parametrize("mode", ["fresh", "snapshot"])
def test_code_under_test_that_ends_the_verifiers_container_is_a_failed_verdict(image, tmp_path, mode):
    """test.sh runs the agent's program as root; one that kills every process (the helper too) stops the
    verifier's container: 0 with a reason, never an infrastructure error."""
    task = harbor_task(
        tmp_path,
        f'schema_version = "1.1"\n[verifier]\nisolation = "{mode}"\n',
        name=f"killer-{mode}",
        test_sh="#!/bin/bash\nbash /app/prog.sh; echo 1 > /logs/verifier/reward.txt\n",
    )
    out, recs = eval_replay(tmp_path, {task.id: ["printf 'kill -9 -1\\n' > prog.sh"]}, [task])
    r = recs[task.id]
    assert (r["status"], r["reason"]) == ("failed", "no_report"), (r["detail"], r["error"])
    assert "stopped while test.sh ran" in r["detail"]
