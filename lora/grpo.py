"""Policy-gradient post-training (GRPO-style) of a local model with LoRA: `harness train --method grpo`.

It keeps lora/train.py's rounds, evals, phase markers, resume and best.json; only a round's data and
training phases differ. Round r >= 1 learns from round r-1's train samples, the K attempts per task the
current policy (round r-1's adapter, the base at round 1) made in the real sandboxes, graded by the real
graders (the eval phase's train-sample runs; with --budget, as many per task as the allocation gave):
  data  group the attempts by task; reward 1 for an honest full solve, else 0: a tamper verdict, exploit
        flags (results/flags.py) or a pass of an impossible variant is 0, never positive. Infra errors are
        not samples (left out). Advantage A_i = (r_i - mean) / (std + 1e-6) over the group (population
        std: GRPO's, so a rare success weighs more than a common one). A group whose rewards are all
        equal has A = 0 everywhere and teaches nothing: skipped and counted. Each attempt becomes
        sequences of its recorded token ids (lora/data.build_examples, no end-of-turn appended: only the
        tokens the model sampled get loss; prompts and environment output are IGNORE) -> rollouts.jsonl
  sft   (the phase keeps its name) a clipped policy-gradient update of the adapter, continuing the
        policy's adapter (on-policy): per target token, with rho = pi_theta / pi_old,
            loss = -min(rho * A, clip(rho, 1 - clip_low, 1 + clip_high) * A) + kl * KL_k3(pi_theta, pi_base)
        averaged over the target tokens of the optimiser step (DAPO's token-level mean). pi_old is the
        policy before the update: the first step's own forward for its rollouts, one pass with no
        gradient before it for the others; so rho = 1 at the first step and the clip acts from the second
        (several steps or epochs over the same rollouts). pi_base is the same model with the adapter
        disabled (peft's disable_adapter(): no second copy in memory; while the adapter is fresh, B = 0,
        it is pi_theta itself); KL_k3 =
        exp(b - p) - (b - p) - 1 per token, the low-variance estimator of KL(pi_theta || pi_base).
        Log-probabilities are taken at the sampling temperature (logits / T), the distribution the
        tokens were drawn from. LoRA dropout is off, so pi_theta = pi_old before the first update.
The optimiser settings (lr, epochs, max_steps, batch_tokens, grad_accum, rank, ...) are SFTConfig's;
the device is lora/sft.py's choice (a GPU when there is one, bf16 there). The loop stops before a round
with no mixed group; --stop-when no_improvement applies as it does to rejection sampling, no_new_task
does not (a policy gradient can raise a solve rate without solving a new task). --hints is refused: a
hinted attempt is not a sample of the policy. With --budget, a task's group is the attempts the
allocation gave it (one attempt: no group).
"""

from __future__ import annotations

import json
import math
import random
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from lora.config import PGConfig, SFTConfig, TrainConfig
from lora.data import IGNORE, build_examples, has_token_ids, write_dataset
from results.attempts import is_solved
from results.schema import Attempt
from results.task_audit import record_flags

EPS = 1e-6  # keeps a near-uniform group's advantages finite


# ---------------------------------------------------------------- rewards and advantages


def reward(a: Attempt) -> float:
    """1.0 for an honest, full solve; 0.0 otherwise. A cheat that passed (tamper verdict, exploit flags,
    an impossible variant solved) is worth nothing: it must never be reinforced."""
    if a.reason == "tamper" or record_flags(a) or a.impossible:
        return 0.0
    return 1.0 if is_solved(a, strict=True) else 0.0


def advantages(rewards: list[float], eps: float = EPS) -> list[float]:
    """Group-relative advantages (r_i - mean) / (std + eps), population std over the group."""
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n)
    return [(r - mean) / (std + eps) for r in rewards]


@dataclass
class Rollout:
    """One training sequence of one attempt (lora/data.Example's fields) with its group's verdict."""

    input_ids: list[int]
    labels: list[int]  # IGNORE except on the model's own sampled tokens
    task_id: str
    attempt: str
    steps: list[int]
    reward: float
    advantage: float

    @property
    def n_targets(self) -> int:
        return sum(1 for t in self.labels if t != IGNORE)


