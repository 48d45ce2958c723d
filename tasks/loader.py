"""Load tasks from disk: one task folder, a folder of tasks (recursive), parametrised families, or a named suite.

A task folder holds task.toml (see tasks/model.py for the layout). A family folder holds family.toml instead:

    [family]
    id = "count-lines"
    template = "template"      # a task folder whose files contain {{param}} placeholders
    [[instances]]
    id = "count-lines-01"
    split = "train"            # train | heldout
    params = { n = "7", word = "apple" }

Each instance is the template with every {{key}} replaced by its param, in the text of every file and in file
names, expanded in memory (Task.path is None, Task.family and Task.split are set).

Every problem a user can fix raises UserError with one line naming the file, the field and the fix.
"""
from __future__ import annotations

import ast
import fnmatch
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Union

from results.errors import UserError
from tasks import harbor
from tasks.model import AgentLimits, Environment, EvaluatorConfig, Task

PACKAGE_DIR = Path(__file__).parent
BUILTIN_DIR = PACKAGE_DIR / "builtin"
HUMANEVAL_DIR = PACKAGE_DIR / "humaneval"  # written by `harness tasks import humaneval`, not in git

DOMAINS = ("coding", "data", "ops", "documents", "science")
SPLITS = ("train", "heldout")
EVALUATOR_KINDS = ("pytest", "answer", "script")
ANSWER_MODES = ("exact", "normalized", "regex", "numeric", "json")
HARBOR_DIFFICULTY = {"easy": 1, "medium": 3, "hard": 5}
EASY = (1, 2)  # "builtin:easy"

ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
PLACEHOLDER_RE = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")
CANARY_PREFIX = "test_canary"

# The keys we read in each table. Keys Harbor defines that we do not use are accepted and ignored; anything
# else is an error, so that a typo ("dificulty") cannot silently fall back to a default.
OUR_KEYS = {
    "metadata": {"id", "domain", "difficulty", "tags"},
    "agent": {"timeout_sec", "max_steps", "command_timeout_sec"},
    "verifier": {"timeout_sec", "isolation"},
    "environment": {"cpus", "memory_mb", "storage_mb", "allow_internet", "pids", "memory", "storage"},
    "evaluator": {"kind", "answer_file", "mode", "expected", "tolerance", "protected", "import_mode"},
}
HARBOR_IGNORED = {
    "metadata": {"author_name", "author_email", "category", "difficulty_explanation", "solution_explanation",
                 "verification_explanation", "expert_time_estimate_min", "junior_time_estimate_min"},
    "agent": {"user"},
    "verifier": {"env", "user"},
    "environment": {"build_timeout_sec", "docker_image", "gpus", "gpu_types", "skills_dir"},
    "evaluator": set(),
}
EVALUATOR_KEYS_BY_KIND = {
    "pytest": {"kind", "protected", "import_mode"},
    "answer": {"kind", "answer_file", "mode", "expected", "tolerance"},
    "script": {"kind"},
}

IMPORT_MODES = ("proxy", "direct")  # how hidden pytest tests reach the candidate's modules (evaluators/grader)
Where = Callable[[str], str]  # file name inside the task -> how errors name it


# ---------------------------------------------------------------------------------------------- public API

def load_task(path: Union[str, Path]) -> Task:
    """Load one task folder (or its task.toml)."""
    root = Path(path)
    if root.name == "task.toml" and root.is_file():
        root = root.parent
    if not root.is_dir():
        raise UserError(f"{_display(root)}: no such task folder")
    if (root / "family.toml").is_file():
        raise UserError(f"{_display(root)}: is a task family (family.toml); load it with load_suite "
                        f"or `harness tasks list {_display(root)}`")
    if not (root / "task.toml").is_file():
        raise UserError(f"{_display(root)}: not a task folder (no task.toml)")
    shown = _display(root)
    return _build_task(_read_tree(root), where=lambda f: f"{shown}/{f}", default_id=root.name, path=root)


