"""Hostile inputs to every reader: generated mutations of real files (an ATIF file `harness export` wrote,
a replay script, a run folder's manifest and attempts, real task folders) are either read or refused
with the project's one-line UserError -- never any other exception, never a traceback.

Mutations (seeded, bounded counts): truncation at random points, random byte flips, each field's value
swapped for another type, deep nesting, huge strings, other encodings. A seeded generator rather than
hypothesis: no new dependency, and a failure names its seed and mutation to replay it.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from agent.models.replay import load_scripts
from evaluators.grading import verdict
from results.errors import UserError
from results.export.atif import export_atif
from results.jsonl import MAX_JSON_DEPTH, json_depth
from results.manifest import MANIFEST, Manifest, TaskEntry
from results.run_writer import RunStore
from results.store import ATTEMPTS, load_attempts, open_run
from results.synthetic import make_attempt
from tasks.task_folder import load_task
from tests.conftest import run as run_async
from tests.helpers import CORRECT, STUB, SUBMIT, WRITE_CORRECT, make_task

ROOT = Path(__file__).resolve().parent.parent
CASES = 120  # mutations per reader: each reader's test stays a few seconds
OTHER_TYPES: list[Any] = [None, True, 0, -1, 1.5, 10**30, "", "x" * 100, [], {}, [[1]], {"a": {}}]


# -- mutations ------------------------------------------------------------------------------------


def json_paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from json_paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:4]):  # the first few items stand for the rest
            yield from json_paths(v, (*path, i))


def replaced(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return copy


def mutations(raw: bytes, rng: random.Random, n: int = CASES) -> Iterator[tuple[str, bytes]]:
    """(what was done, the mutated bytes): type swaps of each field of a JSON document (or of each
    `key = value` of a TOML one), then random truncations, byte flips, deep nesting, huge strings and
    other encodings."""
    swaps: list[tuple[str, bytes]] = []
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if doc is not None:
        for path in json_paths(doc):
            for new in rng.sample(OTHER_TYPES, 3):
                swaps.append(
                    (f"{list(path)} = {str(new)[:20]}", json.dumps(replaced(doc, path, new)).encode())
                )
    else:  # TOML: each value swapped for other TOML types
        lines = raw.decode().splitlines(keepends=True)
        for i, line in enumerate(lines):
            m = re.match(r"(\s*[\w.-]+\s*=\s*)(.*)", line)
            if m:
                for new in rng.sample(
                    ['"x"', "0", "-1", "1.5", "true", "[1, [2]]", "{a = 1}", "nan", '""'], 3
                ):
                    swaps.append(
                        (
                            f"line {i + 1} = {new}",
                            "".join([*lines[:i], m.group(1) + new + "\n", *lines[i + 1 :]]).encode(),
                        )
                    )
    rng.shuffle(swaps)
    yield from swaps[: n // 2]
    deep = b"[" * 100_000 + b"]" * 100_000
    for k in range(n - min(len(swaps), n // 2)):
        kind = k % 6
        if kind == 0:
            cut = rng.randrange(len(raw))
            yield f"cut at {cut}", raw[:cut]
        elif kind == 1:
            b = bytearray(raw)
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            yield "byte flips", bytes(b)
        elif kind == 2:  # deep nesting where a value starts
            spots = [m.end() for m in re.finditer(rb"(: |= |\[)", raw)] or [0]
            at = rng.choice(spots)
            yield f"deep nesting at {at}", raw[:at] + deep + raw[at:]
        elif kind == 3:
            spots = [m.end() for m in re.finditer(rb'"', raw)] or [0]
            at = rng.choice(spots)
            yield f"huge string at {at}", raw[:at] + b"x" * (8 << 20) + raw[at:]
        elif kind == 4:
            enc = rng.choice(["utf-16", "utf-32", "latin-1"])
            yield f"encoded {enc}", raw.decode("utf-8").replace("e", "\u00e9").encode(enc)
        else:
            yield "empty", b""


def check_reader(
    path: Path, original: bytes, read: Callable[[], Any], seed: int, names: str, n: int = CASES
) -> int:
    """Write each mutation of `original` to `path` and read it: accepted, or a one-line UserError that
    names `names` (the file or folder). Returns how many were refused."""
    rng = random.Random(seed)
    refused = 0
    for what, data in mutations(original, rng, n):
        path.write_bytes(data)
        try:
            read()
        except UserError as e:
            refused += 1
            message = str(e)
            assert "\n" not in message and names in message, f"seed {seed}, {what}: {message[:300]}"
        except Exception as e:  # anything else is the bug this test is for
            pytest.fail(f"seed {seed}, {what}: {type(e).__name__}: {str(e)[:300]}")
    path.write_bytes(original)
    return refused


# -- real files -----------------------------------------------------------------------------------


def real_run(root: Path) -> Path:
    """A run folder through the real store: two attempts with kept changes."""
    run = root / "run"
    manifest = Manifest(
        model="test/model",
        config={"suite": "builtin", "tasks": ["t1", "t2"], "samples": 1},
        task_suite=[TaskEntry(id="t1", hash="a"), TaskEntry(id="t2", hash="b")],
    )
    with RunStore.create(run, manifest) as store:
        for task, solved in (("t1", True), ("t2", False)):
            a = make_attempt(store.run_id, task, solved=solved, n_steps=2)
            a.changes = store.keep_changes({"solution.py": STUB}, {"solution.py": CORRECT})
            store.append(a)
    return run


def random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(5 if depth < 6 else 2)
    if kind == 0:
        return "".join(rng.choice('[]{}"\\ ax,:é\n') for _ in range(rng.randint(0, 8)))
    if kind == 1:
        return rng.choice([0, 1.5, None, True])
    if kind == 2:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {str(random_json(rng, 6)): random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def test_json_depth_is_the_graders_depth():
    """results.jsonl and the exported grading module (stdlib only, so it keeps its own) agree on JSON."""
    rng = random.Random(7)
    for _ in range(2000):
        text = json.dumps(random_json(rng), ensure_ascii=rng.random() < 0.5)
        assert json_depth(text) == verdict.json_depth(text), text
    assert json_depth('{"a": "[[[["}') == 1 and json_depth("[" * (MAX_JSON_DEPTH + 1)) == MAX_JSON_DEPTH + 1
    assert json_depth("]]") == 0


def test_atif_replay_reader(tmp_path):
    run = real_run(tmp_path)
    atif, n = export_atif(run, tmp_path / "run.atif.json")
    assert n == 2 and len(load_scripts(str(atif))) == 2  # the real file reads
    original = atif.read_bytes()
    refused = check_reader(atif, original, lambda: load_scripts(str(atif)), 1, str(atif))
    assert refused > 10  # the mutations did reach the checks


def test_the_known_atif_failures_are_one_line(tmp_path):
    """A deeply nested array (was RecursionError) and wrong types (was AttributeError)."""
    run = real_run(tmp_path)
    atif, _ = export_atif(run, tmp_path / "run.atif.json")
    doc = json.loads(atif.read_text())
    agent = next(i for i, s in enumerate(doc[0]["steps"]) if s["source"] == "agent")
    deep = replaced(doc, (0, "steps", agent, "message"), json.loads("[" * 900 + "]" * 900))
    atif.write_text(json.dumps(deep))
    with pytest.raises(UserError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        load_scripts(str(atif))
    for path, value, field in (
        ((0, "steps", agent, "metrics"), [1], "metrics must be an object"),
        ((0, "extra"), "t1", "extra must be an object"),
        ((0, "steps", agent, "tool_calls"), 5, "tool_calls must be a list"),
        ((0, "steps", agent, "metrics", "prompt_tokens"), "many", "metrics.prompt_tokens must be a count"),
        ((1,), [], "trajectory 1: must be an object"),
    ):
        atif.write_text(json.dumps(replaced(doc, path, value)))
        with pytest.raises(UserError, match=re.escape(field)):
            load_scripts(str(atif))


def test_replay_script_reader(tmp_path):
    script = tmp_path / "s.json"
    calls = [
        {"name": "bash", "arguments": {"command": "ls"}},
        {"function": {"name": "submit", "arguments": "{}"}},
    ]
    original = json.dumps(
        {"add": [WRITE_CORRECT, {"content": "x", "tool_calls": calls}, SUBMIT], "*": ["no"]}
    )
    script.write_text(original)
    assert set(load_scripts(str(script))) == {"add", "*"}
    check_reader(script, original.encode(), lambda: load_scripts(str(script)), 2, str(script))


@pytest.mark.slow
def test_attempts_jsonl_as_a_replay_file_and_as_a_run(tmp_path):
    run = real_run(tmp_path)
    path = run / ATTEMPTS
    original = path.read_bytes()
    check_reader(path, original, lambda: load_scripts(str(path)), 3, str(path))

    def read_run():
        list(open_run(run).iter_attempts())
        load_attempts(run)

    check_reader(path, original, read_run, 4, str(path))


def run_consumers(run: Path, out: Path) -> Callable[[], None]:
    """What reads a run folder after its reader: the tables (report, compare) and every export format."""
    from results.export.formats import FORMATS
    from results.export.run import export_run

    out.mkdir(exist_ok=True)

    def consumers():
        open_run(run).read_attempts()
        for fmt in FORMATS:
            export_run(run, fmt, out / f"{fmt}.jsonl")
        export_atif(run, out / "x.atif.json")

    return consumers


def swapped_records(raw: bytes, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    """Every field of the record (the first items of each list) given one value of another type."""
    doc = json.loads(raw)
    for path in json_paths(doc):
        if path and path[0] not in ("messages", "steps", "tests", "durations", "flags", "changes", "files"):
            continue  # the record's scalar fields: the schema's own check covers them
        new = rng.choice(OTHER_TYPES)
        yield f"{list(path)} = {str(new)[:20]}", json.dumps(replaced(doc, path, new)).encode() + b"\n"


@pytest.mark.parametrize(
    "path, value",
    [
        (("messages", 2, "tool_calls"), 1.5),
        (("messages", 2, "tool_calls", 0), [{"x": 1}]),
        (("steps", 0, "tool_calls", 0, "function"), True),
        (("tests",), "x"),
        (("tests", 0), None),
        (("durations", "model"), {"a": 1}),
        (("flags",), 5),
    ],
)
def test_run_consumers_refuse_or_skip_wrong_types(tmp_path, path, value):
    """Once AttributeError/TypeError in the report's tables and the exports."""
    run = real_run(tmp_path)
    first = (run / ATTEMPTS).read_bytes().splitlines()[0]
    (run / ATTEMPTS).write_bytes(json.dumps(replaced(json.loads(first), path, value)).encode() + b"\n")
    try:
        run_consumers(run, tmp_path / "out")()
    except UserError as e:
        assert "\n" not in str(e) and str(run) in str(e)


