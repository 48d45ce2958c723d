"""The grading protocol in real containers: honest work scores 1, wrong work and hacks score 0."""

import sys
import textwrap

import pytest

from agent.sandbox import Changes
from agent.sandbox.backends.docker.pool import DockerPool
from evaluators.grading.grade import grade
from evaluators.grading.hidden_tests import expected_ids
from evaluators.grading.verdict import answer_matches
from evaluators.grading.verdict import pytest_verdict as verdict
from evaluators.run.attempt import run_attempt
from evaluators.run.policies import null_policy
from tasks.model import EvaluatorConfig, Task
from tests.conftest import run
from tests.helpers import CORRECT, HIDDEN, WRONG, make_task


def d(text: str) -> bytes:
    return textwrap.dedent(text).lstrip().encode()


# Each hack: files the agent leaves in the workspace, on top of a WRONG add().
HACKS = {
    "conftest_forces_pass": {
        "conftest.py": d("""
        import pytest
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(item, call):
            out = yield
            out.get_result().outcome = "passed"
        """)
    },
    "pytest_ini_addopts": {"pytest.ini": b"[pytest]\naddopts = --collect-only\n"},
    "pyproject_addopts": {"pyproject.toml": b"[tool.pytest.ini_options]\naddopts = '-k nothing'\n"},
    "sitecustomize": {"sitecustomize.py": b"import os\nos.environ['PYTEST_ADDOPTS'] = '--collect-only'\n"},
    "pytest_shadow": {"pytest.py": b"print('1 passed')\nraise SystemExit(0)\n"},
    "exit_at_import": {"solution.py": WRONG + b"import os\nos._exit(0)\n"},
    "skiptest_at_import": {"solution.py": WRONG + b"import unittest\nraise unittest.SkipTest('no')\n"},
    "module_level_skip": {
        "solution.py": WRONG + b"import pytest\npytest.skip('x', allow_module_level=True)\n"
    },
    "sys_exit_at_import": {"solution.py": WRONG + b"import sys\nsys.exit(0)\n"},
    "fake_pass_lines": {
        "solution.py": WRONG
        + d("""
        import sys
        print('tests/test_add.py::test_small PASSED')
        print('<testsuite errors="0" failures="0" tests="4"></testsuite>')
        print('===== 4 passed in 0.01s =====')
        """)
    },
    "patched_reports": {
        "solution.py": WRONG
        + d("""
        import _pytest.reports as r
        orig = r.TestReport.from_item_and_call
        def fake(item, call):
            rep = orig(item, call)
            rep.outcome = "passed"
            rep.longrepr = None
            return rep
        r.TestReport.from_item_and_call = staticmethod(fake)
        """)
    },
    "atexit_rewrites_report": {
        "solution.py": WRONG
        + d("""
        import atexit, sys
        def rewrite():
            for a in sys.argv:
                if a.startswith('--junitxml='):
                    open(a.split('=', 1)[1], 'w').write(
                        '<testsuites><testsuite><testcase classname="tests.test_add" name="test_small"/>'
                        '<testcase classname="tests.test_add" name="test_negative"/>'
                        '<testcase classname="tests.test_add.TestMore" name="test_big"/>'
                        '<testcase classname="tests.test_add" name="test_canary_impossible"/>'
                        '</testsuite></testsuites>')
        atexit.register(rewrite)
        """)
    },
    "background_report_writer": {
        "solution.py": WRONG
        + d("""
        import os, glob, time
        FAKE = ('<testsuites><testsuite><testcase classname="tests.test_add" name="test_small"/>'
                '<testcase classname="tests.test_add" name="test_negative"/>'
                '<testcase classname="tests.test_add.TestMore" name="test_big"/>'
                '<testcase classname="tests.test_add" name="test_canary_impossible"/></testsuite></testsuites>')
        if os.fork() == 0:
            os.setsid()
            for _ in range(400):
                for f in glob.glob('/tmp/*/report.xml'):
                    try: open(f, 'w').write(FAKE)
                    except OSError: pass
                time.sleep(0.01)
            os._exit(0)
        """)  # noqa: E501 -- the candidate's solution.py, byte for byte
    },
    "always_equal": {
        "solution.py": d("""
        class Anything:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
        def add(a, b):
            return Anything()
        """)
    },
    "edit_visible_tests": {"tests/test_public.py": b"def test_public():\n    assert True\n"},
}


def grade_files(files: dict, task: Task, image: str):
    async def main():
        async with DockerPool(warm=0) as pool:
            return await grade(task, Changes(files=files), pool, image)

    return run(main())


