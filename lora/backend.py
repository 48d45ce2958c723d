"""What the training loop needs from the rest of harness: Backend (the operations lora/train.py calls), the
real ones (default_backend: the task loader, the runner, LoRA fine-tuning, the local model's tokenizer),
and the check that the models it samples and trains are local ones (lora/config.local_spec)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional

from lora.config import TrainConfig, local_spec
from lora.sft import SFTConfig
from results.errors import UserError


@dataclass
class Backend:
    """The three operations the loop uses. The defaults call the runner, the task loader and the
    local model; tests pass fakes."""

    load_tasks: Callable[[str, str], list]  # (suite spec, split) -> [Task]
    run_eval: Callable[
        [Any, list], Path
    ]  # (evaluators.run.config.EvalConfig, tasks) -> run dir (eval_config)
    fine_tune: Callable[..., dict]  # (model, examples, sft_cfg, out_dir, continue_from) -> stats
    # task -> its impossible variant (tasks/impossible.py) or None: the round's cheat probes
    impossible: Callable[[Any], Any] = lambda task: None
    end_of_turn: Callable[[str], Optional[int]] = lambda model: None  # model -> its end-of-turn token id
    # model -> messages -> the prompt token ids the local model would see (rebuilding hinted attempts)
    encoder: Callable[[str], Optional[Callable[[list], list[int]]]] = lambda model: None
    # --method grpo's update: (model, rollouts, cfg, out_dir, continue_from) -> stats; None: lora/grpo.py's
    policy_update: Optional[Callable[..., dict]] = None


def _load_tasks(spec: str, split: str) -> list:
    from tasks.loader import load_suite

    return list(load_suite(spec, split=split))


def _run_eval(cfg: Any, tasks: list) -> Path:
    """runner.run_eval of one eval (cfg: an EvalConfig); an interrupted run of this phase is finished."""
    from evaluators.run.runner import run_eval
    from lora.sft import free_memory

    if (Path(cfg.out) / "manifest.json").exists():
        cfg = replace(cfg, resume=cfg.out)
    run_dir = asyncio.run(run_eval(cfg, tasks))
    free_memory()  # the runner's model copy is gone; give its memory back before training
    return Path(run_dir)


def _fine_tune(
    model: str, examples: list, cfg: SFTConfig, out_dir: Path, continue_from: Optional[Path]
) -> dict:
    from agent.models.local_loading import load_hf
    from lora.sft import free_memory, prepare_model, save_adapter, train

    base, _tokenizer = load_hf(local_spec(model))
    peft_model = prepare_model(base, cfg, continue_from=continue_from)
    result = train(peft_model, examples, cfg)
    if result.steps:
        save_adapter(peft_model, out_dir)
    del peft_model, base
    free_memory()
    return result.summary()


def _end_of_turn(model: str) -> Optional[int]:
    """The token the chat template closes an assistant turn with (a GGUF model's tokenizer is on disk
    once the round-0 eval has loaded it)."""
    from agent.models.local_loading import end_of_turn_id

    return end_of_turn_id(local_spec(model))


def _encoder(model: str) -> Optional[Callable[[list], list[int]]]:
    """LocalModel.encode from the tokenizer files alone (no weights loaded)."""
    from transformers import AutoTokenizer

    from agent.models.local import encode_messages
    from agent.models.local_loading import cache_dir_for, resolve

    kind, path, _ = resolve(local_spec(model))
    folder = path if kind == "hf" else cache_dir_for(local_spec(model))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError):
        return None
    return partial(encode_messages, tokenizer)


def _impossible(task: Any) -> Any:
    from tasks.impossible import make_variant

    return make_variant(task)[0]


def default_backend(student: Optional[str] = None) -> Backend:
    """The real operations. With a `student` (--student, a replay: --model), a scripted or recorded teacher
    samples and the student's tokenizer records its replies' token ids; the student is fine-tuned
    (lora/teacher.py)."""
    backend = Backend(
        load_tasks=_load_tasks,
        run_eval=_run_eval,
        fine_tune=_fine_tune,
        end_of_turn=_end_of_turn,
        encoder=_encoder,
        impossible=_impossible,
    )
    if student:
        from lora.teacher import teacher_backend

        return teacher_backend(backend, student)
    return backend


def _check_models(cfg: TrainConfig) -> None:
    """The model that samples and the one that learns: a local model is both; a replay: teacher samples
    and --student learns."""
    if not cfg.student:
        local_spec(cfg.model)
        return
    local_spec(cfg.student)
    if not cfg.model.startswith("replay:"):
        raise UserError(
            f"--student goes with a replay: --model (a scripted or recorded teacher); got {cfg.model!r}"
        )
    if getattr(cfg, "method", "rs") != "rs":
        raise UserError(
            "--student goes with rejection sampling: a policy gradient needs the policy's own samples"
        )
