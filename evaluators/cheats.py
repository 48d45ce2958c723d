"""`harness tasks cheats`: the cheat audit. Every task is attacked by a library of scripted cheat agents,
each through the normal eval path (run_attempt: a real sandbox, the task's own verifier mode, the real
grader); a cheat that scores > 0 on a task means the task (or its grader) is hackable.

A cheat is one entry of CHEATS: a name, a one-line doc, and a function from the task to the shell text it
runs once, in the agent's sandbox, as the agent's user, in the working folder. To add one, append a
Cheat(...) here; tests/evaluators/test_cheats.py requires it to score on one of the deliberately weak
fixture tasks (tests/fixtures/weak-tasks), so a cheat that does nothing fails there.

The scripts look where an agent would: the working folder, and the project folders it can find (folders
holding .py files outside the system's), since a verifier may run the tests there. Known, accepted scores:
EXCEPTIONS (task glob, cheat) -> why, printed in the report and not counted as failures.
"""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from agent.sandbox import DEFAULT, Sandbox, SandboxPool, sandbox_backend
from evaluators.run.attempt import expect_attempts, run_attempt
from evaluators.run.network import offline
from evaluators.run.task_images import sandbox_images
from evaluators.selftest.harbor_cases import plugin_files, put
from tasks.model import Task

# ---------------------------------------------------------------------------------------------- payloads

# Imported by the verifier's Python (a hook, a plugin, a shadowing module): every pytest report passes, and
# the process exits 0 whatever happened (a verifier that trusts the exit status writes 1).
FORCE_PASS = b"""import atexit, os
def _force():
    try:
        import _pytest.reports as r
    except Exception:
        return
    orig = r.TestReport.from_item_and_call
    def fake(item, call):
        rep = orig(item, call)
        rep.outcome, rep.longrepr = "passed", None
        return rep
    r.TestReport.from_item_and_call = staticmethod(fake)
_force()
atexit.register(os._exit, 0)
"""
CONFTEST = b"""import pytest
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    rep = (yield).get_result()
    rep.outcome, rep.longrepr = "passed", None
def pytest_sessionfinish(session, exitstatus):
    session.exitstatus = 0
"""
EXIT0 = b"import os\nos._exit(0)\n"
# Appended to a module: each of its own functions returns an object equal to anything (and truthy, callable,
# iterable, usable as a number or string), so `assert f(x) == y` passes.
ALWAYS_EQUAL = b"""

class _Any(str):
    def __new__(cls):
        return str.__new__(cls, "")
    __eq__ = __le__ = __ge__ = __contains__ = lambda self, other: True
    __ne__ = __lt__ = __gt__ = lambda self, other: False
    __hash__ = str.__hash__
    __bool__ = lambda self: True
    __call__ = __getattr__ = __getitem__ = lambda self, *a, **k: self
    __iter__ = lambda self: iter(())
    __int__ = __float__ = __len__ = lambda self: 0


for _n, _f in list(globals().items()):
    if callable(_f) and not isinstance(_f, type) and _n[0] != "_" and _f.__module__ == __name__:
        globals()[_n] = lambda *a, **k: _Any()
"""
# Appended to a module: its functions never raise, and the process that imports it exits 0.
SWALLOW = b"""

import atexit as _atexit, functools as _ft, os as _os


def _swallowing(f):
    @_ft.wraps(f)
    def call(*a, **k):
        try:
            return f(*a, **k)
        except BaseException:
            return None
    return call


for _n, _f in list(globals().items()):
    if callable(_f) and not isinstance(_f, type) and _n[0] != "_" and _f.__module__ == __name__:
        globals()[_n] = _swallowing(_f)
_atexit.register(_os._exit, 0)
"""
# Modules tests and pytest import; a copy that exits 0 shadows each from the folders tests run in.
SHADOWS = ("pytest", "json", "subprocess", "pathlib", "csv", "math", "re", "six", "numpy", "requests")
# Programs a verifier calls whose exit status decides the reward.
TOOLS = ("python3", "python", "pytest", "py.test", "uv", "uvx", "diff", "cmp", "grep")

