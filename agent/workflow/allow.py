"""What `harness run --apply` may write without --allow-hooks: the allowlist rule (holds), and what it reads
of the folder to judge a change (which files the user had, which existing files include or name a path, which
folders git would read as a repository)."""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import stat
from pathlib import Path
from typing import Iterable

from agent.workflow.paths import VCS_REASONS, _git, _iter_files, _read_original, _z, matches
from agent.workflow.protect import _TOKEN, _head, autorun_paths, package_hooks_changed

# Names a tool reads its settings from, or a runner loads by its name (compared in lower case, to the name
# only): configuration formats, rc files, build and task files, the files make includes, and the names the
# Python runtime and pytest load without being asked. A dotfile is configuration whatever its name.
CONFIG_NAMES = (
    "*.toml",
    "*.ini",
    "*.cfg",
    "*.conf",
    "*.config",
    "*.config.*",  # vite.config.ts, husky.config.js, lint-staged.config.mjs
    "*.yaml",
    "*.yml",
    "*.json",
    "*.json5",
    "*.jsonc",
    "*.properties",
    "*.plist",
    "*.env",
    "*.code-workspace",
    "*.props",
    "*.targets",
    "*rc",
    "makefile",
    "gnumakefile",
    "*.mk",
    "*.mak",
    "justfile",
    "taskfile*",
    "rakefile",
    "gemfile",
    "vagrantfile",
    "dockerfile*",
    "*.dockerfile",
    "containerfile",
    "brewfile",
    "procfile",
    "tiltfile",
    "earthfile",
    "snakefile",
    "cmakelists.txt",
    "*.cmake",
    "meson.build",
    "build.bazel",
    "workspace.bazel",
    "module.bazel",
    "*.bzl",
    "*.gradle",
    "*.gradle.kts",
    "pom.xml",
    "gradlew",
    "mvnw",
    "*.nix",
    "setup.py",
    "noxfile.py",
    "fabfile.py",
    "dodo.py",
    "conftest.py",
    "sitecustomize.py",
    "usercustomize.py",
    "*.pth",
)

# Compiled or cached artifacts, and packaging metadata: an interpreter or loader picks them up by name (a
# sourceless json.pyc shadows the standard module, a *.dist-info's entry points load as plugins).
COMPILED_NAMES = (
    "*.pyc",
    "*.pyo",
    "*.pyd",
    "*.so",
    "*.so.*",
    "*.dylib",
    "*.dll",
    "*.exe",
    "*.o",
    "*.obj",
    "*.a",
    "*.lib",
    "*.class",
    "*.jar",
    "*.war",
    "*.whl",
    "*.egg",
    "*.node",
    "*.wasm",
    "*.elc",
    "*.beam",
)
COMPILED_DIRS = ("__pycache__", "*.dist-info", "*.egg-info", "*.egg")

# Scripts: read with the configuration files for the names and include patterns they hold.
SCRIPT_NAMES = ("*.sh", "*.bash", "*.zsh", "*.fish", "*.ps1", "*.bat", "*.cmd")

# A line that loads other files by name or pattern: make's include/-include/sinclude, a shell's `source`/`.`,
# ssh/nginx `include`, `%include`, `@import`.
_INCLUDE_LINE = re.compile(r"(?mi)^[ \t]*(-?include|sinclude|source|\.|%include|@import)[ \t]+(.*)$")

BARE_REPO = f"{VCS_REASONS[0]} (a folder laid out as a git repository: HEAD with objects/, refs/ or config)"

MAX_SCANNED = 5000  # configuration files and scripts read for references (1 MB each at most)


