"""Run folders: what ran (manifest) and what came out (one Attempt per line), crash- and disk-full-safe.

    runs/<UTC timestamp>-<model slug>/
      manifest.json   config, model, task suite (id, version, content hash), images, versions, times;
                      always replaced whole (temp file + fsync + os.replace)
      attempts.jsonl  append-only: each Attempt is one line written with one os.write on an O_APPEND fd,
                      then fsync; only then does the attempt count as done
      objects/ab/<sha256>  the attempts' final changes and kept files (a Harbor verifier's output and
                      /logs files, artifacts), content-addressed (each file and each diff once,
                      whatever number of attempts wrote it); written and fsync'd before the record naming
                      them (Attempt.changes), so a record never points at a missing object; every
                      read checks the object against its name (read_object)
      retried.jsonl   records of `error` attempts that --resume --retry-errors ran again
      .lock           flock held by the one harness process writing this folder

A crash can leave at most one torn last line (SIGKILL or power loss mid-write). Resuming cuts it off
before appending, because appending after a partial line would corrupt the next record too. Readers
(report, export) skip a torn last line without touching the file, so they work on a live run.

This module is the folder's layout and its readers (RunReader, open_run, load_attempts, the kept objects,
find_attempt_files); its one writer (RunStore, holding .lock) is results.run_writer, the manifest's model
and the resume check results.manifest, the file primitives results.jsonl.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional, Sequence

from pydantic import ValidationError

from results.errors import UserError
from results.jsonl import iter_jsonl
from results.manifest import read_manifest
from results.schema import Attempt, KeptChanges, KeptFile

if TYPE_CHECKING:
    import pandas as pd

ATTEMPTS = "attempts.jsonl"
LOCK = ".lock"
OBJECTS = "objects"
RETRIED = "retried.jsonl"


def model_slug(model: str) -> str:
    return re.sub(r"[^a-z0-9._]+", "-", model.lower()).strip("-.")[:60] or "model"


def default_run_dir(model: str, root: str | os.PathLike = "runs") -> Path:
    """runs/<UTC timestamp>-<model slug>, e.g. runs/20250101T120000Z-openai-gpt-4o-mini."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path(root) / f"{stamp}-{model_slug(model)}"


# ---------------------------------------------------------------- reading


def iter_attempts(path: str | os.PathLike, trajectories: bool = True) -> Iterator[Attempt]:
    """The Attempts of an attempts.jsonl, one at a time (a torn last line is skipped), each checked
    against the schema; without trajectories, messages and steps are dropped unchecked (tables)."""
    path = Path(path)
    for n, record in enumerate(iter_jsonl(path), start=1):
        if not trajectories:
            record = {k: v for k, v in record.items() if k not in ("messages", "steps")}
        try:
            yield Attempt.model_validate(record)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise UserError(f"{path} record {n} is not a valid attempt: {where}: {first['msg']}") from None


def load_attempts(path: str | os.PathLike) -> list[Attempt]:
    """All Attempts of an attempts.jsonl, or of the folder holding one; unlike open_run, no manifest
    is needed (the post-training loop reads bare attempt files too)."""
    path = Path(path)
    if path.is_dir():
        path = path / ATTEMPTS
    if not path.exists():
        raise UserError(f"{path}: no such file; expected the attempts.jsonl of an eval run")
    return list(iter_attempts(path))


# Flat per-attempt columns for analysis. Trajectories (messages, steps) are never loaded into tables.
TABLE_COLUMNS = (
    "key",
    "run_id",
    "task_id",
    "task_version",
    "domain",
    "difficulty",
    "split",
    "sample",
    "model",
    "temperature",
    "status",
    "solved",
    "reward",
    "reason",
    "exit_reason",
    "n_steps",
    "prompt_tokens",
    "completion_tokens",
    "cost",
    "duration_model",
    "duration_sandbox",
    "duration_evaluation",
    "duration_total",
    "n_tests",
    "n_tests_passed",
    "patch_files",
    "grading_hash",
    "impossible",
    "n_flags",
    "image",
    "error",
    "started_at",
    "finished_at",
)


def _flatten(a: Attempt) -> dict[str, Any]:
    row = {c: getattr(a, c) for c in TABLE_COLUMNS if c in Attempt.model_fields}
    for part in ("model", "sandbox", "evaluation", "total"):
        row[f"duration_{part}"] = getattr(a.durations, part)
    row["n_tests"] = len(a.tests)
    row["n_tests_passed"] = sum(1 for t in a.tests if t.outcome == "passed")
    row["n_flags"] = len(a.flags)
    return row


