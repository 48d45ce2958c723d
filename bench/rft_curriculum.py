#!/usr/bin/env python3
"""Today's rejection-sampling loop beside issue 28's (budget spread by solve rate, curriculum, hints,
honest-only data, stop on no improvement), from the same base model, with the same number of
sampled train attempts per round, on the same held-out instances, in one invocation.

    python bench/rft_curriculum.py [--out runs/rft-curriculum] [--rounds 3] [--limit 28] [--samples 3]
    python bench/rft_curriculum.py --smoke --out DIR   # seconds of model time: 1 task a split, 1 round

Pool: the 14 builtin families (difficulty 1-4, five domains), `--limit` instances per split spread
over the families (28: two of each). Today's loop: K=--samples attempts on every train task, stops
when a round solves no new train task. The new loop: the same K x (train tasks) attempts a round,
spread by lora/curriculum.py, hints on never-solved tasks (trained without them), stops when neither
held-out greedy pass@1 nor the train solve rate improves. Both: SmolLM2-135M, the rft-smollm2
limits (5 steps, 64-token replies) and SFT settings, held-out pass@1 greedy and at t=0.7 (2 samples).

Prints per loop and round: held-out pass@1 greedy and at t=0.7 with the paired bootstrap CI of the
change from round 0, train tasks newly solved (unhinted), hinted/unhinted successes, excluded
attempts, wall time, and the decoder's generated tokens/s per eval phase; each loop's result (the
round best.json names: best train greedy pass@1); then the two loops' last rounds, and their results,
against each other (paired over held-out tasks).

Round 0 measures the base model once: the new loop resumes today's round-0 held-out and train-greedy
evals (the same model, tasks and settings), so its round 0 runs only its own train samples.

Time budget (90 minutes on 2 cores; the first full runs took 42 and 50 minutes, the last one with
round 0 run twice 89.8): per evaluated model 28 held-out x (1 greedy + 2 sampled) + 28 train greedy
+ 84 train samples = 196 attempts of at most 5 steps x 64 tokens, ~6-8 min with the decoder of
issue 28 on a quick machine, 10-13 on a slow one; up to 4 models per loop, fine-tunings of a minute
or two; today's loop usually stops after round 1 or 2.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lora.config import config_from
from lora.phases import eval_config, measure_evals
from lora.train import run
from results.metrics import bootstrap_ci
from results.store import LOCK

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rft_smollm2 import SMOKE  # bench/rft_smollm2.py


def loops(args) -> dict[str, dict]:
    tiny = (
        dict(SMOKE)
        if args.smoke
        else {"limit": args.limit, "rounds": args.rounds, "samples": args.samples, "eval_samples": 2}
    )
    common = dict(tasks="builtin", heldout="builtin", **tiny)
    n_train = tiny["limit"]
    return {
        "today": dict(preset="rft-smollm2", stop_when="no_new_task", **common),
        "new": dict(preset="rft-curriculum", budget=tiny["samples"] * n_train, **common),
    }


def share_round_0(cfgs: dict, log=print) -> list[str]:
    """Gives the new loop today's round-0 evals of the base model (share_evals). Returns their names."""
    return share_evals(cfgs["today"], cfgs["new"], log, "new", "today's")


# What picks a run's tasks besides the suites: runs that differ here evaluate other tasks.
TASK_SETTINGS = ("limit", "tasks", "heldout", "heldout_families", "family_seed", "cheat_probes", "audit_runs")


def share_evals(src, dst, log=print, name: str = "new", whose: str = "today's") -> list[str]:
    """Copies into run `dst`'s round 0 the evals of the base model that run `src` (a TrainConfig, finished
    round 0) ran and `dst` would run the same (the same tasks and EvalConfig but for its folder): `dst`
    resumes each, finding every attempt done, so round 0 measures the base model once. The train samples
    are shared too when both sample K of every train task (no budget). Returns the names shared."""
    evals = {k: v[1:] for k, v in measure_evals(src).items()}
    if src.budget is None and dst.budget is None:
        evals["train-sample"] = (src.samples, src.temperature)
    theirs_evals = {k: v[1:] for k, v in measure_evals(dst).items()}
    theirs_evals.update({"train-sample": (dst.samples, dst.temperature)} if dst.budget is None else {})
    same_tasks = all(getattr(src, k) == getattr(dst, k) for k in TASK_SETTINGS)
    shared = []
    for ev, (samples, temperature) in evals.items():
        s = Path(src.out) / "round_0" / "eval" / ev
        d = Path(dst.out) / "round_0" / "eval" / ev
        ours = eval_config(src, samples, temperature, None, None, src.seed)
        theirs = eval_config(dst, *theirs_evals[ev], None, None, dst.seed) if ev in theirs_evals else None
        if not (same_tasks and ours == theirs and (s / "manifest.json").exists()):
            continue
        if not d.exists():
            shutil.copytree(s, d, ignore=shutil.ignore_patterns(LOCK))
        shared.append(ev)
    if shared:
        log(f"{name}: round 0's {', '.join(shared)} evals are {whose} (the same base model and settings)")
    return shared


