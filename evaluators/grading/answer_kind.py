"""The answer evaluator kind: the agent writes its answer to a file of /workspace, compared on the host with
the task's expected value (evaluators/grading/verdict.py, answer_matches): no grading container."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from evaluators.grading import verdict as rules
from evaluators.grading.kind import Exportable, Kind
from results.errors import UserError
from tasks.fields import is_relative, number, show

MODES = ("exact", "normalized", "regex", "numeric", "json")


@dataclass(frozen=True)
class AnswerSettings:
    """[evaluator] of kind = "answer": where the agent writes its answer, how to compare, against what."""

    answer_file: str = "answer.txt"
    mode: str = "exact"  # one of MODES
    expected: Any = None
    tolerance: float = 1e-6  # numeric mode


class AnswerKind(Kind, Exportable):
    name = "answer"
    Settings = AnswerSettings
    grading_container = False  # decided on the host from the captured bytes

    def settings(self, table, tests, loc, where):
        from tasks.model import EvaluatorConfig

        d = AnswerSettings()
        answer_file = table.get("answer_file", d.answer_file)
        if not isinstance(answer_file, str) or not is_relative(answer_file):
            raise UserError(
                f'{loc}: [evaluator] answer_file must be a path relative to /workspace, e.g. "answer.txt" '
                f"(got {show(answer_file)})"
            )
        mode = table.get("mode", d.mode)
        if mode not in MODES:
            raise UserError(f"{loc}: [evaluator] mode must be one of {', '.join(MODES)} (got {show(mode)})")
        if "expected" not in table:
            raise UserError(
                f'{loc}: [evaluator] expected is missing (kind = "answer" compares the answer file with it)'
            )
        expected = table["expected"]
        if mode in ("exact", "normalized", "regex") and not isinstance(expected, str):
            raise UserError(
                f"{loc}: [evaluator] expected must be a string for mode = {show(mode)} (got {show(expected)})"
            )
        if mode == "numeric" and (isinstance(expected, bool) or not isinstance(expected, (int, float))):
            raise UserError(
                f'{loc}: [evaluator] expected must be a number for mode = "numeric" (got {show(expected)})'
            )
        if mode == "regex":
            try:
                re.compile(expected)
            except re.error as e:
                raise UserError(f"{loc}: [evaluator] expected is not a valid regex ({e})") from None
        tolerance = number(table, "tolerance", d.tolerance, loc, "[evaluator]", allow_zero=True)
        return EvaluatorConfig(
            kind=self.name, settings=AnswerSettings(answer_file, mode, expected, tolerance)
        )

    async def grade(self, task, sub):
        ev = self.settings_of(task)
        data = sub.changes.files.get(ev.answer_file, task.workspace_files.get(ev.answer_file))
        return rules.answer_verdict(data, ev.answer_file, ev.expected, ev.mode, ev.tolerance)

    def export(self, task):
        ev = self.settings_of(task)
        spec = {
            "answer_file": ev.answer_file,
            "mode": ev.mode,
            "expected": ev.expected,
            "tolerance": ev.tolerance,
        }
        return "reward=$(/usr/bin/python3 -I $H/verdict.py answer)\n", {
            "answer.json": json.dumps(spec).encode()
        }


KIND = AnswerKind()
