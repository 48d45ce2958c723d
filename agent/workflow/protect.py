"""What stays the user's: the test files and runner configuration the --verify commands name
(default_protect), the test machinery the agent changed (test_machinery), and the files that run by
themselves (autorun_paths, package_hooks_changed), held back on apply unless --allow-hooks."""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import shlex
from pathlib import Path
from typing import Iterable, Optional

from agent.sandbox import Changes
from agent.workflow.paths import AUTORUN_GLOBS, TEST_GLOBS, _any, _git, _iter_files, _z
from tasks.tamper import is_visible_test, tamper_reason

# What a verification command runs is defined by these files as much as by the tests: protected with them.
RUNNER_CONFIGS = {
    "make": ("Makefile", "makefile", "GNUmakefile"),
    "npm": ("package.json",),
    "npx": ("package.json",),
    "yarn": ("package.json",),
    "pnpm": ("package.json",),
    "tox": ("tox.ini",),
    "nox": ("noxfile.py",),
    "just": ("justfile", "Justfile", ".justfile"),
    "task": ("Taskfile.yml", "Taskfile.yaml"),
}


def default_protect(verify: Iterable[str], files: Iterable[str]) -> list[str]:
    """The test files the --verify commands name (a file, or a folder: everything under it), or, when they
    name none, every file that looks like a test by the common runners' conventions; plus the files that say
    what a named runner runs (package.json for npm, the Makefile for make, ...)."""
    files = list(files)
    named: list[str] = []
    configs: list[str] = []
    for cmd in verify:
        try:
            tokens = shlex.split(cmd)
        except ValueError:
            tokens = cmd.split()
        for tok in tokens:
            configs += RUNNER_CONFIGS.get(tok.rsplit("/", 1)[-1], ())
            tok = tok.split("::", 1)[0].removeprefix("./").rstrip("/")
            if tok and not tok.startswith("-") and any(f == tok or f.startswith(tok + "/") for f in files):
                named.append(tok)
    tests = set(named) if named else {f for f in files if is_visible_test(f)} | set(TEST_GLOBS)
    return sorted(tests | set(configs))


def test_machinery(changes: Changes, original: Iterable[str]) -> list[str]:
    """Changed paths that would rewrite how the tests run (conftest.py, pytest configuration, .pth files,
    modules shadowing the standard library: tasks.tamper's rules), protected with the tests."""
    original = set(original)
    out = []
    for p in changes.paths:
        why = tamper_reason({p: changes.files.get(p)}, original)
        # A new module shadows the standard library only at the top (x.py, x/__init__.py): `python -m`
        # puts the folder first on sys.path; a new file in an ordinary folder named `code/` does not.
        shadows = why.startswith("adds ") and (
            p.count("/") == 0 or p.endswith("/__init__.py") and p.count("/") == 1
        )
        if why and not is_visible_test(p) and (shadows or not why.startswith("adds ")):
            out.append(p)
    return out


_TOKEN = re.compile(r"[^\s'\"`;|&()<>=,\[\]{}:!$]+")


# What a script may leave off a file it loads: `require('./lib/util')`, `source lib/env`.
_IMPLIED = ("", ".js", ".cjs", ".mjs", ".ts", ".py", ".sh")


def _named_paths(text: str, known: set[str], base: str = "") -> set[str]:
    """Files of `known` that a hook or configuration text names (`./scripts/check.sh`, `entry: tools/lint`,
    `require('./lib/util')`), relative to the folder or to the naming file's own folder."""
    found = set()
    for tok in set(_TOKEN.findall(text)):
        tok = tok.removeprefix("./")
        for cand in {tok, os.path.normpath(os.path.join(base, tok)) if base else tok}:
            found |= {cand + e for e in _IMPLIED if cand + e in known}
    return found


# A line of a hook that runs or loads every file a pattern matches: a loop, `source`/`.`, make's include.
_LOADING_LINE = re.compile(r"(?m)^[ \t]*(?:for[ \t]+\w+[ \t]+in|-?include|sinclude|source|\.)[ \t]+(.*)$")


