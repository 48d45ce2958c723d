"""Run store: append/read, torn lines, crash-resume under SIGKILL, the single-writer lock, disk full."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from results.errors import UserError
from results.manifest import MANIFEST, Manifest, TaskEntry, resume_settings
from results.run_writer import RunStore
from results.store import ATTEMPTS, default_run_dir, load_attempts, open_run
from results.synthetic import make_attempt

REPO = Path(__file__).resolve().parents[2]


def manifest(**config) -> Manifest:
    cfg = {"model": "test/model", "tasks": ["t1", "t2"], "samples": 1, "temperature": 0.0, **config}
    return Manifest(
        model=cfg["model"],
        config=cfg,
        task_suite=[TaskEntry(id="t1", hash="a"), TaskEntry(id="t2", hash="b")],
        images={"t1": "sha256:00"},
        harness_version="test",
        seed=1,
    )


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def test_create_append_read_roundtrip(tmp_path):
    run = tmp_path / "run"
    with RunStore.create(run, manifest()) as store:
        assert store.run_id == "run"
        first = make_attempt(store.run_id, "t1", 0, n_steps=4)
        second = make_attempt(store.run_id, "t2", 0, solved=False, n_steps=3, native_tools=False)
        assert store.append(first) is True
        assert store.append(second) is True
        assert store.append(first) is False  # same key: recorded once
        assert store.done_keys() == {first.key, second.key}
        store.finish()
    saved = json.loads((run / MANIFEST).read_text())
    assert saved["run_id"] == "run" and saved["finished_at"] and saved["started_at"]
    assert saved["task_suite"][1] == {"id": "t2", "version": "1", "hash": "b"}
    assert len(lines(run / ATTEMPTS)) == 2

    reader = open_run(run)
    attempts = list(reader.iter_attempts())
    assert [a.key for a in attempts] == [first.key, second.key]
    assert attempts[0] == first and attempts[1].steps[0].observation == second.steps[0].observation

    table = reader.read_attempts()
    assert list(table["task_id"]) == ["t1", "t2"] and list(table["solved"]) == [True, False]
    assert "messages" not in table.columns and "steps" not in table.columns  # trajectories never enter tables
    assert table.loc[0, "n_tests_passed"] == 3 and table.loc[0, "duration_total"] == first.durations.total
    narrow = reader.read_attempts(columns=["key", "reward"])
    assert list(narrow.columns) == ["key", "reward"]
    with pytest.raises(ValueError, match="unknown attempt columns"):
        reader.read_attempts(columns=["messages"])


def test_append_rejects_foreign_run_id_and_closed_store(tmp_path):
    store = RunStore.create(tmp_path / "run", manifest())
    with pytest.raises(ValueError, match="run_id"):
        store.append(make_attempt("other", "t1"))
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.append(make_attempt("run", "t1"))


def test_undecodable_text_does_not_lose_the_attempt(tmp_path):
    with RunStore.create(tmp_path / "run", manifest()) as store:
        store.append(make_attempt(store.run_id, "t1", observation="bytes \udcff from a binary file"))
    (attempt,) = open_run(tmp_path / "run").iter_attempts()
    assert attempt.steps[0].observation.startswith("bytes ")


def test_create_refuses_an_existing_run(tmp_path):
    RunStore.create(tmp_path / "run", manifest()).close()
    with pytest.raises(UserError, match="already holds a run.*--resume"):
        RunStore.create(tmp_path / "run", manifest())


def test_default_run_dir_is_timestamp_and_model_slug(tmp_path):
    path = default_run_dir("openai/GPT-4o mini", root=tmp_path)
    assert path.parent == tmp_path
    stamp, slug = path.name.split("-", 1)
    assert len(stamp) == 16 and stamp.endswith("Z") and slug == "openai-gpt-4o-mini"


@pytest.mark.parametrize("tail", [b'{"key": "run/t9/0", "sta', b'{"key": "run/t9/0"}', b"not json at all\n"])
def test_torn_last_line_is_cut_off_on_resume(tmp_path, tail, caplog):
    run = tmp_path / "run"
    with RunStore.create(run, manifest()) as store:
        store.append(make_attempt("run", "t1"))
        store.append(make_attempt("run", "t2"))
    good = (run / ATTEMPTS).read_bytes()
    with open(run / ATTEMPTS, "ab") as f:
        f.write(tail)

    # Readers skip the torn tail without touching the file (a live run may still be writing).
    assert [a.task_id for a in open_run(run).iter_attempts()] == ["t1", "t2"]
    assert (run / ATTEMPTS).read_bytes() == good + tail

    with caplog.at_level("WARNING", logger="harness.results"):
        store = RunStore.open(run, manifest())
    assert "torn last line (line 3" in store.repaired and "torn last line" in caplog.text
    assert (run / ATTEMPTS).read_bytes() == good  # ends at the last complete line
    assert store.done_keys() == {"run/t1/0", "run/t2/0"}
    store.append(make_attempt("run", "t1", 1))
    store.close()
    assert [json.loads(x)["key"] for x in lines(run / ATTEMPTS)] == ["run/t1/0", "run/t2/0", "run/t1/1"]


def test_damage_in_the_middle_is_refused_not_guessed(tmp_path):
    run = tmp_path / "run"
    with RunStore.create(run, manifest()) as store:
        store.append(make_attempt("run", "t1"))
    with open(run / ATTEMPTS, "ab") as f:
        f.write(b"garbage\n" + (make_attempt("run", "t2").model_dump_json() + "\n").encode())
    with pytest.raises(UserError, match=r"line 2 is not a complete JSON record but more lines follow"):
        RunStore.open(run)
    with pytest.raises(UserError, match="line 2"):
        list(open_run(run).iter_attempts())


def test_resume_refuses_changed_settings_and_names_them(tmp_path):
    run = tmp_path / "run"
    RunStore.create(run, manifest()).close()
    with pytest.raises(UserError) as err:
        RunStore.open(run, manifest(samples=5, temperature=0.7))
    message = str(err.value)
    assert "config.samples (1 != 5)" in message and "config.temperature (0.0 != 0.7)" in message
    assert "model" not in message.split("differ")[1]
    changed = manifest()
    changed.task_suite[0] = TaskEntry(id="t1", hash="different")
    with pytest.raises(UserError, match=r"task suite \(changed: t1\)"):
        RunStore.open(run, changed)
    with pytest.raises(UserError, match=r"model \('test/model' != 'other'\)"):
        RunStore.open(run, manifest(model="other"))
    # Keys that do not change what an attempt means, and tuple vs list, are fine.
    same = manifest(tasks=("t1", "t2"), max_concurrency=8)
    RunStore.open(run, same).close()


def test_resume_settings_are_the_recorded_ones_and_other_asked_values_are_refused(tmp_path):
    run = tmp_path / "run"
    RunStore.create(run, manifest(samples=3, temperature=0.5)).close()
    recorded = {"model": "test/model", "samples": 3, "temperature": 0.5}
    assert resume_settings(run)[1] == recorded  # nothing asked: the run's own settings
    got, settings = resume_settings(run, model="test/model", samples=3, temperature=0.5)  # the same: fine
    assert settings == recorded and got.config["tasks"] == ["t1", "t2"]
    with pytest.raises(UserError) as err:
        resume_settings(run, model="other", samples=3, temperature=0.7)
    assert str(err.value) == (
        f"cannot resume {run} with other settings: --model other (the run has test/model); "
        "--temperature 0.7 (the run has 0.5); leave them out to continue the run as "
        "recorded, or start a new run folder"
    )
    # A manifest from before samples/temperature were recorded: the defaults of `harness eval`.
    old = tmp_path / "old"
    old.mkdir()
    (old / MANIFEST).write_text(json.dumps({"model": "m", "config": {}}))
    assert resume_settings(old)[1] == {"model": "m", "samples": 1, "temperature": 0.0}
    with pytest.raises(UserError, match=r"--samples 2 \(the run has 1\)"):
        resume_settings(old, samples=2)


def test_load_attempts_reads_a_file_or_its_folder_without_a_manifest(tmp_path):
    a, b = make_attempt("r", "t1", 0), make_attempt("r", "t2", 0, solved=False)
    (tmp_path / ATTEMPTS).write_text(a.model_dump_json() + "\n" + b.model_dump_json() + "\n")
    assert [x.key for x in load_attempts(tmp_path)] == [a.key, b.key]
    assert load_attempts(tmp_path / ATTEMPTS) == load_attempts(tmp_path)
    with pytest.raises(UserError, match="no such file; expected the attempts.jsonl"):
        load_attempts(tmp_path / "missing")
    (tmp_path / ATTEMPTS).write_text(a.model_dump_json() + "\n" + '{"key": "x"}\n')
    with pytest.raises(UserError, match=r"record 2 is not a valid attempt: run_id: Field required"):
        load_attempts(tmp_path)


def test_bad_run_folders_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        open_run(tmp_path / "missing")
    with pytest.raises(UserError, match="no manifest.json"):
        RunStore.open(tmp_path)
    (tmp_path / MANIFEST).write_text("{broken")
    with pytest.raises(UserError, match="not a valid run manifest"):
        open_run(tmp_path)


# ---------------------------------------------------------------- single writer


def test_second_writer_in_same_process_is_refused(tmp_path):
    with RunStore.create(tmp_path / "run", manifest()):
        with pytest.raises(UserError, match=rf"in use by another harness process \(pid {os.getpid()}\)"):
            RunStore.open(tmp_path / "run")
    RunStore.open(tmp_path / "run").close()  # released on close


def _python(code: str, *args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_second_writer_process_is_refused_with_holder_pid(tmp_path):
    code = textwrap.dedent("""
        import sys
        from results.errors import UserError
        from results.run_writer import RunStore
        try:
            RunStore.open(sys.argv[1])
        except UserError as e:
            print(e)
            sys.exit(3)
        print("opened")
    """)
    with RunStore.create(tmp_path / "run", manifest()):
        out, err = _python(code, str(tmp_path / "run")).communicate(timeout=120)
    assert f"run folder {tmp_path / 'run'} is in use by another harness process (pid {os.getpid()})" in out, (
        err
    )
    out, err = _python(code, str(tmp_path / "run")).communicate(timeout=120)
    assert out.strip() == "opened", err


# ---------------------------------------------------------------- crash safety

WRITER = textwrap.dedent("""
    import os, signal, sys
    from results.manifest import Manifest
    from results.run_writer import RunStore
    from results.synthetic import make_attempt
    run_dir, n, tear_at, cut = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    # "hold:K": append at most K attempts, then wait to be killed (never exit by itself, however fast the disk)
    hold = int(sys.argv[5].split(":")[1]) if len(sys.argv) > 5 else None
    manifest = Manifest(model="m", config={"model": "m", "tasks": "all", "samples": 1, "temperature": 0.0})
    if os.path.exists(os.path.join(run_dir, "manifest.json")):
        store = RunStore.open(run_dir, manifest)
    else:
        store = RunStore.create(run_dir, manifest)
    if tear_at >= 0:  # die inside the tear_at-th append, after the kernel took only part of the line
        real_write, appends = os.write, [0]
        def write(fd, data):
            if fd == store._fd:
                if appends[0] == tear_at:
                    real_write(fd, bytes(data)[: int(len(data) * cut)])
                    os.kill(os.getpid(), signal.SIGKILL)
                appends[0] += 1
            return real_write(fd, data)
        os.write = write
    done = store.done_keys()
    print("ready", len(done), flush=True)
    big = "observation line\\n" * 3000
    for i in range(n):
        attempt = make_attempt(store.run_id, f"t{i:03d}", 0, n_steps=3, observation=big)
        if attempt.key not in done:
            if hold is not None and hold == 0:
                break
            store.append(attempt)
            print("appended", flush=True)
            hold = None if hold is None else hold - 1
    if hold is not None:
        sys.stdin.read()
    store.close()
    print("done", flush=True)
