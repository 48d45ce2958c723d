"""Bad input: every user mistake gives one clear line naming the thing and the fix, exit code 2, no traceback.

The CLI runs as a subprocess (`python harness.py ...`), as a user would run it. A seeded fuzz test feeds
random task folders to the loader and asserts that only UserError comes out.
"""

import json
import os
import random
from pathlib import Path
from typing import Sequence

import pytest

from results.errors import UserError
from tasks.loader import load_suite
from tasks.task_folder import load_task
from tests.helpers import GOOD_TOML, assert_one_clear_line, harness, write_task


def replay_script(tmp_path: Path) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"*": ["```bash\necho ok > answer.txt\n```", "```bash\nsubmit\n```"]}))
    return f"replay:{path}"


def eval_suite(tmp_path: Path, model: str = "", extra: Sequence[str] = (), **kw):
    """`harness eval` of the suite at tmp_path/suite into tmp_path/run (the model: an answering replay)."""
    model = model or replay_script(tmp_path)
    return harness(
        "eval",
        "--model",
        model,
        *extra,
        "--tasks",
        str(tmp_path / "suite"),
        "--out",
        str(tmp_path / "run"),
        **kw,
    )


# ------------------------------------------------------------------------------- the CLI, one mistake each


def test_malformed_task_toml(tmp_path):
    write_task(tmp_path / "suite", toml='version = "1\n[metadata\n')
    proc = eval_suite(tmp_path)
    assert_one_clear_line(proc, "task.toml", "invalid TOML")


@pytest.mark.parametrize(
    "missing, named", [("instruction.md", "instruction.md"), ("solution/solve.sh", "solve.sh")]
)
def test_missing_file(tmp_path, missing, named):
    write_task(tmp_path / "suite", files={missing: None})
    proc = eval_suite(tmp_path)
    assert_one_clear_line(proc, named, "missing")


def test_unknown_evaluator_kind(tmp_path):
    write_task(tmp_path / "suite", toml=GOOD_TOML.replace('kind = "answer"', 'kind = "magic"'))
    proc = eval_suite(tmp_path)
    assert_one_clear_line(proc, "kind", "magic", "pytest")  # names the bad value and the valid ones


def test_suite_that_does_not_exist(tmp_path):
    proc = harness("eval", "--model", replay_script(tmp_path), "--tasks", str(tmp_path / "nowhere"))
    assert_one_clear_line(proc, "nowhere")


def test_duplicate_task_ids_are_refused(tmp_path):
    write_task(
        tmp_path / "suite", "a", toml=GOOD_TOML.replace("difficulty = 1", 'difficulty = 1\nid = "same"')
    )
    write_task(
        tmp_path / "suite", "b", toml=GOOD_TOML.replace("difficulty = 1", 'difficulty = 1\nid = "same"')
    )
    proc = eval_suite(tmp_path)
    assert_one_clear_line(proc, "same")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_unknown_model_string(tmp_path, image):
    write_task(tmp_path / "suite")
    proc = eval_suite(tmp_path, model="no-such-provider/model-x")
    assert_one_clear_line(proc, "no-such-provider/model-x")


@pytest.mark.slow
def test_missing_api_key_names_the_variable_before_creating_a_run_folder(tmp_path, image):
    write_task(tmp_path / "suite")
    proc = eval_suite(tmp_path, model="openai/gpt-4o-mini", env={"OPENAI_API_KEY": None})
    assert_one_clear_line(proc, "OPENAI_API_KEY")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_invalid_adapter_path(tmp_path, image):
    write_task(tmp_path / "suite")
    proc = eval_suite(tmp_path, model="local:smollm2-135m", extra=["--adapter", str(tmp_path / "no-adapter")])
    assert_one_clear_line(proc, "no-adapter", "adapter_config.json")


@pytest.mark.slow
def test_unknown_replay_file(tmp_path, image):
    write_task(tmp_path / "suite")
    proc = eval_suite(tmp_path, model=f"replay:{tmp_path / 'missing.json'}")
    assert_one_clear_line(proc, "missing.json")


