"""Harbor / Terminal-Bench 2 tasks, read field by field from Harbor's task config (schema 1.4).

A task folder is a Harbor task when its task.toml has no [evaluator] table and tests/test.sh exists (or it
says schema_version). Then tests/test.sh is the verifier: it sees the hidden tests at /tests and writes
/logs/verifier/reward.txt (one number) or reward.json (named numbers). See README "Harbor tasks" for the
runtime contract and the table of fields (honoured / warned / refused).

Unknown keys give one warning per task (printed to stderr, kept in HarborSpec.warnings), not an error.
Fields we cannot honour (GPUs, TPUs, MCP servers, multi-container compose, multi-step tasks, network
allowlists, Windows) raise UserError naming the field: never a silent wrong run.

This module reads task.toml table by table (parse) and fills in a multi-step task's defaults; the spec it
returns and the keys it knows are tasks/harbor_spec.py's, the checks of each value tasks/harbor_values.py's.
"""

from __future__ import annotations

import sys
from typing import Callable, Optional

from results.errors import UserError
from tasks.harbor_spec import (
    AGENT_KEYS,
    ENV_KEYS,
    SCHEMA_VERSIONS,
    TASK_KEYS,
    TOP_KEYS,
    VERIFIER_KEYS,
    VERIFIER_MODES,
    HarborSpec,
)
from tasks.harbor_values import (
    _artifacts,
    _env,
    _healthcheck,
    _list,
    _network,
    _num,
    _refuse_unsupported,
    _show,
    _steps,
    _str,
    _strings,
    _toml_text,
    _user,
)

_warned: set[str] = set()


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
