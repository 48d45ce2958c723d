"""The progress line of a run on stderr: attempts done, solved, errors, elapsed time, ETA and spend."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from results.schema import Attempt


@dataclass
class Progress:
    total: int
    done: int = 0
    solved: int = 0
    errors: int = 0
    cost: float = 0.0
    started: float = field(default_factory=time.monotonic)
    stream = sys.stderr

    def update(self, rec: Attempt):
        self.done += 1
        self.solved += rec.solved
        self.errors += rec.status == "error"
        self.cost += rec.cost
        self.show()

    def show(self):
        elapsed = time.monotonic() - self.started
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0
        width = 24
        filled = int(width * self.done / max(self.total, 1))
        line = (
            f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} solved {self.solved} "
            f"errors {self.errors} elapsed {elapsed:.0f}s ETA {eta:.0f}s spend ${self.cost:.4f}"
        )
        print(line, end="" if self.done < self.total else "\n", file=self.stream, flush=True)
