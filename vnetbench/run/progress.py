"""A run's progress: a live bar on a terminal; without one (CI, nohup, a pipe) one plain, flushed line per trial,
since a bar that is only drawn at the end leaves a log silent for the whole run. Either way every line also goes
to a log file next to the results file (`<results>.log`), to follow a run from elsewhere (`tail -f`)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def log_path(db: str | Path) -> Path:
    return Path(f"{db}.log")


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class RunProgress:
    """What the trial loop reports to: `add_task(description, total, trials=N)`, then `update(task,
    description=..., trial=True)` as each trial starts (or a topology is built) and `advance(task, seconds)` as it
    ends. `total` is the expected duration in seconds; the time left is scaled by how fast the run really goes."""

    def __init__(self, console: Console, show: bool, log: Path | None, campaign: int | None = None):
        self.bar = None
        self.plain: TextIO | None = None
        if show and console.is_terminal:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                                TextColumn("left"), TimeRemainingColumn(), console=console, transient=False)
        elif show:
            self.plain = console.file
        self.log = None
        self.campaign = campaign
        if log is not None:
            try:
                self.log = open(log, "a", buffering=1)
            except OSError:  # a log that cannot be written does not stop the measurement
                self.log = None
        self.total, self.done, self.trials, self.trial = 1.0, 0.0, 0, 0
        self.began = time.monotonic()

    def __enter__(self) -> "RunProgress":
        if self.bar:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar:
            self.bar.__exit__(*exc)
        how = "ended" if exc[0] is None else "stopped" if issubclass(exc[0], KeyboardInterrupt) else "failed"
        self._line(f"{how} after {_clock(time.monotonic() - self.began)}, {self.trial} of {self.trials} trials started")
        if self.log:
            self.log.close()

    def add_task(self, description: str, total: float, trials: int = 0) -> int:
        self.total, self.trials, self.began = total, trials, time.monotonic()
        if self.bar:
            return self.bar.add_task(description, total=total)
        return 0

    def extend(self, task: int, seconds: float, trials: int) -> None:
        """More work than first planned (a card's next round): its estimated seconds and trials."""
        self.total += seconds
        self.trials += trials
        if self.bar:
            self.bar.update(task, total=self.total)

    def update(self, task: int, description: str, trial: bool = False) -> None:
        if self.bar:
            self.bar.update(task, description=description)
        elapsed = time.monotonic() - self.began
        if trial:
            self.trial += 1
        where = f"trial {self.trial}/{self.trials}: " if trial else ""
        left = self.total - self.done  # the estimate, until enough has run to scale it by the real pace
        if self.done > 0.1 * self.total:
            left *= elapsed / self.done
        self._line(f"{where}{description} ({_clock(elapsed)} elapsed, about {_clock(left)} left)")

    def advance(self, task: int, amount: float) -> None:
        self.done = min(self.total, self.done + amount)
        if self.bar:
            self.bar.advance(task, amount)

    def _line(self, text: str) -> None:
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)  # a level's escapes stay inert
        stamp = time.strftime("%H:%M:%S")
        if self.plain is not None:
            try:
                self.plain.write(f"{stamp} {text}\n")
                self.plain.flush()
            except (OSError, ValueError):
                pass
        if self.log is not None:
            try:
                self.log.write(f"{time.strftime('%Y-%m-%d')} {stamp} campaign {self.campaign}: {text}\n")
            except OSError:
                pass