""")  # noqa: E501 -- the writer subprocess's script, byte for byte


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_loses_and_duplicates_nothing(tmp_path):
    run, n = tmp_path / "run", 40
    rng = random.Random(1234)
    torn = 0
    for round_ in range(8):
        if (
            round_ % 2
        ):  # killed from outside at a random moment of the append loop (or just after its 4 appends)
            child = _python(WRITER, str(run), str(n), "-1", "0", "hold:4", stdin=subprocess.PIPE)
            assert child.stdout.readline().startswith("ready"), child.stderr.read()
            for _ in range(rng.randrange(4)):
                child.stdout.readline()
            time.sleep(rng.uniform(0.0, 0.005))
            child.send_signal(signal.SIGKILL)
        else:  # killed in the middle of writing a line: the crash a torn line comes from
            child = _python(WRITER, str(run), str(n), str(rng.randrange(3)), str(rng.uniform(0.05, 0.95)))
        child.communicate(timeout=120)
        assert child.returncode == -signal.SIGKILL
        # Between crashes: every complete line is a whole record; at most the last line is torn.
        data = (run / ATTEMPTS).read_bytes()
        torn += not data.endswith(b"\n")
        for line in data[: data.rfind(b"\n") + 1].splitlines():
            json.loads(line)
    assert torn >= 4  # every mid-write crash left a torn line for the next resume to cut off
    child = _python(WRITER, str(run), str(n), "-1", "0")
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0 and out.strip().endswith("done"), err

    data = (run / ATTEMPTS).read_bytes()
    assert data.endswith(b"\n")
    keys = Counter(json.loads(line)["key"] for line in data.splitlines())
    assert keys == Counter({f"run/t{i:03d}/0": 1 for i in range(n)})
    assert len(list(open_run(run).iter_attempts())) == n


# ---------------------------------------------------------------- disk full


def _disk_full_on_our_fd(monkeypatch, store, mode):
    real_write, real_fsync = os.write, os.fsync
    calls = {"n": 0}

    def write(fd, data):
        if fd != store._fd:
            return real_write(fd, data)
        calls["n"] += 1
        if mode == "short-then-enospc" and calls["n"] == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])  # the kernel wrote what fit
        if mode == "fsync":
            return real_write(fd, data)
        raise OSError(errno.ENOSPC, "No space left on device")

    def fsync(fd):
        if fd == store._fd and mode == "fsync":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("mode", ["enospc", "short-then-enospc", "fsync"])
def test_disk_full_leaves_only_complete_lines_and_says_how_to_resume(tmp_path, monkeypatch, mode):
    run = tmp_path / "run"
    store = RunStore.create(run, manifest())
    for task in ("t1", "t2", "t3"):
        store.append(make_attempt("run", task))
    before = (run / ATTEMPTS).read_bytes()
    with monkeypatch.context() as m:
        _disk_full_on_our_fd(m, store, mode)
        with pytest.raises(UserError) as err:
            store.append(make_attempt("run", "t4", n_steps=6))
    assert str(err.value) == (
        f"disk full writing {run / ATTEMPTS}: 3 attempts recorded, nothing lost; "
        f"free space and resume with --resume {run}"
    )
    assert (run / ATTEMPTS).read_bytes() == before
    assert "run/t4/0" not in store.done_keys()
    # Space is back: the same store (or a resumed one) carries on cleanly.
    assert store.append(make_attempt("run", "t4")) is True
    store.close()
    with RunStore.open(run) as resumed:
        assert resumed.repaired is None and len(resumed) == 4


def test_other_write_errors_also_roll_back_and_propagate(tmp_path, monkeypatch):
    store = RunStore.create(tmp_path / "run", manifest())
    store.append(make_attempt("run", "t1"))
    before = (tmp_path / "run" / ATTEMPTS).read_bytes()
    real_write = os.write

    def write(fd, data):
        if fd == store._fd:
            real_write(fd, bytes(data)[:10])
            raise OSError(errno.EIO, "Input/output error")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(OSError, match="Input/output error"):
        store.append(make_attempt("run", "t2"))
    monkeypatch.undo()
    assert (tmp_path / "run" / ATTEMPTS).read_bytes() == before
    store.close()
