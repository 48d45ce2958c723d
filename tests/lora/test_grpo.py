"""lora/grpo.py: rewards (a cheat is never rewarded), group-relative advantages, the clipped loss, the
loss mask (only the model's own sampled tokens), the update on a tiny model, the round loop with
--method grpo, and the real smoke run (real model, sandboxes and graders)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lora_fakes import CharTokenizer, attempt, rollout, tiny_llama

import lora.backend as lb
import lora.config as lc
import lora.grpo as grpo
import lora.train as lt
from lora.cli import train_config_from
from lora.data import IGNORE
from lora.sft import collate, prepare_model
from results.errors import UserError
from results.schema import Flag

VOCAB = 128


def run_of(task_id: str, sample: int, solved: bool, cut: bool = True, **kw):
    tok = CharTokenizer()
    cmds = [f"{'fix' if solved else 'try'} {task_id} {sample}", "submit"]
    return attempt(
        task_id,
        sample,
        steps=rollout(tok, cmds, ["output of the command", "done"], cut=cut),
        status="solved" if solved else "failed",
        reward=1.0 if solved else 0.0,
        **kw,
    )


# ---------------------------------------------------------------- rewards and advantages


def test_advantages_against_a_hand_computation():
    # one success in four: mean 0.25, population std sqrt(0.1875) = 0.4330
    a = grpo.advantages([1.0, 0.0, 0.0, 0.0])
    assert a[0] == pytest.approx(0.75 / 0.4330127, rel=1e-5) == pytest.approx(1.7320, rel=1e-4)
    assert a[1:] == [pytest.approx(-0.25 / 0.4330127, rel=1e-5)] * 3
    assert grpo.advantages([1.0, 1.0, 0.0, 0.0]) == [pytest.approx(x, rel=1e-5) for x in (1, 1, -1, -1)]
    assert grpo.advantages([0.0, 0.0]) == [0.0, 0.0]


def test_a_flagged_or_tampered_success_gets_no_positive_advantage():
    honest = run_of("t", 0, True)
    flagged = run_of("t", 1, True).model_copy(
        update={"flags": [Flag(pattern="test_files", step=0, evidence="cat tests/test_x.py")]}
    )
    tamper = run_of("t", 2, True, reason="tamper")  # the grader passed the tests, then saw the tampering
    impossible = run_of("t", 3, True).model_copy(update={"impossible": True})
    failed = run_of("t", 4, False)
    group = [honest, flagged, tamper, impossible, failed]
    assert [grpo.reward(a) for a in group] == [1.0, 0.0, 0.0, 0.0, 0.0]
    rollouts, stats = grpo.build_rollouts(group)
    adv = {r.attempt: r.advantage for r in rollouts}
    assert adv[honest.key] > 0
    for cheat in (flagged, tamper, impossible):
        assert adv[cheat.key] < 0 and adv[cheat.key] == pytest.approx(adv[failed.key])
    assert (stats.cheats, stats.rewarded, stats.trained) == (3, 1, 1)

    # cheats alone beside failures: every reward is 0, nothing is reinforced (the group is skipped)
    rollouts, stats = grpo.build_rollouts([flagged, tamper, failed])
    assert rollouts == [] and (stats.uniform, stats.trained) == (1, 0)


def test_uniform_groups_and_infra_errors_are_skipped_and_counted():
    attempts = [run_of("all-fail", i, False) for i in range(3)]
    attempts += [run_of("all-pass", i, True) for i in range(2)]
    attempts += [run_of("single", 0, True)]
    attempts += [run_of("mixed", 0, True), run_of("mixed", 1, False)]
    attempts += [run_of("mixed", 2, False).model_copy(update={"status": "error"})]
    rollouts, stats = grpo.build_rollouts(attempts)
    assert (stats.groups, stats.uniform, stats.trained, stats.errors) == (4, 3, 1, 1)
    assert {r.task_id for r in rollouts} == {"mixed"}
    assert sorted(r.advantage for r in rollouts) == [
        pytest.approx(-1.0, rel=1e-5),
        pytest.approx(1.0, rel=1e-5),
    ]
    assert stats.rewards["mixed"] == [1.0, 0.0]


# ---------------------------------------------------------------- the loss


def test_clipped_loss_against_a_hand_computation():
    cfg = lc.PGConfig(clip_low=0.2, clip_high=0.28, kl=0.0)
    ratio = torch.tensor([1.5, 0.5, 1.1, 0.7, 1.5, 1.0])
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0, 2.0])
    old = torch.log(torch.tensor([0.2, 0.3, 0.4, 0.5, 0.6, 0.1]))
    logp = (old + torch.log(ratio)).requires_grad_()
    loss, info = grpo.clipped_loss(logp, old, adv, cfg)
    # by hand: -min(rho*A, clip(rho, 0.8, 1.28)*A)
    #   1.5, +1: min(1.5, 1.28) -> -1.28, clipped    0.5, +1: min(0.5, 0.8) -> -0.5
    #   1.1, -1: inside the range -> 1.1              0.7, -1: min(-0.7, -0.8) -> 0.8, clipped
    #   1.5, -1: min(-1.5, -1.28) -> 1.5 (a bad move is never clipped away)   1.0, +2 -> -2
    want = [-1.28, -0.5, 1.1, 0.8, 1.5, -2.0]
    assert loss.tolist() == [pytest.approx(w, abs=1e-5) for w in want]
    assert info["clipped"] == 2
    loss.sum().backward()
    # d/d logp of -rho*A is -rho*A where unclipped; a clipped token has no gradient
    assert logp.grad.tolist() == [pytest.approx(g, abs=1e-5) for g in (0, -0.5, 1.1, 0, 1.5, -2.0)]

    # the KL term: kl * (exp(b - p) - (b - p) - 1), by hand for b - p = log 2: 2 - 0.6931 - 1 = 0.3069
    p = torch.tensor([math.log(0.25)])
    loss, info = grpo.clipped_loss(
        p, p.clone(), torch.tensor([0.0]), lc.PGConfig(kl=0.5), base_logp=torch.tensor([math.log(0.5)])
    )
    assert loss.item() == pytest.approx(0.5 * (2 - math.log(2) - 1), rel=1e-5)
    assert info["kl"] == pytest.approx(2 - math.log(2) - 1, rel=1e-5)


def test_environment_output_tokens_get_no_loss():
    """The gradient of the policy-gradient loss w.r.t. the logits is zero at every position whose next
    token is not one the model sampled: the prompt, the observations, and the end-of-turn the harness
    appended after a reply it cut."""
    tok = CharTokenizer()
    a = run_of("t", 0, True, cut=True)
    [r, _] = sorted(grpo.build_rollouts([a, run_of("t", 1, False)])[0], key=lambda r: -r.advantage)
    # the mask: exactly the completion ids of each step, nothing else
    sampled = set()
    for s in a.steps:
        start = len(s.prompt_ids)
        sampled |= set(range(start, start + len(s.completion_ids)))
    assert {i for i, t in enumerate(r.labels) if t != IGNORE} == sampled
    text = tok.decode([t for t in r.labels if t != IGNORE])
    assert "output of the command" not in text and "<|im_end|>" not in text

    base = tiny_llama(VOCAB)
    base.config.logit_scale = 1.0  # Llama ignores it; it makes target_logits use the model's full logits
    model = prepare_model(base, lc.SFTConfig(dropout=0.0, seed=0))
    seen = {}

    def keep_logits(_module, _inputs, output):
        output.logits.retain_grad()
        seen["logits"] = output.logits

    model.get_base_model().register_forward_hook(keep_logits)
    batch = collate([r], torch.device("cpu"))
    logp = grpo.token_logprobs(model, batch, temperature=0.7)
    loss, _ = grpo.clipped_loss(logp, logp.detach(), torch.full_like(logp, r.advantage), lc.PGConfig(kl=0.0))
    loss.sum().backward()
    grad = seen["logits"].grad[0].abs().sum(-1)  # [T]
    trained = {i - 1 for i in sampled}  # the logits at position i predict token i + 1
    assert all(grad[i] > 0 for i in trained)
    assert all(grad[i] == 0 for i in range(len(r.input_ids)) if i not in trained)


# ---------------------------------------------------------------- the update


@pytest.mark.slow
def test_the_update_raises_the_rewarded_reply_and_lowers_the_other():
    good, bad = run_of("t", 0, True), run_of("t", 1, False)
    rollouts, _ = grpo.build_rollouts([good, bad])
    sft = lc.SFTConfig(dropout=0.0, lr=1e-2, max_steps=3, grad_accum=1, batch_tokens=4096, log_every=0)
    model = prepare_model(tiny_llama(VOCAB, seed=3), sft)

    def logp(r):
        with torch.no_grad():
            return grpo.token_logprobs(model, collate([r], torch.device("cpu")), 0.7).sum().item()

    before = {r.attempt: logp(r) for r in rollouts}
    stats = grpo.update(model, rollouts, sft, lc.PGConfig(kl=0.02), temperature=0.7, log=lambda _: None)
    after = {r.attempt: logp(r) for r in rollouts}
    assert stats["steps"] == 3 and stats["rollouts"] == 2
    assert stats["clipped_share"][0] == 0  # pi_theta = pi_old before the first update: nothing clipped
    assert stats["kl"][0] == pytest.approx(0, abs=1e-7)  # a fresh adapter is the base model
    assert after[good.key] > before[good.key] and after[bad.key] < before[bad.key]


@pytest.mark.slow
def test_pi_old_and_pi_base_come_from_the_first_forward_only_when_they_equal_it(monkeypatch):
    """One rollout a step, two steps. The first step's rollout takes pi_old (and, while the adapter is the
    fresh one, pi_base) from its own forward: no pass before. The second step's rollout was taken before
    the update, so after the first step its ratio is off 1; a trained adapter's pi_base is
    the base model's, not pi_theta (KL above 0 at once)."""
    good, bad = run_of("t", 0, True), run_of("t", 1, False)
    rollouts, _ = grpo.build_rollouts([good, bad])
    passes = []
    real, real_loss, ratios = grpo.token_logprobs, grpo.clipped_loss, []
    monkeypatch.setattr(
        grpo,
        "clipped_loss",
        lambda lp, old, *a: ratios.append(float((lp - old).abs().max())) or real_loss(lp, old, *a),
    )
    monkeypatch.setattr(
        grpo, "token_logprobs", lambda m, b, t: passes.append(torch.is_grad_enabled()) or real(m, b, t)
    )
    sft = lc.SFTConfig(dropout=0.0, lr=5e-2, max_steps=2, grad_accum=1, batch_tokens=1, log_every=0)
    model = prepare_model(tiny_llama(VOCAB, seed=3), sft)
    pg = lc.PGConfig(kl=0.02)
    stats = grpo.update(model, rollouts, sft, pg, temperature=0.7, log=lambda _: None)
    # no-gradient passes: the second step's rollout, under the policy and under the base; then 2 steps
    assert passes == [False, False, True, True]
    assert stats["clipped_share"][0] == 0 and stats["kl"][0] == 0  # pi_theta = pi_old = pi_base at first
    assert ratios[0] == 0 and ratios[1] > 1e-3 and stats["kl"][1] > 0  # pi_old taken before the update
    passes.clear()
    again = grpo.update(model, rollouts, replace(sft, max_steps=1), pg, temperature=0.7, log=lambda _: None)
    assert passes == [False, True] and again["kl"][0] > 0  # the trained adapter: pi_base taken apart


