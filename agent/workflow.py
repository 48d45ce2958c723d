"""The Python API for using the agent outside an evaluation (`harness run`).

from agent.workflow import run_workflow
result = asyncio.run(run_workflow("openai/gpt-4o-mini", Path("repo"), "fix the failing test",
                                  verify=["python3 -m pytest -q"]))
print(result.diff)

Three steps, each safe for the user's folder by construction:
- select_files: what goes into the sandbox (what git would commit: tracked plus untracked files that are not
  ignored; secrets never, unless --include'd), streamed in batches;
- run_workflow: the agent works on the copy; --verify runs against the user's originals of protected paths;
- apply_changes: every change is checked first, then all of them are applied or none (held-back paths, such as
  protected tests and files that run by themselves, are listed and never written).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import fnmatch
import functools
import json
import os
import re
import shlex
import stat
import subprocess
import tempfile
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from agent.config import DEFAULT_MAX_COPY_MB, LoopConfig
from agent.loop import LoopResult, run_loop
from agent.models import get_model
from agent.sandbox import Changes, ExecResult, Limits, SandboxPool
from agent.sandbox.images import ensure_base_image
from evaluators.grading.tamper import is_visible_test, tamper_reason
from results.errors import UserError

MAX_WORKSPACE_BYTES = DEFAULT_MAX_COPY_MB << 20
BATCH_BYTES = 8 << 20  # the copy streams: one tar of at most this much (or one file) at a time
MAX_CHANGE_BYTES = 64 << 20  # what run_workflow captures of the agent's changes

# Files that look like secrets: never copied into the sandbox (never shown to the model) unless --include'd.
SECRET_GLOBS = (
    ".env*",
    "*.env",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.kdbx",
    "*.tfstate",
    "*.tfstate.*",
    "id_*",
    ".netrc",
    "_netrc",
    ".pgpass",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".boto",
    ".s3cfg",
    ".htpasswd",
    "credentials",
    "credentials.json",
    "*credentials*.json",
    "*service-account*.json",
    "*service_account*.json",
    "client_secret*.json",
    "secrets.json",
    "secrets.yml",
    "secrets.yaml",
    "kubeconfig",
    "*.kubeconfig",
    ".aws/*",
    ".azure/*",
    ".config/gcloud/*",
    ".gcloud/*",
    ".kube/*",
    ".docker/config.json",
    ".ssh/*",
    ".gnupg/*",
)

# Protected by default (besides the tests --verify names): CI configuration. Changes are shown, never applied.
CI_GLOBS = (
    ".github/*",
    ".gitlab-ci.yml",
    ".gitlab/*",
    ".circleci/*",
    ".travis.yml",
    "azure-pipelines.yml",
    ".azure-pipelines/*",
    "Jenkinsfile",
    ".buildkite/*",
    ".drone.yml",
    ".woodpecker.yml",
    ".woodpecker/*",
    "bitbucket-pipelines.yml",
    "appveyor.yml",
    ".appveyor.yml",
    ".ci/*",
    ".forgejo/*",
    ".gitea/*",
)
# Test files by the conventions of the common runners: protected when a --verify command names no file.
TEST_GLOBS = (
    "test_*.py",
    "*_test.py",
    "tests/*",
    "*_test.go",
    "*.test.*",
    "*.spec.*",
    "__tests__/*",
    "test/*",
    "spec/*",
    "conftest.py",
)

# Dependency and cache folders: left out of the copy outside git too (in a repository .gitignore decides).
DEPENDENCY_DIRS = {
    ".venv",
    "venv",
    "node_modules",
    "__pycache__",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
}

# Version-control metadata: a checkout runs what these say (core.fsmonitor, hooks, filters, submodule URLs),
# so nothing from a sandbox is ever written into them. Compared in lower case (case-insensitive file systems).
VCS_DIRS = {".git", "git~1", ".hg", ".svn", ".bzr", "_darcs", "cvs", ".jj", ".pijul", ".fossil-settings"}
VCS_FILES = {
    ".gitattributes",
    ".gitmodules",
    ".gitconfig",
    ".hgrc",
    ".hgsub",
    ".hgsubstate",
    ".fslckout",
    "_fossil_",
    ".bzrrules",
}

# Files that a tool the user already has runs without being asked: git hook managers, shell auto-environments
# (direnv, autoenv, mise), editors' auto-run tasks and per-folder startup files, package managers' per-project
# scripts. Writing into them needs --allow-hooks. (The repository's own git config adds its hook folder, and
# every script these files name in the folder.)
AUTORUN_GLOBS = (
    (".husky/*", "a husky git hook"),
    (".githooks/*", "a git hooks folder"),
    (".git-hooks/*", "a git hooks folder"),
    (".hooks/*", "a git hooks folder"),
    (".pre-commit-config.yaml", "pre-commit's hook configuration"),
    (".pre-commit-config.yml", "pre-commit's hook configuration"),
    ("lefthook*.yml", "lefthook's hook configuration"),
    (".lefthook*.yml", "lefthook's hook configuration"),
    ("lefthook*.yaml", "lefthook's hook configuration"),
    (".lefthook*.yaml", "lefthook's hook configuration"),
    (".lefthook/*", "lefthook's hook scripts"),
    (".lefthook-local/*", "lefthook's hook scripts"),
    (".overcommit.yml", "overcommit's hook configuration"),
    (".simple-git-hooks.*", "simple-git-hooks' configuration"),
    ("simple-git-hooks.*", "simple-git-hooks' configuration"),
    (".huskyrc*", "husky's hook configuration"),
    ("husky.config.*", "husky's hook configuration"),
    (".lintstagedrc*", "lint-staged (run by git hooks)"),
    ("lint-staged.config.*", "lint-staged (run by git hooks)"),
    (".envrc", "direnv runs it on cd"),
    (".env", "autoenv runs it on cd"),
    (".env.leave", "autoenv runs it on cd"),
    (".autoenv*", "autoenv runs it on cd"),
    (".mise.toml", "mise runs its hooks on cd"),
    ("mise.toml", "mise runs its hooks on cd"),
    ("mise.*.toml", "mise runs its hooks on cd"),
    (".mise/*", "mise runs its hooks on cd"),
    (".config/mise/*", "mise runs its hooks on cd"),
    (".vscode/tasks.json", "editor tasks (runOn folderOpen)"),
    (".vscode/settings.json", "editor settings (name programs the editor starts)"),
    (".vscode/launch.json", "editor launch configuration"),
    ("*.code-workspace", "editor workspace (tasks and settings)"),
    (".idea/*", "JetBrains project (startup tasks, run configurations)"),
    (".zed/*", "Zed tasks and settings"),
    (".devcontainer/*", "dev container (initializeCommand runs on the host)"),
    (".devcontainer.json", "dev container (initializeCommand runs on the host)"),
    (".exrc", "vim/neovim exrc"),
    (".vimrc", "vim exrc"),
    (".nvimrc", "neovim exrc"),
    (".nvim.lua", "neovim exrc"),
    (".lvimrc", "vim localvimrc"),
    (".dir-locals.el", "Emacs directory variables"),
    (".dir-locals-2.el", "Emacs directory variables"),
    (".gdbinit", "gdb runs it at start"),
    (".lldbinit", "lldb runs it at start"),
    (".pdbrc", "pdb runs it at start"),
    (".yarnrc", "yarn configuration (yarnPath runs a script)"),
    (".yarnrc.yml", "yarn configuration (yarnPath runs a script)"),
    (".yarn/releases/*", "the yarn binary yarnPath runs"),
    (".pnpmfile.cjs", "pnpm runs it on install"),
    (".mvn/*", "Maven wrapper and JVM configuration"),
)


# ------------------------------------------------------------------------------------------ paths and globs


def matches(path: str, glob: str) -> bool:
    """A --include/--exclude/--protect/--secret GLOB against a relative path: the whole path, one of its
    folders (`docs`, `build/`), or, for a glob without "/", any one name in it (`*.log`, `.env*`)."""
    return _any(path, (glob,))


def _any(path: str, globs: Iterable[str]) -> bool:
    """matches() for any of the globs: one compiled pattern per set of globs (a repository has 100k files)."""
    whole, name = _compiled(tuple(globs))
    if whole is None:
        return False
    parts = path.split("/")
    if name is not None and any(name.match(p) for p in parts):
        return True
    return any(whole.match("/".join(parts[: i + 1])) for i in range(len(parts)))


@functools.lru_cache(maxsize=256)
def _compiled(globs: tuple[str, ...]) -> tuple[Optional[re.Pattern], Optional[re.Pattern]]:
    cleaned = [g for g in (g.strip().removeprefix("./").rstrip("/") for g in globs) if g]

    def one(gs):
        return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in gs)) if gs else None

    return one(cleaned), one([g for g in cleaned if "/" not in g])


def unsafe_char(ch: str) -> bool:
    """Control and format characters (C0, DEL, C1 such as U+009B, bidi overrides, zero-width), surrogates,
    private use and line/paragraph separators: never in a name written to the user's folder or terminal."""
    return unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp")


