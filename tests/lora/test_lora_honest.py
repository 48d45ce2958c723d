"""Issue 40 in lora/train.py: the family-held-out split, nothing held out steering the run, the cheating
signs per round, family-clustered CIs in the round metrics."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from lora_fakes import attempt, rollout
from test_lora_train import FakeBackend, config, rows

import lora.phases as lp
import lora.round_metrics as lrm
import lora.rundir as lrd
import lora.train as lt
from results.errors import UserError
from results.schema import Flag

DOMAINS = {
    "f0": "data",
    "f1": "data",
    "f2": "ops",
    "f3": "ops",
    "f4": "science",
    "f5": "coding",
    "f6": "documents",
}


class FamilyBackend(FakeBackend):
    """Seven families over five domains, two instances of each per split; every eval's tasks are kept."""

    def __init__(self, solves, **kw):
        super().__init__(solves, **kw)
        self.seen: list[tuple[str, list[str]]] = []  # (eval name, task ids)

    def load_tasks(self, spec, split):
        return [
            SimpleNamespace(id=f"{f}-{split}-{i}", family=f, domain=d, difficulty=1)
            for f, d in DOMAINS.items()
            for i in range(2)
        ]

    def run_eval(self, cfg, tasks):
        self.seen.append((Path(cfg.out).name, [t.id for t in tasks]))
        return super().run_eval(cfg, tasks)


def never(task_id, sample, adapter):
    return False


def solves_train_f(task_id, sample, adapter):
    return task_id.endswith("-0")


def test_held_out_families_are_never_sampled_for_training_and_the_manifest_names_them(tmp_path):
    fake = FamilyBackend(solves_train_f)
    out = lt.run(config(tmp_path, heldout_families=4, family_seed=3), fake.backend(), log=lambda _: None)
    split = json.loads((out / "split.json").read_text())
    held = split["heldout_families"]
    assert len(held) == 4 and len({DOMAINS[f] for f in held}) >= 3
    assert split["domains"] == {f: DOMAINS[f] for f in held}
    family_of = lambda t: t.split("-")[0]  # noqa: E731
    trained_on = [t for name, ids in fake.seen if name.startswith("train") for t in ids]
    assert trained_on and not {family_of(t) for t in trained_on} & set(held)
    for name, ids in fake.seen:
        if name == "family-greedy":  # the held-out families' heldout instances, and only those
            assert {family_of(t) for t in ids} == set(held) and all("-heldout-" in t for t in ids)
        elif name.startswith("heldout"):  # instance held-out: the trained families' other instances
            assert not {family_of(t) for t in ids} & set(held)
    assert set(split["family"]) == {t for name, ids in fake.seen if name == "family-greedy" for t in ids}
    assert not {family_of(t) for t in split["train"]} & set(held)
    # nothing of theirs was trained on either
    for r in (1, 2):
        data = json.loads((out / f"round_{r}" / "data.done.json").read_text())
        assert not {family_of(t) for t in data["tasks"]} & set(held)
    assert {x["split"] for x in rows(out)} == {"train", "heldout", "family"}
    assert "family_greedy" in json.loads((out / "best.json").read_text())
    # the same seed chooses the same families; the choice is the manifest's, not the task order's
    again = FamilyBackend(solves_train_f)
    lt.run(config(tmp_path / "b", heldout_families=4, family_seed=3), again.backend(), log=lambda _: None)
    assert json.loads((tmp_path / "b" / "run" / "split.json").read_text())["heldout_families"] == held


def test_a_guard_refuses_to_sample_a_held_out_family_for_training(tmp_path):
    fake = FamilyBackend(solves_train_f)
    cfg = config(tmp_path, heldout_families=4, rounds=0)
    lt.run(cfg, fake.backend(), log=lambda _: None)
    held = json.loads((cfg.out / "split.json").read_text())["heldout_families"]
    sneaked = [SimpleNamespace(id=f"{held[0]}-train-0", family=held[0], domain="data", difficulty=1)]
    (cfg.out / "round_0" / "eval.done.json").unlink()
    with pytest.raises(RuntimeError, match="held-out family"):
        lp._eval_phase(cfg, fake.backend(), cfg.out, 0, None, sneaked, [], lambda _: None)


