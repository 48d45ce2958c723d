"""Store and reader cases: what the harness reads back from a real run folder cannot be forged or made to
crash it. The attack here is not the agent's but whoever can write the run folder afterwards, so the
agent's run is ordinary and the case's check does the damage, on copies of that run's own folder:

  store_swapped_objects  kept objects swapped (verdicts would flip on rescore), cut short, deleted: rescore,
                         show and every export (the CLI) stop with one line naming the object and the run
                         folder, and write nothing
  hostile_run_files      the run's manifest, attempts.jsonl and its ATIF export, mutated (cut, deeply
                         nested, another encoding, fields of the wrong type, a huge string): every reader
                         accepts the file or says one line, never another exception
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from evaluators.selftest.case import Case, Outcome
from evaluators.selftest.fixtures import SUBMIT, bash
from results.errors import UserError

DAMAGES = ("swapped", "cut", "deleted")


def _run_folder(o: Outcome, case: str) -> Path:
    """The case's own run folder (runner.Runner._eval names it so)."""
    return o.ctx.workdir / f"st-{o.ctx.nonce}-{case}"


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _cli(*args: str) -> subprocess.CompletedProcess:
    """The harness CLI of this very code (as apply_cases runs it)."""
    top = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([top, os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-c", "import sys, harness; sys.exit(harness.main())", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def _refused(what: str, p: subprocess.CompletedProcess, needles: tuple[str, ...]) -> list[str]:
    """[] when the command stopped (exit 2) with one error line naming every needle and printed nothing."""
    if p.returncode != 2 or p.stdout:
        return [f"{what}: exit {p.returncode}, stdout {p.stdout[:100]!r} (expected exit 2, no output)"]
    if p.stderr.count("\n") != 1 or "Traceback" in p.stderr or not all(n in p.stderr for n in needles):
        return [f"{what}: not one line naming {needles}: {p.stderr[-300:]}"]
    return []


def _damage(run: Path, how: str) -> Path:
    """Damage the first attempt's kept answer.txt; returns that object's path."""
    from results.store import OBJECTS, open_run

    digests = [a.changes.files["answer.txt"] for a in open_run(run).iter_attempts() if a.changes]
    a, b = (run / OBJECTS / d[:2] / d for d in digests[:2])
    if how == "swapped":
        da, db = a.read_bytes(), b.read_bytes()
        a.write_bytes(db)
        b.write_bytes(da)
    elif how == "cut":
        a.write_bytes(a.read_bytes()[:3])
    else:
        a.unlink()
    return a


def _swapped_objects(o: Outcome) -> list[str]:
    from results.store import open_run

    source = _run_folder(o, "store_swapped_objects")
    attempts = [a for a in open_run(source, verify=True).iter_attempts() if a.changes]
    answers = {a.changes.files.get("answer.txt") for a in attempts}
    if len(attempts) < 2 or len(answers) != 2:  # the wrong and the right answer, as two objects
        return [f"expected two attempts with different kept answers, found {len(attempts)}"]
    problems = []
    for how in DAMAGES:
        run = o.ctx.workdir / f"store-{o.ctx.nonce}-{how}"
        shutil.copytree(source, run)
        bad = _damage(run, how)
        before, out = _listing(run), o.ctx.workdir / f"store-{o.ctx.nonce}-{how}-rescored"
        for what, args in (
            ("rescore", ["rescore", str(run), "--out", str(out)]),
            ("show", ["show", str(run), attempts[0].task_id, "--sample", str(attempts[0].sample)]),
            ("export openai", ["export", str(run), "--format", "openai"]),
            ("export atif", ["export", str(run), "--format", "atif"]),
        ):
            problems += [f"{how}: {p}" for p in _refused(what, _cli(*args), (str(bad), str(run)))]
        if out.exists() or _listing(run) != before:
            problems.append(f"{how}: something was written from the damaged run folder")
    return problems


def _mutants(raw: bytes) -> list[tuple[str, bytes]]:
    """A fixed set of hostile versions of a real file (tests/test_hostile_inputs.py generates many more)."""
    first, _, rest = raw.partition(b"\n")
    out = [
        ("cut in half", raw[: len(raw) // 2]),
        ("deep nesting", raw[:1] + b"[" * 100_000 + b"]" * 100_000 + b"," + raw[1:]),
        ("utf-16", raw.decode("utf-8").encode("utf-16")),
        ("byte 0xff", raw[:10] + b"\xff" + raw[11:]),
        ("huge string", raw[:1] + b'"' + b"x" * (8 << 20) + b'",' + raw[1:]),
    ]
    try:
        doc = json.loads(first)
    except ValueError:
        return out
    items = doc[0] if isinstance(doc, list) and doc and isinstance(doc[0], dict) else doc
    for key in list(items)[:12] if isinstance(items, dict) else []:
        for value in ([1], "x", 1.5, None):
            changed = dict(items, **{key: value})
            line = json.dumps([changed, *doc[1:]] if isinstance(doc, list) else changed).encode()
            out.append((f"{key} = {json.dumps(value)}", line + (b"\n" + rest if rest else b"")))
    return out


def _hostile_files(o: Outcome) -> list[str]:
    from agent.models.replay import load_scripts
    from results.export.atif import export_atif
    from results.manifest import MANIFEST
    from results.store import ATTEMPTS, open_run

    run = o.ctx.workdir / f"hostile-{o.ctx.nonce}"
    shutil.copytree(_run_folder(o, "hostile_run_files"), run)
    atif, _ = export_atif(run, o.ctx.workdir / f"hostile-{o.ctx.nonce}.atif.json")
    readers: list[tuple[Path, Callable[[], Any]]] = [
        (run / MANIFEST, lambda: list(open_run(run).iter_attempts())),
        (run / ATTEMPTS, lambda: list(open_run(run).iter_attempts())),
        (run / ATTEMPTS, lambda: load_scripts(str(run / ATTEMPTS))),
        (atif, lambda: load_scripts(str(atif))),
    ]
    problems = []
    for path, read in readers:
        original = path.read_bytes()
        for what, data in _mutants(original):
            path.write_bytes(data)
            try:
                read()
            except UserError as e:
                if "\n" in str(e) or str(path) not in str(e):
                    problems.append(f"{path.name}, {what}: not one line naming the file: {str(e)[:200]}")
            except Exception as e:
                problems.append(f"{path.name}, {what}: {type(e).__name__}: {str(e)[:200]}")
        path.write_bytes(original)
    return problems


def store_cases() -> list[Case]:
    return [
        Case(
            "store_swapped_objects",
            "host",
            "swapped/cut/deleted objects stop rescore, show, export",
            lambda c: [bash(f"echo wrong-{c.nonce} > answer.txt"), SUBMIT],
            check=_swapped_objects,
        ),
        Case(
            "hostile_run_files",
            "host",
            "mutated manifest/attempts/ATIF: read or one line",
            lambda c: [bash(f"echo {c.answer} > answer.txt"), SUBMIT],
            check=_hostile_files,
        ),
    ]
