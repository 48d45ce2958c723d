"""`harness run` end to end on a real git repository (a venv, node_modules, a .env, an untracked mode-600
file, husky-style hooks with core.hooksPath): the replay model, real Docker, the real CLI, then the user's
own `git commit`. Nothing the agent wrote runs, nothing outside the patch is written, the weakened test is
never applied and does not pass --verify, modes are kept, and a bad path applies nothing."""

import json
import os
import re
import subprocess

import pytest

from evaluators.selftest import SUBMIT, bash, write
from evaluators.selftest.apply_repo import tree
from tests.agent.workflow.test_workflow_apply import git, make_repo
from tests.helpers import harness

VERIFY = "python3 -m pytest -q tests/test_f.py"
CORRECT_F = "def f(n):\n    return list(range(1, n + 1))\n"
WEAKENED = "from src.f import f\n\n\ndef test_f():\n    assert f(3) == [1, 2]\n"


def attacks(marker) -> list[str]:
    """What a careless or hostile agent adds besides its answer: hooks and auto-run files, a link."""
    return [
        "ls -a > seen.txt; cat .env >> seen.txt 2>&1; ls .venv node_modules >> seen.txt 2>&1; true",
        write(".husky/pre-commit", f"#!/bin/sh\ntouch {marker}\n"),
        write(".husky/post-commit", f"#!/bin/sh\ntouch {marker}\n"),
        "chmod +x .husky/pre-commit .husky/post-commit",
        write(".envrc", f"touch {marker}\n"),
        write(
            ".vscode/tasks.json",
            json.dumps({"tasks": [{"command": f"touch {marker}", "runOptions": {"runOn": "folderOpen"}}]}),
        ),
        "ln -s /etc/passwd pw",
        write("tests/test_f.py", WEAKENED),
    ]


def cli_run(
    tmp_path, repo, steps: list[str], *extra: str, verify: str = VERIFY
) -> subprocess.CompletedProcess:
    script = tmp_path / "replay.json"
    script.write_text(json.dumps({"*": [bash("\n".join(steps)), SUBMIT]}))
    return harness(
        "run",
        "--model",
        f"replay:{script}",
        "--workspace",
        str(repo),
        "make the test pass",
        "--verify",
        verify,
        "--apply",
        *extra,
        timeout=300,
    )


@pytest.mark.slow
def test_run_apply_on_a_real_repository(image, tmp_path):
    repo = make_repo(tmp_path)
    marker = tmp_path / "agent-code-ran"
    before = tree(repo)
    steps = [
        *attacks(marker),
        write("src/f.py", CORRECT_F),
        write("notes.txt", "my private notes\nand the agent's line\n"),
        write("src/config.py", "DEBUG = True\n"),
        write("deploy.sh", "#!/bin/sh\necho deploy v2\n"),
    ]
    p = cli_run(tmp_path, repo, steps, "--verify", "seq 1 5000")
    out, err = p.stdout, p.stderr
    assert p.returncode == 0, err[-3000:]
    # What was copied, left out and kept out is said; the secret never reached the sandbox.
    assert ".venv/" in err and "node_modules/" in err and "ignored by .gitignore" in err
    assert "kept out as secrets" in err and ".env" in err and "kept out as private" in err
    seen = (repo / "seen.txt").read_text()
    assert (
        "sk-live" not in seen and ".env\n" not in seen and "left-pad" not in seen and "notes.txt" not in seen
    )
    assert "src\n" in seen  # the listing is real
    # --verify ran on the user's test and says what it printed.
    assert f"verify: {VERIFY} -> exit 0" in err and "1 passed" in err
    assert "verify: seq 1 5000 -> exit 0" in err and "  | 1\n" in err and "  | 5000\n" in err
    assert "... 4920 lines left out ..." in err  # bounded: head and tail
    # The weakened test is shown, flagged, never applied.
    assert "# not applied: tests/test_f.py (protected" in out and "+    assert f(3) == [1, 2]" in out
    assert "PROTECTED: the agent changed tests/test_f.py" in err
    for path in (".husky/pre-commit", ".husky/post-commit", ".envrc", ".vscode/tasks.json"):
        assert f"not applied: {path} (runs by itself" in err, path
    assert "not applied: pw (a symlink the agent made" in err
    assert "not applied: notes.txt (exists in your folder but was not copied" in err
    # Exactly the answer was written, with the user's modes.
    after = tree(repo)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    assert changed == {"src/f.py", "src/config.py", "deploy.sh", "seen.txt"}, changed
    assert os.stat(repo / "notes.txt").st_mode & 0o777 == 0o600
    assert os.stat(repo / "src/config.py").st_mode & 0o777 == 0o640
    assert os.stat(repo / "deploy.sh").st_mode & 0o777 == 0o700
    assert (repo / "tests/test_f.py").read_text().endswith("== [1, 2, 3]\n")
    # The user's next commit runs the user's hook, and nothing of the agent's.
    hook_log = (repo / ".git/hook.log").read_text()
    git(repo, "add", "-A")
    c = git(repo, "commit", "-qm", "agent's fix")
    assert c.returncode == 0, c.stderr
    assert (repo / ".git/hook.log").read_text() == hook_log + "user-hook\n" and not marker.exists()


