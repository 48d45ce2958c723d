"""`harness export RUN --format FORMAT` for the JSONL formats: export_run writes a run's attempts as
records of one format (checked, infra errors skipped), and optionally as a local `datasets` folder."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from results.attempts import action_signature, is_solved
from results.errors import UserError
from results.export.formats import CONVERTERS, FORMATS
from results.export.messages import conversation_problem
from results.export.validate import VALIDATORS
from results.schema import Attempt
from results.store import open_run


def save_hf_dataset(records: list[dict[str, Any]], folder: str | Path) -> Path:
    """The records as a local Hugging Face `datasets` folder (Dataset.save_to_disk; load_from_disk reads it).
    Columns holding lists or objects (messages, tools...) use the datasets Json type, so tool-call arguments
    keep each call's own keys instead of being widened to one Arrow struct with nulls."""
    try:
        from datasets import Dataset, Features, Json, Value
    except ImportError:
        raise UserError("--hf-dataset needs the `datasets` package: pip install 'harness[data]'") from None
    if not records:
        raise UserError("no records to write as a datasets folder (everything was skipped)")
    scalar = {
        "task_id": Value("string"),
        "split": Value("string"),
        "reward": Value("float64"),
        "label": Value("bool"),
    }
    features = Features({key: scalar.get(key, Json()) for key in records[0]})
    columns = {key: [r.get(key) for r in records] for key in records[0]}
    Dataset.from_dict(columns, features=features).save_to_disk(str(folder))
    return Path(folder)


@dataclass
class ExportResult:
    path: Path
    written: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count
    first_invalid: str = ""  # the first record that failed its format check, and why


def export_run(
    run_dir: str | Path,
    fmt: str,
    out: Optional[str | Path] = None,
    only_solved: bool = False,
    dedupe: bool = False,
    hf_dataset: Optional[str | Path] = None,
) -> ExportResult:
    """Write the exported records as JSONL (the file appears whole: temp file + rename), and as a local
    `datasets` folder when hf_dataset is given."""
    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    run = open_run(run_dir, verify=True)
    path = Path(out) if out else run.dir / f"export-{fmt}{'-solved' if only_solved else ''}.jsonl"
    tools = run.manifest.config.get("tools") or None  # the tools offered, if the eval loop recorded them
    result = ExportResult(path)
    seen: set[str] = set()
    kept: list[dict[str, Any]] = []
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for attempt in run.iter_attempts():
                reason = _left_out(attempt, only_solved, dedupe, seen)
                records: list[dict[str, Any]] = []
                if reason is None:
                    records, reason, problem = _records(attempt, fmt, tools)
                    if problem:
                        result.first_invalid = result.first_invalid or f"{attempt.key}: {problem}"
                if reason is not None:
                    result.skipped[reason] = result.skipped.get(reason, 0) + 1
                    continue
                for record in records:
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
                    result.written += 1
                    if hf_dataset is not None:
                        kept.append(record)
        if hf_dataset is not None:
            save_hf_dataset(kept, hf_dataset)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return result


def _left_out(attempt: Attempt, only_solved: bool, dedupe: bool, seen: set[str]) -> Optional[str]:
    """Why the attempt is not exported (None: it is); with dedupe its actions join `seen`."""
    if attempt.status == "error":
        return "infra error"
    if only_solved and not is_solved(attempt):
        return "not solved"
    if dedupe:
        sig = action_signature(attempt)
        if sig in seen:
            return "duplicate actions"
        seen.add(sig)
    return None


def _records(
    attempt: Attempt, fmt: str, tools: Any
) -> tuple[list[dict[str, Any]], Optional[str], Optional[str]]:
    """(the attempt's records in fmt, why none are written, the first problem of an invalid one)."""
    problem = conversation_problem(attempt)
    if problem:  # a record changed outside harness: its conversation is not one the converters can read
        return [], "invalid record", problem
    records = CONVERTERS[fmt](attempt, tools)
    records = records if isinstance(records, list) else [] if records is None else [records]
    if not records:
        return [], "no assistant message", None
    problems = [p for r in records for p in VALIDATORS[fmt](r)]
    if problems:  # a malformed conversation: never write bad training data
        return [], "invalid record", problems[0]
    return records, None, None
