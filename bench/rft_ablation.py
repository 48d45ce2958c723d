#!/usr/bin/env python3
"""The post-training ablation (issue 40): from the same base model (SmolLM2-135M), at an equal budget of
sampled train attempts per round, over several seeds, on the instance and the family held-out splits:

    a  today's loop: rejection sampling, K attempts on every train task (rft-smollm2)
    b  the new loop without hints: the same K x (train tasks) a round spread by solve rate, curriculum
    c  the new loop with hints (rft-curriculum as it is: never-solved tasks sampled from a hint)
    d  the policy-gradient mode (--method grpo): groups of K attempts per train task

    python bench/rft_ablation.py [--out runs/rft-ablation] [--seeds 3] [--rounds 2] [--limit 12] [--samples 2]
    python bench/rft_ablation.py --smoke --out DIR        # minutes: 1 task a split, 1 round, 1 seed
    python bench/rft_ablation.py --recompute bench/figures/rft-ablation   # the table from the kept files

Every run holds out the same 4 whole families (--family-seed 0: 4 domains) and --seed varies sampling and
training. Round 0 (the base model) is measured once per seed: b, c and d resume a's round-0 evals, d
its round-0 train samples too (the same model, tasks and settings; bench/rft_curriculum.share_evals).
Each run's per-task verdicts go to bench/figures/<name>/<method>-seed<S>.json (lora/report.write_verdicts);
the table is computed from those files only, so --recompute gives the same table without the runs.

The table, per method: greedy pass@1 gain over round 0 on instance held-out and on family held-out, of
the model the run hands on (best.json: chosen on train) and of its last round, as the mean +- sd over
seeds and the 95% CI of a bootstrap over families of the per-task gain pooled over seeds
(lora/report.aggregate_seeds); the sampled train attempts per round (the equal budget); the share of
kept trajectories and of trained tokens that came from hinted attempts (every round's data phase,
pooled over seeds; '-' where nothing was trained).

Time, measured (the defaults, on the 2-core machine): 184 min for three seeds, summed over the phases a 64.1
min (its round 0 is everyone's), b 49.8, c 42.7, d 25.8 (bench/figures/rft-ablation/run.txt: rounds 0-1 ran
first, beside a test run, and the folder was resumed for round 2). Hints start from round 1's samples, so
only round 2 on can train on hinted attempts: hence 2 rounds by default.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lora.config import config_from
from lora.report import aggregate_seeds, write_verdicts
from lora.rundir import read_split
from lora.train import run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rft_curriculum import round_walls, share_evals  # bench/rft_curriculum.py
from rft_smollm2 import SMOKE  # bench/rft_smollm2.py

METHODS = {
    "a": "today's loop (rejection sampling)",
    "b": "new loop, no hints",
    "c": "new loop, hints",
    "d": "policy gradient (grpo)",
}
HELDOUT_FAMILIES = 4  # over 4 domains with --family-seed 0 (tasks/family.choose_heldout_families)


def settings(args, seed: int) -> dict[str, dict]:
    """Each method's preset and settings for one seed; b and c's budget is filled in from a's train tasks."""
    sizes = (
        dict(SMOKE)
        if args.smoke
        else {"limit": args.limit, "rounds": args.rounds, "samples": args.samples, "eval_samples": 1}
    )
    common = dict(
        tasks="builtin",
        heldout="builtin",
        heldout_families=HELDOUT_FAMILIES,
        family_seed=0,
        seed=seed,
        **sizes,
    )
    return {
        "a": dict(preset="rft-smollm2", stop_when="no_new_task", **common),
        "b": dict(preset="rft-curriculum", hints=False, **common),
        "c": dict(preset="rft-curriculum", hints=True, **common),
        "d": dict(preset="rft-smollm2", method="grpo", **common),
    }


