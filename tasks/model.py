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
from dataclasses import dataclass, field
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
    """A task's [evaluator] settings, as its kind's parser read them (evaluators/grading/kinds.py). The fields
    below are the built-in kinds' (their repr is part of the task hashes that runs written before resume
    against); a kind added later keeps its own settings dataclass in `settings`, hashed only when set, so
    adding one changes no other task's hash and touches no field here."""

    kind: str = (
        "pytest"  # a kind registered in evaluators/grading/kinds.py: pytest | answer | script | harbor
    )
    # answer: where the agent writes its answer, how to compare, against what
    answer_file: str = "answer.txt"
    mode: str = "exact"  # exact | normalized | regex | numeric | json
    expected: Any = None
    tolerance: float = 1e-6
    # pytest: extra paths (globs, relative to /workspace) the agent must not change; changes score 0 as tamper
    protected: tuple[str, ...] = ()
    # pytest: "proxy" (the candidate's modules run in their own process, as the sandbox user; plain values
    # cross) or "direct" (imported into the test process: the opt-out; canaries are then the only defence)
    import_mode: str = "proxy"
    settings: Any = field(default=None, repr=False)  # a frozen dataclass of a later kind's own settings

    def hashed(self) -> tuple:
        """What the task hashes see of these settings (as they were before `settings` existed, when unset)."""
        return (self,) if self.settings is None else (self, self.settings)


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
    harbor: Optional[Any] = None  # tasks.harbor.HarborSpec for a Harbor-format task (tests/test.sh verifier)

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
