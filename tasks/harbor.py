"""Harbor / Terminal-Bench 2 tasks, read field by field from Harbor's task config (schema 1.4).

A task folder is a Harbor task when its task.toml has no [evaluator] table and tests/test.sh exists (or it
says schema_version). Then tests/test.sh is the verifier: it sees the hidden tests at /tests and writes
/logs/verifier/reward.txt (one number) or reward.json (named numbers). See README "Harbor tasks" for the
runtime contract and the table of fields (honoured / warned / refused).

Unknown keys give one warning per task (printed to stderr, kept in HarborSpec.warnings), not an error.
Fields we cannot honour (GPUs, TPUs, MCP servers, multi-container compose, multi-step tasks, network
allowlists, Windows) raise UserError naming the field: never a silent wrong run.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

from results.errors import UserError

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

_warned: set[str] = set()


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


def is_harbor(data: dict, files: dict[str, bytes]) -> bool:
    """A Harbor task: no [evaluator] table (ours) and a tests/test.sh verifier, or an explicit
    schema_version."""
    return "evaluator" not in data and ("tests/test.sh" in files or "schema_version" in data)


def parse(
    data: dict, files: dict[str, bytes], loc: str, where: Callable[[str], str]
) -> tuple[HarborSpec, dict]:
    """Reads a Harbor task.toml. Returns the spec and the plain values the loader puts on Task:
    {difficulty, domain, tags, agent: {...}, verifier_timeout, environment: {...}}."""
    warnings: list[str] = []
    unknown = [k for k in data if k not in TOP_KEYS]
    version = _schema_version(data, loc, warnings)
    task = _task_fields(data, loc, unknown)
    meta, difficulty, tags = _metadata(data, loc)

    agent_t = _table(data, "agent", "[agent]", loc)
    _check(agent_t, AGENT_KEYS, "agent", unknown)
    agent_user = _user(agent_t, loc, "[agent]")
    agent_net = _network(agent_t, loc, "[agent]")

    env_t = _table(data, "environment", "[environment]", loc)
    _check(env_t, ENV_KEYS, "environment", unknown)
    _refuse_unsupported(env_t, loc, "[environment]")
    environment = _environment_fields(env_t, loc, unknown)
    baseline_network, network, why = _network_policy(env_t, agent_t, agent_net, loc)
    environment["healthcheck"] = _healthcheck(env_t, loc, unknown)
    environment["build_timeout_sec"] = _num(env_t, "build_timeout_sec", 600.0, loc, "[environment]")
    warnings.extend(_environment_warnings(env_t))

    ver_t = _table(data, "verifier", "[verifier]", loc)
    verifier_timeout = _num(ver_t, "timeout_sec", 600.0, loc, "[verifier]")
    verifier = _verifier_fields(ver_t, files, loc, unknown, warnings, baseline_network, network)
    rest = _solution_steps_artifacts(data, files, loc, where, unknown, verifier["verifier_mode"])

    if unknown:
        warnings.insert(0, f"unknown keys ignored: {', '.join(unknown)}")
    _print_warnings(loc, warnings)

    spec = HarborSpec(
        schema_version=version,
        **task,
        metadata=tuple(sorted((str(k), _toml_text(v)) for k, v in meta.items())),
        **environment,
        agent_user=agent_user,
        network_why=why,
        **verifier,
        **rest,
        warnings=tuple(warnings),
    )
    values = {
        "difficulty": difficulty,
        "tags": tuple(dict.fromkeys(tags + task["keywords"])),
        "agent": {k: agent_t[k] for k in ("timeout_sec", "max_steps", "command_timeout_sec") if k in agent_t},
        "verifier_timeout": verifier_timeout,
        "environment": {
            **{k: env_t[k] for k in ("cpus", "memory_mb", "memory", "pids") if k in env_t},
            "allow_internet": bool(network),
        },
    }
    return spec, values


# ---------------------------------------------------------------------------------------------- parse's parts
# Each reads one table of task.toml in the order parse calls them (so the first bad field is the one named);
# unknown keys go to `unknown`, things we read but do not honour to `warnings`.


def _table(parent: dict, key: str, label: str, loc: str) -> dict:
    value = parent.get(key, {})
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{loc}: {label} must be a table")
    return value


def _check(t: dict, allowed: set[str], label: str, unknown: list[str]) -> None:
    unknown.extend(f"{label}.{k}" for k in t if k not in allowed)


def _schema_version(data: dict, loc: str, warnings: list[str]) -> str:
    version = data.get("schema_version", data.get("version", "1.4"))
    if not isinstance(version, str):
        raise UserError(f'{loc}: schema_version must be a string such as "1.4" (got {_show(version)})')
    if "schema_version" in data and version not in SCHEMA_VERSIONS:
        warnings.append(f"schema_version {version!r} is newer than 1.4, the newest this harness knows")
    return version


def _task_fields(data: dict, loc: str, unknown: list[str]) -> dict:
    """[task]: name, description, authors ("Name <email>"), keywords."""
    task_t = _table(data, "task", "[task]", loc)
    _check(task_t, TASK_KEYS, "task", unknown)
    name = _str(task_t, "name", "", loc, "[task]")
    description = _str(task_t, "description", "", loc, "[task]")
    authors = []
    for a in _list(task_t, "authors", loc, "[task]"):
        if isinstance(a, dict) and isinstance(a.get("name"), str):
            authors.append(a["name"] + (f" <{a['email']}>" if isinstance(a.get("email"), str) else ""))
        elif isinstance(a, str):
            authors.append(a)
        else:
            raise UserError(
                f'{loc}: [task] authors must be a list of {{ name = "...", email = "..." }} (got {_show(a)})'
            )
    keywords = _strings(task_t, "keywords", loc, "[task]")
    return {"name": name, "description": description, "authors": tuple(authors), "keywords": tuple(keywords)}


def _metadata(data: dict, loc: str) -> tuple[dict, Optional[int], tuple[str, ...]]:
    """[metadata]: free-form; a few conventional keys are read when they make sense."""
    meta = _table(data, "metadata", "[metadata]", loc)
    difficulty = {"easy": 1, "medium": 3, "hard": 5}.get(str(meta.get("difficulty", "")).lower())
    if difficulty is None and isinstance(meta.get("difficulty"), int) and 1 <= meta["difficulty"] <= 5:
        difficulty = meta["difficulty"]
    tags = tuple(
        t for t in (meta.get("tags") if isinstance(meta.get("tags"), list) else []) if isinstance(t, str)
    )
    return meta, difficulty, tags


def _environment_fields(env_t: dict, loc: str, unknown: list[str]) -> dict:
    """[environment]'s image, working directory and variables."""
    docker_image = _str(env_t, "docker_image", None, loc, "[environment]")
    workdir = _str(env_t, "workdir", None, loc, "[environment]")
    if workdir is not None and not workdir.startswith("/"):
        raise UserError(
            f'{loc}: [environment] workdir must be an absolute path such as "/app" (got {_show(workdir)})'
        )
    env = _env(env_t, "env", loc, "[environment]")
    return {"docker_image": docker_image, "workdir": workdir, "env": env}


