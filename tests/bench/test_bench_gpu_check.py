"""bench/gpu_check.py --cpu: the GPU check's smoke mode, so the script cannot rot between the rare runs on a
GPU. Each section must have run (nothing skipped or failed) with sane figures, the decoder's greedy tokens
must equal model.generate's, and the train round must have trained an adapter and evaluated with it."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.py"


def run_check(tmp_path: Path, *args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "check.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert out.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    proc, report = run_check(tmp_path_factory.mktemp("gpu_check"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return report


@pytest.mark.slow  # ~15 s alone, more on a busy machine
def test_every_section_ran(smoke):
    assert smoke["mode"] == "cpu" and smoke["device"].startswith("cpu")
    assert set(smoke["sections"]) == {"sft", "decode", "e2e", "pg"}
    for name, section in smoke["sections"].items():
        assert "skipped" not in section and "error" not in section, (name, section)


@pytest.mark.slow  # ~15 s alone, more on a busy machine
def test_sft_rows_for_both_trainers_with_sane_figures(smoke):
    sft = smoke["sections"]["sft"]
    assert sft["peak_flops"] > 0
    rows = sft["rows"]
    assert {(r["seq"], r["trainer"]) for r in rows} == {
        (seq, trainer) for seq in (64, 128) for trainer in ("ours", "baseline")
    }
    for r in rows:
        assert "skipped" not in r and "error" not in r, r
        assert r["tokens_per_s"] > 0 and 0 < r["mfu"] < 1 and r["peak_mem_bytes"] > 0
        assert r["steps_run"] >= 1 and all(math.isfinite(x) and x > 0 for x in r["losses"])
        assert 0 <= r["padding"] < 1
    assert [(r["seq"], r["speedup_vs_baseline"] > 0) for r in sft["ratios"]] == [(64, True), (128, True)]
    assert sft["targets"]["speedup"] == 1.5 and sft["targets"]["mfu_1.5b_4k"] == 0.35
    assert set(sft["targets"]["speedup_met"]) == {"tiny/64", "tiny/128"}


@pytest.mark.slow  # ~15 s alone, more on a busy machine
def test_decoder_matches_generate_and_reports_throughput_and_ttft(smoke):
    dec = smoke["sections"]["decode"]
    parity = dec["parity"]
    assert parity["ok"] and parity["equal_rows"] == parity["rows"] == 4 and parity["tokens_compared"] > 0
    assert [r["concurrency"] for r in dec["rows"]] == [1, 4, 8]
    for r in dec["rows"]:
        for path in ("decoder", "generate", "decoder-t0.7"):
            m = r[path]
            assert m["tokens"] > 0 and m["tokens_per_s"] > 0 and m["steps_per_s"] > 0
            assert 0 < m["ttft_mean_s"] <= m["ttft_max_s"] <= m["seconds"]
        assert r["speedup"] > 0
    assert dec["max_batch"] >= 8


@pytest.mark.slow  # ~15 s alone, more on a busy machine
def test_train_round_trains_an_adapter_and_evaluates_with_it(smoke):
    e2e = smoke["sections"]["e2e"]
    assert e2e["sft_device"] == "cpu"
    assert e2e["examples"] >= 1 and e2e["target_tokens"] > 0  # the replayed oracle trajectories
    assert e2e["sft"]["steps"] == 2 and e2e["sft"]["final_loss"] < e2e["sft"]["first_loss"]
    assert e2e["adapter_saved"] and e2e["round1_adapter"].endswith("round_1/adapter")
    assert e2e["round1_evals_with_adapter"] == 4
    teacher = [e["run"] for e in e2e["evals"] if e["teacher"]]
    assert teacher == ["round_0/train-sample"]
    rows = {(r["round"], r["split"], r["metric"]): r["value"] for r in e2e["rows"]}
    assert rows[(0, "train", "pass@1_t0.7")] == 1.0  # the oracle's replies, graded (or compared) for real
    assert {k[0] for k in rows} == {0, 1}


@pytest.mark.slow  # ~15 s alone, more on a busy machine
def test_policy_gradient_update_moves_the_rewarded_attempts_up(smoke):
    """--method grpo's update (lora/grpo.update) on a random model: steps taken, no clipping at the first
    (pi_theta = pi_old), a KL that starts at 0 (a fresh adapter is the base) and grows, and the rewarded
    attempts' log-probability up, the others' down."""
    [row] = smoke["sections"]["pg"]["rows"]
    assert row["steps"] == 3 and row["rollouts"] == 8 and row["tokens_per_s"] > 0
    assert row["clipped_share"][0] == 0 and row["kl"][0] == pytest.approx(0, abs=1e-7) and row["kl"][-1] > 0
    assert (row["rewarded_up"], row["others_down"]) == (row["rewarded"], row["others"]) == (2, 6)


@pytest.mark.slow
def test_budget_guard_stops_and_says_so(tmp_path):
    proc, report = run_check(tmp_path, "--budget", "1", timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sections = report["sections"]
    assert set(sections) == {"sft", "decode", "e2e", "pg"}
    skipped = [
        name
        for name, s in sections.items()
        if "budget" in str(s.get("skipped", ""))
        or any("budget" in str(r.get("skipped", "")) for r in s.get("rows", []))
    ]
    assert "e2e" in skipped and "decode" in skipped and "pg" in skipped


@pytest.mark.slow  # ~15 s alone, more on a busy machine
def test_train_round_without_docker_as_on_a_bare_gpu_machine(tmp_path):
    """The e2e path a GPU machine takes: no Docker SDK importable, so each eval is the model's first reply
    compared with the oracle's; data -> SFT -> adapter -> eval with the adapter must still all run."""
    out = tmp_path / "e2e.json"
    code = (
        "import runpy, sys; sys.modules['docker'] = None; "  # import docker -> ImportError
        f"sys.argv = ['gpu_check.py', '--cpu', '--only', 'e2e', '--out', {str(out)!r}]; "
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["sections"]) == {"e2e"}
    e2e = report["sections"]["e2e"]
    assert e2e["sandbox"] == "none" and e2e["adapter_saved"] and e2e["round1_evals_with_adapter"] == 4
    assert e2e["examples"] >= 1 and e2e["sft"]["final_loss"] < e2e["sft"]["first_loss"]
    rows = {(r["round"], r["split"], r["metric"]): r["value"] for r in e2e["rows"]}
    assert rows[(0, "train", "pass@1_t0.7")] == 1.0 and {k[0] for k in rows} == {0, 1}
