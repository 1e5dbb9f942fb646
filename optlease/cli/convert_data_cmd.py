"""`optlease convert-data`: runs' data files as CSV (Haizea's haizea-convert-data)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from optlease.cli.app import app
from optlease.errors import InputError


@app.command("convert-data")
def convert_data(
    files: Annotated[list[Path], typer.Argument(help="Data files (optlease-data/1), one per run.",
                                                show_default=False)],
    kind: Annotated[Optional[str], typer.Option("-t", "--type", help="per-run, per-lease or counter.")] = None,
    counter: Annotated[Optional[str], typer.Option("-c", "--counter", help="The counter to print with "
                                                   "-t counter.")] = None,
    list_counters: Annotated[bool, typer.Option("-l", "--list-counters", help="Print the names of the "
                                                "counters in the files and exit.")] = False,
    fmt: Annotated[str, typer.Option("-f", "--format", help="Output format (csv).")] = "csv",
) -> None:
    """Print the runs' per-run data, per-lease data or one counter as CSV, one table over all the files, with
    the profile, tracefile and injectionfile columns telling the runs apart."""
    from optlease.accounting.convert import counter_names, table, to_csv
    from optlease.accounting.datafile import read_run

    if fmt != "csv":
        raise InputError(f"unknown format {fmt!r} (csv is the only one)", "-f")
    if not list_counters and kind is None:
        raise InputError("say what to print: -t per-run, -t per-lease or -t counter -c NAME (or -l)", "-t")
    runs = [(str(path), read_run(path)) for path in files]
    if list_counters:
        sys.stdout.write("".join(f"{name}\n" for name in counter_names([run for _, run in runs])))
        return
    sys.stdout.write(to_csv(table(runs, kind, counter)))