def _network_policy(
    env_t: dict, agent_t: dict, agent_net: Optional[bool], loc: str
) -> tuple[bool, bool, str]:
    """(the environment's network, the agent container's network, why) from [environment] and [agent]."""
    baseline_network = _network(env_t, loc, "[environment]")
    if baseline_network is None:
        baseline_network, why = True, "no network key: Harbor's default (allow_internet = true)"
    elif "network_mode" in env_t:
        why = f'[environment] network_mode = "{env_t["network_mode"]}"'
    else:
        why = f"[environment] allow_internet = {str(baseline_network).lower()}"
    network = baseline_network
    if agent_net is not None:
        network = agent_net  # the agent phase's own policy wins for the agent's container
        why = f'[agent] network_mode = "{agent_t["network_mode"]}"'
    return baseline_network, network, why


def _environment_warnings(env_t: dict) -> list[str]:
    """[environment] keys we read but do not honour."""
    warnings = []
    for key in ("skills_dir",):
        if env_t.get(key):
            warnings.append(f"[environment] {key} is not used by this harness (ignored)")
    if "storage_mb" in env_t or "storage" in env_t:
        warnings.append(
            "[environment] storage_mb is not enforced on the writable root filesystem "
            "(no overlay quota here); /tmp is still size-limited"
        )
    if env_t.get("build_timeout_sec", 600.0) != 600.0:
        warnings.append("[environment] build_timeout_sec is not enforced (images build without a time limit)")
    return warnings