def test_choose_heldout_families_spreads_over_domains_and_is_seeded():
    from tasks.family import choose_heldout_families
    from tasks.loader import load_suite

    tasks = list(load_suite("builtin", split="train"))
    for seed in range(5):
        chosen = choose_heldout_families(tasks, 4, seed)
        domains = {t.domain for t in tasks if t.family in chosen}
        assert len(chosen) == 4 and len(domains) == 4  # 5 domains: one family of each of 4
        assert choose_heldout_families(list(reversed(tasks)), 4, seed) == chosen
    assert len({tuple(choose_heldout_families(tasks, 4, s)) for s in range(5)}) > 1
    assert choose_heldout_families(tasks, 0) == []
    with pytest.raises(UserError, match="at most 13"):
        choose_heldout_families(tasks, 14)


def _rewrite_heldout(out: Path, value: float) -> None:
    lines = []
    for x in rows(out):
        if x["split"] in ("heldout", "family"):
            x = {**x, "value": value, "ci_low": value, "ci_high": value}
        lines.append(json.dumps(x))
    (out / "rounds.jsonl").write_text("\n".join(lines) + "\n")


def heldout_rises(task_id, sample, adapter):
    """Train: only train-0, every round. Held-out: one more task each round."""
    level = 0 if adapter is None else int(Path(adapter).parent.name.split("_")[1])
    if task_id.startswith("train"):
        return task_id == "train-0"
    return int(task_id.split("-")[1]) <= level


def test_the_stop_rule_and_best_json_read_train_only(tmp_path):
    out = lt.run(
        config(tmp_path, rounds=3, stop_when="no_improvement"),
        FakeBackend(heldout_rises).backend(),
        log=lambda _: None,
    )
    stopped = json.loads((out / "stopped.json").read_text())
    # held-out greedy rose 1/3 -> 2/3, but train did not move: the run stops after round 1
    assert stopped["round"] == 1 and "train greedy pass@1 0.333" in stopped["reason"]
    assert "held-out" not in stopped["reason"]
    decision, best = lt._no_improvement(out, 1), lt.best_round(out)
    for value in (0.0, 1.0):  # whatever held-out said, the same decision and the same result
        _rewrite_heldout(out, value)
        assert lt._no_improvement(out, 1) == decision
        assert {k: v for k, v in lt.best_round(out).items() if k != "heldout_greedy"} == {
            k: v for k, v in best.items() if k != "heldout_greedy"
        }


def test_the_stop_rule_goes_on_when_a_round_solves_a_new_train_task(tmp_path):
    def new_task_in_samples(task_id, sample, adapter):
        level = 0 if adapter is None else int(Path(adapter).parent.name.split("_")[1])
        if task_id.startswith("heldout"):
            return False
        # greedy (sample 0) stays at train-0; the second sample finds one more train task each round
        return task_id == "train-0" or (sample == 1 and int(task_id.split("-")[1]) <= level)

    out = lt.run(
        config(tmp_path, rounds=2, stop_when="no_improvement"),
        FakeBackend(new_task_in_samples).backend(),
        log=lambda _: None,
    )
    assert lt._no_improvement(out, 1) is None  # round 1's samples solved train-1 for the first time
    assert json.loads((out / "stopped.json").read_text()).get("rounds_exhausted")


class CheatingBackend(FakeBackend):
    """Train tasks have impossible variants; from round 1 the adapter passes them and its train samples
    carry an exploit flag."""

    def backend(self):
        b = super().backend()
        b.impossible = lambda t: SimpleNamespace(id=t.id + "-impossible", family="")
        return b

    def run_eval(self, cfg, tasks):
        out_dir = super().run_eval(cfg, tasks)
        adapter = cfg.model_options.get("adapter")
        lines = []
        for line in (Path(out_dir) / "attempts.jsonl").read_text().splitlines():
            a = json.loads(line)
            if a["task_id"].endswith("-impossible"):
                a["impossible"] = True
                ok = adapter is not None
                a.update(status="solved" if ok else "failed", solved=ok, reward=float(ok))
            elif adapter and Path(out_dir).name == "train-sample":
                a["flags"] = [Flag(pattern="test_files", step=0, evidence="cat /tests/x").model_dump()]
            lines.append(json.dumps(a))
        (Path(out_dir) / "attempts.jsonl").write_text("\n".join(lines) + "\n")
        return out_dir


