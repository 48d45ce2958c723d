"""The verdict rules of every evaluator kind, in one standard-library-only module: the host graders import it,
and `harness tasks export` copies this very file into each exported task as
tests/harness/verdict.py, where tests/test.sh runs it (`python3 -I verdict.py KIND ...`, the end of this file)
to print the reward. Nothing here may import beyond the standard library.

- pytest: the JUnit report against the exact set of test ids, with canaries that must fail (pytest_verdict)
- answer: an answer file's text against the expected value (answer_verdict, answer_matches)
- script and reward files: the numbers a verifier wrote (parse_reward, parse_number, parse_reward_json,
  reward_files_verdict)
Every reader is bounded (size, JSON depth, regex time) and says what was wrong rather than raise.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

MAX_REPORT_BYTES = 4 << 20
MAX_ANSWER_CHARS = 1 << 20
MAX_JSON_DEPTH = 100
MAX_NUMBER_CHARS = 4096
REGEX_TIMEOUT_SEC = 5.0
CANARY_PREFIX = "test_canary"


@dataclass
class Outcome:
    """One test's outcome; the host records it as results.schema.TestOutcome (same fields)."""

    id: str
    outcome: str  # passed | failed | error | skipped
    message: str = ""


@dataclass
class Verdict:
    """The verdict of one attempt, whatever its kind."""

    reward: float
    solved: bool
    # pass | fail | timeout | no_report | missing_tests | tamper | skipped | error_in_tests | wrong_answer |
    # no_answer | oom | rebuild_failed | grader_error
    reason: str
    tests: list = field(default_factory=list)  # per test (id, outcome, message): results.schema.TestOutcome
    detail: str = ""
    seconds: float = 0.0
    output: str = ""  # the verifier's own output, head and tail (a test.sh's stdout and stderr)
    files: dict[str, bytes] = field(default_factory=dict)  # kept with the attempt (what the verifier left)


def passed(reward: float, detail: str = "") -> Verdict:
    """A verdict from a reward 0..1: solved at 1."""
    return Verdict(reward, reward >= 1.0, "pass" if reward >= 1.0 else "fail", detail=detail)


# ----------------------------------------------------------------------------------------------- pytest


def is_canary(test_id: str) -> bool:
    """A canary must FAIL for every honest candidate (see tasks/model.py). By the task's own name: only for
    ids as the task wrote them (the grader's renamed ids are mapped with task_id first; see
    pytest_kind.Prepared)."""
    return test_id.split("[", 1)[0].rsplit(".", 1)[-1].startswith(CANARY_PREFIX)


def task_id(grader_id: str, names: dict[str, str]) -> str:
    """The task's own id of an id the grader reported: `names` maps the renamed ones back
    (pytest_kind.prepare)."""
    return names.get(grader_id, grader_id)


