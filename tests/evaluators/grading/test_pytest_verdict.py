"""evaluators/grading/verdict.pytest_verdict: the verdict read from a JUnit report fails closed on anything
unexpected.

Reports are written here by hand (each case one literal), plus one written by real pytest (the judge of what
a real report looks like: parametrised ids, classes, skips). Expected verdicts are literals.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from evaluators.grading.hidden_tests import expected_ids
from evaluators.grading.verdict import pytest_verdict as verdict

EXPECTED = {"tests.test_a.test_one", "tests.test_a.test_two", "tests.test_a.test_canary_impossible"}
OK, FAIL, ERROR, SKIP = (
    "",
    '<failure message="assert 1 == 2">x</failure>',
    '<error message="boom">x</error>',
    '<skipped type="pytest.skip" message="later">x</skipped>',
)


def case(name: str, body: str = OK, classname: str = "tests.test_a") -> str:
    return f'<testcase classname="{classname}" name="{name}" time="0.001">{body}</testcase>'


def report(*cases: str, head: str = "") -> bytes:
    return (
        f'{head}<?xml version="1.0" encoding="utf-8"?>'
        f'<testsuites><testsuite name="pytest" tests="{len(cases)}">'
        + "".join(cases)
        + "</testsuite></testsuites>"
    ).encode()


HONEST = report(case("test_one"), case("test_two"), case("test_canary_impossible", FAIL))


def outcome(rep: bytes, exit_code: int = 1, timed_out: bool = False, expected=EXPECTED):
    v = verdict(rep, exit_code, timed_out, set(expected))
    return v.reason, v.reward, v.solved


def test_honest_report_passes_with_the_tests_listed():
    v = verdict(HONEST, 1, False, set(EXPECTED))
    assert (v.reason, v.reward, v.solved) == ("pass", 1.0, True)
    assert [(t.id, t.outcome) for t in v.tests] == [
        ("tests.test_a.test_canary_impossible", "failed"),
        ("tests.test_a.test_one", "passed"),
        ("tests.test_a.test_two", "passed"),
    ]


def test_one_of_two_failing_is_half_reward():
    rep = report(case("test_one"), case("test_two", FAIL), case("test_canary_impossible", FAIL))
    assert outcome(rep) == ("fail", 0.5, False)


def test_all_failing_is_zero():
    rep = report(case("test_one", FAIL), case("test_two", FAIL), case("test_canary_impossible", FAIL))
    assert outcome(rep) == ("fail", 0.0, False)


@pytest.mark.parametrize("exit_code,timed_out", [(1, True), (124, False), (137, False), (-9, False)])
def test_timeout(exit_code, timed_out):
    assert outcome(HONEST, exit_code, timed_out) == ("timeout", 0.0, False)


@pytest.mark.parametrize("rep", [None, b""])
def test_no_report(rep):
    assert outcome(rep) == ("no_report", 0.0, False)


def test_unreadable_report():
    assert outcome(HONEST[:-20]) == ("no_report", 0.0, False)


def test_report_size_limit_is_exactly_four_mebibytes():
    # Padding inside the XML (a comment) keeps the report valid: only its size differs.
    def padded(size: int) -> bytes:
        base = report(case("test_one"), case("test_two"), case("test_canary_impossible", FAIL))
        pad = size - len(base) - len("<!---->")
        return base.replace(b"<testsuites>", b"<!--" + b" " * pad + b"--><testsuites>", 1)

    at_limit, over = padded(4 * 1024 * 1024), padded(4 * 1024 * 1024 + 1)
    assert (len(at_limit), len(over)) == (4194304, 4194305)
    assert outcome(at_limit) == ("pass", 1.0, True)
    # only pytest writes the report (a root-only folder): too large is no report, not tampering
    assert outcome(over) == ("no_report", 0.0, False)


@pytest.mark.parametrize(
    "head", ['<!DOCTYPE x [<!ENTITY a "b">]>', '<!ENTITY a "b">', "<!DOCTYPE testsuites>"]
)
def test_report_with_a_dtd_is_tamper(head):
    rep = HONEST.replace(b"<testsuites>", head.encode() + b"<testsuites>", 1)
    assert outcome(rep) == ("tamper", 0.0, False)


def test_unexpected_test_id_is_tamper():
    rep = report(case("test_one"), case("test_two"), case("test_canary_impossible", FAIL), case("test_bonus"))
    v = verdict(rep, 1, False, set(EXPECTED))
    assert (v.reason, v.reward, v.solved) == ("tamper", 0.0, False)
    assert "tests.test_a.test_bonus" in v.detail


def test_a_test_reported_under_another_class_is_unexpected():
    rep = report(
        case("test_one", classname="tests.test_a.TestX"),
        case("test_two"),
        case("test_canary_impossible", FAIL),
    )
    assert outcome(rep) == ("tamper", 0.0, False)


def test_missing_test():
    rep = report(case("test_one"), case("test_canary_impossible", FAIL))
    v = verdict(rep, 1, False, set(EXPECTED))
    assert (v.reason, v.reward, v.solved) == ("missing_tests", 0.0, False)
    assert "tests.test_a.test_two" in v.detail


@pytest.mark.parametrize("canary", [OK, SKIP, ERROR])
def test_canary_that_did_not_fail_is_tamper(canary):
    rep = report(case("test_one"), case("test_two"), case("test_canary_impossible", canary))
    assert outcome(rep) == ("tamper", 0.0, False)


@pytest.mark.parametrize("exit_code", [0, 2, 3, 4, 5])
def test_exit_code_that_contradicts_the_report_is_tamper(exit_code):
    # A failing canary means pytest exits 1; anything else means the report is not what pytest saw.
    assert outcome(HONEST, exit_code) == ("tamper", 0.0, False)


def test_skipped_test_scores_zero():
    rep = report(case("test_one"), case("test_two", SKIP), case("test_canary_impossible", FAIL))
    assert outcome(rep) == ("skipped", 0.0, False)


def test_errored_test_is_not_solved_and_keeps_partial_reward():
    rep = report(case("test_one"), case("test_two", ERROR), case("test_canary_impossible", FAIL))
    assert outcome(rep) == ("error_in_tests", 0.5, False)


@pytest.mark.parametrize("order", [("ok", "bad"), ("bad", "ok")])
def test_parametrized_cases_count_as_one_test_with_the_worst_outcome(order):
    body = {"ok": OK, "bad": FAIL}
    rep = report(
        case(f"test_one[{order[0]}]", body[order[0]]),
        case(f"test_one[{order[1]}]", body[order[1]]),
        case("test_two"),
        case("test_canary_impossible", FAIL),
    )
    v = verdict(rep, 1, False, set(EXPECTED))
    assert (v.reason, v.reward, v.solved) == ("fail", 0.5, False)
    assert {t.id: t.outcome for t in v.tests}["tests.test_a.test_one"] == "failed"


def test_all_parametrized_cases_passing_pass():
    rep = report(
        case("test_one[1]"), case("test_one[2-x]"), case("test_two"), case("test_canary_impossible", FAIL)
    )
    assert outcome(rep) == ("pass", 1.0, True)


HIDDEN = b"""import pytest

