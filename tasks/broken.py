"""A labelled set of planted broken tasks, to measure what `harness tasks validate` and `harness tasks audit`
find (bench/broken_tasks.py measures; tests/tasks/test_broken_tasks.py keeps a slice in the suite).

Each broken task is a built-in task with one planted defect of a known class; each clean control is a
built-in task written out unchanged by the same writer, so a control flagged is a false positive. The set
is deterministic: the same built-in tasks, the same change, the same ids (`<class>--<task>`, `clean--<task>`).
`write_broken_set(out)` writes the task folders and labels.json (id -> class, base task, kind, change).

The classes (CLASSES) and how a validate problem or an audit verdict reads as one (`found_classes`) live
here together, so the measurement and its test agree on what "detected as class X" means.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

from results.errors import UserError
from tasks.impossible import changed, make_variant, write_task
from tasks.model import Task

CLEAN = "clean"
# class -> what it plants (the docs table repeats this)
CLASSES = {
    "wrong-test": "one expected value of the hidden tests changed (an answer task's: a number 10% off)",
    "impossible-spec": "a second copy of a test that expects a different value: no solution passes both",
    "oracle-fails": "the oracle stops half-way (exit before its work) or writes a stale answer",
    "flaky": "a test whose verdict depends on hash order or a random draw",
    "leak-instruction": "the oracle's script, or the expected answer, pasted into the instruction",
    "leak-image": "the oracle's files copied into the starting files (.solution/)",
    "null-pass": "tests the untouched workspace passes (they check only the names, a reward written first)",
    "network": "a test that fetches reference data from a URL (the verifier has no network)",
    "clock": "a test that reads today's date (a time bomb, or one already expired)",
    "verifier-crash": "a test fixture or the test script reads a file that is not there",
}

# (class, built-in task id, how) -- several kinds per class; `how` picks a variant of the plant
PLAN: list[tuple[str, str, str]] = [
    ("wrong-test", "fizzbuzz", ""),
    ("wrong-test", "newton-root", ""),
    ("wrong-test", "score-stats", ""),
    ("wrong-test", "csv-sum", ""),
    ("wrong-test", "log-top-ip", ""),
    ("impossible-spec", "roman-numerals", ""),
    ("impossible-spec", "merge-intervals", ""),
    ("impossible-spec", "extract-emails", ""),
    ("impossible-spec", "linear-system", ""),
    ("oracle-fails", "parse-duration", "exit"),
    ("oracle-fails", "fix-backup-script", "exit"),
    ("oracle-fails", "hottest-city", "stale"),
    ("oracle-fails", "log-root-cause", "stale"),
    ("flaky", "slugify", "order"),
    ("flaky", "markdown-toc", "random"),
    ("flaky", "score-stats", "random"),
    ("flaky", "make-executable-01", "random"),
    ("leak-instruction", "lru-cache", ""),
    ("leak-instruction", "fix-backup-script", ""),
    ("leak-instruction", "csv-sum", ""),
    ("leak-instruction", "log-top-ip", ""),
    ("leak-image", "fizzbuzz", ""),
    ("leak-image", "text-wrap", ""),
    ("leak-image", "score-stats", ""),
    ("leak-image", "largest-eigenvalue", ""),
    ("null-pass", "roman-numerals", ""),
    ("null-pass", "json-merge", ""),
    ("null-pass", "fix-backup-script", ""),
    ("null-pass", "hottest-city", ""),
    ("network", "parse-duration", ""),
    ("network", "csv-to-markdown", ""),
    ("network", "score-stats", ""),
    ("network", "archive-logs-01", ""),
    ("clock", "merge-intervals", "bomb"),
    ("clock", "json-to-csv", "expired"),
    ("clock", "fix-backup-script", "bomb"),
    ("clock", "fix-operator-01", "expired"),
    ("verifier-crash", "fizzbuzz", "fixture"),
    ("verifier-crash", "least-squares-fit", "import"),
    ("verifier-crash", "score-stats", ""),
    ("verifier-crash", "archive-logs-01", ""),
]
# invoice-fields' expected answer is a table, which tasks/impossible.py's writer does not write
NOT_WRITTEN = {"invoice-fields"}

BAD_URL = "https://reference-data.invalid/expected.json"  # .invalid never resolves (RFC 2606)


# --------------------------------------------------------------------------------------------- plants


def _kind(task: Task) -> str:
    return task.evaluator.kind


def _test_file(task: Task) -> str:
    """The hidden test file a plant edits: the first test_*.py (pytest) or test.sh (script)."""
    names = sorted(task.test_files)
    want = "test.sh" if _kind(task) == "script" else None
    for name in names:
        if (want and name.endswith(want)) or (not want and name.rsplit("/", 1)[-1].startswith("test_")):
            return name
    raise ValueError(f"{task.id}: no hidden test file to edit")


def _append(task: Task, text: str, name: str = "") -> Task:
    """The hidden test file (a named one, or the one _test_file picks) with `text` added at its end."""
    name = name or _test_file(task)
    files = dict(task.test_files)
    files[name] = files.get(name, b"").rstrip(b"\n") + b"\n\n" + text.encode() + b"\n"
    return replace(task, test_files=files)


def _script_first(task: Task, text: str) -> Task:
    """test.sh with `text` run first, after its #! line."""
    name = _test_file(task)
    src = task.test_files[name].decode()
    head, _, rest = src.partition("\n")
    files = {**task.test_files, name: f"{head}\n{text}\n{rest}".encode()}
    return replace(task, test_files=files)


