"""`harness train --model replay:FILE --student local:NAME`: a scripted or recorded teacher samples, the
student learns. The loop, sandboxes, grading, filters and hint stripping are the real ones; only the
replies come from the file (agent/models/replay.py), so what training keeps can be checked from the CLI
with replies known in advance.

A replayed reply has no token ids, and training uses nothing else (lora/data.py). The teacher records
them as the student's local model would have: the prompt is the student tokenizer's rendering of the
conversation (agent.models.local.encode_messages, what LocalModel.encode sends), the completion the
reply's text tokenised after it. The student is what is fine-tuned; the evals after a round still
replay the teacher (a file has no adapter), so their figures measure the file, not the adapter.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from agent.models.base import Completion


class Teacher:
    """A replay model whose completions carry the student tokenizer's token ids."""

    def __init__(self, replay: Any, tokenizer: Any) -> None:
        self.replay, self.tokenizer = replay, tokenizer
        self.name = replay.name
        self.supports_tools = False  # token ids exist for the text protocol only
        self.context_window = replay.context_window

    def for_task(self, task_id: str, sample: int = 0) -> "Teacher":
        return Teacher(self.replay.for_task(task_id, sample), self.tokenizer)

    async def complete(self, messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> list[Completion]:
        from agent.models.local import encode_messages

        out = await self.replay.complete(messages, *args, **kwargs)
        prompt = encode_messages(self.tokenizer, messages)
        for c in out:
            c.prompt_ids = list(prompt)
            c.completion_ids = list(self.tokenizer(c.content or "", add_special_tokens=False)["input_ids"])
            c.prompt_tokens, c.completion_tokens = len(c.prompt_ids), len(c.completion_ids)
        return out

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        from agent.models.local import encode_messages

        return len(encode_messages(self.tokenizer, messages))


def student_tokenizer(student: str) -> Any:
    """The student's tokenizer: from its files (a GGUF model's cache folder), else loaded with the model
    once, which fills that cache (the student's end-of-turn token and prompt encoder read it too)."""
    from transformers import AutoTokenizer

    from agent.models.local_loading import cache_dir_for, load_hf, resolve
    from lora.config import local_spec

    spec = local_spec(student)
    kind, path, _ = resolve(spec)
    try:
        folder = path if kind == "hf" else cache_dir_for(spec)
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, TypeError):
        return load_hf(spec)[1]


def _teacher_eval(student: str, cfg: Any, tasks: list) -> Path:
    """lora/backend._run_eval with the teacher as the model object."""
    from agent.models import get_model
    from evaluators.run.runner import run_eval

    if (Path(cfg.out) / "manifest.json").exists():
        cfg = replace(cfg, resume=cfg.out)
    teacher = Teacher(get_model(cfg.model), student_tokenizer(student))
    return Path(asyncio.run(run_eval(cfg, tasks, model_obj=teacher)))


def teacher_backend(backend: Any, student: str) -> Any:
    """`backend` (lora/backend.Backend) with the teacher's evals, and the student wherever the loop names the
    model it trains (fine-tuning, its end-of-turn token, its prompt encoder)."""

    def fine_tune(model: str, *args: Any) -> dict:
        return backend.fine_tune(student, *args)

    def end_of_turn(model: str) -> Optional[int]:
        return backend.end_of_turn(student)

    def encoder(model: str) -> Any:
        return backend.encoder(student)

    return replace(
        backend,
        run_eval=lambda cfg, tasks: _teacher_eval(student, cfg, tasks),
        fine_tune=fine_tune,
        end_of_turn=end_of_turn,
        encoder=encoder,
    )
