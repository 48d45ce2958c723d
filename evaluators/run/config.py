"""The settings of one evaluation run and their defaults, each defined and described once (as LoopConfig).

`harness eval` makes its options from EvalConfig's fields (add_eval_options: the help text is each field's
metadata), runner.run_eval takes one EvalConfig, the manifest records it (record(); from_record() reads a
run's back, runs made before it included), the cluster ships it to its nodes, and `harness train` builds
one per eval. The sampling temperature and seed live once, in `loop` (LoopConfig).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Optional

from agent.config import LoopConfig, add_backend_options, add_field_options, add_loop_options
from agent.models import DEFAULT_MODEL
from agent.sandbox.registry import BUILTIN as SANDBOXES
from agent.sandbox.registry import DEFAULT as DEFAULT_SANDBOX
from tasks.model import DOMAINS

DEFAULT_SUITE = "builtin:easy"


@dataclass
class TaskFilter:
    """Which tasks of the suite run (tasks.loader.load_suite's filters); recorded as config["filters"]."""

    domain: Optional[str] = field(
        default=None, metadata={"help": f"only tasks of this domain ({', '.join(DOMAINS)})"}
    )
    difficulty: Optional[int] = field(default=None, metadata={"help": "only tasks of this difficulty (1-5)"})
    split: Optional[str] = field(
        default=None, metadata={"help": "only family instances of this split (train or heldout)"}
    )
    tags: Optional[list[str]] = field(
        default=None,
        metadata={"help": "only tasks with this tag (repeatable: all must match)", "flag": "--tag"},
    )
    glob: Optional[str] = field(default=None, metadata={"help": "only task ids matching this glob"})


def eval_loop() -> LoopConfig:
    return LoopConfig(seed=0)  # eval's runs are seeded (LoopConfig's None: not)


# Settings that are the run's place or its machine's, not what was run: the manifest leaves them out.
NOT_RECORDED = ("out", "resume", "retry_errors", "max_sandboxes", "sandbox_options")


@dataclass
class EvalConfig:
    """One evaluation run's settings: the one place they are defined and described."""

    # What is evaluated: the model string (agent.models.get_model) and its options (-M KEY=VALUE).
    model: str = field(default=DEFAULT_MODEL, metadata={"help": "model string; see README 'Model strings'"})
    model_options: dict[str, Any] = field(default_factory=dict, metadata={"cli": False})
    # The agent loop's limits and sampling (temperature, seed): the record's and the manifest's too.
    loop: LoopConfig = field(default_factory=eval_loop, metadata={"cli": False})
    # Which tasks: the suite, its filters and `limit` of them spread over its kinds (select_tasks).
    suite: str = field(
        default=DEFAULT_SUITE,
        metadata={
            "help": "suite: folder, builtin, builtin:easy, builtin:demo",
            "flag": "--tasks",
            "metavar": "TASKS",
        },
    )
    filters: TaskFilter = field(default_factory=TaskFilter, metadata={"cli": False})
    limit: Optional[int] = field(
        default=None,
        metadata={
            "help": "only N of the selected tasks, spread over difficulties and domains",
            "metavar": "N",
        },
    )
    no_internet: bool = field(
        default=False,
        metadata={
            "help": "Harbor tasks: no network for any container (default: as each task says; Harbor's: on)",
            "default_text": None,
        },
    )
    samples: int = field(default=1, metadata={"help": "attempts per task"})
    # How much at once: attempts in flight, model requests in flight (None: as many as attempts), and the
    # containers the pool may hold (None: an agent's and a grader's per attempt, plus two).
    concurrency: int = field(
        default=4,
        metadata={"help": "attempts in flight (a local model decodes concurrent requests as one batch)"},
    )
    model_concurrency: Optional[int] = field(
        default=None,
        metadata={"help": "concurrent model requests", "default_text": "--concurrency"},
    )
    max_sandboxes: Optional[int] = field(default=None, metadata={"cli": False})
    # 0 or 1: a fresh grading container per attempt; N > 1: up to N attempts of one image share one, each as
    # its own user (evaluators/grade.GradingStations).
    batch_grading: int = field(
        default=0,
        metadata={
            "help": "up to N attempts of one image take turns in one fresh grading container, each as its "
            "own user (pytest tasks with the candidate proxy; others keep a container each)",
            "metavar": "N",
            "default_text": "0: one per attempt",
        },
    )
    # Where the attempts run: this machine, or a Ray cluster's nodes; sandboxes in Docker or Kubernetes.
    cluster: Optional[str] = field(
        default=None,
        metadata={
            "help": "run the attempts on a Ray cluster: ray://HOST:PORT, HOST:PORT or auto "
            "(needs harness[cluster])",
            "metavar": "ADDRESS",
        },
    )
    sandbox: str = field(
        default=DEFAULT_SANDBOX,
        metadata={
            # any name agent/sandbox/registry.py finds (checked before the model loads: check_run)
            "help": f"where sandboxes run: {', '.join(SANDBOXES)} (agent/sandbox/registry.py), an installed "
            "plugin's, or module:BACKEND",
            "metavar": "BACKEND",
        },
    )
    # The chosen backend's options (its options dataclass as a dict: --NAME-FIELD flags, backend_options).
    sandbox_options: dict[str, Any] = field(default_factory=dict, metadata={"cli": False})
    # The run folder: a new one (None: runs/<time>-<model>), or `resume`, an interrupted run to continue.
    out: Optional[Path] = field(
        default=None, metadata={"help": "run folder", "default_text": "runs/<time>-<model>"}
    )
    resume: Optional[Path] = field(
        default=None,
        metadata={"help": "continue an interrupted run in DIR", "metavar": "DIR", "default_text": None},
    )
    retry_errors: bool = field(
        default=False,
        metadata={
            "help": "with --resume: also run again the attempts recorded as error (infrastructure or "
            "provider outage); their old records move to DIR/retried.jsonl",
            "default_text": None,
        },
    )

    @property
    def temperature(self) -> float:
        return self.loop.temperature

    @property
    def model_slots(self) -> int:
        """Model requests in flight at once."""
        return self.model_concurrency or self.concurrency

    def run_dir(self) -> Path:
        """The run folder: the one resumed, the one asked for, or a new one named by time and model."""
        from results.store import default_run_dir

        return Path(self.resume or self.out or default_run_dir(self.model))

    def record(self, task_ids: list[str], tools: Any) -> dict[str, Any]:
        """The manifest's config: what a later report, resume or rescore reads back (from_record). A setting
        this does not name is recorded as it is, so a new field reaches the manifest with no line here."""
        named = {
            "model": self.model,
            "suite": self.suite,
            "tasks": sorted(task_ids),
            "samples": self.samples,
            "temperature": self.loop.temperature,  # also in "loop": the key resume compares, and older runs'
            "model_options": {k: str(v) for k, v in self.model_options.items()},
            "loop": self.loop.__dict__,
            "tools": tools,
            "concurrency": self.concurrency,
            "model_concurrency": self.model_slots,
            "filters": asdict(self.filters),
            "limit": self.limit,
            "batch_grading": self.batch_grading,
            "sandbox": self.sandbox,
            "cluster": self.cluster,
        }  # recorded, not compared on resume (results/manifest.RESUME_KEYS)
        rest = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in named and f.name not in NOT_RECORDED
        }
        return {**named, **{k: str(v) if isinstance(v, Path) else v for k, v in rest.items()}}

    @classmethod
    def from_record(cls, model: str, config: dict[str, Any]) -> "EvalConfig":
        """A run's settings as its manifest recorded them; a key a run made before it was recorded takes the
        default (an older run's loop: its top-level temperature)."""
        loop_fields = {f.name for f in fields(LoopConfig)}
        loop = {k: v for k, v in (config.get("loop") or {}).items() if k in loop_fields}
        loop.setdefault("temperature", config.get("temperature", LoopConfig.temperature))
        known = {f.name for f in fields(cls)} - {"model", "loop", "filters", "model_options"}
        rest = {k: config[k] for k in known if config.get(k) is not None}
        filter_fields = {f.name for f in fields(TaskFilter)}
        return cls(
            model=model,
            loop=replace(eval_loop(), **loop),
            filters=TaskFilter(
                **{k: v for k, v in (config.get("filters") or {}).items() if k in filter_fields}
            ),
            model_options=dict(config.get("model_options") or {}),
            **rest,
        )