def _answer(task: Task):
    return task.evaluator.settings


def _with_answer(task: Task, **kw) -> Task:
    ev = task.evaluator
    return replace(task, evaluator=replace(ev, settings=replace(ev.settings, **kw)))


def wrong_test(task: Task, how: str) -> tuple[Task, str]:
    if _kind(task) == "answer":
        old = _answer(task).expected
        # a number 10% off: numeric answers have a relative tolerance (csv-sum's 0.005 allows +-9.9)
        new = round(old * 1.1 + 1, 6) if _answer(task).mode == "numeric" else changed(old)
        return _with_answer(task, expected=new), f"expected answer {old!r} -> {new!r}"
    variant, note = make_variant(task)  # ImpossibleBench's one-off change, without the "impossible" tag
    if variant is None:
        raise ValueError(f"{task.id}: {note}")
    return replace(task, test_files=variant.test_files), note


def impossible_spec(task: Task, how: str) -> tuple[Task, str]:
    """ImpossibleBench's "conflicting" variant: the original tests and a copy expecting another value."""
    variant, note = make_variant(task)
    if variant is None or _kind(task) != "pytest":
        raise ValueError(f"{task.id}: no conflicting copy ({note})")
    name = _test_file(task)
    copy = name.rsplit("/", 1)
    copy[-1] = "test_also_" + copy[-1][len("test_") :]
    files = {**task.test_files, "/".join(copy): variant.test_files[name]}
    return replace(task, test_files=files), f"{'/'.join(copy)}: a copy of {name} with {note}"


def oracle_fails(task: Task, how: str) -> tuple[Task, str]:
    solve = task.solution_files["solve.sh"].decode()
    if how == "stale":  # the oracle's answer is overwritten with an old value
        line = f"echo 0 > {_answer(task).answer_file}  # the answer of an earlier version of the data"
        new, note = solve.rstrip("\n") + "\n" + line + "\n", "solve.sh ends by writing a stale answer"
    else:  # the oracle is left half-done: it stops before its work
        head, _, rest = solve.partition("\n")
        new, note = f"{head}\nexit 0  # TODO finish the reference solution\n{rest}", "solve.sh exits first"
    return replace(task, solution_files={**task.solution_files, "solve.sh": new.encode()}), note


FLAKY_PY = {
    "order": """def test_tags_in_order():
    tags = {"alpha", "beta", "gamma", "delta"}
    assert next(iter(tags)) in ("alpha", "beta")  # set order follows the string hash: random per process""",
    "random": """def test_sampled_inputs():
    import random

    assert random.random() < 0.5  # a sample the check rejects half the time""",
}
FLAKY_SH = '[ $((RANDOM % 2)) -eq 0 ] || echo 0 > "$REWARD_FILE"  # a sampled input the check rejects'


def flaky(task: Task, how: str) -> tuple[Task, str]:
    if _kind(task) == "script":
        return _append(task, FLAKY_SH), "test.sh zeroes the reward on half its runs ($RANDOM)"
    return _append(task, FLAKY_PY[how]), f"a test that passes by {how} half the time"