def pytest_verdict(
    report: Optional[bytes],
    exit_code: int,
    timed_out: bool,
    expected: set[str],
    canaries: Optional[set[str]] = None,
    names: Optional[dict[str, str]] = None,
    outcome: Callable[..., Any] = Outcome,
) -> Verdict:
    """Decides from the report alone, failing closed on anything unexpected. `canaries` defaults to the
    ids named test_canary*; `names` maps reported ids back to the task's own for the record; `outcome`
    makes each test's entry (Outcome, or the record's TestOutcome)."""
    canaries = {i for i in expected if is_canary(i)} if canaries is None else canaries
    names = names or {}
    if timed_out or exit_code in (124, 137, -9):
        return Verdict(0.0, False, "timeout", [], "the hidden tests ran out of time")
    if not report:
        return Verdict(0.0, False, "no_report", [], f"no JUnit report (pytest exit {exit_code})")
    if len(report) > MAX_REPORT_BYTES:  # only pytest writes it (root-only folder): no sign of tampering
        return Verdict(0.0, False, "no_report", [], f"the JUnit report is over {MAX_REPORT_BYTES} bytes")
    if b"<!DOCTYPE" in report or b"<!ENTITY" in report:
        return Verdict(0.0, False, "tamper", [], "report with a DTD")
    try:
        root = ET.fromstring(report)
    except (ET.ParseError, RecursionError) as e:
        return Verdict(0.0, False, "no_report", [], f"unreadable report: {type(e).__name__}")
    outcomes: dict[str, Outcome] = {}
    for case in root.iter("testcase"):
        base = f"{case.get('classname', '')}.{case.get('name', '')}".split("[", 1)[0]
        result, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                result = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or "")[:300]
                break
        # Parametrised cases share a base id: the worst outcome counts.
        prev = outcomes.get(base)
        if prev is None or prev.outcome == "passed":
            outcomes[base] = Outcome(base, result, message)
    reported = set(outcomes)
    tests = [
        outcome(id=task_id(t.id, names), outcome=t.outcome, message=t.message)
        for t in sorted(outcomes.values(), key=lambda t: task_id(t.id, names))
    ]
    real = [t for i, t in outcomes.items() if i not in canaries]
    score = sum(t.outcome == "passed" for t in real) / max(len(expected - canaries), 1)
    unexpected = reported - expected
    if unexpected and all(outcomes[i].outcome == "error" for i in unexpected):
        # pytest reports a file that failed to import as an error of its own (the candidate's module did not
        # load, say): an ordinary failure, not a manipulation
        first = outcomes[sorted(unexpected)[0]].message[:200]
        return Verdict(0.0, False, "error_in_tests", tests, f"tests could not be collected: {first}")
    if unexpected:
        extra = sorted(task_id(i, names) for i in unexpected)
        return Verdict(0.0, False, "tamper", tests, f"unexpected tests reported: {extra[:3]}")
    if expected - reported:
        missing = sorted(task_id(i, names) for i in expected - reported)
        return Verdict(0.0, False, "missing_tests", tests, f"tests not run: {missing[:3]}")
    if any(outcomes[i].outcome != "failed" for i in canaries):
        return Verdict(
            0.0, False, "tamper", tests, "a canary test did not fail: the test run was manipulated"
        )
    if canaries and exit_code != 1:
        return Verdict(0.0, False, "tamper", tests, f"pytest exit {exit_code} contradicts the report")
    if any(t.outcome == "skipped" for t in real):
        return Verdict(0.0, False, "skipped", tests, "tests were skipped")
    if any(t.outcome == "error" for t in real):
        return Verdict(score, False, "error_in_tests", tests, "tests errored")
    if score < 1.0:
        return Verdict(score, False, "fail", tests)
    return Verdict(1.0, True, "pass", tests)


# ----------------------------------------------------------------------------------------------- answer


def answer_verdict(data: Optional[bytes], answer_file: str, expected, mode: str, tolerance: float) -> Verdict:
    """The verdict of an answer file's bytes (None: not written)."""
    if data is None:
        return Verdict(0.0, False, "no_answer", detail=f"{answer_file} was not written")
    got = data.decode("utf-8", "replace")
    if answer_matches(got, expected, mode, tolerance):
        return Verdict(1.0, True, "pass")
    return Verdict(0.0, False, "wrong_answer", detail=unreadable(got, mode))


def answer_matches(got: str, expected, mode: str, tolerance: float = 1e-6) -> bool:
    """Compares an answer file's text with the expected value. Bounded: size, JSON depth, regex time."""
    if len(got) > MAX_ANSWER_CHARS:
        return False
    if mode == "exact":
        return got.rstrip("\n") == str(expected)
    if mode == "normalized":
        norm = lambda s: " ".join(str(s).split()).lower()  # noqa: E731
        return norm(got) == norm(expected)
    if mode == "regex":
        return regex_fullmatch(str(expected), got.strip())
    if mode == "numeric":
        value = parse_number(got.strip().replace(",", ""), "the answer")
        if isinstance(value, str):
            return False
        return abs(value - float(expected)) <= tolerance * max(1.0, abs(float(expected)))
    if mode == "json":
        if json_depth(got) > MAX_JSON_DEPTH:
            return False
        try:
            return json.loads(got) == (json.loads(expected) if isinstance(expected, str) else expected)
        except (ValueError, RecursionError):
            return False
    raise ValueError(f"unknown answer mode {mode!r}")