def escape_terminal(text: str) -> str:
    """Text from a sandbox made safe to print: control and format characters (escape sequences, bidi
    overrides) are shown as \\x.. / \\u.... escapes; newlines and tabs stay."""
    out = []
    for ch in text:
        if ch in "\n\t":
            out.append(ch)
        elif unsafe_char(ch):
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


VCS_REASONS = ("version-control metadata", "a version-control configuration file")  # held back, not refused


def refuse_reason(rel: str) -> str:
    """Why a path from the sandbox may not be written into any folder, or "" (see apply_changes for the
    checks against the folder itself: platform limits, links, hooks, protected paths)."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return "not a plain relative path"
    if any(unsafe_char(ch) for ch in rel):
        return "control or format characters in the name"
    try:
        os.fsencode(rel)
    except UnicodeError:
        return "a name the file system's encoding cannot write"
    lowered = [p.lower() for p in parts]
    if any(p in VCS_DIRS for p in lowered):
        return VCS_REASONS[0]
    if lowered[-1] in VCS_FILES:
        return VCS_REASONS[1]
    return ""


def _limits(folder: Path) -> tuple[int, int]:
    """The platform's NAME_MAX and PATH_MAX (bytes) where files would be written."""
    name_max, path_max = 255, 4096
    with contextlib.suppress(OSError, ValueError):
        name_max = os.pathconf(folder, "PC_NAME_MAX")
    with contextlib.suppress(OSError, ValueError):
        path_max = os.pathconf(folder, "PC_PATH_MAX")
    return name_max, path_max


