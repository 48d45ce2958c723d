"""Real Terminal-Bench tasks (tests/fixtures/terminal-bench, byte-exact from Harbor's registry packets) load
and validate here: every oracle solves and the untouched container does not, with the network off.

The images are built from each task's own environment/Dockerfile on local stand-ins for its base image
(tests/tb_standins.py; `.ci/setup --test` builds them once, cached by recipe hash).
"""

import hashlib
import json
import re
import shutil
import subprocess
import sys

import pytest

from tests.tb_standins import CORPUS, manifest, verifier_requirements

ROOT = CORPUS.parents[2]


def test_every_file_matches_its_published_sha256():
    for name, entry in manifest()["tasks"].items():
        folder = CORPUS / name
        for rel, digest in entry["files"].items():
            data = (folder / rel).read_bytes()
            assert hashlib.sha256(data).hexdigest() == digest, f"{name}/{rel} differs from the published file"
        # nothing else slipped in: every other file is an oracle written here, and marked so
        others = {
            str(p.relative_to(folder))
            for p in folder.rglob("*")
            if p.is_file() and str(p.relative_to(folder)) not in entry["files"]
        }
        written = {"solution/solve.sh", *entry.get("written_here", {})}  # each says why, in the manifest
        assert others <= written, f"{name}: files without a published hash: {sorted(others - written)}"
        if "solution/solve.sh" in others:
            assert entry["oracle"] == "written here", f"{name}: its solve.sh is not the published one"
            assert "written for this corpus" in (folder / "solution/solve.sh").read_text()
            assert hashlib.sha256((folder / "solution/solve.sh").read_bytes()).hexdigest() != entry.get(
                "published_solve_sh_sha256"
            )


def test_corpus_covers_categories_a_service_and_the_tb2_0_layout():
    tasks = manifest()["tasks"]
    assert len(tasks) >= 8
    assert len({t["category"] for t in tasks.values()}) >= 4
    assert any(t.get("needs_service") for t in tasks.values())
    tb20 = [n for n, t in tasks.items() if t["layout"] == "2.0"]
    assert tb20, "no task in the TB 2.0 layout"
    for name in tb20:  # the 2.0 layout: no allow_internet key (Harbor's default applies)
        assert "allow_internet" not in (CORPUS / name / "task.toml").read_text()


def test_the_corpus_loads_as_harbor_tasks():
    from tasks.loader import load_suite

    tasks = {t.id.split("/")[-1]: t for t in load_suite(str(CORPUS))}
    assert set(tasks) == set(manifest()["tasks"])
    for name, task in tasks.items():
        assert task.harbor is not None, name
        assert task.harbor.docker_image == manifest()["tasks"][name].get("docker_image"), name


def test_verifier_requirements_are_read_from_test_sh():
    text = (CORPUS / "nginx-request-logging/tests/test.sh").read_text()
    assert verifier_requirements(text) == [["pytest==8.4.1", "requests==2.32.4", "pytest-json-ctrf==0.3.5"]]


def _validate(suite: str, *extra: str) -> tuple[int, str]:
    from tests.tb_standins import ensure_corpus_images

    ensure_corpus_images(log=lambda m: None)
    cmd = [sys.executable, str(ROOT / "harness.py"), "tasks", "validate", suite, "--no-internet", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3000)
    return proc.returncode, proc.stdout + proc.stderr


def _rows(output: str) -> dict[str, str]:
    rows = {}
    for line in output.splitlines():
        m = re.match(r"(\S+)\s+(\d+/\d+)\s+(solved|not solved)\s", line)
        if m:
            rows[m.group(1).split("/")[-1]] = line
    return rows


@pytest.mark.slow
@pytest.mark.suite
@pytest.mark.docker
def test_validate_passes_on_the_corpus_offline():
    code, out = _validate(str(CORPUS), "--concurrency", "4")  # the tasks' tests mostly wait: 4 at once
    rows = _rows(out)
    assert set(rows) == set(manifest()["tasks"]), out[-3000:]
    bad = {name: line for name, line in rows.items() if not _valid(line)}
    for name in [n for n in bad if manifest()["tasks"][n].get("timing_sensitive")]:
        # the task's own tests race the clock (see the manifest): one more try, alone
        again = _rows(_validate(str(CORPUS / name))[1]).get(name, "")
        if _valid(again):
            del bad[name]
    assert not bad, "\n".join(bad.values())


def _valid(line: str) -> bool:
    """A validate row: the oracle solved every repeat and the untouched container was not solved."""
    words = line.split()
    return len(words) >= 4 and words[1] == "1/1" and words[2:4] == ["not", "solved"]


@pytest.mark.slow
@pytest.mark.suite
@pytest.mark.docker
def test_the_service_task_passes_in_shared_mode(tmp_path):
    (name,) = [n for n, t in manifest()["tasks"].items() if t.get("needs_service")][:1]
    task = tmp_path / name
    shutil.copytree(CORPUS / name, task)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nenvironment_mode = "shared"\n', 1))
    code, out = _validate(str(task))
    rows = _rows(out)
    assert name in rows and _valid(rows[name]), out[-3000:]
    assert code == 0, out[-3000:]


def table(output: str) -> str:
    """The per-task table for the closing note: task, category, oracle, null, seconds."""
    tasks = manifest()["tasks"]
    lines = ["| task | category | oracle | null | seconds |", "|---|---|---|---|---|"]
    for name, line in sorted(_rows(output).items()):
        words = line.split()
        null = "not solved" if "not solved" in line else "solved"
        seconds = re.search(r"\s(\d+\.\d)\s", line)
        lines.append(
            f"| {name} | {tasks.get(name, {}).get('category', '?')} | {words[1]} | {null} | "
            f"{seconds.group(1) if seconds else '?'} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":  # .venv/bin/python -m tests.tasks.test_terminal_bench  -> prints the table
    code, out = _validate(str(CORPUS), *sys.argv[1:])
    print(out)
    print(table(out))
    print(json.dumps({"exit": code}))
    sys.exit(code)
