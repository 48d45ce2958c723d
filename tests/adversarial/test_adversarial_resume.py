"""The harness process itself fails: `kill -9` mid-run, a torn last record, a second harness on the same
run folder, a changed task on resume, a full disk. The CLI runs as a subprocess, as a user runs it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.adversarial.adv_util import containers_of, unique
from tests.helpers import GOOD_TOML, ROOT, assert_one_clear_line, harness, write_task

SUBMIT = "```bash\nsubmit\n```"


def suite(tmp_path: Path, n: int = 4, toml: str = GOOD_TOML) -> Path:
    """n tiny answer tasks on disk; the last one is scripted to fail (see replay())."""
    root = tmp_path / "suite"
    for i in range(1, n + 1):
        write_task(root, f"t{i}", toml=toml)
    return root


def replay(tmp_path: Path, sleep: float = 0, output: int = 0, hang: tuple = ()) -> str:
    """Every task is solved except t4 (a wrong answer); `sleep` makes each attempt take time, `output`
    makes its record bigger (about twice that many characters); tasks in `hang` run `sleep 3600` first."""
    nap = (f"sleep {sleep}; " if sleep else "") + (
        f"head -c {output} /dev/zero | tr '\\0' x; echo; " if output else ""
    )
    scripts = {
        "*": [f"```bash\n{nap}echo ok > answer.txt\n```", SUBMIT],
        "t4": [f"```bash\n{nap}echo wrong > answer.txt\n```", SUBMIT],
    }
    for task_id in hang:
        scripts[task_id] = ["```bash\nsleep 3600\n```", *scripts.get(task_id, scripts["*"])]
    path = tmp_path / "replay.json"
    path.write_text(json.dumps(scripts))
    return f"replay:{path}"


# Attempts may take an hour: a run that hangs (see replay(hang=...)) ends only when the test kills it.
PATIENT_TOML = GOOD_TOML.replace("timeout_sec = 60", "timeout_sec = 7200").replace(
    "command_timeout_sec = 10", "command_timeout_sec = 3600"
)


def lines_of(run: Path) -> list[bytes]:
    path = run / "attempts.jsonl"
    return path.read_bytes().splitlines(keepends=True) if path.exists() else []


def outcomes(run: Path) -> dict:
    """(task, sample) -> (status, reward, reason) of every record; asserts each line is a whole record."""
    out = {}
    for line in lines_of(run):
        assert line.endswith(b"\n"), line[-80:]
        r = json.loads(line)
        out[(r["task_id"], r["sample"])] = (r["status"], r["reward"], r["reason"])
    return out


def wait_for_lines(run: Path, n: int, proc: subprocess.Popen, log: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while sum(line.endswith(b"\n") for line in lines_of(run)) < n:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before it could be interrupted: {log.read_text()[-2000:]}")
        assert time.monotonic() < deadline, "the run recorded too few attempts in time"
        time.sleep(0.2)


@pytest.mark.slow
def test_kill_9_mid_run_then_resume(image, tmp_path):
    # t1 and t2 finish; t3 and t4 hang until the kill: the first run cannot end before the test is done with
    # it, however slow the second CLI is to start (no race). The resume then plays the normal script.
    tasks, model = suite(tmp_path, toml=PATIENT_TOML), replay(tmp_path, hang=("t3", "t4"))
    run = tmp_path / unique("run")
    args = ["eval", "--model", model, "--tasks", str(tasks), "--samples", "2", "--concurrency", "2"]
    log = tmp_path / "first.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "harness.py"), *args, "--out", str(run)],
            cwd=ROOT,
            stdout=out,
            stderr=out,
        )
    try:
        wait_for_lines(run, 2, proc, log)
        # While it runs, a second harness on the same folder is refused (the lock), in one clear line.
        second = harness("eval", "--resume", str(run), "--tasks", str(tasks))
        assert_one_clear_line(second, "in use by another harness process")
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finished = [line for line in lines_of(run) if line.endswith(b"\n")]
    assert 2 <= len(finished) <= 4  # t1 and t2's attempts at most: t3 and t4 were hanging
    assert {json.loads(line)["task_id"] for line in finished} <= {"t1", "t2"}
    replay(tmp_path)  # the same replay file, now without the hang
    with open(run / "attempts.jsonl", "ab") as f:  # a record cut short by the crash
        f.write(b'{"schema_version": 1, "key": "' + run.name.encode() + b'/t1/1", "run_id": "tor')
    left_by_the_dead_run = containers_of(run.name)  # may be empty if it died between attempts

    resumed = harness("eval", "--resume", str(run), "--tasks", str(tasks))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Traceback" not in resumed.stderr
    after = lines_of(run)
    assert after[: len(finished)] == finished  # finished attempts kept byte for byte: not run again
    got = outcomes(run)  # the torn line is gone: every line is a whole record
    keys = [json.loads(line)["key"] for line in after]
    assert len(keys) == len(set(keys)) == 8  # every attempt exactly once
    assert containers_of(run.name) == [], f"left by the killed run: {left_by_the_dead_run}"

    # The same evaluation without interruption gives the same results.
    fresh = tmp_path / unique("fresh")
    clean = harness(*args, "--out", str(fresh))
    assert clean.returncode == 0, clean.stderr[-2000:]
    assert got == outcomes(fresh)
    assert sum(v[1] for v in got.values()) == 6  # t1..t3 solved twice, t4 failed twice


@pytest.mark.slow
def test_resume_with_a_changed_task_is_refused(image, tmp_path):
    tasks, model = suite(tmp_path, n=1), replay(tmp_path)
    run = tmp_path / unique("run")
    first = harness("eval", "--model", model, "--tasks", str(tasks), "--out", str(run))
    assert first.returncode == 0, first.stderr[-2000:]
    (tasks / "t1" / "instruction.md").write_text("Write something else to /workspace/answer.txt.\n")
    proc = harness("eval", "--resume", str(run), "--tasks", str(tasks))
    assert_one_clear_line(proc, "cannot resume", "t1")
    assert len(lines_of(run)) == 1


@pytest.mark.slow
def test_resume_with_different_samples_is_refused(image, tmp_path):
    tasks, model = suite(tmp_path, n=1), replay(tmp_path)
    run = tmp_path / unique("run")
    assert harness("eval", "--model", model, "--tasks", str(tasks), "--out", str(run)).returncode == 0
    proc = harness("eval", "--resume", str(run), "--tasks", str(tasks), "--samples", "3")
    assert_one_clear_line(proc, "samples")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs for the run folder: needs root")
@pytest.mark.slow
def test_full_disk_stops_the_run_with_nothing_corrupted(image, tmp_path):
    tasks, model = suite(tmp_path, n=1), replay(tmp_path, output=6000)  # records of ~15 KB
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)], check=True)
    try:
        st = os.statvfs(mnt)
        free = st.f_bavail * st.f_frsize
        (mnt / "filler").write_bytes(b"\0" * (free - 32 * 1024))  # room for the manifest and one record
        run = mnt / unique("run")
        proc = harness("eval", "--model", model, "--tasks", str(tasks), "--samples", "6", "--out", str(run))
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
        # One error (the progress bar may share its line: see patch P8), naming the cause and the fix.
        assert proc.stderr.count("harness: error:") == 1, proc.stderr[-3000:]
        error = proc.stderr.split("harness: error:", 1)[1].splitlines()[0]
        assert "disk full" in error and "attempts.jsonl" in error and "--resume" in error, error
        kept = lines_of(run)
        assert 1 <= len(kept) < 6
        outcomes(run)  # only whole records
        assert containers_of(run.name) == []

        (mnt / "filler").unlink()  # space freed: the resume finishes the run, every attempt once
        resumed = harness("eval", "--resume", str(run), "--tasks", str(tasks))
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        after = lines_of(run)
        assert after[: len(kept)] == kept
        assert len(outcomes(run)) == 6 == len(after)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_good_toml_is_a_valid_task(tmp_path):
    """The fixtures above start from a task the loader accepts (so the refusals test what they claim)."""
    from tasks.task_folder import load_task

    t = load_task(write_task(tmp_path, "ok", toml=GOOD_TOML))
    assert t.evaluator.kind == "answer" and t.environment.memory_mb == 256
