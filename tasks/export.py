"""`harness tasks export --format harbor OUT [SUITE]`: our tasks as Harbor tasks (schema 1.4), runnable by
Harbor.

Each task becomes OUT/<id>/ with:
  task.toml         [task], [metadata] (our id, domain, difficulty, tags, family, split), [agent] (user
                    "sandbox"), [verifier] (root; isolation = "fresh", our own key, which Harbor ignores),
                    [environment]
  instruction.md    as is
  environment/      Dockerfile FROM our base image; the starting files are its build context, COPYed to
                    /workspace
  solution/         solve.sh and its helpers (Harbor runs /solution/solve.sh in the WORKDIR, /workspace)
  tests/test.sh     runs the hidden tests (pytest, an answer check, or our test.sh) and writes
                    /logs/verifier/reward.txt; tests/harness/ holds the hidden files, the expected test ids
                    and which are canaries (evaluators/grading/hidden_tests.py), and verdict.py (our
                    evaluators/grading/verdict.py as it is: stdlib only)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from evaluators.grading import pytest_kind, verdict
from evaluators.grading.grade import AS_CANDIDATE
from evaluators.grading.hidden_tests import expected_ids, is_canary
from results.errors import UserError
from tasks.model import Task

BASE_IMAGE = "harness/base:latest"  # `harness images build` tags it; Harbor users build it the same way
# The exported pytest run imports the candidate directly (our grader's process-boundary proxy needs the
# harness's own grading container); the workspace goes at the END of sys.path, so it cannot shadow anything.
EXPORT_CONFTEST = b"import sys\nsys.path.append('/workspace')\n"

TEST_SH = """#!/bin/bash
# Exported by harness: runs the hidden checks as the sandbox user, decides as root, writes the reward.
set -u
R=$(mktemp -d)
chown sandbox:sandbox "$R"
H=/tests/harness
as_sandbox() { if command -v runuser >/dev/null; then runuser -u sandbox -- "$@"; else "$@"; fi; }
cd /workspace
reward=0
case "$(cat $H/kind)" in
  pytest)
    as_sandbox env -i PATH=/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 WORKSPACE=/workspace PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 \\
      PYTHONDONTWRITEBYTECODE=1 timeout -s KILL {timeout} /usr/bin/python3 -I -m pytest -p no:cacheprovider \\
      -c $H/grader/pytest.ini --rootdir=$H/grader --confcutdir=$H/grader -o junit_family=xunit2 \\
      --junitxml="$R/report.xml" -q $H/grader/tests
    code=$?
    reward=$(/usr/bin/python3 -I $H/verdict.py pytest "$R/report.xml" "$code")
    ;;
  answer)
    reward=$(/usr/bin/python3 -I $H/verdict.py answer)
    ;;
  script)
    # as in harness: test.sh runs as root and starts the candidate's code with `as-candidate CMD...`
    S=$(mktemp -d); chmod 0700 "$S"
    env -i PATH=$H/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 WORKSPACE=/workspace REWARD_FILE="$S/reward.txt" \\
      timeout -s KILL {timeout} bash $H/script/test.sh
    reward=$(/usr/bin/python3 -I $H/verdict.py script "$S/reward.txt")
    ;;
