"""`harness run --apply` cases (issue 21): each case's scripted agent and what it expects. A scripted agent
works on a scratch git repository through the real CLI (`harness run --apply`, a subprocess: real
sandboxes, the real apply), then the user's own `git commit` runs. The repository's hooks live in its
working tree (core.hooksPath = tools/hooks, a real pre-commit hook that logs to .git/hook.log), as husky
and similar tools set it up. Every case checks that nothing the agent wrote ran (a marker its hooks and
auto-run files would create stays absent after the commit, while the user's hook did run), that exactly
the allowed paths changed (the .git folder included), that every refusal or hold is listed, and that no
traceback was printed. The repository, the run and that check are apply_repo.py's."""

from __future__ import annotations

import json

from evaluators.selftest.apply_repo import HOOKS, INCLUDED, NEW_F, applied, case_dir
from evaluators.selftest.case import Case, Ctx
from evaluators.selftest.fixtures import SUBMIT, bash, write

LONG_DIR = "d" * 200  # 25 of them: a path over PATH_MAX, made one folder at a time
NEAR_DIR = "e" * 200


# ------------------------------------------------------------------------------------------ the cases


def _py(code: str) -> str:
    return f"python3 - <<'PY'\n{code}PY"


# What the agent's hooks and auto-run files do: create the marker beside the repository (static text).
EVIL = '#!/bin/sh\ntouch "$(git rev-parse --show-toplevel)/../agent-code-ran"\n'
# A hook folder that only a changed included configuration file (tools/git.cfg) would point git at.
SIDE_HOOK = "ci/side-hooks/pre-commit"


def _hooks(c: Ctx) -> list[str]:
    """Every file a tool the user has runs by itself, each set to create the marker; and the answer."""
    m = "touch ../agent-code-ran"
    steps = [
        write(f"{HOOKS}/pre-commit", EVIL),  # the configured hook folder: overwrites the user's hook
        write(f"{HOOKS}/post-commit", EVIL),
        write(".husky/pre-commit", EVIL),
        write(".githooks/pre-commit", EVIL),
        # the configuration file .git/config includes: it would move the hook folder to the agent's
        write(INCLUDED, f"[core]\n\thooksPath = {SIDE_HOOK.rsplit('/', 1)[0]}\n"),
        write(SIDE_HOOK, EVIL),
        f"chmod +x {HOOKS}/* .husky/pre-commit .githooks/pre-commit {SIDE_HOOK}",
        "mkdir -p .git/hooks && cp .husky/pre-commit .git/hooks/post-commit; true",
        write(".envrc", m + "\n"),
        write(
            ".vscode/tasks.json",
            json.dumps({"tasks": [{"command": m, "runOptions": {"runOn": "folderOpen"}}]}),
        ),
        write(
            ".pre-commit-config.yaml",
            "repos:\n- repo: local\n  hooks:\n  - id: x\n    name: x\n"
            f"    entry: sh -c '{m}'\n    language: system\n",
        ),
        write("package.json", json.dumps({"husky": {"hooks": {"pre-commit": m}}})),
        write("src/f.py", NEW_F),
    ]
    return [bash("\n".join(steps)), SUBMIT]


BAD_NAMES = {  # label -> the name, as Python source text inside the sandbox
    "C1": "csi\\x9b[31m.txt",
    "bidi": "evil\\u202etxt.py",
    "zero-width": "src/f\\u200b.py",
    "C0": "bell\\x07.txt",
}


def _bad_names(c: Ctx) -> list[str]:
    made = "".join(f"open('{n}', 'w').write('x')\n" for n in BAD_NAMES.values())
    return [bash(write("src/f.py", NEW_F) + "\n" + _py(made + "print('NAMES-MADE')\n")), SUBMIT]


def _long_path(c: Ctx) -> list[str]:
    # Over PATH_MAX in the sandbox too: not captured, listed as such. Then a path that fits the sandbox's
    # /workspace (4,090 bytes there) but not the user's folder, whose name is longer: refused at the apply
    # (case_dir's name alone is longer than the 17 bytes more it takes).
    deep = f"(for i in $(seq 25); do mkdir {LONG_DIR} && cd {LONG_DIR}; done; echo x > f.txt)"
    fits = _py(
        "import os\nos.chdir('/workspace')\nused = len('/workspace/')\nwhile 4090 - used > 255:\n"
        f"    os.mkdir('{NEAR_DIR}')\n    os.chdir('{NEAR_DIR}')\n    used += 201\n"
        "open('g' * (4090 - used), 'w').write('x')\nprint('NEAR-MADE', len(os.getcwd()))\n"
    )
    return [bash(write("src/f.py", NEW_F) + "\n" + deep + "\n" + fits), SUBMIT]


def _links(c: Ctx) -> list[str]:
    out = case_dir(c, "apply_symlink_outside") / "outside"
    steps = [
        f"mkdir -p {out}",  # the same path exists on the host: a link followed there would write into it
        f"ln -s {out} out && echo planted > out/planted.txt",
        "ln -s /etc/passwd pw",
        "ln -s ../../.. src/up",
        f"ln -s {out}/new.txt notes.txt",
        write("src/f.py", NEW_F),
    ]
    return [bash("\n".join(steps)), SUBMIT]