def unreadable(got: str, mode: str) -> str:
    """Why a wrong answer could not even be read as its mode asks ("" when it could: just wrong)."""
    if len(got) > MAX_ANSWER_CHARS:
        return f"the answer is {len(got)} characters: over the limit of {MAX_ANSWER_CHARS}"
    if mode == "numeric":
        value = parse_number(got.strip().replace(",", ""), "the answer")
        return value if isinstance(value, str) else ""
    if mode == "json":
        if json_depth(got) > MAX_JSON_DEPTH:
            return f"the answer is nested deeper than {MAX_JSON_DEPTH} levels"
        try:
            json.loads(got)
        except (ValueError, RecursionError) as e:
            return f"the answer is not JSON ({str(e)[:80]})"
    return ""


def json_depth(text: str) -> int:
    """The deepest nesting of brackets outside strings (without parsing: deep input cannot recurse)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def regex_fullmatch(pattern: str, text: str) -> bool:
    """In a child process with a time limit: a pathological answer cannot hang the grader."""
    code = (
        "import json, re, sys\np, t = json.load(sys.stdin)\n"
        "sys.exit(0 if re.fullmatch(p, t, flags=re.DOTALL) else 1)\n"
    )
    try:
        r = subprocess.run(
            [sys.executable, "-I", "-c", code],
            input=json.dumps([pattern, text]).encode(),
            capture_output=True,
            timeout=REGEX_TIMEOUT_SEC,
        )
    except subprocess.TimeoutExpired:
        return False
    return r.returncode == 0


# -------------------------------------------------------------------------------------------- reward files
# One bounded reader for every number the harness reads from a file (reward files, numeric answers): a size
# bound before any parsing, plain decimal notation only, and a finite value; anything else is a message
# saying what was wrong, never an exception.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_reward(raw: Optional[bytes]) -> float | str:
    """The number a test.sh wrote, or why there is none."""
    if raw is None:
        return "test.sh wrote no reward file"
    reward = parse_number(raw, "the reward file")
    if isinstance(reward, str):
        return reward
    if not 0.0 <= reward <= 1.0:
        return f"reward {reward} outside 0..1"
    return reward


def parse_number(raw: bytes | str, what: str) -> float | str:
    """The finite number in `raw` (surrounding white space allowed), or why there is none."""
    if len(raw) > MAX_NUMBER_CHARS:
        return f"{what} is over {MAX_NUMBER_CHARS} bytes long: too long for a number"
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return f"{what} is not text: {raw[:40]!r}"
    text = raw.strip()
    if not _NUMBER.fullmatch(text):
        if text.lstrip("+-").lower() in ("nan", "inf", "infinity"):
            return f"{what} is {text}: a non-finite number"
        return f"{what} is not a number: {text[:40]!r}"
    value = float(text)  # digits only: cannot raise; too large -> inf
    if not math.isfinite(value):
        short = text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
        return f"{what} is {short}: too large for a float (the limit is about 1.8e308)"
    return value


def shown(text: str, limit: int = 80) -> str:
    """A name for a message: its repr (odd characters escaped), long ones cut in the middle."""
    text = repr(text)[1:-1]
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]}"


def parse_reward_json(
    raw: bytes, what: str = "reward.json", max_bytes: int = 1 << 20
) -> dict[str, float] | str:
    """Named finite numbers from a JSON object (a bare number is named "reward"), or why there are none:
    bounded in size and nesting before parsing, integers of any length, NaN and infinities refused by name."""
    if len(raw) > max_bytes:
        return f"{what} is over {max_bytes} bytes: too large for named numbers"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"{what} is not UTF-8 text: {raw[:40]!r}"
    if json_depth(text) > MAX_JSON_DEPTH:
        return f"{what} is nested deeper than {MAX_JSON_DEPTH} levels"
    try:  # numbers stay text here, checked one by one below: no int of 5,000 digits, no NaN gets through
        data = json.loads(text, parse_int=_JsonNumber, parse_float=_JsonNumber, parse_constant=_JsonNumber)
    except (ValueError, RecursionError) as e:
        return f"{what} is not JSON ({str(e)[:80]})"
    data = data if isinstance(data, dict) else {"reward": data}
    if not data:
        return f"{what} names no reward"
    rewards: dict[str, float] = {}
    for key, value in data.items():
        if not isinstance(value, _JsonNumber):
            return f"{what} must map names to numbers: '{shown(str(key))}' is {type(value).__name__}"
        number = parse_number(value, f"{what}'s '{shown(str(key))}'")
        if isinstance(number, str):
            return number
        rewards[str(key)] = number
    return rewards


class _JsonNumber(str):
    """A number's text as json read it (parse_number decides what it is worth)."""