def run_seed(args, seed: int, figures: Path, log=print) -> dict[str, Path]:
    """The four runs of one seed, a first (its round 0 is everyone's); their verdict files."""
    files = {}
    cfgs = {}
    for m, s in settings(args, seed).items():
        preset = s.pop("preset")
        if m in ("b", "c"):  # a's K x (train tasks), spread by solve rate
            s["budget"] = s["samples"] * len(read_split(cfgs["a"].out)["train"])
        cfgs[m] = cfg = config_from(preset, out=Path(args.out) / f"seed{seed}" / m, **s)
        if m != "a":
            share_evals(cfgs["a"], cfg, log, f"{m} seed {seed}", "a's")
        run(cfg)
        files[m] = write_verdicts(cfg.out, figures / f"{m}-seed{seed}.json")
    return files


def load(figures: Path) -> dict[str, list[dict]]:
    """The verdict files of a table's folder, by method (file names <method>-seed<S>.json)."""
    runs: dict[str, list[dict]] = defaultdict(list)
    paths = sorted(Path(figures).glob("*-seed*.json"))
    if not paths:
        raise SystemExit(f"{figures}: no <method>-seed<S>.json verdict files; run the bench first")
    for path in paths:
        runs[path.name.split("-seed")[0]].append(json.loads(path.read_text(encoding="utf-8")))
    return dict(sorted(runs.items()))


def last_round(v: dict) -> dict:
    """The same run with its last round as its result: aggregate_seeds then measures the last round."""
    last = max(int(r) for r in v["rounds"])
    return {**v, "best": {**(v["best"] or {}), "round": last}}


def hinted_shares(vs: list[dict]) -> tuple[float, float]:
    """The share of kept trajectories and of trained tokens that came from hinted attempts, over every
    round's data phase of every run (nan when nothing was trained). A policy-gradient round's rollouts
    count as kept (none is hinted)."""
    kept = hinted = tokens = hinted_tokens = 0
    for v in vs:
        for rd in v["rounds"].values():
            d = rd.get("data") or {}
            kept += d.get("kept", d.get("examples", 0))
            hinted += d.get("hinted_kept", 0)
            tokens += d.get("target_tokens", 0)
            hinted_tokens += d.get("hinted_target_tokens", 0)
    share = lambda a, b: a / b if b else float("nan")  # noqa: E731
    return share(hinted, kept), share(hinted_tokens, tokens)


def train_attempts(vs: list[dict]) -> float:
    """Sampled train attempts per round, averaged over rounds and runs: the equal budget."""
    counts = [
        sum(
            len(rows)
            for name, rows in rd["runs"].items()
            if name.startswith(("train-sample", "train-hinted"))
        )
        for v in vs
        for rd in v["rounds"].values()
    ]
    return sum(counts) / len(counts) if counts else float("nan")


def hinted_solved(vs: list[dict]) -> str:
    """Sampled hinted attempts solved / run, over every round of every run ('-' where none ran): whether
    the hints helped the model solve anything it then trains on."""
    rows = [
        row
        for v in vs
        for rd in v["rounds"].values()
        for name, rs in rd["runs"].items()
        if name.startswith("train-hinted")
        for row in rs
    ]
    return f"{sum(bool(r[2]) for r in rows)}/{len(rows)}" if rows else "-"


def gain(x: dict | None) -> str:
    if not x:
        return f"{'-':<31}"
    d = x["delta"]
    return f"{d['mean']:+.3f} ±{d['sd']:.3f} [{x['delta_ci_low']:+.3f},{x['delta_ci_high']:+.3f}]"


def share(x: float) -> str:
    return "-" if x != x else f"{x:.3f}"  # nan: nothing was trained


