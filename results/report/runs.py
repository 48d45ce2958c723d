"""Loading runs for the report: each run folder's attempts and summary, read through results.store."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from results import metrics
from results.store import RunReader, open_run


@dataclass
class RunData:
    label: str  # unique short name used in tables and plots
    reader: RunReader
    df: pd.DataFrame
    summary: pd.DataFrame  # metrics.run_summary

    def level(self, level: str) -> pd.DataFrame:
        return self.summary[self.summary["level"] == level]

    @property
    def overall(self) -> pd.Series:
        return self.level("overall").iloc[0]


def load_runs(run_dirs: Sequence[str | Path], n_boot: int = 1000, seed: int = 0) -> list[RunData]:
    readers = [open_run(d) for d in run_dirs]
    labels = [r.run_id for r in readers]
    if len(set(labels)) < len(labels):  # the same run id twice (copies): number them
        labels = [f"{i + 1}:{label}" for i, label in enumerate(labels)]
    runs = []
    for label, reader in zip(labels, readers):
        df = reader.read_attempts()
        runs.append(RunData(label, reader, df, metrics.run_summary(df, n_boot, seed)))
    return runs