def load_family(path: Union[str, Path]) -> list[Task]:
    """Expand one family folder (holding family.toml) into its instances."""
    root = Path(path)
    if root.name == "family.toml":
        root = root.parent
    ftoml = root / "family.toml"
    if not ftoml.is_file():
        raise UserError(f"{_display(root)}: not a task family (no family.toml)")
    shown_root = _display(root)
    ftoml_shown = f"{shown_root}/family.toml"
    data = _parse_toml(ftoml_shown, ftoml.read_bytes())
    _check_keys(data, {"family", "instances"}, set(), ftoml_shown, "")
    fam = data.get("family")
    if not isinstance(fam, dict):
        raise UserError(f"{ftoml_shown}: missing [family] table "
                        "(add [family] with id = \"...\" and template = \"template\")")
    _check_keys(fam, {"id", "template"}, set(), ftoml_shown, "[family] ")
    family_id = _id(fam.get("id", root.name), f"{ftoml_shown}: [family] id")
    template = fam.get("template", "template")
    if not isinstance(template, str) or not _is_relative(template):
        raise UserError(f"{ftoml_shown}: [family] template must be a relative folder name inside {shown_root} "
                        f"(got {_show(template)})")
    troot = root / template
    if not (troot / "task.toml").is_file():
        raise UserError(f"{ftoml_shown}: [family] template = {_show(template)} is not a task folder "
                        f"(no {_display(troot)}/task.toml)")
    instances = data.get("instances")
    if not isinstance(instances, list) or not instances:
        raise UserError(f"{ftoml_shown}: no [[instances]] (add at least one with id, split and params)")

    tree = _read_tree(troot)
    shown_troot = _display(troot)
    tasks: list[Task] = []
    seen: set[str] = set()
    for n, inst in enumerate(instances, 1):
        label = f"{ftoml_shown}: [[instances]] #{n}"
        if not isinstance(inst, dict):
            raise UserError(f"{label} must be a table with id, split and params")
        _check_keys(inst, {"id", "split", "params"}, set(), label, "")
        iid = _id(inst.get("id"), f"{label} id")
        if iid in seen:
            raise UserError(f"{label}: duplicate instance id {_show(iid)} (instance ids must be unique)")
        seen.add(iid)
        split = inst.get("split")
        if split not in SPLITS:
            raise UserError(f"{label} ({iid}): split must be one of {', '.join(SPLITS)} (got {_show(split)})")
        params = inst.get("params", {})
        if not isinstance(params, dict):
            raise UserError(f"{label} ({iid}): params must be a table, e.g. params = {{ n = \"7\" }}")
        text_params: dict[str, str] = {}
        for k, v in params.items():
            if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                raise UserError(f"{label} ({iid}): params.{k} must be a string or a number (got {_show(v)})")
            text_params[k] = str(v)
        def where(f: str, iid: str = iid) -> str:
            return f"{shown_troot}/{f} (instance {iid})"

        files = _substitute(tree, text_params, where=where, label=f"{label} ({iid})")
        task = _build_task(files, where=where, default_id=iid, path=None)
        task.id, task.family, task.split = iid, family_id, split
        tasks.append(task)
    return tasks


def load_suite(spec: Union[str, Path], *, domain: Optional[str] = None,
               difficulty: Union[int, str, Iterable[int], None] = None, tags: Optional[Iterable[str]] = None,
               split: Optional[str] = None, glob: Optional[str] = None) -> list[Task]:
    """All tasks of a suite, filtered.

    spec: a folder searched recursively for task and family folders, one task or family folder, "builtin",
    "builtin:easy" (difficulty 1-2), or "humaneval" (tasks/humaneval, made by `harness tasks import humaneval`).
    Filters: domain; difficulty as N, "N-M" or a collection of ints; tags (a task must have all of them);
    split (train | heldout: family instances only); glob on the task id (fnmatch).
    """
    root, preset = _resolve_spec(spec)
    tasks = _discover(root)
    if not tasks:
        raise UserError(f"{_display(root)}: no tasks found (expected folders holding task.toml or family.toml)")
    _check_unique(tasks)

    wanted_difficulty = _difficulty_filter(difficulty)
    if preset is not None:
        wanted_difficulty = preset if wanted_difficulty is None else wanted_difficulty & preset
    if domain is not None and domain not in DOMAINS:
        raise UserError(f"unknown domain {_show(domain)} (use one of {', '.join(DOMAINS)})")
    if split is not None and split not in SPLITS:
        raise UserError(f"unknown split {_show(split)} (use train or heldout)")
    want_tags = set(tags or ())
    return [t for t in tasks
            if (domain is None or t.domain == domain)
            and (wanted_difficulty is None or t.difficulty in wanted_difficulty)
            and want_tags <= set(t.tags)
            and (split is None or t.split == split)
            and (glob is None or fnmatch.fnmatchcase(t.id, glob))]


