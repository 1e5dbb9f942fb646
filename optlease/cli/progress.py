"""The progress display of a long simulation on the terminal (rich): requests arrived out of all, elapsed time and
an estimate of what is left. Shown on standard error only, and only when asked (the caller checks for a terminal)."""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator


@contextlib.contextmanager
def simulation_progress(show: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A callback `(arrived, total)` that updates the display, or None when there is nothing to show."""
    if not show:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    columns = (TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TextColumn("requests"),
               TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn())
    # transient: the bar goes away at the end, leaving the run's figures alone on the terminal
    with Progress(*columns, console=Console(stderr=True), transient=True, redirect_stdout=False,
                  redirect_stderr=False) as bar:
        task = bar.add_task("simulating", total=None)

        def update(arrived: int, total: int) -> None:
            bar.update(task, completed=arrived, total=total)

        yield update
