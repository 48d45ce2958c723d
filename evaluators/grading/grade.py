"""The grading protocol: no code under test decides its own verdict.

1. The caller captured the agent's changes (Sandbox.changes) and destroyed its sandbox.
2. Changes to the visible tests or protected paths -> 0, `tamper` (test hooks, pytest config and shadowing
   modules in the workspace are never loaded by the isolated grader: not judged by name).
3. A FRESH container from the same image: pristine workspace + the changes. The test runner runs as
   root; the candidate's code runs as the sandbox user (10001): through the proxy in
   evaluators/grading/grader/candidate.py for Python imports, as that user for processes the tests start.
   Hidden tests, the report and the reward file sit in /grader (root-only, mode 0700): the candidate can
   neither read nor write them. Every process of the candidate is killed before the verdict is read.
4. The verdict is read on the host (evaluators/grading/verdict.py).
Each evaluator kind is one module registered in tasks/kinds.py (the class: evaluators/grading/kind.py);
this module hands an attempt to its kind's `grade`, and holds what the kinds that grade in a fresh container
share: the grading container (or a turn in a shared one, GradingStations), the grader's private folder,
running the verifier as root, reading what it wrote.
Anything that goes wrong while grading one attempt is that attempt's failed verdict with a reason; only
the Docker engine failing is an infrastructure error (InfraError, retried by the runner).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
import time
from typing import Optional

from agent import AGENT_UID
from agent.sandbox import Changes, FilesNotWritten, SandboxDied, SandboxPool, SandboxSpec
from evaluators.grading import verdict as rules
from evaluators.grading.kind import Batchable
from evaluators.grading.verdict import Verdict
from results.errors import InfraError
from tasks import kinds
from tasks.model import Task
from tasks.tamper import tamper_reason

GRADER = "/grader"  # the grading container's root-only folder: the grader's private folders are below it
CANDIDATE_UID = AGENT_UID  # the candidate's code runs as the sandbox user


@dataclasses.dataclass
class Submission:
    """What `Kind.grade` grades: the agent's captured changes (the agent's sandbox is gone), the files the
    attempt kept, and where a grading container comes from."""

    task: Task
    changes: Changes
    kept: dict[str, bytes]
    pool: SandboxPool
    image: str
    stations: Optional[GradingStations] = None  # a Batchable attempt's turn in a shared container

    def container(self, prepare=None) -> grading_sandbox:
        """`async with sub.container() as sb`: a fresh container of the task's image and limits with the
        pristine workspace plus the changes, written as the candidate user (`.uid`); `prepare(sb)` runs
        beside that (its result is `.prepared`). The grader runs there as root, the candidate's code as
        `.uid`."""
        return grading_sandbox(self.task, self.changes, self.pool, self.image, self.stations, prepare)


async def grade(
    task: Task,
    changes: Changes,
    pool: SandboxPool,
    image: str,
    stations: "GradingStations | None" = None,
    kept: dict[str, bytes] | None = None,
) -> Verdict:
    """Grades one attempt from its captured changes with its kind's `grade` (tasks/kinds.py).
    Raises only InfraError (the engine failed); everything else is a verdict. With `stations` (batch grading)
    an attempt that can share a grading container with others of its image (batchable()) is graded in one."""
    started = time.monotonic()
    try:
        kind = kinds.of(task)
        shared = stations if stations is not None and batchable(task) else None
        v = await kind.grade(task, Submission(task, changes, kept or {}, pool, image, shared))
    except InfraError:
        raise
    except FilesNotWritten as e:  # a live sandbox refused the files (their names or contents): the attempt's
        v = Verdict(0.0, False, "rebuild_failed", detail=str(e)[:500])
    except Exception as e:
        v = Verdict(0.0, False, "grader_error", detail=f"{type(e).__name__}: {str(e)[:500]}")
    v.seconds = time.monotonic() - started
    return v


def batchable(task: Task) -> bool:
    """Whether an attempt of this task may be graded in a grading container shared with other attempts (a
    Batchable kind decides: pytest with the candidate behind the proxy and no network); else not."""
    kind = kinds.of(task)
    return isinstance(kind, Batchable) and kind.batchable(task)


def private_folder() -> str:
    """Where one grading keeps its hidden files: an unguessable name inside root-only /grader, so that no
    link the candidate's code makes can point at them."""
    return f"{GRADER}/{secrets.token_hex(12)}"