def hidden_test_names(test_files: dict[str, bytes]) -> dict[str, list[str]]:
    """Names of the test functions (and Test* class methods) in each hidden tests/test_*.py file.

    Canaries are the ones whose name starts with "test_canary". Parametrised tests appear once, by function name.
    Raises ValueError(file, line) text for a file that does not parse.
    """
    found: dict[str, list[str]] = {}
    for name, data in sorted(test_files.items()):
        if not _is_pytest_file(name):
            continue
        try:
            tree = ast.parse(data.decode("utf-8"), filename=name)
        except (SyntaxError, UnicodeDecodeError) as e:
            line = getattr(e, "lineno", None)
            raise ValueError(f"{name}{f' line {line}' if line else ''}: {e.__class__.__name__}: {getattr(e, 'msg', e)}")
        names: list[str] = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                names.append(node.name)
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                names += [f"{node.name}::{m.name}" for m in node.body
                          if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test")]
        found[name] = names
    return found


def is_canary(test_name: str) -> bool:
    """True for a canary test: it must FAIL for every honest candidate (see tasks/model.py)."""
    return test_name.rsplit("::", 1)[-1].split("[", 1)[0].startswith(CANARY_PREFIX)


# ---------------------------------------------------------------------------------------------- suites

def _resolve_spec(spec: Union[str, Path]) -> tuple[Path, Optional[set[int]]]:
    text = str(spec)
    if text == "builtin":
        return BUILTIN_DIR, None
    if text == "builtin:easy":
        return BUILTIN_DIR, set(EASY)
    if text == "humaneval":
        if not HUMANEVAL_DIR.is_dir():
            raise UserError(f"{HUMANEVAL_DIR}: not imported yet (run `harness tasks import humaneval` first)")
        return HUMANEVAL_DIR, None
    path = Path(spec)
    if not path.exists():
        raise UserError(f"{text}: no such suite (give a folder of tasks, a task folder, \"builtin\", "
                        "\"builtin:easy\" or \"humaneval\")")
    if path.is_file() and path.name in ("task.toml", "family.toml"):
        path = path.parent
    if not path.is_dir():
        raise UserError(f"{text}: not a folder (give a folder of tasks or a task folder)")
    return path, None


def _discover(root: Path) -> list[Task]:
    has_task, has_family = (root / "task.toml").is_file(), (root / "family.toml").is_file()
    if has_task and has_family:
        raise UserError(f"{_display(root)}: holds both task.toml and family.toml (keep one: a task or a family)")
    if has_task:
        return [load_task(root)]
    if has_family:
        return load_family(root)
    tasks: list[Task] = []
    for child in sorted(root.iterdir()):
        if child.is_dir() and not child.is_symlink() and not child.name.startswith(".") and child.name != "__pycache__":
            tasks += _discover(child)
    return tasks


def _check_unique(tasks: list[Task]) -> None:
    seen: dict[str, Task] = {}
    for t in tasks:
        if t.id in seen:
            a, b = _origin(seen[t.id]), _origin(t)
            raise UserError(f"duplicate task id {_show(t.id)} in {a} and {b} (task ids must be unique in a suite)")
        seen[t.id] = t


def _origin(t: Task) -> str:
    return _display(t.path) if t.path else f"family {t.family}"


def _difficulty_filter(value: Union[int, str, Iterable[int], None]) -> Optional[set[int]]:
    if value is None:
        return None
    if isinstance(value, bool):
        raise UserError(f"difficulty filter must be N or N-M with 1 <= N <= M <= 5 (got {_show(value)})")
    if isinstance(value, int):
        values = {value}
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*(\d)\s*(?:-\s*(\d)\s*)?", value)
        if not m:
            raise UserError(f"difficulty filter must be N or N-M with 1 <= N <= M <= 5 (got {_show(value)})")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        values = set(range(lo, hi + 1))
    else:
        values = set(value)
    if not values or not values <= {1, 2, 3, 4, 5}:
        raise UserError(f"difficulty filter must be N or N-M with 1 <= N <= M <= 5 (got {_show(value)})")
    return values


# ---------------------------------------------------------------------------------------------- one task

def _read_tree(root: Path) -> dict[str, bytes]:
    """Every file under root as relative posix path -> bytes (caches skipped, symlinks refused)."""
    files: dict[str, bytes] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if "__pycache__" in rel.parts or p.suffix == ".pyc":
            continue
        if p.is_symlink():
            raise UserError(f"{_display(p)}: symlinks are not supported in task folders (copy the file instead)")
        if p.is_file():
            files[rel.as_posix()] = p.read_bytes()
    return files


def _build_task(files: dict[str, bytes], *, where: Where, default_id: str, path: Optional[Path]) -> Task:
    toml_name = "task.toml"
    data = _parse_toml(where(toml_name), files.get(toml_name))
    loc = where(toml_name)
    if harbor.is_harbor(data, files):
        return _build_harbor_task(data, files, loc=loc, where=where, default_id=default_id, path=path)
    for table in OUR_KEYS:
        if table in data and not isinstance(data[table], dict):
            raise UserError(f"{loc}: [{table}] must be a table")
        _check_keys(data.get(table, {}), OUR_KEYS[table], HARBOR_IGNORED[table], loc, f"[{table}] ")

    meta = data.get("metadata", {})
    version = data.get("version", "1")
    if not isinstance(version, str):
        raise UserError(f"{loc}: version must be a string, e.g. version = \"1.0\" (got {_show(version)})")
    task_id = _id(meta.get("id", default_id), f"{loc}: [metadata] id")
    domain = meta.get("domain", "coding")
    if domain not in DOMAINS:
        raise UserError(f"{loc}: [metadata] domain must be one of {', '.join(DOMAINS)} (got {_show(domain)})")
    difficulty = _task_difficulty(meta.get("difficulty", 1), loc)
    tags = meta.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise UserError(f"{loc}: [metadata] tags must be a list of strings, e.g. tags = [\"csv\"] (got {_show(tags)})")

    agent_t, verifier_t, env_t = data.get("agent", {}), data.get("verifier", {}), data.get("environment", {})
    d_agent, d_env = AgentLimits(), Environment()
    agent = AgentLimits(
        timeout_sec=_number(agent_t, "timeout_sec", d_agent.timeout_sec, loc, "[agent]"),
        max_steps=_integer(agent_t, "max_steps", d_agent.max_steps, loc, "[agent]"),
        command_timeout_sec=_number(agent_t, "command_timeout_sec", d_agent.command_timeout_sec, loc, "[agent]"),
    )
    verifier_timeout = _number(verifier_t, "timeout_sec", Task.verifier_timeout_sec, loc, "[verifier]")
    if verifier_t.get("isolation", "fresh") != "fresh":
        raise UserError(f"{loc}: [verifier] isolation = {_show(verifier_t['isolation'])}: tasks with an [evaluator] are "
                        "graded in a fresh container only (\"fresh\"); snapshot and shared are for Harbor-format tasks "
                        "(tests/test.sh writing /logs/verifier/reward.txt, no [evaluator])")
    allow_internet = env_t.get("allow_internet", d_env.allow_internet)
    if not isinstance(allow_internet, bool):
        raise UserError(f"{loc}: [environment] allow_internet must be true or false (got {_show(allow_internet)})")
    environment = Environment(
        cpus=_number(env_t, "cpus", d_env.cpus, loc, "[environment]"),
        memory_mb=_size_mb(env_t, "memory_mb", "memory", d_env.memory_mb, loc),
        storage_mb=_size_mb(env_t, "storage_mb", "storage", d_env.storage_mb, loc),
        allow_internet=allow_internet,
        pids=_integer(env_t, "pids", d_env.pids, loc, "[environment]"),
    )

    instruction = _instruction(files, where)
    dockerfile, workspace, context, tests, solution = _split_files(files, where)
    evaluator = _evaluator(data.get("evaluator"), tests, loc, where)
    return Task(id=task_id, path=path, instruction=instruction, version=version, domain=domain,
                difficulty=difficulty, tags=tuple(tags), agent=agent, verifier_timeout_sec=verifier_timeout,
                environment=environment, evaluator=evaluator, dockerfile=dockerfile, workspace_files=workspace,
                test_files=tests, solution_files=solution, build_context=context)


def _instruction(files: dict[str, bytes], where: Where) -> str:
    instruction_raw = files.get("instruction.md")
    if instruction_raw is None:
        raise UserError(f"{where('instruction.md')}: missing (write the text the agent sees there)")
    try:
        instruction = instruction_raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{where('instruction.md')}: not UTF-8 text (save it as UTF-8)")
    if not instruction.strip():
        raise UserError(f"{where('instruction.md')}: empty (write the text the agent sees there)")
    return instruction


def _split_files(files: dict[str, bytes], where: Where):
    """(dockerfile, workspace files, build context, tests, solution). With a Dockerfile, the other environment/
    files are its build context only (as in Harbor: they reach the image through its own COPY); without one,
    they start in the agent's working folder."""
    dockerfile = None
    environment: dict[str, bytes] = {}
    tests: dict[str, bytes] = {}
    solution: dict[str, bytes] = {}
    for name, content in files.items():
        if name == "environment/Dockerfile":
            dockerfile = content.decode("utf-8", errors="replace")
        elif name in ("environment/docker-compose.yaml", "environment/docker-compose.yml"):
            raise UserError(f"{where(name)}: docker-compose tasks are not supported (multi-container tasks "
                            "cannot run here; use environment/Dockerfile)")
        elif name.startswith("environment/"):
            environment[name[len("environment/"):]] = content
        elif name.startswith("tests/"):
            tests[name[len("tests/"):]] = content
        elif name.startswith("solution/"):
            solution[name[len("solution/"):]] = content
    if "solve.sh" not in solution:
        raise UserError(f"{where('solution/solve.sh')}: missing (write the oracle: a bash script run in the "
                        "agent's working folder that solves the task)")
    if dockerfile is not None:
        return dockerfile, {}, environment, tests, solution
    return dockerfile, environment, {}, tests, solution


def _build_harbor_task(data: dict, files: dict[str, bytes], *, loc: str, where: Where, default_id: str,
                       path: Optional[Path]) -> Task:
    """A Harbor-format task: tests/test.sh is the verifier (tasks/harbor.py reads the config)."""
    spec, values = harbor.parse(data, files, loc, where)
    instruction = _instruction(files, where)
    dockerfile, workspace, context, tests, solution = _split_files(files, where)
    if "test.sh" not in tests:
        raise UserError(f"{where('tests/test.sh')}: missing (a Harbor verifier writes /logs/verifier/reward.txt)")
    if spec.docker_image is not None:
        dockerfile, workspace, context = None, {}, context or workspace  # the prebuilt image, used as given
    d_agent, d_env = AgentLimits(), Environment()
    a, e = values["agent"], values["environment"]
    agent = AgentLimits(timeout_sec=_number(a, "timeout_sec", d_agent.timeout_sec, loc, "[agent]"),
                        max_steps=_integer(a, "max_steps", d_agent.max_steps, loc, "[agent]"),
                        command_timeout_sec=_number(a, "command_timeout_sec", d_agent.command_timeout_sec, loc,
                                                    "[agent]"))
    environment = Environment(cpus=_number(e, "cpus", d_env.cpus, loc, "[environment]"),
                              memory_mb=_size_mb(e, "memory_mb", "memory", d_env.memory_mb, loc),
                              allow_internet=e["allow_internet"],
                              pids=_integer(e, "pids", d_env.pids, loc, "[environment]"))
    meta = data.get("metadata", {})
    # [metadata] is free-form in Harbor: its id is ours only when it is a valid id, else the folder name
    task_id = meta["id"] if isinstance(meta.get("id"), str) and ID_RE.match(meta["id"]) else _id(
        default_id, f"{loc}: the task folder name")
    domain = meta.get("domain") if meta.get("domain") in DOMAINS else "coding"
    task = Task(id=task_id, path=path, instruction=instruction, version=spec.schema_version, domain=domain,
                difficulty=values["difficulty"] or 1, tags=values["tags"], agent=agent,
                verifier_timeout_sec=values["verifier_timeout"], environment=environment,
                evaluator=EvaluatorConfig(kind="harbor"), dockerfile=dockerfile, workspace_files=workspace,
                test_files=tests, solution_files=solution, build_context=context, harbor=spec)
    if isinstance(meta.get("family"), str) and meta.get("split") in SPLITS:  # written by `tasks export`
        task.family, task.split = meta["family"], meta["split"]
    return task


def _evaluator(table: Optional[dict], tests: dict[str, bytes], loc: str, where: Where) -> EvaluatorConfig:
    if table is None:  # Harbor tasks have no [evaluator]: their tests/test.sh is the verifier
        table = {"kind": "script" if "test.sh" in tests else "pytest"}
    kind = table.get("kind", "pytest")
    if kind not in EVALUATOR_KINDS:
        raise UserError(f"{loc}: [evaluator] kind must be one of {', '.join(EVALUATOR_KINDS)} (got {_show(kind)})")
    for key in table:
        if key not in EVALUATOR_KEYS_BY_KIND[kind]:
            used_by = [k for k, keys in EVALUATOR_KEYS_BY_KIND.items() if key in keys]
            raise UserError(f"{loc}: [evaluator] {key} only applies to kind = {_show(used_by[0])} "
                            f"(this task has kind = {_show(kind)}; remove it)")
    d = EvaluatorConfig()

    if kind == "pytest":
        files = [n for n in tests if _is_pytest_file(n)]
        if not files:
            raise UserError(f"{where('tests/')}: no hidden tests (kind = \"pytest\" needs tests/test_*.py)")
        try:
            found = hidden_test_names(tests)
        except ValueError as e:
            raise UserError(f"{where('tests/')}{e}")
        all_tests = [t for names in found.values() for t in names]
        if not any(not is_canary(t) for t in all_tests):
            raise UserError(f"{where('tests/')}: no test functions (add def test_...() functions to tests/test_*.py)")
        if not any(is_canary(t) for t in all_tests):
            raise UserError(f"{where('tests/')}: no canary test (add a test_canary_* function that calls the candidate "
                            "with an impossible expectation, so it must fail for an honest solution)")
        protected = table.get("protected", [])
        if not isinstance(protected, list) or not all(isinstance(p, str) and _is_relative(p) for p in protected):
            raise UserError(f"{loc}: [evaluator] protected must be a list of relative globs, e.g. [\"tests/**\"] "
                            f"(got {_show(protected)})")
        import_mode = table.get("import_mode", "proxy")
        if import_mode not in IMPORT_MODES:
            raise UserError(f"{loc}: [evaluator] import_mode must be \"proxy\" (the candidate runs in its own process) "
                            f"or \"direct\" (imported into the test process) (got {_show(import_mode)})")
        return EvaluatorConfig(kind=kind, protected=tuple(protected), import_mode=import_mode)

    if kind == "script":
        if "test.sh" not in tests:
            raise UserError(f"{where('tests/test.sh')}: missing (kind = \"script\" runs tests/test.sh, which writes "
                            "a reward 0..1 to the file named by $REWARD_FILE)")
        return EvaluatorConfig(kind=kind)

    # answer
    answer_file = table.get("answer_file", d.answer_file)
    if not isinstance(answer_file, str) or not _is_relative(answer_file):
        raise UserError(f"{loc}: [evaluator] answer_file must be a path relative to /workspace, e.g. \"answer.txt\" "
                        f"(got {_show(answer_file)})")
    mode = table.get("mode", d.mode)
    if mode not in ANSWER_MODES:
        raise UserError(f"{loc}: [evaluator] mode must be one of {', '.join(ANSWER_MODES)} (got {_show(mode)})")
    if "expected" not in table:
        raise UserError(f"{loc}: [evaluator] expected is missing (kind = \"answer\" compares the answer file with it)")
    expected = table["expected"]
    if mode in ("exact", "normalized", "regex") and not isinstance(expected, str):
        raise UserError(f"{loc}: [evaluator] expected must be a string for mode = {_show(mode)} (got {_show(expected)})")
    if mode == "numeric" and (isinstance(expected, bool) or not isinstance(expected, (int, float))):
        raise UserError(f"{loc}: [evaluator] expected must be a number for mode = \"numeric\" (got {_show(expected)})")
    if mode == "regex":
        try:
            re.compile(expected)
        except re.error as e:
            raise UserError(f"{loc}: [evaluator] expected is not a valid regex ({e})")
    tolerance = _number(table, "tolerance", d.tolerance, loc, "[evaluator]", allow_zero=True)
    return EvaluatorConfig(kind=kind, answer_file=answer_file, mode=mode, expected=expected, tolerance=tolerance)


# ---------------------------------------------------------------------------------------------- families

def _substitute(tree: dict[str, bytes], params: dict[str, str], *, where: Where, label: str) -> dict[str, bytes]:
    """Replace {{key}} in file names and in the text of every UTF-8 file; unknown or unused keys are errors."""
    used: set[str] = set()

    def fill(text: str, name: str) -> str:
        def one(m: re.Match) -> str:
            key = m.group(1)
            if key not in params:
                raise UserError(f"{where(name)}: uses {{{{{key}}}}} but {label} has no params.{key} "
                                f"(add {key} = \"...\" to its params)")
            used.add(key)
            return params[key]
        return PLACEHOLDER_RE.sub(one, text)

    out: dict[str, bytes] = {}
    for name, content in tree.items():
        new_name = fill(name, name)
        if not _is_relative(new_name):
            raise UserError(f"{where(name)}: file name becomes {_show(new_name)}, which leaves the task folder")
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:  # binary files are copied as they are
            out[new_name] = content
            continue
        out[new_name] = fill(text, name).encode("utf-8")
    unused = sorted(set(params) - used)
    if unused:
        raise UserError(f"{label}: params.{unused[0]} is not used by the template (remove it or fix its name)")
    return out


# ---------------------------------------------------------------------------------------------- small helpers

def _parse_toml(loc: str, raw: Optional[bytes]) -> dict[str, Any]:
    if raw is None:
        raise UserError(f"{loc}: missing")
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{loc}: not UTF-8 text (save it as UTF-8)")
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{loc}: invalid TOML ({e})")


def _check_keys(table: dict, ours: set[str], ignored: set[str], loc: str, prefix: str) -> None:
    for key in table:
        if key not in ours and key not in ignored:
            hint = ", ".join(sorted(ours))
            raise UserError(f"{loc}: {prefix}unknown key {_show(key)} (allowed: {hint})")


def _task_difficulty(value: Any, loc: str) -> int:
    if isinstance(value, str) and value.lower() in HARBOR_DIFFICULTY:
        return HARBOR_DIFFICULTY[value.lower()]
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 5:
        return value
    raise UserError(f"{loc}: [metadata] difficulty must be an integer 1-5 (got {_show(value)})")


def _number(table: dict, key: str, default: float, loc: str, where: str, allow_zero: bool = False) -> float:
    value = table.get(key, default)
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
          and (value > 0 or (allow_zero and value == 0)))
    if not ok:
        what = "a number >= 0" if allow_zero else "a positive number"
        raise UserError(f"{loc}: {where} {key} must be {what} (got {_show(value)})")
    return float(value)