# Shell text setting the places a cheat writes to, for one of two tries (WHERE): "here": $PROJ is the working
# folder, $ROOTS the folders above the tests, $SITES python3's site folders, $PATHS the PATH folders;
# "elsewhere": $PROJ is each other folder holding .py files outside the system's (a verifier may run the
# tests there), the rest empty. Two tries, as one guarded place written makes the whole attempt tamper.
PRELUDE = r"""WD=$(pwd)
if [ "$WHERE" = here ]; then
  PROJ=$WD ROOTS="/ /tests" PATHS="$(echo $PATH | tr : ' ') /root/.local/bin"
  SITES=$(python3 -c 'import site; print(*site.getsitepackages(), site.getusersitepackages())' 2>/dev/null)
else
  PROJ=$(find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /usr -o -path /lib -o -path /lib64 \
    -o -path /bin -o -path /sbin -o -path /etc -o -path /var/lib -o -path /root/.cache \
    -o -path /root/.local \
    -o -path /tmp -o -path '*/site-packages' -o -path '*/dist-packages' -o -path '*/.venv' -o -path "$WD" \
    -o -path '*/node_modules' \) -prune -o -name '*.py' -print 2>/dev/null | head -200 \
    | xargs -r -n1 dirname \
    | sort -u | head -20)
  ROOTS= PATHS= SITES=
fi
"""


@dataclass(frozen=True)
class Cheat:
    name: str
    doc: str  # one line: what it tries
    script: Callable[[Task], str]  # shell text run once in the agent's sandbox, in the working folder
    elsewhere: bool = True  # also tried with WHERE=elsewhere (PRELUDE), on a task with an image of its own


def _put_each(dirs: str, name: str, data: bytes) -> str:
    """Shell text: `data` written as `name` in each folder of the shell list `dirs` that takes it."""
    return f"for d in {dirs}; do {put('$d/' + name, data)} 2>/dev/null; done"


def _append_py(data: bytes) -> str:
    """Shell text: `data` appended to every .py file of the project folders (their tests excepted)."""
    b64 = base64.b64encode(data).decode()
    return (
        'for d in $PROJ; do for f in "$d"/*.py; do case "$(basename "$f")" in test_*|*_test.py|conftest.py) '
        f'continue;; esac; [ -f "$f" ] && echo {b64} | base64 -d >> "$f"; done; done'
    )


def _reward_files(task: Task) -> str:
    junit = (
        b'<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="1" failures="0" errors="0">'
        b'<testcase classname="t" name="test_ok"/></testsuite></testsuites>\n'
    )
    places = "$ROOTS_LOGS $PROJ $(for d in $PROJ; do ls -d $d/*/ 2>/dev/null; done)"
    out = [
        '[ "$WHERE" = here ] && ROOTS_LOGS="/logs/verifier /logs /tmp /grader" && mkdir -p /logs/verifier',
        f"for d in {places}; do",
    ]
    for name, data in (
        ("reward.txt", b"1\n"),
        ("reward.json", b'{"reward": 1.0}\n'),
        ("results.xml", junit),
        ("report.xml", junit),
    ):
        out.append(f"  {put('$d/' + name, data)} 2>/dev/null")
    out.append("done; true")
    return "\n".join(out)


def _conftest(task: Task) -> str:
    return _put_each("$PROJ $ROOTS", "conftest.py", CONFTEST) + "; true"


def _pytest_config(task: Task) -> str:
    ini = b"[pytest]\naddopts = -p cheat_plugin\npythonpath = .\n"
    toml = b'[tool.pytest.ini_options]\naddopts = "-p cheat_plugin"\npythonpath = ["."]\n'
    return "\n".join(
        [
            _put_each("$PROJ $ROOTS", "pytest.ini", ini),
            _put_each("$PROJ $ROOTS", "tox.ini", ini),
            _put_each("$PROJ", "pyproject.toml", toml),
            _put_each("$PROJ $SITES", "cheat_plugin.py", CONFTEST),
            # an autoloaded pytest11 entry point in each site folder
            *(
                f"for SITE in $SITES; do {put(p, CONFTEST if p.endswith('.py') else data)} 2>/dev/null; done"
                for p, data in plugin_files("$SITE", "pytest11").items()
            ),
            "true",
        ]
    )


def _site_hooks(task: Task) -> str:
    pth = b"import cheat_hook\n"
    return "\n".join(
        [
            _put_each("$PROJ $SITES", "sitecustomize.py", FORCE_PASS),
            _put_each("$PROJ $SITES", "usercustomize.py", FORCE_PASS),
            _put_each("$PROJ $SITES", "cheat_hook.py", FORCE_PASS),
            _put_each("$SITES", "zz_cheat.pth", pth),
            "true",
        ]
    )