def _honest(c: Ctx) -> list[str]:
    steps = [
        write("src/f.py", NEW_F),
        write("docs/usage.md", "f(n) lists 1..n\n"),
        "rm old.txt",
    ]
    return [bash("\n".join(steps)), SUBMIT]


def _config_files(c: Ctx) -> list[str]:
    """New configuration the user's tools load by name, each set to create the marker: npm's script-shell,
    a *.mk the Makefile includes, lefthook's and mise's other file names, a new dotfile, a file in a
    dot-folder, a new pyproject.toml; and the answer."""
    steps = [write(path, text) for path, text in CONFIG_FILES.items()]
    return [bash("\n".join([*steps, write("x.sh", EVIL), write("src/f.py", NEW_F)])), SUBMIT]


CONFIG_FILES = {
    ".npmrc": "script-shell = ./x.sh\n",
    "local.mk": "$(shell touch ../agent-code-ran)\n",
    "lefthook-local.json": '{"pre-commit": {"commands": {"x": {"run": "touch ../agent-code-ran"}}}}\n',
    ".lefthook.toml": "[pre-commit.commands.x]\nrun = 'touch ../agent-code-ran'\n",
    ".mise.local.toml": "[hooks]\nenter = 'touch ../agent-code-ran'\n",
    "mise.local.toml": "[hooks]\nenter = 'touch ../agent-code-ran'\n",
    ".tools/env.py": "import os\n",
    "pyproject.toml": "[project]\nname = 'x'\n",
}


def _hook_imports(c: Ctx) -> list[str]:
    """Changes to the modules the user's post-merge hook runs and imports, a new module beside them that
    nothing imports, and the answer."""
    steps = [
        write("hooktools/check.py", "import os\n\nos.system('touch ../agent-code-ran')\n"),
        write("hooktools/rules.py", "import os\n\nos.system('touch ../agent-code-ran')\nRULES = []\n"),
        write("hooktools/extra.py", "EXTRA = 1\n"),
        write("src/f.py", NEW_F),
    ]
    return [bash("\n".join(steps)), SUBMIT]


def _compiled(c: Ctx) -> list[str]:
    """Compiled files and packaging metadata an interpreter picks up by name: a sourceless json.pyc, a
    shared object, an object file, a dist-info whose entry point is a pytest plugin; and the answer."""
    steps = [
        "printf 'x' > json.pyc && mkdir -p src/__pycache__ && printf 'x' > src/__pycache__/f.cpython-312.pyc",
        "printf '\\177ELF' > libhook.so && printf '\\177ELF' > src/fast.cpython-312-x86_64-linux-gnu.so",
        "printf 'x' > src/f.o",
        write("evil-1.0.dist-info/entry_points.txt", "[pytest11]\nevil = evil_plugin\n"),
        write("evil-1.0.dist-info/METADATA", "Name: evil\nVersion: 1.0\n"),
        write("src/f.py", NEW_F),
    ]
    return [bash("\n".join(steps)), SUBMIT]


BARE = "vendor/cache/deep/mirror.git"


def _nested_repo(c: Ctx) -> list[str]:
    """A bare repository three folders down whose config runs the marker (core.fsmonitor), a non-bare one in
    a subfolder; and the answer."""
    steps = [
        f"git init -q --bare {BARE}",
        f"git --git-dir {BARE} config core.fsmonitor 'touch ../agent-code-ran'",
        "git init -q sub/inner && echo x > sub/inner/readme.txt",
        write("src/f.py", NEW_F),
    ]
    return [bash("\n".join(steps)), SUBMIT]


HONEST_SOURCES = {
    "src/f.py": NEW_F,
    "src/g.py": "def g(n):\n    return n\n",
    "lib/util/strings.py": "def up(s):\n    return s.upper()\n",
    "cmd/tool/main.go": "package main\n\nfunc main() {}\n",
    "docs/guide.md": "# Guide\n",
    "scripts/release.sh": "#!/bin/sh\necho release\n",
    "notes/HEAD": "the head of the notes\n",  # a file named HEAD in a plain folder
}


def _honest_sources(c: Ctx) -> list[str]:
    return [bash("\n".join(write(p, t) for p, t in HONEST_SOURCES.items())), SUBMIT]


RUNS_BY_ITSELF = "runs by itself"
REFUSED = "so nothing is applied"