# ---------------------------------------------------------------- the round loop


class Backend:
    """Tasks t0 (sample 0 of 4 solved), t1 (never), t2 (sample 1 is a flagged 'solve': 1 in 4 is not
    the audit's 'hackable', so the task stays and its cheat must not be rewarded);
    the policy update records what it was given."""

    def __init__(self):
        self.updates: list[tuple] = []
        self.adapters: list = []

    def backend(self) -> lb.Backend:
        return lb.Backend(
            load_tasks=lambda spec, split: [
                SimpleNamespace(id=f"{split}-{i}", family=f"f{i}") for i in range(3)
            ],
            run_eval=self.run_eval,
            fine_tune=lambda *a: pytest.fail("--method grpo must not fine-tune on solved samples"),
            policy_update=self.update,
        )

    def run_eval(self, cfg, tasks):
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        self.adapters.append((out.name, cfg.model_options.get("adapter")))
        lines = []
        for t in tasks:
            for s in range(cfg.samples):
                i = int(t.id.split("-")[1])
                a = run_of(t.id, s, solved=(i == 0 and s == 0) or (i == 2 and s == 1))
                if i == 2 and s == 1:
                    a = a.model_copy(update={"flags": [Flag(pattern="vcs_history", step=0)]})
                lines.append(a.model_copy(update={"key": f"{out.name}/{t.id}/{s}"}).model_dump_json())
        (out / "attempts.jsonl").write_text("\n".join(lines) + "\n")
        return out

    def update(self, model, rollouts, cfg, out_dir, continue_from):
        self.updates.append(
            (Path(out_dir).parent.name, rollouts, continue_from and Path(continue_from).parent.name)
        )
        out_dir.mkdir(parents=True)
        (out_dir / "adapter_config.json").write_text("{}")
        return {"steps": 1, "rollouts": len(rollouts)}