def limit_reason(root: Path, rel: str, name_max: int, path_max: int) -> str:
    """Why rel cannot be created under root on this platform, or ""."""
    for part in rel.split("/"):
        if len(os.fsencode(part)) > name_max:
            return f"a name longer than the platform's limit of {name_max} bytes"
    # With room for the temporary names (".harness-PID-N.tmp") apply_changes writes next to the target.
    parent, _, name = str(root / rel).rpartition("/")
    if len(os.fsencode(parent)) + max(len(os.fsencode(name)), 40) + 2 >= path_max:
        return f"a path longer than the platform's limit of {path_max} bytes"
    return ""


# ------------------------------------------------------------------------------------------ git


# Variables that would point git at another repository or index than the folder's (a git hook sets some).
_GIT_LOCATION = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR")


def _git(
    folder: Path, *args: str, git_dir: Optional[Path] = None, stdin: bytes = b"", any_owner: bool = False
) -> Optional[bytes]:
    """git's stdout, or None when git is missing or fails. Never prompts; takes no optional locks.
    any_owner: read a repository owned by someone else too (only for commands that run nothing of it)."""
    pre = ["--git-dir", str(git_dir), "--work-tree", str(folder)] if git_dir else []
    pre += ["-c", "safe.directory=*"] if any_owner else []
    env = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION}
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    try:
        p = subprocess.run(
            ["git", *pre, *args], cwd=folder, input=stdin, capture_output=True, timeout=300, env=env
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def _z(out: Optional[bytes]) -> list[str]:
    return [os.fsdecode(x) for x in (out or b"").split(b"\0") if x]


@contextlib.contextmanager
def _git_view(folder: Path):
    """(git_dir or None, in_git): the folder's own repository, or outside git an empty scratch repository
    whose work tree is the folder, so that git itself reads the .gitignore files either way."""
    if _git(folder, "rev-parse", "--is-inside-work-tree") == b"true\n":
        yield None, True
        return
    with tempfile.TemporaryDirectory(prefix="harness-git-") as tmp:
        if _git(Path(tmp), "init", "-q", tmp) is None:
            yield False, False  # no git at all
        else:
            yield Path(tmp) / ".git", False


def ignored_paths(folder: Path, paths: list[str]) -> set[str]:
    """Which of the paths (relative to folder) git's ignore rules ignore: build outputs, caches, venvs."""
    if not paths:
        return set()
    with _git_view(folder) as (git_dir, _):
        if git_dir is False:
            return set()
        out = _git(
            folder,
            "check-ignore",
            "--stdin",
            "-z",
            git_dir=git_dir,
            stdin=b"".join(os.fsencode(p) + b"\0" for p in paths),
        )
    return set(_z(out)) & set(paths)


# ------------------------------------------------------------------------------------------ what is copied


@dataclass
class LeftOut:
    path: str  # a file, or a folder ending in "/"
    files: int
    bytes: int
    why: str


@dataclass
class Selection:
    """What select_files chose: the files copied into the sandbox, and what it left out and why."""

    root: Path
    files: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # path -> (size, mode, mtime_ns)
    left_out: list[LeftOut] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)  # kept out because they look like secrets
    private: list[str] = field(default_factory=list)  # untracked and readable only by their owner: kept out
    in_git: bool = False

    @property
    def total_bytes(self) -> int:
        return sum(size for size, _, _ in self.files.values())

    @property
    def executable(self) -> set[str]:
        return {p for p, (_, mode, _) in self.files.items() if mode & 0o100}

    def summary(self) -> list[str]:
        """Lines for the terminal: what was copied, left out (how much), kept out as secrets."""
        lines = [
            f"copied {_count(len(self.files))} ({_size(self.total_bytes)}) into the sandbox"
            + (" (what git tracks plus untracked files not ignored)" if self.in_git else "")
        ]
        if self.left_out:
            n, b = sum(x.files for x in self.left_out), sum(x.bytes for x in self.left_out)
            lines.append(f"left out: {_count(n)} ({_size(b)}); --include GLOB copies them")
            by_size = sorted(self.left_out, key=lambda x: (-x.bytes, x.path))
            for x in by_size[:12]:
                lines.append(f"  {escape_terminal(x.path)}: {_count(x.files)}, {_size(x.bytes)} ({x.why})")
            if len(by_size) > 12:
                lines.append(f"  ... and {len(by_size) - 12} more")
        if self.private:
            lines.append(
                "kept out as private (untracked, readable only by you; --include GLOB copies one): "
                + ", ".join(escape_terminal(s) for s in self.private[:20])
                + (f" and {len(self.private) - 20} more" if len(self.private) > 20 else "")
            )
        if self.secrets:
            lines.append(
                "kept out as secrets (never shown to the model; --include GLOB copies one): "
                + ", ".join(escape_terminal(s) for s in self.secrets[:20])
                + (f" and {len(self.secrets) - 20} more" if len(self.secrets) > 20 else "")
            )
        return lines


