"""One run config: `harness eval`'s options are EvalConfig's fields (and `harness train`'s TrainConfig's and
SFTConfig's), every default written once; the manifest records the config and reads it back, runs written
before it included; train builds an EvalConfig per eval."""

from __future__ import annotations

import argparse
import json
from dataclasses import MISSING, asdict, fields
from pathlib import Path

import pytest

import harness
from agent.config import LoopConfig
from agent.models import DEFAULT_MODEL
from agent.sandbox.registry import names, sandbox_backend
from evaluators.cli import eval_config_from
from evaluators.run.config import DEFAULT_SUITE, EvalConfig, TaskFilter
from lora.cli import train_config_from
from lora.config import SFTConfig, TrainConfig
from results.errors import UserError
from results.manifest import MANIFEST
from tasks.model import AgentLimits


def options(command: str) -> dict[str, argparse.Action]:
    sub = next(a for a in harness.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a for a in sub.choices[command]._actions}


def parse(*argv: str) -> argparse.Namespace:
    return harness.build_parser().parse_args(list(argv))


def default_of(f) -> object:
    if f.default is not MISSING:
        return f.default
    return None if f.default_factory is MISSING else f.default_factory()  # None: a required field


@pytest.mark.parametrize(
    "command, cls, prefix",
    [
        ("eval", EvalConfig, ""),
        ("eval", TaskFilter, ""),
        ("train", TrainConfig, ""),
    ]
    # every sandbox backend's options, as --NAME-FIELD (agent.config.add_backend_options)
    + [("eval", sandbox_backend(n).options, sandbox_backend(n).flag_prefix) for n in names()],
)
def test_every_option_is_a_field_with_its_help_and_its_default(command, cls, prefix):
    opts = options(command)
    for f in fields(cls):
        if not f.metadata.get("cli", "help" in f.metadata):
            continue
        action = opts[prefix + f.name]
        assert action.default is None  # not given: the field's default (or the preset's, the run's)
        assert action.help.startswith(f.metadata["help"]), f.name
        said = f.metadata.get("default_text", default_of(f))
        if said not in (None, [], False):
            assert (
                f"(default {said:g})" in action.help if isinstance(said, float) else str(said) in action.help
            )


def test_train_sft_options_are_sft_config_fields():
    opts = options("train")
    for name in ("rank", "lr", "epochs"):
        f = next(f for f in fields(SFTConfig) if f.name == name)
        assert opts[name].help == f"{f.metadata['help']} (default {f.default})"
    assert opts["samples"].option_strings == ["--samples", "-k"]
    assert opts["continue_adapter"].option_strings == ["--continue"]


def test_no_options_give_the_fields_defaults():
    cfg, tasks = eval_config_from(parse("eval"))
    assert (cfg.model, cfg.suite, cfg.samples, cfg.concurrency, cfg.model_slots) == (
        DEFAULT_MODEL,
        DEFAULT_SUITE,
        1,
        4,
        4,
    )
    assert cfg.loop == LoopConfig(seed=0)  # eval's runs are seeded
    assert cfg.filters == TaskFilter() and cfg.batch_grading == 0 and cfg.sandbox == "docker"
    assert cfg.sandbox_options == asdict(sandbox_backend("docker").options())
    assert tasks and all(t.difficulty <= 2 for t in tasks)  # builtin:easy


def test_a_backends_options_go_with_that_backend_only():
    """--k8s-namespace is k8s's option: given with another backend it is an error, not ignored."""
    with pytest.raises(
        UserError, match="--k8s-namespace is an option of --sandbox k8s, not of --sandbox docker"
    ):
        eval_config_from(parse("eval", "--k8s-namespace", "ns"))
    cfg, _ = eval_config_from(parse("eval", "--sandbox", "docker", "--docker-runtime", "runsc"))
    assert cfg.sandbox_options == {"runtime": "runsc"}


def test_options_build_the_config(tmp_path):
    cfg, tasks = eval_config_from(
        parse(
            *("eval", "--model", "replay:x.json", "--tasks", "builtin", "--domain", "data", "--tag", "count"),
            *("--limit", "3", "--samples", "2", "--concurrency", "3", "--model-concurrency", "1"),
            *("--temperature", "0.5", "--seed", "7", "--max-steps", "9", "--protocol", "text"),
            *("--batch-grading", "2", "--sandbox", "k8s", "--k8s-namespace", "ns", "--out", str(tmp_path)),
        )
    )
    assert (cfg.model, cfg.suite, cfg.limit, cfg.samples, cfg.concurrency, cfg.model_slots) == (
        "replay:x.json",
        "builtin",
        3,
        2,
        3,
        1,
    )
    assert (cfg.loop.temperature, cfg.loop.seed, cfg.loop.max_steps, cfg.loop.protocol) == (0.5, 7, 9, "text")
    assert cfg.filters == TaskFilter(domain="data", tags=["count"])
    assert cfg.sandbox_options == {"image": None, "namespace": "ns", "runtime_class": None, "connect": "auto"}
    assert (cfg.batch_grading, cfg.sandbox, cfg.out, cfg.resume) == (2, "k8s", tmp_path, None)
    assert len(tasks) == 3 and all(t.domain == "data" and "count" in t.tags for t in tasks)


