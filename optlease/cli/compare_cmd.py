"""`optlease compare -c CONF --schedulers ...`: one workload under several schedulers, and the report of them."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from optlease.cli.app import app


@app.command("compare")
def compare(
    conf: Annotated[Path, typer.Option("-c", "--conf", help="Haizea configuration file: the site, the workload and "
                                                             "every option the schedulers share.",
                                       envvar="OPTLEASE_CONF")],
    schedulers: Annotated[str, typer.Option("--schedulers", help="Comma-separated: greedy-off, greedy-aggressive, "
                                            "greedy-conservative, greedy-intermediate-N (N reservations), cpsat "
                                            "(mapper: cpsat), offline (optlease optimize's whole-workload "
                                            "optimum).")] = "greedy-aggressive,greedy-intermediate-4,cpsat,offline",
    tracefile: Annotated[Optional[Path], typer.Option("--tracefile", help="Trace to run instead of the "
                                                      "configuration's tracefile option.", exists=True,
                                                      dir_okay=False)] = None,
    injection: Annotated[Optional[Path], typer.Option("--injection", help="Lease injection file (LWF) to merge "
                                                      "into the trace instead of the configuration's injectionfile.",
                                                      exists=True, dir_okay=False)] = None,
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory for the runs' data files and schedules and "
                                                          "the report.")] = Path("compare"),
    runtime_estimate: Annotated[Optional[str], typer.Option("--runtime-estimate", help="What best-effort bookings "
                                "hold: 'requested' or 'user-history' for every scheduler, or SCHEDULER=ESTIMATE "
                                "items (default: the configuration's, for every scheduler).")] = None,
    offline_time_limit: Annotated[float, typer.Option("--offline-time-limit", help="offline: solver seconds for "
                                                      "the whole workload.", min=0.1)] = 60.0,
) -> None:
    """Run one configuration's workload under each scheduler, write each run's data file and schedule, and the
    report comparing them (report.html, report.md) in the output directory."""
    from optlease.formats.config import SCHEMA, load_config
    from optlease.report.compare import compare as run, estimate_note, parse_estimates, parse_schedulers
    from optlease.report.files import write_report

    chosen = parse_schedulers(schedulers)
    option = SCHEMA["scheduling"]["runtime-estimate"]
    default = load_config(conf).get("scheduling", "runtime-estimate")
    estimates = parse_estimates(runtime_estimate, chosen, default, tuple(option.choices))
    # files on the command line are the caller's: absolute, so that the configuration does not resolve them
    workload = {key: str(path.resolve()) for key, path in (("tracefile", tracefile), ("injectionfile", injection))
                if path is not None}
    files = run(conf, chosen, out, estimates, offline_time_limit, workload,
                progress=lambda line: typer.echo(line, err=True))
    page = write_report(files, out, f"optlease compare: {conf.name}", (
        f"Configuration: {conf.name}; schedulers: {', '.join(s.name for s in chosen)}.", estimate_note(estimates)))
    typer.echo(f"report: {page}")