def leak_instruction(task: Task, how: str) -> tuple[Task, str]:
    if _kind(task) == "answer":
        text = f"\n\n(Reviewer note: the expected answer is {_answer(task).expected}.)\n"
        return replace(task, instruction=task.instruction + text), "the expected answer in the instruction"
    solve = task.solution_files["solve.sh"].decode()
    text = f"\n\nA reference solution, for the reviewers:\n\n```bash\n{solve}```\n"
    return replace(task, instruction=task.instruction + text), "solve.sh in the instruction"


def leak_image(task: Task, how: str) -> tuple[Task, str]:
    files = {**task.workspace_files, **{f".solution/{p}": d for p, d in task.solution_files.items()}}
    return replace(task, workspace_files=files), "solution/ copied to the starting files' .solution/"


def null_pass(task: Task, how: str) -> tuple[Task, str]:
    kind = _kind(task)
    if kind == "answer":
        ev = _answer(task)
        files = {**task.workspace_files, ev.answer_file: f"{ev.expected}\n".encode()}
        return replace(task, workspace_files=files), f"{ev.answer_file} with the answer in the starting files"
    if kind == "script":
        return _script_first(task, 'echo 1 > "$REWARD_FILE"; exit 0  # TODO the real checks'), (
            "test.sh writes reward 1 first"
        )
    # pytest: the tests check only that the names exist (the canaries stay, so the run is not tamper)
    name = _test_file(task)
    src = task.test_files[name].decode()
    tree = ast.parse(src)
    names = [a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names]
    checks = "".join(f"\n    assert callable({n})" for n in names) or "\n    assert True"
    parts, replaced = [], False
    for node in tree.body:  # helpers and canaries stay; the tests give way to one that checks the names
        is_test = isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name.lower().startswith("test")
        if is_test and not node.name.startswith("test_canary"):
            if not replaced:
                parts.append(f"def test_interface():{checks}")
            replaced = True
            continue
        parts.append(ast.get_source_segment(src, node, padded=False))
    new = "\n\n\n".join(parts) + "\n"
    return replace(task, test_files={**task.test_files, name: new.encode()}), f"{name}: checks only the names"


def network(task: Task, how: str) -> tuple[Task, str]:
    if _kind(task) == "script":
        line = f'curl -fsS --max-time 5 {BAD_URL} -o /tmp/expected.json || echo 0 > "$REWARD_FILE"'
        return _append(task, line), "test.sh fetches reference data with curl"
    test = f'''def test_matches_reference_data():
    import json
    import urllib.request

    with urllib.request.urlopen("{BAD_URL}", timeout=5) as r:
        assert json.load(r)'''
    return _append(task, test), "a test fetches reference data with urlopen"


def clock(task: Task, how: str) -> tuple[Task, str]:
    year = 2030 if how == "bomb" else 2025  # "bomb" passes until 2030; "expired" stopped passing in 2025
    if _kind(task) == "script":
        line = f'[ "$(date +%Y)" -lt {year} ] || echo 0 > "$REWARD_FILE"  # the sample data is current'
        return _append(task, line), f"test.sh requires the year before {year}"
    test = f"""def test_sample_data_is_current():
    import datetime

    assert datetime.date.today().year < {year}"""
    return _append(task, test), f"a test requires the year before {year}"


def verifier_crash(task: Task, how: str) -> tuple[Task, str]:
    if _kind(task) == "script":
        return _script_first(task, "set -e\n. /grader/fixtures.sh  # not shipped with the tests"), (
            "test.sh sources a file that is not there"
        )
    if how == "import":
        name = _test_file(task)
        files = {
            **task.test_files,
            name: b"import reference_fixtures  # noqa: F401\n" + task.test_files[name],
        }
        return replace(task, test_files=files), f"{name} imports a module that is not there"
    test = """import pytest


@pytest.fixture
def reference_data():
    with open("/grader/data/reference.json") as f:  # not shipped with the tests
        return f.read()


def test_against_reference(reference_data):
    assert reference_data"""
    return _append(task, test), "a fixture opens a file that is not there"


