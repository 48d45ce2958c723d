"""lora/report.py: the per-task verdicts a reported run keeps in the repo, and seeds aggregated from them."""

from __future__ import annotations

import json

import pytest
from test_lora_honest import FamilyBackend
from test_lora_train import config

import lora.train as lt
from lora.report import aggregate_seeds, greedy, verdicts, write_verdicts
from results.rounds import load_rounds


def learner(seed: int):
    """Round 0 solves instance 0 of every family; an adapter adds instance 1 of families f0..f(seed)."""

    def solves(task_id, sample, adapter):
        fam, _split, i = task_id.split("-")
        return i == "0" or (adapter is not None and int(fam[1:]) <= seed)

    return solves


def test_verdicts_are_recomputable_and_seeds_aggregate_with_a_family_bootstrap(tmp_path):
    files = []
    for seed in range(3):
        cfg = config(tmp_path / f"s{seed}", rounds=1, seed=seed, heldout_families=4, family_seed=1)
        out = lt.run(cfg, FamilyBackend(learner(seed)).backend(), log=lambda _: None)
        files.append(write_verdicts(out, tmp_path / "figures" / f"seed{seed}.json"))
        v = json.loads(files[-1].read_text())
        # the kept rows give back the rounds table's greedy figures
        for r in (0, 1):
            for split in ("heldout", "family", "train"):
                row = [
                    x
                    for x in load_rounds(out)
                    if (x["round"], x["split"], x["metric"]) == (r, split, "pass@1")
                ]
                g = greedy(v, r, split)
                assert sum(g.values()) / len(g) == pytest.approx(row[0]["value"])
        assert v == verdicts(out) and v["split"]["heldout_families"] and v["rounds"]["1"]["data"]["examples"]
        # what the run cost and why it stopped travel with its verdicts
        assert v["stopped"]["reason"] == json.loads((out / "stopped.json").read_text())["reason"]
        assert set(v["rounds"]["0"]["seconds"]) == set(v["rounds"]["0"]["runs"])
        sft = json.loads((out / "round_1" / "metrics.json").read_text())["sft"]
        assert v["rounds"]["1"]["seconds"].get("sft/update") == sft.get("seconds")
    agg = aggregate_seeds(files)
    held = json.loads(files[0].read_text())["split"]["heldout_families"]
    # by hand: on the family split every seed's result round adds instance 1 of the held families f0..f(seed)
    # (the fake's adapter ignores the split: here it only shows the arithmetic)
    fam_tasks = json.loads(files[0].read_text())["split"]["family"]
    by_seed = []
    for seed in range(3):
        best = json.loads(files[seed].read_text())["best"]["round"]
        gained = [t for t in fam_tasks if best == 1 and t.endswith("-1") and int(t.split("-")[0][1:]) <= seed]
        by_seed.append(len(gained) / len(fam_tasks))
    fam = agg["family"]
    assert fam["tasks"] == len(fam_tasks) and fam["families"] == len(held)
    assert fam["delta"]["mean"] == pytest.approx(sum(by_seed) / 3)
    assert fam["delta"]["min"] == pytest.approx(min(by_seed)) and fam["delta"]["max"] == pytest.approx(
        max(by_seed)
    )
    assert fam["delta_ci_low"] <= fam["delta"]["mean"] <= fam["delta_ci_high"]
    assert agg["runs"] == 3 and set(agg) >= {"heldout", "family", "train"}


def test_the_greedy_verdicts_leave_infra_errors_out():
    v = {
        "rounds": {
            "0": {
                "runs": {
                    "heldout-greedy": [
                        ["a", 0, True, False, False, False],
                        ["b", 0, None, False, False, False],
                    ]
                }
            }
        }
    }
    assert greedy(v, 0, "heldout") == {"a": 1.0}
    assert greedy(v, 1, "heldout") == {}
