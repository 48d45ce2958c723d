"""Load a parametrised task family: a folder holding family.toml instead of task.toml.

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

import re
from pathlib import Path
from typing import Any

from results.errors import UserError
from tasks.fields import Where, check_id, check_keys, display, is_relative, parse_toml, show
from tasks.model import SPLITS, Task
from tasks.task_folder import build_task, read_tree

PLACEHOLDER_RE = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")


def load_family(path: str | Path) -> list[Task]:
    """Expand one family folder (holding family.toml) into its instances."""
    root = Path(path)
    if root.name == "family.toml":
        root = root.parent
    ftoml_shown, family_id, troot, instances = _read_family_toml(root)
    tree = read_tree(troot)
    shown_troot = display(troot)
    tasks: list[Task] = []
    seen: set[str] = set()
    for n, inst in enumerate(instances, 1):
        label = f"{ftoml_shown}: [[instances]] #{n}"
        iid, split, text_params = _instance(inst, label, seen)

        def where(f: str, iid: str = iid) -> str:
            return f"{shown_troot}/{f} (instance {iid})"

        files = _substitute(tree, text_params, where=where, label=f"{label} ({iid})")
        task = build_task(files, where=where, default_id=iid, path=None)
        task.id, task.family, task.split = iid, family_id, split
        tasks.append(task)
    return tasks


def _read_family_toml(root: Path) -> tuple[str, str, Path, list]:
    """family.toml checked: (its shown path, the family id, the template folder, the [[instances]])."""
    ftoml = root / "family.toml"
    if not ftoml.is_file():
        raise UserError(f"{display(root)}: not a task family (no family.toml)")
    shown_root = display(root)
    ftoml_shown = f"{shown_root}/family.toml"
    data = parse_toml(ftoml_shown, ftoml.read_bytes())
    check_keys(data, {"family", "instances"}, set(), ftoml_shown, "")
    fam = data.get("family")
    if not isinstance(fam, dict):
        raise UserError(
            f'{ftoml_shown}: missing [family] table (add [family] with id = "..." and template = "template")'
        )
    check_keys(fam, {"id", "template"}, set(), ftoml_shown, "[family] ")
    family_id = check_id(fam.get("id", root.name), f"{ftoml_shown}: [family] id")
    template = fam.get("template", "template")
    if not isinstance(template, str) or not is_relative(template):
        raise UserError(
            f"{ftoml_shown}: [family] template must be a relative folder name inside {shown_root} "
            f"(got {show(template)})"
        )
    troot = root / template
    if not (troot / "task.toml").is_file():
        raise UserError(
            f"{ftoml_shown}: [family] template = {show(template)} is not a task folder "
            f"(no {display(troot)}/task.toml)"
        )
    instances = data.get("instances")
    if not isinstance(instances, list) or not instances:
        raise UserError(f"{ftoml_shown}: no [[instances]] (add at least one with id, split and params)")
    return ftoml_shown, family_id, troot, instances


def _instance(inst: Any, label: str, seen: set[str]) -> tuple[str, str, dict[str, str]]:
    """One [[instances]] table checked: (its id, its split, its params as text); its id joins `seen`."""
    if not isinstance(inst, dict):
        raise UserError(f"{label} must be a table with id, split and params")
    check_keys(inst, {"id", "split", "params"}, set(), label, "")
    iid = check_id(inst.get("id"), f"{label} id")
    if iid in seen:
        raise UserError(f"{label}: duplicate instance id {show(iid)} (instance ids must be unique)")
    seen.add(iid)
    split = inst.get("split")
    if split not in SPLITS:
        raise UserError(f"{label} ({iid}): split must be one of {', '.join(SPLITS)} (got {show(split)})")
    params = inst.get("params", {})
    if not isinstance(params, dict):
        raise UserError(f'{label} ({iid}): params must be a table, e.g. params = {{ n = "7" }}')
    text_params: dict[str, str] = {}
    for k, v in params.items():
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise UserError(f"{label} ({iid}): params.{k} must be a string or a number (got {show(v)})")
        text_params[k] = str(v)
    return iid, split, text_params


def _substitute(
    tree: dict[str, bytes], params: dict[str, str], *, where: Where, label: str
) -> dict[str, bytes]:
    """Replace {{key}} in file names and in the text of every UTF-8 file; unknown or unused keys are
    errors."""
    used: set[str] = set()

    def fill(text: str, name: str) -> str:
        def one(m: re.Match) -> str:
            key = m.group(1)
            if key not in params:
                raise UserError(
                    f"{where(name)}: uses {{{{{key}}}}} but {label} has no params.{key} "
                    f'(add {key} = "..." to its params)'
                )
            used.add(key)
            return params[key]

        return PLACEHOLDER_RE.sub(one, text)

    out: dict[str, bytes] = {}
    for name, content in tree.items():
        new_name = fill(name, name)
        if not is_relative(new_name):
            raise UserError(
                f"{where(name)}: file name becomes {show(new_name)}, which leaves the task folder"
            )
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:  # binary files are copied as they are
            out[new_name] = content
            continue
        out[new_name] = fill(text, name).encode("utf-8")
    unused = sorted(set(params) - used)
    if unused:
        raise UserError(
            f"{label}: params.{unused[0]} is not used by the template (remove it or fix its name)"
        )
    return out


def choose_heldout_families(tasks: list[Task], n: int, seed: int = 0) -> list[str]:
    """`n` whole families to hold out of training (a family-held-out split), spread over domains: the
    domains in a seeded order, one family of each in turn (seeded too), so n >= 3 covers 3 domains when
    the tasks have them. Deterministic for the same families and seed, whatever the tasks' order."""
    import random

    domain_of: dict[str, str] = {}
    for t in tasks:
        if t.family:
            domain_of.setdefault(t.family, getattr(t, "domain", "") or "")
    by_domain: dict[str, list[str]] = {}
    for family, domain in domain_of.items():
        by_domain.setdefault(domain, []).append(family)
    total = len(domain_of)
    if n > total - 1:
        raise UserError(
            f"--heldout-families {n}: the tasks have {total} families; hold out at most {total - 1} "
            "so that one is left to train on"
        )
    rng = random.Random(seed)
    domains = sorted(by_domain)
    rng.shuffle(domains)
    pools = {d: sorted(by_domain[d]) for d in domains}
    for d in domains:
        rng.shuffle(pools[d])
    chosen: list[str] = []
    while len(chosen) < n:
        for d in domains:
            if pools[d] and len(chosen) < n:
                chosen.append(pools[d].pop())
    return sorted(chosen)
