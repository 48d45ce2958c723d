"""`--apply` by allowlist (agent/workflow/allow.py): generated variants of every class the rule holds back
(dotfiles and rc files, new files in dot-folders, configuration and build files by name, hook managers' other
file names, files a Makefile includes by pattern or a configuration file names, modules a hook imports,
compiled files, nested bare and non-bare repositories), each listed with its reason; and their honest twins
(new source files, docs and tests, edits of the user's tracked files), which apply. A seeded RNG makes the
names: a failing seed is rerun by its id. One end-to-end run goes through the real `harness run --apply`."""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.sandbox import Changes
from agent.workflow import apply_changes, plan_changes
from agent.workflow.allow import CONFIG_NAMES, compiled_kind, config_kind
from evaluators.selftest import SUBMIT, bash, write
from evaluators.selftest.apply_repo import tree
from tests.agent.workflow.test_workflow_apply import git, make_repo
from tests.helpers import harness

SEEDS = range(4)
ALLOW = "--allow-hooks writes it"


@dataclass
class Variant:
    cls: str  # the class, for the failure message
    path: str
    why: str  # a part of the reason it is held back with ("" for an honest twin)
    content: str = "x = 1\n"


def word(rng: random.Random, n: int = 0) -> str:
    """A random lower-case name that no rule knows (it starts with "m" + a letter, never "rc" at the end)."""
    return "m" + "".join(rng.choice(string.ascii_lowercase) for _ in range(n or rng.randint(3, 8))) + "z"


def folders(rng: random.Random, most: int = 3) -> str:
    """ "" or a few random plain folders, ending in "/"."""
    return "".join(word(rng) + "/" for _ in range(rng.randint(0, most)))


def ext(rng: random.Random) -> str:
    """A random extension that is no configuration or compiled format."""
    while True:
        e = "".join(rng.choice(string.ascii_lowercase) for _ in range(3))
        if not config_kind(f"x.{e}") and not compiled_kind(f"x.{e}") and e not in ("py", "md", "sh"):
            return e


RC_FILES = [
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".bashrc",
    ".zshrc",
    ".profile",
    ".eslintrc.js",
    ".prettierrc",
    ".babelrc",
    ".mocharc.yml",
    ".pylintrc",
    ".gemrc",
    ".irbrc",
    ".inputrc",
    ".curlrc",
    ".condarc",
    ".lintstagedrc",
    ".huskyrc",
    ".envrc",
    ".editorconfig",
    ".tool-versions",
    ".python-version",
    ".nvmrc",
    ".sdkmanrc",
]

HOOK_MANAGER_NAMES = [
    "lefthook.yml",
    "lefthook.yaml",
    "lefthook.json",
    "lefthook.toml",
    "lefthook-local.yml",
    "lefthook-local.json",
    "lefthook-local.toml",
    ".lefthook.yml",
    ".lefthook.toml",
    ".lefthook-local.json",
    ".config/lefthook.yml",
    "mise.toml",
    "mise.local.toml",
    "mise.production.toml",
    ".mise.toml",
    ".mise.local.toml",
    ".mise.dev.toml",
    "mise/config.toml",
    ".mise/config.toml",
    ".config/mise.toml",
    ".config/mise/config.toml",
    ".husky/pre-push",
    ".husky/_/husky.sh",
    ".huskyrc.json",
    "husky.config.js",
    ".pre-commit-config.yaml",
    ".pre-commit-config.yml",
    ".pre-commit-hooks.yaml",
    "simple-git-hooks.js",
    ".simple-git-hooks.json",
    "lint-staged.config.mjs",
]

STDLIB = ["json", "os", "re", "typing", "pathlib", "subprocess", "random", "string", "shutil", "pytest"]


