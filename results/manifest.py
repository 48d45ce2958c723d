"""The run manifest (manifest.json: what ran) and the resume check: whether a new invocation may continue
a recorded run without mixing two experiments.

The manifest holds config, model, task suite (id, version, content hash), images, versions and times;
results.run_writer writes it (always replaced whole), results.store reads it back.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any, Iterable, Optional

from pydantic import BaseModel, Field, ValidationError

from results.errors import UserError
from results.jsonl import read_json_file
from results.schema import SCHEMA_VERSION

MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20  # the config and the task suite's entries: a few MB for thousands of tasks
# Config keys that change what an attempt means: resuming with a different value would mix two experiments.
RESUME_KEYS = ("model", "tasks", "samples", "temperature")


class TaskEntry(BaseModel):
    id: str
    version: str = "1"
    hash: str = ""  # Task.content_hash()


class Manifest(BaseModel):
    run_id: str = ""  # the run folder's name when created; part of every attempt key
    model: str
    # evaluators.run.config.EvalConfig.record() (EvalConfig.from_record reads it back); rescore adds "rescore"
    config: dict[str, Any] = Field(default_factory=dict)
    task_suite: list[TaskEntry] = Field(default_factory=list)
    images: dict[str, str] = Field(default_factory=dict)  # task id (or image tag) -> image id (sha256:...)
    harness_version: str = ""
    seed: Optional[int] = None
    started_at: str = ""
    finished_at: Optional[str] = None
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def build(
        cls,
        model: str,
        config: dict[str, Any],
        tasks: Iterable[Any] = (),
        images: Optional[dict[str, str]] = None,
        seed: Optional[int] = None,
        harness_version: Optional[str] = None,
    ) -> "Manifest":
        """A manifest for a new run; `tasks` are tasks.model.Task objects (id, version, content_hash())."""
        suite = [TaskEntry(id=t.id, version=str(t.version), hash=t.content_hash()) for t in tasks]
        return cls(
            model=model,
            config=dict(config),
            task_suite=suite,
            images=dict(images or {}),
            seed=seed,
            harness_version=harness_version or current_harness_version(),
        )


def current_harness_version() -> str:
    try:
        return importlib.metadata.version("harness")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def read_manifest(run_dir: str | os.PathLike) -> Manifest:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run folder {run_dir} does not exist (expected a folder made by `harness eval`)")
    path = run_dir / MANIFEST
    if not path.is_file():
        raise UserError(f"{run_dir} is not a run folder: it has no {MANIFEST}")
    data = read_json_file(path, MAX_MANIFEST_BYTES, "not a valid run manifest (changed outside harness?)")
    try:
        return Manifest.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise UserError(f"{path} is not a valid run manifest: {where}: {first['msg']}") from None


def _normal(value: Any) -> Any:
    """The value as it reads back from manifest.json (tuples become lists, paths strings)."""
    return json.loads(json.dumps(value, default=str))


def _describe(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def config_differences(old: Manifest, new: Manifest) -> list[str]:
    """The settings that differ in a way that makes resuming `old` as `new` mix two experiments."""
    diffs = []
    if old.model != new.model:
        diffs.append(f"model ({old.model!r} != {new.model!r})")
    for key in RESUME_KEYS:
        if key == "model" and old.model != new.model:
            continue
        a, b = _normal(old.config.get(key)), _normal(new.config.get(key))
        if a != b:
            diffs.append(f"config.{key} ({_describe(a)} != {_describe(b)})")
    if old.task_suite and new.task_suite:
        was = {t.id: (t.version, t.hash) for t in old.task_suite}
        now = {t.id: (t.version, t.hash) for t in new.task_suite}
        changed = sorted(t for t in was.keys() & now.keys() if was[t] != now[t])
        added, removed = sorted(now.keys() - was.keys()), sorted(was.keys() - now.keys())
        parts = [
            f"{label}: {', '.join(ids[:5])}{' ...' if len(ids) > 5 else ''}"
            for label, ids in (("changed", changed), ("added", added), ("removed", removed))
            if ids
        ]
        if parts:
            diffs.append(f"task suite ({'; '.join(parts)})")
    return diffs


def resume_settings(
    run_dir: str | os.PathLike,
    *,
    model: Optional[str] = None,
    samples: Optional[int] = None,
    temperature: Optional[float] = None,
) -> tuple[Manifest, dict[str, Any]]:
    """The manifest of the run to resume and the settings it continues with: its recorded model, samples
    and temperature (the run's own settings win on resume). A value asked for (None: not asked) that
    differs from the recorded one is refused, named as the `harness eval` option that asked for it.
    RunStore.open then compares the whole manifest (config_differences)."""
    manifest = read_manifest(run_dir)
    cfg = manifest.config
    recorded = {  # a run from before samples and temperature were recorded ran 1 sample at 0
        "model": manifest.model,
        "samples": cfg.get("samples", 1),
        "temperature": cfg.get("temperature", 0.0),
    }
    asked = {"model": model, "samples": samples, "temperature": temperature}
    changed = [
        f"--{k} {asked[k]} (the run has {v})"
        for k, v in recorded.items()
        if asked[k] is not None and asked[k] != v
    ]
    if changed:
        raise UserError(
            f"cannot resume {run_dir} with other settings: {'; '.join(changed)}; leave them out "
            "to continue the run as recorded, or start a new run folder"
        )
    return manifest, recorded