def holds(root: Path, writes: dict[str, bytes], deleting: Iterable[str], *, allow_hooks: bool = False):
    """The rule for what --apply writes: {path: why} for every change it holds back; every other change of
    `writes` (path -> new content) and `deleting` may be written. A change is applied only when it is

    1. a regular file outside anything git reads as a repository (links and special files never reach here;
       `.git` anywhere is held by paths.refuse_reason; so is a folder holding HEAD with objects/, refs/,
       commondir or config: git reads it as a bare repository, or will once its empty folders exist) --
       held even with --allow-hooks;

    and, unless --allow-hooks,
    2. not run by anything by itself: the hook managers' and auto-environments' files (AUTORUN_GLOBS), what
       the repository's git configuration names, and every script those name, import or match with a path
       pattern (protect.autorun_paths);
    3. not configuration, new or changed: a dotfile, or a name in CONFIG_NAMES (settings formats, rc files,
       build and task files, *.mk, conftest.py, *.pth);
    4. not a compiled or cached artifact (COMPILED_NAMES, __pycache__/, *.dist-info/);
    5. for a new file (one git does not track; outside git, one the folder does not have): not inside a
       dot-folder, and not named by an existing configuration file or script, literally or by a pattern on an
       include line (a Makefile's `-include *.mk`).

    So new source files, docs and tests, and edits or removals of the user's own tracked source files
    (inside a dot-folder too) apply; everything else is listed with its reason."""
    root = Path(root)
    writes = dict(writes)
    changed = sorted(set(writes) | set(deleting))
    out = {rel: BARE_REPO for rel in _in_repository_folders(root, writes, changed)}
    if allow_hooks:
        return out
    top = len(str(root).rstrip("/")) + 1
    files = [str(p)[top:] for p in _iter_files(root)]  # (string slicing: a repository has 100k files)
    auto = autorun_paths(root, changed, files=files)
    had = _had(root, changed)
    new = {rel for rel in writes if rel not in had}  # (a removal is never new)
    named = _referenced(root, files, new)
    for rel in changed:
        if rel in out:
            continue
        # Case-folded: on a case-insensitive file system .HUSKY/pre-commit is the hook folder.
        hook = next((w for g, w in auto.items() if matches(rel.lower(), g.lower())), "")
        if not hook and rel.rsplit("/", 1)[-1] == "package.json" and rel in writes:
            hook = package_hooks_changed(_read_original(root, rel), writes[rel], auto.package_scripts)
        why = named.get(rel) or config_kind(rel) or compiled_kind(rel)
        if hook:
            why = f"runs by itself: {hook}"
        elif not why and rel in new and _in_dot_folder(rel):
            why = "a new file in a dot-folder (tools read these by name)"
        if why:
            out[rel] = f"{why}; --allow-hooks writes it"
    return out


def config_kind(rel: str) -> str:
    """Why the file at rel is configuration by its name (rule 3), or ""."""
    name = rel.rsplit("/", 1)[-1].lower()
    if name.startswith("."):
        return "a dotfile (configuration a tool reads by its name)"
    if _names(CONFIG_NAMES).match(name):
        return "a configuration or build file (a tool loads it by its name)"
    return ""


def compiled_kind(rel: str) -> str:
    """Why the file at rel is a compiled or cached artifact (rule 4), or ""."""
    *folders, name = rel.lower().split("/")
    if _names(COMPILED_NAMES).match(name) or any(_names(COMPILED_DIRS).match(d) for d in folders):
        return "a compiled or cached file (an interpreter or loader picks it up by name)"
    return ""


def _in_dot_folder(rel: str) -> bool:
    return any(p.startswith(".") for p in rel.split("/")[:-1])


def _glob(rel: str, pattern: str) -> bool:
    """A path against an include line's pattern as make and the shells expand it: one name per name, a `*`
    never crossing a folder."""
    parts, pats = rel.split("/"), pattern.split("/")
    return len(parts) == len(pats) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, pats))


def _script(rel: str) -> bool:
    return bool(_names(SCRIPT_NAMES).match(rel.rsplit("/", 1)[-1].lower()))


@functools.lru_cache(maxsize=None)
def _names(globs: tuple[str, ...]) -> re.Pattern:
    """One compiled pattern for a tuple of name globs."""
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs))


