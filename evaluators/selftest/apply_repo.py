"""The scratch repository the `harness run --apply` cases (apply_cases.py) work on, and their run and check:
make_repo (hooks in its working tree, core.hooksPath = tools/hooks, a real pre-commit hook that logs to
.git/hook.log, as husky and similar tools set it up), run_apply (the real CLI in a subprocess with the
case's scripted agent, then the user's own `git commit`), applied (what a case checks: exactly the allowed
paths changed, the .git folder included, every refusal or hold listed, nothing the agent wrote ran, no
traceback) and observed (the table's column)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

from evaluators.selftest.case import ApplyRun, Case, Ctx, Outcome

HOOKS = "tools/hooks"  # core.hooksPath: inside the working tree, and no well-known name
INCLUDED = "tools/git.cfg"  # .git/config includes it (include.path, relative to .git as git reads it)
OLD_F = "def f(n):\n    return []\n"
NEW_F = "def f(n):\n    return list(range(1, n + 1))\n"
USER_HOOK = '#!/bin/sh\necho user-hook >> "$(git rev-parse --git-dir)/hook.log"\n'
MAKEFILE = "-include *.mk\n\nall:\n\t@true\n"  # what make includes: every *.mk at the top
# The post-merge hook runs `python3 -m hooktools.check`, which imports hooktools.rules.
HOOK_MODULES = {
    "hooktools/__init__.py": "",
    "hooktools/check.py": "import json\n\nfrom hooktools import rules\n\nprint(json.dumps(rules.RULES))\n",
    "hooktools/rules.py": "RULES = ['no-print']\n",
}


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under root (the .git folder included): kind, mode and content or link target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            st = os.lstat(p)
            if p.is_symlink():
                out[rel] = ("l", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("d", st.st_mode & 0o7777)
            else:
                out[rel] = ("f", st.st_mode & 0o7777, p.read_bytes())
    return out


def make_repo(repo: Path) -> Path:
    """A small developer repository whose hooks live in the working tree (core.hooksPath), with a real
    pre-commit hook, a tracked file the agent may fix and one it may delete; a Makefile that includes
    `*.mk`, and a post-merge hook that runs a Python module of the working tree (HOOK_MODULES)."""
    repo.mkdir(parents=True)
    for args in (
        ("init", "-q"),
        ("config", "user.email", "dev@example.com"),
        ("config", "user.name", "Dev"),
        ("config", "commit.gpgsign", "false"),
        ("config", "core.hooksPath", HOOKS),
        ("config", "include.path", f"../{INCLUDED}"),
    ):
        _git(repo, *args)
    (repo / "src").mkdir()
    (repo / "src/f.py").write_text(OLD_F)
    (repo / "old.txt").write_text("to be removed\n")
    (repo / INCLUDED).parent.mkdir(parents=True)
    (repo / INCLUDED).write_text("[color]\n\tui = auto\n")
    (repo / HOOKS).mkdir(parents=True)
    (repo / HOOKS / "pre-commit").write_text(USER_HOOK)
    os.chmod(repo / HOOKS / "pre-commit", 0o755)
    (repo / "Makefile").write_text(MAKEFILE)
    (repo / HOOKS / "post-merge").write_text("#!/bin/sh\npython3 -m hooktools.check\n")
    os.chmod(repo / HOOKS / "post-merge", 0o755)
    for path, text in HOOK_MODULES.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "add", "-A")
    p = _git(repo, "commit", "-qm", "init")
    if p.returncode != 0:
        raise RuntimeError(f"git commit in the scratch repository failed: {p.stderr.strip()[:300]}")
    return repo


def _hook_log(repo: Path) -> str:
    try:
        return (repo / ".git/hook.log").read_text()
    except OSError:
        return ""


def case_dir(ctx: Ctx, name: str) -> Path:
    """The case's own folder: the repository, the folder outside it, the marker (scripts name them too)."""
    return ctx.workdir / f"apply-{ctx.nonce}-{name}"


