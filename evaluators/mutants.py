"""Test strength by mutation (`harness tasks validate SUITE --mutants N`): how many small wrong versions of a
task's solution its hidden tests reject. A task whose tests pass a wrong program rewards that program.

Owns the seeded choice of a task's mutants and their verdicts through the real grader; the mutation operators
are evaluators/mutation_ops.py.

Per task the oracle runs once and its captured changes name the targets: the changed Python and shell files
(by suffix, or a python/sh shebang). Every site an operator finds in them is a candidate mutant:
  comparison  < <= > >= == != in is (and -lt -le -gt -ge -eq -ne == != in shell) to its neighbour
  logic       and <-> or, `not x` -> x
  arithmetic  + <-> -, * -> /, / -> *, // -> /, % -> //, ** -> * (shell: inside $(( )) and (( )))
  boundary    a number compared, indexed, sliced or given to range(): n+1 and n-1
  constant    another number n+1, a bool negated, a string "" (or "mutant" when empty)
  return      `return X` -> `return None` (shell: exit/return 0 <-> 1)
  delete      a statement -> `pass` (shell: a command line -> `:`)
N candidates are drawn with random.Random(f"{SEED}:{task id}") (all when fewer; a mutant repeating another's
text is dropped first), and each ends as exactly one of
  killed      the hidden tests fail it (any verdict but a pass or a timeout)
  survived    the hidden tests pass it: a wrong program the task accepts
  equivalent  the same program, not run: Python with the same AST or the same bytecode (a folded 2*2 -> 2+2,
              say); shell whose text is unchanged
  invalid     does not compile (Python compile(), shell `bash -n`), not run
  timeout     the hidden tests ran out of time (budget: 10 x the oracle's test seconds, 30 s at least, at most
              the task's own), or the attempt hit an infrastructure error
The kill rate is killed / (killed + survived): the last three are counted apart, since no test can tell an
equivalent mutant apart and a hang says nothing about the assertions. A task under WEAK is listed as weak.
Family instances share their tests: one instance (the first by id) stands for its family.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

from agent.sandbox.registry import DEFAULT
from evaluators.mutation_ops import Mutant, language, mutants_of
from evaluators.run.attempt import run_attempt
from evaluators.run.policies import Policy, oracle_policy
from results.errors import InfraError
from tasks.model import Task

SEED = 0
WEAK = 0.8  # kill rate under which a task is weak: its tests accept one wrong program in five
MIN_BUDGET = 30.0  # seconds a mutant's hidden tests may take at least (a looping mutant costs this much)
KINDS = ("pytest", "script", "harbor")  # kinds whose oracle changes files (answer tasks write a reply)


@dataclass
class MutationRow:
    task: str
    candidates: int = 0  # every site the operators found
    mutants: list[Mutant] = field(default_factory=list)  # the drawn ones, with their outcomes
    note: str = ""  # why a task has no kill rate
    family: str = ""  # the family the task stands for
    seconds: float = 0.0

    def count(self, outcome: str) -> int:
        return sum(m.outcome == outcome for m in self.mutants)

    @property
    def kill_rate(self) -> Optional[float]:
        run = self.count("killed") + self.count("survived")
        return self.count("killed") / run if run else None


def draw(task_id: str, candidates: list[Mutant], n: int, seed: int = SEED) -> list[Mutant]:
    """N of a task's candidates, the same N on every run."""
    if len(candidates) <= n:
        return list(candidates)
    picked = random.Random(f"{seed}:{task_id}").sample(range(len(candidates)), n)
    return [candidates[i] for i in sorted(picked)]


# -------------------------------------------------------------------------------------------------- running
def mutated_oracle(path: str, source: str, executable: bool) -> Policy:
    """The oracle, then one of its changed files replaced by a mutant (what else it did stays)."""

    async def act(task: Task, sb) -> None:
        await oracle_policy(task, sb)
        await sb.put_files({path: source.encode("utf-8")}, executable=[path] if executable else ())

    return act


def representatives(tasks: list[Task]) -> list[Task]:
    """The tasks whose oracle changes files, one per family (its instances share their tests)."""
    seen, out = set(), []
    for t in sorted(tasks, key=lambda t: t.id):
        if t.evaluator.kind not in KINDS or (t.family and t.family in seen):
            continue
        seen.add(t.family)
        out.append(t)
    order = {t.id: i for i, t in enumerate(tasks)}
    return sorted(out, key=lambda t: order[t.id])