@pytest.mark.slow
def test_a_weakened_test_does_not_pass_verify_and_nothing_is_applied(image, tmp_path):
    repo = make_repo(tmp_path)
    before = tree(repo)
    p = cli_run(
        tmp_path,
        repo,
        [write("src/f.py", "def f(n):\n    return [1, 2]\n"), write("tests/test_f.py", WEAKENED)],
    )
    assert p.returncode == 1, p.stderr[-3000:]
    assert f"verify: {VERIFY} -> exit 1" in p.stderr and "assert [1, 2] == [1, 2, 3]" in p.stderr
    assert "nothing applied" in p.stderr and tree(repo) == before


@pytest.mark.slow
def test_verify_is_not_fooled_by_new_test_files_or_runner_config(image, tmp_path):
    """`pytest -q` names no file, so every test file is protected, new ones included: a test module that ends
    the process with status 0 at import, a conftest.py that skips everything, pytest configuration."""
    repo = make_repo(tmp_path)
    before = tree(repo)
    cheats = [
        write("tests/test_aaa.py", "import os\n\nos._exit(0)\n"),
        write(
            "conftest.py", "import pytest\n\n\ndef pytest_collection_modifyitems(items):\n    items.clear()\n"
        ),
        write("pytest.ini", "[pytest]\naddopts = -k nothing\n"),
        write("src/f.py", "def f(n):\n    return [1, 2]\n"),
    ]
    p = cli_run(tmp_path, repo, cheats, verify="python3 -m pytest -q")
    assert p.returncode == 1 and "-> exit 1" in p.stderr and "1 failed" in p.stderr, p.stderr[-3000:]
    for path in ("tests/test_aaa.py", "conftest.py", "pytest.ini"):
        assert f"PROTECTED: the agent changed {path}" in p.stderr
    assert tree(repo) == before


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["evil\u202etxt.py", "csi\x9b.txt"])
def test_a_bad_path_from_the_agent_applies_nothing(image, tmp_path, bad):
    repo = make_repo(tmp_path)
    before = tree(repo)
    # A file under 25 ordinary 200-character folders: over PATH_MAX, made one folder at a time.
    deep = "(for i in $(seq 25); do mkdir " + "d" * 200 + " && cd " + "d" * 200 + "; done; echo x > f.txt)"
    p = cli_run(
        tmp_path,
        repo,
        [
            write("src/f.py", CORRECT_F),
            write(bad, "x"),
            deep,
        ],
    )
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert "nothing applied" in p.stderr and "control or format characters" in p.stderr
    # over PATH_MAX in the sandbox too: capture leaves it out and says why (the apply-side limit, for a
    # path that fits the sandbox but not the user's folder: selftest's apply_long_path)
    assert re.search(r"a path longer than the platform's limit|a path of \d+ bytes, over the limit", p.stderr)
    assert "\u202e" not in p.stderr and "\x9b" not in p.stderr  # listed escaped
    assert tree(repo) == before


@pytest.mark.slow
def test_a_large_repository_streams_in_and_applies(image, tmp_path):
    """More files than the sandbox's default capture limits (5000) and tens of MB, plus a big ignored venv."""
    repo = make_repo(tmp_path)
    for i in range(60):
        d = repo / "pkg" / f"m{i:02d}"
        d.mkdir(parents=True)
        for j in range(100):
            (d / f"f{j:03d}.py").write_bytes(b"# " + os.urandom(4000).hex().encode() + b"\n")
    big = repo / ".venv/lib/python3/site-packages/torch"
    big.mkdir(parents=True)
    (big / "libtorch.so").write_bytes(os.urandom(80 << 20))
    p = cli_run(tmp_path, repo, [write("src/f.py", CORRECT_F), write("pkg/m59/f099.py", "changed = True\n")])
    assert p.returncode == 0, p.stderr[-3000:]
    assert "copied 6007 files" in p.stderr and ".venv/" in p.stderr
    assert (repo / "pkg/m59/f099.py").read_text() == "changed = True\n"
    assert (repo / "src/f.py").read_text() == CORRECT_F


@pytest.mark.slow
def test_the_python_api_applies_a_runs_changes_with_its_protection(image, tmp_path):
    """run_workflow + apply_changes(folder, result.changes), as the module's docstring shows: the weakened
    test is still held back, and the run's copy is still what "not copied" means."""
    from agent.workflow import apply_changes, run_workflow
    from tests.conftest import run

    repo = make_repo(tmp_path)
    (repo / "deploy.pem").write_text("real key\n")
    script = tmp_path / "replay.json"
    steps = [write("src/f.py", CORRECT_F), write("tests/test_f.py", WEAKENED), write("deploy.pem", "agent\n")]
    script.write_text(json.dumps({"*": [bash("\n".join(steps)), SUBMIT]}))
    result = run(
        run_workflow(f"replay:{script}", repo, "make the test pass", verify=["python3 -m pytest -q"])
    )
    assert result.verified and result.protected_changes == ["tests/test_f.py"]
    res = apply_changes(repo, result.changes)
    assert res.applied == ["src/f.py"] and {p for p, _ in res} == {"tests/test_f.py", "deploy.pem"}
    assert (repo / "deploy.pem").read_text() == "real key\n"
    assert (repo / "tests/test_f.py").read_text().endswith("== [1, 2, 3]\n")
