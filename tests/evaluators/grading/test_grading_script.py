"""The script grader in real containers: tests/test.sh writes a reward in 0..1 to $REWARD_FILE; anything
else (no file, not a number, out of range, not finite) scores 0 as `no_report`, and a hang as `timeout`.
"""

from __future__ import annotations

import pytest

from agent.sandbox import Changes
from agent.sandbox.backends.docker.pool import DockerPool
from evaluators.grading.grade import grade
from tasks.model import EvaluatorConfig, Task
from tests.conftest import run


def script_task(test_sh: str, timeout: float = 30) -> Task:
    return Task(
        id="script",
        path=None,
        instruction="Write /workspace/out.txt.",
        test_files={"test.sh": test_sh.encode()},
        evaluator=EvaluatorConfig(kind="script"),
        verifier_timeout_sec=timeout,
    )


def grade_script(test_sh: str, image: str, files: dict | None = None, timeout: float = 30):
    async def main():
        async with DockerPool(warm=0) as pool:
            return await grade(script_task(test_sh, timeout), Changes(files=files or {}), pool, image)

    return run(main())


@pytest.mark.parametrize(
    "written,expected",
    [
        ("1", ("pass", 1.0, True)),
        ("1.0\n", ("pass", 1.0, True)),
        ("0.25", ("fail", 0.25, False)),
        ("0", ("fail", 0.0, False)),
        ("abc", ("no_report", 0.0, False)),
        ("", ("no_report", 0.0, False)),
        ("1 0", ("no_report", 0.0, False)),
        ("1.5", ("no_report", 0.0, False)),
        ("-0.1", ("no_report", 0.0, False)),
        ("nan", ("no_report", 0.0, False)),
        ("inf", ("no_report", 0.0, False)),
    ],
)
def test_reward_file_values(written, expected, image):
    v = grade_script(f'printf %s "{written}" > "$REWARD_FILE"\n', image)
    assert (v.reason, v.reward, v.solved) == expected, v


def test_no_reward_file_is_no_report(image):
    v = grade_script("echo 'all good' ; exit 0\n", image)
    assert (v.reason, v.reward, v.solved) == ("no_report", 0.0, False), v


@pytest.mark.slow
def test_reward_depends_on_the_workspace(image):
    sh = 'if grep -qx 42 /workspace/out.txt; then echo 1 > "$REWARD_FILE"; else echo 0 > "$REWARD_FILE"; fi\n'
    assert grade_script(sh, image, {"out.txt": b"42\n"}).reason == "pass"
    assert grade_script(sh, image, {"out.txt": b"41\n"}).reason == "fail"


@pytest.mark.slow
def test_a_hanging_script_times_out(image):
    v = grade_script('sleep 600\necho 1 > "$REWARD_FILE"\n', image, timeout=2)
    assert (v.reason, v.reward, v.solved) == ("timeout", 0.0, False), v


@pytest.mark.slow
def test_reward_written_before_a_hang_still_times_out(image):
    v = grade_script('echo 1 > "$REWARD_FILE"\nsleep 600\n', image, timeout=2)
    assert (v.reason, v.reward, v.solved) == ("timeout", 0.0, False), v
