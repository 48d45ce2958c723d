"""Harbor's runtime, faithfully: the environment of every command is what `docker exec` gives, processes the
agent starts live on (for its next command, and for a shared verifier), the network default, what a verdict
keeps, and the harness's own work never depends on the agent's programs (README "Harbor tasks").

Real Docker; the images are our base image and tasks built FROM it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agent.sandbox import SandboxPool
from evaluators import harbor_kind
from evaluators.policies import oracle_policy
from evaluators.runner import run_attempt
from evaluators.task_images import build_images
from tasks import harbor
from tasks.task_folder import load_task
from tests.conftest import run


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
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return harbor.offline([load_task(root)])[0]


def attempt(task, policy=oracle_policy):
    async def go():
        images = await build_images([task], log=lambda m: None)
        async with SandboxPool(run_id="harbor-rt-test", warm=0) as pool:
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
        async with SandboxPool(run_id="harbor-rt-test", warm=0) as pool:
            async with pool.sandbox(images[task.id], harbor_kind.limits(task)) as sb:
                ours = await sb.exec(["env"], timeout=10, user=user)
                theirs = sb.container.exec_run(["env"], user=user)
                return ours.stdout, theirs.output.decode()

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
    for rel, text in {
        "task.toml": 'schema_version = "1.1"\n',
        "instruction.md": "x\n",
        "tests/test.sh": "true\n",
        "solution/solve.sh": "true\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    task = load_task(root)
    assert task.environment.allow_internet is True and task.harbor.network_why.startswith("no network key")
    off = harbor.offline([task])[0]
    assert off.environment.allow_internet is False and off.harbor.verifier_network is False
    assert "--no-internet" in off.harbor.network_why
    assert dataclasses.replace(task, id="x").harbor.verifier_network is True
