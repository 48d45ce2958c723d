"""Hidden pytest tests: how they are run in the grading container and how the verdict is read.

The verdict comes only from a JUnit XML file at a path the harness chose, parsed here on the host,
checked against the exact set of test ids the hidden files define, plus canary tests
(`test_canary*`) that call the candidate with an impossible expectation and must FAIL.
"""
from __future__ import annotations

import ast
import secrets
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from results.schema import TestOutcome

GRADER = "/grader"
# Puts the workspace at the END of sys.path: its modules import, but cannot shadow anything.
GRADER_CONFTEST = b"import sys\nsys.path.append('/workspace')\n"
GRADER_INI = b"[pytest]\naddopts = -p no:cacheprovider\n"
MAX_REPORT_BYTES = 4 << 20


def expected_ids(test_files: dict[str, bytes]) -> set[str]:
    """Dotted ids (tests.test_x.TestC.test_f) of every test the hidden files define."""
    ids = set()
    for path, data in test_files.items():
        name = path.rsplit("/", 1)[-1]
        if not (name.startswith("test_") and name.endswith(".py")):
            continue
        module = "tests." + path[:-3].replace("/", ".")
        for node in ast.parse(data).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                ids.add(f"{module}.{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                        ids.add(f"{module}.{node.name}.{item.name}")
    return ids


def is_canary(test_id: str) -> bool:
    return test_id.rsplit(".", 1)[-1].startswith("test_canary")


def command(timeout: float) -> tuple[list[str], str]:
    """The pytest command line and the report path (a fresh, unguessable name per run)."""
    report = f"/tmp/{secrets.token_hex(8)}/report.xml"
    argv = ["timeout", "-s", "KILL", str(int(timeout)), "/usr/bin/python3", "-I", "-m", "pytest",
            "-p", "no:cacheprovider", "-c", f"{GRADER}/pytest.ini", f"--rootdir={GRADER}",
            f"--confcutdir={GRADER}", "-o", "junit_family=xunit2", f"--junitxml={report}", "-q",
            f"{GRADER}/tests"]
    return argv, report


# A clean environment: nothing the candidate could have set survives into the test run.
CLEAN_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "WORKSPACE": "/workspace",
             "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}


@dataclass
class PytestVerdict:
    reward: float
    solved: bool
    reason: str
    tests: list[TestOutcome]
    detail: str = ""


def verdict(report: bytes | None, exit_code: int, timed_out: bool, expected: set[str]) -> PytestVerdict:
    """Decides from the report alone, failing closed on anything unexpected."""
    if timed_out or exit_code in (124, 137, -9):
        return PytestVerdict(0.0, False, "timeout", [], "the hidden tests ran out of time")
    if not report:
        return PytestVerdict(0.0, False, "no_report", [], f"no JUnit report (pytest exit {exit_code})")
    if len(report) > MAX_REPORT_BYTES or b"<!DOCTYPE" in report or b"<!ENTITY" in report:
        return PytestVerdict(0.0, False, "tamper", [], "report too large or with a DTD")
    try:
        root = ET.fromstring(report)
    except ET.ParseError as e:
        return PytestVerdict(0.0, False, "no_report", [], f"unreadable report: {e}")
    outcomes: dict[str, TestOutcome] = {}
    for case in root.iter("testcase"):
        base = f"{case.get('classname', '')}.{case.get('name', '')}".split("[", 1)[0]
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or "")[:300]
                break
        # Parametrised cases share a base id: the worst outcome counts.
        prev = outcomes.get(base)
        if prev is None or prev.outcome == "passed":
            outcomes[base] = TestOutcome(id=base, outcome=outcome, message=message)
    tests = sorted(outcomes.values(), key=lambda t: t.id)
    real = [t for t in tests if not is_canary(t.id)]
    score = sum(t.outcome == "passed" for t in real) / max(len(expected - {i for i in expected if is_canary(i)}), 1)
    reported = set(outcomes)
    if reported - expected:
        return PytestVerdict(0.0, False, "tamper", tests, f"unexpected tests reported: {sorted(reported - expected)[:3]}")
    if expected - reported:
        return PytestVerdict(0.0, False, "missing_tests", tests, f"tests not run: {sorted(expected - reported)[:3]}")
    canaries = [t for t in tests if is_canary(t.id)]
    if any(t.outcome != "failed" for t in canaries):
        return PytestVerdict(0.0, False, "tamper", tests, "a canary test did not fail: the test run was manipulated")
    if canaries and exit_code != 1:
        return PytestVerdict(0.0, False, "tamper", tests, f"pytest exit {exit_code} contradicts the report")
    if any(t.outcome == "skipped" for t in real):
        return PytestVerdict(0.0, False, "skipped", tests, "tests were skipped")
    if any(t.outcome == "error" for t in real):
        return PytestVerdict(score, False, "error_in_tests", tests, "tests errored")
    if score < 1.0:
        return PytestVerdict(score, False, "fail", tests)
    return PytestVerdict(1.0, True, "pass", tests)