def _verifier_mode(ver_t: dict, loc: str) -> str:
    """Our isolation from Harbor's environment_mode (shared -> shared, separate -> fresh) or ours."""
    mode_h = ver_t.get("environment_mode")
    if mode_h is not None and mode_h not in ("shared", "separate"):
        raise UserError(
            f'{loc}: [verifier] environment_mode must be "shared" or "separate" (got {_show(mode_h)})'
        )
    if mode_h == "shared" and "environment" in ver_t:
        raise UserError(
            f'{loc}: [verifier] environment_mode = "shared" conflicts with [verifier.environment] '
            "(remove one)"
        )
    if mode_h is None and "environment" in ver_t:
        mode_h = "separate"
    mode = {"shared": "shared", "separate": "fresh", None: "shared"}[mode_h]  # unset: Harbor's shared
    if "isolation" in ver_t:
        mode = ver_t["isolation"]
        if mode not in VERIFIER_MODES:
            raise UserError(
                f"{loc}: [verifier] isolation must be one of {', '.join(VERIFIER_MODES)} (got {_show(mode)})"
            )
    return mode


def _verifier_fields(
    ver_t: dict,
    files: dict[str, bytes],
    loc: str,
    unknown: list[str],
    warnings: list[str],
    baseline_network: bool,
    network: bool,
) -> dict:
    """[verifier] and [verifier.environment]: who runs the tests, where, with what network."""
    _check(ver_t, VERIFIER_KEYS, "verifier", unknown)
    verifier_env = _env(ver_t, "env", loc, "[verifier]")
    verifier_user = _user(ver_t, loc, "[verifier]")
    verifier_net = _network(ver_t, loc, "[verifier]")
    venv_t = _table(ver_t, "environment", "[verifier.environment]", loc)
    _check(venv_t, ENV_KEYS, "verifier.environment", unknown)
    _refuse_unsupported(venv_t, loc, "[verifier.environment]")
    mode = _verifier_mode(ver_t, loc)
    if ver_t.get("collect"):
        warnings.append(
            "[verifier] collect is not run (it collects from compose sidecars, which are not supported)"
        )
    verifier_dockerfile = None
    if mode == "fresh" and "Dockerfile" in {n[len("tests/") :] for n in files if n.startswith("tests/")}:
        verifier_dockerfile = files["tests/Dockerfile"].decode("utf-8", "replace")
    if mode == "shared" and bool(verifier_net if verifier_net is not None else baseline_network) != bool(
        network
    ):
        warnings.append(
            "[verifier] network_mode differs from the agent's, but a shared verifier runs in the "
            "agent's container and keeps its network"
        )
    return {
        "verifier_user": verifier_user,
        "verifier_env": verifier_env,
        "verifier_mode": mode,
        "verifier_network": verifier_net if verifier_net is not None else bool(baseline_network),
        "verifier_docker_image": _str(venv_t, "docker_image", None, loc, "[verifier.environment]"),
        "verifier_dockerfile": verifier_dockerfile,
    }


def _solution_steps_artifacts(
    data: dict, files: dict[str, bytes], loc: str, where: Callable[[str], str], unknown: list[str], mode: str
) -> dict:
    """[solution], [[steps]] with their reward strategy, artifacts and source."""
    sol_t = _table(data, "solution", "[solution]", loc)
    _check(sol_t, {"env"}, "solution", unknown)
    solution_env = _env(sol_t, "env", loc, "[solution]")
    steps = _steps(data.get("steps"), files, loc, where)
    strategy = data.get("multi_step_reward_strategy") or "mean"
    if strategy not in ("mean", "final"):
        raise UserError(
            f'{loc}: multi_step_reward_strategy must be "mean" or "final" (got {_show(strategy)})'
        )
    if steps and mode == "snapshot":
        raise UserError(
            f"{loc}: [verifier] isolation = \"snapshot\" with steps: a step's verifier runs in the agent's "
            'container ("shared") or a fresh one ("fresh")'
        )
    artifacts = _artifacts(data.get("artifacts", []), loc, "artifacts")
    source = data.get("source") if isinstance(data.get("source"), str) else ""
    return {
        "solution_env": solution_env,
        "steps": steps,
        "step_reward": strategy,
        "artifacts": artifacts,
        "source": source,
    }


def _print_warnings(loc: str, warnings: list[str]) -> None:
    """Once per process per task: a suite loaded twice does not repeat them."""
    for w in warnings:
        msg = f"warning: {loc}: {w}"
        if msg not in _warned:
            _warned.add(msg)
            print(msg, file=sys.stderr)


# ---------------------------------------------------------------------------------------------- refusals