def _matched_paths(text: str, known: set[str], base: str = "") -> set[str]:
    """Files of `known` that a path pattern on a hook's loading line matches (`for f in hooks.d/*.sh`,
    `source env/*.sh`). Elsewhere (`ruff check src/*.py`, a hook manager's `glob:`) a pattern selects the
    files a command reads, not code that runs: counting it would hold every edit of the user's sources."""
    found = set()
    for line in _LOADING_LINE.findall(text):
        for tok in _TOKEN.findall(line):
            if "*" not in tok and "?" not in tok:
                continue
            tok = tok.removeprefix("./")
            for pattern in {tok, os.path.normpath(os.path.join(base, tok))}:
                found |= {k for k in known if fnmatch.fnmatchcase(k, pattern)}
    return found


_IMPORT = re.compile(r"(?m)^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import\b(.*)|import[ \t]+(.*))")
_DASH_M = re.compile(r"-m[ \t]+([\w.]+)")


def _imported_paths(who: str, text: str, known: set[str]) -> set[str]:
    """Files of `known` that a Python hook imports (the packages on the way included), or that a hook runs
    with `python -m`: looked up beside the script (sys.path[0]) and at the top (a hook's working folder)."""
    modules = {m.group(1) for m in _DASH_M.finditer(text)}
    first = text.split("\n", 1)[0]
    if who.endswith(".py") or (first.startswith("#!") and "python" in first):
        for m in _IMPORT.finditer(text):
            if m.group(1):
                modules |= {m.group(1)} | {f"{m.group(1)}.{n}" for n in re.findall(r"\w+", m.group(2))}
            else:
                modules |= {n.split()[0] for n in m.group(3).split(",") if n.split()}
    found = set()
    for base in {os.path.dirname(who) if who in known else "", ""}:
        for mod in modules:
            parts = [p for p in mod.split(".") if p]
            for i in range(1, len(parts) + 1):
                stem = "/".join(filter(None, [base, *parts[:i]]))
                found |= {c for c in (f"{stem}.py", f"{stem}/__init__.py") if c in known}
    return found


# package.json keys that git hook managers read at each commit (husky 4, yorkie, pre-commit, ghooks, ...).
PACKAGE_HOOK_KEYS = ("husky", "gitHooks", "simple-git-hooks", "pre-commit", "precommit", "git-hooks")


PACKAGE_HOOK_KEYS += ("lint-staged", "nano-staged", "ghooks")


NPM_RUNNERS = {"npm", "npx", "yarn", "pnpm", "bun", "lint-staged"}


class AutorunPaths(dict):
    """glob/path -> why; `package_scripts`: who runs package.json's scripts by itself ("" when nothing)."""

    package_scripts = ""


def package_hooks_changed(before: Optional[bytes], after: bytes, scripts_run_by: str) -> str:
    """Why the agent's package.json changes what runs by itself (a hook manager's section, or the scripts
    when a hook runs them), or ""."""

    def load(data):
        try:
            out = json.loads(data)
            return out if isinstance(out, dict) else {}
        except (ValueError, TypeError):
            return None

    old, new = load(before or b"{}"), load(after)
    if old is None or new is None:
        return "package.json that cannot be read as JSON"
    for key in PACKAGE_HOOK_KEYS:
        pick = (
            (lambda d: (d.get("config") or {}).get("ghooks")) if key == "ghooks" else (lambda d: d.get(key))
        )
        if pick(old) != pick(new):
            return f'git hook configuration in package.json ("{key}")'
    if scripts_run_by and old.get("scripts") != new.get("scripts"):
        return f"package.json scripts, which {scripts_run_by} runs"
    return ""


