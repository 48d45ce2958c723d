"""Integrity at the edges (issue 21): what capture accepts, a grading container recreates; what it cannot
(path or name length, depth, count, size) is listed as not captured and the attempt is graded without it;
numbers read from files are parsed with bounds and say what was wrong; a timeout at the pid limit says so.
Nothing here may end as status `error`: every case is an ordinary verdict with a reason.

The same attacks run through the whole loop as `harness selftest` cases (evaluators/selftest/edge_cases.py,
one test each in test_adversarial_cases.py)."""

import dataclasses
import hashlib

import pytest

from agent.sandbox import Changes, SandboxSpec
from agent.sandbox.backends.docker.pool import DockerPool
from agent.sandbox.changes import PATH_MAX, unwritable
from evaluators.grading.answer_kind import AnswerSettings
from evaluators.grading.grade import grade
from evaluators.grading.harbor import runtime, verifier
from evaluators.grading.verdict import Verdict, answer_matches, parse_number, parse_reward, parse_reward_json
from evaluators.selftest.edge_cases import FORK_WORKERS, NAME_LIMITS
from evaluators.selftest.fixtures import CORRECT, add_task, answer_task
from tasks.model import EvaluatorConfig
from tests.conftest import run

# ------------------------------------------------------------------------------------ the rule (no Docker)


def _path_of(total: int) -> str:
    """A relative path of 200-byte folders whose full path under /workspace is `total` bytes."""
    parts, used = [], len("/workspace/")
    while total - used > 255:
        parts.append("q" * 200)
        used += 201
    return "/".join(parts + ["f" * (total - used)])


@pytest.mark.parametrize(
    "path,why",
    [
        ("solution.py", None),
        ("a/" * 255 + "f", None),  # 256 levels: the deepest capture lists
        ("a/" * 256 + "f", "levels deep"),
        ("n" * 255, None),
        ("n" * 256, "a name of 256 bytes"),
        ("\u00e9" * 127, None),  # 254 bytes
        ("\u00e9" * 128, "a name of 256 bytes"),  # 128 characters, 256 bytes: limits count bytes
        ("bad-\udcff" * 50, None),  # undecodable bytes, as capture sends them: one byte each
        ("x\ud800y", "stand for no bytes"),  # a lone surrogate no byte stands behind
        (_path_of(PATH_MAX - 1), None),  # /workspace/ and all: 4,095 bytes
        (_path_of(PATH_MAX), "a path of 4096 bytes"),
        ("/".join(["\u00e9" * 100] * 21), "bytes, over the limit of 4095"),  # 2,120 characters, 4,220 bytes
        ("a//b", "not a plain relative path"),
        ("../etc/passwd", "not a plain relative path"),
        ("a/./b", "not a plain relative path"),
        ("nul\0byte", "not a plain relative path"),
        ("", "not a plain relative path"),
    ],
)
def test_the_one_rule_for_names(path, why):
    got = unwritable(path)
    assert (got is None) if why is None else (why in (got or "")), got


def test_the_limit_counts_from_the_folder_written_to():
    rel = "f" * 200 + "/" + "g" * 200
    assert unwritable(rel, "/workspace") is None
    assert "a path of 4102 bytes" in unwritable(rel, "/x" * 1850)  # a grading folder of 3,700 bytes


# ---------------------------------------------------------------------------- capture and rebuild (Docker)


def _listing_digests(snapshot: dict) -> dict:
    return {p: m[2] for p, m in snapshot.items() if isinstance(m, list) and m[0] == "f"}


