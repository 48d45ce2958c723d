"""Hidden pytest tests: how they are prepared, run in the grading container, and how the verdict is read.

The verdict comes only from a JUnit XML file at a path the harness chose, in a folder only the test runner
(root) can reach (a folder of random name inside root-only /grader), parsed here on the host and checked
against the exact set of test ids the hidden files define, plus canary tests (`test_canary*` in the task's
files) that call the candidate with an impossible expectation and must FAIL. Before the tests are copied
into the grader every test function gets a fresh random name and the top-level ones a random order, so
that a canary cannot be told from a real test by its name or position (the names in the record are the
task's own). Test ids and which are canaries: evaluators/grading/hidden_tests.py.
"""

from __future__ import annotations

import ast
import random
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from evaluators.grading.hidden_tests import collected_functions, is_canary, is_test_file, make_id, task_id

GRADER = "/grader"
_HERE = Path(__file__).parent / "grader"
GRADER_CONFTEST = (_HERE / "grader_conftest.py").read_bytes()
CANDIDATE_PROXY = (_HERE / "candidate.py").read_bytes()
GRADER_INI = b"[pytest]\naddopts = -p no:cacheprovider\n"


@dataclass
class Prepared:
    """The hidden tests as copied into one grading container."""

    files: dict[str, bytes]
    expected: set[str]  # ids as the grader will report them
    canaries: set[str]  # which of those are canaries
    names: dict[str, str] = field(default_factory=dict)  # grader id -> the task's own id


def prepare(test_files: dict[str, bytes], rng: random.Random | None = None) -> Prepared:
    """Renames every test function to a random name and shuffles the top-level ones.
    A file that does not parse is copied as it is (it fails in the grader, as it would anyway)."""
    rng = rng or random.Random(secrets.randbits(64))
    files: dict[str, bytes] = {}
    names: dict[str, str] = {}
    for path, data in test_files.items():
        if not is_test_file(path):
            files[path] = data
            continue
        try:
            text = data.decode("utf-8")
            tree = ast.parse(text)
        except (UnicodeDecodeError, SyntaxError, ValueError):
            files[path] = data
            continue
        lines = text.splitlines(keepends=True)
        blocks = []  # line spans of top-level test functions, with their decorators
        for cls, node in collected_functions(tree):
            new = f"test_{rng.getrandbits(48):012x}"
            i = node.lineno - 1
            renamed, n = re.subn(rf"\bdef\s+{re.escape(node.name)}\b", f"def {new}", lines[i], count=1)
            if n != 1:
                new = node.name  # an unusual layout: keep the name rather than break the file
            lines[i] = renamed
            names[make_id(path, cls, new)] = make_id(path, cls, node.name)
            if cls is None:
                start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
                blocks.append((start, node.end_lineno))
        bodies = [lines[a:b] for a, b in blocks]
        rng.shuffle(bodies)
        for (a, b), body in sorted(
            zip(blocks, bodies), key=lambda x: -x[0][0]
        ):  # from the end: spans stay valid
            lines[a:b] = body
        files[path] = "".join(lines).encode("utf-8")
    expected = set(names)
    return Prepared(files, expected, {i for i in expected if is_canary(task_id(i, names))}, names)


def command(timeout: float) -> tuple[list[str], str]:
    """The pytest command line, run in the grader's private folder (see grade.py), and the report's path
    relative to it. Every path in it is relative: /proc/<pid>/cmdline is readable by any user, and the
    candidate must not learn where the hidden files are (it could point a link in the workspace at them)."""
    report = f"out-{secrets.token_hex(8)}/report.xml"
    argv = [
        "timeout",
        "-s",
        "KILL",
        str(int(timeout)),
        "/usr/bin/python3",
        "-I",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-c",
        "pytest.ini",
        "--rootdir=.",
        "--confcutdir=.",
        "-o",
        "junit_family=xunit2",
        f"--junitxml={report}",
        "-q",
        "tests",
    ]
    return argv, report


def clean_env(import_mode: str, call_timeout: float, folder: str = GRADER) -> dict[str, str]:
    """The test runner's environment: nothing the candidate could have set survives into it."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": f"{folder}/home",
        "TMPDIR": f"{folder}/tmp",
        "LANG": "C.UTF-8",
        "WORKSPACE": "/workspace",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "HARNESS_IMPORT_MODE": import_mode,
        "HARNESS_CALL_TIMEOUT": str(max(1, int(call_timeout))),
    }
