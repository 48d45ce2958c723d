"""What the workflow returns: WorkflowResult (run_workflow's answer, with its WorkflowChanges) and ApplyResult
(what apply_changes wrote, held back or refused)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from agent.loop import LoopResult
from agent.sandbox import Changes, ExecResult
from agent.workflow.paths import _any
from agent.workflow.selection import Selection


@dataclass
class WorkflowChanges(Changes):
    """A run's changes with what apply_changes needs to judge them: the protected globs and the files that
    were copied (so `apply_changes(folder, result.changes)` holds back what the run protected)."""

    protect: list[str] = field(default_factory=list)
    copied: Optional[dict[str, tuple[int, int, int]]] = None


@dataclass
class WorkflowResult:
    loop: LoopResult
    changes: Changes
    diff: str
    verification: list[tuple[str, ExecResult]] = field(default_factory=list)
    selection: Optional[Selection] = None
    protect: list[str] = field(default_factory=list)  # globs: shown, flagged, never applied
    plan: Optional["ApplyResult"] = None  # what --apply would do (a dry run), and what --verify ran against

    @property
    def verified(self) -> bool:
        return all(r.exit_code == 0 for _, r in self.verification)

    @property
    def protected_changes(self) -> list[str]:
        return [p for p in self.changes.paths if _any(p, self.protect)]


class ApplyResult(list):
    """(path, why) for every change not applied, as apply_changes has always returned; plus `plan` (what
    would be or was written or removed), `applied`, `held_back` (by policy: protected paths, files that run by
    themselves, version control, ignored files) and `refused` (bad names, platform limits, links or special
    files in the way, I/O errors). Any refusal means that nothing is applied."""

    def __init__(self):
        super().__init__()
        self.plan: list[str] = []
        self.applied: list[str] = []
        self.held_back: list[tuple[str, str]] = []
        self.refused: list[tuple[str, str]] = []

    def _finish(self):
        if self.refused:
            self.refused = [(p, f"{w}; so nothing is applied") for p, w in self.refused]
            self.held_back += [(p, "the patch was refused") for p in self.plan]
            self.plan = []
        self[:] = self.refused + self.held_back