def test_capture_and_rebuild_agree(image):
    """Every name the agent can make: what capture keeps is written back byte for byte into a fresh
    container, nothing more, nothing less; what it leaves out is listed with the reason."""
    # the selftest's battery of names (paths at and over PATH_MAX, 2-byte characters, NAME_MAX, odd bytes,
    # control characters), plus a 5,000-byte path, a 250-level tree of short names and odd ordinary names
    script = NAME_LIMITS.replace("\nPY", "\n") + (
        "os.chdir('/workspace')\nfor _ in range(25):\n    os.mkdir('p' * 200)\n    os.chdir('p' * 200)\n"
        "open('long.py', 'w').write('x')\nos.chdir('/workspace')\nos.makedirs('/'.join(['d'] * 250))\n"
        "open('/'.join(['d'] * 250) + '/leaf', 'w').write('deep')\n"
        "for name in ('-rf', 'sp ace', 'new\\nline', 'back\\\\slash', '\\u202eevil.txt'):\n"
        "    open(name, 'w').write(name)\nprint('ALL-MADE')\nPY"
    )

    async def main():
        async with DockerPool(warm=0) as pool:
            async with pool.sandbox(image, SandboxSpec()) as a:
                await a.put_files({"solution.py": b"x"})
                await a.mark_baseline()
                r = await a.exec(script, timeout=120)
                assert "ALL-MADE" in r.output, r.output
                ch = await a.changes()
            async with pool.sandbox(image, SandboxSpec()) as b:
                refused = await b.put_files(ch.files, executable=ch.executable)
                rebuilt = await b.snapshot()
        return r.output, ch, refused, rebuilt

    out, ch, refused, rebuilt = run(main())
    assert "NAME256-REFUSED" in out and "UTF8-256-REFUSED" in out  # the kernel refuses those in A already
    assert refused == []  # capture applied the same rule
    assert all(unwritable(p) is None for p in ch.files)
    wanted = {p: hashlib.sha256(d).hexdigest() for p, d in ch.files.items()}
    assert _listing_digests(rebuilt) == wanted
    at_limit = [p for p in ch.files if p.startswith("at/")]
    assert len(at_limit) == 1 and len(("/workspace/" + at_limit[0]).encode()) == PATH_MAX - 1
    assert {"n" * 255, "\udcff" * 255, "-rf", "new\nline", "\u202eevil.txt"} <= set(ch.files)
    assert "/".join(["d"] * 250) + "/leaf" in ch.files
    text = "\n".join(ch.rejected)
    assert "a path of 4096 bytes" in text and "a path of 4200 bytes" in text and "long.py" in text
    assert not any(p.startswith(("over/", "wide/")) or p.endswith("long.py") for p in ch.files)


def test_put_files_leaves_out_names_no_container_holds(image):
    files = {
        "ok.txt": b"ok",
        _path_of(PATH_MAX): b"long",
        "n" * 256: b"wide",
        "../escape.txt": b"out",
        "nul\0.txt": b"nul",
    }

    async def main():
        async with DockerPool(warm=0) as pool:
            async with pool.sandbox(image, SandboxSpec()) as sb:
                refused = await sb.put_files(files)
                listed = await sb.snapshot()
                outside = await sb.exec("ls / /workspace/..", timeout=10)
        return refused, listed, outside.stdout

    refused, listed, outside = run(main())
    assert len(refused) == 4 and set(_listing_digests(listed)) == {"ok.txt"}, refused
    assert "escape.txt" not in outside


def test_tar_refusing_the_files_is_the_attempts_failure_not_an_error(image):
    """A set of files no tar can write (a file and a folder of one name): a failed verdict with tar's
    reason, never an InfraError (capture never yields such a set; the grader holds anyway)."""

    async def main():
        async with DockerPool(warm=0) as pool:
            return await grade(
                add_task("t"),
                Changes(files={"solution.py": CORRECT.encode(), "solution.py/x": b""}),
                pool,
                image,
            )

    v = run(main())
    assert (v.reward, v.solved, v.reason) == (0.0, False, "rebuild_failed") and "Not a directory" in v.detail


@pytest.mark.slow
def test_a_timeout_at_the_pid_limit_says_so(image):
    """An honest add() whose module starts 300 workers, retrying while the pid limit (64) refuses forks."""
    task = dataclasses.replace(add_task("t"), verifier_timeout_sec=8)

    async def main():
        async with DockerPool(warm=0) as pool:
            return await grade(
                task, Changes(files={"solution.py": (CORRECT + FORK_WORKERS).encode()}), pool, image
            )

    v = run(main())
    assert (v.reason, v.reward) == ("timeout", 0.0)
    assert "limit of 64 processes" in v.detail and "forks refused" in v.detail


@pytest.mark.slow
def test_a_timeout_without_forks_says_nothing_of_the_pid_limit(image):
    task = dataclasses.replace(add_task("t"), verifier_timeout_sec=3)
    hang = CORRECT + "import time\ntime.sleep(60)\n"

    async def main():
        async with DockerPool(warm=0) as pool:
            return await grade(task, Changes(files={"solution.py": hang.encode()}), pool, image)

    v = run(main())
    assert v.reason == "timeout" and "limit" not in v.detail


# ------------------------------------------------------------------------------------ numbers (no Docker)


