"""Load a suite of tasks: resolve its name ("builtin", "builtin:easy", "humaneval" or a folder), find every
task and family folder in it (tasks/task_folder.py, tasks/family.py), and select tasks by domain,
difficulty, tags, split and id.

Every problem a user can fix raises UserError with one line naming the file, the field and the fix.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Iterable, Optional

from results.errors import UserError
from tasks.family import load_family
from tasks.fields import display, show
from tasks.model import DOMAINS, SPLITS, Task
from tasks.task_folder import load_task

PACKAGE_DIR = Path(__file__).parent
BUILTIN_DIR = PACKAGE_DIR / "builtin"
HUMANEVAL_DIR = PACKAGE_DIR / "humaneval"  # written by `harness tasks import humaneval`, not in git
EASY = (1, 2)  # "builtin:easy"
# "builtin:demo": what `make demo` runs, sized to be watched (a few minutes on a 2-core machine): every
# domain, difficulties 1-3, and tasks the embedded model solves some of the time beside ones it does not.
DEMO = (
    "create-file-01", "rename-file-01", "make-executable-01", "word-count-01", "count-lines-01",
    "celsius-to-fahrenheit-01", "config-value-01", "fizzbuzz", "csv-sum", "extract-emails",
    "log-top-ip", "fix-operator-01",
)  # fmt: skip


def load_suite(
    spec: str | Path,
    *,
    domain: Optional[str] = None,
    difficulty: int | str | Iterable[int] | None = None,
    tags: Optional[Iterable[str]] = None,
    split: Optional[str] = None,
    glob: Optional[str] = None,
) -> list[Task]:
    """All tasks of a suite, filtered.

    spec: a folder searched recursively for task and family folders, one task or family folder, "builtin",
    "builtin:easy" (difficulty 1-2), or "humaneval" (tasks/humaneval, made by `harness tasks import
    humaneval`).
    Filters: domain; difficulty as N, "N-M" or a collection of ints; tags (a task must have all of them);
    split (train | heldout: family instances only); glob on the task id (fnmatch).
    """
    root, preset = _resolve_spec(spec)
    tasks = _discover(root)
    if str(spec) == "builtin:demo":
        by_id = {t.id: t for t in tasks}
        tasks, preset = [by_id[i] for i in DEMO], None
    if not tasks:
        raise UserError(
            f"{display(root)}: no tasks found (expected folders holding task.toml or family.toml)"
        )
    _check_unique(tasks)

    wanted_difficulty = _difficulty_filter(difficulty)
    if preset is not None:
        wanted_difficulty = preset if wanted_difficulty is None else wanted_difficulty & preset
    if domain is not None and domain not in DOMAINS:
        raise UserError(f"unknown domain {show(domain)} (use one of {', '.join(DOMAINS)})")
    if split is not None and split not in SPLITS:
        raise UserError(f"unknown split {show(split)} (use train or heldout)")
    want_tags = set(tags or ())
    return [
        t
        for t in tasks
        if (domain is None or t.domain == domain)
        and (wanted_difficulty is None or t.difficulty in wanted_difficulty)
        and want_tags <= set(t.tags)
        and (split is None or t.split == split)
        and (glob is None or fnmatch.fnmatchcase(t.id, glob))
    ]


def _resolve_spec(spec: str | Path) -> tuple[Path, Optional[set[int]]]:
    text = str(spec)
    if text == "builtin":
        return BUILTIN_DIR, None
    if text == "builtin:easy":
        return BUILTIN_DIR, set(EASY)
    if text == "builtin:demo":
        return BUILTIN_DIR, None
    if text == "humaneval":
        if not HUMANEVAL_DIR.is_dir():
            raise UserError(f"{HUMANEVAL_DIR}: not imported yet (run `harness tasks import humaneval` first)")
        return HUMANEVAL_DIR, None
    path = Path(spec)
    if not path.exists():
        raise UserError(
            f'{text}: no such suite (give a folder of tasks, a task folder, "builtin", '
            '"builtin:easy", "builtin:demo" or "humaneval")'
        )
    if path.is_file() and path.name in ("task.toml", "family.toml"):
        path = path.parent
    if not path.is_dir():
        raise UserError(f"{text}: not a folder (give a folder of tasks or a task folder)")
    return path, None


def _discover(root: Path) -> list[Task]:
    has_task, has_family = (root / "task.toml").is_file(), (root / "family.toml").is_file()
    if has_task and has_family:
        raise UserError(
            f"{display(root)}: holds both task.toml and family.toml (keep one: a task or a family)"
        )
    if has_task:
        return [load_task(root)]
    if has_family:
        return load_family(root)
    tasks: list[Task] = []
    for child in sorted(root.iterdir()):
        if (
            child.is_dir()
            and not child.is_symlink()
            and not child.name.startswith(".")
            and child.name != "__pycache__"
        ):
            tasks += _discover(child)
    return tasks


def _check_unique(tasks: list[Task]) -> None:
    seen: dict[str, Task] = {}
    for t in tasks:
        if t.id in seen:
            a, b = _origin(seen[t.id]), _origin(t)
            raise UserError(
                f"duplicate task id {show(t.id)} in {a} and {b} (task ids must be unique in a suite)"
            )
        seen[t.id] = t


def _origin(t: Task) -> str:
    return display(t.path) if t.path else f"family {t.family}"


def _difficulty_filter(value: int | str | Iterable[int] | None) -> Optional[set[int]]:
    if value is None:
        return None
    if isinstance(value, bool):
        raise UserError(f"difficulty filter must be N or N-M with 1 <= N <= M <= 5 (got {show(value)})")
    if isinstance(value, int):
        values = {value}
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*(\d)\s*(?:-\s*(\d)\s*)?", value)
        if not m:
            raise UserError(f"difficulty filter must be N or N-M with 1 <= N <= M <= 5 (got {show(value)})")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        values = set(range(lo, hi + 1))
    else:
        values = set(value)
    if not values or not values <= {1, 2, 3, 4, 5}:
        raise UserError(f"difficulty filter must be N or N-M with 1 <= N <= M <= 5 (got {show(value)})")
    return values


def spread(tasks: list[Task], n: Optional[int]) -> list[Task]:
    """`n` tasks spread over the suite: round-robin over (difficulty, domain), and inside each over families,
    so `--limit 6` of a suite samples its kinds instead of the first six of one (all when n is None)."""
    if n is None or n >= len(tasks):
        return list(tasks)
    groups: dict[tuple, dict[str, list[Task]]] = {}
    for t in tasks:
        groups.setdefault((t.difficulty, t.domain), {}).setdefault(t.family or t.id, []).append(t)
    queues = {k: list(fams.values()) for k, fams in sorted(groups.items())}
    picked: list[Task] = []
    while len(picked) < n:
        for families in queues.values():
            if families and len(picked) < n:
                family = families.pop(0)
                picked.append(family.pop(0))
                if family:
                    families.append(family)
    return picked