def generate(seed: int, repo: Path) -> tuple[list[Variant], list[Variant]]:
    """(held, honest) for one seed; writes and commits the user's files the classes need first: a Makefile
    with include patterns, a configuration file naming a script, a hook running a Python script that imports
    modules, data folders named objects/ and refs/."""
    rng = random.Random(seed)
    held: list[Variant] = []
    honest: list[Variant] = []
    user: dict[str, str] = {}

    # dotfiles and rc files of known tools, and random unknown dot names, at random depths
    for name in rng.sample(RC_FILES, 5):
        held.append(Variant("rc file", folders(rng, 2) + name, "", "script-shell = ./x.sh\n"))
    for _ in range(4):
        suffix = rng.choice(["", "rc", ".toml", ".json", ".yml", ".local.toml", ".sh", ".py", ".js"])
        held.append(Variant("dotfile", folders(rng, 2) + "." + word(rng) + suffix, "dotfile"))
    for _ in range(3):
        held.append(Variant("dot-folder", f"{folders(rng, 1)}.{word(rng)}/{word(rng)}.py", "dot-folder"))
    # configuration and build files by name, and the hook managers' other file names
    for _ in range(5):
        g = rng.choice(
            [
                g
                for g in CONFIG_NAMES
                if "*" in g and not g.endswith("*") and g not in ("*.code-workspace", "*.mk")
            ]
        )
        held.append(Variant("config", folders(rng, 2) + g.replace("*", word(rng)), "configuration"))
    for name in ["Makefile", "GNUmakefile", "justfile", "Dockerfile", "conftest.py", "setup.py"]:
        held.append(Variant("build file", folders(rng, 2) + name, "configuration"))
    for name in rng.sample(HOOK_MANAGER_NAMES, 6):
        held.append(Variant("hook manager", name, ""))

    # a Makefile (at the top or in a folder) that includes by pattern and by name
    mk_dir = rng.choice(["", word(rng) + "/"])
    e1, e2, e3 = ext(rng), ext(rng), ext(rng)
    prefix, conf = word(rng, 3), word(rng)
    user[f"{mk_dir}Makefile"] = (
        f"-include *.mk {prefix}*.{e1}\ninclude $(wildcard {conf}/*.{e2})\nsinclude {conf}/local.{e3}\n"
        "all:\n\t@true\n"
    )
    held += [
        Variant("make include", f"{mk_dir}{word(rng)}.mk", "includes it"),
        Variant("make include", f"{mk_dir}{prefix}{word(rng)}.{e1}", "includes it"),
        Variant("make include", f"{mk_dir}{conf}/{word(rng)}.{e2}", "includes it"),
        Variant("make include", f"{mk_dir}{conf}/local.{e3}", f"{mk_dir}Makefile includes it (sinclude"),
    ]
    honest.append(Variant("beside the Makefile", f"{mk_dir}{conf}/{word(rng)}.py", ""))
    # a configuration file that names a script literally
    script = f"{word(rng)}/{word(rng)}.{rng.choice(['sh', 'py', ext(rng)])}"
    named_by = rng.choice(["tox.ini", "pyproject.toml", "setup.cfg", "deploy.yml", ".tool.json"])
    user[named_by] = f"# runs\ncommands = ./{script} --check\n"
    held.append(Variant("named by a config", script, named_by))

    # a hook (the repository's .husky, core.hooksPath) runs a Python script that imports modules
    d, mod, pkg, sub, shadow, dash_m = (
        word(rng),
        word(rng),
        word(rng),
        word(rng),
        rng.choice(STDLIB),
        word(rng),
    )
    user[f"{d}/check.py"] = f"import {shadow}\nimport {mod}\nfrom {pkg} import {sub}\n"
    user[f"{d}/{mod}.py"] = "VALUE = 1\n"
    user[f"{d}/{pkg}/__init__.py"] = ""
    user[".husky/pre-commit"] = f"#!/bin/sh\npython3 {d}/check.py\npython3 -m {dash_m}\n"
    held += [
        Variant("hook-imported module (changed)", f"{d}/{mod}.py", "imports it"),
        Variant("hook-imported module (new)", f"{d}/{pkg}/{sub}.py", "imports it"),
        Variant("hook-imported package (changed)", f"{d}/{pkg}/__init__.py", "imports it"),
        Variant("module shadowing what a hook imports", f"{d}/{shadow}.py", "imports it"),
        Variant("python -m in a hook", f"{dash_m}.py", "imports it"),
        Variant("the hook's script", f"{d}/check.py", "runs it"),
    ]
    honest.append(Variant("beside the hook's script, not imported", f"{d}/{word(rng)}.py", ""))
    # ... a loop that sources every script a pattern matches, beside a linter run on a pattern
    hd, sd = word(rng), word(rng)
    linted = f"{sd}/{word(rng)}.py"
    user[linted] = "A = 1\n"
    user[".husky/pre-commit"] += f'for f in {hd}/*.sh; do . "$f"; done\nruff check {sd}/*.py\n'
    held.append(Variant("a script a hook's loop sources", f"{hd}/{word(rng)}.sh", "pre-commit runs it"))
    honest.append(Variant("an edit of a source a hook only lints", linted, ""))
    # ... and a node script that requires a module by its name without the extension
    jd, lib = word(rng), word(rng)
    user[".husky/pre-commit"] += f"node {jd}/run.js\n"
    user[f"{jd}/run.js"] = f"const u = require('./{lib}')\n"
    user[f"{jd}/{lib}.js"] = "module.exports = 1\n"
    held.append(Variant("a module a hook's node script requires", f"{jd}/{lib}.js", f"{jd}/run.js runs it"))
    honest.append(Variant("beside the hook's node script, not required", f"{jd}/{word(rng)}.js", ""))

    # compiled and cached files
    for name in rng.sample(STDLIB, 2):
        held.append(Variant("pyc", folders(rng, 1) + f"{name}.pyc", "compiled"))
        held.append(
            Variant(
                "pycache",
                folders(rng, 2) + f"__pycache__/{name}.cpython-31{rng.randint(0, 3)}.pyc",
                "compiled",
            )
        )
    for pattern in ["lib{}.so", "lib{}.so.1", "{}.o", "{}.dylib", "{}.class"]:
        held.append(Variant("binary", folders(rng, 2) + pattern.format(word(rng)), "compiled"))
    held.append(
        Variant("dist-info", f"{folders(rng, 1)}{word(rng)}-1.0.dist-info/entry_points.txt", "compiled")
    )

    # nested repositories: bare ones at random depths (all their files held), a gitlink, a .git folder,
    # and a HEAD written into the user's folder that already holds objects/ and refs/
    for _ in range(2):
        bare = folders(rng, 3) + word(rng) + rng.choice(["", ".git"])
        for f in [
            "HEAD",
            "config",
            f"objects/{word(rng, 2)}/{word(rng)}",
            "refs/heads/main",
            "hooks/post-checkout",
        ]:
            held.append(Variant("bare repository", f"{bare}/{f}", "version-control"))
    fresh = folders(rng, 2) + word(rng)  # as captured from a sandbox: `git init --bare` leaves empty folders
    held += [Variant("fresh bare", f"{fresh}/HEAD", "version-control")]
    held += [Variant("fresh bare", f"{fresh}/config", "version-control")]
    worktree = folders(rng, 2) + word(rng)
    held += [
        Variant("gitdir by commondir", f"{worktree}/HEAD", "version-control"),
        Variant("gitdir by commondir", f"{worktree}/commondir", "version-control"),
        Variant("gitlink", f"{folders(rng, 2)}{word(rng)}/.git", "version-control"),
        Variant("non-bare", f"{folders(rng, 2)}{word(rng)}/.git/config", "version-control"),
    ]
    data = f"{word(rng)}/{word(rng)}"
    user[f"{data}/objects/readme.txt"] = "user data\n"
    user[f"{data}/refs/readme.txt"] = "user data\n"
    held.append(Variant("HEAD beside the user's objects/ and refs/", f"{data}/HEAD", "version-control"))

    # honest twins: new source files, docs and tests, edits of the user's tracked files
    for suffix in ["py", "ts", "go", "rs", "c", "md", "sh", "txt", ext(rng)]:
        honest.append(
            Variant(
                "new source",
                f"{rng.choice(['src/', 'lib/', 'cmd/', ''])}{folders(rng, 2)}{word(rng)}.{suffix}",
                "",
            )
        )
    honest += [
        Variant("new test", f"tests/test_{word(rng)}.py", ""),
        Variant("a file named HEAD in a plain folder", f"{word(rng)}/HEAD", ""),
        Variant("edit of tracked source", "src/f.py", ""),
        Variant("edit of tracked source", "src/config.py", ""),
        Variant("edit of a tracked script", "deploy.sh", ""),
    ]
    tracked_dot = f".{word(rng)}/{word(rng)}.py"  # the user's own file in a dot-folder: an edit applies
    user[tracked_dot] = "OLD = 1\n"
    honest.append(Variant("edit of a tracked file in a dot-folder", tracked_dot, ""))

    for rel, text in user.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A", "--", *user)
    git(repo, "commit", "-qm", "the user's files", "--no-verify")  # the hook imports what the agent adds
    paths = [v.path for v in held + honest]
    assert len(set(paths)) == len(paths), [p for p in paths if paths.count(p) > 1]  # two drew the same
    return held, honest


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_generated_class_is_held_back_with_its_reason_and_the_honest_twins_apply(repo, seed):
    held, honest = generate(seed, repo)
    before = tree(repo)
    changes = Changes(files={v.path: v.content.encode() for v in held + honest})
    res = apply_changes(repo, changes)
    reasons = dict(res.held_back)
    assert not res.refused, res.refused
    for v in held:
        assert v.path in reasons, f"{v.cls}: {v.path} was applied"
        assert v.why in reasons[v.path], f"{v.cls}: {v.path}: {reasons[v.path]!r} lacks {v.why!r}"
        if "version-control" not in v.why:
            assert reasons[v.path].endswith(ALLOW), (v.path, reasons[v.path])
    assert sorted(res.applied) == sorted(v.path for v in honest), {
        v.path: reasons.get(v.path) for v in honest
    }
    after = tree(repo)
    changed = {p for p in after if after[p] != before.get(p) and after[p][0] == "f"}
    assert changed == {v.path for v in honest}
    for v in honest:
        assert (repo / v.path).read_text() == v.content