class RunReader:
    """Read-only view of a run folder; safe while another process is still appending to it."""

    def __init__(self, run_dir: str | os.PathLike):
        self.dir = Path(run_dir)
        self.manifest = read_manifest(self.dir)
        self.attempts_path = self.dir / ATTEMPTS

    @property
    def run_id(self) -> str:
        return self.manifest.run_id or self.dir.name

    def iter_records(self) -> Iterator[dict[str, Any]]:
        """Raw JSON dicts, one at a time."""
        return iter_jsonl(self.attempts_path)

    def iter_attempts(self) -> Iterator[Attempt]:
        """Full Attempt records (trajectories included), one at a time: memory stays flat."""
        return iter_attempts(self.attempts_path)

    def read_attempts(self, columns: Optional[Sequence[str]] = None) -> "pd.DataFrame":
        """One row per attempt with only the flat columns asked for (default: all of TABLE_COLUMNS).

        Streams the file; each record's trajectory is dropped as soon as its row is taken.
        """
        import pandas as pd  # here, not at import: the eval loop only appends and should start fast

        cols = list(columns or TABLE_COLUMNS)
        unknown = [c for c in cols if c not in TABLE_COLUMNS]
        if unknown:
            raise ValueError(f"unknown attempt columns {unknown}; known: {', '.join(TABLE_COLUMNS)}")
        data: dict[str, list[Any]] = {c: [] for c in cols}
        for attempt in iter_attempts(self.attempts_path, trajectories=False):  # the fields checked
            row = _flatten(attempt)
            for c in cols:
                data[c].append(row[c])
        return pd.DataFrame(data, columns=cols)


def read_object(run_dir: str | os.PathLike, digest: str) -> bytes:
    """One kept object of a run folder by its sha256 (a file's content or a diff), checked against that
    sha256: every reader goes through here, so a swapped, cut or edited object stops the reader (a
    UserError naming the object and the run folder) instead of being graded, shown or exported."""
    import hashlib

    if not re.fullmatch(r"[0-9a-f]{64}", digest or ""):
        raise UserError(f"{run_dir}: {digest!r} is not an object name (a sha256 in hex)")
    path = Path(run_dir) / OBJECTS / digest[:2] / digest
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(
            f"{path}: kept object missing; the run folder {run_dir} was changed outside harness "
            "(restore it from a copy, or run the eval again)"
        ) from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise UserError(
            f"{path}: kept object does not match its sha256 ({len(data)} bytes); the run folder {run_dir} "
            "was changed outside harness (restore it from a copy, or run the eval again)"
        )
    return data


def kept_diff(run_dir: str | os.PathLike, attempt: Attempt) -> Optional[str]:
    """The attempt's unified diff, or None when its changes were not kept (runs written before)."""
    if attempt.changes is None:
        return None
    if not attempt.changes.diff:
        return ""
    return read_object(run_dir, attempt.changes.diff).decode("utf-8", "replace")


def kept_files(run_dir: str | os.PathLike, kept: KeptChanges) -> dict[str, bytes]:
    """The kept files of an attempt, path -> bytes."""
    return {p: read_object(run_dir, d) for p, d in kept.files.items()}


def kept_file(run_dir: str | os.PathLike, f: KeptFile) -> bytes:
    """One file kept with an attempt (KeptFile: a Harbor verifier's output, an artifact), by its path's
    object name (objects/ab/<sha256>)."""
    return read_object(run_dir, Path(f.path).name)


def verify_objects(run_dir: str | os.PathLike, attempts: Iterable[Attempt]) -> None:
    """Read (so check) every object the attempts name: readers that hand a run on (rescore, export) call
    this first, so a damaged run folder stops them before they write anything."""
    for a in attempts:
        if a.changes is not None:
            kept_files(run_dir, a.changes)
            kept_diff(run_dir, a)
        for f in a.files:
            if f.path:
                kept_file(run_dir, f)


def open_run(run_dir: str | os.PathLike, verify: bool = False) -> RunReader:
    """A finished or running run folder, for reading (report, compare, export); with verify, every kept
    object its attempts name is checked first (verify_objects)."""
    run = RunReader(run_dir)
    if verify:
        verify_objects(run.dir, run.iter_attempts())
    return run


def find_attempt_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The attempts.jsonl files of these paths: a file itself, a run folder's, or every one found
    under a folder holding many runs (a train run's round_N/eval/<run>/). A path with none is a
    UserError."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_file():
            found.append(path)
        elif (path / ATTEMPTS).is_file():
            found.append(path / ATTEMPTS)
        elif path.is_dir() and (under := sorted(path.rglob(ATTEMPTS))):
            found += under
        else:
            raise UserError(f"{path}: no {ATTEMPTS} in it or under it; give eval run folders or a train run")
    return found