@dataclass
class GroupStats:
    groups: int = 0  # tasks with at least one sample
    uniform: int = 0  # groups whose rewards were all equal (or a single sample): skipped
    trained: int = 0  # groups with different rewards
    attempts: int = 0  # valid samples (infra errors left out)
    errors: int = 0  # infra errors: not samples
    rewarded: int = 0  # attempts with reward 1
    cheats: int = 0  # solved by the grader's verdict, but tamper / flagged / impossible: reward 0
    no_token_ids: int = 0  # in a trained group, but without recorded token ids: no loss
    rollouts: int = 0
    target_tokens: int = 0
    rewards: dict[str, list[float]] = field(default_factory=dict)  # task -> its group's rewards


def build_rollouts(attempts: Iterable[Attempt]) -> tuple[list[Rollout], GroupStats]:
    """The rollouts of the groups (one per task) whose rewards differ, and the counts."""
    stats = GroupStats()
    groups: dict[str, list[Attempt]] = defaultdict(list)
    for a in attempts:
        if a.status == "error":
            stats.errors += 1
        else:
            groups[a.task_id].append(a)
    rollouts: list[Rollout] = []
    for task_id in sorted(groups):
        group = sorted(groups[task_id], key=lambda a: a.key)
        rewards = [reward(a) for a in group]
        stats.groups += 1
        stats.attempts += len(group)
        stats.rewarded += sum(r > 0 for r in rewards)
        stats.cheats += sum(a.solved and r == 0 and a.status == "solved" for a, r in zip(group, rewards))
        stats.rewards[task_id] = rewards
        if len(set(rewards)) < 2:
            stats.uniform += 1
            continue
        stats.trained += 1
        for a, r, adv in zip(group, rewards, advantages(rewards)):
            if not has_token_ids(a):
                stats.no_token_ids += 1
                continue
            for ex in build_examples(a, mask_errors=False, end_of_turn=None):
                rollouts.append(Rollout(ex.input_ids, ex.labels, ex.task_id, ex.attempt, ex.steps, r, adv))
    stats.rollouts = len(rollouts)
    stats.target_tokens = sum(r.n_targets for r in rollouts)
    return rollouts, stats


def read_rollouts(path: Path) -> list[Rollout]:
    """rollouts.jsonl (written by lora/data.write_dataset, as a dataset is)."""
    names = {f.name for f in fields(Rollout)}
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append(Rollout(**{k: v for k, v in json.loads(line).items() if k in names}))
    return out


# ---------------------------------------------------------------- the loss


def clipped_loss(
    logp: Any, old_logp: Any, advantage: Any, cfg: PGConfig, base_logp: Optional[Any] = None
) -> tuple[Any, dict]:
    """Per-token loss (see the module docstring) and its diagnostics: tensors of one shape, one entry per
    target token. base_logp None or cfg.kl 0: no KL term."""
    import torch

    ratio = torch.exp(logp - old_logp)
    clipped = ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
    loss = -torch.min(ratio * advantage, clipped * advantage)
    kl = None
    if base_logp is not None and cfg.kl:
        d = base_logp - logp
        kl = torch.exp(d) - d - 1
        loss = loss + cfg.kl * kl
    with torch.no_grad():
        info = {
            "clipped": float((ratio * advantage > clipped * advantage).float().sum()),
            "kl": float(kl.sum()) if kl is not None else 0.0,
        }
    return loss, info


def token_logprobs(model: Any, batch: Any, temperature: float) -> Any:
    """log pi(target) at each target position of `batch` (lora/sft.target_logits' order), at `temperature`."""
    import torch.nn.functional as F

    from lora.sft import target_logits

    logits, targets = target_logits(model, batch)
    if temperature > 0:
        logits = logits / temperature
    return -F.cross_entropy(logits, targets, reduction="none")


def _per_token(rollouts: list[Rollout], values: list[Any]) -> Any:
    """One value per rollout, repeated over its target tokens (collate's row-major order)."""
    import torch

    return torch.cat([torch.full((r.n_targets,), float(v)) for r, v in zip(rollouts, values)])


