"""The [evaluator] table of a task.toml: which registered evaluator kind grades the task
(evaluators/grading/kinds.py), and that kind's settings, checked against the task's hidden files.

Every problem a user can fix raises UserError with one line naming the file, the field and the fix.
"""

from __future__ import annotations

import re
from typing import Optional

from evaluators.grading import hidden_tests, kinds
from results.errors import UserError
from tasks.fields import Where, is_relative, number, show
from tasks.model import EvaluatorConfig

ANSWER_MODES = ("exact", "normalized", "regex", "numeric", "json")
# The [evaluator] keys each kind reads; a kind not listed reads only `kind`.
KEYS_BY_KIND = {
    "pytest": {"kind", "protected", "import_mode"},
    "answer": {"kind", "answer_file", "mode", "expected", "tolerance"},
    "script": {"kind"},
}
KEYS = set().union(*KEYS_BY_KIND.values())  # every key an [evaluator] table may hold


def evaluator_config(
    table: Optional[dict], tests: dict[str, bytes], loc: str, where: Where
) -> EvaluatorConfig:
    """The [evaluator] table (None: absent) of the task.toml at `loc`, checked against its hidden `tests`."""
    if table is None:  # Harbor tasks have no [evaluator]: their tests/test.sh is the verifier
        table = {"kind": "script" if "test.sh" in tests else "pytest"}
    kind = table.get("kind", "pytest")
    allowed = kinds.task_toml_kinds()
    if kind not in allowed:
        raise UserError(f"{loc}: [evaluator] kind must be one of {', '.join(allowed)} (got {show(kind)})")
    for key in table:
        if key not in KEYS_BY_KIND.get(kind, {"kind"}):
            used_by = [k for k, keys in KEYS_BY_KIND.items() if key in keys]
            raise UserError(
                f"{loc}: [evaluator] {key} only applies to kind = {show(used_by[0])} "
                f"(this task has kind = {show(kind)}; remove it)"
            )
    d = EvaluatorConfig()

    if kind == "pytest":
        if not any(hidden_tests.is_test_file(n) for n in tests):
            raise UserError(f'{where("tests/")}: no hidden tests (kind = "pytest" needs tests/test_*.py)')
        try:
            all_tests = hidden_tests.expected_ids(tests)
        except ValueError as e:
            raise UserError(f"{where('tests/')}{e}") from None
        if not any(not hidden_tests.is_canary(t) for t in all_tests):
            raise UserError(
                f"{where('tests/')}: no test functions (add def test_...() functions to tests/test_*.py)"
            )
        if not any(hidden_tests.is_canary(t) for t in all_tests):
            raise UserError(
                f"{where('tests/')}: no canary test (add a test_canary_* function that calls the candidate "
                "with an impossible expectation, so it must fail for an honest solution)"
            )
        protected = table.get("protected", [])
        if not isinstance(protected, list) or not all(
            isinstance(p, str) and is_relative(p) for p in protected
        ):
            raise UserError(
                f'{loc}: [evaluator] protected must be a list of relative globs, e.g. ["tests/**"] '
                f"(got {show(protected)})"
            )
        import_mode = table.get("import_mode", "proxy")
        if import_mode not in hidden_tests.IMPORT_MODES:
            raise UserError(
                f'{loc}: [evaluator] import_mode must be "proxy" (the candidate runs in its own process) '
                f'or "direct" (imported into the test process) (got {show(import_mode)})'
            )
        return EvaluatorConfig(kind=kind, protected=tuple(protected), import_mode=import_mode)

    if kind == "script":
        if "test.sh" not in tests:
            raise UserError(
                f'{where("tests/test.sh")}: missing (kind = "script" runs tests/test.sh, which writes '
                "a reward 0..1 to the file named by $REWARD_FILE)"
            )
        return EvaluatorConfig(kind=kind)

    if kind != "answer":  # a kind with no settings of its own
        return EvaluatorConfig(kind=kind)
    answer_file = table.get("answer_file", d.answer_file)
    if not isinstance(answer_file, str) or not is_relative(answer_file):
        raise UserError(
            f'{loc}: [evaluator] answer_file must be a path relative to /workspace, e.g. "answer.txt" '
            f"(got {show(answer_file)})"
        )
    mode = table.get("mode", d.mode)
    if mode not in ANSWER_MODES:
        raise UserError(
            f"{loc}: [evaluator] mode must be one of {', '.join(ANSWER_MODES)} (got {show(mode)})"
        )
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
        kind=kind, answer_file=answer_file, mode=mode, expected=expected, tolerance=tolerance
    )