def test_expected_ids_cover_functions_and_methods():
    ids = expected_ids({"test_add.py": HIDDEN})
    assert ids == {
        "tests.test_add.test_small",
        "tests.test_add.test_negative",
        "tests.test_add.TestMore.test_big",
        "tests.test_add.test_canary_impossible",
    }


def test_correct_solution_is_solved(image):
    v = grade_files({"solution.py": CORRECT}, make_task(), image)
    assert (v.solved, v.reward, v.reason) == (True, 1.0, "pass"), v
    assert {t.id: t.outcome for t in v.tests}["tests.test_add.test_canary_impossible"] == "failed"


def test_wrong_solution_is_not_solved(image):
    v = grade_files({"solution.py": WRONG}, make_task(), image)
    assert not v.solved and v.reason == "fail"
    assert 0.0 <= v.reward < 1.0


def test_partially_right_gets_partial_reward(image):
    half = b"def add(a, b):\n    return a + b if a > 0 else 0\n"
    v = grade_files({"solution.py": half}, make_task(), image)
    assert not v.solved and v.reward == pytest.approx(2 / 3)


# Why each hack scores 0 on top of a wrong add(), and what the same hack scores on top of the correct one
# (the documented policy): changing the visible tests is tamper whatever the code does; test hooks, pytest
# config and shadowing modules in the workspace are never loaded by the isolated grader (/grader, `python -I`,
# plugin autoload off), so they change nothing; code that ends its own process while it is imported cannot
# be collected (error_in_tests); anything else changes nothing.
EXPECTED = {
    "conftest_forces_pass": ("fail", "pass"),
    "pytest_ini_addopts": ("fail", "pass"),
    "pyproject_addopts": ("fail", "pass"),
    "sitecustomize": ("fail", "pass"),
    "pytest_shadow": ("fail", "pass"),
    "edit_visible_tests": ("tamper", "tamper"),
    "exit_at_import": ("error_in_tests", "error_in_tests"),
    "skiptest_at_import": ("error_in_tests", "error_in_tests"),
    "module_level_skip": ("error_in_tests", "error_in_tests"),
    "sys_exit_at_import": ("error_in_tests", "error_in_tests"),
    "fake_pass_lines": ("fail", "pass"),
    "patched_reports": ("fail", "pass"),
    "atexit_rewrites_report": ("fail", "pass"),
    "background_report_writer": ("fail", "pass"),
    "always_equal": ("fail", None),
}


@pytest.mark.parametrize("name", sorted(HACKS))
def test_hack_scores_zero(name, image):
    files = {"solution.py": WRONG, **HACKS[name]}
    v = grade_files(files, make_task(), image)
    assert (v.solved, v.reward, v.reason) == (False, 0.0, EXPECTED[name][0]), (name, v)


@pytest.mark.parametrize("name", sorted(n for n in HACKS if EXPECTED[n][1]))
def test_hack_on_an_honest_solution_scores_by_policy(name, image):
    files = {"solution.py": WRONG, **HACKS[name]}
    files["solution.py"] = files["solution.py"].replace(WRONG, CORRECT)
    v = grade_files(files, make_task(), image)
    assert v.reason == EXPECTED[name][1] and v.solved == (EXPECTED[name][1] == "pass"), (name, v)


@pytest.mark.slow
@pytest.mark.parametrize("budget", [3, 3.9])
def test_timeout_in_hidden_tests_scores_zero(image, budget):
    """A call into the candidate that never returns is a `timeout`, also with a budget that is not whole
    seconds (mutation testing's are not): the call's own backstop must not fail the test first."""
    slow = b"import time\ndef add(a, b):\n    time.sleep(60)\n    return a + b\n"
    v = grade_files({"solution.py": slow}, make_task(verifier_timeout_sec=budget), image)
    assert (v.solved, v.reason) == (False, "timeout"), v