def tamper(task: Task, changes: Changes, protected: tuple[str, ...] = ()) -> str:
    """Why the agent's changes tamper with the grading (the visible tests, its kind's `protected` globs), or
    "". Test-run hooks and shadowing modules by name are not judged: the grading container's isolation
    (/grader, `python -I`, plugin autoload off, --confcutdir) never loads them, and a sub-project's own
    conftest.py is honest work."""
    changed = {**changes.files, **{p: None for p in changes.deleted}}
    return tamper_reason(changed, task.workspace_files, protected, machinery=False)


class grading_sandbox:
    """A fresh container with the pristine workspace plus the changes, written as the candidate user `uid`:
    a container of its own, or with `stations` a turn in a shared grading container (GradingStations)."""

    def __init__(self, task, changes, pool, image, stations=None, prepare=None):
        """`prepare(sb)` (grader_files): the grader's own part, done while the workspace is rebuilt (another
        folder; nothing of the candidate's runs yet); its result is `prepared`."""
        self.task, self.changes, self.pool, self.image = task, changes, pool, image
        self.stations, self.prepare, self.prepared = stations, prepare, None
        self.uid = CANDIDATE_UID
        self.not_written = ""  # for the record: files of the changes that this container could not hold

    async def __aenter__(self):
        limits = SandboxSpec.for_task(self.task.environment)
        if self.stations is not None:
            self.cm = self.stations.turn(self.image, limits, self.task.id)
        else:
            self.cm = self.pool.sandbox(self.image, limits, task=self.task.id)
        got = await self.cm.__aenter__()
        sb, self.uid = got if self.stations is not None else (got, CANDIDATE_UID)
        try:
            prep = asyncio.ensure_future(self.prepare(sb)) if self.prepare else None
            workspace = {p: d for p, d in self.task.workspace_files.items() if p not in self.changes.deleted}
            workspace.update(self.changes.files)
            try:
                refused = await sb.put_files(
                    workspace,
                    executable=(set(self.task.executable_files) - set(self.changes.files))
                    | self.changes.executable,
                    user="agent" if self.uid == CANDIDATE_UID else self.uid,
                )
            finally:
                if prep is not None:  # done either way; its error, if any, is raised just below
                    await asyncio.gather(prep, return_exceptions=True)
            if prep is not None:
                self.prepared = prep.result()
        except BaseException:
            await self.cm.__aexit__(None, None, None)
            raise
        # Capture applies the same rule (agent.sandbox.changes.unwritable), so this stays empty unless the
        # grading container's folder differs; then the attempt is graded without them, and the record says so.
        self.not_written = f"not written back: {'; '.join(refused)[:300]}\n" if refused else ""
        return sb

    async def __aexit__(self, *exc):
        return await self.cm.__aexit__(*exc)


# Between two attempts in one grading container: the attempt's user removes its files (it alone may, in the
# sticky /tmp and /dev/shm), root removes the rest (in the grader's folders), the user again (its folders
# emptied by root), then the container must hold nothing of it: no file in any folder a candidate can write,
# no process but tini and the command server (which killed every other one when the verdict's command
# ended), no System V IPC object. Anything left retires the container instead of reusing it.
_WIPE = (
    'u=$1; dirs="/workspace /tmp /dev/shm /dev/mqueue /grader"\n'
    # one find a pass, each deleting what its user may (depth first, following no link; what it may not is
    # left to the next pass, and anything still there fails the checks below)
    'wipe() { "$@" find $dirs -mindepth 1 -delete 2>/dev/null; true; }\n'
    'as_u="setpriv --reuid=$u --regid=$u --clear-groups --"\n'
    "wipe $as_u; wipe; wipe $as_u\n"
    'for d in $dirs; do for e in "$d"/* "$d"/.[!.]* "$d"/..?*; do\n'
    '  if [ -e "$e" ] || [ -L "$e" ]; then echo "left behind: $e" >&2; exit 3; fi; done; done\n'
    "for p in /proc/[0-9]*; do pid=${p#/proc/}; case $pid in 1|$PPID|$$) ;; *)\n"
    '  if [ -e "$p" ]; then echo "process left: $pid" >&2; exit 3; fi;; esac; done\n'
    "for f in /proc/sysvipc/shm /proc/sysvipc/sem /proc/sysvipc/msg; do n=0; [ -r $f ] || continue\n"
    "  while IFS= read -r line; do n=$((n+1)); done < $f\n"
    '  if [ $n -gt 1 ]; then echo "System V IPC left in $f" >&2; exit 3; fi; done\n'
)
FIRST_BATCH_UID = CANDIDATE_UID + 1  # the container's own user (10001) owns /workspace: no attempt runs as it