@pytest.mark.parametrize("seed", SEEDS)
def test_allow_hooks_writes_all_but_version_control(repo, seed):
    held, honest = generate(seed, repo)
    res = plan_changes(repo, Changes(files={v.path: b"x\n" for v in held + honest}), allow_hooks=True)
    vcs = {v.path for v in held if v.why == "version-control"}
    ignored = {v.path for v in held if "__pycache__/" in v.path}  # make_repo's .gitignore names it
    reasons = dict(res.held_back)
    assert set(reasons) == vcs | ignored and not res.refused
    assert all("ignored by .gitignore" in reasons[p] for p in ignored)
    assert set(res.plan) == {v.path for v in held + honest} - vcs - ignored


def test_removing_configuration_is_held_and_removing_source_applies(repo):
    """Removing .npmrc's `ignore-scripts = true` changes what npm runs: a removal is a change like any."""
    (repo / ".npmrc").write_text("ignore-scripts = true\n")
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    git(repo, "add", ".npmrc", "pyproject.toml")
    git(repo, "commit", "-qm", "config")
    res = plan_changes(repo, Changes(deleted=[".npmrc", "pyproject.toml", "src/config.py"]))
    assert res.plan == ["src/config.py"]
    assert "dotfile" in dict(res.held_back)[".npmrc"]
    assert "configuration" in dict(res.held_back)["pyproject.toml"]