def test_the_round_loop_with_method_grpo(tmp_path):
    fake = Backend()
    cfg = lc.config_from(
        None, model="local:tiny", tasks="suite", out=tmp_path / "run", rounds=2, samples=4, method="grpo"
    )
    lt.run(cfg, fake.backend(), log=lambda _: None)
    out = tmp_path / "run"
    data = json.loads((out / "round_1" / "data.done.json").read_text())
    # t0 is mixed (trained); t1 all failed and t2's only 'solve' is flagged: uniform, skipped
    assert (data["groups"], data["uniform"], data["trained"], data["cheats"]) == (3, 2, 1, 1)
    assert data["tasks"] == ["train-0"] and data["rewards"]["train-2"] == [0.0] * 4
    [(r1, rollouts, cont1), (r2, _, cont2)] = fake.updates
    assert (r1, cont1, r2, cont2) == ("round_1", None, "round_2", "round_1")  # on-policy: continues
    # the group [1, 0, 0, 0]: mean 0.25, std 0.4330; one rollout per attempt here
    assert sorted(r.advantage for r in rollouts) == [pytest.approx(-0.57735, rel=1e-4)] * 3 + [
        pytest.approx(1.73205, rel=1e-4)
    ]
    assert all(r.task_id == "train-0" for r in rollouts) and data["broken_tasks"] == []
    # round 2 learns from the samples of round 1's policy (its adapter), not from round 0's
    assert [a for name, a in fake.adapters if name == "train-sample"] == [
        None,
        str(out / "round_1" / "adapter"),
        str(out / "round_2" / "adapter"),
    ]
    assert json.loads((out / "round_2" / "data.done.json").read_text())["from_rounds"] == [1]
    assert json.loads((out / "best.json").read_text())["round"] == 0  # no round did better on train


