"""`optlease report RUNS... -o DIR`: a report comparing runs (their data files) side by side, as HTML and Markdown."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from optlease.cli.app import app


@app.command("report")
def report(
    runs: Annotated[list[Path], typer.Argument(metavar="RUNS...", help="Data files (optlease-data/1 Parquet), or "
                                                                       "directories searched for *.parquet.")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory to write report.html, report.md and its "
                                                          "figures into (made if missing).")],
    title: Annotated[str, typer.Option("--title", help="The report's title.")] = "optlease report",
) -> None:
    """Compare runs or profiles side by side: acceptance, best-effort completion and waits, slowdown, utilization,
    preemptions, migrations, round times and gaps; a Gantt chart of a schedule written beside a data file
    (X.schedule.json), utilization and queue length over time, the CDF of best-effort waits, and bars with the spread
    over each profile's runs. The HTML file is self-contained: it opens offline."""
    from optlease.report.files import write_report

    page = write_report(runs, out, title)
    typer.echo(f"report: {page}")
