"""Test strength by mutation (`harness tasks validate SUITE --mutants N`): how many small wrong versions of a
task's solution its hidden tests reject. A task whose tests pass a wrong program rewards that program.

Owns the mutation operators, the seeded choice of a task's mutants and their verdicts through the real grader.

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

import ast
import asyncio
import copy
import random
import re
import subprocess
import sys
import time
import types
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

from agent.sandbox.registry import DEFAULT
from evaluators.run.policies import Policy, oracle_policy
from evaluators.run.runner import run_attempt
from results.errors import InfraError
from tasks.impossible import _splice
from tasks.model import Task

SEED = 0
WEAK = 0.8  # kill rate under which a task is weak: its tests accept one wrong program in five
MIN_BUDGET = 30.0  # seconds a mutant's hidden tests may take at least (a looping mutant costs this much)
KINDS = ("pytest", "script", "harbor")  # kinds whose oracle changes files (answer tasks write a reply)


@dataclass
class Mutant:
    path: str  # the changed file, relative to the working folder
    operator: str
    line: int
    what: str  # e.g. "a < b -> a <= b"
    source: str
    outcome: str = ""  # killed | survived | equivalent | invalid | timeout
    detail: str = ""


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


# ------------------------------------------------------------------------------------------ Python operators
_COMPARE = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_ARITH = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
}
_DELETABLE = (
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.Expr,
    ast.Return,
    ast.Raise,
    ast.Assert,
    ast.If,
    ast.For,
    ast.While,
    ast.With,
    ast.Try,
    ast.Continue,
    ast.Break,
    ast.Delete,
)


def _untouchable(tree: ast.AST) -> set[int]:
    """Nodes no operator changes: docstrings, annotations (no behaviour) and f-string parts (their positions
    are not reliable before Python 3.12)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        roots = []
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                roots.append(body[0])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            roots += [node.returns] + [a.annotation for a in ast.walk(node.args) if isinstance(a, ast.arg)]
        if isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        if isinstance(node, ast.JoinedStr):
            roots.append(node)
        out |= {id(n) for r in roots if r is not None for n in ast.walk(r)}
    return out