@pytest.mark.parametrize(
    "raw,expected",
    [
        (b"1", 1.0),
        (b" 0.25\n", 0.25),
        (b"+1e0", 1.0),
        (b"1" + b"0" * 400, "too large for a float"),  # an integer of 401 digits
        (b"1" + b"0" * 5000, "too long for a number"),
        (b"nan", "non-finite"),
        (b"-Infinity", "non-finite"),
        (b"inf", "non-finite"),
        (b"1e999", "too large for a float"),
        (b"0x1", "not a number"),
        (b"1_0", "not a number"),
        ("\u0661".encode(), "not a number"),  # an Arabic-Indic digit one: float() would take it
        (b"1" + b" " * 300 + b"0", "not a number"),  # no longer cut to its first 256 bytes
        (b" " * (50 << 20) + b"1", "too long for a number"),
        (b"\xff", "not text"),
        (b"", "not a number"),
    ],
)
def test_parse_number(raw, expected):
    got = parse_number(raw, "reward.txt")
    assert got == expected if isinstance(expected, float) else expected in got, got


def test_parse_reward_keeps_the_range_check():
    assert parse_reward(b"0.5") == 0.5 and "outside 0..1" in parse_reward(b"2")
    assert parse_reward(None) == "test.sh wrote no reward file"


@pytest.mark.parametrize(
    "raw,expected",
    [
        (b'{"reward": 1}', {"reward": 1.0}),
        (b"0.5", {"reward": 0.5}),
        (b'{"reward": 1' + b"0" * 400 + b"}", "too large for a float"),
        (b'{"reward": 1' + b"0" * 5000 + b"}", "too long for a number"),  # json.loads alone: ValueError
        (b'{"reward": NaN}', "non-finite"),
        (b'{"reward": Infinity}', "non-finite"),
        (b'{"a": -Infinity, "b": 1}', "'a' is -Infinity"),
        (b'{"reward": 1e400}', "too large"),
        (b'{"reward": true}', "'reward' is bool"),
        (b'{"reward": "1"}', "'reward' is str"),
        (b'{"reward": [1]}', "'reward' is list"),
        (b"{}", "names no reward"),
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 100"),
        (b'{"a":' * 150 + b"1" + b"}" * 150, "nested deeper than 100"),
        (b" " * (50 << 20), "too large for named numbers"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"reward": 1', "not JSON"),
    ],
)
def test_parse_reward_json(raw, expected):
    got = parse_reward_json(raw)
    assert got == expected if isinstance(expected, dict) else expected in got, got


@pytest.mark.parametrize(
    "txt,js,reason,detail",
    [
        (None, b'{"reward": 1' + b"0" * 400 + b"}", "no_report", "too large for a float"),  # was a traceback
        (None, b" " * (50 << 20), "no_report", "too large"),  # was "wrote neither reward file"
        (None, b"[" * 100_000 + b"]" * 100_000, "no_report", "nested deeper"),
        (b"1" + b"0" * 400, None, "no_report", "too large for a float"),
        (None, b'{"a": 1e308, "b": 1e308}', "pass", "mean of all"),  # no overflow to inf in the mean
        (None, b'{"a": 0.5, "b": 0}', "fail", "mean of all"),
    ],
)
def test_harbor_verdict_is_bounded(txt, js, reason, detail):
    v = verifier.verdict(txt, js)
    assert isinstance(v, Verdict) and v.reason == reason and detail in v.detail, v.detail


@pytest.mark.parametrize(
    "answer,ok,detail",
    [
        ("1,000", True, ""),
        ("1" + "0" * 5000, False, "too long for a number"),
        ("1" + "0" * 400, False, "too large for a float"),
        ("nan", False, "non-finite"),
        ("\u0661\u0660\u0660\u0660", False, "not a number"),
    ],
)
def test_numeric_answers_are_bounded_and_say_why(answer, ok, detail):
    assert answer_matches(answer, 1000, "numeric") is ok
    task = answer_task("t", "1000")
    task.evaluator = EvaluatorConfig(kind="answer", settings=AnswerSettings(mode="numeric", expected=1000))
    v = run(grade(task, Changes(files={"answer.txt": answer.encode()}), None, ""))
    assert (v.solved, v.reason) == (ok, "pass" if ok else "wrong_answer") and detail in v.detail, v.detail


# --------------------------------------------------------------------------------- Harbor's files (Docker)


def _harbor(tmp_path, test_sh: str, mode: str = "fresh"):
    from tasks.task_folder import load_task
    from tests.tasks.test_harbor import _with_mode, harbor_task

    return _with_mode(load_task(harbor_task(tmp_path, 'schema_version = "1.4"\n', test_sh=test_sh)), mode)


def _harbor_attempt(task, policy):
    from tests.tasks.test_harbor import _attempt

    return _attempt(task, policy)


@pytest.mark.slow
def test_a_50_mb_reward_json_is_too_large_not_absent(image, tmp_path):
    task = _harbor(tmp_path, "head -c 50000000 /dev/zero | tr '\\0' ' ' > /logs/verifier/reward.json\n")

    async def nothing(task, sb):
        return None

    rec = _harbor_attempt(task, nothing)
    assert (rec.status, rec.reason) == ("failed", "no_report") and "too large" in rec.detail, rec.detail


@pytest.mark.slow
@pytest.mark.parametrize("forks", [True, False])
def test_a_harbor_test_sh_timeout_says_whether_the_pid_limit_was_reached(image, tmp_path, forks):
    """test.sh that starts 400 processes (the limit refuses forks, bash retries) and one that only sleeps:
    both time out; only the first says the pid limit was reached, with the task's own limit."""
    from tests.evaluators.grading.test_harbor_runtime import harbor_task

    body = "for i in $(seq 400); do sleep 60 & done; wait\n" if forks else "sleep 60\n"
    task = harbor_task(
        tmp_path, 'schema_version = "1.1"\n[verifier]\ntimeout_sec = 6\n', test_sh="#!/bin/bash\n" + body
    )

    async def nothing(task, sb):
        return None

    rec = _harbor_attempt(task, nothing)
    assert (rec.status, rec.reason) == ("failed", "timeout"), (rec.status, rec.reason, rec.error, rec.detail)
    limit = runtime.limits(task).pids
    if forks:
        assert f"reached the sandbox's limit of {limit} processes" in rec.detail, rec.detail
        assert "forks refused)" in rec.detail
    else:
        assert "limit" not in rec.detail, rec.detail


@pytest.mark.slow
def test_a_long_path_in_a_harbor_workdir_is_left_out_in_fresh_mode(image, tmp_path):
    task = _harbor(tmp_path, '[ "$(cat kept.txt)" = ok ] && echo 1 > /logs/verifier/reward.txt\n')

    async def agent(task, sb):
        r = await sb.exec(
            "echo ok > kept.txt && python3 -c \"import os\nfor _ in range(25):\n    os.mkdir('p' * 200)\n"
            "    os.chdir('p' * 200)\nopen('deep.txt', 'w').write('x')\"",
            timeout=30,
        )
        assert r.exit_code == 0, r.output

    rec = _harbor_attempt(task, agent)
    # graded without it, never an error (the static helper lists it; unwritable() leaves it out)
    assert (rec.status, rec.solved) == ("solved", True), (rec.status, rec.reason, rec.error, rec.detail)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["shared", "snapshot"])