class GradingStations:
    """Batch grading: one fresh grading container (from the pool: never an agent's) grades up to `batch`
    attempts of one image and limits, one after another, each as its own user (10002, 10003, ...): its
    workspace written as that user, its hidden tests in a private folder of root-only /grader, every process
    killed before its verdict is read (the command server does so when the verifier's command ends), and
    everything it left removed and checked gone before the next attempt's turn (_WIPE). Attempts take turns
    because the tests name /workspace, one path a container has once. Several containers grade at once."""

    shared_turns = 0  # turns served by a container that graded another attempt before (for the self-test)

    def __init__(self, pool: SandboxPool, batch: int, max_containers: int = 0):
        """At most `max_containers` grading containers at once (0: no bound): an attempt whose grading finds
        them all busy waits for a turn, rather than start one more container of its own."""
        self.pool, self.batch, self.max_containers = pool, max(1, batch), max(0, max_containers)
        self._idle: dict[tuple, list] = {}  # (image, limits) -> [[sandbox, turns used]]
        self._count = 0  # grading containers made and not yet released
        self._cond: asyncio.Condition | None = None
        self._wipes: set[asyncio.Task] = set()  # wipes after turns whose verdicts are already out
        pool.add_reclaimer(self._take_idle)  # a full pool destroys an idle one rather than wait

    def _take_idle(self):
        """An idle grading container, given up (for the pool, which destroys it)."""
        for idle in self._idle.values():
            if idle:
                self._count -= 1
                asyncio.ensure_future(self._notify())
                return idle.pop(0)[0]
        return None

    async def _notify(self):
        async with self._cond:
            self._cond.notify_all()

    async def _station(self, key: tuple):
        """[sandbox, turns used] of an idle grading container of `key`, or None: make one (room was taken)."""
        self._cond = self._cond or asyncio.Condition()
        async with self._cond:
            while True:
                idle = self._idle.setdefault(key, [])
                if idle:
                    return idle.pop()
                if not self.max_containers or self._count < self.max_containers:
                    self._count += 1
                    return None
                other = self._take_idle()  # all the room is idle containers of other images: retire one
                if other is not None:
                    await self.pool.release(other)
                    continue
                await self._cond.wait()

    async def _done(self, station, reuse: bool):
        if reuse:
            self._idle.setdefault(station[2], []).append(station)
        else:
            self._count -= 1
            await self.pool.release(station[0])
        await self._notify()

    @contextlib.asynccontextmanager
    async def turn(self, image: str, limits: SandboxSpec, task: str):
        """(sandbox, uid) for one attempt; the container is this attempt's alone until the block ends."""
        key = (image, limits)
        station = await self._station(key)
        if station is None:
            try:
                sb = await self.pool.acquire(image, limits, task=task)
            except BaseException:
                self._count -= 1
                await self._notify()
                raise
            station = [sb, 0, key]
            try:  # the container's user owns /workspace: open it to the attempts' users
                r = await sb.exec(["chmod", "0777", "/workspace"], 10, cwd="/")
                if r.exit_code != 0:
                    raise InfraError(f"could not open /workspace for batch grading: {r.stderr[-200:]!r}")
            except BaseException:
                await self._done(station, False)
                raise
        sb, used = station[0], station[1]
        GradingStations.shared_turns += used > 0
        uid = FIRST_BATCH_UID + used
        station[1] += 1
        try:
            yield sb, uid
        except BaseException:
            await self._done(station, False)
            raise
        if station[1] >= self.batch:
            await self._done(station, False)
        else:  # the verdict is out: the wipe goes on without this attempt, the next turn waits for it
            wipe = asyncio.ensure_future(self._wipe(station, uid))
            self._wipes.add(wipe)
            wipe.add_done_callback(self._wipes.discard)

    async def _wipe(self, station, uid: int):
        sb, clean = station[0], False
        try:
            r = await sb.exec(["sh", "-c", _WIPE, "_", str(uid)], 60, user="root", cwd="/")
            clean = r.exit_code == 0
        except Exception:
            pass
        finally:
            await self._done(station, clean and not sb.dead)

    async def close(self):
        """Waits for the wipes still running (before the pool that holds their containers closes)."""
        while self._wipes:
            await asyncio.gather(*list(self._wipes), return_exceptions=True)


_PIDS_EVENTS = "cat /sys/fs/cgroup/pids.events 2>/dev/null || cat /sys/fs/cgroup/pids/pids.events"
_MKDIRS = f"""import os, sys
os.chmod({GRADER!r}, 0o700)
if os.lstat({GRADER!r}).st_mode & 0o7777 != 0o700:
    sys.exit("{GRADER} is not 0700")
os.umask(0o077)
for path in sys.argv[1:]:
    os.makedirs(path, exist_ok=True)
for events in ("/sys/fs/cgroup/pids.events", "/sys/fs/cgroup/pids/pids.events"):
    try:
        with open(events) as f:
            sys.stdout.write(f.read())
        break
    except OSError:
        pass
"""  # mkdirs' script for a sandbox whose command server forks (python3 is there)