@pytest.mark.parametrize("x", [1, 2, 3])
def test_param(x):
    assert x != 2

class TestGroup:
    def test_method(self):
        assert True

def test_plain():
    assert True

def test_canary_impossible():
    assert 1 == 2
"""


def test_a_report_written_by_real_pytest(tmp_path):
    """Real pytest writes the report (same layout and flags as the grader): ids match expected_ids()."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_h.py").write_bytes(HIDDEN)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    out = tmp_path / "report.xml"
    p = subprocess.run(
        [
            sys.executable,
            "-I",
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-c",
            str(tmp_path / "pytest.ini"),
            f"--rootdir={tmp_path}",
            "-o",
            "junit_family=xunit2",
            f"--junitxml={out}",
            "-q",
            str(tmp_path / "tests"),
        ],
        capture_output=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    expected = expected_ids({"test_h.py": HIDDEN})
    assert expected == {
        "tests.test_h.test_param",
        "tests.test_h.TestGroup.test_method",
        "tests.test_h.test_plain",
        "tests.test_h.test_canary_impossible",
    }
    v = verdict(out.read_bytes(), p.returncode, False, expected)
    assert (p.returncode, v.reason, v.reward, v.solved) == (1, "fail", 2 / 3, False)
    assert {t.id: t.outcome for t in v.tests} == {
        "tests.test_h.test_param": "failed",
        "tests.test_h.TestGroup.test_method": "passed",
        "tests.test_h.test_plain": "passed",
        "tests.test_h.test_canary_impossible": "failed",
    }