def test_run_consumers_with_every_field_of_a_record_swapped(tmp_path):
    run = real_run(tmp_path)
    path = run / ATTEMPTS
    original = path.read_bytes()
    first = original.splitlines()[0]
    read = run_consumers(run, tmp_path / "out")
    for what, data in swapped_records(first, random.Random(9)):
        path.write_bytes(data)
        try:
            read()
        except UserError as e:
            assert "\n" not in str(e) and str(run) in str(e), f"{what}: {e}"
        except Exception as e:  # anything else is the bug this test is for
            pytest.fail(f"{what}: {type(e).__name__}: {str(e)[:300]}")
    path.write_bytes(original)


def test_manifest_reader(tmp_path):
    run = real_run(tmp_path)
    path = run / MANIFEST
    check_reader(path, path.read_bytes(), lambda: open_run(run).run_id, 5, str(path))


TASK_FOLDERS = [
    ROOT / "tasks/builtin/coding/fizzbuzz",
    ROOT / "tasks/builtin/data/csv-clean",
    ROOT / "tests/fixtures/terminal-bench/regex-log",
    ROOT / "tests/fixtures/terminal-bench/cancel-async-tasks",
]


TASK_FILES = ["task.toml", "instruction.md", "environment/Dockerfile", "tests/test.sh"]


