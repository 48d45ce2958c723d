"""results/rounds.py: the rounds.jsonl of a post-training run, written by the loop and read by the report."""

from __future__ import annotations

import json
import math

import pytest

from results.errors import UserError
from results.rounds import ROUNDS_FILE, append_rounds, load_rounds, normalize_rounds

METRICS = {
    "heldout": {"pass@1": {"value": 0.25, "ci_low": 0.0, "ci_high": 0.5, "n_tasks": 4}},
    "train": {
        "pass@1": {"value": 0.5, "ci_low": 0.25, "ci_high": 0.75},
        "pass@2_t0.7": {"value": 0.75, "ci_low": float("nan"), "ci_high": float("nan")},
    },
}


def test_rows_are_written_in_the_existing_layout_once_each(tmp_path):
    append_rounds(tmp_path, 0, METRICS)
    append_rounds(tmp_path, 0, METRICS)  # a resumed eval phase writes its round again: no duplicates
    append_rounds(tmp_path, 1, {"train": {"pass@1": {"value": 1.0, "ci_low": 1.0, "ci_high": 1.0}}})
    lines = (tmp_path / ROUNDS_FILE).read_text().splitlines()
    # Byte for byte what lora/train.py wrote before this module existed: old runs and new ones read alike.
    assert lines == [
        '{"round": 0, "split": "heldout", "metric": "pass@1", "value": 0.25, "ci_low": 0.0, "ci_high": 0.5}',
        '{"round": 0, "split": "train", "metric": "pass@1", "value": 0.5, "ci_low": 0.25, "ci_high": 0.75}',
        '{"round": 0, "split": "train", "metric": "pass@2_t0.7", "value": 0.75, '
        '"ci_low": NaN, "ci_high": NaN}',
        '{"round": 1, "split": "train", "metric": "pass@1", "value": 1.0, "ci_low": 1.0, "ci_high": 1.0}',
    ]
    rows = load_rounds(tmp_path, run="r")
    assert [(r["run"], r["round"], r["split"], r["metric"], r["value"]) for r in rows] == [
        ("r", 0, "heldout", "pass@1", 0.25),
        ("r", 0, "train", "pass@1", 0.5),
        ("r", 0, "train", "pass@2_t0.7", 0.75),
        ("r", 1, "train", "pass@1", 1.0),
    ]
    assert math.isnan(rows[2]["ci_low"]) and rows[3]["ci_high"] == 1.0


def test_a_torn_last_line_is_skipped_by_readers_and_cut_off_by_the_next_append(tmp_path):
    append_rounds(tmp_path, 0, METRICS)
    path = tmp_path / ROUNDS_FILE
    with open(path, "a") as f:
        f.write('{"round": 1, "spl')  # a crash mid-append
    assert len(load_rounds(tmp_path)) == 3
    append_rounds(tmp_path, 1, {"train": {"pass@1": {"value": 1.0, "ci_low": 1.0, "ci_high": 1.0}}})
    assert [json.loads(line)["round"] for line in path.read_text().splitlines()] == [0, 0, 0, 1]


def test_no_file_no_rows_and_bad_rows_are_named():
    assert normalize_rounds([{"round": 2, "split": "", "pass@1": 0.5}], "extra")[0]["split"] == "all"
    with pytest.raises(UserError, match="extra row 1 is not a round record"):
        normalize_rounds([{"split": "train"}], "extra")


def test_missing_file_reads_as_no_rounds(tmp_path):
    assert load_rounds(tmp_path) == []