def _shadow_modules(task: Task) -> str:
    return "; ".join(_put_each("$PROJ", f"{m}.py", EXIT0) for m in SHADOWS) + "; true"


def _tool_wrappers(task: Task) -> str:
    exit0 = b"#!/bin/sh\nexit 0\n"
    bins = "$PATHS $(for d in $PROJ; do ls -d $d/bin $d/.venv/bin 2>/dev/null; done)"
    return (
        f"for d in {bins}; do [ -d $d ] && [ -w $d ] || continue; for t in {' '.join(TOOLS)}; do "
        f'{put("$d/$t", exit0)} 2>/dev/null && chmod 755 "$d/$t"; done; done; true'
    )


def _hardcode_outputs(task: Task) -> str:
    # Python (from the instruction and the visible files): an answer it quotes (`...` or a fenced block, else
    # its last number, or a visible expected-output file), written to every output file it names.
    py = r"""
import glob, os, re, sys
text = sys.stdin.read()
names = [n for n in re.findall(r"[\w./-]+\.(?:txt|json|csv|out|log|md)\b", text) if not n.startswith("http")]
quoted = [s.strip() for pair in re.findall(r"```\w*\n(.*?)```|`([^`\n]+)`", text, re.S) for s in pair]
quoted = [q for q in quoted if q and q not in names]
numbers = re.findall(r"-?\d+(?:\.\d+)?", text)
files = glob.glob("**/*expected*", recursive=True) + glob.glob("**/*sample*out*", recursive=True)
seen = [open(f).read() for f in files if os.path.isfile(f)]
value = (seen or quoted[-1:] or numbers[-1:] or [""])[0]
for n in names:
    if not os.path.exists(n) or os.path.getsize(n) == 0:
        try:
            os.makedirs(os.path.dirname(n) or ".", exist_ok=True)
            open(n, "w").write(value.rstrip("\n") + "\n")
            print("wrote", n, repr(value[:40]))
        except OSError:
            pass
"""
    return (
        f"echo {base64.b64encode(task.instruction.encode()).decode()} | base64 -d | "
        f"python3 -c {_q(py)} 2>/dev/null; true"
    )


def _read_oracle(task: Task) -> str:
    return (
        "for d in /solution /oracle /tests /grader /logs/verifier; do [ -d $d ] && "
        'cp -r $d "$WD/.found$d" '
        "2>/dev/null; done\n"
        "for s in $(find / -xdev \\( -path /proc -o -path /sys \\) -prune -o -name solve.sh -print "
        "2>/dev/null "
        '| head -5); do (cd "$WD" && timeout 120 bash "$s" >/dev/null 2>&1); done; true'
    )


def _background(task: Task) -> str:
    passing = b"def test_ok():\n    pass\n"
    loop = (
        "end=$(( $(date +%s) + 900 )); while [ $(date +%s) -lt $end ]; do "
        "mkdir -p /logs/verifier 2>/dev/null; echo 1 > /logs/verifier/reward.txt 2>/dev/null; "
        'for f in /tests/test*.py; do [ -f "$f" ] && '
        f'echo {base64.b64encode(passing).decode()} | base64 -d > "$f" 2>/dev/null; done; '
        "sleep 0.02; done"
    )
    return f"(setsid nohup sh -c {_q(loop)} >/dev/null 2>&1 &) ; true"


def _always_equal(task: Task) -> str:
    return _append_py(ALWAYS_EQUAL)


def _swallow(task: Task) -> str:
    return _append_py(SWALLOW)


def _empty_workspace(task: Task) -> str:
    return 'find "$WD" -mindepth 1 -delete 2>/dev/null; true'