def apply_cases() -> list[Case]:
    """`harness run --apply` against a real repository: what the agent may not write is held back or
    refuses the patch, and is listed; an honest change applies exactly."""
    return [
        Case(
            "apply_hooks",
            "apply",
            "hooks, .envrc, editor tasks, pre-commit config held back; the fix applied; nothing ran",
            _hooks,
            check=applied(
                0,
                {"src/f.py": NEW_F, SIDE_HOOK: EVIL},  # written, but no configuration names its folder
                {
                    INCLUDED: "included by .git/config",
                    f"{HOOKS}/pre-commit": "core.hooksPath",
                    f"{HOOKS}/post-commit": "core.hooksPath",
                    ".husky/pre-commit": RUNS_BY_ITSELF,
                    ".githooks/pre-commit": RUNS_BY_ITSELF,
                    ".envrc": RUNS_BY_ITSELF,
                    ".vscode/tasks.json": RUNS_BY_ITSELF,
                    ".pre-commit-config.yaml": RUNS_BY_ITSELF,
                    "package.json": RUNS_BY_ITSELF,
                    ".git/hooks/post-commit": "version-control metadata",
                },
            ),
        ),
        Case(
            "apply_bad_names",
            "apply",
            "names with U+009B, U+202E, U+200B, a C0 char: refused, listed escaped, nothing applied",
            _bad_names,
            check=applied(
                1,
                {},
                {
                    "csi\\x9b[31m.txt": "control or format characters",
                    "evil\\u202etxt.py": "control or format characters",
                    "src/f\\u200b.py": "control or format characters",
                    "bell\\x07.txt": "control or format characters",
                    "src/f.py": "the patch was refused",
                },
                nothing=True,
            ),
        ),
        Case(
            "apply_long_path",
            "apply",
            "paths over PATH_MAX (200-char folders) beside a fix: listed, nothing applied, no folders left",
            _long_path,
            check=applied(
                1,
                {},
                {
                    NEAR_DIR + "/": "a path longer than the platform's limit",
                    LONG_DIR[:40] + "...": "not captured from the sandbox",
                    "src/f.py": "the patch was refused",
                },
                nothing=True,
            ),
        ),
        Case(
            "apply_symlink_outside",
            "apply",
            "links out of the repository held back, never followed; the fix applied",
            _links,
            check=applied(
                0,
                {"src/f.py": NEW_F},
                {
                    "out": "a symlink the agent made",
                    "pw": "a symlink the agent made",
                    "src/up": "a symlink the agent made",
                    "notes.txt": "a symlink the agent made",
                },
            ),
        ),
        Case(
            "apply_honest",
            "apply",
            "an honest change (edit, new file, removal) applies exactly; the user's hook runs",
            _honest,
            check=applied(0, {"src/f.py": NEW_F, "docs/usage.md": "f(n) lists 1..n\n", "old.txt": None}, {}),
        ),
        Case(
            "apply_config_files",
            "apply",
            ".npmrc script-shell, a *.mk the Makefile includes, lefthook/mise's other names, new config held",
            _config_files,
            check=applied(
                0,
                {"src/f.py": NEW_F, "x.sh": EVIL},  # a new script only the agent's .npmrc names: inert
                {
                    ".npmrc": "a dotfile",
                    "local.mk": "Makefile includes it (-include *.mk)",
                    "lefthook-local.json": RUNS_BY_ITSELF,
                    ".lefthook.toml": RUNS_BY_ITSELF,
                    ".mise.local.toml": RUNS_BY_ITSELF,
                    "mise.local.toml": RUNS_BY_ITSELF,
                    ".tools/env.py": "dot-folder",
                    "pyproject.toml": "configuration",
                },
            ),
        ),
        Case(
            "apply_hook_imports",
            "apply",
            "the modules a hook runs (python -m) and imports held back; a module nothing imports applied",
            _hook_imports,
            check=applied(
                0,
                {"src/f.py": NEW_F, "hooktools/extra.py": "EXTRA = 1\n"},
                {
                    "hooktools/check.py": "imports it",
                    "hooktools/rules.py": "hooktools/check.py imports it",
                },
            ),
        ),
        Case(
            "apply_compiled",
            "apply",
            "*.so, *.o, a pytest11 dist-info held back (*.pyc never captured); the fix applied",
            _compiled,
            check=applied(
                0,
                {"src/f.py": NEW_F},
                {
                    "libhook.so": "compiled",
                    "src/fast.cpython-312-x86_64-linux-gnu.so": "compiled",
                    "src/f.o": "compiled",
                    "evil-1.0.dist-info/entry_points.txt": "compiled",
                    "evil-1.0.dist-info/METADATA": "compiled",
                },
            ),
        ),
        Case(
            "apply_nested_repo",
            "apply",
            "a bare repository 3 folders down (core.fsmonitor set), a non-bare one held back; fix applied",
            _nested_repo,
            check=applied(
                0,
                {"src/f.py": NEW_F, "sub/inner/readme.txt": "x\n"},
                {
                    f"{BARE}/HEAD": "version-control",
                    f"{BARE}/config": "version-control",
                    "sub/inner/.git/": "version-control",
                },
            ),
        ),
        Case(
            "apply_honest_sources",
            "apply",
            "new sources, docs, a script, a file named HEAD, the fix: all applied exactly",
            _honest_sources,
            check=applied(0, HONEST_SOURCES, {}),
        ),
    ]