def _refuse_unsupported(t: dict, loc: str, label: str) -> None:
    if t.get("gpus"):
        raise UserError(
            f"{loc}: {label} gpus = {_show(t['gpus'])}: this harness cannot give a task GPUs "
            "(run it under Harbor on a GPU machine, or set gpus = 0)"
        )
    if t.get("gpu_types"):
        raise UserError(f"{loc}: {label} gpu_types: this harness cannot give a task GPUs (remove it)")
    if t.get("tpu"):
        raise UserError(f"{loc}: {label} tpu: this harness cannot give a task TPUs (remove it)")
    if t.get("mcp_servers"):
        raise UserError(
            f"{loc}: {label} mcp_servers: MCP servers are not supported by this harness's agent "
            "(remove them, or run the task under Harbor)"
        )
    os_name = t.get("os", "linux")
    if not isinstance(os_name, str) or os_name.lower() != "linux":
        raise UserError(f"{loc}: {label} os = {_show(os_name)}: only linux tasks run here")


def _network(t: dict, loc: str, label: str) -> Optional[bool]:
    """True / False for public / no network; None when the table says nothing."""
    mode = t.get("network_mode")
    if mode is not None and mode not in NETWORK_MODES:
        raise UserError(
            f"{loc}: {label} network_mode must be one of {', '.join(NETWORK_MODES)} (got {_show(mode)})"
        )
    if mode == "allowlist" or t.get("allowed_hosts"):
        raise UserError(
            f'{loc}: {label} network_mode = "allowlist" / allowed_hosts: this harness cannot limit '
            'a container to some hosts (use "no-network" or "public")'
        )
    allow = t.get("allow_internet")
    if allow is not None and not isinstance(allow, bool):
        raise UserError(f"{loc}: {label} allow_internet must be true or false (got {_show(allow)})")
    if mode is not None:
        return mode == "public"
    return allow


def _steps(
    value: Any, files: dict[str, bytes], loc: str, where: Callable[[str], str]
) -> tuple[StepSpec, ...]:
    if not value:
        return ()
    if not isinstance(value, list) or not all(isinstance(st, dict) for st in value):
        raise UserError(f'{loc}: steps must be [[steps]] tables with name = "..."')

    def under(prefix: str) -> dict[str, bytes]:
        return {p[len(prefix) :]: d for p, d in files.items() if p.startswith(prefix)}

    out, seen = [], set()
    for st in value:
        name = st.get("name")
        label = f"[[steps]] {name}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or name in seen:
            raise UserError(
                f"{loc}: [[steps]] name must be a unique folder name under steps/ (got {_show(name)})"
            )
        seen.add(name)
        agent_t = st.get("agent") or {}
        ver_t = st.get("verifier") or {}
        if not isinstance(agent_t, dict) or not isinstance(ver_t, dict):
            raise UserError(f"{loc}: {label}: agent and verifier must be tables")
        if ver_t.get("environment_mode") == "separate" or "environment" in ver_t:
            raise UserError(f"{loc}: {label}: a step's own separate verifier environment is not supported")
        text = files.get(f"steps/{name}/instruction.md")
        if not text or not text.strip():
            raise UserError(f"{where(f'steps/{name}/instruction.md')}: missing (the step's instruction)")
        tests = {**under("tests/"), **under(f"steps/{name}/tests/")}
        if "test.sh" not in tests:
            raise UserError(f"{where(f'steps/{name}/tests/test.sh')}: missing (nor is there a tests/test.sh)")
        solution = under(f"steps/{name}/solution/") or under("solution/")
        min_reward = st.get("min_reward")
        if isinstance(min_reward, dict):
            min_reward = min_reward.get("reward")
        out.append(
            StepSpec(
                name=name,
                instruction=text.decode("utf-8", "replace"),
                test_files=tuple(sorted(tests.items())),
                solution_files=tuple(sorted(solution.items())),
                workdir_files=tuple(sorted(under(f"steps/{name}/workdir/").items())),
                agent_timeout_sec=_num(agent_t, "timeout_sec", 0.0, loc, label, zero=True) or None,
                agent_user=_user(agent_t, loc, label),
                verifier_timeout_sec=_num(ver_t, "timeout_sec", 0.0, loc, label, zero=True) or None,
                verifier_user=_user(ver_t, loc, label),
                verifier_env=_env(ver_t, "env", loc, label),
                min_reward=float(min_reward) if isinstance(min_reward, (int, float)) else None,
                artifacts=_artifacts(st.get("artifacts", []), loc, f"{label} artifacts"),
            )
        )
    return tuple(out)


def with_step_defaults(files: dict[str, bytes], spec: HarborSpec) -> dict[str, bytes]:
    """A multi-step task may have no top-level instruction.md, tests/test.sh or solution/: its first step's
    stand in for them (the task's own checks and listings read those)."""
    if not spec.steps:
        return files
    first = spec.steps[0]
    files = dict(files)
    files.setdefault("instruction.md", first.instruction.encode())
    for p, d in first.test_files:
        files.setdefault(f"tests/{p}", d)
    if not any(p.startswith("solution/") for p in files):
        for p, d in first.solution_files:
            files[f"solution/{p}"] = d
    return files


