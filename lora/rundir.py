"""A training run's folder, the files that say where it stands: the phase markers (round_N/<phase>.done.json,
and which runs an eval phase's marker names are train samples) and split.json (the held-out families, each
split's tasks), and the choice of tasks they record (spread, the tasks the audit marks broken)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

from lora.config import TrainConfig
from results.errors import UserError
from results.jsonl import write_json_atomic


def _write_json(path: Path, data: Any) -> None:
    # atomic: a crash leaves the old file or none, never half of one
    write_json_atomic(path, json.loads(json.dumps(data, default=str)))


def phase_done(round_dir: Path, phase: str) -> Optional[dict]:
    """The info written when `phase` of this round finished, or None if it has not."""
    p = round_dir / f"{phase}.done.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else None


def mark_done(round_dir: Path, phase: str, info: dict) -> dict:
    round_dir.mkdir(parents=True, exist_ok=True)
    _write_json(round_dir / f"{phase}.done.json", info)
    return info


def _train_runs(ev: dict) -> dict[str, str]:
    """The train sample runs of an eval phase: train-sample, train-sample-xN, train-hinted-xN."""
    return {k: v for k, v in ev["runs"].items() if k.startswith(("train-sample", "train-hinted"))}


def spread(tasks: list, n: Optional[int]) -> list:
    """The first `n` tasks taken round-robin over their families, so a small run still covers them all."""
    if n is None or n >= len(tasks):
        return list(tasks)
    families: dict[str, list] = defaultdict(list)
    for t in tasks:
        families[getattr(t, "family", "") or t.id].append(t)
    picked: list = []
    while len(picked) < n:
        for group in families.values():
            if group and len(picked) < n:
                picked.append(group.pop(0))
    return picked


def _broken_tasks(runs: list[str], more: Optional[list] = None) -> set[str]:
    """Tasks the audit (results.task_audit.audit_tasks) marks broken, over these runs' attempts and `more`."""
    from results.store import find_attempt_files, iter_attempts
    from results.task_audit import audit_tasks

    attempts = [a for path in find_attempt_files(runs) for a in iter_attempts(path)] if runs else []
    attempts += more or []
    return {row.rate.task_id for row in audit_tasks(attempts) if row.broken} if attempts else set()


def _family(task: Any) -> str:
    return getattr(task, "family", "") or ""


SPLIT_FILE = "split.json"


def _write_split(
    cfg: TrainConfig, held: list[str], every: list, train: list, heldout: list, family: list
) -> None:
    """split.json: the held-out families (with their domains), each split's task ids and every task's
    family. Written once; a resume whose tasks would give other held-out families is refused."""
    path = Path(cfg.out) / SPLIT_FILE
    domain = {_family(t): getattr(t, "domain", "") for t in every if _family(t) in held}
    split = {
        "heldout_families": held,
        "family_seed": cfg.family_seed,
        "domains": {f: domain[f] for f in held},
        "train": [t.id for t in train],
        "heldout": [t.id for t in heldout],
        "family": [t.id for t in family],
        "families": {t.id: _family(t) or t.id for t in [*train, *heldout, *family]},
    }
    if path.exists():
        before = json.loads(path.read_text(encoding="utf-8"))
        if before.get("heldout_families") != held:
            raise UserError(
                f"{path}: the run held out {before.get('heldout_families')}, the tasks now give {held}; "
                "use another --out"
            )
        return
    _write_json(path, split)


def read_split(out: Path) -> dict:
    """The run's split.json ({} for runs made before it)."""
    path = Path(out) / SPLIT_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