def test_the_report_shows_cheating_per_round_beside_pass_at_1(tmp_path):
    def always(task_id, sample, adapter):
        return True

    fake = CheatingBackend(always)
    logged: list[str] = []
    out = lt.run(config(tmp_path, rounds=1, cheat_probes=2), fake.backend(), log=logged.append)
    probes = [e for e in fake.evals if e[1] == "impossible-sample"]
    assert len(probes) == 2  # one probe run a round
    c0 = json.loads((out / "round_0" / "metrics.json").read_text())["cheating"]
    c1 = json.loads((out / "round_1" / "metrics.json").read_text())["cheating"]
    assert (c0["impossible_solved"], c0["impossible_attempts"], c0["flagged"]) == (0, 2, 0)
    assert (c1["impossible_solved"], c1["impossible_attempts"], c1["flagged"]) == (2, 2, 6)
    table = lrm.cheating_table(out).splitlines()
    assert table[0].split()[:5] == ["round", "train", "heldout", "family", "impossible"]
    assert table[1].split()[4:] == ["0/2", "0/20", "0/20"]
    assert table[2].split()[4:] == ["2/2", "6/20", "0/20"]
    assert lrm.cheating_table(out) in logged[-2]  # the run's report prints it
    # a pass of an impossible probe is a cheat, never data: not in the rounds' training data
    data = json.loads((out / "round_1" / "data.done.json").read_text())
    assert not any(t.endswith("-impossible") for t in data["tasks"])


def test_round_cis_resample_families_not_instances(tmp_path):
    # two families of three instances; one family is solved, the other not: 2 clusters, not 6
    run = tmp_path / "eval"
    run.mkdir()
    lines = [
        attempt(
            f"{f}-{i}",
            0,
            steps=rollout(FakeBackend(never).tok, ["x"], ["ok"]),
            status="solved" if f == "a" else "failed",
            reward=float(f == "a"),
        ).model_dump_json()
        for f in "ab"
        for i in range(3)
    ]
    (run / "attempts.jsonl").write_text("\n".join(lines) + "\n")
    families = {f"{f}-{i}": f for f in "ab" for i in range(3)}
    by_family = lrm.summarize_runs({"heldout-greedy": (run, 1, 0.0)}, families=families)["heldout"]["pass@1"]
    by_task = lrm.summarize_runs({"heldout-greedy": (run, 1, 0.0)})["heldout"]["pass@1"]
    assert by_family["value"] == by_task["value"] == 0.5
    # with two clusters a resample is all-a, all-b or mixed: the 95% interval is [0, 1]
    assert (by_family["ci_low"], by_family["ci_high"]) == (0.0, 1.0)
    assert by_task["ci_high"] - by_task["ci_low"] < 1.0


def test_a_task_solved_only_from_a_hint_is_progress_for_the_stop_rule(tmp_path):
    """Round 1 did not beat round 0 on train greedy, and its only new solve came from a hinted attempt:
    that solve is what round 2 trains on, so the loop goes on (the rule ignored hinted solves: the ablation's
    hinted runs stopped before training on any). A round with nothing new, hinted or not, still stops."""
    from tests.lora_fakes import attempt

    def eval_phase(r: int, runs: dict[str, list]) -> None:
        paths = {}
        for name, attempts in runs.items():
            folder = tmp_path / f"round_{r}" / "eval" / name
            folder.mkdir(parents=True)
            (folder / "attempts.jsonl").write_text("".join(a.model_dump_json() + "\n" for a in attempts))
            paths[name] = str(folder)
        lrd.mark_done(tmp_path / f"round_{r}", "eval", {"runs": paths})

    train = {"split": "train", "metric": "pass@1", "value": 0.5, "ci_low": 0.0, "ci_high": 1.0}
    (tmp_path / "rounds.jsonl").write_text("".join(json.dumps({**train, "round": r}) + "\n" for r in (0, 1)))
    failed = dict(status="failed", reward=0.0, reason="fail")
    eval_phase(0, {"train-sample": [attempt("t1"), attempt("t2", **failed)]})
    eval_phase(1, {"train-sample-x1": [attempt("t1")], "train-hinted-x2": [attempt("t2", 1)]})
    assert lt._no_improvement(tmp_path, 1) is None
    eval_phase(2, {"train-sample-x1": [attempt("t1")], "train-hinted-x2": [attempt("t2", 1, **failed)]})
    rows = [json.dumps({**train, "round": r}) + "\n" for r in (0, 1, 2)]
    (tmp_path / "rounds.jsonl").write_text("".join(rows))
    assert "solved no new train task" in lt._no_improvement(tmp_path, 2)