def _had(root: Path, paths: list[str]) -> set[str]:
    """The paths the user already had: tracked by git in a repository; outside one, a regular file there."""
    if _git(root, "rev-parse", "--is-inside-work-tree", any_owner=True) == b"true\n":
        # Paths relative to root (ls-files answers relative to its working folder); no fsmonitor asked.
        tracked = set(_z(_git(root, "-c", "core.fsmonitor=false", "ls-files", "-z", any_owner=True)))
        return {p for p in paths if p in tracked}
    out = set()
    for p in paths:
        try:
            if stat.S_ISREG(os.lstat(root / p).st_mode):
                out.add(p)
        except OSError:
            pass
    return out


def _in_repository_folders(root: Path, writes: dict[str, bytes], changed: list[str]) -> list[str]:
    """The changed paths inside a folder below root laid out as a git repository after the change: HEAD with
    objects/, refs/, commondir or config, from the user's entries or the agent's (a bare repository: git runs
    what its config says, core.fsmonitor included, when someone works in it; config counts because a
    sandbox's capture has no empty folders, and objects/ and refs/ of a new one are). In lower case: a
    case-insensitive file system finds the names either way."""
    written = {w.lower() for w in writes}
    written_dirs = {w.rsplit("/", i)[0] for w in written for i in range(1, w.count("/") + 1)}
    looks: dict[str, bool] = {}

    def on_disk(folder: str) -> dict[str, bool]:  # lower-case name -> is a folder
        try:
            with os.scandir(root / folder) as it:
                return {e.name.lower(): e.is_dir(follow_symlinks=False) for e in it}
        except OSError:
            return {}

    def is_repository(folder: str) -> bool:
        if folder not in looks:
            disk, low = on_disk(folder), folder.lower()
            has_file = lambda n: f"{low}/{n}" in written or disk.get(n) is False  # noqa: E731
            has_dir = lambda n: f"{low}/{n}" in written_dirs or disk.get(n) is True  # noqa: E731
            looks[folder] = has_file("head") and (
                has_dir("objects") or has_dir("refs") or has_file("commondir") or has_file("config")
            )
        return looks[folder]

    return [
        rel
        for rel in changed
        if any(is_repository(rel.rsplit("/", i)[0]) for i in range(1, rel.count("/") + 1))
    ]


def _referenced(root: Path, files: list[str], new: set[str]) -> dict[str, str]:
    """{new path: why} for the new paths that an existing configuration file or script (rule 5) names:
    literally (relative to the folder or to that file's own folder), or by a pattern on an include line
    (make's `-include *.mk`, a shell's `source conf.d/*.sh`). A pattern elsewhere (a linter's
    `include = ["src/**"]`) names files a tool reads, not code it loads: counting those would hold every new
    source file."""
    out: dict[str, str] = {}
    if not new:
        return out
    wanted = set(new)
    names = {rel.rsplit("/", 1)[-1] for rel in new}
    named = re.compile("|".join(map(re.escape, sorted(names))))
    sources = [f for f in files if f not in wanted and (config_kind(f) or _script(f))][:MAX_SCANNED]
    for src in sources:
        text = _head(root / src)
        base = os.path.dirname(src)
        for m in _INCLUDE_LINE.finditer(text):
            for tok in _TOKEN.findall(m.group(2)):
                pattern = os.path.normpath(os.path.join(base, tok.removeprefix("./")))
                for rel in new:
                    if rel not in out and _glob(rel, pattern):
                        out[rel] = f"{src} includes it ({m.group(1)} {tok})"
        if named.search(text):  # tokenized only where a new file's name appears at all
            for tok in set(_TOKEN.findall(text)):
                if tok.rsplit("/", 1)[-1] in names:  # (a cheap test first: a file holds many tokens)
                    for rel in {tok.removeprefix("./"), os.path.normpath(os.path.join(base, tok))} & wanted:
                        out.setdefault(rel, f"{src} names it (a tool may load it)")
    return out