def _count(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _lsize(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def _walk_size(path: Path, cap: int = 200_000) -> tuple[int, int]:
    """(files, bytes) under a folder, without following links; stops counting after cap entries."""
    files = size = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                files += 1
                size += st.st_size if stat.S_ISREG(st.st_mode) else 0
        if files >= cap:
            break
    return files, size


def select_files(
    folder: Path,
    *,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    secret: Iterable[str] = (),
    max_bytes: int = MAX_WORKSPACE_BYTES,
) -> Selection:
    """The files of `folder` that go into the sandbox: what git tracks plus untracked files that are not
    ignored (`git ls-files --cached --others --exclude-standard`; outside a repository its .gitignore files
    still apply), less --exclude and secret-looking files, plus what --include names. Only regular files;
    links, submodules and unreadable files are left out and listed. UserError over max_bytes."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"--workspace {folder}: not a folder")
    include, exclude, secret = list(include), list(exclude), list(SECRET_GLOBS) + list(secret)
    sel = Selection(root=folder)
    with _git_view(folder) as (git_dir, in_git):
        sel.in_git = in_git
        if git_dir is False:  # no git on this machine: every file but version-control metadata
            candidates = [p.relative_to(folder).as_posix() for p in _iter_files(folder, skip_deps=False)]
            ignored = []
        else:
            # Outside git nothing says that a venv is not the project's: the usual dependency folders count
            # as ignored there.
            deps = [] if in_git else [f"--exclude={d}/" for d in sorted(DEPENDENCY_DIRS)]
            listed = _git(
                folder, "ls-files", "--cached", "--others", "--exclude-standard", *deps, "-z", git_dir=git_dir
            )
            if listed is None:
                raise UserError(f"--workspace {folder}: `git ls-files` failed there (run it to see why)")
            candidates = _z(listed)
            ignored = _z(
                _git(
                    folder,
                    "ls-files",
                    "--others",
                    "--ignored",
                    "--exclude-standard",
                    *deps,
                    "--directory",
                    "-z",
                    git_dir=git_dir,
                )
            )
            if include:  # the ignored files --include names come back in
                every = _z(
                    _git(
                        folder,
                        "ls-files",
                        "--others",
                        "--ignored",
                        "--exclude-standard",
                        *deps,
                        "-z",
                        git_dir=git_dir,
                    )
                )
                candidates += [p for p in every if _any(p, include)]
    brought = set(candidates) if include else set()
    for entry in ignored:
        why = "ignored by .gitignore"
        if not in_git and entry.rstrip("/").rsplit("/", 1)[-1] in DEPENDENCY_DIRS:
            why = "a dependency or cache folder (outside git these are left out)"
        if any(b == entry or b.startswith(entry) for b in brought):
            why += " (partly copied: --include)"
        n, b = _walk_size(folder / entry) if entry.endswith("/") else (1, _lsize(folder / entry))
        sel.left_out.append(LeftOut(entry, n, b, why))
    stats = {}
    for rel in sorted(set(candidates)):
        with contextlib.suppress(OSError):  # (a tracked file deleted in the working tree)
            stats[rel] = os.lstat(folder / rel)
    # An untracked file that only its owner may read was made private on purpose, unless every file here is
    # (a umask of 077): kept out like a secret.
    tracked = set(_z(_git(folder, "ls-files", "--cached", "-z"))) if in_git else set()
    usual = [st for rel, st in stats.items() if stat.S_ISREG(st.st_mode) and (rel in tracked or not in_git)]
    deliberate = sum(1 for st in usual if st.st_mode & 0o044) > len(usual) / 2
    for rel, st in stats.items():
        if stat.S_ISLNK(st.st_mode):
            sel.left_out.append(LeftOut(rel, 1, 0, "a symlink (not copied)"))
        elif stat.S_ISDIR(st.st_mode):
            n, b = _walk_size(folder / rel)
            sel.left_out.append(LeftOut(rel + "/", n, b, "a submodule or nested repository"))
        elif not stat.S_ISREG(st.st_mode):
            sel.left_out.append(LeftOut(rel, 1, 0, "not a regular file"))
        elif _any(rel, include):
            sel.files[rel] = (st.st_size, st.st_mode, st.st_mtime_ns)
        elif _any(rel, exclude):
            sel.left_out.append(LeftOut(rel, 1, st.st_size, "--exclude"))
        elif _any(rel, secret):
            sel.secrets.append(rel)
        elif deliberate and rel not in tracked and not st.st_mode & 0o044:
            sel.private.append(rel)
        else:
            sel.files[rel] = (st.st_size, st.st_mode, st.st_mtime_ns)
    if sel.total_bytes > max_bytes:
        largest = _largest_folders(sel.files)
        raise UserError(
            f"--workspace {folder}: the files to copy total {_size(sel.total_bytes)}, over the limit of "
            f"{_size(max_bytes)} (--max-copy-mb); largest: {largest}. Leave some out with --exclude GLOB "
            "(or .gitignore), or raise --max-copy-mb"
        )
    return sel


def _largest_folders(files: dict[str, tuple[int, int, int]]) -> str:
    totals: dict[str, int] = {}
    for p, (size, _, _) in files.items():
        top = p.split("/", 1)[0] + ("/" if "/" in p else "")
        totals[top] = totals.get(top, 0) + size
    top3 = sorted(totals.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{escape_terminal(k)} {_size(v)}" for k, v in top3)


def read_workspace(folder: Path) -> dict[str, bytes]:
    """The selected files' contents, all in memory (run_workflow streams them instead)."""
    sel = select_files(folder)
    return {p: (Path(folder) / p).read_bytes() for p in sel.files}


def _batches(sel: Selection):
    """The selected files in batches of at most BATCH_BYTES (or one larger file), read from disk as they are
    sent; a file that cannot be read is left out and listed."""
    batch: dict[str, bytes] = {}
    size = 0
    for rel in sorted(sel.files):
        try:
            data = (sel.root / rel).read_bytes()
        except OSError as e:
            if not any(x.path == rel for x in sel.left_out):
                sel.left_out.append(LeftOut(rel, 1, 0, f"unreadable: {e.strerror}"))
            continue
        if batch and size + len(data) > BATCH_BYTES:
            yield batch
            batch, size = {}, 0
        batch[rel] = data
        size += len(data)
    if batch:
        yield batch
    for x in sel.left_out:
        sel.files.pop(x.path, None)


# ------------------------------------------------------------------------------------------ protect

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
    modules shadowing the standard library: evaluators.grading.tamper's rules), protected with the tests."""
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


# ------------------------------------------------------------------------------------------ run


@dataclass
class WorkflowChanges(Changes):
    """A run's changes with what apply_changes needs to judge them: the protected globs and the files that
    were copied (so `apply_changes(folder, result.changes)` holds back what the run protected)."""

    protect: list[str] = field(default_factory=list)
    copied: Optional[dict[str, tuple[int, int, int]]] = None


@dataclass
class WorkflowResult:
    loop: LoopResult
    changes: Changes
    diff: str
    verification: list[tuple[str, ExecResult]] = field(default_factory=list)
    selection: Optional[Selection] = None
    protect: list[str] = field(default_factory=list)  # globs: shown, flagged, never applied
    plan: Optional["ApplyResult"] = None  # what --apply would do (a dry run), and what --verify ran against

    @property
    def verified(self) -> bool:
        return all(r.exit_code == 0 for _, r in self.verification)

    @property
    def protected_changes(self) -> list[str]:
        return [p for p in self.changes.paths if _any(p, self.protect)]


async def run_workflow(
    model: str,
    workspace: Path,
    instruction: str,
    *,
    verify: list[str] = (),
    cfg: Optional[LoopConfig] = None,
    limits: Limits = Limits(),
    image: Optional[str] = None,
    model_options: Optional[dict] = None,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    secret: Iterable[str] = (),
    protect: Optional[Iterable[str]] = None,
    allow_hooks: bool = False,
    max_copy_mb: int = DEFAULT_MAX_COPY_MB,
    selection: Optional[Selection] = None,
) -> WorkflowResult:
    """Copies the selected files of `workspace` (select_files) into a sandbox and runs the agent loop there;
    then runs the verification commands in a fresh sandbox holding exactly what --apply would leave in the
    folder (the user's files plus the changes apply_changes would write: protected paths stay the user's
    originals), and returns the changes as a diff. The folder itself is not touched (see apply_changes).
    `selection`: select_files' answer when the caller has it already (the CLI prints it first)."""
    workspace = Path(workspace)
    sel = selection or select_files(
        workspace, include=include, exclude=exclude, secret=secret, max_bytes=max_copy_mb << 20
    )
    cfg = cfg or LoopConfig()
    image = image or await asyncio.to_thread(ensure_base_image)
    the_model = get_model(model, **(model_options or {}))
    mb = sel.total_bytes >> 20
    limits = dataclasses.replace(
        limits,
        workspace_mb=max(limits.workspace_mb, 2 * mb + 256),
        memory_mb=max(limits.memory_mb, mb + 1024),  # the workspace is a tmpfs: its pages count as memory
    )
    max_files = len(sel.files) + 5000
    async with SandboxPool(warm=0, max_containers=2) as pool:
        async with pool.sandbox(image, limits, task="workflow") as sb:
            await _copy_in(sb, _batches(sel), sel.executable)
            await sb.mark_baseline(max_files=max_files)
            loop = await run_loop(the_model, sb, instruction, cfg)
            changes = await sb.changes(max_bytes=MAX_CHANGE_BYTES, max_files=max_files)
        protect = list(default_protect(verify, sel.files) if protect is None else protect)
        protect += list(CI_GLOBS) + test_machinery(changes, sel.files)
        changes = WorkflowChanges(**vars(changes), protect=protect, copied=sel.files)
        plan = plan_changes(workspace, changes, protect=protect, allow_hooks=allow_hooks, copied=sel.files)
        checks = []
        if verify:
            async with pool.sandbox(image, limits, task="workflow-verify") as sb:
                written = {p for p in plan.plan if p in changes.files}
                exe = (sel.executable - written) | (changes.executable & written)
                await _copy_in(sb, _patched(sel, changes, plan.plan), exe)
                checks = [(cmd, await sb.exec(cmd, timeout=cfg.command_timeout)) for cmd in verify]
    diff = unified_diff(workspace, changes, flagged=dict(plan))
    return WorkflowResult(loop, changes, diff, checks, sel, protect, plan)


async def _copy_in(sb, batches, executable: set[str]):
    for batch in batches:
        await sb.put_files(batch, executable=executable & set(batch))


def _patched(sel: Selection, changes: Changes, plan: list[str]):
    """The folder as apply_changes would leave it, in batches: the user's files with the planned changes."""
    planned = set(plan)
    for batch in _batches(sel):
        yield {
            p: changes.files[p] if p in planned and p in changes.files else data
            for p, data in batch.items()
            if not (p in planned and p not in changes.files)  # a planned deletion
        }
    new = {p: changes.files[p] for p in plan if p in changes.files and p not in sel.files}
    if new:
        yield new


def _read_original(root: Path, rel: str) -> Optional[bytes]:
    """The user's regular file at rel, reached without links; None when there is none."""
    if refuse_reason(rel) not in ("", *VCS_REASONS):
        return None
    here = Path(root)
    for part in rel.split("/"):
        here = here / part
        try:
            if stat.S_ISLNK(os.lstat(here).st_mode):
                return None
        except OSError:
            return None
    try:
        return here.read_bytes() if here.is_file() else None
    except OSError:
        return None


def unified_diff(workspace: Path, changes: Changes, flagged: Optional[dict[str, str]] = None) -> str:
    """The changes as a unified diff against the user's files (text; a binary file is named only). A path in
    `flagged` is preceded by a `# not applied: path (why)` line (git apply skips such lines)."""
    flagged = flagged or {}
    parts = []
    for p in changes.paths:
        original = _read_original(Path(workspace), p)
        before, after = original or b"", changes.files.get(p, b"")
        if p in flagged:
            parts.append(f"# not applied: {p} ({flagged[p]})\n")
        a_name = f"a/{p}" if original is not None else "/dev/null"
        b_name = "/dev/null" if p not in changes.files else f"b/{p}"
        if b"\0" in before[:8000] or b"\0" in after[:8000]:
            parts.append(f"Binary files {a_name} and {b_name} differ\n")
            continue
        a = before.decode("utf-8", "replace").splitlines(keepends=True)
        b = after.decode("utf-8", "replace").splitlines(keepends=True)
        for line in difflib.unified_diff(a, b, a_name, b_name):
            parts.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(parts)


# ------------------------------------------------------------------------------------------ files that run


_TOKEN = re.compile(r"[^\s'\"`;|&()<>=,\[\]{}:!$]+")


def _named_paths(text: str, known: set[str], base: str = "") -> set[str]:
    """Files of `known` that a hook or configuration text names (`./scripts/check.sh`, `entry: tools/lint`),
    relative to the folder or to the naming file's own folder."""
    found = set()
    for tok in _TOKEN.findall(text):
        tok = tok.removeprefix("./")
        for cand in {tok, os.path.normpath(os.path.join(base, tok)) if base else tok}:
            if cand in known:
                found.add(cand)
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


def autorun_paths(root: Path, candidates: Iterable[str] = ()) -> AutorunPaths:
    """glob/path -> why, for everything under root that runs without being asked: the well-known files
    (AUTORUN_GLOBS), the hook folder and every program git's own configuration names inside the folder
    (core.hooksPath, core.fsmonitor, filters, aliases; includes are read by git itself), and the scripts
    that those files and the repository's installed hooks name."""
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
    known = {p.relative_to(root).as_posix() for p in _iter_files(root)} | set(candidates)
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
            for q in sorted((_named_paths(text, known, base) | named) - seen):
                held[q] = f"{who} runs it"
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


def _iter_files(root: Path, cap: int = 100_000, skip_deps: bool = True):
    """Files under root (links not followed), skipping VCS folders and, for the script scan, the usual
    dependency folders; at most cap."""
    n = 0
    skip = VCS_DIRS | (DEPENDENCY_DIRS if skip_deps else set())
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d.lower() not in skip]
        for name in filenames:
            n += 1
            if n > cap:
                return
            yield Path(dirpath) / name


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


# ------------------------------------------------------------------------------------------ apply


class ApplyResult(list):
    """(path, why) for every change not applied, as apply_changes has always returned; plus `plan` (what
    would be or was written or removed), `applied`, `held_back` (by policy: protected paths, files that run by
    themselves, version control, ignored files) and `refused` (bad names, platform limits, links or special
    files in the way, I/O errors). Any refusal means that nothing is applied."""

    def __init__(self):
        super().__init__()
        self.plan: list[str] = []
        self.applied: list[str] = []
        self.held_back: list[tuple[str, str]] = []
        self.refused: list[tuple[str, str]] = []

    def _finish(self):
        if self.refused:
            self.refused = [(p, f"{w}; so nothing is applied") for p, w in self.refused]
            self.held_back += [(p, "the patch was refused") for p in self.plan]
            self.plan = []
        self[:] = self.refused + self.held_back


def plan_changes(
    workspace: Path,
    changes: Changes,
    *,
    protect: Iterable[str] = CI_GLOBS,
    allow_hooks: bool = False,
    copied: Optional[dict[str, tuple[int, int, int]]] = None,
) -> ApplyResult:
    """apply_changes' checks, writing nothing: the plan, what is held back, what is refused."""
    root = Path(workspace).resolve()
    res = ApplyResult()
    protect = list(protect)
    writes = changes.files
    deleting = {p for p in changes.deleted if p not in writes}
    for why in changes.rejected:  # symlinks and special files the agent made, caps: never in `files`
        for prefix, reason in (
            ("symlink ", "a symlink the agent made; links are never applied"),
            ("special or unreadable file ", "a special or unreadable file the agent made; never applied"),
        ):
            if why.startswith(prefix):
                res.held_back.append((why[len(prefix) :], reason))
                break
        else:
            res.held_back.append((why, "not captured from the sandbox"))
    candidates = sorted(set(writes) | deleting)
    clean = [p for p in candidates if not refuse_reason(p)]
    held = AutorunPaths() if allow_hooks else autorun_paths(root, clean)
    ignored = ignored_paths(root, [p for p in clean if p in writes and (copied is None or p not in copied)])
    name_max, path_max = _limits(root)
    for rel in candidates:
        why = refuse_reason(rel)
        # Case-folded: on a case-insensitive file system .HUSKY/pre-commit is the hook folder.
        hook = "" if why else next((w for g, w in held.items() if matches(rel.lower(), g.lower())), "")
        if why in VCS_REASONS:
            res.held_back.append((rel, why))
        elif why:
            res.refused.append((rel, why))
        elif _any(rel, protect):
            res.held_back.append((rel, "protected: shown, never applied"))
        elif hook:
            res.held_back.append((rel, f"runs by itself: {hook}; --allow-hooks writes it"))
        elif rel in ignored:
            res.held_back.append((rel, "ignored by .gitignore (a build output or cache)"))
        elif (
            not allow_hooks
            and rel.rsplit("/", 1)[-1] == "package.json"
            and rel in writes
            and (why := package_hooks_changed(_read_original(root, rel), writes[rel], held.package_scripts))
        ):
            res.held_back.append((rel, f"runs by itself: {why}; --allow-hooks writes it"))
        else:
            why = limit_reason(root, rel, name_max, path_max) or _check_target(
                root, rel, rel in writes, copied, deleting
            )
            if why.startswith("held:"):
                res.held_back.append((rel, why[5:]))
            elif why:
                res.refused.append((rel, why))
            else:
                res.plan.append(rel)
    res._finish()
    return res


def apply_changes(
    workspace: Path,
    changes,
    *,
    protect: Optional[Iterable[str]] = None,
    allow_hooks: bool = False,
    copied: Optional[dict[str, tuple[int, int, int]]] = None,
) -> ApplyResult:
    """Writes the agent's changes back into the folder (the CLI's --apply): regular files of the working tree
    only, all of them or none. `changes` is a run's WorkflowResult or its changes (the run's protected paths
    and copied files are used), or any Changes. Every change is checked first (plan_changes):
    version-control metadata, protected paths, files that run by themselves (unless allow_hooks), paths git
    ignores and existing files that were not copied are held back and listed; a bad name (control or format
    characters), a path over the platform's limits, a link on the way or a special file in the way refuses
    the whole patch, as does an I/O error while writing (what was done is undone). Never follows or creates
    a link, never writes outside the folder, never removes anything but a regular file; an existing file
    keeps its mode (640 stays 640)."""
    if isinstance(changes, WorkflowResult):
        changes = changes.changes
    if isinstance(changes, WorkflowChanges):
        protect = changes.protect if protect is None else protect
        copied = changes.copied if copied is None else copied
    root = Path(workspace).resolve()
    res = plan_changes(
        root,
        changes,
        protect=CI_GLOBS if protect is None else protect,
        allow_hooks=allow_hooks,
        copied=copied,
    )
    if res.plan:
        try:
            _transaction(root, res.plan, changes.files, changes.executable)
            res.applied = list(res.plan)
        except OSError as e:
            where = os.path.relpath(e.filename, root) if isinstance(e.filename, str) else "?"
            res.refused.append((where, f"could not be written: {e.strerror or e}"))
            res._finish()
    return res


def _check_target(root: Path, rel: str, write: bool, copied, deleting: set[str]) -> str:
    """Why rel cannot be written (or deleted) in the folder as it is now; "held:why" for a policy hold."""
    folder = root
    parts = rel.split("/")
    for i, part in enumerate(parts[:-1]):
        folder = folder / part
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            return "" if write else "held:already gone from your folder"
        except OSError as e:
            return f"cannot look at {part}: {e.strerror}"
        if stat.S_ISLNK(st.st_mode):
            return "a symlink on the way"
        if not stat.S_ISDIR(st.st_mode):
            if write and "/".join(parts[: i + 1]) in deleting and stat.S_ISREG(st.st_mode):
                return ""  # the agent replaced that file by a folder: removed first
            return "a file where a folder would go"
    if not os.access(folder, os.W_OK | os.X_OK):
        return "its folder is not writable"
    try:
        st = os.lstat(root / rel)
    except FileNotFoundError:
        return "" if write else "held:already gone from your folder"
    except OSError as e:
        return f"cannot look at it: {e.strerror}"
    if stat.S_ISDIR(st.st_mode):
        return "a folder is there"
    if not stat.S_ISREG(st.st_mode):
        return "a symlink or special file is there"
    if copied is None and write and _any(rel, SECRET_GLOBS):
        return "held:an existing file that looks like a secret (kept out of the sandbox)"
    if copied is not None:
        if rel not in copied:
            return "held:exists in your folder but was not copied into the sandbox"
        size, _, mtime = copied[rel]
        if (st.st_size, st.st_mtime_ns) != (size, mtime):
            return "changed in your folder during the run"
    return ""


def _transaction(root: Path, plan: list[str], writes: dict[str, bytes], executable: set[str]):
    """Applies a checked plan: files to remove are moved aside first, new contents are staged next to their
    targets (folders made as needed), then renamed into place; a failure undoes everything done so far
    (folders it made included) and re-raises. The moved-aside originals are removed at the end."""
    made_dirs: list[Path] = []
    staged: dict[str, Path] = {}
    aside: list[tuple[Path, Path]] = []  # (original name, where it was moved)
    placed: list[Path] = []
    n = 0

    def scratch(parent: Path) -> Path:
        nonlocal n
        n += 1
        return parent / f".harness-{os.getpid()}-{n}.tmp"

    def move_aside(target: Path):
        backup = scratch(target.parent)
        os.rename(target, backup)  # the name itself: never through a link
        aside.append((target, backup))

    try:
        for rel in plan:
            if rel not in writes and os.path.lexists(root / rel):
                move_aside(root / rel)
        for rel in plan:
            if rel not in writes:
                continue
            target = root / rel
            for parent in reversed(target.parents):
                if parent == root or root not in parent.parents:
                    continue
                if not os.path.lexists(parent):  # (a file the plan deletes is already moved aside)
                    os.mkdir(parent, 0o755)
                    made_dirs.append(parent)
            mode = _mode(target, rel in executable)
            tmp = scratch(target.parent)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            fd = os.open(tmp, flags, 0o600 if mode else (0o777 if rel in executable else 0o666))
            staged[rel] = tmp
            with os.fdopen(fd, "wb") as f:
                f.write(writes[rel])
                if mode is not None:
                    os.fchmod(f.fileno(), mode[0])
                    with contextlib.suppress(OSError):
                        os.fchown(f.fileno(), -1, mode[1])
        for rel, tmp in list(staged.items()):
            target = root / rel
            if os.path.lexists(target):
                move_aside(target)
            os.rename(tmp, target)
            del staged[rel]
            placed.append(target)
    except BaseException:
        for target in reversed(placed):
            with contextlib.suppress(OSError):
                os.remove(target)
        for tmp in staged.values():
            with contextlib.suppress(OSError):
                os.remove(tmp)
        for d in reversed(made_dirs):
            with contextlib.suppress(OSError):
                os.rmdir(d)
        for target, backup in reversed(aside):
            with contextlib.suppress(OSError):
                os.rename(backup, target)
        raise
    for _, backup in aside:
        with contextlib.suppress(OSError):
            os.remove(backup)


def _mode(target: Path, executable: bool) -> Optional[tuple[int, int]]:
    """(mode, gid) for the new content of an existing file: its own permission bits (640 stays 640; never
    setuid/setgid), the executable bits following the agent's change. None for a new file."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    mode = stat.S_IMODE(st.st_mode) & 0o777
    if executable and not mode & 0o111:
        mode |= (mode & 0o444) >> 2
    elif not executable:
        mode &= ~0o111
    return mode, st.st_gid