async def mutate_task(task: Task, pool, image: str, n: int, slots: asyncio.Semaphore, seed: int = SEED):
    row = MutationRow(task.id, family=task.family)
    t0 = time.monotonic()
    captured = {}

    def keep(_task, changes):
        captured["changes"] = changes

    kw = dict(run_id=pool.run_id, model_name="mutant")
    async with slots:
        base = await run_attempt(task, oracle_policy, pool, image, keep=keep, **kw)
    changes = captured.get("changes")
    if not base.solved or changes is None:
        row.note = f"oracle not solved ({base.reason}): nothing to mutate"
        return row
    files = {p: d for p, d in changes.files.items() if language(p, d)}
    if not files:
        row.note = "the oracle changes no Python or shell file"
        return row
    candidates = mutants_of(files)
    row.candidates = len(candidates)
    row.mutants = draw(task.id, candidates, n, seed)
    budget = min(task.verifier_timeout_sec, max(MIN_BUDGET, 10 * base.durations.evaluation))
    timed = replace(task, verifier_timeout_sec=budget)

    async def one(m: Mutant) -> None:
        policy = mutated_oracle(m.path, m.source, m.path in changes.executable)
        async with slots:
            try:
                rec = await run_attempt(timed, policy, pool, image, **kw)
            except InfraError as e:
                m.outcome, m.detail = "timeout", f"infrastructure: {e}"[:120]
                return
        m.outcome = "survived" if rec.solved else "timeout" if rec.reason == "timeout" else "killed"
        m.detail = rec.reason

    await asyncio.gather(*(one(m) for m in row.mutants if not m.outcome))
    row.seconds = time.monotonic() - t0
    return row


async def mutate(
    tasks: list[Task],
    n: int,
    concurrency: int = 2,
    seed: int = SEED,
    log: Callable[[str], None] = print,
    sandbox: str = DEFAULT,
    options: Optional[dict] = None,
) -> list[MutationRow]:
    """The mutation rows of the representatives of `tasks`, in sandboxes of the backend `sandbox`."""
    from agent.sandbox import sandbox_backend
    from evaluators.run.task_images import sandbox_images

    chosen, backend = representatives(tasks), sandbox_backend(sandbox)
    images = await sandbox_images(backend, options, chosen, log=log)
    slots, done = asyncio.Semaphore(concurrency), []
    pool_class = backend.pool(options)
    async with pool_class(
        run_id=f"mutants-{int(time.time())}", warm=2, max_containers=concurrency * 2 + 2
    ) as pool:

        async def guarded(t: Task) -> MutationRow:
            try:
                row = await mutate_task(t, pool, images[t.id], n, slots, seed)
            except Exception as e:  # report the task, measure the others
                row = MutationRow(t.id, family=t.family, note=f"{type(e).__name__}: {e}"[:200])
            done.append(t.id)
            log(f"mutants: {len(done)}/{len(chosen)} {t.id}: killed {row.count('killed')}/{len(row.mutants)}")
            return row

        return await asyncio.gather(*(guarded(t) for t in chosen))


# ------------------------------------------------------------------------------------------------- report
def table(rows: list[MutationRow]) -> list[str]:
    width = max([len(r.task) for r in rows] + [4])
    out = [f"{'task':<{width}}  sites  run  killed  survived  equiv  invalid  timeout  kill rate"]
    for r in rows:
        rate = f"{r.kill_rate:.2f}" if r.kill_rate is not None else "-"
        run = r.count("killed") + r.count("survived")
        out.append(
            f"{r.task:<{width}}  {r.candidates:>5}  {run:>3}  {r.count('killed'):>6}  "
            f"{r.count('survived'):>8}  {r.count('equivalent'):>5}  {r.count('invalid'):>7}  "
            f"{r.count('timeout'):>7}  {rate:>9}"
            + (f"  (family {r.family})" if r.family else "")
            + (f"  {r.note}" if r.note else "")
        )
    return out


def survivors(rows: list[MutationRow]) -> list[str]:
    return [
        f"{r.task}  {m.path}:{m.line}  {m.operator}  {m.what}"
        for r in rows
        for m in r.mutants
        if m.outcome == "survived"
    ]


def median(values: list[float]) -> Optional[float]:
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def main(tasks: list[Task], args) -> list[str]:
    """Prints the mutation table of `tasks` (those that validated); returns the weak tasks."""
    t0 = time.monotonic()
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    from agent.config import backend_options

    sandbox = getattr(args, "sandbox", None) or DEFAULT  # validate's --sandbox
    kw = dict(concurrency=args.concurrency, log=log, sandbox=sandbox, options=backend_options(args, sandbox))
    rows = asyncio.run(mutate(tasks, args.mutants, **kw))
    if not rows:
        print("mutation: no task whose oracle changes files")
        return []
    for line in table(rows):
        print(line)
    rates = [r.kill_rate for r in rows if r.kill_rate is not None]
    weak = [r.task for r in rows if r.kill_rate is not None and r.kill_rate < WEAK]
    mid = median(rates)
    print(
        f"mutation: {len(rates)} tasks measured, median kill rate "
        f"{'-' if mid is None else f'{mid:.2f}'}, {time.monotonic() - t0:.0f}s; "
        f"weak (under {WEAK:.2f}): {', '.join(weak) or 'none'}"
    )
    lines = survivors(rows)
    if getattr(args, "verbose", False):
        print("survivors (task  file:line  operator  change):")
        for line in lines:
            print("  " + line)
    if getattr(args, "mutants_out", None):
        every = [
            f"{r.task}\t{m.path}:{m.line}\t{m.operator}\t{m.outcome}\t{m.what}\t{m.detail}"
            for r in rows
            for m in r.mutants
        ]
        Path(args.mutants_out).write_text("".join(x + "\n" for x in every))
    return weak