def test_grpo_settings_from_the_cli_and_the_checks(tmp_path):
    from harness import build_parser

    args = build_parser().parse_args(
        ["train", "--model", "local:x", "--tasks", "builtin:easy", "--method", "grpo", "--kl", "0"]
    )
    cfg = train_config_from(args)
    assert (cfg.method, cfg.pg.kl, cfg.pg.clip_high) == ("grpo", 0.0, 0.28)
    assert lc.config_from("grpo-smoke", out=tmp_path).method == "grpo"
    assert "method" not in lc.config_from(None, model="m", tasks="t", out=tmp_path).identity()
    with pytest.raises(UserError, match="--hints does not go with --method grpo"):
        lc.config_from(None, model="m", tasks="t", out=tmp_path, method="grpo", budget=8, hints=True)
    with pytest.raises(UserError, match="method must be one of"):
        lc.config_from(None, model="m", tasks="t", out=tmp_path, method="ppo")


# ---------------------------------------------------------------- the real thing


@pytest.mark.slow
@pytest.mark.model
def test_grpo_smoke_with_smollm2(tmp_path):
    """`harness train --preset grpo-smoke` on create-file (the family SmolLM2-135M solves often but not
    always, so its groups are mixed): 2 train tasks x 4 samples in real sandboxes graded by the real
    graders, one round, one optimiser step."""
    from harness import build_parser
    from tasks.loader import BUILTIN_DIR

    family = str(BUILTIN_DIR / "families" / "create-file")
    args = build_parser().parse_args(
        [
            "train",
            "--preset",
            "grpo-smoke",
            "--tasks",
            family,
            "--heldout",
            family,
            "--out",
            str(tmp_path / "run"),
        ]
    )
    assert args.func(args) == 0
    out = tmp_path / "run"
    ev = json.loads((out / "round_0" / "eval.done.json").read_text())
    samples = [
        json.loads(x) for x in Path(ev["runs"]["train-sample"], "attempts.jsonl").read_text().splitlines()
    ]
    assert len(samples) == 2 * 4
    data = json.loads((out / "round_1" / "data.done.json").read_text())
    # the groups and rewards, checked against the sampled attempts' own records
    by_task: dict[str, list[float]] = {}
    for a in sorted(samples, key=lambda a: a["key"]):
        if a["status"] != "error":
            honest = a["solved"] and a["reason"] != "tamper" and not a.get("flags") and not a["impossible"]
            by_task.setdefault(a["task_id"], []).append(1.0 if honest else 0.0)
    assert data["rewards"] == by_task
    mixed = sorted(t for t, r in by_task.items() if len(set(r)) > 1)
    assert data["tasks"] == mixed and data["uniform"] == len(by_task) - len(mixed)
    if mixed:  # an update was made and its adapter evaluated
        sft = json.loads((out / "round_1" / "sft.done.json").read_text())
        assert sft["steps"] == 1 and sft["clipped_share"] == [0.0]
        assert (out / "round_1" / "adapter" / "adapter_model.safetensors").is_file()
        assert json.loads((out / "round_1" / "eval.done.json").read_text())["runs"]
        assert (out / "best.json").is_file()
    else:  # every group uniform: the loop stops before the update, saying why
        assert "no group with different rewards" in json.loads((out / "stopped.json").read_text())["reason"]
