"""What a sweep shows while it runs: a rich progress bar (done/total, failures, ETA) on a terminal, one plain line
per run otherwise (a log file, CI), and the closing summary."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from optlease.experiments.sweep import Summary
from optlease.experiments.worker import Outcome


class PlainProgress:
    """One line per finished run: `[3/24] ok NAME (0.4 s on HOST:PID)` or `[4/24] FAILED NAME: CONFIG: ERROR`."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.total = 0
        self.done = 0

    def start(self, total: int) -> None:
        self.total = total

    def outcome(self, outcome: Outcome) -> None:
        self.done += 1
        name = Path(outcome.config).stem
        if outcome.ok:
            print(f"[{self.done}/{self.total}] ok {name} ({outcome.seconds:.1f} s on {outcome.worker})", file=self.out,
                  flush=True)
        else:
            print(f"[{self.done}/{self.total}] FAILED {name}: {outcome.config}: {outcome.error}", file=self.out,
                  flush=True)

    def close(self) -> None:
        pass


class BarProgress:
    """A rich progress bar on the terminal; a failure is printed above it as it happens."""

    def __init__(self, out: TextIO) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.console = Console(file=out)
        self.bar = Progress(TextColumn("runs"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("[red]{task.fields[failed]} failed"), TextColumn("ETA"),
                            TimeRemainingColumn(), console=self.console, transient=False)
        self.task = None
        self.failed = 0

    def start(self, total: int) -> None:
        self.bar.start()
        self.task = self.bar.add_task("runs", total=total, failed=0)

    def outcome(self, outcome: Outcome) -> None:
        if not outcome.ok:
            self.failed += 1
            self.console.print(f"FAILED {Path(outcome.config).stem}: {outcome.config}: {outcome.error}",
                               markup=False, highlight=False)
        self.bar.update(self.task, advance=1, failed=self.failed)

    def close(self) -> None:
        self.bar.stop()


def progress_for(out: TextIO = sys.stderr) -> PlainProgress | BarProgress:
    return BarProgress(out) if out.isatty() else PlainProgress(out)


def summary_lines(summary: Summary) -> list[str]:
    """The closing note: how many runs, how many failed (each with its configuration), wall and per-run time."""
    figures = summary.as_dict()
    per_run = "-" if figures["per_run_s"] is None else f"{figures['per_run_s']} s"
    lines = [f"runs: {figures['runs']}, skipped (done before): {figures['skipped']}, ran: {figures['ran']}, "
             f"failed: {figures['failures']}, wall time: {figures['wall_time_s']} s, per run: {per_run}"]
    lines += [f"failed: {o.config}: {o.error}" for o in summary.failures]
    return lines