def table(runs: dict[str, list[dict]]) -> list[str]:
    """The ablation table from verdicts (load's): one row per method and model (result, last round)."""
    lines = [
        "greedy pass@1 gain over round 0: mean ±sd over seeds "
        "[95% CI, bootstrap over families, seeds pooled]",
        f"{'method':<36} {'model':<6} {'seeds':>5}  {'r0 inst':>7} {'instance held-out gain':<31}  "
        f"{'r0 fam':>6} {'family held-out gain':<31} {'attempts/rd':>11} {'hinted kept':>11} "
        f"{'hinted tok':>10} {'hinted solved':>13}",
    ]
    for m, vs in runs.items():
        kept, tok = hinted_shares(vs)
        for label, pick in (("result", lambda v: v), ("last", last_round)):
            agg = aggregate_seeds([pick(v) for v in vs], splits=("heldout", "family"))
            base = {s: (agg[s]["base"]["mean"] if s in agg else float("nan")) for s in ("heldout", "family")}
            lines.append(
                f"{m + ' ' + METHODS.get(m, ''):<36} {label:<6} {len(vs):>5}  {base['heldout']:>7.3f} "
                f"{gain(agg.get('heldout')):<31}  {base['family']:>6.3f} {gain(agg.get('family')):<31} "
                f"{train_attempts(vs):>11.1f} {share(kept):>11} {share(tok):>10} {hinted_solved(vs):>13}"
            )
    for m, vs in runs.items():  # why each run ended (a stop rule can end a run before --rounds)
        said = Counter((v.get("stopped") or {}).get("reason", "not recorded") for v in vs)
        lines.append(f"{m} stopped: " + "; ".join(f"{r} (x{n})" for r, n in sorted(said.items())))
    families = {f for vs in runs.values() for v in vs for f in v["split"].get("heldout_families", [])}
    lines.append(f"held-out families: {', '.join(sorted(families)) or 'none'}")
    return lines


def phase_times(out: Path) -> dict[str, float]:
    """Seconds per phase of one run over its rounds: round 0's evals, later evals, fine-tuning/update."""
    times: dict[str, float] = defaultdict(float)
    for rd in Path(out).glob("round_*/metrics.json"):
        m = json.loads(rd.read_text())
        key = "round 0 evals" if m["round"] == 0 else "later evals"
        times[key] += sum(v["seconds"] for v in m["phases"].values())
        times["sft/update"] += float((m.get("sft") or {}).get("seconds", 0) or 0)
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description="\n\n".join(__doc__.split("\n\n")[:2]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", default="runs/rft-ablation", help="folder of the runs; the same folder resumes")
    p.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default 3; --smoke: 1)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--limit", type=int, default=12, help="instances per split, spread over the families")
    p.add_argument("--samples", type=int, default=2, help="K: attempts per train task a round (a, d)")
    p.add_argument("--name", default="rft-ablation", help="the table's name: bench/figures/<name>/")
    p.add_argument("--figures", type=Path, help="where the verdict files go (default bench/figures/<name>)")
    p.add_argument("--smoke", action="store_true", help="tiny: checks the benchmark works (tests)")
    p.add_argument(
        "--recompute", type=Path, metavar="DIR", help="only print the table of DIR's verdict files"
    )
    args = p.parse_args(argv)
    if args.recompute:
        print("\n".join(table(load(args.recompute))))
        return 0
    seeds = args.seeds or (1 if args.smoke else 3)
    default_figures = (
        Path(args.out) / "figures" if args.smoke else Path(__file__).parent / "figures" / args.name
    )
    figures = args.figures or default_figures
    started = time.monotonic()
    for seed in range(seeds):
        run_seed(args, seed, figures)
    wall = time.monotonic() - started
    print("\n".join(table(load(figures))))
    print("phase times (min, summed over seeds):")
    for m in METHODS:
        times: dict[str, float] = defaultdict(float)
        walls = 0.0
        for seed in range(seeds):
            out = Path(args.out) / f"seed{seed}" / m
            for k, v in phase_times(out).items():
                times[k] += v
            walls += sum(round_walls(out).values())
        cells = ", ".join(f"{k} {v / 60:.1f}" for k, v in sorted(times.items()))
        print(f"  {m}: {cells}; all rounds {walls / 60:.1f}")
    for seed in range(seeds):
        for m in METHODS:
            stopped = Path(args.out) / f"seed{seed}" / m / "stopped.json"
            if stopped.exists():
                print(f"{m} seed {seed} stopped: {json.loads(stopped.read_text())['reason']}")
    print(f"wall time {wall / 60:.1f} min; runs in {args.out}, verdicts in {figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
