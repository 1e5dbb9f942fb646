"""`optlease optimize`: schedule a whole workload offline with CP-SAT and report the objective and proven bound."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from optlease.cli.app import app


@app.command()
def optimize(
    conf: Annotated[Path, typer.Option("-c", "--conf", help="Haizea configuration file.", envvar="OPTLEASE_CONF")],
    time_limit: Annotated[float, typer.Option("--time-limit", help="Solver seconds.")] = 60.0,
    workers: Annotated[int, typer.Option("--workers", help="Solver workers.")] = 2,
    seed: Annotated[int, typer.Option("--seed", help="Solver seed.")] = 0,
    schedule_out: Annotated[Optional[Path], typer.Option("--schedule-out", help="Write the offline schedule "
                                                         "(optlease-schedule/1 JSON) here.")] = None,
) -> None:
    """Schedule every request of the workload knowing them all in advance (arrivals still respected, real
    durations known): the clairvoyant reference for a workload. Prints JSON: objective, proven bound, gap, and the
    schedule's figures next to the greedy simulation's."""
    from optlease.accounting.metrics import run_summary
    from optlease.checker import check_schedule
    from optlease.engine.run import simulate
    from optlease.formats.config import load_config
    from optlease.formats.schedule_json import schedule_document, write_schedule
    from optlease.engine.run import apply_trace_options, load_workload, site_of
    from optlease.scheduling.cpsat.offline import greedy_hint, optimize as run
    from optlease.scheduling.options import SchedulingOptions

    cfg = load_config(conf, overrides={"scheduling": {"mapper": "greedy"}})
    origin = cfg.get("simulation", "starttime")
    opts = SchedulingOptions.from_config(cfg)
    _, workload = load_workload(cfg)
    requests = apply_trace_options(cfg, workload.requests)
    greedy = simulate(cfg, out=io.StringIO())
    result = run(site_of(cfg, workload), requests, opts, time_limit, workers, seed, greedy_hint(greedy.leases))
    end = max((lease.end or 0 for lease in result.leases), default=0)
    doc = schedule_document(result.site, result.leases, origin)
    stats = result.stats
    out = {
        "status": stats.status, "source": stats.source, "objective": stats.objective,
        "best_bound": stats.best_bound, "gap": stats.gap, "greedy_objective": stats.hint_objective,
        "solver_wall_time_s": round(stats.wall_time, 3),
        "model": {"variables": stats.num_variables, "constraints": stats.num_constraints},
        "deferred": result.deferred, "checker_violations": len(check_schedule(doc)),
        "offline": _figures(run_summary(result.site, result.leases, end)),
        "greedy": _figures(run_summary(greedy.site, greedy.leases, greedy.end_time)),
    }
    if schedule_out:
        write_schedule(str(schedule_out), result.site, result.leases, origin)
    print(json.dumps(out, indent=1))


def _figures(summary: dict) -> dict:
    be = summary["best_effort"]
    return {"ar_accepted": summary["ar"]["accepted"], "ar_rejected": summary["ar"]["rejected"],
            "be_all_completed_at": be["all_completed_at"], "be_wait_avg": be["wait_avg"],
            "be_wait_max": be["wait_max"], "be_bounded_slowdown_avg": be["bounded_slowdown_avg"],
            "preemptions": summary["preemptions"]}
