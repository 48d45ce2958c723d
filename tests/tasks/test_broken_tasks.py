"""The planted broken-task set (tasks/broken.py) and what finds it: the set is deterministic, labelled and
loads back; the static checks (evaluators/task_lint.py) flag the classes they own on the planted tasks and
nothing in the built-in suite or the Terminal-Bench fixtures; and (slow, Docker) `tasks validate` + `tasks
audit` flag one task of every class with its class, and no clean control. bench/broken_tasks.py measures
the whole set."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from evaluators.task_lint import lint
from evaluators.validate import validate
from results.task_audit import audit_tasks
from tasks.broken import CLASSES, CLEAN, found_classes, right_class, write_broken_set
from tasks.loader import load_suite
from tests.conftest import ROOT

STATIC = {  # the classes whose finding needs no sandbox, and the words of their problem line
    "leak-instruction": "instruction quotes",
    "leak-image": "holds the solution",
    "network": "uses the network",
    "clock": "reads the wall clock",
}


@pytest.fixture(scope="module")
def builtin():
    return load_suite("builtin")


def test_the_set_is_deterministic_labelled_and_loads_back(tmp_path, builtin):
    labels = write_broken_set(tmp_path / "a", builtin)
    again = write_broken_set(tmp_path / "b", builtin)
    assert labels == again
    for task_id in labels:
        for f in (tmp_path / "a" / task_id).rglob("*"):
            if f.is_file():
                assert (
                    f.read_bytes()
                    == (tmp_path / "b" / task_id / f.relative_to(tmp_path / "a" / task_id)).read_bytes()
                )
    tasks = {t.id: t for t in load_suite(tmp_path / "a")}
    assert set(tasks) == set(labels) and json.loads((tmp_path / "a" / "labels.json").read_text()) == labels
    counts = Counter(label["class"] for label in labels.values())
    assert set(counts) == {*CLASSES, CLEAN} and min(counts[c] for c in CLASSES) >= 4
    assert counts[CLEAN] >= sum(counts[c] for c in CLASSES)  # controls: as many as the planted tasks, or more
    for cls in set(CLASSES) - {"impossible-spec"}:  # a conflicting copy of a test: pytest tasks only
        assert len({label["kind"] for label in labels.values() if label["class"] == cls}) >= 2, cls
    originals = {t.id: t for t in builtin}
    for task_id, label in labels.items():
        t, base = tasks[task_id], originals[label["base"]]
        same = (t.instruction, t.test_files, t.workspace_files, t.solution_files, t.evaluator) == (
            base.instruction,
            base.test_files,
            base.workspace_files,
            base.solution_files,
            base.evaluator,
        )
        assert same == (label["class"] == CLEAN), task_id
    with pytest.raises(Exception, match="not written by tasks/broken.py"):
        (tmp_path / "c").mkdir()
        (tmp_path / "c" / "x").write_text("mine")
        write_broken_set(tmp_path / "c", builtin)


def test_static_checks_flag_their_classes_and_no_real_task(tmp_path, builtin):
    labels = write_broken_set(tmp_path / "set", builtin)
    for t in load_suite(tmp_path / "set"):
        cls, problems = labels[t.id]["class"], lint(t)
        if cls in STATIC:
            assert any(STATIC[cls] in p for p in problems), (t.id, problems)
            assert found_classes(problems, False, []) == [cls]
        else:
            assert problems == [], (t.id, problems)
    from tasks.humaneval import import_humaneval

    for suite in (
        "builtin",
        ROOT / "tests" / "fixtures" / "terminal-bench",
        ROOT / "tests" / "fixtures" / "harbor",
        import_humaneval(tmp_path / "humaneval"),
    ):
        assert {t.id: lint(t) for t in load_suite(str(suite)) if lint(t)} == {}


def test_findings_read_as_classes():
    assert found_classes(["oracle not solved: fail x"], False, []) == ["oracle-fails"]
    assert found_classes(["oracle not solved: error_in_tests tests errored"], False, []) == ["verifier-crash"]
    assert found_classes(["the untouched workspace is solved: ..."], True, []) == ["flaky", "null-pass"]
    assert found_classes([], False, ["flaky: identical attempts graded differently"]) == ["flaky"]
    assert found_classes([], False, ["always solved"]) == []
    assert right_class("wrong-test", ["oracle-fails"]) and not right_class("network", ["oracle-fails"])
    assert right_class(CLEAN, []) is None


@pytest.mark.slow
@pytest.mark.docker
def test_validate_and_audit_find_one_of_each_class(tmp_path, builtin):
    """One planted task per class and four controls of three kinds. The flaky plant fails half its runs:
    it is validated with 7 repeats (all 7 passing, a miss, has probability 1/128); the rest with 1."""
    labels = write_broken_set(tmp_path / "set", builtin, small=True)
    tasks = load_suite(tmp_path / "set")
    flaky = [t for t in tasks if labels[t.id]["class"] == "flaky"]
    rest = [t for t in tasks if t not in flaky]
    rows = asyncio.run(validate(rest, repeats=1, concurrency=2))
    rows += asyncio.run(validate(flaky, repeats=7, concurrency=1))
    audits = {a.rate.task_id: a.verdicts for a in audit_tasks(a for r in rows for a in r.attempts)}
    assert len(rows) == len(labels) == len(CLASSES) + 4
    for r in rows:
        cls = labels[r.task]["class"]
        found = found_classes(r.problems, r.flaky, audits.get(r.task, []))
        if cls == CLEAN:
            assert found == [], (r.task, r.problems)
        elif cls == "flaky":
            assert found, (r.task, r.oracle)  # all failing reads as oracle-fails: found, not by its name
        else:
            assert right_class(cls, found), (r.task, found, r.problems)


def test_static_checks_spare_what_is_given_or_local(builtin):
    """The false positives found on real tasks: HumanEval's instruction quotes the prompt the starting file
    holds anyway; a Terminal-Bench service test fetches from its own container and installs curl; a task's
    fetch the oracle passed without decides nothing, so it explains only an oracle failure."""
    from dataclasses import replace

    base = next(t for t in builtin if t.evaluator.kind == "pytest")
    name = sorted(base.test_files)[0]
    prompt = 'def add(a, b):\n    """Return the sum of a and b, for any two numbers."""\n'
    given = replace(
        base,
        instruction=base.instruction + "\n" + prompt,
        workspace_files={**base.workspace_files, "solution.py": prompt.encode()},
        solution_files={"solve.sh": f"cat > solution.py <<'EOF'\n{prompt}    return a + b\nEOF\n".encode()},
    )
    assert lint(given) == []
    pasted = replace(given, instruction=given.instruction + "\n    return a + b  # the whole trick is here\n")
    pasted = replace(pasted, solution_files={"solve.sh": b"    return a + b  # the whole trick is here\n"})
    assert [p for p in lint(pasted) if "instruction quotes" in p]

    def with_test(text: str):
        t = replace(base, test_files={**base.test_files, name: base.test_files[name] + text.encode()})
        return replace(t, environment=replace(t.environment, allow_internet=False))

    local = with_test('\ndef test_served():\n    assert requests.get("http://localhost:8080/x").ok\n')
    assert lint(local) == []
    installs = with_test("\n# apt-get install -y curl\n")
    assert lint(installs) == []
    for remote in (
        '\ndef test_ref():\n    urllib.request.urlopen("https://data.example.org/ref.json")\n',
        '\ndef test_ref():\n    os.system("curl -LsSf https://astral.sh/uv/install.sh | sh")\n',
        '\ndef test_ref():\n    subprocess.run(["wget", "-q", "ftp://mirror.example.net/ref"])\n',
        "\ndef test_ref():\n    requests.get(URL)\n",  # a computed target, no local address named
    ):
        t = with_test(remote)
        assert [p for p in lint(t) if "uses the network" in p], remote
        assert lint(t, oracle_passed=True) == [], remote
