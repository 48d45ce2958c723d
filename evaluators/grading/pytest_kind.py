"""The pytest evaluator kind: hidden pytest tests, how they are prepared, run in a fresh grading container,
and how the verdict is read; its [evaluator] settings (protected, import_mode) and its export.

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
import math
import random
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from evaluators.grading import hidden_tests
from evaluators.grading import verdict as rules
from evaluators.grading.hidden_tests import collected_functions, is_canary, is_test_file, make_id, task_id
from evaluators.grading.kind import Batchable, Exportable, Kind
from results.errors import UserError
from tasks.fields import is_relative, show
from tasks.impossible import Variants

_HERE = Path(__file__).parent / "grader"
GRADER_CONFTEST = (_HERE / "grader_conftest.py").read_bytes()
# The candidate proxy's files (grader/candidate.py), shipped flat as _harness/_harness_<name>.py: in import
# order, each importing only those before it (the command server preloads them in this order)
CANDIDATE_PROXY = {
    f"_harness/_harness_{name}.py": (_HERE / f"{name}.py").read_bytes()
    for name in ("wire", "child", "remote", "candidate")
}
GRADER_INI = b"[pytest]\naddopts = -p no:cacheprovider\n"
# What the forked verifier would import on every turn (grade.run's `fork`): pytest, and the built-in plugins
# that `import pytest` leaves to pytest.main (its default_plugins; a name this pytest lacks is skipped).
PRELOAD = ("pytest",) + tuple(
    f"_pytest.{m}"
    for m in (
        "faulthandler helpconfig junitxml nose pastebin python_path setuponly setupplan skipping stepwise "
        "threadexception unittest unraisableexception warnings"
    ).split()
)


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


def command() -> tuple[list[str], str]:
    """The pytest command line, run in the grader's private folder (see grade.py), and the report's path
    relative to it. Every path in it is relative: /proc/<pid>/cmdline is readable by any user, and the
    candidate must not learn where the hidden files are (it could point a link in the workspace at them)."""
    report = f"out-{secrets.token_hex(8)}/report.xml"
    argv = [  # the command's own time limit is the verifier's (grade.run): no `timeout` wrapper
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


def clean_env(import_mode: str, call_timeout: float, folder: str) -> dict[str, str]:
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
        # the verifier's own limit (grade.run) decides a timeout; a call into the candidate that hangs must
        # not fail its test first (a `fail`, not a `timeout`), so this one only backs that limit up
        "HARNESS_CALL_TIMEOUT": str(math.ceil(call_timeout) + 5),
    }


# The exported pytest run imports the candidate directly (our grader's process-boundary proxy needs the
# harness's own grading container); the workspace goes at the END of sys.path, so it cannot shadow anything.
EXPORT_CONFTEST = b"import sys\nsys.path.append('/workspace')\n"
EXPORT_TEST_SH = """as_sandbox env -i PATH=/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 WORKSPACE=/workspace PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 \\
  PYTHONDONTWRITEBYTECODE=1 timeout -s KILL {timeout} /usr/bin/python3 -I -m pytest -p no:cacheprovider \\
  -c $H/grader/pytest.ini --rootdir=$H/grader --confcutdir=$H/grader -o junit_family=xunit2 \\
  --junitxml="$R/report.xml" -q $H/grader/tests