def test_the_record_reads_back_as_the_same_config():
    cfg = EvalConfig(
        model="openai/m",
        model_options={"base_url": "http://x"},
        loop=LoopConfig(max_steps=3, temperature=0.7, seed=2, max_reply_tokens=50),
        suite="builtin",
        filters=TaskFilter(split="train", tags=["a"]),
        limit=4,
        samples=3,
        concurrency=2,
        model_concurrency=1,
        batch_grading=5,
        sandbox="k8s",
    )
    config = json.loads(json.dumps(cfg.record(["b", "a"], tools=[])))  # as manifest.json holds it
    assert config["tasks"] == ["a", "b"]
    assert (
        config["temperature"] == config["loop"]["temperature"] == 0.7
    )  # one value, recorded where resume looks
    assert EvalConfig.from_record("openai/m", config) == cfg


def test_a_manifest_from_before_the_fields_reads_as_their_defaults():
    old = {"model": "replay:x.json", "suite": "builtin", "tasks": ["t"], "temperature": 0.5}
    cfg = EvalConfig.from_record("replay:x.json", old)
    assert (cfg.samples, cfg.loop.temperature, cfg.batch_grading, cfg.filters) == (1, 0.5, 0, TaskFilter())
    assert cfg.loop == LoopConfig(temperature=0.5, seed=0)


def write_manifest(run: Path, model: str, config: dict) -> None:
    run.mkdir()
    (run / MANIFEST).write_text(json.dumps({"run_id": run.name, "model": model, "config": config}))


@pytest.mark.parametrize(
    "config",
    [
        # what run_eval recorded before EvalConfig
        {
            "model": "replay:x.json",
            "suite": "builtin",
            "tasks": ["count-lines-01", "create-file-01"],
            "samples": 3,
            "temperature": 0.5,
            "model_options": {},
            "loop": {**asdict(LoopConfig(temperature=0.5, seed=0)), "max_reply_tokens": 1024},
            "tools": [],
            "concurrency": 2,
            "model_concurrency": 2,
            "filters": {"domain": None, "difficulty": None, "split": None, "tags": None, "glob": None},
            "batch_grading": 4,
        },
        # older still: no loop, filters or batch grading
        {"suite": "builtin", "tasks": ["count-lines-01", "create-file-01"], "samples": 3, "temperature": 0.5},
    ],
)
def test_resuming_a_run_written_before_takes_its_recorded_settings(tmp_path, config):
    run = tmp_path / "run"
    write_manifest(run, "replay:x.json", config)
    cfg, tasks = eval_config_from(parse("eval", "--resume", str(run), "--concurrency", "5"))
    assert (cfg.model, cfg.suite, cfg.samples, cfg.loop.temperature, cfg.resume) == (
        "replay:x.json",
        "builtin",
        3,
        0.5,
        run,
    )
    assert cfg.batch_grading == config.get("batch_grading", 0) and cfg.concurrency == 5
    assert sorted(t.id for t in tasks) == config["tasks"]
    assert cfg.run_dir() == run
    with pytest.raises(UserError, match=r"--samples 2 \(the run has 3\)"):
        eval_config_from(parse("eval", "--resume", str(run), "--samples", "2"))


def test_retry_errors_needs_resume():
    with pytest.raises(UserError, match="--retry-errors needs --resume DIR"):
        eval_config_from(parse("eval", "--retry-errors"))


def test_train_options_override_the_preset_and_the_fields_defaults(tmp_path):
    cfg = train_config_from(
        parse("train", "--model", "local:m", "--tasks", "builtin", "--out", str(tmp_path))
    )
    assert cfg == TrainConfig(model="local:m", tasks="builtin", out=tmp_path)
    cfg = train_config_from(
        parse(
            "train",
            "--preset",
            "rft-smollm2",
            "-k",
            "3",
            "--lr",
            "0.01",
            "--continue",
            "--audit-runs",
            "a",
            "b",
        )
    )
    assert (cfg.model, cfg.samples, cfg.max_steps, cfg.continue_adapter, cfg.audit_runs) == (
        "local:smollm2-135m",
        3,
        5,
        True,
        ["a", "b"],
    )
    assert (cfg.sft.lr, cfg.sft.rank, cfg.sft.epochs) == (0.01, 16, 3)  # the flag, then the preset's
    assert cfg.out == Path("runs/train/local_smollm2-135m-builtin_easy")


def test_train_builds_one_eval_config_per_eval(tmp_path):
    from lora.phases import eval_config

    train = TrainConfig(model="local:m", tasks="t", out=tmp_path, max_steps=4, concurrency=3, cluster="auto")
    cfg = eval_config(train, 8, 0.7, tmp_path / "e", tmp_path / "adapter", seed=2)
    assert (cfg.model, cfg.samples, cfg.concurrency, cfg.cluster, cfg.out) == (
        "local:m",
        8,
        3,
        "auto",
        tmp_path / "e",
    )
    assert cfg.model_options == {"adapter": str(tmp_path / "adapter")}
    assert (cfg.loop.max_steps, cfg.loop.temperature, cfg.loop.seed, cfg.loop.task_wall_time) == (
        4,
        0.7,
        2,
        False,
    )


def test_the_loops_limits_default_to_the_tasks_own():
    loop, limits = LoopConfig(), AgentLimits()
    assert (loop.max_steps, loop.wall_time, loop.command_timeout) == (
        limits.max_steps,
        limits.timeout_sec,
        limits.command_timeout_sec,
    )