# ---------------------------------------------------------------- the update


def update(
    model: Any,
    rollouts: list[Rollout],
    sft: SFTConfig,
    pg: PGConfig,
    temperature: float,
    log: Callable[[str], None] = print,
) -> dict:
    """The policy-gradient update of the trainable (LoRA) weights of `model` (lora/sft.prepare_model's)
    on `rollouts`. Returns its figures (steps 0: nothing usable)."""
    import torch

    from lora.sft import _schedule, collate, length_grouped_batches, lr_at

    device = next(p for p in model.parameters() if p.requires_grad).device
    autocast = device.type == "cuda" and any(p.dtype == torch.bfloat16 for p in model.parameters())
    usable = [r for r in rollouts if len(r.input_ids) <= sft.max_seq_len and r.n_targets > 0]
    out: dict[str, Any] = {
        "rollouts": len(usable),
        "dropped_too_long": sum(len(r.input_ids) > sft.max_seq_len for r in rollouts),
        "target_tokens": sum(r.n_targets for r in usable),
        "steps": 0,
    }
    if not usable:
        return out

    def forward(idx: list[int], adapter: bool = True) -> Any:
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
            batch = collate([usable[i] for i in idx], device)
            if adapter:
                return token_logprobs(model, batch, temperature)
            with model.disable_adapter():
                return token_logprobs(model, batch, temperature)

    def split(idx: list[int], logp: Any) -> list[Any]:  # one tensor per rollout, in collate's order
        return list(logp.float().split([usable[i].n_targets for i in idx]))

    schedule = _schedule(
        [len(r.input_ids) for r in usable], sft
    )  # epochs, or max_steps * grad_accum micro-batches
    total = math.ceil(len(schedule) / sft.grad_accum)
    # pi_old of a rollout the first step trains on is its own forward there (no update has happened yet:
    # TRL's shortcut for one pass over the rollouts); so is pi_base while the adapter is still the fresh
    # one (LoRA's B is zero: the adapter adds exactly nothing). The rest are taken now, before any update,
    # in one pass each with no gradient; a rollout max_steps leaves out needs neither.
    first = {i for idx in schedule[: sft.grad_accum] for i in idx}
    later = sorted({i for idx in schedule[sft.grad_accum :] for i in idx} - first)
    fresh = all(not p.any() for n, p in model.named_parameters() if "lora_B" in n)
    old: dict[int, Any] = {}
    base: dict[int, Any] = {}
    need_base = sorted(set(later) | (set() if fresh else first)) if pg.kl else []
    model.eval()
    with torch.no_grad():
        for todo, into, adapter in ((later, old, True), (need_base, base, False)):
            rng = random.Random(sft.seed)
            for batch in length_grouped_batches(
                [len(usable[i].input_ids) for i in todo], sft.batch_tokens, rng
            ):
                idx = [todo[b] for b in batch]
                into.update(zip(idx, split(idx, forward(idx, adapter))))

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params, lr=sft.lr, weight_decay=sft.weight_decay, fused=device.type == "cuda"
    )
    model.train()
    log(
        f"grpo: {len(usable)} rollouts, {out['target_tokens']} target tokens, {total} steps on {device.type}"
        f"{' bf16' if autocast else ' fp32'}, clip [{1 - pg.clip_low:g}, {1 + pg.clip_high:g}], kl {pg.kl:g}"
    )
    losses, clip_share, kls = [], [], []
    started = time.perf_counter()
    for step in range(total):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, total, sft)
        chunk = schedule[step * sft.grad_accum : (step + 1) * sft.grad_accum]
        n = sum(usable[i].n_targets for idx in chunk for i in idx)
        step_loss, clipped, kl = 0.0, 0.0, 0.0
        for idx in chunk:
            rows = [usable[i] for i in idx]
            logp = forward(idx).float()
            if step == 0:  # before any update: this forward is pi_old (and pi_base with a fresh adapter)
                for i, lp in zip(idx, split(idx, logp.detach())):
                    old.setdefault(i, lp)
                    if pg.kl and fresh:
                        base.setdefault(i, lp)
            loss, info = clipped_loss(
                logp,
                torch.cat([old[i] for i in idx]),
                _per_token(rows, [r.advantage for r in rows]).to(device),
                pg,
                torch.cat([base[i] for i in idx]) if pg.kl else None,
            )
            loss = loss.sum() / n  # each target token of the step weighs the same
            loss.backward()
            step_loss += float(loss.detach())
            clipped += info["clipped"]
            kl += info["kl"]
        if sft.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(params, sft.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(step_loss)
        clip_share.append(clipped / n)
        kls.append(kl / n)
        if sft.log_every and (step % sft.log_every == 0 or step == total - 1):
            log(
                f"grpo: step {step + 1}/{total} loss {step_loss:.4f} clipped {clipped / n:.3f} "
                f"kl {kl / n:.5f}"
            )
    model.eval()
    del optimizer
    out.update(
        steps=total,
        first_loss=losses[0],
        final_loss=losses[-1],
        clipped_share=clip_share,
        kl=kls,
        seconds=round(time.perf_counter() - started, 2),
    )
    return out


def fine_tune(
    model: str, rollouts: list[Rollout], cfg: TrainConfig, out_dir: Path, continue_from: Optional[Path]
) -> dict:
    """The real model's update: load it, add (or continue) the LoRA adapter, update, save."""
    from agent.models.local_loading import load_hf
    from lora.config import local_spec
    from lora.sft import free_memory, prepare_model, save_adapter

    base, _tokenizer = load_hf(local_spec(model))
    sft = replace(cfg.sft, dropout=0.0)  # pi_theta = pi_old before the first update
    peft_model = prepare_model(base, sft, continue_from=continue_from)
    result = update(peft_model, rollouts, sft, cfg.pg, cfg.temperature)
    if result["steps"]:
        save_adapter(peft_model, out_dir)
    del peft_model, base
    free_memory()
    return result


# ---------------------------------------------------------------- the round's phases (lora/train.py calls)


def data_phase(cfg: TrainConfig, out: Path, r: int) -> dict:
    """Round r's rollouts from round r-1's train samples (unhinted: the policy's own), written to
    round_r/rollouts.jsonl; the counts in round_r/data.done.json."""
    from lora.rundir import _broken_tasks, _train_runs, mark_done, phase_done
    from results.store import load_attempts

    ev = phase_done(out / f"round_{r - 1}", "eval")
    attempts = [
        a
        for name, run_dir in _train_runs(ev).items()
        if "hinted" not in name
        for a in load_attempts(Path(run_dir))
    ]
    broken = _broken_tasks(cfg.audit_runs, attempts)
    rollouts, stats = build_rollouts(a for a in attempts if a.task_id not in broken)
    rd = out / f"round_{r}"
    write_dataset(rd / "rollouts.jsonl", rollouts)
    info = {
        "method": "grpo",
        "from_rounds": [r - 1],
        "broken_tasks": sorted(broken),
        **asdict(stats),
        "tasks": sorted({x.task_id for x in rollouts}),
        "examples": len(rollouts),
    }
    if not rollouts:
        info["stop"] = (
            f"no group with different rewards to learn from "
            f"({stats.uniform} of {stats.groups} groups uniform)"
        )
    return mark_done(rd, "data", info)


def update_phase(
    cfg: TrainConfig, out: Path, r: int, log: Callable[[str], None], tune: Callable = fine_tune
) -> dict:
    """Round r's update of the policy (round r-1's adapter; the base model's fresh one at round 1)."""
    from lora.rundir import mark_done

    rd = out / f"round_{r}"
    rollouts = read_rollouts(rd / "rollouts.jsonl")
    continue_from = out / f"round_{r - 1}" / "adapter" if r >= 2 else None
    log(
        f"train: round {r}: policy-gradient update on {len(rollouts)} rollouts"
        + (f" on top of {continue_from}" if continue_from else " from the base model")
    )
    stats = tune(
        cfg.model,
        rollouts,
        replace(cfg, sft=replace(cfg.sft, seed=cfg.sft.seed + 1000 * cfg.seed + r)),  # as rejection sampling
        rd / "adapter",
        continue_from,
    )
    return mark_done(rd, "sft", dict(stats))
