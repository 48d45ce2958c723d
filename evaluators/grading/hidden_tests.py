"""Hidden pytest tests: their ids and which of them are canaries. The one owner of both, for the task loader
(a pytest task must define tests and a canary), the grader (the exact set of ids the report must hold) and the
export (evaluators/harbor_export.py). Cheap to import (ast only): the loader runs for every
`harness tasks list`. No function here is named test_*, so that a test module may import them without
pytest collecting them.

An id is dotted, as pytest's JUnit report writes it: tests.<file as module>.<function> or
tests.<file as module>.<TestClass>.<method>; the cases of a parametrised test share their function's id.
Records keep the ids with the task's own names; the grader renames every test function at random
(evaluators/grading/pytest_kind.py), and `task_id` turns its ids back into the task's.
"""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from evaluators.grading.verdict import CANARY_PREFIX, is_canary, task_id  # noqa: F401 -- owned there (stdlib, exported)

IMPORT_MODES = (
    "proxy",
    "direct",
)  # how the hidden tests reach the candidate's modules (evaluators/grading/grader)


def is_test_file(path: str) -> bool:
    """A file pytest collects by default: test_*.py, in any folder under tests/."""
    name = path.rsplit("/", 1)[-1]
    return name.startswith("test_") and name.endswith(".py")


def collected_functions(
    tree: ast.Module,
) -> Iterator[tuple[Optional[str], ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(class name or None, function node) for every test function pytest collects by default."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            yield None, node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    yield node.name, item


def make_id(path: str, cls: Optional[str], function: str) -> str:
    """The id of one test function of the file at `path` (relative to tests/)."""
    module = "tests." + path[:-3].replace("/", ".")
    return f"{module}.{cls}.{function}" if cls else f"{module}.{function}"


def parse(path: str, data: bytes) -> ast.Module:
    """One hidden test file's syntax tree; ValueError "<path> line N: SyntaxError: ..." when it does not
    parse."""
    try:
        return ast.parse(data.decode("utf-8"), filename=path)
    except (SyntaxError, UnicodeDecodeError) as e:
        line = getattr(e, "lineno", None)
        raise ValueError(
            f"{path}{f' line {line}' if line else ''}: {e.__class__.__name__}: {getattr(e, 'msg', e)}"
        ) from None


def expected_ids(test_files: dict[str, bytes]) -> set[str]:
    """The ids of every test the hidden files (path relative to tests/ -> content) define.
    Raises ValueError (see parse) for a test file that does not parse."""
    ids = set()
    for path, data in sorted(test_files.items()):
        if is_test_file(path):
            ids.update(make_id(path, cls, node.name) for cls, node in collected_functions(parse(path, data)))
    return ids