@pytest.mark.parametrize(
    "folder, name",
    [(f, n) for f in TASK_FOLDERS for n in TASK_FILES if (f / n).is_file()],
    ids=lambda x: x.name if isinstance(x, Path) else x,
)
def test_task_folder_reader(tmp_path, folder, name):
    task = tmp_path / folder.name
    shutil.copytree(folder, task)
    load_task(task)  # the real folder loads
    path = task / name
    check_reader(path, path.read_bytes(), lambda: load_task(task), 6, folder.name)


@pytest.mark.parametrize("family", ["fix-operator", "config-value"])
def test_task_family_reader(tmp_path, family):
    from tasks.family import load_family

    folder = tmp_path / family
    shutil.copytree(ROOT / "tasks/builtin/families" / family, folder)
    load_family(folder)  # the real family loads
    path = folder / "family.toml"
    check_reader(path, path.read_bytes(), lambda: load_family(folder), 10, family, n=60)


@pytest.mark.slow
def test_a_real_eval_run_folder_under_every_reader(image, tmp_path):
    """The same, on what a real eval wrote (Docker): its manifest, its attempts, their ATIF export."""
    from evaluators.run.config import EvalConfig
    from evaluators.run.runner import run_eval

    script = tmp_path / "s.json"
    script.write_text(json.dumps({"*": [WRITE_CORRECT, SUBMIT]}))
    run = tmp_path / "run"
    run_async(run_eval(EvalConfig(model=f"replay:{script}", out=run), [make_task()], progress=False))
    assert next(open_run(run, verify=True).iter_attempts()).solved
    atif, _ = export_atif(run, tmp_path / "run.atif.json")
    manifest, attempts = run / MANIFEST, run / ATTEMPTS
    readers = [
        (manifest, lambda: list(open_run(run).iter_attempts())),
        (attempts, run_consumers(run, tmp_path / "out")),
        (attempts, lambda: load_scripts(str(attempts))),
        (atif, lambda: load_scripts(str(atif))),
    ]
    for seed, (path, read) in enumerate(readers):
        check_reader(path, path.read_bytes(), read, 20 + seed, str(path.parent), n=40)