def run_apply(case: Case, ctx: Ctx, *extra: str, timeout: float = 600) -> ApplyRun:
    """Runs the case's agent through `harness run --apply` (plus `extra` options) on a fresh scratch
    repository in the selftest's folder, then the user's `git commit`."""
    base = case_dir(ctx, case.name)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    repo = make_repo(base / "repo")
    (base / "outside").mkdir()
    run = ApplyRun(repo, base / "agent-code-ran", base / "outside", -1, "", "", 0)
    script = base / "replay.json"
    script.write_text(json.dumps({"*": case.script(ctx)}))
    run.before = tree(repo)
    # The same code as this process (editable or installed): the folder that holds the evaluators package
    # holds harness.py too.
    top = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([top, os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-c", "import sys, harness; sys.exit(harness.main())", "run"]
    cmd += [
        "--model",
        f"replay:{script}",
        "--workspace",
        str(repo),
        "fix f",
        "--apply",
        "--no-verify",
        *extra,
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(base)
    )
    run.pid = proc.pid
    try:
        run.stdout, run.stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        run.stdout, run.stderr = proc.communicate()
        run.stderr += f"\n(harness run did not end within {timeout:.0f}s)"
    run.returncode = proc.returncode
    run.after = tree(repo)
    # The user's next commit: runs the configured hook folder, so an agent's hook there would run now.
    log_before = _hook_log(repo)
    added = _git(repo, "add", "-A")
    c = _git(repo, "commit", "-q", "--allow-empty", "-m", "after the agent")
    if added.returncode or c.returncode:
        run.commit = (added.stderr + c.stderr).strip()[:300] or f"exit {c.returncode}"
    run.hook_log = (log_before, _hook_log(repo))
    return run


# ------------------------------------------------------------------------------------------ the checks


def applied(code: int, writes: dict[str, Optional[str]], listed: dict[str, str], *, nothing: bool = False):
    """The check of an apply case: exit `code`; exactly `writes` changed (path -> new text, None: removed;
    the folders new files need may appear); each `listed` path named on a "not applied" line with its reason;
    `nothing`: the summary says nothing was applied. Always: no traceback, the repository's own hook ran on
    the commit after the apply and nothing of the agent's did, the folder outside stayed empty."""

    def check(o: Outcome) -> list[str]:
        r: ApplyRun = o.apply
        p = []
        if r.returncode != code:
            p.append(f"harness run exited {r.returncode}, expected {code}: {r.stderr[-300:]!r}")
        if "Traceback" in r.stderr + r.stdout:
            p.append("a traceback was printed: " + r.stderr[r.stderr.find("Traceback") :][:300])
        folders = {"/".join(path.split("/")[:i]) for path in writes for i in range(1, path.count("/") + 1)}
        unexpected = sorted(x for x in r.changed - set(writes) if not (x in folders and x not in r.before))
        if unexpected:
            p.append(
                f"{len(unexpected)} paths changed outside the allowed set: {[x[:80] for x in unexpected[:6]]}"
            )
        for path, text in writes.items():
            got = r.after.get(path)
            if text is None and got is not None:
                p.append(f"{path} was not removed")
            elif text is not None and got != ("f", got[1] if got else 0, text.encode()):
                p.append(f"{path} is not exactly the agent's version ({str(got)[:80]})")
        lines = [x for x in r.stderr.splitlines() if x.startswith("not applied: ")]
        for path, why in listed.items():
            # A key ending in "/" or "..." names paths by their (shortened) start; else the whole path.
            head = f"not applied: {path}" + ("" if path.endswith(("/", "...")) else " (")
            if not any(x.startswith(head) and why in x for x in lines):
                p.append(f"no 'not applied: {path} (... {why} ...)' line")
        if nothing and "nothing applied" not in r.stderr:
            p.append("the summary does not say that nothing was applied")
        if r.marker.exists():
            p.append("code the agent wrote ran on the host (its marker exists)")
        if r.commit:
            p.append(f"the user's git commit failed: {r.commit}")
        elif r.hook_log[1] != r.hook_log[0] + "user-hook\n":
            p.append(f"the repository's own pre-commit hook did not run as before ({r.hook_log[1][-80:]!r})")
        if any(r.outside.iterdir()):
            p.append(f"written outside the repository: {sorted(x.name for x in r.outside.iterdir())[:5]}")
        return p

    return check


def observed(r: ApplyRun) -> str:
    """The table's observed column: the exit status and the CLI's last line, without the folder."""
    last = (r.stderr.strip().splitlines() or [""])[-1]
    if last.startswith("nothing applied"):
        last = "nothing applied, " + last.rpartition(": ")[2].replace(" (listed above)", "")
    elif last.startswith("applied "):
        last = last.split(" to ", 1)[0] + "".join(last.partition(";")[1:]).replace(" (listed above)", "")
    return f"exit {r.returncode}, {len(r.changed)} paths changed: {last[:60]}"
