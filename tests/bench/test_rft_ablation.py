"""bench/rft_ablation.py: its table from verdict files alone (--recompute), checked against a hand
computation; which of a's round-0 evals each other method resumes; and its --smoke run end to end."""

from __future__ import annotations

import json
import re
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from lora.config import config_from
from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import rft_ablation

FAMILIES = {"t1": "F1", "t2": "F1", "t3": "F2", "t4": "F2", "u1": "G1", "u2": "G1", "u3": "G2", "u4": "G2"}


def rows(solved: dict[str, int]) -> list[list]:
    """Greedy verdict rows (task, sample, solved, flagged, tamper, impossible)."""
    return [[t, 0, bool(s), False, False, False] for t, s in sorted(solved.items())]


def rnd(heldout: list[int], family: list[int], train: dict[str, int], data: dict | None = None) -> dict:
    runs = {
        "heldout-greedy": rows(dict(zip(("t1", "t2", "t3", "t4"), heldout))),
        "family-greedy": rows(dict(zip(("u1", "u2", "u3", "u4"), family))),
        **{name: [["x", i, False, False, False, False] for i in range(n)] for name, n in train.items()},
    }
    return {"runs": runs, "data": data or {}}


def verdicts(best: int, rounds: list[dict]) -> dict:
    return {
        "fields": ["task_id", "sample", "solved", "flagged", "tamper", "impossible"],
        "config": {},
        "split": {"heldout_families": ["G1", "G2"], "families": FAMILIES},
        "best": {"round": best, "last_round": len(rounds) - 1},
        "rounds": {str(i): r for i, r in enumerate(rounds)},
    }


def write_figures(folder: Path) -> None:
    """Method a over 2 seeds (result = round 1), method c over 1 seed (result = round 0, not its last)."""
    zero = [0, 0, 0, 0]
    plain = {"kept": 2, "hinted_kept": 0, "target_tokens": 50, "hinted_target_tokens": 0}
    hinted = {"kept": 4, "hinted_kept": 3, "target_tokens": 200, "hinted_target_tokens": 120}
    files = {
        "a-seed0": verdicts(
            1, [rnd(zero, zero, {"train-sample": 8}), rnd([1, 1, 0, 0], zero, {"train-sample": 8}, plain)]
        ),
        "a-seed1": verdicts(
            1, [rnd(zero, zero, {"train-sample": 8}), rnd([1, 0, 0, 0], zero, {"train-sample": 8}, plain)]
        ),
        "c-seed0": verdicts(
            0,
            [
                rnd(zero, zero, {"train-sample-x2": 4, "train-hinted-x2": 4}),
                rnd(zero, [1, 1, 0, 0], {"train-sample-x2": 8}, hinted),
            ],
        ),
    }
    files["a-seed0"]["stopped"] = {"round": 1, "reason": "reached the last round (1)"}
    folder.mkdir(parents=True)
    for name, v in files.items():
        (folder / f"{name}.json").write_text(json.dumps(v))


def row(out: str, method: str, model: str) -> str:
    m = re.search(rf"^{method} .*? {model} .*$", out, re.M)
    assert m, out
    return m.group(0)


