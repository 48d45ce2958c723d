"""Load one task folder: task.toml (ours, or Harbor's format: tasks/harbor.py), instruction.md, environment/,
tests/ and solution/ (see tasks/model.py for the layout) into a Task.

Every problem a user can fix raises UserError with one line naming the file, the field and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from results.errors import UserError
from tasks import evaluator_table, harbor
from tasks.fields import (
    ID_RE,
    Where,
    check_id,
    check_keys,
    display,
    integer,
    number,
    parse_toml,
    show,
    size_mb,
)
from tasks.model import DOMAINS, SPLITS, AgentLimits, Environment, EvaluatorConfig, Task

HARBOR_DIFFICULTY = {"easy": 1, "medium": 3, "hard": 5}
# The keys we read in each table. Keys Harbor defines that we do not use are accepted and ignored; anything
# else is an error, so that a typo ("dificulty") cannot silently fall back to a default.
OUR_KEYS = {
    "metadata": {"id", "domain", "difficulty", "tags"},
    "agent": {"timeout_sec", "max_steps", "command_timeout_sec"},
    "verifier": {"timeout_sec", "isolation"},
    "environment": {"cpus", "memory_mb", "storage_mb", "allow_internet", "pids", "memory", "storage"},
    "evaluator": set(),  # the registered kinds' keys, as registered when the task is read
}
HARBOR_IGNORED = {
    "metadata": {
        "author_name",
        "author_email",
        "category",
        "difficulty_explanation",
        "solution_explanation",
        "verification_explanation",
        "expert_time_estimate_min",
        "junior_time_estimate_min",
    },
    "agent": {"user"},
    "verifier": {"env", "user"},
    "environment": {"build_timeout_sec", "docker_image", "gpus", "gpu_types", "skills_dir"},
    "evaluator": set(),
}


def load_task(path: str | Path) -> Task:
    """Load one task folder (or its task.toml)."""
    root = Path(path)
    if root.name == "task.toml" and root.is_file():
        root = root.parent
    if not root.is_dir():
        raise UserError(f"{display(root)}: no such task folder")
    if (root / "family.toml").is_file():
        raise UserError(
            f"{display(root)}: is a task family (family.toml); load it with load_suite "
            f"or `harness tasks list {display(root)}`"
        )
    if not (root / "task.toml").is_file():
        raise UserError(f"{display(root)}: not a task folder (no task.toml)")
    shown = display(root)
    return build_task(read_tree(root), where=lambda f: f"{shown}/{f}", default_id=root.name, path=root)


def read_tree(root: Path) -> dict[str, bytes]:
    """Every file under root as relative posix path -> bytes (caches skipped, symlinks refused)."""
    files: dict[str, bytes] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if "__pycache__" in rel.parts or p.suffix == ".pyc":
            continue
        if p.is_symlink():
            raise UserError(
                f"{display(p)}: symlinks are not supported in task folders (copy the file instead)"
            )
        if p.is_file():
            files[rel.as_posix()] = p.read_bytes()
    return files


def build_task(files: dict[str, bytes], *, where: Where, default_id: str, path: Optional[Path]) -> Task:
    """One task from its files (relative path -> bytes); `where` says how errors name a file."""
    toml_name = "task.toml"
    data = parse_toml(where(toml_name), files.get(toml_name))
    loc = where(toml_name)
    if harbor.is_harbor(data, files):
        return _build_harbor_task(data, files, loc=loc, where=where, default_id=default_id, path=path)
    for table in OUR_KEYS:
        if table in data and not isinstance(data[table], dict):
            raise UserError(f"{loc}: [{table}] must be a table")
        if table == "evaluator" and evaluator_table.by_path(data.get(table)):
            continue  # its kind's own keys: evaluator_config checks them once it has found the kind
        ours = evaluator_table.all_keys() if table == "evaluator" else OUR_KEYS[table]
        check_keys(data.get(table, {}), ours, HARBOR_IGNORED[table], loc, f"[{table}] ")

    meta = data.get("metadata", {})
    version = data.get("version", "1")
    if not isinstance(version, str):
        raise UserError(f'{loc}: version must be a string, e.g. version = "1.0" (got {show(version)})')
    task_id = check_id(meta.get("id", default_id), f"{loc}: [metadata] id")
    domain = meta.get("domain", "coding")
    if domain not in DOMAINS:
        raise UserError(f"{loc}: [metadata] domain must be one of {', '.join(DOMAINS)} (got {show(domain)})")
    difficulty = _task_difficulty(meta.get("difficulty", 1), loc)
    tags = meta.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise UserError(
            f'{loc}: [metadata] tags must be a list of strings, e.g. tags = ["csv"] (got {show(tags)})'
        )

    agent_t, verifier_t, env_t = data.get("agent", {}), data.get("verifier", {}), data.get("environment", {})
    d_agent, d_env = AgentLimits(), Environment()
    agent = AgentLimits(
        timeout_sec=number(agent_t, "timeout_sec", d_agent.timeout_sec, loc, "[agent]"),
        max_steps=integer(agent_t, "max_steps", d_agent.max_steps, loc, "[agent]"),
        command_timeout_sec=number(
            agent_t, "command_timeout_sec", d_agent.command_timeout_sec, loc, "[agent]"
        ),
    )
    verifier_timeout = number(verifier_t, "timeout_sec", Task.verifier_timeout_sec, loc, "[verifier]")
    if verifier_t.get("isolation", "fresh") != "fresh":
        raise UserError(
            f"{loc}: [verifier] isolation = {show(verifier_t['isolation'])}: tasks with an [evaluator] are "
            'graded in a fresh container only ("fresh"); snapshot and shared are for Harbor-format tasks '
            "(tests/test.sh writing /logs/verifier/reward.txt, no [evaluator])"
        )
    allow_internet = env_t.get("allow_internet", d_env.allow_internet)
    if not isinstance(allow_internet, bool):
        raise UserError(
            f"{loc}: [environment] allow_internet must be true or false (got {show(allow_internet)})"
        )
    environment = Environment(
        cpus=number(env_t, "cpus", d_env.cpus, loc, "[environment]"),
        memory_mb=size_mb(env_t, "memory_mb", "memory", d_env.memory_mb, loc),
        storage_mb=size_mb(env_t, "storage_mb", "storage", d_env.storage_mb, loc),
        allow_internet=allow_internet,
        pids=integer(env_t, "pids", d_env.pids, loc, "[environment]"),
    )

    instruction = _instruction(files, where)
    dockerfile, workspace, context, tests, solution = _split_files(files, where)
    evaluator = evaluator_table.evaluator_config(data.get("evaluator"), tests, loc, where)
    return Task(
        id=task_id,
        path=path,
        instruction=instruction,
        version=version,
        domain=domain,
        difficulty=difficulty,
        tags=tuple(tags),
        agent=agent,
        verifier_timeout_sec=verifier_timeout,
        environment=environment,
        evaluator=evaluator,
        dockerfile=dockerfile,
        workspace_files=workspace,
        test_files=tests,
        solution_files=solution,
        build_context=context,
    )


def _instruction(files: dict[str, bytes], where: Where) -> str:
    instruction_raw = files.get("instruction.md")
    if instruction_raw is None:
        raise UserError(f"{where('instruction.md')}: missing (write the text the agent sees there)")
    try:
        instruction = instruction_raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{where('instruction.md')}: not UTF-8 text (save it as UTF-8)") from None
    if not instruction.strip():
        raise UserError(f"{where('instruction.md')}: empty (write the text the agent sees there)")
    return instruction


def _split_files(files: dict[str, bytes], where: Where):
    """(dockerfile, workspace files, build context, tests, solution). With a Dockerfile, the other
    environment/ files are its build context only (as in Harbor: they reach the image through its own COPY);
    without one, they start in the agent's working folder."""
    dockerfile = None
    environment: dict[str, bytes] = {}
    tests: dict[str, bytes] = {}
    solution: dict[str, bytes] = {}
    for name, content in files.items():
        if name == "environment/Dockerfile":
            dockerfile = content.decode("utf-8", errors="replace")
        elif name in ("environment/docker-compose.yaml", "environment/docker-compose.yml"):
            raise UserError(
                f"{where(name)}: docker-compose tasks are not supported (multi-container tasks "
                "cannot run here; use environment/Dockerfile)"
            )
        elif name.startswith("environment/"):
            environment[name[len("environment/") :]] = content
        elif name.startswith("tests/"):
            tests[name[len("tests/") :]] = content
        elif name.startswith("solution/"):
            solution[name[len("solution/") :]] = content
    if "solve.sh" not in solution:
        raise UserError(
            f"{where('solution/solve.sh')}: missing (write the oracle: a bash script run in the "
            "agent's working folder that solves the task)"
        )
    if dockerfile is not None:
        return dockerfile, {}, environment, tests, solution
    return dockerfile, environment, {}, tests, solution


