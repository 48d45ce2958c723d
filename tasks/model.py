"""A task as the rest of harness sees it, after loading and validation (tasks/task_folder.py loads one task
folder, tasks/loader.py a suite).

On disk (Harbor / Terminal-Bench 2 layout):
  task.toml        metadata, limits, environment, [evaluator]
  instruction.md   what the agent sees
  environment/     optional Dockerfile (FROM the base image). With a Dockerfile, the other files are its build
                   context only (they reach the image through its own COPY); without one, they are starting
                   files of /workspace
  tests/           hidden tests (pytest files, or test.sh for the script evaluator); never in the agent's
                   sandbox
  solution/solve.sh  the oracle, run in /workspace
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

DOMAINS = ("coding", "data", "ops", "documents", "science")  # Task.domain
SPLITS = ("train", "heldout")  # Task.split of a family instance


@dataclass(frozen=True)
class AgentLimits:
    """A task's own limits (task.toml's [agent]); their defaults are also the loop's (agent.config.LoopConfig
    max_steps, wall_time, command_timeout), and an attempt runs under the smaller of the two."""

    timeout_sec: float = 600.0  # wall time for the whole attempt
    max_steps: int = 30
    command_timeout_sec: float = 60.0  # per command


@dataclass(frozen=True)
class Environment:
    cpus: float = 1.0
    memory_mb: int = 1024
    storage_mb: int = 512  # size of the /workspace tmpfs
    allow_internet: bool = False
    pids: int = 256


@dataclass(frozen=True)
class EvaluatorConfig:
    """A task's [evaluator] settings, as its kind's parser read them (tasks/kinds.py finds the kind): the
    kind's name and its own frozen settings dataclass (e.g. evaluators/grading/answer_kind.AnswerSettings);
    None stands for that kind's defaults."""

    kind: str = "pytest"  # a kind tasks/kinds.py finds: pytest | answer | script | harbor | a plugin's
    settings: Any = None

    def hashed(self) -> tuple:
        """What the task hashes see of these settings. Runs written before resume and compare against those
        hashes, which once saw one record of every built-in kind's fields (HASHED_AS_BEFORE): the settings'
        fields of those names fill that record in as they did; a settings object with fields of other names
        (a kind added since) is hashed after it, so adding a kind changes no other task's hash."""
        values = dict(HASHED_AS_BEFORE)
        own = fields(self.settings) if self.settings is not None else ()
        mine = {f.name: getattr(self.settings, f.name) for f in own}
        values.update({k: v for k, v in mine.items() if k in values})
        record = _Repr(
            f"EvaluatorConfig(kind={self.kind!r}, " + ", ".join(f"{k}={v!r}" for k, v in values.items()) + ")"
        )
        return (record,) if mine.keys() <= values.keys() else (record, self.settings)


# The record the task hashes have always seen of a task's [evaluator]: the built-in kinds' fields (answer:
# answer_file, mode, expected, tolerance; pytest: protected, import_mode) in this order, with these defaults.
# Frozen: it exists only so that runs written before still resume; a new kind's settings never go here.
HASHED_AS_BEFORE: tuple[tuple[str, Any], ...] = (
    ("answer_file", "answer.txt"),
    ("mode", "exact"),
    ("expected", None),
    ("tolerance", 1e-6),
    ("protected", ()),
    ("import_mode", "proxy"),
)


class _Repr:
    """A value whose repr is the given text (what the hashes read)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


@dataclass
class Task:
    id: str
    path: Optional[Path]  # folder it came from (None for generated instances)
    instruction: str
    version: str = "1"
    domain: str = "coding"
    difficulty: int = 1
    tags: tuple[str, ...] = ()
    family: str = ""  # parametrised family this instance belongs to
    split: str = ""  # "train" / "heldout" within a family
    agent: AgentLimits = field(default_factory=AgentLimits)
    verifier_timeout_sec: float = 120.0
    environment: Environment = field(default_factory=Environment)
    evaluator: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    dockerfile: Optional[str] = None  # text of environment/Dockerfile; None -> the base image
    workspace_files: dict[str, bytes] = field(default_factory=dict)  # relative path -> content
    executable_files: tuple[str, ...] = ()  # workspace files that start with the executable bit
    test_files: dict[str, bytes] = field(default_factory=dict)  # hidden
    solution_files: dict[str, bytes] = field(default_factory=dict)  # solve.sh (+ helpers)
    build_context: dict[str, bytes] = field(default_factory=dict)  # environment/ files beside a Dockerfile
    harbor: Optional[Any] = None  # tasks.harbor_spec.HarborSpec of a Harbor task (tests/test.sh verifier)
    # A worked example (chat messages) shown before the instruction: a hint (lora/curriculum.hinted_task)
    example: tuple[dict, ...] = ()

    def content_hash(self) -> str:
        """Hash of everything that defines the task: changes when the task changes."""
        h = hashlib.sha256()
        h.update(
            repr(
                (
                    self.id,
                    self.version,
                    self.instruction,
                    self.dockerfile,
                    *self.evaluator.hashed(),
                    self.environment,
                    self.agent,
                )
                + ((self.harbor,) if self.harbor else ())
                + ((self.example,) if self.example else ())
            ).encode()
        )
        for group in (self.workspace_files, self.test_files, self.solution_files, self.build_context):
            for name in sorted(group):
                h.update(name.encode() + b"\0" + group[name] + b"\0")
        return h.hexdigest()[:16]

    def grading_hash(self) -> str:
        """Hash of what a verdict depends on besides the agent's changes: the hidden tests, the evaluator,
        the environment and the starting files. Rescore, resume and compare use it to see a task changed."""
        h = hashlib.sha256(
            repr((self.dockerfile, *self.evaluator.hashed(), self.environment, self.harbor)).encode()
        )
        for group in (self.test_files, self.workspace_files, self.build_context):
            for name in sorted(group):
                h.update(name.encode() + b"\0" + group[name] + b"\0")
            h.update(b"\1")
        return h.hexdigest()[:16]