def _integer(table: dict, key: str, default: int, loc: str, where: str) -> int:
    value = table.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UserError(f"{loc}: {where} {key} must be a positive integer (got {_show(value)})")
    return value


def _size_mb(table: dict, key: str, harbor_key: str, default: int, loc: str) -> int:
    """memory_mb = 2048, or Harbor's older spelling memory = "2G" / "512M"."""
    if key in table and harbor_key in table:
        raise UserError(f"{loc}: [environment] has both {key} and {harbor_key} (keep {key})")
    if harbor_key not in table:
        return _integer(table, key, default, loc, "[environment]")
    value = table[harbor_key]
    m = re.fullmatch(r"\s*(\d+)\s*([MmGg])[Bb]?\s*", value) if isinstance(value, str) else None
    if not m:
        raise UserError(f"{loc}: [environment] {harbor_key} must look like \"2G\" or \"512M\"; better use "
                        f"{key} = 2048 (got {_show(value)})")
    return int(m.group(1)) * (1024 if m.group(2) in "Gg" else 1)


def _id(value: Any, loc: str) -> str:
    if not isinstance(value, str) or not ID_RE.match(value):
        raise UserError(f"{loc} must be letters, digits, '.', '_' or '-', starting with a letter or digit "
                        f"(got {_show(value)})")
    return value


def _display(path: Path) -> str:
    """A path as the user would type it: relative to the current folder when it is inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _is_relative(p: str) -> bool:
    return bool(p) and not p.startswith("/") and ".." not in Path(p).parts


def _is_pytest_file(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.startswith("test_") and base.endswith(".py")


def _show(value: Any) -> str:
    """A value the way it would be written in TOML: "9" for a string, 9 for a number."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
