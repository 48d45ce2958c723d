"""lora/train.py: the round loop, its phase markers and resume, early stop, rows; lora/cli.py."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from lora_fakes import CharTokenizer, attempt, rollout

import lora.backend as lb
import lora.config as lc
import lora.rundir as lrd
import lora.train as lt
from results.errors import UserError


class FakeBackend:
    """Tasks are ids; `solves(task_id, sample, adapter)` decides each attempt; fine_tune writes a marker
    adapter."""

    def __init__(self, solves, fail_sft_once: bool = False, fail_eval_at: int | None = None):
        self.solves = solves
        self.fail_sft_once = fail_sft_once
        self.fail_eval_at = fail_eval_at
        self.evals: list[tuple] = []
        self.sfts: list[tuple] = []
        self.tok = CharTokenizer()

    def backend(self) -> lb.Backend:
        return lb.Backend(load_tasks=self.load_tasks, run_eval=self.run_eval, fine_tune=self.fine_tune)

    def load_tasks(self, spec, split):
        return [SimpleNamespace(id=f"{split}-{i}", family=f"f{i}") for i in range(3)]

    def run_eval(self, cfg, tasks):
        samples, out_dir, adapter = cfg.samples, cfg.out, cfg.model_options.get("adapter")
        if self.fail_eval_at is not None and len(self.evals) == self.fail_eval_at:
            self.fail_eval_at = None
            raise RuntimeError("sandbox exploded")
        self.evals.append(
            (Path(out_dir).parent.parent.name, Path(out_dir).name, adapter and Path(adapter).name)
        )
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        lines = []
        for t in tasks:
            for s in range(samples):
                ok = self.solves(t.id, s, adapter)
                # what was done decides the verdict: the same commands never get two verdicts (flaky)
                cmds = [f"{'fix' if ok else 'try'} {t.id} v{s}", "submit"]
                a = attempt(
                    t.id,
                    s,
                    steps=rollout(self.tok, cmds, ["ok", "done"]),
                    status="solved" if ok else "failed",
                    reward=1.0 if ok else 0.0,
                )
                lines.append(a.model_dump_json())
        (out_dir / "attempts.jsonl").write_text("\n".join(lines) + "\n")
        return out_dir

    def fine_tune(self, model, examples, sft_cfg, out_dir, continue_from):
        if self.fail_sft_once:
            self.fail_sft_once = False
            raise RuntimeError("out of memory")
        self.sfts.append(
            (Path(out_dir).parent.name, len(examples), continue_from and Path(continue_from).parent.name)
        )
        out_dir.mkdir(parents=True)
        (out_dir / "adapter_config.json").write_text("{}")
        return {"steps": 3, "examples": len(examples)}


def config(tmp_path, **kw) -> lc.TrainConfig:
    return lc.config_from(
        None,
        **{"model": "local:tiny", "tasks": "suite", "out": tmp_path / "run", "rounds": 2, "samples": 2, **kw},
    )


def rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]


def improving(task_id, sample, adapter):
    """Base solves train-0 only; each adapter solves one more train task; heldout improves too."""
    level = 0 if adapter is None else int(Path(adapter).parent.name.split("_")[1])
    return int(task_id.split("-")[1]) <= level


def test_full_run_layout_rows_and_reuse_of_samples(tmp_path):
    fake = FakeBackend(improving)
    out = lt.run(config(tmp_path), fake.backend(), log=lambda _: None)
    # Each round evaluates 4 runs; the train samples of round r are round r+1's training data.
    assert len(fake.evals) == 12 and [e[0] for e in fake.evals[::4]] == ["round_0", "round_1", "round_2"]
    assert [s[0] for s in fake.sfts] == ["round_1", "round_2"] and all(s[2] is None for s in fake.sfts)
    d1 = json.loads((out / "round_1" / "data.done.json").read_text())
    d2 = json.loads((out / "round_2" / "data.done.json").read_text())
    assert (
        d1["tasks"] == ["train-0"]
        and d2["tasks"] == ["train-0", "train-1"]
        and d2["new_tasks"] == ["train-1"]
    )
    assert d2["from_rounds"] == [0, 1]  # ReST-EM: the union so far, from the base
    for r in range(3):
        assert (out / f"round_{r}" / "metrics.json").exists()
    assert (out / "round_1" / "dataset.jsonl").exists() and (out / "round_2" / "adapter").is_dir()
    rs = rows(out)
    # 3 rounds x 2 splits x (pass@1 at t=0, pass@1 and pass@2 at t=0.7)
    assert len(rs) == 18 and all(
        set(r) == {"round", "split", "metric", "value", "ci_low", "ci_high"} for r in rs
    )
    value = {(r["round"], r["split"], r["metric"]): r["value"] for r in rs}
    for (r, split, metric), v in value.items():
        if metric == "pass@1_t0.7":  # the chance one sample solves <= the chance one of two does
            assert v <= value[(r, split, "pass@2_t0.7")]
    for split in ("train", "heldout"):
        greedy = {r["round"]: r["value"] for r in rs if r["split"] == split and r["metric"] == "pass@1"}
        assert greedy == pytest.approx({0: 1 / 3, 1: 2 / 3, 2: 1.0})
    m2 = json.loads((out / "round_2" / "metrics.json").read_text())
    assert m2["metrics"]["train"]["pass@1"]["delta"] == pytest.approx(2 / 3)
    assert "pass@2_t0.7" in m2["metrics"]["train"] and "delta" in m2["metrics"]["heldout"]["pass@1_t0.7"]


def test_the_rounds_the_loop_writes_are_read_back_by_the_results_reader(tmp_path):
    from results.rounds import load_rounds

    logged: list[str] = []
    out = lt.run(config(tmp_path, rounds=1), FakeBackend(improving).backend(), log=logged.append)
    written = rows(out)  # the loop's file, as raw JSON
    read = load_rounds(out, run="rft")
    assert len(read) == len(written) == 12
    assert read == [{"run": "rft", **r} for r in written]  # every row, every value, nothing renamed
    m0 = json.loads((out / "round_0" / "metrics.json").read_text())["metrics"]
    assert {(r["split"], r["metric"]): r["value"] for r in read if r["round"] == 0} == {
        (split, metric): m["value"] for split, by in m0.items() for metric, m in by.items()
    }
    # summary_table reads them through the same reader (then the result); the cheating table follows
    table, cheats = (part.splitlines() for part in logged[-2].split("\n\n"))
    assert len(table) == 13 and table[1].split()[:4] == ["0", "heldout", "pass@1", "0.333"]
    # per round: train, heldout and family greedy pass@1 (no family split here), then the cheating signs
    assert [c.split()[:4] for c in cheats[1:]] == [["0", "0.333", "0.333", "-"], ["1", "0.667", "0.667", "-"]]
    assert cheats[1].split()[4:] == ["-", "0/18", "0/18"]  # no cheat probe among fake tasks; 18 attempts
    assert logged[-1].startswith("train: the result is round 1")


def test_end_of_turn_comes_from_the_tokenizer_files_alone(tmp_path, monkeypatch):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from agent.models import local_loading

    def folder(name: str, vocab: dict, eos: str) -> str:
        path = tmp_path / name
        tok = PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
            eos_token=eos,
            unk_token="<unk>",
        )
        tok.save_pretrained(str(path))
        (path / "config.json").write_text("{}")  # resolve() takes a folder with config.json as a HF model
        return f"local:{path}"

    chatml = folder("chatml", {"<unk>": 0, "<|endoftext|>": 1, "<|im_end|>": 2, "a": 3}, "<|endoftext|>")
    plain = folder("plain", {"<unk>": 0, "</s>": 1, "a": 2}, "</s>")
    assert lb._end_of_turn(chatml) == 2  # the template's end of turn wins over EOS
    assert lb._end_of_turn(plain) == 1  # none of the known ones: EOS
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"x")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    assert (
        local_loading.end_of_turn_id(str(gguf)) is None
    )  # its tokenizer is cached only once the model was loaded


def test_resume_restarts_at_the_unfinished_phase(tmp_path, monkeypatch):
    data_calls = []
    real_data_phase = lt._data_phase
    monkeypatch.setattr(lt, "_data_phase", lambda *a: data_calls.append(a[2]) or real_data_phase(*a))
    fake = FakeBackend(improving, fail_sft_once=True)
    with pytest.raises(RuntimeError, match="out of memory"):
        lt.run(config(tmp_path), fake.backend(), log=lambda _: None)
    out = tmp_path / "run"
    assert (out / "round_0" / "eval.done.json").exists() and (out / "round_1" / "data.done.json").exists()
    assert not (out / "round_1" / "sft.done.json").exists()
    assert len(fake.evals) == 4 and data_calls == [1]

    fake.evals.clear()
    fake.fail_eval_at = 2  # now crash in round 1's eval, after two of its four runs
    with pytest.raises(RuntimeError, match="sandbox exploded"):
        lt.run(config(tmp_path), fake.backend(), log=lambda _: None)
    assert data_calls == [1] and [s[0] for s in fake.sfts] == ["round_1"]  # data not redone
    assert (out / "round_1" / "sft.done.json").exists() and not (out / "round_1" / "eval.done.json").exists()

    fake.evals.clear()
    lt.run(config(tmp_path), fake.backend(), log=lambda _: None)
    assert [s[0] for s in fake.sfts] == ["round_1", "round_2"]  # round 1's SFT not redone
    assert [e[0] for e in fake.evals] == ["round_1"] * 4 + ["round_2"] * 4
    assert data_calls == [1, 2]
    rs = rows(out)
    assert len(rs) == len({(r["round"], r["split"], r["metric"]) for r in rs}) == 18

    fake.evals.clear()
    lt.run(config(tmp_path), fake.backend(), log=lambda _: None)  # finished: nothing runs again
    assert fake.evals == [] and len(fake.sfts) == 2


def test_stops_when_a_round_solves_no_new_train_task(tmp_path):
    fake = FakeBackend(lambda task_id, s, adapter: task_id == "train-0")
    out = lt.run(config(tmp_path, rounds=3), fake.backend(), log=lambda _: None)
    assert [s[0] for s in fake.sfts] == ["round_1"]
    stopped = json.loads((out / "stopped.json").read_text())
    assert stopped["round"] == 2 and "no new train task" in stopped["reason"]
    assert {r["round"] for r in rows(out)} == {0, 1}


def test_the_result_is_the_round_best_on_train_not_the_last_nor_the_best_on_heldout(tmp_path):
    def solves(task_id, sample, adapter):
        r = 0 if adapter is None else int(Path(adapter).parent.name.split("_")[1])
        i = int(task_id.split("-")[1])
        if task_id.startswith("heldout"):
            return i <= r  # held-out keeps improving: 1/3, 2/3, 3/3
        return i <= {0: 0, 1: 1, 2: 0}[r]  # train: round 1 best; round 2 regresses (and the loop stops)

    log: list[str] = []
    out = lt.run(config(tmp_path, rounds=3), FakeBackend(solves).backend(), log.append)
    best = json.loads((out / "best.json").read_text())
    assert best["round"] == 1 and best["adapter"] == str(out / "round_1" / "adapter")
    assert best["train_greedy"] == pytest.approx(2 / 3) and best["heldout_greedy"] == pytest.approx(2 / 3)
    assert best["last_round"] == 2
    assert any("the result is round 1" in x and "round 2 did no better" in x for x in log)
    # Resuming a finished run says the same; adapters that only tie the base hand on the base.
    assert lt.best_round(out) == best
    flat = lt.run(
        config(tmp_path / "flat"), FakeBackend(lambda t, s, a: t.endswith("0")).backend(), log.append
    )
    assert json.loads((flat / "best.json").read_text())["round"] == 0
    assert json.loads((flat / "best.json").read_text())["adapter"] is None


def test_stops_before_training_when_the_base_solves_nothing(tmp_path):
    fake = FakeBackend(lambda *a: False)
    out = lt.run(config(tmp_path), fake.backend(), log=lambda _: None)
    assert fake.sfts == [] and json.loads((out / "stopped.json").read_text())["round"] == 1


def test_continue_trains_on_top_of_the_previous_adapter_with_the_newest_samples(tmp_path):
    fake = FakeBackend(improving)
    out = lt.run(config(tmp_path, continue_adapter=True), fake.backend(), log=lambda _: None)
    assert [(s[0], s[2]) for s in fake.sfts] == [("round_1", None), ("round_2", "round_1")]
    assert json.loads((out / "round_2" / "data.done.json").read_text())["from_rounds"] == [1]


def test_resume_with_other_settings_is_refused(tmp_path):
    fake = FakeBackend(improving)
    lt.run(config(tmp_path, rounds=1), fake.backend(), log=lambda _: None)
    with pytest.raises(UserError, match="samples"):
        lt.run(config(tmp_path, rounds=1, samples=4), fake.backend(), log=lambda _: None)
    lt.run(config(tmp_path, rounds=2), fake.backend(), log=lambda _: None)  # more rounds: allowed, resumes
    assert (tmp_path / "run" / "round_2" / "eval.done.json").exists()


def test_limit_spreads_tasks_over_families():
    tasks = [SimpleNamespace(id=f"{f}-{i}", family=f) for f in "abc" for i in range(4)]
    assert [t.id for t in lrd.spread(tasks, 4)] == ["a-0", "b-0", "c-0", "a-1"]
    assert lrd.spread(tasks, None) == tasks and len(lrd.spread(tasks, 99)) == 12


def test_needs_a_local_model(tmp_path):
    with pytest.raises(UserError, match="local model"):
        lt.run(config(tmp_path, model="openai:gpt-4o"), FakeBackend(improving).backend(), log=lambda _: None)


def test_cli_merges_preset_and_flags(tmp_path, monkeypatch):
    from lora import cli

    seen = {}
    monkeypatch.setattr(lt, "run", lambda cfg: seen.setdefault("cfg", cfg))
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "train",
            "--preset",
            "rft-smollm2",
            "--samples",
            "2",
            "--limit",
            "2",
            "--mask-errors",
            "--lr",
            "1e-3",
            "--out",
            str(tmp_path / "x"),
        ]
    )
    assert args.func(args) == 0
    c = seen["cfg"]
    assert (c.model, c.tasks, c.samples, c.limit, c.mask_errors, c.rounds) == (
        "local:smollm2-135m",
        "builtin:easy",
        2,
        2,
        True,
        2,
    )
    assert c.sft.lr == 1e-3 and c.sft.epochs == lc.PRESETS["rft-smollm2"]["sft"]["epochs"]
    assert c.continue_adapter is False and c.per_task_cap == 2

    with pytest.raises(UserError, match="--model"):
        args = parser.parse_args(["train", "--tasks", "builtin:easy"])
        args.func(args)


@pytest.mark.slow
@pytest.mark.model
def test_train_end_to_end_with_smollm2(tmp_path):
    """2 tasks x 2 samples x 1 round with the real model, runner and sandbox (Docker); 3 steps of at most
    32 tokens (the tasks are one-command answers)."""
    cfg = lc.config_from(
        "rft-smollm2",
        rounds=1,
        samples=2,
        eval_samples=1,
        limit=2,
        max_steps=3,
        max_reply_tokens=32,
        concurrency=2,
        out=tmp_path / "run",
        sft={"epochs": 1},
    )
    out = lt.run(cfg)
    rs = rows(out)
    # pass@2 from the 2 train samples; held-out is sampled once. No cheat probe: these two train tasks
    # (answer-graded) have no impossible variant
    assert {(r["split"], r["metric"]) for r in rs if r["round"] == 0} == {
        ("heldout", "pass@1"),
        ("heldout", "pass@1_t0.7"),
        ("train", "pass@1"),
        ("train", "pass@1_t0.7"),
        ("train", "pass@2_t0.7"),
    }
    data = json.loads((out / "round_1" / "data.done.json").read_text())
    # Which way round 1 goes is decided by an independent record: the base's own train samples (their
    # attempts.jsonl), not by the data phase's count that is under test.
    sample_run = Path(json.loads((out / "round_0" / "eval.done.json").read_text())["runs"]["train-sample"])
    samples = [json.loads(line) for line in (sample_run / "attempts.jsonl").read_text().splitlines()]
    solved_tasks = {a["task_id"] for a in samples if a["solved"]}
    assert len(samples) == 2 * 2  # 2 train tasks x 2 samples
    assert set(data["tasks"]) <= solved_tasks and bool(data["tasks"]) == bool(solved_tasks)
    if solved_tasks:  # it was trained on and the adapter evaluated
        assert data["examples"] >= len(solved_tasks)
        assert (out / "round_1" / "adapter" / "adapter_model.safetensors").is_file()
        assert {r["round"] for r in rs} == {0, 1}
    else:  # nothing to learn from: the loop stops before training, saying why
        assert data["examples"] == 0 and not (out / "round_1" / "adapter").exists()
        assert json.loads((out / "stopped.json").read_text())["round"] == 1


@pytest.mark.slow
@pytest.mark.model
def test_fine_tune_smollm2_gives_an_adapter_the_local_model_loads(tmp_path):
    """The SFT phase on the real model: trains from its own tokens, saves, and LocalModel(adapter=) loads
    it."""
    import agent.models.local as local  # our own module: a broken import fails, never skips
    import agent.models.local_loading as local_loading
    from lora.data import build_examples
    from lora.sft import SFTConfig

    _, tok = local_loading.load_hf("smollm2-135m")
    eot = lb._end_of_turn("local:smollm2-135m")
    assert tok.convert_ids_to_tokens(eot) == "<|im_end|>"
    messages = [{"role": "user", "content": "Create hello.txt containing hi."}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    reply = "```bash\necho hi > hello.txt\n```"
    steps = rollout(CharTokenizer(), [reply], ["ok"])
    steps[0] = steps[0].model_copy(
        update={"prompt_ids": prompt, "completion_ids": tok.encode(reply, add_special_tokens=False)}
    )
    examples = build_examples(attempt(steps=steps), end_of_turn=eot)
    stats = lb._fine_tune(
        "local:smollm2-135m",
        examples,
        SFTConfig(max_steps=3, lr=1e-3, dropout=0.0, log_every=0),
        tmp_path / "adapter",
        None,
    )
    assert stats["steps"] == 3 and stats["final_loss"] < stats["first_loss"]
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    model = local.LocalModel("smollm2-135m", adapter=str(tmp_path / "adapter"))
    [completion] = model.generate(messages, max_tokens=8)
    assert completion.completion_ids