def test_a_harbor_agent_that_replaces_logs_with_a_file_is_graded_not_an_error(image, tmp_path, mode):
    """/logs made a file (or a link) by a root agent: the verifier's folders are made anew; it is graded."""
    task = _harbor(tmp_path, "echo 1 > /logs/verifier/reward.txt\n", mode=mode)

    async def agent(task, sb):
        r = await sb.exec("rm -rf /logs && echo x > /logs && ln -s /proc/1 /tests", timeout=30)
        assert r.exit_code == 0, r.output

    rec = _harbor_attempt(task, agent)
    assert rec.status != "error" and (rec.status, rec.reason) == ("solved", "pass"), (rec.error, rec.detail)


@pytest.mark.slow
def test_a_harbor_agent_that_fills_the_verifiers_folder_with_a_deep_tree_is_graded(image, tmp_path):
    """/logs/verifier 1,500 levels deep (more folders than the container's 1,024 open files, paths short
    enough for docker diff): the helper empties it without recursion or an fd per level, and test.sh
    writes its reward there."""
    task = _harbor(tmp_path, "echo 1 > /logs/verifier/reward.txt\n", mode="shared")
    make = (
        "import os\nos.makedirs('/logs/verifier', exist_ok=True)\n"
        "fd = os.open('/logs/verifier', os.O_RDONLY)\n"
        "for _ in range(1500):\n    os.mkdir('d', dir_fd=fd)\n"
        "    fd, old = os.open('d', os.O_RDONLY, dir_fd=fd), fd\n    os.close(old)\n"
    )

    async def agent(task, sb):
        r = await sb.exec(["python3", "-c", make], timeout=60)
        assert r.exit_code == 0, r.output

    rec = _harbor_attempt(task, agent)
    assert (rec.status, rec.reason) == ("solved", "pass"), (rec.status, rec.reason, rec.error, rec.detail)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fresh", "snapshot"])
