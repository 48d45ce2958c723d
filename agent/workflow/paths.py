"""What a path of the user's folder is: a secret, CI or test configuration, a dependency or version-control
folder, a file that runs by itself (the globs); a name the folder cannot take (refuse_reason, limit_reason);
git's view of the folder; the user's original of a file, reached without links."""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import re
import stat
import subprocess
import tempfile
import unicodedata
from pathlib import Path
from typing import Iterable, Optional

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
# every script these files name in the folder.) Not the rule itself (allow.holds: any dotfile or
# configuration file is held back): these name the reason, and the files whose scripts are held with them.
AUTORUN_GLOBS = (
    (".husky/*", "a husky git hook"),
    (".githooks/*", "a git hooks folder"),
    (".git-hooks/*", "a git hooks folder"),
    (".hooks/*", "a git hooks folder"),
    (".pre-commit-config.yaml", "pre-commit's hook configuration"),
    (".pre-commit-config.yml", "pre-commit's hook configuration"),
    ("lefthook.*", "lefthook's hook configuration"),
    ("lefthook-local.*", "lefthook's hook configuration"),
    (".lefthook.*", "lefthook's hook configuration"),
    (".lefthook-local.*", "lefthook's hook configuration"),
    (".config/lefthook*", "lefthook's hook configuration"),
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
    ("mise.toml", "mise runs its hooks on cd"),
    ("mise.*.toml", "mise runs its hooks on cd"),
    (".mise.toml", "mise runs its hooks on cd"),
    (".mise.*.toml", "mise runs its hooks on cd"),
    ("mise/*", "mise runs its hooks on cd"),
    (".mise/*", "mise runs its hooks on cd"),
    (".config/mise/*", "mise runs its hooks on cd"),
    (".config/mise.toml", "mise runs its hooks on cd"),
    (".config/mise.*.toml", "mise runs its hooks on cd"),
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