def test_outside_git_the_folders_own_files_count_as_the_users(tmp_path):
    folder = tmp_path / "plain"
    (folder / ".tools").mkdir(parents=True)
    (folder / ".tools/gen.py").write_text("A = 1\n")
    res = plan_changes(folder, Changes(files={".tools/gen.py": b"A = 2\n", ".tools/new.py": b"B = 1\n"}))
    assert res.plan == [".tools/gen.py"] and "dot-folder" in dict(res.held_back)[".tools/new.py"]


@pytest.mark.slow
def test_cli_run_apply_holds_generated_variants_and_applies_their_twins(image, tmp_path):
    """The real path: a scripted agent writes one seed's variants and twins in a sandbox, `harness run
    --apply` lists each held-back path with its reason and writes exactly the twins."""
    repo = make_repo(tmp_path)
    held, honest = generate(7, repo)
    held = [v for v in held if not v.path.endswith("/.git")]  # a gitlink file: git in the sandbox objects
    before = tree(repo)
    script = tmp_path / "replay.json"
    steps = [write(v.path, v.content) for v in held + honest]
    script.write_text(json.dumps({"*": [bash("\n".join(steps)), SUBMIT]}))
    p = harness(
        "run",
        "--model",
        f"replay:{script}",
        "--workspace",
        str(repo),
        "fix it",
        "--apply",
        "--no-verify",
        "--protect",
        "none",
        timeout=300,
    )
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    lines = [x for x in p.stderr.splitlines() if x.startswith("not applied: ")]
    for v in held:
        if v.path.endswith(".pyc"):
            continue  # byte-code: the sandbox's capture never reports it (agent/sandbox/changes.py)
        # (test-runner configuration such as conftest.py is protected by the run first)
        line = [x for x in lines if x.startswith(f"not applied: {v.path} (")]
        assert line and (v.why in line[0] or "protected" in line[0]), (v.cls, v.path, line)
    after = tree(repo)
    changed = {q for q in after if after[q] != before.get(q) and after[q][0] == "f"}
    assert changed == {v.path for v in honest}, changed ^ {v.path for v in honest}
