"""`optlease simulate`: run a Haizea configuration's trace through the simulator."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from optlease.cli.app import app


@app.command()
def simulate(
    conf: Annotated[Path, typer.Option("-c", "--conf", help="Haizea configuration file.", envvar="OPTLEASE_CONF")],
    tracefile: Annotated[Optional[str], typer.Option("--tracefile", help="Trace to run instead of the "
                                                     "configuration's [tracefile] tracefile.")] = None,
    injection: Annotated[Optional[Path], typer.Option("--injection", help="Lease injection file (LWF) to merge "
                                                      "into the trace instead of [tracefile] injectionfile.")] = None,
    schedule_out: Annotated[Optional[Path], typer.Option("--schedule-out", help="Write the schedule "
                                                         "(optlease-schedule/1 JSON) here.")] = None,
    summary_out: Annotated[Optional[Path], typer.Option("--summary-out", help="Write the run's JSON summary "
                                                        "here ('-' for standard output).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the log.")] = False,
) -> None:
    """Simulate a workload with Haizea's semantics; print Haizea's log and status summary, then the run's
    headline figures (on standard error). `[accounting] datafile` writes the run's data file."""
    from optlease.accounting.datafile import write_run
    from optlease.accounting.metrics import run_summary
    from optlease.accounting.rounds import admission_summary, round_summary
    from optlease.accounting.rundata import run_data
    from optlease.cli.progress import simulation_progress
    from optlease.engine.run import simulate as run
    from optlease.formats.config import load_config
    from optlease.formats.schedule_json import write_schedule

    cfg = load_config(conf)
    with simulation_progress(show=sys.stderr.isatty() and (quiet or not sys.stdout.isatty())) as progress:
        result = run(cfg, tracefile=tracefile, out=None if quiet else sys.stdout,
                     injection=str(injection) if injection else None, progress=progress)
    origin = cfg.get("simulation", "starttime")
    schedule_file = schedule_out or (cfg.resolve(cfg.get("accounting", "schedule-file"))
                                     if cfg.get("accounting", "schedule-file") else None)
    if schedule_file:
        write_schedule(str(schedule_file), result.site, result.leases, origin, result.images)
    if summary_out:
        summary = run_summary(result.site, result.leases, result.end_time)
        summary["wall_time_s"] = round(result.wall_time, 3)
        if result.images is not None:
            summary["images"] = result.images.figures()
        # the scheduling rounds; under `mapper: cpsat`, the distribution of the solver's rounds too
        records = result.round_records
        summary["rounds"] = {"count": result.rounds} if records is None else round_summary(records)
        if result.admissions is not None:
            summary["rounds"]["admissions"] = admission_summary(result.admissions)
        text = json.dumps(summary, indent=1)
        if str(summary_out) == "-":
            print(text)
        else:
            summary_out.write_text(text + "\n")
    data = run_data(result, result.accounting, run_attrs(cfg, conf, tracefile, injection))
    datafile = cfg.get("accounting", "datafile")
    if datafile:
        write_run(cfg.resolve(datafile), data)
    print(headline(data.per_run), file=sys.stderr)


def run_attrs(cfg: Any, conf: Path, tracefile: str | None, injection: Path | None) -> dict[str, str]:
    """What labels the run in its data file: `[accounting] attributes` (a multi-configuration run's profile,
    trace and injection), else the trace and injection this run used; and the configuration's text."""
    from optlease.formats.config import accounting_attributes

    attrs = accounting_attributes(cfg)
    given = {"profile": "", "tracefile": tracefile or cfg.get("tracefile", "tracefile") or "",
             "injectionfile": str(injection) if injection else cfg.get("tracefile", "injectionfile") or ""}
    # Haizea's multi-configuration files name the injection `injectfile`
    if "injectfile" in attrs and "injectionfile" not in attrs:
        attrs["injectionfile"] = attrs.pop("injectfile")
    return {**given, **attrs, "configuration": conf.read_text()}


def headline(per_run: dict[str, Any]) -> str:
    """The run's headline figures with their units, one per line (figures a run does not have are left out)."""
    from optlease.accounting.rundata import HEADLINE

    lines = [f"optlease: run figures ({per_run['leases']} leases, mapper {per_run['mapper']})"]
    for name, label, unit in HEADLINE:
        value = per_run.get(name)
        if value is None:
            continue
        if unit == "%":
            text = f"{100 * value:.1f} %"
        elif isinstance(value, float):
            text = f"{value:.4g}{' ' + unit if unit else ''}"
        else:
            text = f"{value}{' ' + unit if unit else ''}"
        lines.append(f"  {label + ':':<38}{text}")
    return "\n".join(lines)
