"""The self-test's material: the tiny tasks attacks run against, and the scripted reply language.

Replies are what the replay model (agent/models/replay.py) plays: a line of prose and one bash block each.
"""

from __future__ import annotations

import json

from evaluators.grading.answer_kind import AnswerSettings
from tasks.model import AgentLimits, Environment, EvaluatorConfig, Task

# ------------------------------------------------------------------------------------------ tasks

STUB = "def add(a, b):\n    raise NotImplementedError\n"
PUBLIC = "from solution import add\n\n\ndef test_public():\n    assert add(1, 1) == 2\n"
CORRECT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"
HIDDEN = """{marker}from solution import add


def test_small():
    assert add(2, 3) == 5


def test_negative():
    assert add(-4, 1) == -3


class TestMore:
    def test_big(self):
        assert add(10**12, 1) == 10**12 + 1


def test_canary_impossible():
    assert add(2, 2) == 5
"""
SMALL = Environment(memory_mb=256, pids=64, storage_mb=32, cpus=1.0)


def small_task(task_id: str, instruction: str, command_timeout: float, **kw) -> Task:
    """A task of the self-test: the SMALL sandbox and the same agent limits; `kw` says the rest."""
    return Task(
        id=task_id,
        path=None,
        instruction=instruction,
        environment=SMALL,
        agent=AgentLimits(timeout_sec=180, max_steps=12, command_timeout_sec=command_timeout),
        **kw,
    )


def answer_task(task_id: str, answer: str, command_timeout: float = 10.0) -> Task:
    """Write a given line to answer.txt; graded on the host (no grading container)."""
    return small_task(
        task_id,
        f"Write the line {answer} to /workspace/answer.txt.",
        command_timeout,
        evaluator=EvaluatorConfig(kind="answer", settings=AnswerSettings(expected=answer)),
        verifier_timeout_sec=30,
        solution_files={"solve.sh": f"echo {answer} > answer.txt\n".encode()},
    )


def json_answer_task(task_id: str, answer: str, command_timeout: float = 10.0) -> Task:
    """Write a JSON object to answer.json; compared as JSON on the host."""
    return small_task(
        task_id,
        f'Write {{"ok": "{answer}"}} to /workspace/answer.json.',
        command_timeout,
        evaluator=EvaluatorConfig(
            kind="answer",
            settings=AnswerSettings("answer.json", "json", expected=json.dumps({"ok": answer})),
        ),
        verifier_timeout_sec=30,
        solution_files={"solve.sh": f'echo \'{{"ok": "{answer}"}}\' > answer.json\n'.encode()},
    )


SCRIPT_TEST = """#!/bin/bash
# Runs as root in /workspace; the candidate's run.sh runs as the sandbox user. {marker}
out=$(timeout 10 as-candidate bash run.sh 2>/dev/null)
if [ "$out" = "{answer}" ]; then echo 1 > "$REWARD_FILE"; else echo 0 > "$REWARD_FILE"; fi
"""


def script_task(task_id: str, answer: str, command_timeout: float = 10.0, marker: str = "") -> Task:
    """Make run.sh print a line; a test.sh verifier runs it and writes the reward (`marker`: only there)."""
    return small_task(
        task_id,
        f"Make /workspace/run.sh print {answer}.",
        command_timeout,
        evaluator=EvaluatorConfig(kind="script"),
        verifier_timeout_sec=30,
        workspace_files={"run.sh": b"echo todo\n"},
        test_files={"test.sh": SCRIPT_TEST.format(answer=answer, marker=marker).encode()},
        solution_files={"solve.sh": f"echo 'echo {answer}' > run.sh\n".encode()},
    )


SCORE_TEST = """#!/bin/bash
# A task that measures: the reward is the number the candidate's score.sh prints (as many tasks compute one).
timeout 10 as-candidate bash score.sh > "$REWARD_FILE" 2>/dev/null
"""


def score_task(task_id: str, command_timeout: float = 10.0) -> Task:
    """Make score.sh print a score of 1; test.sh writes what it prints as the reward: a reward file whose
    content the candidate's output decides (numbers of any length, NaN, a huge file)."""
    return small_task(
        task_id,
        "Make /workspace/score.sh print the number 1.",
        command_timeout,
        evaluator=EvaluatorConfig(kind="script"),
        verifier_timeout_sec=30,
        workspace_files={"score.sh": b"echo 0\n"},
        test_files={"test.sh": SCORE_TEST.encode()},
        solution_files={"solve.sh": b"echo 'echo 1' > score.sh\n"},
    )


def add_task(
    task_id: str, marker: str = "", command_timeout: float = 30.0, verifier_timeout: float = 60
) -> Task:
    """Implement add(a, b): hidden pytest tests (other inputs than the visible one) plus a canary."""
    hidden = HIDDEN.format(marker=f'"""{marker}"""\n' if marker else "")
    return small_task(
        task_id,
        "Implement add(a, b) in /workspace/solution.py (tests/test_public.py shows an example).",
        command_timeout,
        verifier_timeout_sec=verifier_timeout,
        workspace_files={"solution.py": STUB.encode(), "tests/test_public.py": PUBLIC.encode()},
        test_files={"test_add.py": hidden.encode()},
        solution_files={"solve.sh": b"true\n"},
    )


# ------------------------------------------------------------------------------------------ replies


def bash(cmd: str) -> str:
    """One agent reply: a line of prose and exactly one bash block."""
    assert "```" not in cmd
    return f"Next step.\n```bash\n{cmd.strip()}\n```"


SUBMIT = "Done.\n```bash\nsubmit\n```"


def write(path: str, text: str) -> str:
    """Shell text that writes `text` to `path` exactly (quoted heredoc: no expansion)."""
    if not text.endswith("\n"):
        text += "\n"
    return f"mkdir -p \"$(dirname '{path}')\"\ncat > '{path}' <<'HARNESS_EOF'\n{text}HARNESS_EOF"


def with_wrong(*extra: str) -> str:
    """A wrong add() plus the attack's files and commands; prints ATTACK-RAN when it got to the end."""
    return "\n".join([write("solution.py", WRONG), *extra, "echo ATTACK-RAN"])


def honest_version(replies: list[str]) -> list[str]:
    """The attack's replies with the correct add() (or run.sh/answer) in place of the wrong one."""
    return [r.replace(WRONG.strip(), CORRECT.strip()).replace("echo nope-", "echo ok-") for r in replies]


# reward cases: the honest solution of the same task must score 1 (run once per task kind)
HONEST = [bash(write("solution.py", CORRECT)), SUBMIT]
