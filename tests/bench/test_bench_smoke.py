"""Every benchmark under bench/ runs in its --smoke mode (tiny sizes), so none can rot unnoticed.
The figures themselves are not checked (they depend on the machine); that each table is printed whole is."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT

# Not inner-loop material (`make test-fast` leaves them out); `make test` runs every one.
pytestmark = pytest.mark.slow

NUMBER = r"[0-9.]+"


def bench(*args: str, timeout: float = 900) -> str:
    p = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    return p.stdout


def test_sandbox_bench_smoke(image):
    out = bench("bench/sandbox.py", "--smoke")
    for row in (
        "acquire (warm pool) vs docker run -d",
        "cold start vs docker run -d",
        "exec `true` (argv, pool idle) vs docker exec",
        "exec `true` (argv, pool refilling) vs docker exec",
        "exec `true` (bash -c, pool idle) vs docker exec",
        "create+destroy cycle vs run -d + rm -f",
    ):
        assert re.search(
            re.escape(row) + rf"\s+{NUMBER}ms\s+{NUMBER}ms\s+{NUMBER}ms\s+{NUMBER}ms\s+{NUMBER}x", out
        ), out
    assert re.search(rf"per second: harness {NUMBER}, CLI {NUMBER}", out), out
    # The argv exec with the pool idle and while it refills, side by side: both measured (calls made in
    # each condition, as many in both), the same figures as in the table, and the ratio the figures give.
    m = re.search(
        rf"exec `true` \(argv\), one sandbox, interleaved: pool idle p50 ({NUMBER})ms p95 ({NUMBER})ms "
        rf"\(([0-9]+) calls\); pool refilling p50 ({NUMBER})ms p95 ({NUMBER})ms \(([0-9]+) calls\); "
        rf"refilling / idle: p50 ({NUMBER})x, p95 ({NUMBER})x",
        out,
    )
    assert m, out
    idle50, idle95, idle_n, busy50, busy95, busy_n, r50, r95 = (float(g) for g in m.groups())
    assert idle_n == busy_n > 0, out  # as many calls in each condition, round by round
    assert 0 < idle50 <= idle95 and 0 < busy50 <= busy95, out
    assert r50 == pytest.approx(busy50 / idle50, rel=0.02, abs=0.01), out
    assert r95 == pytest.approx(busy95 / idle95, rel=0.02, abs=0.01), out
    for cond, p50 in (("idle", idle50), ("refilling", busy50)):
        row = re.search(rf"exec `true` \(argv, pool {cond}\) vs docker exec\s+({NUMBER})ms", out)
        assert float(row.group(1)) == pytest.approx(p50, abs=0.01), out


def test_loop_bench_smoke(image):
    out = bench("bench/loop.py", "--smoke")
    assert re.search(
        rf"per step: loop {NUMBER} ms, sandbox exec {NUMBER} ms, harness overhead -?{NUMBER} ms", out
    ), out
    # concurrency, att/min, % of the container ceiling, with batch grading, batch/plain, (no mini-swe-agent)
    rows = re.findall(
        rf"^\s+(\d+)\s+({NUMBER})\s+{NUMBER}%\s+({NUMBER})\s+{NUMBER}x\s+nan\s+-$", out, flags=re.M
    )
    assert [c for c, _, _ in rows] == ["1", "2"], out
    assert all(float(plain) > 0 and float(batch) > 0 for _, plain, batch in rows), out
    assert re.search(rf"container ceiling, measured in this run: {NUMBER} containers", out), out
    # the per-phase breakdown at the top concurrency, both ways
    assert "per-phase breakdown, concurrency 2, batch grading off" in out, out
    assert re.search(r"per-phase breakdown, concurrency 2, batch grading [0-9]+,", out), out
    assert re.search(rf"CPU per attempt: harness process {NUMBER} ms", out), out
    assert re.search(
        rf"the whole machine \(/proc/stat\): {NUMBER} ms of CPU per attempt, {NUMBER}% busy", out
    ), out
    for mode in ("off", "file", "live"):  # tracing off, to a file, to a live OTLP receiver
        assert re.search(
            rf"^\s+{mode}\s+{NUMBER}\s+{NUMBER}x\s+-?{NUMBER}\s+{NUMBER}\s+[+-]{NUMBER}  [0-9. ]+$",
            out,
            flags=re.M,
        ), out
    assert re.search(rf"off: the hooks of one step take {NUMBER} ns", out), out


def test_lora_bench_smoke():  # two processes importing torch + transformers + peft: ~2 min on a busy machine
    out = bench("bench/lora.py", "--smoke")
    assert re.search(rf"tiny\s+64 ours\s+{NUMBER}", out) and re.search(
        rf"tiny\s+64 baseline\s+{NUMBER}", out
    ), out
    assert re.search(rf"ratio\s+{NUMBER}x", out), out


@pytest.mark.model
def test_local_decode_bench_smoke():
    out = bench("bench/local_decode.py", "--smoke")
    assert "2 conversations x 1 turns" in out
    assert re.search(r"static batches \(before\)\s+\d+\s+\d+", out) and re.search(
        r"ours: continuous \+ reuse\s+\d+", out
    )
    assert re.search(rf"ratio \(ours / before\): generated tokens per second {NUMBER}x", out), out


@pytest.mark.model
def test_rft_bench_smoke(image, tmp_path):
    out = bench("bench/rft_smollm2.py", "--smoke", "--out", str(tmp_path / "rft"), timeout=1800)
    assert re.search(
        rf"wall time {NUMBER} min; results in {re.escape(str(tmp_path / 'rft'))}/rounds.jsonl", out
    ), out
    assert (tmp_path / "rft" / "rounds.jsonl").read_text().strip()


@pytest.mark.model
def test_local_decode_long_run_smoke():
    out = bench("bench/local_decode.py", "--long", "--smoke")
    assert "4 attempts (2 prompts x 2)" in out
    for decoder in ("one padded cache", "ours"):
        assert re.search(rf"{decoder}\s+early\s+{NUMBER}", out) and re.search(rf"{decoder}\s+late\s+", out), (
            out
        )
        assert re.search(rf"{decoder}: late / early tokens per second {NUMBER}", out), out


@pytest.mark.model
@pytest.mark.slow
def test_rft_curriculum_bench_smoke(image, tmp_path):
    out = bench("bench/rft_curriculum.py", "--smoke", "--out", str(tmp_path / "rc"), timeout=1800)
    assert re.search(r"^today\s+0\s+", out, re.M) and re.search(r"^new\s+0\s+", out, re.M), out
    assert "new - today, last rounds, held-out greedy pass@1" in out
    # round 0 measures the base model once for both loops: the new loop resumed today's evals
    shared = "heldout-greedy, heldout-sample, train-greedy"
    # (and the cheat probes, where the train tasks have impossible variants)
    assert re.search(rf"^new: round 0's {shared}(, impossible-sample)? evals are today's", out, re.M), out
    for name in shared.split(", "):
        today, new = (
            (tmp_path / "rc" / loop / "round_0" / "eval" / name / "attempts.jsonl").read_text()
            for loop in ("today", "new")
        )
        assert today.strip() and today == new, name
    held = [
        json.loads((tmp_path / "rc" / loop / "round_0" / "metrics.json").read_text())["metrics"]["heldout"]
        for loop in ("today", "new")
    ]
    assert held[0]["pass@1"]["per_task"] == held[1]["pass@1"]["per_task"]
    assert "new - today, results (best.json), held-out greedy pass@1" in out
    for loop in ("today", "new"):
        assert re.search(rf"^{loop}: result: round \d+ of \d+ \(train greedy pass@1 {NUMBER}\)", out, re.M), (
            out
        )
        assert json.loads((tmp_path / "rc" / loop / "stopped.json").read_text())["reason"]
        assert (tmp_path / "rc" / loop / "task_rates.jsonl").read_text().strip()


@pytest.mark.model
def test_hint_forms_bench_smoke():
    out = bench("bench/hint_forms.py", "--smoke")
    for form in ("none", "text", "sibling", "hint"):
        assert re.search(rf"^\S+\s+{form}\s+\d+/2\s+\[", out, re.M), out
    assert re.search(r"all families: none \d+/2, text \d+/2, sibling \d+/2, hint \d+/2", out), out