def add_eval_options(parser: argparse.ArgumentParser) -> None:
    """`harness eval`'s run options, from EvalConfig's fields (and LoopConfig's, TaskFilter's, and every
    sandbox backend's options dataclass: agent.config.add_backend_options).
    Every default is None (not given): eval_config_from fills in the field's, or on resume the run's."""
    from agent.models import add_model_option

    def add(*names):
        add_field_options(parser, EvalConfig, *names, unset=True)

    add("model")
    add_model_option(parser)
    add("suite")
    add_field_options(parser, TaskFilter, unset=True)
    add("limit", "samples", "concurrency", "model_concurrency", "batch_grading")
    add_loop_options(parser, "temperature", defaults={"temperature": (None, "{default:g}")})
    add_loop_options(parser, "max_steps", "max_reply_tokens", "token_budget", "cost_limit", "protocol")
    parser.add_argument("--adapter", help="LoRA adapter folder for a local model (same as -M adapter=DIR)")
    parser.add_argument(
        "--base-url", help="OpenAI-compatible endpoint (with --model NAME; same as -M base_url=URL)"
    )
    add_loop_options(parser, "seed", defaults={"seed": (None, eval_loop().seed)})
    add("out", "no_internet", "resume", "retry_errors", "cluster", "sandbox")
    add_backend_options(parser)
    # a field not placed above gets its option here, so a new setting needs no line in this function
    placed = {"model", "suite", "limit", "samples", "concurrency", "model_concurrency", "batch_grading"}
    placed |= {"out", "no_internet", "resume", "retry_errors", "cluster", "sandbox"}
    if rest := [f.name for f in fields(EvalConfig) if f.name not in placed and f.metadata.get("cli", True)]:
        add(*rest)


LOOP_OPTIONS = (
    "temperature",
    "max_steps",
    "max_reply_tokens",
    "token_budget",
    "cost_limit",
    "protocol",
    "seed",
)
