"""docs/extending.md's example evaluator kind, run as the page prints it: its code block becomes
mykinds/regex_kind.py in a temporary folder on the Python path, and a task that names it by its dotted path
is validated (the oracle solved, the untouched workspace not) and graded on a wrong answer, in real
sandboxes."""

import re
import sys
from pathlib import Path

import pytest

from agent.sandbox.backends.docker.pool import DockerPool
from evaluators.run.attempt import run_attempt
from evaluators.validate import validate
from results.errors import UserError
from tasks import kinds
from tasks.task_folder import load_task
from tests.conftest import ROOT, run
from tests.helpers import write_files

DOC = ROOT / "docs" / "extending.md"
TOML = """version = "1"
[agent]
max_steps = 3
[environment]
memory_mb = 256
storage_mb = 32
[evaluator]
kind = "mykinds.regex_kind:KIND"
command = "python3 main.py"
pattern = "4[2]"
"""


def example_kind() -> str:
    found = re.search(r"```python\n(# mykinds/regex_kind\.py\n.*?)```", DOC.read_text(), re.S)
    assert found, "docs/extending.md lost its example kind (a python block starting # mykinds/regex_kind.py)"
    return found.group(1)


@pytest.fixture
def mykinds(tmp_path, monkeypatch):
    """The example kind importable as mykinds.regex_kind (only for this test)."""
    write_files(tmp_path / "lib", {"mykinds/__init__.py": "", "mykinds/regex_kind.py": example_kind()})
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    yield
    for name in ("mykinds.regex_kind", "mykinds"):
        sys.modules.pop(name, None)


def regex_task(root: Path, toml: str = TOML) -> Path:
    return write_files(
        root,
        {
            "task.toml": toml,
            "instruction.md": "Write main.py in /workspace: it prints the answer to everything, 42.\n",
            "solution/solve.sh": "printf 'print(6 * 7)\\n' > main.py\n",
        },
    )


def test_the_example_kind_is_short_and_reads_its_settings(tmp_path, mykinds):
    assert len(example_kind().splitlines()) <= 80
    task = load_task(regex_task(tmp_path / "answer-42"))
    kind = kinds.of(task)
    assert (kind.name, task.evaluator.kind) == ("regex", "mykinds.regex_kind:KIND")
    assert (task.evaluator.settings.command, task.evaluator.settings.pattern) == ("python3 main.py", "4[2]")
    assert kind.table(task) == {"kind": "regex", "command": "python3 main.py", "pattern": "4[2]"}
    assert kind.keys == {"kind", "command", "pattern"}
    for broken, message in [
        (TOML.replace('pattern = "4[2]"\n', ""), "[evaluator] pattern is missing"),
        (TOML.replace('"4[2]"', '"4[2"'), "[evaluator] pattern is not a valid regex"),
        (TOML.replace('"python3 main.py"', "3"), "[evaluator] command must be a string (got 3)"),
        (TOML + "expected = 1\n", "[evaluator] expected only applies to kind"),
        (TOML + "colour = 1\n", '[evaluator] unknown key "colour" (allowed: command, kind, pattern)'),
    ]:
        with pytest.raises(UserError, match=re.escape(message)):
            load_task(regex_task(tmp_path / "broken", broken))


def test_the_example_kind_grades_real_attempts(image, tmp_path, mykinds):
    task = load_task(regex_task(tmp_path / "answer-42"))
    [row] = run(validate([task], repeats=1, concurrency=2))
    assert (row.oracle, row.null, row.problems) == ("1/1", "not solved", []), row.verdicts
    assert row.verdicts == ["oracle pass 1", "null fail 0"]

    async def wrong(task, sb):
        await sb.put_files({"main.py": b"print(41)\n"})

    async def attempt():
        async with DockerPool(warm=0) as pool:
            return await run_attempt(task, wrong, pool, image, run_id="t", model_name="wrong")

    rec = run(attempt())
    assert (rec.status, rec.reason) == ("failed", "fail")
    assert "python3 main.py printed '41', not '4[2]'" in rec.detail