def test_recompute_gives_the_table_of_a_hand_computation(tmp_path, capsys):
    write_figures(tmp_path / "fig")
    assert rft_ablation.main(["--recompute", str(tmp_path / "fig")]) == 0
    out = capsys.readouterr().out
    # a, instance held-out: per seed gains 2/4 and 1/4 (mean 0.375, sd 0.177); the per-task gain pooled over
    # the seeds is t1 1, t2 0.5, t3 0, t4 0: family F1's mean 0.75, F2's 0, so resampling the two families
    # gives 0 (F2 twice) and 0.75 (F1 twice) at the 2.5% and 97.5% points. Family held-out: nothing moved.
    a = row(out, "a", "result")
    assert "+0.375 ±0.177 [+0.000,+0.750]" in a, a
    assert "+0.000 ±0.000 [+0.000,+0.000]" in a, a
    assert re.search(r" 2\s+0\.000 ", a), a  # 2 seeds, base 0
    assert re.search(r"8\.0\s+0\.000\s+0\.000\s+-$", a), a  # 8 train attempts a round; nothing hinted
    assert row(out, "a", "last") == a.replace(" result ", " last   ")  # its result is its last round
    # c hands on round 0 (chosen on train): no gain; its last round gained G1 (2 of 4 family tasks)
    c, c_last = row(out, "c", "result"), row(out, "c", "last")
    assert c.count("+0.000 ±0.000 [+0.000,+0.000]") == 2, c
    assert "+0.500 ±0.000 [+0.000,+1.000]" in c_last, c_last
    # 3 of 4 kept trajectories and 120 of 200 trained tokens came from hinted attempts; 8 attempts a round;
    # its 4 hinted samples (round 0) solved nothing
    assert re.search(r"8\.0\s+0\.750\s+0\.600\s+0/4$", c), c
    assert "held-out families: G1, G2" in out
    assert "a stopped: not recorded (x1); reached the last round (1) (x1)" in out


def test_recompute_refuses_a_folder_without_verdicts(tmp_path):
    with pytest.raises(SystemExit, match="no <method>-seed<S>.json verdict files"):
        rft_ablation.main(["--recompute", str(tmp_path)])


def finished_evals(cfg, names) -> None:
    for name in names:
        run = Path(cfg.out) / "round_0" / "eval" / name
        run.mkdir(parents=True)
        (run / "manifest.json").write_text("{}")


def test_round_0_is_shared_where_the_settings_allow(tmp_path):
    args = Namespace(smoke=False, limit=12, rounds=1, samples=2)
    cfgs = {}
    for m, s in rft_ablation.settings(args, seed=0).items():
        preset = s.pop("preset")
        if m in ("b", "c"):
            s["budget"] = 24
        cfgs[m] = config_from(preset, out=tmp_path / m, **s)
    measure = ["heldout-greedy", "heldout-sample", "train-greedy", "family-greedy", "impossible-sample"]
    finished_evals(cfgs["a"], [*measure, "train-sample"])
    log = lambda s: None  # noqa: E731
    # b and c spread their budget: only the evals of the base model; d samples as a does: its samples too
    for m in ("b", "c"):
        assert rft_ablation.share_evals(cfgs["a"], cfgs[m], log) == measure, m
    assert rft_ablation.share_evals(cfgs["a"], cfgs["d"], log) == [*measure, "train-sample"]
    # another seed shares nothing
    seed1 = rft_ablation.settings(args, seed=1)["a"]
    other = config_from(seed1.pop("preset"), out=tmp_path / "a1", **seed1)
    assert rft_ablation.share_evals(cfgs["a"], other, log) == []


@pytest.mark.slow
@pytest.mark.model
def test_rft_ablation_smoke(image, tmp_path):
    from tests.bench.test_bench_smoke import bench

    out = bench("bench/rft_ablation.py", "--smoke", "--out", str(tmp_path / "ab"), timeout=1800)
    for m in "abcd":
        assert re.search(rf"^{m} .* result\s+1\s", out, re.M), out
        assert (tmp_path / "ab" / "figures" / f"{m}-seed0.json").exists()
    # round 0 measured once: b, c and d resumed a's base-model evals (d its train samples too)
    a0 = tmp_path / "ab" / "seed0" / "a" / "round_0" / "eval"
    for m in "bcd":
        for name in ("heldout-greedy", "family-greedy", "train-greedy"):
            mine = (tmp_path / "ab" / "seed0" / m / "round_0" / "eval" / name / "attempts.jsonl").read_text()
            assert mine.strip() and mine == (a0 / name / "attempts.jsonl").read_text(), (m, name)
    assert "held-out families: fix-operator, mean-value, sum-column, word-count" in out
    assert re.search(r"^wall time [0-9.]+ min", out, re.M), out
    # the table rebuilt from the verdict files alone is the one printed
    again = bench("bench/rft_ablation.py", "--recompute", str(tmp_path / "ab" / "figures"))
    assert again.strip() in out
