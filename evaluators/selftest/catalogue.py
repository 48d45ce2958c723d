"""The catalogue of cases, in the order they run and list, and the selection by name or glob."""

from __future__ import annotations

import fnmatch
from typing import Optional

from evaluators.selftest.apply_cases import apply_cases
from evaluators.selftest.case import Case
from evaluators.selftest.cross_cases import cross_cases
from evaluators.selftest.harbor_cases import harbor_cases
from evaluators.selftest.host_cases import host_cases
from evaluators.selftest.reward_cases import reward_cases
from evaluators.selftest.store_cases import store_cases
from results.errors import UserError

CATALOGUE: list[Case] = (
    host_cases() + store_cases() + reward_cases() + cross_cases() + harbor_cases() + apply_cases()
)
CASES: dict[str, Case] = {c.name: c for c in CATALOGUE}


def select(only: Optional[str]) -> list[Case]:
    """Cases named by a comma-separated list of names or globs (all when only is empty)."""
    if not only:
        return list(CATALOGUE)
    chosen: list[Case] = []
    for pattern in [p.strip() for p in only.split(",") if p.strip()]:
        hits = [c for c in CATALOGUE if fnmatch.fnmatchcase(c.name, pattern)]
        if not hits:
            raise UserError(f"selftest: no case named {pattern!r}; `harness selftest --list` shows them")
        chosen += [c for c in hits if c not in chosen]
    return chosen
