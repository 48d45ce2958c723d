"""Checks of single values in task.toml and family.toml, shared by the task, family and suite loaders.

Every problem a user can fix raises UserError with one line naming the file, the field and the fix.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any, Callable, Optional

from results.errors import UserError

ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
Where = Callable[[str], str]  # file name inside the task -> how errors name it
MAX_TOML_BYTES = 1 << 20  # task.toml and family.toml hold settings, not data


def parse_toml(loc: str, raw: Optional[bytes]) -> dict[str, Any]:
    """A task.toml or family.toml, bounded: size (MAX_TOML_BYTES) and nesting (tomllib recurses)."""
    if raw is None:
        raise UserError(f"{loc}: missing")
    if len(raw) > MAX_TOML_BYTES:
        raise UserError(f"{loc}: {len(raw)} bytes, over the limit of {MAX_TOML_BYTES} (settings only)")
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UserError(f"{loc}: not UTF-8 text (save it as UTF-8)") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{loc}: invalid TOML ({str(e)[:200]})") from None
    except RecursionError:
        raise UserError(f"{loc}: arrays or tables nested too deeply (settings are a few levels)") from None


def check_keys(table: dict, ours: set[str], ignored: set[str], loc: str, prefix: str) -> None:
    for key in table:
        if key not in ours and key not in ignored:
            hint = ", ".join(sorted(ours))
            raise UserError(f"{loc}: {prefix}unknown key {show(key)} (allowed: {hint})")


def number(table: dict, key: str, default: float, loc: str, where: str, allow_zero: bool = False) -> float:
    value = table.get(key, default)
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > 0 or (allow_zero and value == 0))
    )
    if not ok:
        what = "a number >= 0" if allow_zero else "a positive number"
        raise UserError(f"{loc}: {where} {key} must be {what} (got {show(value)})")
    return float(value)


def integer(table: dict, key: str, default: int, loc: str, where: str) -> int:
    value = table.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UserError(f"{loc}: {where} {key} must be a positive integer (got {show(value)})")
    return value


def size_mb(table: dict, key: str, harbor_key: str, default: int, loc: str) -> int:
    """memory_mb = 2048, or Harbor's older spelling memory = "2G" / "512M"."""
    if key in table and harbor_key in table:
        raise UserError(f"{loc}: [environment] has both {key} and {harbor_key} (keep {key})")
    if harbor_key not in table:
        return integer(table, key, default, loc, "[environment]")
    value = table[harbor_key]
    m = re.fullmatch(r"\s*(\d+)\s*([MmGg])[Bb]?\s*", value) if isinstance(value, str) else None
    if not m:
        raise UserError(
            f'{loc}: [environment] {harbor_key} must look like "2G" or "512M"; better use '
            f"{key} = 2048 (got {show(value)})"
        )
    return int(m.group(1)) * (1024 if m.group(2) in "Gg" else 1)


def check_id(value: Any, loc: str) -> str:
    if not isinstance(value, str) or not ID_RE.match(value):
        raise UserError(
            f"{loc} must be letters, digits, '.', '_' or '-', starting with a letter or digit "
            f"(got {show(value)})"
        )
    return value


def display(path: Path) -> str:
    """A path as the user would type it: relative to the current folder when it is inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def is_relative(p: str) -> bool:
    return bool(p) and not p.startswith("/") and ".." not in Path(p).parts


def show(value: Any) -> str:
    """A value the way it would be written in TOML: "9" for a string, 9 for a number."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