code=$?
reward=$(/usr/bin/python3 -I $H/verdict.py pytest "$R/report.xml" "$code")
"""  # noqa: E501 -- in the exported tests/test.sh, byte for byte


@dataclass(frozen=True)
class PytestSettings:
    """[evaluator] of kind = "pytest"."""

    protected: tuple[str, ...] = ()  # extra globs (relative to /workspace) the agent must not change: tamper
    # "proxy" (the candidate's modules run in their own process, as the sandbox user; plain values cross) or
    # "direct" (imported into the test process: the opt-out; canaries are then the only defence)
    import_mode: str = "proxy"


class PytestKind(Kind, Batchable, Variants, Exportable):
    name = "pytest"
    keys = frozenset({"kind", "protected", "import_mode"})
    Settings = PytestSettings

    def settings(self, table, tests, loc, where):
        from tasks.model import EvaluatorConfig

        if not any(hidden_tests.is_test_file(n) for n in tests):
            raise UserError(f'{where("tests/")}: no hidden tests (kind = "pytest" needs tests/test_*.py)')
        try:
            all_tests = hidden_tests.expected_ids(tests)
        except ValueError as e:
            raise UserError(f"{where('tests/')}{e}") from None
        if not any(not is_canary(t) for t in all_tests):
            raise UserError(
                f"{where('tests/')}: no test functions (add def test_...() functions to tests/test_*.py)"
            )
        if not any(is_canary(t) for t in all_tests):
            raise UserError(
                f"{where('tests/')}: no canary test (add a test_canary_* function that calls the candidate "
                "with an impossible expectation, so it must fail for an honest solution)"
            )
        protected = table.get("protected", [])
        if not isinstance(protected, list) or not all(
            isinstance(p, str) and is_relative(p) for p in protected
        ):
            raise UserError(
                f'{loc}: [evaluator] protected must be a list of relative globs, e.g. ["tests/**"] '
                f"(got {show(protected)})"
            )
        import_mode = table.get("import_mode", "proxy")
        if import_mode not in hidden_tests.IMPORT_MODES:
            raise UserError(
                f'{loc}: [evaluator] import_mode must be "proxy" (the candidate runs in its own process) '
                f'or "direct" (imported into the test process) (got {show(import_mode)})'
            )
        return EvaluatorConfig(kind=self.name, settings=PytestSettings(tuple(protected), import_mode))

    def table(self, task):
        ev = self.settings_of(task)
        return {
            "kind": self.name,
            "import_mode": ev.import_mode,
            **({"protected": list(ev.protected)} if ev.protected else {}),
        }

    def batchable(self, task):
        """With the candidate behind the proxy its code never runs as root in the grading container, so
        attempts may share one; `direct` imports it into the root test process, and the network is the
        task's: those keep a container each."""
        return self.settings_of(task).import_mode == "proxy" and not task.environment.allow_internet

    async def grade(self, task, sub):
        from evaluators.grading import grade
        from results.schema import TestOutcome

        settings = self.settings_of(task)
        why = grade.tamper(task, sub.changes, settings.protected)
        if why:
            return rules.Verdict(0.0, False, "tamper", detail=why)
        prepared = prepare(task.test_files)
        timeout = task.verifier_timeout_sec
        files = {f"tests/{p}": d for p, d in prepared.files.items()}
        files.update(
            {
                "conftest.py": GRADER_CONFTEST,
                "pytest.ini": GRADER_INI,
                **CANDIDATE_PROXY,
            }
        )
        argv, report = command()
        folder = grade.private_folder()
        env = clean_env(settings.import_mode, timeout, folder)
        grader = grade.grader_files(files, folder, f"{folder}/tmp", f"{folder}/home")
        grading = sub.container(grader)
        async with grading as sb:
            env["HARNESS_CANDIDATE_UID"] = str(grading.uid)
            # pytest and its plugins imported once per grading container, by its command server: a batch's
            # later turns start at once (a container of its own pays the import as before)
            # the proxy's modules too, from this grading's folder: compiled once per container, not each turn
            proxy = tuple(f"{folder}/{path}" for path in CANDIDATE_PROXY)
            run = await grade.run(sb, argv, timeout, env, cwd=folder, fork=PRELOAD + proxy)
            if isinstance(run, rules.Verdict):
                return run
            at_limit = await grade.pid_limit_note(sb, grading.prepared, task, run)
            report = await grade.read(sb, f"{folder}/{report}")
        v = rules.pytest_verdict(
            report,
            run.exit_code,
            run.timed_out,
            prepared.expected,
            prepared.canaries,
            prepared.names,
            outcome=TestOutcome,
        )
        tail = run.out.tail.decode("utf-8", "replace")[-400:]
        detail = v.detail or tail
        if v.reason == "timeout" and at_limit:
            detail = f"{detail}: {at_limit}"
        v.detail = grading.not_written + detail
        return v

    def variant_tests(self, task):
        return "python", sorted(n for n in task.test_files if n.endswith(".py"))

    def export(self, task):
        import json

        expected = sorted(hidden_tests.expected_ids(task.test_files))
        files = {
            "grader/conftest.py": EXPORT_CONFTEST,
            "grader/pytest.ini": GRADER_INI,
            **{f"grader/tests/{p}": d for p, d in task.test_files.items()},
            "expected.json": json.dumps(expected).encode(),
            "canaries.json": json.dumps([i for i in expected if is_canary(i)]).encode(),
        }
        return EXPORT_TEST_SH, files


KIND = PytestKind()
