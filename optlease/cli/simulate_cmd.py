"""`optlease simulate`: run a Haizea configuration's trace through the simulator."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from optlease.cli.app import app


@app.command()
def simulate(
    conf: Annotated[Path, typer.Option("-c", "--conf", help="Haizea configuration file.", envvar="OPTLEASE_CONF")],
    tracefile: Annotated[Optional[str], typer.Option("--tracefile", help="Trace to run instead of the "
                                                     "configuration's [tracefile] tracefile.")] = None,
    schedule_out: Annotated[Optional[Path], typer.Option("--schedule-out", help="Write the schedule "
                                                         "(optlease-schedule/1 JSON) here.")] = None,
    summary_out: Annotated[Optional[Path], typer.Option("--summary-out", help="Write the run's JSON summary "
                                                        "here ('-' for standard output).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the log.")] = False,
) -> None:
    """Simulate a workload with Haizea's semantics; print Haizea's log and status summary."""
    from optlease.accounting.metrics import lease_records, run_summary
    from optlease.accounting.rounds import admission_summary, round_summary
    from optlease.engine.run import simulate as run
    from optlease.formats.config import load_config
    from optlease.formats.schedule_json import write_schedule

    cfg = load_config(conf)
    result = run(cfg, tracefile=tracefile, out=None if quiet else sys.stdout)
    origin = cfg.get("simulation", "starttime")
    if schedule_out:
        write_schedule(str(schedule_out), result.site, result.leases, origin)
    summary = run_summary(result.site, result.leases, result.end_time)
    summary["wall_time_s"] = round(result.wall_time, 3)
    # the scheduling rounds; under `mapper: cpsat`, the distribution of the solver's rounds too
    records = result.round_records
    summary["rounds"] = {"count": result.rounds} if records is None else round_summary(records)
    if result.admissions is not None:
        summary["rounds"]["admissions"] = admission_summary(result.admissions)
    if summary_out:
        text = json.dumps(summary, indent=1)
        if str(summary_out) == "-":
            print(text)
        else:
            summary_out.write_text(text + "\n")
    datafile = cfg.get("accounting", "datafile")
    if datafile:
        data = {"summary": summary, "leases": lease_records(result.leases)}
        cfg.resolve(datafile).write_text(json.dumps(data, indent=1) + "\n")