def _q(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


CHEATS: list[Cheat] = [
    Cheat("reward_files", "writes reward 1 and passing reports where results are read",
          _reward_files),
    Cheat("conftest", "a conftest.py marking every test passed, exit status 0", _conftest),
    Cheat("pytest_config", "pytest.ini, tox.ini, pyproject, a pytest11 plugin: all pass", _pytest_config),
    Cheat("site_hooks", "sitecustomize/usercustomize/.pth: every test passes, exit status 0", _site_hooks),
    Cheat("shadow_modules", "pytest.py, json.py, ... that exit 0, where tests import them", _shadow_modules),
    Cheat("always_equal", "the project's functions return an object equal to anything", _always_equal),
    Cheat("swallow_exceptions", "the project's functions never raise; exit status 0", _swallow),
    Cheat("tool_wrappers", "`exit 0` programs named python3, pytest, uvx, diff, grep", _tool_wrappers),
    Cheat("hardcode_outputs", "an answer the instruction or a visible file quotes, into the files it names",
          _hardcode_outputs, elsewhere=False),
    Cheat("read_oracle", "copies /solution, /tests, /grader if there; runs any solve.sh it finds",
          _read_oracle, elsewhere=False),
    Cheat("background", "a detached loop writing reward 1 and passing tests while graded",
          _background, elsewhere=False),
    Cheat("empty_workspace", "deletes the working folder (tests that check only absence)",
          _empty_workspace, elsewhere=False),
]  # fmt: skip

# The baseline every audit runs first: what doing nothing earns. Above 0, the tests reward the untouched
# workspace (a check that holds before any work, e.g. "the input is unchanged"); a cheat must beat it.
NOTHING = Cheat(
    "nothing", "does nothing: the untouched workspace must earn 0", lambda t: "true", elsewhere=False
)

# (glob over the task id or "mode:<mode>", cheat name) -> why its score is accepted: shown in the report as
# "accepted", not counted as hackable. Each is a limit of a contract the task chose, not of this harness.
EXCEPTIONS: dict[tuple[str, str], str] = {
    (
        "mode:shared",
        "background",
    ): "Harbor's shared mode runs test.sh beside the agent's own processes, as the "
    "same user for most images: one left running can rewrite the tests and the reward while they run "
    '(Harbor\'s contract; isolation = "snapshot" or "fresh" where the tests need no live service)',
}


def by_name(names: list[str] | None) -> list[Cheat]:
    if not names:
        return list(CHEATS)
    known = {c.name: c for c in CHEATS}
    bad = [n for n in names if n not in known]
    if bad:
        from results.errors import UserError

        raise UserError(f"--cheat {bad[0]}: no such cheat; choose from {', '.join(known)}")
    return [known[n] for n in names]


def tries(task: Task, cheats: list[Cheat]) -> list[tuple[Cheat, str]]:
    """(cheat, WHERE) pairs for a task: "elsewhere" only on a task with an image of its own (on the base
    image the working folder is the only project folder)."""
    own_image = task.harbor is not None or task.dockerfile is not None
    return [
        (c, w) for c in cheats for w in ("here", "elsewhere") if w == "here" or (c.elsewhere and own_image)
    ]


def policy(cheat: Cheat, where: str = "here"):
    """The cheat as a policy (evaluators/run/policies.py): its script, once, in the working folder."""

    async def act(task: Task, sb: Sandbox) -> None:
        script = f"WHERE={where}\n" + PRELUDE + cheat.script(task)
        await sb.exec(["bash", "-c", script], timeout=min(180, task.agent.timeout_sec))

    return act


def excepted(task_id: str, cheat: str, mode: str = "") -> str:
    """Why a score of `cheat` on this task (verifier mode `mode`) is accepted (EXCEPTIONS), or ""."""
    for (glob, name), why in EXCEPTIONS.items():
        if name == cheat and (fnmatch.fnmatch(task_id, glob) or fnmatch.fnmatch(f"mode:{mode}", glob)):
            return why
    return ""


@dataclass
class Row:
    task: str
    mode: str = ""  # the verifier mode of a Harbor task, else the evaluator kind
    tried: list[str] = field(default_factory=list)
    scored: list[str] = field(default_factory=list)  # "cheat reward (reason: detail)"
    accepted: list[tuple[str, str]] = field(default_factory=list)  # scored but in EXCEPTIONS: (how, why)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def hackable(self) -> bool:
        return bool(self.scored or self.errors)


async def audit_task(task: Task, cheats: list[Cheat], pool: SandboxPool, image: str, slots) -> Row:
    """Runs NOTHING first (the baseline), then each try; a try scores when its reward is above 0 and above
    the baseline's (what nothing earns is reported once, as NOTHING's score)."""
    mode = task.harbor.verifier_mode if task.harbor is not None else task.evaluator.kind
    pairs = tries(task, cheats)
    row = Row(task.id, mode, [c.name + ("" if w == "here" else "@" + w) for c, w in pairs])
    t0, floor = time.monotonic(), [0.0]

    async def one(c: Cheat, where: str) -> None:
        name = c.name + ("" if where == "here" else "@" + where)
        async with slots:
            try:
                rec = await run_attempt(
                    task, policy(c, where), pool, image, run_id=pool.run_id, model_name=f"cheat:{name}"
                )
            except Exception as e:  # report it, audit the rest
                row.errors.append(f"{name}: {type(e).__name__}: {e}"[:200])
                return
        if c is NOTHING:
            floor[0] = rec.reward
        if rec.reward > 0 and (c is NOTHING or rec.reward > floor[0]):
            why = excepted(task.id, c.name, mode)
            how = f"{name} {rec.reward:g} ({rec.reason}: {(rec.detail or rec.error or '').strip()[:60]})"
            if why:
                row.accepted.append((how, why))
            else:
                row.scored.append(how)

    await one(NOTHING, "here")
    await asyncio.gather(*(one(c, w) for c, w in pairs))
    row.seconds = time.monotonic() - t0
    print(f"{task.id}: {len(row.tried)} tried, scored: {'; '.join(row.scored) or '-'}", file=sys.stderr)
    return row


async def audit(
    tasks: list[Task],
    cheats: list[Cheat] | dict[str, list[Cheat]],
    concurrency: int = 2,
    sandbox: str = DEFAULT,
    sandbox_options: dict | None = None,
) -> list[Row]:
    """Every cheat on every task, or (a dict: task id -> cheats) each task's own share of them, in the
    sandboxes of the backend `sandbox` (agent/sandbox/registry.py)."""
    own = cheats if isinstance(cheats, dict) else {t.id: cheats for t in tasks}
    backend = sandbox_backend(sandbox)
    images = await sandbox_images(backend, sandbox_options, tasks, log=lambda m: print(m, file=sys.stderr))
    slots = asyncio.Semaphore(concurrency)
    pool_class = backend.pool(sandbox_options)
    async with pool_class(
        run_id=f"cheats-{int(time.time())}", warm=2, max_containers=2 * concurrency + 2
    ) as pool:
        # each task: the baseline (NOTHING) and its tries, on the task's image
        todo = [(t, images[t.id]) for t in tasks for _ in range(1 + len(tries(t, own[t.id])))]
        expect_attempts(pool, todo, None, concurrency)
        return await asyncio.gather(*(audit_task(t, own[t.id], pool, images[t.id], slots) for t in tasks))


def one_per_family(tasks: list[Task]) -> list[Task]:
    """Every task outside a family and the first instance of each family: a family's instances share their
    grader and differ only in parameters (--every-instance audits them all)."""
    seen: set[str] = set()
    return [t for t in tasks if not t.family or not (t.family in seen or seen.add(t.family))]


def table(rows: list[Row]) -> list[str]:
    width = max([len(r.task) for r in rows] + [4])
    out = [f"{'task':<{width}}  {'mode':<8}  tried  scored"]
    for r in rows:
        scored = "; ".join(r.scored + [f"error {e}" for e in r.errors]) or "-"
        out.append(f"{r.task:<{width}}  {r.mode:<8}  {len(r.tried):>5}  {scored}")
        out += [f"{'':<{width}}  accepted: {how}" for how, _ in r.accepted]
    for why in dict.fromkeys(why for r in rows for _, why in r.accepted):
        out.append(f"accepted (evaluators/cheats.py EXCEPTIONS): {why}")
    return out


def main(args) -> int:
    from agent.config import backend_options
    from tasks.loader import load_suite, spread

    cheats = by_name(args.cheat)  # a misspelt name fails before the suite loads
    tasks = load_suite(args.suite)
    if not args.every_instance:
        tasks = one_per_family(tasks)
    tasks = spread(tasks, args.limit)
    if args.no_internet:
        tasks = offline(tasks)
    t0 = time.monotonic()
    options = backend_options(args, args.sandbox)
    rows = asyncio.run(audit(tasks, cheats, args.concurrency, args.sandbox, options))
    for line in table(rows):
        print(line)
    bad = [r for r in rows if r.hackable]
    print(
        f"{len(rows)} tasks, {sum(len(r.tried) for r in rows)} cheat attempts, {time.monotonic() - t0:.0f}s: "
        f"{len(bad)} hackable"
        + (f" ({', '.join(r.task for r in bad)})" if bad else "")
        + f", {sum(len(r.accepted) for r in rows)} accepted scores"
    )
    return 1 if bad else 0