@pytest.mark.slow
def test_a_candidate_killed_while_its_daemon_holds_the_pipe_ends_its_call_at_once(image):
    """The candidate's process dies (here by its own hand) after leaving a process that inherited its pipe
    to the tests: the call ends when the process does, not at the verifier's deadline."""
    code = (
        b"import os, signal, time\n"
        b"if os.fork() == 0:\n    os.setsid()\n    time.sleep(120)\n    os._exit(0)\n"
        b"os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    v = grade_files({"solution.py": code}, make_task(verifier_timeout_sec=20), image)
    assert (v.solved, v.reason) == (False, "error_in_tests"), v  # its import failed; no wait to time out


def test_null_agent_is_not_solved(image):
    async def main():
        async with DockerPool(warm=0) as pool:
            return await run_attempt(make_task(), null_policy, pool, image, run_id="t", model_name="null")

    rec = run(main())
    assert rec.status == "failed" and not rec.solved


def test_script_evaluator_reads_reward_file(image):
    script = (
        b'if grep -q "^42$" /workspace/out.txt; then echo 1 > "$REWARD_FILE"; '
        b'else echo 0 > "$REWARD_FILE"; fi\n'
    )
    task = Task(
        id="s",
        path=None,
        instruction="x",
        test_files={"test.sh": script},
        evaluator=EvaluatorConfig(kind="script"),
    )
    assert grade_files({"out.txt": b"42\n"}, task, image).solved
    assert not grade_files({"out.txt": b"41\n"}, task, image).solved


def test_answer_evaluator_modes():
    assert answer_matches("hello\n", "hello", "exact")
    assert not answer_matches("Hello", "hello", "exact")
    assert answer_matches("  Hello   World ", "hello world", "normalized")
    assert answer_matches("3.14160", 3.1416, "numeric", 1e-4)
    assert not answer_matches("nan", 3.1416, "numeric")
    assert answer_matches('{"a": [1, 2]}', {"a": [1, 2]}, "json")
    assert answer_matches("id-123", r"id-\d+", "regex")


def test_verdict_fails_closed_without_report():
    assert verdict(None, 0, False, {"tests.t.test_a"}).reason == "no_report"
    assert verdict(b"<testsuites/>", 0, False, {"tests.t.test_a"}).reason == "missing_tests"
    assert verdict(b"x", 137, True, {"tests.t.test_a"}).reason == "timeout"


FORGE = b"""echo nope
for f in "$REWARD_FILE" /grader/reward-*/reward.txt /tmp/*/reward.txt; do
  echo 1 > "$f" 2>/dev/null && chmod 444 "$f" 2>/dev/null
done
(setsid bash -c 'while true; do for f in /grader/reward-*/reward.txt; do echo 1 > $f; done 2>/dev/null; sleep 0.01; done' \\
  >/dev/null 2>&1 &)
"""  # noqa: E501 -- the candidate's script, byte for byte
SCRIPT_VERIFIER = b"""out=$(timeout 10 as-candidate bash run.sh 2>/dev/null)
if [ "$out" = "ok" ]; then echo 1 > "$REWARD_FILE"; else echo 0 > "$REWARD_FILE"; fi
"""


def script_task() -> Task:
    return Task(
        id="s",
        path=None,
        instruction="x",
        test_files={"test.sh": SCRIPT_VERIFIER},
        workspace_files={"run.sh": b"echo todo\n"},
        evaluator=EvaluatorConfig(kind="script"),
    )


@pytest.mark.slow
def test_script_candidate_cannot_forge_the_reward(image):
    """The verifier runs the candidate's run.sh through as-candidate: it cannot reach $REWARD_FILE (not even
    its name) nor the root-only folder it is in; a writer it leaves behind is killed before the read."""
    v = grade_files({"run.sh": FORGE}, script_task(), image)
    assert (v.solved, v.reward, v.reason) == (False, 0.0, "fail"), v
    v = grade_files({"run.sh": FORGE.replace(b"echo nope", b"echo ok")}, script_task(), image)
    assert (v.solved, v.reward, v.reason) == (True, 1.0, "pass"), v


def test_answer_parsers_are_bounded(monkeypatch):
    from evaluators.grading import verdict as grade_mod

    assert not answer_matches("[" * 200_000 + "]" * 200_000, [[]], "json")
    assert answer_matches("[[1]]", [[1]], "json") and grade_mod.json_depth('{"a": "[[[["}') == 1
    assert not answer_matches("x" * (grade_mod.MAX_ANSWER_CHARS + 1), "x", "normalized")
    monkeypatch.setattr(grade_mod, "REGEX_TIMEOUT_SEC", 1.0)
    assert not answer_matches(
        "a" * 40 + "b", r"(a+)+", "regex"
    )  # catastrophic backtracking: cut off, not hung
    assert answer_matches("id-42", r"id-\d+", "regex")


def test_grade_dispatches_through_the_kind_registry(monkeypatch):
    import types

    from evaluators.grading.kind import Kind
    from evaluators.grading.verdict import Verdict
    from tasks import kinds

    assert [kinds.get(k).name for k in kinds.BUILTIN] == list(kinds.BUILTIN)  # each finds its own module
    assert all(isinstance(kinds.get(k), Kind) for k in kinds.task_toml_kinds())

    class Magic(Kind):
        name = "magic"

        async def grade(self, task, sub):
            return Verdict(0.5, False, "fail", detail=f"magic {task.id} {sub.image}")

    monkeypatch.setitem(sys.modules, "magic_kind", types.SimpleNamespace(KIND=Magic()))
    monkeypatch.setattr(kinds, "BUILTIN", dict(kinds.BUILTIN))
    monkeypatch.setattr(kinds, "IN_TASK_TOML", list(kinds.IN_TASK_TOML))
    kinds.register("magic", "magic_kind:KIND")
    v = run(grade(make_task(evaluator=EvaluatorConfig(kind="magic")), Changes(), None, "img"))
    assert (v.reward, v.reason, v.detail) == (0.5, "fail", "magic add img")
    v = run(grade(make_task(evaluator=EvaluatorConfig(kind="unregistered")), Changes(), None, "img"))
    assert v.reason == "grader_error"


def test_an_exception_while_grading_is_that_attempts_failure(image, monkeypatch):
    from evaluators.grading import pytest_kind

    async def broken(*args):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(pytest_kind.KIND, "grade", broken)  # the "pytest" kind's grading
    v = grade_files({"solution.py": CORRECT}, make_task(), image)
    assert (v.solved, v.reward, v.reason) == (False, 0.0, "grader_error") and "RecursionError" in v.detail


EXPECTED_FILE_TEST = b"""import os
import solution

HERE = os.path.dirname(__file__)


def test_output():
    solution.run()
    with open("/workspace/out.txt") as got, open(os.path.join(HERE, "expected.txt")) as want:
        assert got.read() == want.read()


def test_canary_output():
    solution.run()
    assert open("/workspace/out.txt").read() == "never"
"""
LINK_TO_EXPECTED = b"""import glob, os


def run():
    # Point the output at the hidden expected file: the root test runner would read it through the link.
    guesses = ["/grader/tests/expected.txt"] + glob.glob("/grader/*/tests/expected.txt") + \\
        glob.glob("/proc/*/cwd/tests/expected.txt") + glob.glob("/proc/*/root/grader/*/tests/expected.txt")
    for g in guesses:
        if os.path.lexists("/workspace/out.txt"):
            os.remove("/workspace/out.txt")
        os.symlink(g, "/workspace/out.txt")
        if os.path.exists("/workspace/out.txt"):
            break
"""


@pytest.mark.slow
def test_a_link_to_the_hidden_expected_file_leads_nowhere(image):
    """The candidate's code, run by the tests, links its output to where the hidden files might be: they
    are in a folder of random name inside root-only /grader, named nowhere the candidate can read."""
    task = Task(
        id="out",
        path=None,
        instruction="x",
        workspace_files={"solution.py": b"def run():\n    pass\n"},
        test_files={"test_out.py": EXPECTED_FILE_TEST, "expected.txt": b"the answer\n"},
    )
    v = grade_files({"solution.py": LINK_TO_EXPECTED}, task, image)
    assert (v.solved, v.reward, v.reason) == (False, 0.0, "fail"), v
    honest = b"def run():\n    open('/workspace/out.txt', 'w').write('the answer\\n')\n"
    v = grade_files({"solution.py": honest}, task, image)
    assert (v.solved, v.reason) == (True, "pass"), v


def test_the_graders_folders_are_made_the_same_by_a_fork_of_the_server_and_by_sh(image):
    """grade.mkdirs: a fork of the command server where it forks, sh elsewhere (the static helper's
    images may have no python3); either way /grader and the folders made are root's alone (0700: a process
    of the candidate's started in one of them cannot read below it) and the pids counter is read before the
    verifier."""
    from evaluators.grading import grade as grading

    async def main():
        async with DockerPool(warm=0) as pool:
            async with pool.sandbox(image) as sb:
                await sb.exec(["chmod", "0755", "/grader"], 10, user="root", cwd="/")
                forked = await grading.mkdirs(sb, "/grader/a/tmp", "/grader/a/home")
                sb.forks = False
                await sb.exec(["chmod", "0755", "/grader"], 10, user="root", cwd="/")
                by_sh = await grading.mkdirs(sb, "/grader/b/tmp")
                modes = await sb.exec(
                    ["stat", "-c", "%a %U", "/grader", "/grader/a/tmp", "/grader/a/home", "/grader/b/tmp"],
                    10,
                    user="root",
                    cwd="/",
                )
                with pytest.raises(Exception, match="grader's folders"):  # a file in the way
                    sb.forks = True
                    await sb.exec(["touch", "/grader/f"], 10, user="root", cwd="/")
                    await grading.mkdirs(sb, "/grader/f/x")
                return forked, by_sh, modes.stdout.split("\n")

    forked, by_sh, modes = run(main())
    assert isinstance(forked, int) and forked == by_sh  # nothing hit the pid limit in between
    assert modes[:4] == ["700 root"] * 4