def _artifacts(value: Any, loc: str, label: str) -> tuple[str, ...]:
    """artifacts = ["/path", { source = "/path", destination = "...", exclude = [...] }]: the sources,
    collected from the agent's container (destination and exclude are not applied: kept under the source's
    own path, whole)."""
    if not isinstance(value, list):
        raise UserError(f'{loc}: {label} must be a list of paths or {{ source = "/path" }} tables')
    out = []
    for a in value:
        if isinstance(a, dict):
            if a.get("service") not in (None, "main"):
                raise UserError(
                    f"{loc}: {label} service = {_show(a.get('service'))}: compose services are not supported "
                    "(collect from the main container only)"
                )
            a = a.get("source")
        if not isinstance(a, str) or not a.strip() or ".." in a.split("/"):
            raise UserError(f'{loc}: {label} entries need a source path without ".." (got {_show(a)})')
        out.append(a)
    return tuple(out)


def _healthcheck(env_t: dict, loc: str, unknown: list[str]) -> Optional[Healthcheck]:
    hc = env_t.get("healthcheck")
    if hc is None:
        return None
    if not isinstance(hc, dict) or not isinstance(hc.get("command"), str) or not hc["command"].strip():
        raise UserError(
            f'{loc}: [environment.healthcheck] needs command = "..." (a shell command, exit 0 = healthy)'
        )
    unknown.extend(f"environment.healthcheck.{k}" for k in hc if k not in HEALTHCHECK_KEYS)
    d = Healthcheck(command="")
    label = "[environment.healthcheck]"
    return Healthcheck(
        command=hc["command"],
        interval_sec=_num(hc, "interval_sec", d.interval_sec, loc, label, zero=True),
        timeout_sec=_num(hc, "timeout_sec", d.timeout_sec, loc, label),
        start_period_sec=_num(hc, "start_period_sec", d.start_period_sec, loc, label, zero=True),
        start_interval_sec=_num(hc, "start_interval_sec", d.start_interval_sec, loc, label, zero=True),
        retries=int(_num(hc, "retries", d.retries, loc, label)),
    )


# ---------------------------------------------------------------------------------------------- small helpers


def _str(t: dict, key: str, default, loc: str, label: str):
    value = t.get(key, default)
    if value is not default and not isinstance(value, str):
        raise UserError(f"{loc}: {label} {key} must be a string (got {_show(value)})")
    return value


def _list(t: dict, key: str, loc: str, label: str) -> list:
    value = t.get(key, [])
    if not isinstance(value, list):
        raise UserError(f"{loc}: {label} {key} must be a list (got {_show(value)})")
    return value


def _strings(t: dict, key: str, loc: str, label: str) -> list[str]:
    value = _list(t, key, loc, label)
    if not all(isinstance(v, str) for v in value):
        raise UserError(f"{loc}: {label} {key} must be a list of strings (got {_show(value)})")
    return value


def _num(t: dict, key: str, default: float, loc: str, label: str, zero: bool = False) -> float:
    value = t.get(key, default)
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > 0 or (zero and value == 0))
    )
    if not ok:
        raise UserError(
            f"{loc}: {label} {key} must be a {'number >= 0' if zero else 'positive number'} "
            f"(got {_show(value)})"
        )
    return float(value)


def _env(t: dict, key: str, loc: str, label: str) -> tuple[tuple[str, str], ...]:
    value = t.get(key, {})
    if not isinstance(value, dict):
        raise UserError(f'{loc}: {label} {key} must be a table of NAME = "value" (got {_show(value)})')
    out = []
    for k, v in value.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise UserError(f"{loc}: {label} {key}.{k}: not a valid environment variable name")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise UserError(f"{loc}: {label} {key}.{k} must be a string (got {_show(v)})")
        out.append((k, str(v)))
    return tuple(out)


def _user(t: dict, loc: str, label: str) -> Optional[str]:
    value = t.get("user")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)) or (isinstance(value, int) and value < 0):
        raise UserError(f"{loc}: {label} user must be a user name or a uid (got {_show(value)})")
    text = str(value)
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?", text):
        raise UserError(f"{loc}: {label} user must be a user name or a uid (got {_show(value)})")
    return text


def _toml_text(v: Any) -> str:
    return v if isinstance(v, str) else _show(v)


def _show(value: Any) -> str:
    import json

    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)