esac
mkdir -p /logs/verifier
echo "$reward" > /logs/verifier/reward.txt
echo "reward $reward"
"""  # noqa: E501 -- the exported tests/test.sh, byte for byte

# The verdict rules themselves, copied byte for byte: an exported task grades as harness does.
VERDICT_PY = Path(verdict.__file__).read_bytes()


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def task_toml(task: Task) -> str:
    meta = {"id": task.id, "domain": task.domain, "difficulty": task.difficulty, "tags": list(task.tags)}
    if task.family:
        meta.update(family=task.family, split=task.split)
    env = task.environment
    lines = [
        'schema_version = "1.4"',
        "",
        "[task]",
        f"name = {_toml_value('harness/' + task.id)}",
        f"keywords = {_toml_value(list(task.tags))}",
        "",
        "[metadata]",
    ]
    lines += [f"{k} = {_toml_value(v)}" for k, v in meta.items()]
    lines += [
        "",
        "[agent]",
        f"timeout_sec = {task.agent.timeout_sec!r}",
        f"max_steps = {task.agent.max_steps}",
        f"command_timeout_sec = {task.agent.command_timeout_sec!r}",
        'user = "sandbox"',
        "",
        "[verifier]",
        f"timeout_sec = {task.verifier_timeout_sec + 30!r}",
        'user = "root"',
        "# harness runs the verifier in a fresh container with the workspace changes "
        "(Harbor ignores this key)",
        'isolation = "fresh"',
        "",
        "[environment]",
        f"cpus = {env.cpus!r}",
        f"memory_mb = {env.memory_mb}",
        f'network_mode = "{"public" if env.allow_internet else "no-network"}"',
        f"pids = {env.pids}",
        'workdir = "/workspace"',
        "",
    ]
    return "\n".join(lines)


def dockerfile(task: Task) -> str:
    if task.dockerfile:  # the task's own, FROM our base image, with its own build context
        return task.dockerfile
    out = [f"FROM {BASE_IMAGE}", "WORKDIR /workspace"]
    if task.workspace_files:
        out.append("COPY --chown=10001:10001 workspace/ /workspace/")
    if task.executable_files:
        out.append(
            "RUN chmod +x " + " ".join(json.dumps(f"/workspace/{p}") for p in sorted(task.executable_files))
        )
    return "\n".join(out) + "\n"


def export_task(task: Task, out: Path) -> Path:
    root = out / task.id
    if root.exists():
        shutil.rmtree(root)
    files: dict[str, bytes] = {
        "task.toml": task_toml(task).encode(),
        "instruction.md": task.instruction.encode(),
        "environment/Dockerfile": dockerfile(task).encode(),
        "tests/test.sh": TEST_SH.replace("{timeout}", str(int(task.verifier_timeout_sec))).encode(),
        "tests/harness/verdict.py": VERDICT_PY,
        "tests/harness/kind": task.evaluator.kind.encode(),
    }
    if task.dockerfile:
        files.update({f"environment/{p}": d for p, d in task.build_context.items()})
    else:
        files.update({f"environment/workspace/{p}": d for p, d in task.workspace_files.items()})
    files.update({f"solution/{p}": d for p, d in task.solution_files.items()})
    ev = task.evaluator
    if ev.kind == "pytest":
        files["tests/harness/grader/conftest.py"] = EXPORT_CONFTEST
        files["tests/harness/grader/pytest.ini"] = pytest_kind.GRADER_INI
        files.update({f"tests/harness/grader/tests/{p}": d for p, d in task.test_files.items()})
        expected = sorted(expected_ids(task.test_files))
        files["tests/harness/expected.json"] = json.dumps(expected).encode()
        files["tests/harness/canaries.json"] = json.dumps([i for i in expected if is_canary(i)]).encode()
    elif ev.kind == "answer":
        files["tests/harness/answer.json"] = json.dumps(
            {
                "answer_file": ev.answer_file,
                "mode": ev.mode,
                "expected": ev.expected,
                "tolerance": ev.tolerance,
            }
        ).encode()
    elif ev.kind == "script":
        files.update({f"tests/harness/script/{p}": d for p, d in task.test_files.items()})
        files["tests/harness/bin/as-candidate"] = AS_CANDIDATE
    else:
        raise UserError(
            f"task {task.id}: a {ev.kind} task is already in Harbor's format (copy its folder instead)"
        )
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if rel.endswith(".sh") or rel.endswith("/as-candidate"):
            path.chmod(0o755)
    return root


def export_suite(tasks: list[Task], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    return [export_task(t, out) for t in tasks]
