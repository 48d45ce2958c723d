"""bench/rft_curriculum.py gives the new loop today's round-0 evals of the base model only where the two
loops would run the very same eval; anything that changes an eval's settings keeps it apart."""

from __future__ import annotations

import sys
from argparse import Namespace
from pathlib import Path

from lora.config import config_from
from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import rft_curriculum


def cfgs(tmp_path: Path, **new_settings) -> dict:
    """The bench's two TrainConfigs at its full size, the new loop's changed by `new_settings`."""
    loops = rft_curriculum.loops(Namespace(smoke=False, limit=28, rounds=3, samples=3))
    out = {}
    for name, settings in loops.items():
        preset = settings.pop("preset")
        settings.update(new_settings if name == "new" else {})
        out[name] = config_from(preset, out=tmp_path / name, **settings)
    return out


def finished_evals(cfg) -> None:
    """today's round-0 eval folders, as a finished run leaves them (a manifest, attempts, the lock)."""
    for name in ("heldout-greedy", "heldout-sample", "train-greedy"):
        run = Path(cfg.out) / "round_0" / "eval" / name
        run.mkdir(parents=True)
        (run / "manifest.json").write_text('{"name": "%s"}' % name)
        (run / "attempts.jsonl").write_text('{"key": "%s-0"}\n' % name)
        (run / ".lock").write_text("123\n")


def test_the_same_settings_share_round_0s_evals(tmp_path):
    both = cfgs(tmp_path)
    finished_evals(both["today"])
    said = []
    shared = rft_curriculum.share_round_0(both, log=said.append)
    assert shared == ["heldout-greedy", "heldout-sample", "train-greedy"]
    for name in shared:
        src, dst = (Path(both[k].out) / "round_0" / "eval" / name for k in ("today", "new"))
        assert (dst / "attempts.jsonl").read_text() == (src / "attempts.jsonl").read_text()
        assert (dst / "manifest.json").read_text() == (src / "manifest.json").read_text()
        assert not (dst / ".lock").exists()  # the copy is not held by today's (finished) process
    assert said and "heldout-greedy, heldout-sample, train-greedy" in said[0]


def test_an_eval_that_would_differ_is_not_shared(tmp_path):
    # a different held-out sampling count: the held-out samples differ, the greedy evals do not
    both = cfgs(tmp_path / "a", eval_samples=3)
    finished_evals(both["today"])
    assert rft_curriculum.share_round_0(both, log=lambda s: None) == ["heldout-greedy", "train-greedy"]
    assert not (Path(both["new"].out) / "round_0" / "eval" / "heldout-sample").exists()
    # another seed, reply limit or model: nothing is shared
    for change in ({"seed": 1}, {"max_reply_tokens": 128}, {"concurrency": 4}, {"limit": 14}):
        both = cfgs(tmp_path / str(sorted(change.items())), **change)
        finished_evals(both["today"])
        assert rft_curriculum.share_round_0(both, log=lambda s: None) == [], change
        assert not (Path(both["new"].out) / "round_0").exists(), change


def test_nothing_is_shared_before_today_has_run(tmp_path):
    assert rft_curriculum.share_round_0(cfgs(tmp_path), log=lambda s: None) == []