@pytest.mark.slow
def test_unbuildable_dockerfile(tmp_path, image):
    write_task(tmp_path / "suite", files={"environment/Dockerfile": "FROM harness/base\nRUN exit 3\n"})
    proc = eval_suite(tmp_path)
    assert_one_clear_line(proc, "Dockerfile")


@pytest.mark.slow
def test_unbuildable_dockerfile_names_its_task(tmp_path, image):
    write_task(
        tmp_path / "suite", "broken-one", files={"environment/Dockerfile": "FROM harness/base\nRUN exit 3\n"}
    )
    proc = eval_suite(tmp_path)
    assert_one_clear_line(proc, "broken-one", "Dockerfile")


@pytest.mark.slow
def test_non_finite_limit_is_refused(tmp_path, image):
    write_task(tmp_path / "suite", toml=GOOD_TOML.replace("pids = 64", "pids = 64\ncpus = inf"))
    proc = eval_suite(tmp_path)
    assert_one_clear_line(proc, "cpus")


@pytest.mark.slow
def test_task_asking_for_more_cpus_than_the_host_has_still_runs(tmp_path, image):
    write_task(
        tmp_path / "suite",
        toml=GOOD_TOML.replace("pids = 64", f"pids = 64\ncpus = {4 * (os.cpu_count() or 1)}"),
    )
    proc = eval_suite(tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((tmp_path / "run" / "attempts.jsonl").read_text())
    assert record["status"] == "solved", record["error"]


@pytest.mark.slow
def test_missing_docker_engine(tmp_path):
    write_task(tmp_path / "suite")
    proc = eval_suite(tmp_path, env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert_one_clear_line(proc, "Docker")


@pytest.mark.slow
def test_selftest_unknown_case_name():
    proc = harness("selftest", "--only", "no_such_case")
    assert_one_clear_line(proc, "no_such_case", "--list")


# ------------------------------------------------------------------------------- fuzzing the loader

TOML_PIECES = [
    'version = "1"',
    "version = 1",
    'version = "1.0"\nversion = "2"',
    "[metadata]",
    "[metadata]\nid = 'ok-id'",
    "[metadata]\nid = '../escape'",
    "[metadata]\nid = 7",
    "[metadata]\ndifficulty = 9",
    "[metadata]\ndifficulty = 'hard'",
    "[metadata]\ndifficulty = true",
    "[metadata]\ndomain = 'cooking'",
    "[metadata]\ntags = 'x'",
    "[metadata]\ntags = [1, 2]",
    "[metadata]\ndificulty = 2",
    "metadata = 3",
    "[agent]\ntimeout_sec = -1",
    "[agent]\nmax_steps = 1.5",
    "[agent]\nmax_steps = 0",
    "[agent]\ncommand_timeout_sec = 'fast'",
    "[agent]\nuser = 'root'",
    "agent = []",
    "[verifier]\ntimeout_sec = 0",
    "[verifier]\ntimeout_sec = 1e400",
    "[environment]\nmemory = '2G'",
    "[environment]\nmemory = 'lots'",
    "[environment]\nmemory_mb = 512\nmemory = '1G'",
    "[environment]\nstorage = 12",
    "[environment]\ncpus = nan",
    "[environment]\ncpus = inf",
    "[environment]\nallow_internet = 'yes'",
    "[environment]\npids = -5",
    "[environment]\ngpus = 1",
    "[evaluator]\nkind = 'answer'\nexpected = 'x'",
    "[evaluator]\nkind = 'answer'",
    "[evaluator]\nkind = 'answer'\nexpected = 3\nmode = 'exact'",
    "[evaluator]\nkind = 'answer'\nexpected = 'x'\nmode = 'regex'",
    "[evaluator]\nkind = 'answer'\nexpected = '('\nmode = 'regex'",
    "[evaluator]\nkind = 'answer'\nexpected = 1.5\nmode = 'numeric'\ntolerance = -1",
    "[evaluator]\nkind = 'answer'\nexpected = true\nmode = 'numeric'",
    "[evaluator]\nkind = 'answer'\nexpected = 'x'\nanswer_file = '/etc/passwd'",
    "[evaluator]\nkind = 'answer'\nexpected = 'x'\nanswer_file = '../x'",
    "[evaluator]\nkind = 'pytest'",
    "[evaluator]\nkind = 'pytest'\nprotected = 'tests/**'",
    "[evaluator]\nkind = 'pytest'\nprotected = ['/abs']",
    "[evaluator]\nkind = 'pytest'\nexpected = 'x'",
    "[evaluator]\nkind = 'script'",
    "[evaluator]\nkind = 42",
    "[evaluator]\nmode = 'json'",
    "[[evaluator]]\nkind = 'x'",
    "[unknown]\nx = 1",
    'x = """unterminated',
    "[metadata\n",
    "= 3",
    "\x00\x01",
    "[metadata]\nid = ''",
]
TEST_FILES = [
    "def test_a():\n    assert True\n\ndef test_canary_x():\n    assert False\n",
    "def test_a():\n    assert True\n",  # no canary
    "def test_canary_only():\n    assert False\n",
    "def test_a(:\n",  # syntax error
    "class TestA:\n    def test_m(self):\n        pass\n    def test_canary_m(self):\n        pass\n",
    b"\xff\xfe not utf-8",
    "",
]


def random_task_folder(rng: random.Random, root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    if rng.random() < 0.95:
        toml = "\n\n".join(rng.sample(TOML_PIECES, rng.randint(0, 5)))
        if rng.random() < 0.1:
            toml = bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))).decode("latin-1")
        data = toml.encode("utf-8", "surrogateescape") if rng.random() < 0.9 else b"\xff\xfe" + toml.encode()
        (folder / "task.toml").write_bytes(data)
    if rng.random() < 0.85:
        (folder / "instruction.md").write_bytes(
            rng.choice([b"Do it.\n", b"", b"   \n", b"\xff\xfe", "é\n".encode()])
        )
    if rng.random() < 0.85:
        (folder / "solution").mkdir()
        (folder / "solution" / "solve.sh").write_text("true\n")
    if rng.random() < 0.7:
        (folder / "tests").mkdir()
        for i in range(rng.randint(0, 2)):
            body = rng.choice(TEST_FILES)
            target = folder / "tests" / rng.choice([f"test_{i}.py", f"helper_{i}.py", "test.sh"])
            target.write_bytes(body if isinstance(body, bytes) else body.encode())
    if rng.random() < 0.2:
        (folder / "environment").mkdir()
        (folder / "environment" / rng.choice(["Dockerfile", "docker-compose.yaml", "data.csv"])).write_text(
            "x\n"
        )
    if rng.random() < 0.05:
        (folder / "link").symlink_to("/etc/passwd")
    if rng.random() < 0.05:
        (folder / "family.toml").write_text(
            rng.choice(["[family]\nid='f'\n", "[[instances]]\nid='a'\n", "junk ["])
        )
    return folder


def test_fuzzed_task_folders_raise_only_user_errors(tmp_path):
    rng = random.Random(20261129)
    outcomes = {"loaded": 0, "refused": 0}
    for n in range(300):
        folder = random_task_folder(rng, tmp_path, f"case{n:03d}")
        for load in (load_task, load_suite):
            try:
                load(folder)
                outcomes["loaded"] += 1
            except UserError as e:
                assert str(e) and "\n" not in str(e).strip(), (folder, str(e))
                outcomes["refused"] += 1
            except Exception as e:
                files = {
                    str(p.relative_to(folder)): p.read_bytes()[:200] for p in folder.rglob("*") if p.is_file()
                }
                pytest.fail(f"{load.__name__}({folder.name}) raised {type(e).__name__}: {e}\nfiles: {files}")
    assert outcomes["loaded"] > 0 and outcomes["refused"] > 0  # the fuzzer reaches both sides