def test_a_tree_2000_levels_deep_in_a_harbor_workdir_is_graded_with_the_other_changes(image, tmp_path, mode):
    """The static helper's walk is bounded: the deep tree is listed as not captured, kept.txt is kept (in
    fresh mode it reaches the verifier only as a captured change)."""
    task = _harbor(tmp_path, '[ "$(cat kept.txt)" = ok ] && echo 1 > /logs/verifier/reward.txt\n', mode=mode)

    async def agent(task, sb):
        r = await sb.exec(
            "echo ok > kept.txt && python3 -c \"import os\nfor _ in range(2000):\n    os.mkdir('d')\n"
            "    os.chdir('d')\nopen('leaf', 'w').write('x')\"",
            timeout=60,
        )
        assert r.exit_code == 0, r.output

    rec = _harbor_attempt(task, agent)
    if mode == "fresh":
        assert (rec.status, rec.reason) == ("solved", "pass"), (rec.status, rec.reason, rec.error, rec.detail)
    else:  # docker diff itself fails on such paths: a toolchain nobody can check is not graded as clean
        assert (rec.status, rec.reason) == ("failed", "tamper"), (rec.status, rec.reason, rec.error)
        assert "toolchain cannot be checked" in rec.detail and "file name too long" in rec.detail, rec.detail


@pytest.mark.slow
def test_the_static_helpers_walk_lists_what_it_cannot_capture_and_keeps_the_rest(image, tmp_path):
    """Harbor sandboxes list changes with agent/sandbox/helper.c, not capture.py: the same answers. A tree
    2,000 levels deep and a path over PATH_MAX are listed as not captured (never skipped without a word,
    never the end of the helper); a file 200 levels deep and the plain one are captured."""
    from evaluators.run.task_images import build_images
    from tests.evaluators.grading.test_harbor_runtime import harbor_task

    task = harbor_task(tmp_path, name="walk")
    make = (
        "import os\n"
        "def tree(top, name, n, leaf):\n"
        "    os.makedirs(top)\n"
        "    fd = os.open(top, os.O_RDONLY)\n"
        "    for _ in range(n):\n"
        "        os.mkdir(name, dir_fd=fd)\n"
        "        fd, old = os.open(name, os.O_RDONLY, dir_fd=fd), fd\n"
        "        os.close(old)\n"
        "    os.close(os.open(leaf, os.O_WRONLY | os.O_CREAT, dir_fd=fd))\n"
        "tree('deep', 'd', 2000, 'leaf')\n"
        "tree('long', 'p' * 200, 25, 'far.txt')\n"
        "tree('ok', 'a', 200, 'near.txt')\n"
        "open('kept.txt', 'w').write('ok')\n"
    )

    async def go():
        images = await build_images([task], log=lambda m: None)
        async with DockerPool(run_id="harbor-rt-test", warm=0) as pool:
            async with pool.sandbox(images[task.id], runtime.limits(task)) as sb:
                await sb.mark_baseline()
                r = await sb.exec(["python3", "-c", make], timeout=60)
                assert r.exit_code == 0, r.output
                ch = await sb.changes()
                alive = await sb.exec("echo alive", timeout=10)
                return ch, alive

    ch, alive = run(go())
    assert alive.stdout.strip() == "alive"  # the walk did not end the helper
    assert ch.files.get("kept.txt") == b"ok"
    assert "ok/" + "a/" * 200 + "near.txt" in ch.files
    assert not any(p.startswith(("deep/", "long/")) for p in ch.files)
    said = "; ".join(ch.rejected)
    assert "folder deep/d/d" in said and "is more than 256 levels deep" in said, said
    assert "over the limit of 4095" in said, said  # the long path: listed, then refused by unwritable()


def test_changes_larger_than_the_grading_workspace_are_rebuild_failed(image):
    """A sparse file takes no room in the agent's workspace but its full size in the grading one: when
    that is more than the task's storage, tar's refusal is the attempt's failure, never an error."""
    task = add_task("t")
    task.environment = dataclasses.replace(task.environment, storage_mb=1)
    files = {"solution.py": CORRECT.encode(), "sparse.bin": bytes(3 << 20)}

    async def main():
        async with DockerPool(warm=0) as pool:
            return await grade(task, Changes(files=files), pool, image)

    v = run(main())
    assert (v.reason, v.solved) == ("rebuild_failed", False) and "No space left" in v.detail, v.detail