def autorun_paths(
    root: Path, candidates: Iterable[str] = (), files: Optional[Iterable[str]] = None
) -> AutorunPaths:
    """glob/path -> why, for everything under root that runs without being asked: the well-known files
    (AUTORUN_GLOBS), the hook folder and every program git's own configuration names inside the folder
    (core.hooksPath, core.fsmonitor, filters, aliases; includes are read by git itself), and the scripts
    that those files and the repository's installed hooks name, match by a path pattern or import (a Python
    hook's modules). `candidates`: the agent's paths, new ones included; `files`: the folder's files when
    the caller has listed them."""
    root = Path(root)
    held = AutorunPaths()  # the repository's own configuration first: its reasons are the precise ones
    toplevel = _git(root, "rev-parse", "--show-toplevel", any_owner=True)
    top = Path(os.fsdecode(toplevel.strip())) if toplevel else root
    for entry in _z(_git(root, "config", "--list", "-z", any_owner=True)):
        key, _, value = entry.partition("\n")
        key = key.lower()
        if key == "core.hookspath":
            if not value.strip():
                continue  # empty: git's default folder under .git
            rel = _inside(root, top, os.path.expanduser(value))
            if rel is not None:
                held[rel or "*"] = f"git's hook folder, core.hooksPath = {value}"
            continue
        for tok in _TOKEN.findall(value):
            if "/" in tok or key.endswith("fsmonitor"):
                rel = _inside(root, top, os.path.expanduser(tok))
                if rel:
                    held[rel] = f"a program git runs, {key}"
    # Included configuration files (include.path, includeIf.*.path) are read relative to the file that
    # includes them, not the top level: one in the working tree can set hooksPath, fsmonitor, aliases.
    found = _z(
        _git(
            root, "config", "--show-origin", "-z", "--get-regexp", r"^include(if\..*)?\.path$", any_owner=True
        )
    )
    for origin, entry in zip(found[::2], found[1::2]):
        key, _, value = entry.partition("\n")
        source = Path(origin.partition(":")[2])
        rel = _inside(root, top, str(root / source.parent / os.path.expanduser(value)))
        if rel:
            held[rel] = f"git's configuration, included by {source.as_posix()} ({key})"
    for glob, why in AUTORUN_GLOBS:
        held.setdefault(glob, why)
    if files is None:
        files = [p.relative_to(root).as_posix() for p in _iter_files(root)]
    known = set(files) | set(candidates)
    # The repository's installed hooks (.git/hooks, or the hook folder) run scripts of the working tree too.
    hooks = _git(root, "rev-parse", "--git-path", "hooks", any_owner=True)
    texts: list[tuple[str, str]] = []
    if hooks:
        hooks_dir = Path(os.fsdecode(hooks.strip()))
        hooks_dir = hooks_dir if hooks_dir.is_absolute() else root / hooks_dir
        with contextlib.suppress(OSError):
            for h in sorted(hooks_dir.iterdir())[:200]:
                if h.is_file() and not h.name.endswith(".sample"):
                    texts.append((f"the git hook {h.name}", _head(h)))
    globs = tuple(held)
    frontier = sorted(p for p in known if _any(p, globs) and (root / p).is_file())
    texts += [(p, _head(root / p)) for p in frontier]
    seen = set(frontier)
    for _ in range(4):  # scripts that scripts run, a few levels deep
        nxt = []
        for who, text in texts:
            base = os.path.dirname(who) if who in known else ""
            words = set(_TOKEN.findall(text))
            if words & NPM_RUNNERS and not held.package_scripts:
                held.package_scripts = who
            # `make lint` in a hook runs the Makefile: the files that say what a named runner runs.
            named = {
                c for w in words for c in RUNNER_CONFIGS.get(w, ()) if c != "package.json" and c in known
            }
            imported = _imported_paths(who, text, known)
            ran = _named_paths(text, known, base) | _matched_paths(text, known, base) | named
            for q in sorted((imported | ran) - seen):
                held[q] = f"{who} imports it" if q in imported else f"{who} runs it"
                seen.add(q)
                nxt.append(q)
        texts = [(q, _head(root / q)) for q in nxt]
    return held


def _head(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return ""


def _inside(root: Path, top: Path, value: str) -> Optional[str]:
    """value (relative to the repository's top level, or absolute) as a path relative to root: "" for root
    itself, None when outside it."""
    target = Path(os.path.normpath(top / value))
    for base in {Path(os.path.normpath(root)), Path(os.path.realpath(root))}:
        with contextlib.suppress(ValueError):
            s = target.relative_to(base).as_posix()
            return "" if s == "." else s
    with contextlib.suppress(ValueError, OSError):
        s = Path(os.path.realpath(target)).relative_to(Path(os.path.realpath(root))).as_posix()
        return "" if s == "." else s
    return None