def table(name: str, out: Path, wall: dict[int, float], shared: tuple = ()) -> list[str]:
    lines = []
    solved_before: set[str] = set()
    for rd in sorted(out.glob("round_*"), key=lambda p: int(p.name.split("_")[1])):
        m = json.loads((rd / "metrics.json").read_text()) if (rd / "metrics.json").exists() else None
        if m is None:
            continue
        r = m["round"]
        held = m["metrics"].get("heldout", {})
        cells = []
        for metric in ("pass@1", "pass@1_t0.7"):
            x = held.get(metric, {})
            cells.append(f"{x.get('value', float('nan')):.3f}{delta(x)}")
        train_runs = {k: v for k, v in m["phases"].items() if k.startswith("train-sample")}
        solved = set()
        for k in train_runs:
            for rate in _rates(out, r, k):
                if rate["solved"]:
                    solved.add(rate["task_id"])
        new = len(solved - solved_before)
        solved_before |= solved
        data = m.get("data") or {}
        excluded = sum((data.get("excluded") or {}).values()) if data else 0
        speed = ", ".join(
            f"{k} {v['tokens_per_second']:.1f}"
            for k, v in m["phases"].items()
            if v.get("tokens_per_second") and not (r == 0 and k in shared)
        ) + (" (round 0's evals: today's)" if r == 0 and shared else "")
        ts = m.get("train_successes", {})
        lines.append(
            f"{name:<6} {r:>5}  {cells[0]:<30} {cells[1]:<30} {new:>4} {ts.get('unhinted', 0):>5}/"
            f"{ts.get('hinted', 0):<5} {excluded:>8} {wall.get(r, float('nan')) / 60:>7.1f}  {speed}"
        )
    return lines


def _rates(out: Path, r: int, run: str) -> list[dict]:
    path = out / "task_rates.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    return [x for x in rows if x["round"] == r and x["run"] == run]


def round_walls(out: Path) -> dict[int, float]:
    """Seconds per round: its eval phases plus its fine-tuning."""
    walls = {}
    for rd in out.glob("round_*"):
        if (rd / "metrics.json").exists():
            m = json.loads((rd / "metrics.json").read_text())
            sft = (m.get("sft") or {}).get("seconds", 0) or 0
            walls[m["round"]] = sum(v["seconds"] for v in m["phases"].values()) + float(sft)
    return walls


def delta(x: dict) -> str:
    """' +d [lo,hi]': a metric's change from round 0 with its CI; '' for round 0."""
    return f" {x['delta']:+.3f} [{x['delta_ci_low']:+.3f},{x['delta_ci_high']:+.3f}]" if "delta" in x else ""


def last_round(out: Path) -> int:
    return json.loads((out / "best.json").read_text())["last_round"]


def result_round(out: Path) -> int:
    """The round the run hands on (best.json: best train greedy pass@1)."""
    return json.loads((out / "best.json").read_text())["round"]


def heldout_greedy(out: Path, r: int) -> dict:
    return json.loads((out / f"round_{r}" / "metrics.json").read_text())["metrics"]["heldout"]["pass@1"]


def head_to_head(outs: dict[str, Path], pick=last_round, label: str = "last rounds") -> str:
    """The two loops' rounds chosen by `pick`, held-out greedy pass@1, paired over tasks."""
    per_task = {name: heldout_greedy(out, pick(out))["per_task"] for name, out in outs.items()}
    common = sorted(set(per_task["new"]) & set(per_task["today"]))
    diffs = [per_task["new"][t] - per_task["today"][t] for t in common]
    lo, hi = bootstrap_ci(diffs)
    mean = sum(diffs) / len(diffs) if diffs else float("nan")
    return (
        f"new - today, {label}, held-out greedy pass@1: {mean:+.3f} [{lo:+.3f}, {hi:+.3f}] "
        f"over {len(common)} tasks"
    )


def result_line(name: str, out: Path) -> str:
    best = json.loads((out / "best.json").read_text())
    x = heldout_greedy(out, best["round"])
    return (
        f"{name}: result: round {best['round']} of {best['last_round']} (train greedy pass@1 "
        f"{best['train_greedy']:.3f}), held-out greedy {x['value']:.3f}{delta(x)}"
        + (" vs r0" if "delta" in x else "")
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--out", default="runs/rft-curriculum", help="folder of the two runs; the same folder resumes"
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--limit", type=int, default=28, help="instances per split, spread over the families")
    p.add_argument("--samples", type=int, default=3, help="K: today's attempts per train task a round")
    p.add_argument("--smoke", action="store_true", help="tiny: checks the benchmark works (tests)")
    args = p.parse_args(argv)
    outs, walls, cfgs = {}, {}, {}
    shared: list[str] = []
    started = time.monotonic()
    for name, settings in loops(args).items():
        preset = settings.pop("preset")
        cfgs[name] = cfg = config_from(preset, out=Path(args.out) / name, **settings)
        if name == "new":
            shared = share_round_0(cfgs)
        run(cfg)
        outs[name] = Path(cfg.out)
        walls[name] = round_walls(outs[name])
    print(
        f"{'loop':<6} {'round':>5}  {'held-out greedy (d vs r0 CI)':<30} {'held-out t=0.7 (d vs r0 CI)':<30} "
        f"{'new':>4} {'unhinted/hinted':<11} {'excluded':>8} {'wall min':>7}  decoder tokens/s per phase"
    )
    for name, out in outs.items():
        print("\n".join(table(name, out, walls[name], tuple(shared) if name == "new" else ())))
        stopped = out / "stopped.json"
        if stopped.exists():
            print(f"{name}: stopped: {json.loads(stopped.read_text())['reason']}")
        print(result_line(name, out))
    print(head_to_head(outs))
    print(head_to_head(outs, result_round, "results (best.json)"))
    print(f"wall time {((time.monotonic() - started) / 60):.1f} min; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
