"""The agent's settings and their defaults, each defined and described once (model: TRL's SFTConfig).

LoopConfig holds the loop's limits and sampling settings; the CLIs (`harness eval`, `run`, `train`) make
their options from its fields with add_loop_options, so the help text is the field's metadata. The default
model string is agent.models.DEFAULT_MODEL.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from typing import Optional

LOCAL_REPLY_TOKENS = 256  # local models decode on this machine's CPU: short replies keep attempts quick
API_REPLY_TOKENS = (
    1024  # any other backend (the OpenAI-compatible server uses it too when a request names none)
)


def default_reply_tokens(model: str) -> int:
    """The reply-token limit for a model string when none is given (LoopConfig.max_reply_tokens None)."""
    return LOCAL_REPLY_TOKENS if model.startswith("local:") else API_REPLY_TOKENS


# `harness run --max-copy-mb`: what may be copied into its sandbox. A normal repository fits once its
# dependencies (.venv, node_modules: ignored by .gitignore) are left out.
DEFAULT_MAX_COPY_MB = 256

REPLY_TOKENS_BY_MODEL = (
    f"{LOCAL_REPLY_TOKENS} for local models, else {API_REPLY_TOKENS}"  # default_reply_tokens in words
)


@dataclass
class LoopConfig:
    """The loop's settings and their defaults: the one place they are defined and described. The CLIs make
    their options from these fields (add_loop_options); the help text is each field's metadata."""

    # The runner keeps the smaller of max_steps, wall_time, command_timeout and the task's own limits.
    max_steps: int = field(default=30, metadata={"help": "model turns per attempt"})
    wall_time: float = field(default=600.0, metadata={"help": "seconds for the whole attempt"})
    command_timeout: float = field(default=60.0, metadata={"help": "seconds per command"})
    # None: the loop picks by the model (default_reply_tokens), and `harness eval` records what it picked.
    max_reply_tokens: Optional[int] = field(
        default=None, metadata={"help": "tokens per model reply", "default_text": REPLY_TOKENS_BY_MODEL}
    )
    token_budget: Optional[int] = field(
        default=None, metadata={"help": "prompt+completion tokens per attempt (works with any model)"}
    )
    cost_limit: Optional[float] = field(default=None, metadata={"help": "USD per attempt"})
    temperature: float = field(default=0.0, metadata={"help": "sampling temperature"})
    seed: Optional[int] = field(
        default=None, metadata={"help": "sampling seed; each attempt and step gets its own"}
    )
    protocol: str = field(
        default="auto",
        metadata={
            "help": "tools: native tool calls; text: commands in ``` blocks; "
            "auto: tools when the model supports them",
            "choices": ["auto", "tools", "text"],
        },
    )
    # Off when sampling many attempts from one local model on a shared CPU: each waits for the others'
    # generation, so steps and reply tokens bound an attempt instead.
    task_wall_time: bool = field(default=True, metadata={"help": "apply the tasks' own wall-time limits"})
    demonstration: bool = field(
        default=True,
        metadata={"help": "text protocol: one worked example exchange first (small models copy its form)"},
    )
    observation_chars: int = field(
        default=8000,
        metadata={
            "help": "characters of a command's output shown to the model; "
            "longer output keeps its head and tail"
        },
    )


def add_loop_options(parser: argparse.ArgumentParser, *names: str, defaults: Optional[dict] = None) -> None:
    """Adds --NAME options (e.g. --max-steps) for these LoopConfig fields, with each field's help text and
    type. The default is the field's, unless `defaults` maps the name to (value, how the help describes it;
    "{default}" there is the field's default, None: not described)."""
    by_name = {f.name: f for f in fields(LoopConfig)}
    for name in names:
        f = by_name[name]
        described = f.metadata.get("default_text", f.default)
        default, said = (defaults or {}).get(name, (f.default, described))
        kind = {"int": int, "float": float, "str": str}[f.type.removeprefix("Optional[").removesuffix("]")]
        choices = f.metadata.get("choices")
        text = f.metadata["help"] + (
            "" if said is None else f" (default {str(said).format(default=described)})"
        )
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=None if choices else kind,
            choices=choices,
            default=default,
            help=text,
        )
