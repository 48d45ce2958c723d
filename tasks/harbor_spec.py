"""What a Harbor task asks of the runtime, as tasks/harbor.py reads it from task.toml: HarborSpec (and its
StepSpec, Healthcheck), and the task.toml keys this harness knows (Harbor's schema 1.4 and a few of ours)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

SCHEMA_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4")
VERIFIER_MODES = ("fresh", "snapshot", "shared")  # ours; Harbor's shared -> shared, separate -> fresh
NETWORK_MODES = ("no-network", "public", "allowlist")

TOP_KEYS = {
    "schema_version",
    "version",
    "task",
    "metadata",
    "verifier",
    "agent",
    "environment",
    "solution",
    "source",
    "multi_step_reward_strategy",
    "steps",
    "artifacts",
}
TASK_KEYS = {"name", "version", "description", "authors", "keywords"}
AGENT_KEYS = {
    "timeout_sec",
    "user",
    "network_mode",
    "allowed_hosts",
    "max_steps",
    "command_timeout_sec",
}  # the last two: ours (the agent loop's limits)
VERIFIER_KEYS = {
    "timeout_sec",
    "env",
    "user",
    "environment_mode",
    "environment",
    "collect",
    "network_mode",
    "allowed_hosts",
    "isolation",
}  # isolation: ours, fresh | snapshot | shared
ENV_KEYS = {
    "build_timeout_sec",
    "docker_image",
    "os",
    "cpus",
    "memory_mb",
    "storage_mb",
    "gpus",
    "gpu_types",
    "tpu",
    "mcp_servers",
    "env",
    "skills_dir",
    "healthcheck",
    "workdir",
    "allow_internet",
    "network_mode",
    "allowed_hosts",
    "memory",
    "storage",
    "pids",
}  # memory/storage: Harbor's older spelling; pids: ours
HEALTHCHECK_KEYS = {
    "command",
    "interval_sec",
    "timeout_sec",
    "start_period_sec",
    "start_interval_sec",
    "retries",
}


@dataclass(frozen=True)
class Healthcheck:
    command: str
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


@dataclass(frozen=True)
class StepSpec:
    """One step of a multi-step task ([[steps]], files under steps/<name>/): the agent gets its instruction in
    the same container as the steps before, then its verifier runs (its tests over the task's tests/)."""

    name: str
    instruction: str
    test_files: tuple[tuple[str, bytes], ...] = ()  # tests/ with steps/<name>/tests/ on top
    solution_files: tuple[tuple[str, bytes], ...] = ()  # steps/<name>/solution/, else solution/
    workdir_files: tuple[tuple[str, bytes], ...] = ()  # steps/<name>/workdir/: copied in before the step
    agent_timeout_sec: Optional[float] = None
    agent_user: Optional[str] = None
    verifier_timeout_sec: Optional[float] = None
    verifier_user: Optional[str] = None
    verifier_env: tuple[tuple[str, str], ...] = ()
    min_reward: Optional[float] = None  # stop the remaining steps when this step's reward is below it
    artifacts: tuple[str, ...] = ()


@dataclass(frozen=True)
class HarborSpec:
    """What a Harbor task asks of the runtime, beyond what Task already holds (limits, files, timeouts)."""

    schema_version: str = "1.4"
    name: str = ""  # [task] name, "org/name"
    description: str = ""
    authors: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    metadata: tuple[
        tuple[str, str], ...
    ] = ()  # [metadata], any keys, values as TOML text (kept, not interpreted)
    source: str = ""
    docker_image: Optional[str] = None  # a prebuilt image, used as given (must exist locally)
    workdir: Optional[str] = None  # None -> the image's WORKDIR
    env: tuple[tuple[str, str], ...] = ()  # [environment.env]
    agent_user: Optional[str] = None  # None -> the image's USER (root for most images)
    verifier_user: Optional[str] = None
    verifier_env: tuple[tuple[str, str], ...] = ()
    verifier_mode: str = "shared"  # Harbor's default: the verifier runs in the agent's own container
    network_why: str = ""  # why the agent's container has (no) network: one line per run says it
    verifier_network: Optional[bool] = None  # None -> as the environment
    verifier_docker_image: Optional[str] = None  # [verifier.environment] docker_image
    verifier_dockerfile: Optional[str] = None  # tests/Dockerfile, for a separate verifier environment
    solution_env: tuple[tuple[str, str], ...] = ()
    healthcheck: Optional[Healthcheck] = None
    build_timeout_sec: float = 600.0
    artifacts: tuple[str, ...] = ()  # paths collected from the agent's container ([[artifacts]] / "path")
    steps: tuple[StepSpec, ...] = ()  # a multi-step task; empty for one step
    step_reward: str = "mean"  # multi_step_reward_strategy: mean of the steps' rewards, or the final one's
    warnings: tuple[str, ...] = ()