def _build_harbor_task(
    data: dict, files: dict[str, bytes], *, loc: str, where: Where, default_id: str, path: Optional[Path]
) -> Task:
    """A Harbor-format task: tests/test.sh is the verifier (tasks/harbor.py reads the config)."""
    spec, values = harbor.parse(data, files, loc, where)
    files = harbor.with_step_defaults(files, spec)
    instruction = _instruction(files, where)
    dockerfile, workspace, context, tests, solution = _split_files(files, where)
    if "test.sh" not in tests:
        raise UserError(
            f"{where('tests/test.sh')}: missing (a Harbor verifier writes /logs/verifier/reward.txt)"
        )
    if spec.docker_image is not None:
        dockerfile, workspace, context = None, {}, context or workspace  # the prebuilt image, used as given
    d_agent, d_env = AgentLimits(), Environment()
    a, e = values["agent"], values["environment"]
    agent = AgentLimits(
        timeout_sec=number(a, "timeout_sec", d_agent.timeout_sec, loc, "[agent]"),
        max_steps=integer(a, "max_steps", d_agent.max_steps, loc, "[agent]"),
        command_timeout_sec=number(a, "command_timeout_sec", d_agent.command_timeout_sec, loc, "[agent]"),
    )
    environment = Environment(
        cpus=number(e, "cpus", d_env.cpus, loc, "[environment]"),
        memory_mb=size_mb(e, "memory_mb", "memory", d_env.memory_mb, loc),
        allow_internet=e["allow_internet"],
        pids=integer(e, "pids", d_env.pids, loc, "[environment]"),
    )
    meta = data.get("metadata", {})
    # [metadata] is free-form in Harbor: its id is ours only when it is a valid id, else the folder name
    task_id = (
        meta["id"]
        if isinstance(meta.get("id"), str) and ID_RE.match(meta["id"])
        else check_id(default_id, f"{loc}: the task folder name")
    )
    domain = meta.get("domain") if meta.get("domain") in DOMAINS else "coding"
    task = Task(
        id=task_id,
        path=path,
        instruction=instruction,
        version=spec.schema_version,
        domain=domain,
        difficulty=values["difficulty"] or 1,
        tags=values["tags"],
        agent=agent,
        verifier_timeout_sec=values["verifier_timeout"],
        environment=environment,
        evaluator=EvaluatorConfig(kind="harbor"),
        dockerfile=dockerfile,
        workspace_files=workspace,
        test_files=tests,
        solution_files=solution,
        build_context=context,
        harbor=spec,
    )
    if isinstance(meta.get("family"), str) and meta.get("split") in SPLITS:  # written by `tasks export`
        task.family, task.split = meta["family"], meta["split"]
    return task


def _task_difficulty(value: Any, loc: str) -> int:
    if isinstance(value, str) and value.lower() in HARBOR_DIFFICULTY:
        return HARBOR_DIFFICULTY[value.lower()]
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 5:
        return value
    raise UserError(f"{loc}: [metadata] difficulty must be an integer 1-5 (got {show(value)})")
