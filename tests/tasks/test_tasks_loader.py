"""tasks/loader.py: task folders, families and suites; every user mistake is a one-line UserError."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from evaluators.grading.hidden_tests import expected_ids, is_canary
from evaluators.grading.pytest_kind import PytestSettings
from results.errors import UserError
from tasks import loader
from tasks.family import load_family
from tasks.loader import load_suite
from tasks.model import EvaluatorConfig
from tasks.task_folder import load_task
from tests.helpers import make_task, write_files

TOML = """\
version = "1.0"

[metadata]
domain = "data"
difficulty = 2
tags = ["csv"]

[agent]
timeout_sec = 300
max_steps = 20
command_timeout_sec = 30

[verifier]
timeout_sec = 60

[environment]
cpus = 1
memory_mb = 1024
storage_mb = 256
allow_internet = false

[evaluator]
kind = "pytest"
protected = ["tests/**"]
"""

TESTS = "def test_real():\n    assert True\n\n\ndef test_canary_impossible():\n    assert 1 == 2\n"


def task_folder(root: Path, toml: str = TOML, **overrides: str | None) -> Path:
    """A valid task folder; keyword overrides replace (or with None remove) files, '/' written as '__'."""
    files = {
        "task.toml": toml,
        "instruction.md": "Write the answer to /workspace/answer.txt.\n",
        "environment/Dockerfile": "FROM harness-base\n",
        "environment/data.csv": "a,b\n1,2\n",
        "environment/tests/test_public.py": "def test_public():\n    pass\n",
        "tests/test_hidden.py": TESTS,
        "solution/solve.sh": "#!/bin/bash\necho 3 > answer.txt\n",
    }
    for key, value in overrides.items():
        files[key.replace("__", "/")] = value
    write_files(root, files)
    return root


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(UserError) as e:
        fn(*args, **kwargs)
    return str(e.value)


# ------------------------------------------------------------------------------------------- one task


def test_load_task_reads_every_part(tmp_path):
    task = load_task(task_folder(tmp_path / "csv-sum"))
    assert task.id == "csv-sum"  # folder name when [metadata] id is absent
    assert (task.version, task.domain, task.difficulty, task.tags) == ("1.0", "data", 2, ("csv",))
    assert (task.agent.timeout_sec, task.agent.max_steps, task.agent.command_timeout_sec) == (300, 20, 30)
    assert task.verifier_timeout_sec == 60
    assert (task.environment.memory_mb, task.environment.storage_mb, task.environment.allow_internet) == (
        1024,
        256,
        False,
    )
    assert task.evaluator.kind == "pytest" and task.evaluator.settings.protected == ("tests/**",)
    assert task.dockerfile == "FROM harness-base\n"
    # With a Dockerfile, environment/ is its build context only: nothing of it appears in the workspace by
    # itself
    assert task.workspace_files == {}
    assert task.build_context == {
        "data.csv": b"a,b\n1,2\n",
        "tests/test_public.py": b"def test_public():\n    pass\n",
    }
    assert set(task.test_files) == {"test_hidden.py"}
    assert set(task.solution_files) == {"solve.sh"}
    assert task.instruction.startswith("Write the answer")
    assert task.path == tmp_path / "csv-sum" and task.family == "" and task.split == ""


def test_metadata_id_overrides_folder_name(tmp_path):
    toml = TOML.replace('domain = "data"', 'id = "my-task"\ndomain = "data"')
    assert load_task(task_folder(tmp_path / "folder", toml)).id == "my-task"


def test_load_task_accepts_the_toml_path(tmp_path):
    assert load_task(task_folder(tmp_path / "t") / "task.toml").id == "t"


def test_bad_difficulty_message_names_file_field_and_value(tmp_path, monkeypatch):
    task_folder(tmp_path / "x", TOML.replace("difficulty = 2", 'difficulty = "9"'))
    monkeypatch.chdir(tmp_path)
    assert error_of(load_task, "x") == 'x/task.toml: [metadata] difficulty must be an integer 1-5 (got "9")'


@pytest.mark.parametrize("value", ["0", "6", "true", "2.5"])
def test_difficulty_out_of_range_or_wrong_type(tmp_path, value):
    task_folder(tmp_path / "x", TOML.replace("difficulty = 2", f"difficulty = {value}"))
    assert "[metadata] difficulty must be an integer 1-5" in error_of(load_task, tmp_path / "x")


@pytest.mark.parametrize("word,level", [("easy", 1), ("medium", 3), ("hard", 5), ("Hard", 5)])
def test_harbor_difficulty_words(tmp_path, word, level):
    task_folder(tmp_path / "x", TOML.replace("difficulty = 2", f'difficulty = "{word}"'))
    assert load_task(tmp_path / "x").difficulty == level


@pytest.mark.parametrize(
    "table,typo",
    [
        ("metadata", "dificulty = 3"),
        ("agent", "max_step = 3"),
        ("environment", "memroy_mb = 5"),
        ("evaluator", "protect = []"),
        ("verifier", "timeout = 3"),
    ],
)
def test_unknown_keys_in_our_tables_are_errors(tmp_path, table, typo):
    task_folder(tmp_path / "x", TOML.replace(f"[{table}]\n", f"[{table}]\n{typo}\n"))
    msg = error_of(load_task, tmp_path / "x")
    assert f"[{table}] unknown key" in msg
    assert "task.toml" in msg


def test_harbor_keys_are_accepted_and_unknown_top_level_ignored(tmp_path):
    toml = TOML.replace("[metadata]\n", '[metadata]\nauthor_name = "A"\ncategory = "x"\n')
    toml = toml.replace("[environment]\n", "[environment]\nbuild_timeout_sec = 600.0\n")
    toml += '\n[task]\nname = "org/x"\n\n[solution]\nenv = {}\n'
    assert load_task(task_folder(tmp_path / "x", toml)).domain == "data"


def test_harbor_memory_string(tmp_path):
    toml = TOML.replace("memory_mb = 1024", 'memory = "2G"').replace("storage_mb = 256", 'storage = "512M"')
    env = load_task(task_folder(tmp_path / "x", toml)).environment
    assert (env.memory_mb, env.storage_mb) == (2048, 512)


def test_unknown_domain(tmp_path):
    task_folder(tmp_path / "x", TOML.replace('domain = "data"', 'domain = "math"'))
    assert "[metadata] domain must be one of coding, data, ops, documents, science" in error_of(
        load_task, tmp_path / "x"
    )


def test_invalid_toml_names_the_file(tmp_path):
    task_folder(tmp_path / "x", "version = \n")
    msg = error_of(load_task, tmp_path / "x")
    assert "task.toml: invalid TOML" in msg and "\n" not in msg


@pytest.mark.parametrize(
    "missing,expected",
    [
        ("instruction.md", "instruction.md: missing"),
        ("solution__solve.sh", "solution/solve.sh: missing"),
        ("tests__test_hidden.py", "no hidden tests"),
    ],
)
def test_missing_required_files(tmp_path, missing, expected):
    task_folder(tmp_path / "x", **{missing: None})
    assert expected in error_of(load_task, tmp_path / "x")


def test_pytest_task_needs_a_canary(tmp_path):
    task_folder(tmp_path / "x", **{"tests__test_hidden.py": "def test_only():\n    pass\n"})
    assert "no canary test" in error_of(load_task, tmp_path / "x")


def test_syntax_error_in_hidden_tests_names_file_and_line(tmp_path):
    task_folder(tmp_path / "x", **{"tests__test_hidden.py": "def test_a(:\n"})
    msg = error_of(load_task, tmp_path / "x")
    assert "tests/test_hidden.py line 1" in msg


def test_evaluator_kinds_are_the_registered_ones(tmp_path, monkeypatch):
    import dataclasses
    import sys
    import types

    from evaluators.grading.kind import Kind
    from tasks import kinds
    from tasks.model import EvaluatorConfig

    task_folder(tmp_path / "x", TOML.replace('kind = "pytest"\nprotected = ["tests/**"]', 'kind = "magic"'))
    monkeypatch.chdir(tmp_path)
    assert error_of(load_task, "x") == (
        f"x/task.toml: [evaluator] kind must be one of {', '.join(kinds.task_toml_kinds())} or a plugin's "
        'module:KIND (got "magic")'
    )
    assert "harbor" in kinds.BUILTIN and "harbor" not in kinds.task_toml_kinds()  # no task.toml names it

    @dataclasses.dataclass(frozen=True)
    class MagicSettings:
        threshold: float

    class Magic(Kind):  # a new kind with settings of its own: its module...
        name = "magic"
        keys = frozenset({"kind", "threshold"})

        def settings(self, table, tests, loc, where):
            if not isinstance(table.get("threshold"), float):
                raise UserError(f"{loc}: [evaluator] threshold must be a number")
            return EvaluatorConfig(kind=self.name, settings=MagicSettings(table["threshold"]))

        async def grade(self, task, sub):
            raise NotImplementedError  # only its settings are read here

    task_folder(tmp_path / "y")
    before = load_task(tmp_path / "y").content_hash()
    monkeypatch.setitem(sys.modules, "magic_kind", types.SimpleNamespace(KIND=Magic()))
    monkeypatch.setattr(kinds, "BUILTIN", dict(kinds.BUILTIN))
    monkeypatch.setattr(kinds, "IN_TASK_TOML", list(kinds.IN_TASK_TOML))
    kinds.register("magic", "magic_kind:KIND")  # ...and this one line
    assert "threshold must be a number" in error_of(load_task, "x")
    (tmp_path / "x" / "task.toml").write_text(
        TOML.replace('kind = "pytest"\nprotected = ["tests/**"]', 'kind = "magic"\nthreshold = 0.5')
    )
    task = load_task("x")
    assert (task.evaluator.kind, task.evaluator.settings) == ("magic", MagicSettings(0.5))
    (tmp_path / "x" / "task.toml").write_text(
        TOML.replace('kind = "pytest"\nprotected = ["tests/**"]', 'kind = "magic"\nthreshold = 0.6')
    )
    assert load_task("x").grading_hash() != task.grading_hash()  # its settings are part of the task's hashes
    assert load_task(tmp_path / "y").content_hash() == before  # and no other task's hash moved


def test_script_task_needs_test_sh(tmp_path):
    toml = TOML.replace('kind = "pytest"\nprotected = ["tests/**"]', 'kind = "script"')
    task_folder(tmp_path / "x", toml)
    assert "tests/test.sh: missing" in error_of(load_task, tmp_path / "x")
    (tmp_path / "x" / "tests" / "test.sh").write_text("echo 1 > $REWARD_FILE\n")
    assert load_task(tmp_path / "x").evaluator.kind == "script"


def test_harbor_task_without_evaluator_table_uses_test_sh(tmp_path):
    toml = TOML.split("[evaluator]")[0]
    task_folder(tmp_path / "x", toml, **{"tests__test.sh": "echo 1 > /logs/verifier/reward.txt\n"})
    task = load_task(tmp_path / "x")
    assert task.evaluator.kind == "harbor" and task.harbor.verifier_mode == "shared"


ANSWER = TOML.replace(
    'kind = "pytest"\nprotected = ["tests/**"]',
    'kind = "answer"\nanswer_file = "out/answer.txt"\nmode = "numeric"\nexpected = 3\ntolerance = 0.5',
)


def test_answer_task(tmp_path):
    ev = load_task(task_folder(tmp_path / "x", ANSWER, **{"tests__test_hidden.py": None})).evaluator
    s = ev.settings
    assert (ev.kind, s.answer_file, s.mode, s.expected, s.tolerance) == (
        "answer",
        "out/answer.txt",
        "numeric",
        3,
        0.5,
    )


def test_answer_json_expected_can_be_a_table(tmp_path):
    toml = ANSWER.replace(
        'mode = "numeric"\nexpected = 3', 'mode = "json"\nexpected = { a = [1, 2], b = "x" }'
    )
    assert load_task(task_folder(tmp_path / "x", toml)).evaluator.settings.expected == {"a": [1, 2], "b": "x"}


@pytest.mark.parametrize(
    "change,expected",
    [
        (("expected = 3\n", ""), "[evaluator] expected is missing"),
        (("expected = 3", 'expected = "3"'), "expected must be a number"),
        (('mode = "numeric"', 'mode = "fuzzy"'), "[evaluator] mode must be one of"),
        (('mode = "numeric"\nexpected = 3', 'mode = "regex"\nexpected = "(("'), "not a valid regex"),
        (
            ('answer_file = "out/answer.txt"', 'answer_file = "../answer.txt"'),
            "answer_file must be a path relative",
        ),
        (
            ("tolerance = 0.5", "tolerance = 0.5\nprotected = []"),
            '[evaluator] protected only applies to kind = "pytest"',
        ),
    ],
)
def test_answer_mistakes(tmp_path, change, expected):
    task_folder(tmp_path / "x", ANSWER.replace(*change))
    assert expected in error_of(load_task, tmp_path / "x")


def test_docker_compose_is_refused(tmp_path):
    task_folder(tmp_path / "x", **{"environment__docker-compose.yaml": "services: {}\n"})
    assert "docker-compose tasks are not supported" in error_of(load_task, tmp_path / "x")


def test_symlinks_are_refused(tmp_path):
    root = task_folder(tmp_path / "x")
    (root / "environment" / "link").symlink_to(root / "environment" / "data.csv")
    assert "symlinks are not supported" in error_of(load_task, root)


def test_caches_are_skipped(tmp_path):
    root = task_folder(tmp_path / "x")
    (root / "tests" / "__pycache__").mkdir()
    (root / "tests" / "__pycache__" / "test_hidden.cpython-311.pyc").write_bytes(b"\0")
    assert set(load_task(root).test_files) == {"test_hidden.py"}


def test_hidden_test_ids_and_canaries():
    ids = expected_ids(
        {
            "test_a.py": b"def test_x(): pass\nclass TestK:\n    def test_canary_y(self): pass\n"
            b"def helper(): pass\n",
            "helper.py": b"def test_no(): pass\n",
        }
    )
    assert ids == {"tests.test_a.test_x", "tests.test_a.TestK.test_canary_y"}
    assert is_canary("tests.test_a.TestK.test_canary_y") and is_canary("tests.test_a.test_canary_z[3]")
    assert is_canary("tests.test_a.test_canary_z[1.5]") and not is_canary("tests.test_a.test_x")
    with pytest.raises(ValueError, match=r"^test_b.py line 1: SyntaxError: "):
        expected_ids({"test_b.py": b"def test_x(:\n"})


# ------------------------------------------------------------------------------------------- families

FAMILY = """\
[family]
id = "count"
template = "template"