def _numeric_contexts(tree: ast.AST) -> set[int]:
    """Numbers where an off-by-one is a boundary: compared, an index or slice bound, a range() argument."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
        elif isinstance(node, ast.Subscript):
            parts = [node.slice]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
            parts = list(node.args)
        else:
            continue
        for p in parts:
            out |= {id(n) for n in ast.walk(p) if isinstance(n, (ast.Constant, ast.UnaryOp))}
    return out


def _python_sites(tree: ast.AST) -> list[tuple[str, ast.AST, str]]:
    """(operator, node, replacement text) for every mutation site, in file order."""
    skip, boundary = _untouchable(tree), _numeric_contexts(tree)
    sites = []
    for node in ast.walk(tree):
        if id(node) in skip or not hasattr(node, "lineno"):
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _COMPARE:
                    new = copy.deepcopy(node)
                    new.ops[i] = _COMPARE[type(op)]()
                    sites.append(("comparison", node, f"({ast.unparse(new)})"))
        elif isinstance(node, ast.BoolOp):
            new = copy.deepcopy(node)
            new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            sites.append(("logic", node, f"({ast.unparse(new)})"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            sites.append(("logic", node, f"({ast.unparse(node.operand)})"))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _ARITH:
            new = copy.deepcopy(node)
            new.op = _ARITH[type(node.op)]()
            text = ast.unparse(new)
            sites.append(("arithmetic", node, text if isinstance(node, ast.AugAssign) else f"({text})"))
        elif isinstance(node, ast.Constant) and not isinstance(node.value, (bytes, type(None), type(...))):
            v = node.value
            if isinstance(v, bool):
                sites.append(("constant", node, repr(not v)))
            elif isinstance(v, (int, float)):
                if id(node) in boundary:
                    sites += [("boundary", node, f"({v + 1!r})"), ("boundary", node, f"({v - 1!r})")]
                else:
                    sites.append(("constant", node, f"({v + 1!r})"))
            elif isinstance(v, str):
                sites.append(("constant", node, repr("" if v else "mutant")))
        elif isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                sites.append(("return", node.value, "None"))
        if isinstance(node, _DELETABLE) and not (isinstance(node, ast.Expr) and id(node) in skip):
            sites.append(("delete", node, "pass"))
    return sorted(sites, key=lambda s: (s[1].lineno, s[1].col_offset, s[0]))


def _code_key(code: types.CodeType) -> tuple:
    """What a code object does, without its line numbers: equal keys, equal behaviour."""
    consts = tuple(
        _code_key(c) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c)) for c in code.co_consts
    )
    return (code.co_code, consts, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)


def python_mutants(path: str, src: str) -> list[Mutant]:
    """Every mutant of a Python file, with its outcome decided already when it is equivalent or invalid."""
    try:
        tree = ast.parse(src)
        original = (ast.dump(tree), _code_key(compile(src, path, "exec")))
    except (SyntaxError, ValueError):
        return []
    out = []
    for operator, node, text in _python_sites(tree):
        before = ast.get_source_segment(src, node) or ""
        before = before.splitlines()[0] + (" ..." if "\n" in before else "")
        mutant = Mutant(path, operator, node.lineno, f"{before} -> {text}"[:120], _splice(src, node, text))
        try:
            tree2 = ast.parse(mutant.source)
            if (
                ast.dump(tree2) == original[0]
                or _code_key(compile(mutant.source, path, "exec")) == original[1]
            ):
                mutant.outcome = "equivalent"
        except (SyntaxError, ValueError) as e:
            mutant.outcome, mutant.detail = "invalid", f"{type(e).__name__}: {e}"[:120]
        out.append(mutant)
    return out


# ------------------------------------------------------------------------------------------- shell operators
_SH_COMPARE = {"-eq": "-ne", "-ne": "-eq", "-lt": "-le", "-le": "-lt", "-gt": "-ge", "-ge": "-gt"}
_SH_TEST = re.compile(r"\s(-eq|-ne|-lt|-le|-gt|-ge|==|!=)\s")
_SH_ARITH = re.compile(r"\$?\(\(([^()]*)\)\)")
_SH_ARITH_OP = {"+": "-", "-": "+", "*": "/", "/": "*", "%": "/"}
_SH_NUMBER = re.compile(r"(?<![\w$./:-])\d+(?![\w./>:<-])")
_SH_EXIT = re.compile(r"\b(exit|return)\s+([01])\b")
_SH_STRUCTURE = re.compile(
    r"^(if|elif|else|fi|then|for|while|until|do|done|case|esac|function|\}|\{|;;)\b|[{\\]$|^[^=(]*\)$|then$|do$|^\w+\s*\(\)"
)
_SH_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)")


def shell_mutants(path: str, src: str) -> list[Mutant]:
    """Token mutants of a shell file, line by line; comments and here-document bodies are left alone."""
    lines = src.splitlines(keepends=True)
    sites: list[tuple[str, int, str, str]] = []  # (operator, line index, new line, what)
    heredoc, continued = "", False
    for i, line in enumerate(lines):
        body = line.rstrip("\n")
        code = body.strip()
        if heredoc:
            heredoc = "" if code == heredoc else heredoc
            continue
        if not code or code.startswith("#"):
            continue
        doc = _SH_HEREDOC.search(body)
        heredoc = doc.group(1) if doc else ""

        def put(operator: str, start: int, end: int, new: str) -> None:
            sites.append(
                (
                    operator,
                    i,
                    body[:start] + new + body[end:] + line[len(body) :],
                    f"{body[start:end]} -> {new}",
                )
            )

        for m in _SH_TEST.finditer(body):
            op = m.group(1)
            put("comparison", m.start(1), m.end(1), _SH_COMPARE.get(op) or ("!=" if op == "==" else "=="))
        for m in _SH_ARITH.finditer(body):
            for j, ch in enumerate(m.group(1)):
                if ch in _SH_ARITH_OP:
                    at = m.start(1) + j
                    put("arithmetic", at, at + 1, _SH_ARITH_OP[ch])
        compared = bool(_SH_TEST.search(body) or _SH_ARITH.search(body))
        for m in _SH_NUMBER.finditer(body):
            n = int(m.group())
            if compared:
                put("boundary", m.start(), m.end(), str(n + 1))
                put("boundary", m.start(), m.end(), str(max(n - 1, 0)))
            else:
                put("constant", m.start(), m.end(), str(n + 1))
        for m in _SH_EXIT.finditer(body):
            put("return", m.start(2), m.end(2), "1" if m.group(2) == "0" else "0")
        if not continued and not doc and not _SH_STRUCTURE.search(code):
            indent = body[: len(body) - len(body.lstrip())]
            sites.append(("delete", i, indent + ":" + line[len(body) :], f"{code[:60]} -> :"))
        continued = body.endswith("\\")
    out = []
    for operator, i, new, what in sites:
        mutant = Mutant(path, operator, i + 1, what[:120], "".join(lines[:i] + [new] + lines[i + 1 :]))
        if mutant.source == src:
            mutant.outcome = "equivalent"
        else:
            r = subprocess.run(["bash", "-n"], input=mutant.source, capture_output=True, text=True)
            if r.returncode:
                mutant.outcome, mutant.detail = "invalid", r.stderr.strip()[:120]
        out.append(mutant)
    return out


def language(path: str, data: bytes) -> str:
    """ "python", "shell" or "" for a changed file."""
    first = data[:80].split(b"\n")[0]
    if path.endswith(".py") or (first.startswith(b"#!") and b"python" in first):
        return "python"
    if path.endswith(".sh") or (first.startswith(b"#!") and re.search(rb"\b(ba|da|z)?sh\b", first)):
        return "shell"
    return ""


def mutants_of(files: dict[str, bytes]) -> list[Mutant]:
    """Every mutant of the changed files, in path and file order; one of each text."""
    out, seen = [], set()
    for path in sorted(files):
        lang = language(path, files[path])
        try:
            src = files[path].decode("utf-8")
        except UnicodeDecodeError:
            continue
        made = python_mutants(path, src) if lang == "python" else shell_mutants(path, src) if lang else []
        for m in made:
            if (path, m.source) not in seen:
                seen.add((path, m.source))
                out.append(m)
    return out


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