def grader_files(files: dict[str, bytes], folder: str, *dirs: str, executable=()):
    """A grading_sandbox `prepare`: the grader's folders (mkdirs), then its files in `folder`, as root.
    Returns pids_events() as it was before the verifier (mkdirs)."""

    async def prepare(sb):
        before = await mkdirs(sb, *dirs)
        await sb.put_files(files, dest=folder, user="root", executable=executable)
        return before

    return prepare


async def mkdirs(sb, *paths: str) -> int | None:
    """Makes /grader root-only (Docker does not always apply a tmpfs mount's mode to its folder: checked)
    and the folders the verifier needs, root-only too (a process of the candidate's whose working folder is
    one of them, e.g. started by a test, would reach what is below it without passing /grader). Returns
    pids_events() as it is before the verifier runs (read in the same command: one round trip less)."""
    if getattr(sb, "forks", False):  # as a fork of its command server: no sh, chmod, stat, mkdir, cat
        r = await sb.exec(["python3", "-I", "-c", _MKDIRS, *paths], 10, user="root", cwd="/", fork=())
    else:
        script = (
            f'chmod 0700 {GRADER} && [ "$(stat -c %a {GRADER})" = 700 ] && (umask 077; mkdir -p "$@") '
            "|| exit 1\n"
            f"{_PIDS_EVENTS}\ntrue"
        )
        r = await sb.exec(["sh", "-c", script, "_", *paths], 10, user="root", cwd="/")
    if r.exit_code != 0:
        raise InfraError(f"could not prepare the grader's folders: {r.stderr[-200:]!r}")
    return _max_events(r.out.head)


async def run(sb, argv, timeout, env, cwd, fork=None):
    """Runs the verifier as root; a grading container that the candidate's code killed (memory) is the
    candidate's failure, any other death an infrastructure error (retried by the runner). An argv with its
    own `timeout` wrapper gets 5 s more; a `fork` one (a python3 -I argv: Sandbox.exec) is killed at it."""
    limit = timeout if fork is not None else timeout + 5
    try:
        return await sb.exec(argv, limit, env=env, cap=16 << 10, user="root", cwd=cwd, fork=fork)
    except SandboxDied:
        if await death_cause(sb) == "oom":
            return Verdict(
                0.0, False, "oom", detail="the code under test used the memory limit up while graded"
            )
        raise


async def pids_events(sb) -> int | None:
    """How often a fork in the sandbox failed on its pid limit so far (the pids cgroup's `max` event count,
    cgroup v2 or v1), or None where the kernel does not say."""
    try:
        r = await sb.exec(["sh", "-c", _PIDS_EVENTS], 10, user="root", cwd="/")
    except Exception:  # a sandbox that died shows when the report is read
        return None
    return _max_events(r.out.head)


def _max_events(text: bytes) -> int | None:
    for line in text.decode("ascii", "replace").splitlines():
        key, _, value = line.partition(" ")
        if key == "max" and value.strip().isdigit():
            return int(value)
    return None


async def pid_limit_note(sb, before: int | None, task: Task, run) -> str:
    """For a run that timed out: whether the code under test was at the sandbox's pid limit meanwhile
    (forks failed), the usual reason why code that forks a lot never finishes. "" for any other run."""
    if not (run.timed_out or run.exit_code in (124, 137, -9)):
        return ""
    after = await pids_events(sb)
    if before is None or after is None or after <= before:
        return ""
    return (
        f"meanwhile the code under test reached the sandbox's limit of {task.environment.pids} processes "
        f"({after - before} forks refused)"
    )


async def death_cause(sb) -> str | None:
    import asyncio

    return await asyncio.to_thread(sb.death_cause)


async def read(sb, path: str, max_bytes: int = rules.MAX_REPORT_BYTES) -> bytes | None:
    """Reads one file the harness created in the grading container, or None. A file over `max_bytes`
    comes back as its first max_bytes + 1 bytes, so that the verdict can say it is too large (not absent)."""
    directory, name = path.rsplit("/", 1)
    try:
        files = await sb.get_files([name], root=directory, max_bytes=max_bytes)
    except SandboxDied:
        raise
    except InfraError:  # over the bound
        r = await sb.exec(
            ["head", "-c", str(max_bytes + 1), "--", path], 30, cap=max_bytes + 1, user="root", cwd="/"
        )
        return r.out.data or None
    except Exception:
        return None
    return files.get(name)
