"""`optlease generate-configs` and `optlease run-experiments`: a multi-configuration's individual configurations,
written out and run (Haizea's haizea-generate-configs and its generated run script, with a process pool or a Dask
cluster in place of the script)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from optlease.cli.app import app
from optlease.errors import InputError

MultiPath = Annotated[Path, typer.Option("-c", "--conf", help="Multi-configuration file (manual §5.5, or the older "
                                         "HPDC'08 layout).", show_default=False)]
ConfDir = Annotated[Path, typer.Option("-d", "--dir", help="Folder for the individual configuration files.",
                                       show_default=False)]
Profiles = Annotated[Optional[str], typer.Option("--profiles", help="Only these profiles, comma-separated "
                                                 "(default: every profile; the older layout: its \\[run] profiles).")]
TraceDir = Annotated[Optional[str], typer.Option("--tracedir", help="Read the traces from this folder instead of "
                                                 "the file's tracedir (traces moved since it was written).")]
InjectionDir = Annotated[Optional[str], typer.Option("--injectiondir", help="Read the injections from this folder "
                                                     "instead of the file's injectiondir.")]
DataDir = Annotated[Optional[str], typer.Option("--datadir", help="Write the data files here instead of the "
                                                "file's basedatadir (the older layout names none).")]


def load(conf: Path, profiles: str | None, tracedir: str | None, injectiondir: str | None, datadir: str | None):
    from optlease.formats.multiconfig import load_multiconfig

    wanted = [p.strip() for p in profiles.split(",") if p.strip()] if profiles is not None else None
    if wanted == []:
        raise InputError("name at least one profile", "--profiles")
    dirs = {k: v for k, v in (("tracedir", tracedir), ("injectiondir", injectiondir), ("datadir", datadir)) if v}
    multi = load_multiconfig(conf, dirs, wanted)
    for note in multi.notes:
        print(f"optlease: note: {conf}: {note}", file=sys.stderr)
    return multi


@app.command("generate-configs")
def generate_configs(conf: MultiPath, confdir: ConfDir, profiles: Profiles = None, tracedir: TraceDir = None,
                     injectiondir: InjectionDir = None, datadir: DataDir = None) -> None:
    """Write one configuration per profile x trace x injection of a multi-configuration, named as Haizea names
    them (PROFILE_TRACE+INJECTION.conf)."""
    from optlease.experiments.sweep import generate

    tasks = generate(load(conf, profiles, tracedir, injectiondir, datadir), confdir)
    print(f"{len(tasks)} configurations written to {confdir}")


@app.command("run-experiments")
def run_experiments(
    conf: MultiPath, confdir: ConfDir, profiles: Profiles = None, tracedir: TraceDir = None,
    injectiondir: InjectionDir = None, datadir: DataDir = None,
    workers: Annotated[Optional[int], typer.Option("--workers", "-w", min=1, help="Local processes (default: one "
                                                   "per core).")] = None,
    scheduler: Annotated[Optional[str], typer.Option("--scheduler", help="Run on the Dask distributed cluster "
                                                     "whose scheduler is at this address (tcp://HOST:PORT).",
                                                     envvar="OPTLEASE_DASK_SCHEDULER")] = None,
    only_missing: Annotated[bool, typer.Option("--only-missing", "-m", help="Skip the runs whose data file exists "
                                               "and reads (resume a sweep).")] = False,
) -> int:
    """Generate a multi-configuration's configurations and run them all in parallel; a failed run is reported and
    the others go on. Exits 1 when any run failed."""
    from optlease.experiments.progress import progress_for, summary_lines
    from optlease.experiments.sweep import check_address, generate, run_sweep

    if workers is not None and scheduler:
        raise InputError("--workers sets local processes; a Dask cluster has its own workers", "--workers")
    if scheduler:
        scheduler = check_address(scheduler)
    multi = load(conf, profiles, tracedir, injectiondir, datadir)
    tasks = generate(multi, confdir)
    progress = progress_for(sys.stderr)
    try:
        summary = run_sweep(tasks, only_missing, workers, scheduler, progress.start, progress.outcome)
    finally:
        progress.close()
    for line in summary_lines(summary):
        print(line)
    print(f"data files in {multi.datadir}")
    return 1 if summary.failures else 0