def script_verdict(raw: Optional[bytes]) -> Verdict:
    """The verdict of a script's reward file (None: not written)."""
    reward = parse_reward(raw)
    if isinstance(reward, str):
        return Verdict(0.0, False, "no_report", detail=reward)
    return passed(reward)


def reward_files_verdict(
    reward_txt: Optional[bytes],
    reward_json: Optional[bytes],
    where: str,
    tail: str = "",
    max_bytes: int = 1 << 20,
) -> Verdict:
    """The verdict from a verifier's reward files in the folder `where`: reward.json (named numbers) wins over
    reward.txt (one number). Every named reward is recorded in the detail; the task's
    reward is "reward" when present, else the only value, else the mean of them all. Solved means a task
    reward of at least 1."""
    if reward_json is not None:
        rewards = parse_reward_json(reward_json, max_bytes=max_bytes)
    elif reward_txt is not None:
        value = parse_number(reward_txt, "reward.txt")
        rewards = value if isinstance(value, str) else {"reward": value}
    else:
        detail = f"test.sh wrote neither {where}/reward.txt nor reward.json; output: {tail}"
        return Verdict(0.0, False, "no_report", detail=detail)
    if isinstance(rewards, str):  # what was wrong with the file, bounded and without a traceback
        return Verdict(0.0, False, "no_report", detail=rewards)
    key = "reward" if "reward" in rewards else (next(iter(rewards)) if len(rewards) == 1 else None)
    value = rewards[key] if key else sum(v / len(rewards) for v in rewards.values())  # no overflow
    reward = min(max(value, 0.0), 1.0)
    which = f"task reward = {key!r}" if key else "task reward = mean of all"
    return passed(reward, f"rewards {json.dumps(rewards, sort_keys=True)}; {which}")


# ------------------------------------------------------------------------------------ in an exported task
# tests/test.sh of an exported task runs `python3 -I /tests/harness/verdict.py KIND ARGS...` as root; the
# files under /tests/harness say what is expected (evaluators/harbor_export.py writes them). It prints the
# reward.
EXPORTED = "/tests/harness"


def _read(path: str, max_bytes: int) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            return f.read(max_bytes + 1)
    except OSError:
        return None


def exported_verdict(argv: list[str], folder: str = EXPORTED) -> Verdict:
    """The verdict in an exported task: `pytest REPORT EXIT_CODE`, `answer`, or `script REWARD_FILE`."""
    kind = argv[0]
    if kind == "pytest":
        with open(f"{folder}/expected.json") as f:
            expected = set(json.load(f))
        with open(f"{folder}/canaries.json") as f:
            canaries = set(json.load(f))  # which of those are canaries, decided by harness
        report = _read(argv[1], MAX_REPORT_BYTES)
        return pytest_verdict(report, int(argv[2]), False, expected, canaries)
    if kind == "answer":
        with open(f"{folder}/answer.json") as f:
            spec = json.load(f)
        data = _read(f"/workspace/{spec['answer_file']}", 4 * MAX_ANSWER_CHARS)
        return answer_verdict(data, spec["answer_file"], spec["expected"], spec["mode"], spec["tolerance"])
    if kind == "script":
        return script_verdict(_read(argv[1], MAX_NUMBER_CHARS))
    raise ValueError(f"unknown evaluator kind {kind!r}")


if __name__ == "__main__":
    try:
        v = exported_verdict(sys.argv[1:])
    except (OSError, ValueError, KeyError, IndexError) as e:  # a broken export: no reward, and why
        v = Verdict(0.0, False, "grader_error", detail=f"{type(e).__name__}: {e}")
    print(v.reward)
    if v.detail:
        print(f"{v.reason}: {v.detail}", file=sys.stderr)
