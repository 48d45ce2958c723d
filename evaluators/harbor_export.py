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

from agent import AGENT_UID
from evaluators.grading import verdict
from evaluators.grading.kind import Exportable
from results.errors import UserError
from tasks import kinds
from tasks.model import Task

BASE_IMAGE = "harness/base:latest"  # `harness images build` tags it; Harbor users build it the same way
# The exported tests/test.sh, byte for byte: {kind} is the task's evaluator kind's own lines, which run its
# hidden checks and set $reward (evaluators/grading/kind.Exportable.export).
TEST_SH = """#!/bin/bash
# Exported by harness: runs the hidden checks as the sandbox user, decides as root, writes the reward.
set -u
R=$(mktemp -d)
chown sandbox:sandbox "$R"
H=/tests/harness
as_sandbox() { if command -v runuser >/dev/null; then runuser -u sandbox -- "$@"; else "$@"; fi; }
cd /workspace
reward=0
{kind}mkdir -p /logs/verifier
echo "$reward" > /logs/verifier/reward.txt
echo "reward $reward"
"""


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
        out.append(f"COPY --chown={AGENT_UID}:{AGENT_UID} workspace/ /workspace/")
    if task.executable_files:
        out.append(
            "RUN chmod +x " + " ".join(json.dumps(f"/workspace/{p}") for p in sorted(task.executable_files))
        )
    return "\n".join(out) + "\n"


def export_task(task: Task, out: Path) -> Path:
    kind = kinds.of(task)
    if not isinstance(kind, Exportable):
        raise UserError(f"task {task.id}: a {kind.name} task cannot be exported to Harbor's format")
    lines, harness_files = kind.export(task)  # UserError for a task it cannot export
    root = out / task.id
    if root.exists():
        shutil.rmtree(root)
    test_sh = TEST_SH.replace("{kind}", lines).replace("{timeout}", str(int(task.verifier_timeout_sec)))
    files: dict[str, bytes] = {
        "task.toml": task_toml(task).encode(),
        "instruction.md": task.instruction.encode(),
        "environment/Dockerfile": dockerfile(task).encode(),
        "tests/test.sh": test_sh.encode(),
        "tests/harness/verdict.py": Path(verdict.__file__).read_bytes(),
        "tests/harness/kind": task.evaluator.kind.encode(),
    }
    if task.dockerfile:
        files.update({f"environment/{p}": d for p, d in task.build_context.items()})
    else:
        files.update({f"environment/workspace/{p}": d for p, d in task.workspace_files.items()})
    files.update({f"solution/{p}": d for p, d in task.solution_files.items()})
    files.update({f"tests/harness/{p}": d for p, d in harness_files.items()})
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