PLANTS: dict[str, Callable[[Task, str], tuple[Task, str]]] = {
    "wrong-test": wrong_test,
    "impossible-spec": impossible_spec,
    "oracle-fails": oracle_fails,
    "flaky": flaky,
    "leak-instruction": leak_instruction,
    "leak-image": leak_image,
    "null-pass": null_pass,
    "network": network,
    "clock": clock,
    "verifier-crash": verifier_crash,
}
assert set(PLANTS) == set(CLASSES)


# ----------------------------------------------------------------------------------------------- the set


def broken_set(builtin: list[Task], small: bool = False) -> list[tuple[Task, dict]]:
    """(task, label) for every planted task and control. `small`: one task per class and four controls of
    different kinds (the test's slice)."""
    by_id = {t.id: t for t in builtin}
    plan, seen = [], set()
    for cls, base, how in PLAN:
        if small and cls in seen:
            continue
        seen.add(cls)
        plan.append((cls, base, how))
    # the clean controls: every built-in task that is not a family instance, and each family's first instance
    firsts = {t.family: t.id for t in reversed(builtin) if t.family}
    controls = [t.id for t in builtin if not t.family or firsts[t.family] == t.id]
    controls = [c for c in controls if c not in NOT_WRITTEN]
    if small:
        controls = ["fizzbuzz", "score-stats", "csv-sum", "fix-backup-script"]
    out = []
    for cls, base, how in plan:
        task, note = PLANTS[cls](by_id[base], how)
        out.append((_renamed(task, cls), _label(cls, by_id[base], note)))
    for base in controls:
        out.append((_renamed(by_id[base], CLEAN), _label(CLEAN, by_id[base], "unchanged")))
    return out


def _renamed(task: Task, cls: str) -> Task:
    return replace(task, id=f"{cls}--{task.id}", path=None, family="", split="")


def _label(cls: str, base: Task, note: str) -> dict:
    return {"class": cls, "base": base.id, "kind": base.evaluator.kind, "change": note}


def write_broken_set(out: Path, builtin: list[Task], small: bool = False) -> dict[str, dict]:
    """Writes the task folders and labels.json under `out` (replaced if this module wrote it); returns the
    labels."""
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "labels.json").is_file():
        raise UserError(f"{out}: exists and was not written by tasks/broken.py (choose another folder)")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    labels = {}
    for task, label in broken_set(builtin, small):
        write_task(task, out / task.id)
        labels[task.id] = label
    (out / "labels.json").write_text(json.dumps(labels, indent=1, sort_keys=True) + "\n")
    return labels


# ---------------------------------------------------------------------------------- what was found


_REASON = re.compile(r"^oracle not solved: (\S+)")
CRASH_REASONS = {"no_report", "error_in_tests", "missing_tests", "timeout"}


def found_classes(problems: list[str], flaky: bool, audit_verdicts: list[str]) -> list[str]:
    """The classes that validate's problems (and flaky flag) and audit's verdicts of the oracle/null
    attempts point to. Validate cannot tell a wrong test from a wrong oracle or an impossible spec (all
    three: the oracle is not solved), so "oracle-fails" stands for the three (see ORACLE_FAILS)."""
    from results.task_audit import FLAKY, NEVER, SOLVED_BY_NULL

    found = set()
    for p in problems:
        m = _REASON.match(p)
        if m:
            found.add("verifier-crash" if m.group(1) in CRASH_REASONS else "oracle-fails")
        elif p.startswith("the untouched workspace is solved"):
            found.add("null-pass")
        elif p.startswith(("instruction quotes",)):
            found.add("leak-instruction")
        elif p.startswith("starting file") or p.startswith("hidden test content found"):
            found.add("leak-image")
        elif "uses the network" in p:
            found.add("network")
        elif "reads the wall clock" in p:
            found.add("clock")
        else:
            found.add("other")
    if flaky or FLAKY in audit_verdicts:
        found.add("flaky")
    if SOLVED_BY_NULL in audit_verdicts:
        found.add("null-pass")
    if NEVER in audit_verdicts:
        found.add("oracle-fails")
    return sorted(found)


ORACLE_FAILS = {"wrong-test", "impossible-spec", "oracle-fails"}


def right_class(cls: str, found: list[str]) -> Optional[bool]:
    """Whether what was found names the planted class (None for a clean control)."""
    if cls == CLEAN:
        return None
    return ("oracle-fails" if cls in ORACLE_FAILS else cls) in found
