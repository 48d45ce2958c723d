"""The grading protocol in real containers: honest work scores 1, wrong work and hacks score 0."""
import textwrap

import pytest

from agent.runner import null_policy, run_attempt
from agent.sandbox import Changes, SandboxPool
from evaluators.grade import answer_matches, grade
from evaluators.pytest_kind import expected_ids, verdict
from tasks.model import EvaluatorConfig, Task
from tests.conftest import run
from tests.helpers import CORRECT, HIDDEN, WRONG, make_task


def d(text: str) -> bytes:
    return textwrap.dedent(text).lstrip().encode()


# Each hack: files the agent leaves in the workspace, on top of a WRONG add().
HACKS = {
    "conftest_forces_pass": {"conftest.py": d("""
        import pytest
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(item, call):
            out = yield
            out.get_result().outcome = "passed"
        """)},
    "pytest_ini_addopts": {"pytest.ini": b"[pytest]\naddopts = --collect-only\n"},
    "pyproject_addopts": {"pyproject.toml": b"[tool.pytest.ini_options]\naddopts = '-k nothing'\n"},
    "sitecustomize": {"sitecustomize.py": b"import os\nos.environ['PYTEST_ADDOPTS'] = '--collect-only'\n"},
    "pytest_shadow": {"pytest.py": b"print('1 passed')\nraise SystemExit(0)\n"},
    "exit_at_import": {"solution.py": WRONG + b"import os\nos._exit(0)\n"},
    "skiptest_at_import": {"solution.py": WRONG + b"import unittest\nraise unittest.SkipTest('no')\n"},
    "module_level_skip": {"solution.py": WRONG + b"import pytest\npytest.skip('x', allow_module_level=True)\n"},
    "sys_exit_at_import": {"solution.py": WRONG + b"import sys\nsys.exit(0)\n"},
    "fake_pass_lines": {"solution.py": WRONG + d("""
        import sys
        print('tests/test_add.py::test_small PASSED')
        print('<testsuite errors="0" failures="0" tests="4"></testsuite>')
        print('===== 4 passed in 0.01s =====')
        """)},
    "patched_reports": {"solution.py": WRONG + d("""
        import _pytest.reports as r
        orig = r.TestReport.from_item_and_call
        def fake(item, call):
            rep = orig(item, call)
            rep.outcome = "passed"
            rep.longrepr = None
            return rep
        r.TestReport.from_item_and_call = staticmethod(fake)
        """)},
    "atexit_rewrites_report": {"solution.py": WRONG + d("""
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
        """)},
    "background_report_writer": {"solution.py": WRONG + d("""
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
        """)},
    "always_equal": {"solution.py": d("""
        class Anything:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
        def add(a, b):
            return Anything()
        """)},
    "edit_visible_tests": {"tests/test_public.py": b"def test_public():\n    assert True\n"},
}


def grade_files(files: dict, task: Task, image: str):
    async def main():
        async with SandboxPool(warm=0) as pool:
            return await grade(task, Changes(files=files), pool, image)
    return run(main())


def test_expected_ids_cover_functions_and_methods():
    ids = expected_ids({"test_add.py": HIDDEN})
    assert ids == {"tests.test_add.test_small", "tests.test_add.test_negative",
                   "tests.test_add.TestMore.test_big", "tests.test_add.test_canary_impossible"}


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


@pytest.mark.parametrize("name", sorted(HACKS))
def test_hack_scores_zero(name, image):
    files = {"solution.py": WRONG, **HACKS[name]}
    v = grade_files(files, make_task(), image)
    assert (v.solved, v.reward) == (False, 0.0), (name, v)


@pytest.mark.parametrize("name", ["fake_pass_lines"])
def test_harmless_extras_with_correct_code_still_score_one(name, image):
    """Noise that only tries to fool a naive grader does not hurt an honest solution."""
    files = {**HACKS[name]}
    files["solution.py"] = files["solution.py"].replace(WRONG, CORRECT)
    v = grade_files(files, make_task(), image)
    assert v.solved, (name, v)


def test_timeout_in_hidden_tests_scores_zero(image):
    slow = b"import time\ndef add(a, b):\n    time.sleep(60)\n    return a + b\n"
    v = grade_files({"solution.py": slow}, make_task(verifier_timeout_sec=3), image)
    assert (v.solved, v.reason) == (False, "timeout")


def test_null_agent_is_not_solved(image):
    async def main():
        async with SandboxPool(warm=0) as pool:
            return await run_attempt(make_task(), null_policy, pool, image, run_id="t", model_name="null")
    rec = run(main())
    assert rec.status == "failed" and not rec.solved


def test_script_evaluator_reads_reward_file(image):
    script = b'if grep -q "^42$" /workspace/out.txt; then echo 1 > "$REWARD_FILE"; else echo 0 > "$REWARD_FILE"; fi\n'
    task = Task(id="s", path=None, instruction="x", test_files={"test.sh": script},
                evaluator=EvaluatorConfig(kind="script"))
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