[[instances]]
id = "count-01"
split = "train"
params = { file = "a.txt", n = 3 }

[[instances]]
id = "count-02"
split = "heldout"
params = { file = "b.txt", n = 5 }
"""


def make_family(root: Path, family: str = FAMILY) -> Path:
    task_folder(
        root / "template",
        TOML.replace("difficulty = 2", "difficulty = 1"),
        **{
            "instruction.md": "Count the lines of {{file}}.\n",
            "environment/{{file}}": "x\n",
            "tests__test_hidden.py": "N = {{n}}\n" + TESTS,
        },
    )
    (root / "family.toml").write_text(family)
    return root


def test_family_expands_params_in_text_and_file_names(tmp_path):
    a, b = load_family(make_family(tmp_path / "fam"))
    assert (a.id, a.family, a.split, a.path) == ("count-01", "count", "train", None)
    assert (b.id, b.split) == ("count-02", "heldout")
    assert a.instruction == "Count the lines of a.txt.\n" and b.instruction == "Count the lines of b.txt.\n"
    assert set(a.build_context) == {"a.txt", "tests/test_public.py", "data.csv"}
    assert a.test_files["test_hidden.py"].startswith(b"N = 3\n") and b.test_files[
        "test_hidden.py"
    ].startswith(b"N = 5\n")
    assert a.difficulty == 1 and a.content_hash() != b.content_hash()


def test_family_missing_param_names_the_placeholder(tmp_path):
    fam = make_family(
        tmp_path / "fam", FAMILY.replace('params = { file = "b.txt", n = 5 }', 'params = { file = "b.txt" }')
    )
    msg = error_of(load_family, fam)
    assert "{{n}}" in msg and "count-02" in msg and "tests/test_hidden.py" in msg


def test_family_unused_param_is_an_error(tmp_path):
    fam = make_family(tmp_path / "fam", FAMILY.replace("n = 5 }", "n = 5, nn = 1 }"))
    assert "params.nn is not used" in error_of(load_family, fam)


@pytest.mark.parametrize(
    "change,expected",
    [
        (('split = "heldout"', 'split = "test"'), "split must be one of train, heldout"),
        (('id = "count-02"', 'id = "count-01"'), "duplicate instance id"),
        (('template = "template"', 'template = "nope"'), "is not a task folder"),
        (('template = "template"', 'template = "template"\ntemplte = "x"'), "[family] unknown key"),
        (('split = "train"', 'split = "train"\nparam = {}'), "unknown key"),
    ],
)
def test_family_mistakes(tmp_path, change, expected):
    fam = make_family(tmp_path / "fam", FAMILY.replace(*change, 1))
    assert expected in error_of(load_family, fam)


def test_load_task_on_a_family_says_so(tmp_path):
    assert "is a task family" in error_of(load_task, make_family(tmp_path / "fam"))


# ------------------------------------------------------------------------------------------- suites


def make_suite(root: Path) -> Path:
    task_folder(root / "data" / "csv-sum")
    task_folder(
        root / "ops" / "fix-config",
        TOML.replace('domain = "data"', 'domain = "ops"')
        .replace("difficulty = 2", "difficulty = 4")
        .replace('tags = ["csv"]', 'tags = ["config", "ini"]'),
    )
    make_family(root / "families" / "count")
    return root


def test_suite_is_found_recursively_and_filtered(tmp_path):
    suite = make_suite(tmp_path / "suite")
    ids = lambda **kw: [t.id for t in load_suite(suite, **kw)]  # noqa: E731
    assert sorted(ids()) == ["count-01", "count-02", "csv-sum", "fix-config"]
    assert ids(domain="ops") == ["fix-config"]
    assert sorted(ids(difficulty=1)) == ["count-01", "count-02"]
    assert sorted(ids(difficulty="2-4")) == ["csv-sum", "fix-config"]
    assert sorted(ids(difficulty=[1, 4])) == ["count-01", "count-02", "fix-config"]
    assert ids(split="heldout") == ["count-02"]
    assert ids(tags=["config", "ini"]) == ["fix-config"] and ids(tags=["config", "csv"]) == []
    assert ids(glob="count-*") == ["count-01", "count-02"]
    assert ids(domain="science") == []


def test_suite_spec_can_be_one_task_or_one_family(tmp_path):
    suite = make_suite(tmp_path / "suite")
    assert [t.id for t in load_suite(suite / "data" / "csv-sum")] == ["csv-sum"]
    assert [t.id for t in load_suite(suite / "families" / "count")] == ["count-01", "count-02"]


def test_duplicate_ids_in_a_suite(tmp_path):
    suite = make_suite(tmp_path / "suite")
    task_folder(suite / "more" / "csv-sum")
    msg = error_of(load_suite, suite)
    assert 'duplicate task id "csv-sum"' in msg and "more/csv-sum" in msg


@pytest.mark.parametrize(
    "kwargs,expected",
    [
        ({"domain": "maths"}, "unknown domain"),
        ({"split": "test"}, "unknown split"),
        ({"difficulty": "7"}, "difficulty filter"),
        ({"difficulty": "1-"}, "difficulty filter"),
    ],
)
def test_bad_filters(tmp_path, kwargs, expected):
    assert expected in error_of(load_suite, make_suite(tmp_path / "suite"), **kwargs)


def test_bad_specs(tmp_path, monkeypatch):
    assert "no such suite" in error_of(load_suite, tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    assert "no tasks found" in error_of(load_suite, tmp_path / "empty")
    monkeypatch.setattr(loader, "HUMANEVAL_DIR", tmp_path / "not-imported")
    assert "harness tasks import humaneval" in error_of(load_suite, "humaneval")


def test_builtin_easy_is_difficulty_one_and_two():
    easy = load_suite("builtin:easy")
    assert easy and {t.difficulty for t in easy} == {1, 2}
    assert len(easy) == len([t for t in load_suite("builtin") if t.difficulty <= 2])
    assert [t.id for t in load_suite("builtin:easy", difficulty=1)] == [
        t.id for t in easy if t.difficulty == 1
    ]
    assert load_suite("builtin:easy", difficulty=4) == []


def test_the_task_hashes_see_each_kinds_settings_as_they_always_did(tmp_path):
    """Each kind keeps its own settings dataclass; the hashes that runs written before resume and compare
    against still read the one record of every built-in kind's fields they read then (tasks/model.py
    HASHED_AS_BEFORE), each field its kind's value or the old default."""
    pytest_task = load_task(task_folder(tmp_path / "p", TOML))
    answer = load_task(task_folder(tmp_path / "a", ANSWER, **{"tests__test_hidden.py": None}))
    script = load_task(
        task_folder(
            tmp_path / "s",
            TOML.replace('kind = "pytest"\nprotected = ["tests/**"]', 'kind = "script"'),
            **{"tests__test.sh": "echo 1 > $REWARD_FILE\n"},
        )
    )
    old = "EvaluatorConfig(kind={}, answer_file={}, mode={}, expected={}, tolerance={}, protected={}, "
    old += "import_mode={})"
    assert [repr(t.evaluator.hashed()) for t in (pytest_task, answer, script, make_task())] == [
        "("
        + old.format("'pytest'", "'answer.txt'", "'exact'", None, "1e-06", "('tests/**',)", "'proxy'")
        + ",)",
        "(" + old.format("'answer'", "'out/answer.txt'", "'numeric'", 3, 0.5, "()", "'proxy'") + ",)",
        "(" + old.format("'script'", "'answer.txt'", "'exact'", None, "1e-06", "()", "'proxy'") + ",)",
        "(" + old.format("'pytest'", "'answer.txt'", "'exact'", None, "1e-06", "()", "'proxy'") + ",)",
    ]
    # the default settings and no settings are one task to the hashes
    default = dataclasses.replace(make_task(), evaluator=EvaluatorConfig(settings=PytestSettings()))
    assert (default.content_hash(), default.grading_hash()) == (
        make_task().content_hash(),
        make_task().grading_hash(),
    )
