"""The progress of a run on stderr, fitted to the terminal's width (rich): a bar with attempts done, solved,
errors, elapsed time, ETA and spend, and under it what the attempts in flight are waiting on (the sandbox,
the model, a queue for the model, their commands, grading). Before the first attempt starts, what the run is
doing (loading the model, building images). Not a terminal (a log, CI): one plain line per finished attempt.
"""

from __future__ import annotations

import time
from typing import Optional

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from results.schema import Attempt


def attempt_name(task_id: str, sample: int) -> str:
    return f"{task_id}#{sample}"


class Progress:
    """One run's progress. start/phase/update come from the event loop's thread; the display refreshes by
    itself (elapsed time, how long each attempt has waited) until close()."""

    def __init__(self, total: int = 0, started: Optional[float] = None, console: Optional[Console] = None):
        self.total, self.done, self.solved, self.errors, self.cost = total, 0, 0, 0, 0.0
        self.started = time.monotonic() if started is None else started
        self.console = console or Console(stderr=True, highlight=False)
        self.stage = ""  # before attempts run: what the run is doing
        self.flight: dict[str, tuple[str, float]] = {}  # attempt -> (what it waits on, since when)
        self.live: Optional[Live] = None
        if self.console.is_terminal:
            self.live = Live(
                self, console=self.console, refresh_per_second=2, transient=False, redirect_stdout=False
            )
            self.live.start()

    # -- what the runner reports
    def set_stage(self, text: str) -> None:
        self.stage = text
        if self.live is None:
            self.console.print(text, soft_wrap=True)

    def say(self, text: str) -> None:
        """A line that stays (above the live display). In a terminal it wraps at word boundaries to the
        terminal's width (the terminal itself would cut words); elsewhere (logs, pipes) it stays one line."""
        self.console.print(text, soft_wrap=not self.console.is_terminal)

    def set_total(self, total: int) -> None:
        self.total, self.stage, self.started = total, "", time.monotonic()

    def start(self, name: str) -> None:
        self.flight[name] = ("sandbox", time.monotonic())

    def phase(self, name: str, what: str) -> None:
        if name in self.flight:
            self.flight[name] = (what, time.monotonic())

    def update(self, rec: Attempt, name: Optional[str] = None) -> None:
        self.done += 1
        self.solved += rec.solved
        self.errors += rec.status == "error"
        self.cost += rec.cost
        self.flight.pop(name or attempt_name(rec.task_id, rec.sample), None)
        if self.live is None:
            outcome = (
                "solved" if rec.solved else rec.status if rec.status == "error" else rec.reason or "failed"
            )
            self.console.print(
                f"[{self.done}/{self.total}] {attempt_name(rec.task_id, rec.sample)}: {outcome}"
                f" ({rec.durations.total:.0f}s)",
                soft_wrap=True,
            )

    def in_flight(self) -> list[str]:
        return list(self.flight)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()  # the last screen stays: the bar, and what was in flight if interrupted
            self.live = None

    # -- the display (rich calls this at every refresh)
    def __rich__(self) -> Group:
        # Three columns short of the width: the terminal echoes a Ctrl-C as "^C" after the last line, and
        # past the last column that wraps, pushing the display down a line (a stale copy would stay).
        width = self.console.width - 3

        def line(text: str) -> Text:
            out = Text(text, no_wrap=True, overflow="ellipsis")
            out.truncate(width, overflow="ellipsis")
            return out

        now = time.monotonic()
        if self.stage:
            return Group(line(f"{self.stage} ({now - self.started:.0f}s)"))
        elapsed = now - self.started
        eta = f"{elapsed / self.done * (self.total - self.done):.0f}s" if self.done else "?"
        counts = (
            f" {self.done}/{self.total} solved {self.solved} errors {self.errors} "
            f"{elapsed:.0f}s ETA {eta}" + (f" ${self.cost:.2f}" if self.cost else "")
        )
        bar = max(min(24, width - len(counts) - 2), 4)
        filled = int(bar * self.done / max(self.total, 1))
        lines = [line(f"[{'#' * filled}{'.' * (bar - filled)}]{counts}")]
        if self.flight:
            waits = [
                f"{name} {what} {now - since:.0f}s"
                for name, (what, since) in sorted(self.flight.items(), key=lambda kv: kv[1][1])
            ]
            lines.append(line(f"{len(waits)} running: " + ", ".join(waits)))
        return Group(*lines)
