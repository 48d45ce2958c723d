"""The agent's settings and their defaults, each defined and described once (model: TRL's SFTConfig).

LoopConfig holds the loop's limits and sampling settings; the CLIs (`harness eval`, `run`, `train`) make
their options from its fields with add_loop_options, so the help text is the field's metadata. The sandbox
backends' options (each backend's options dataclass, agent/sandbox/registry.py) become flags the same way
(add_backend_options, backend_options). The default model string is agent.models.DEFAULT_MODEL.
"""

from __future__ import annotations

import argparse
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Optional

from results.errors import UserError
from tasks.model import AgentLimits

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

    # The runner keeps the smaller of max_steps, wall_time, command_timeout and the task's own limits
    # (task.toml's [agent], tasks.model.AgentLimits, whose defaults these are).
    max_steps: int = field(default=AgentLimits.max_steps, metadata={"help": "model turns per attempt"})
    wall_time: float = field(
        default=AgentLimits.timeout_sec, metadata={"help": "seconds for the whole attempt"}
    )
    command_timeout: float = field(
        default=AgentLimits.command_timeout_sec, metadata={"help": "seconds per command"}
    )
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
    """Adds --NAME options (e.g. --max-steps) for these LoopConfig fields (add_field_options)."""
    add_field_options(parser, LoopConfig, *names, defaults=defaults)


_TYPES = {"int": int, "float": float, "str": str, "Path": Path}


def add_field_options(
    parser: argparse.ArgumentParser,
    cls: type,
    *names: str,
    defaults: Optional[dict] = None,
    unset: bool = False,
    prefix: str = "",
) -> None:
    """Adds an option for each of these fields of the dataclass `cls` (all of them when none are named),
    typed by the field's annotation, with the help text of its metadata: the one place where a setting is
    described and its default written. The option is --PREFIXNAME (metadata "flag" names another; "short"
    adds one; "dest" too); metadata "choices", "metavar", "nargs" and "action" pass to argparse, and a
    field whose metadata says cli=False gets none. The default is the field's, unless `defaults` maps the
    name to (value, how the help describes it; "{default}" there is the field's default, None: not
    described). With `unset`, every option's default is None (not given: the caller fills in the field's
    default, so it can tell what was asked for) and the help names the field's default."""
    by_name = {f.name: f for f in fields(cls)}
    chosen = [by_name[n] for n in names] if names else [f for f in fields(cls) if f.metadata.get("cli", True)]
    for f in chosen:
        meta = f.metadata
        if "help" not in meta:
            raise TypeError(f"{cls.__name__}.{f.name} has no help text in its metadata")
        if f.default is not MISSING:
            own = f.default
        else:  # a factory's value, or None for a required field
            own = None if f.default_factory is MISSING else f.default_factory()  # type: ignore[misc]
        described = meta.get("default_text", own)
        default, said = (defaults or {}).get(f.name, (None if unset else own, described))
        if isinstance(said, (list, tuple, dict)) and not said:
            said = None  # nothing to say: empty
        text = meta["help"] + ("" if said is None else f" (default {str(said).format(default=described)})")
        kind = _type_name(f.type).removeprefix("Optional[").removesuffix("]")
        kw: dict = {"default": default, "help": text}
        for key in ("choices", "metavar", "nargs", "action", "dest"):
            if key in meta:
                kw[key] = meta[key]
        if kind == "bool":
            kw.setdefault("action", "store_true")
        elif kind.startswith("list["):
            kw["type"] = _TYPES[kind.removeprefix("list[").removesuffix("]")]
            if "nargs" not in kw:
                kw.setdefault("action", "append")
        elif "choices" not in kw:
            kw["type"] = _TYPES[kind]
        flag = meta.get("flag", "--" + (prefix + f.name).replace("_", "-"))
        kw.setdefault("dest", prefix + f.name)
        parser.add_argument(flag, *([meta["short"]] if "short" in meta else []), **kw)


def _type_name(annotation) -> str:
    """A field's type as add_field_options reads it ("int", "Optional[str]", "list[str]"): the annotation's
    text, or for a class that did not write annotations as text (a plugin's options), its name."""
    if isinstance(annotation, str):
        return annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return f"Optional[{_type_name(args[0])}]"
    if typing.get_origin(annotation) is list:
        return f"list[{_type_name(args[0])}]"
    return annotation.__name__


def given_fields(args: argparse.Namespace, cls: type, prefix: str = "") -> dict:
    """The fields of `cls` whose options (add_field_options, unset) were given: {field: value}."""
    out = {}
    for f in fields(cls):
        if not f.metadata.get("cli", True):
            continue
        dest = f.metadata.get("dest", prefix + f.name)
        value = getattr(args, dest, None)
        if value is not None:
            out[f.name] = value
    return out


def _backends() -> list:
    """The backends whose options become flags: the built-in ones and installed plugins' (one that fails to
    load gets no flags here: naming it in --sandbox reports why)."""
    from agent.sandbox.registry import names, sandbox_backend

    found = []
    for name in names():
        try:
            found.append(sandbox_backend(name))
        except Exception:
            continue
    return found


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    """Every sandbox backend's options as --NAME-FIELD (e.g. --k8s-namespace), one help group a backend,
    from the fields of its options dataclass (add_field_options, unset: backend_options reads them)."""
    for backend in _backends():
        if fields(backend.options):
            group = parser.add_argument_group(f"--sandbox {backend.name}")
            add_field_options(group, backend.options, unset=True, prefix=backend.flag_prefix)


def backend_options(args: argparse.Namespace, name: str) -> dict:
    """The options of the backend `name` as a dict (its defaults, and the flags given); a UserError for a
    flag of another backend. A backend named by a dotted path takes its defaults."""
    from agent.sandbox.registry import sandbox_backend

    chosen = sandbox_backend(name)
    for other in _backends():
        if other.name != chosen.name:
            given = given_fields(args, other.options, prefix=other.flag_prefix)
            if given:
                flag = "--" + (other.flag_prefix + next(iter(given))).replace("_", "-")
                raise UserError(f"{flag} is an option of --sandbox {other.name}, not of --sandbox {name}")
    return asdict(chosen.settings(given_fields(args, chosen.options, prefix=chosen.flag_prefix)))
