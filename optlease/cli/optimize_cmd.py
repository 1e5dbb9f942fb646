"""`optlease optimize`: schedule a whole workload offline with CP-SAT and report the objective and proven bound, what
the offline model leaves out, and the schedule's user-facing figures next to greedy's."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from optlease.cli.app import app

# `--bound lp` solves the time-indexed MIP (one binary per lease, mode and second, per node for each VM) relaxed to
# an LP; its size grows with the leases to place times the seconds of the horizon, so it is refused above this
LP_MAX_LEASE_STEPS = 2_000

# What the offline model does not state, so that its status ("OPTIMAL") is read as a statement about that model only
LEAVES_OUT = (
    "preemption: it never suspends, resumes or migrates a lease (each runs in one piece), so its optimum is not a "
    "bound on schedules that preempt, and a schedule that preempts may have better figures",
    "uncertainty: every request is known from the start and every lease runs its real duration (no run-time "
    "estimates, no premature ends), which no online scheduler can know",
    "the online rounds: one model for the whole workload, with no non-schedulable interval after an arrival",
)
# said too when the configuration transfers images (`lease-preparation: imagetransfer`): greedy's figures pay for them
IMAGES_LEFT_OUT = ("image transfers: its leases start without waiting for their disk images (greedy's figures "
                   "include the transfers)")
STATUS_MEANS = ("the solver status and gap are about the offline model's objective (weighted waiting, refused AR "
                "and immediate time), not about the figures: compare the schedules by their figures")
FIGURES = (("AR accepted", "ar_accepted"), ("immediate accepted", "immediate_accepted"),
           ("best-effort bounded slowdown", "be_bounded_slowdown_avg"), ("best-effort wait avg (s)", "be_wait_avg"),
           ("best-effort wait max (s)", "be_wait_max"), ("all best-effort done at (s)", "be_all_completed_at"),
           ("preemptions", "preemptions"))


@app.command()
def optimize(
    conf: Annotated[Path, typer.Option("-c", "--conf", help="Haizea configuration file.", envvar="OPTLEASE_CONF")],
    time_limit: Annotated[float, typer.Option("--time-limit", help="Solver seconds.", min=0.1)] = 60.0,
    workers: Annotated[int, typer.Option("--workers", help="Solver workers.", min=1)] = 2,
    seed: Annotated[int, typer.Option("--seed", help="Solver seed.")] = 0,
    schedule_out: Annotated[Optional[Path], typer.Option("--schedule-out", help="Write the offline schedule "
                                                         "(optlease-schedule/1 JSON) here.")] = None,
    bound: Annotated[Optional[str], typer.Option("--bound", help="Also compute this bound: 'lp', the LP "
                                                 "relaxation of the time-indexed MIP (pyomo/HiGHS), for small "
                                                 f"workloads (leases x seconds of horizon <= {LP_MAX_LEASE_STEPS}).")]
    = None,
) -> None:
    """Schedule every request of the workload knowing them all in advance (arrivals still respected, real
    durations known): the clairvoyant reference for a workload. Prints JSON: objective, proven bound, gap, what the
    offline model leaves out (it never preempts), and the schedule's figures next to the greedy simulation's; the
    figures side by side and the caveat also go to stderr as a table."""
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
    lp = None
    if bound is not None:
        if bound != "lp":
            raise typer.BadParameter(f"unknown bound {bound!r} (known: lp)", param_hint="--bound")
        lp = _lp_bound(site_of(cfg, workload), requests, opts, time_limit)
    greedy = simulate(cfg, out=io.StringIO())
    result = run(site_of(cfg, workload), requests, opts, time_limit, workers, seed, greedy_hint(greedy.leases))
    end = max((lease.end or 0 for lease in result.leases), default=0)
    doc = schedule_document(result.site, result.leases, origin)
    stats = result.stats
    out = {
        "status": stats.status, "source": stats.source, "objective": stats.objective,
        "best_bound": stats.best_bound, "gap": stats.gap, "greedy_objective": stats.hint_objective,
        "solver_wall_time_s": round(stats.wall_time, 3),
        "model": {"formulation": result.formulation, "variables": stats.num_variables,
                  "constraints": stats.num_constraints},
        "deferred": result.deferred, "checker_violations": len(check_schedule(doc)),
        "leaves_out": list(LEAVES_OUT) + ([IMAGES_LEFT_OUT] if opts.preparation.managed else []),
        "status_means": STATUS_MEANS,
        "offline": _figures(run_summary(result.site, result.leases, end)),
        "greedy": _figures(run_summary(greedy.site, greedy.leases, greedy.end_time)),
    }
    if lp is not None:
        out["lp_bound"] = lp
    if schedule_out:
        write_schedule(str(schedule_out), result.site, result.leases, origin)
    print(json.dumps(out, indent=1))
    typer.echo(_table(out), err=True)


def _table(out: dict) -> str:
    """The figures side by side, under the caveat: what a user compares, rather than the solver status."""
    lines = [f"offline model: {out['status']}, gap {out['gap']} ({STATUS_MEANS})",
             *(f"  leaves out {item}" for item in out["leaves_out"]),
             f"{'figure':32} {'offline':>14} {'greedy':>14}"]
    for label, key in FIGURES:
        lines.append(f"{label:32} {_cell(out['offline'][key]):>14} {_cell(out['greedy'][key]):>14}")
    return "\n".join(lines)


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f}" if isinstance(value, float) else f"{value:,}"


def _lp_bound(site, requests, opts, time_limit: float) -> dict:
    """The LP relaxation of the offline round as the pyomo/HiGHS MIP states it (a lower bound on its optimum, so on
    any CP-SAT objective); exits with a one-line error when the workload is too large for a time-indexed model."""
    from optlease.scheduling.cpsat.offline import offline_snapshot
    from optlease.scheduling.cpsat.prepare import prepare
    from optlease.scheduling.mip import solve_rounds_mip

    snap, _, _ = offline_snapshot(site, requests, opts)
    data = prepare(snap, opts.weights)
    size = len(data.tails) * (data.horizon - data.now + 1)
    if size > LP_MAX_LEASE_STEPS:
        typer.echo(f"error: --bound lp: {len(data.tails)} leases x {data.horizon - data.now + 1} seconds of horizon "
                   f"= {size} > {LP_MAX_LEASE_STEPS}: too large for the time-indexed LP", err=True)
        raise typer.Exit(2)
    # CP-SAT runs in this process next: load it first, so that HiGHS runs in the MIP's worker process (the two
    # solvers cannot share one process)
    import optlease.scheduling.cpsat.solve  # noqa: F401
    result = solve_rounds_mip([snap], opts.weights, relax=True, time_limit=time_limit)[0]
    stats = result.stats
    return {"bound": result.objective if result.optimal else result.bound, "status": stats.status,
            "wall_time_s": round(stats.wall_time, 3), "lease_steps": size,
            "model": {"variables": stats.num_variables, "constraints": stats.num_constraints}}


def _figures(summary: dict) -> dict:
    be = summary["best_effort"]
    return {"ar_accepted": summary["ar"]["accepted"], "ar_rejected": summary["ar"]["rejected"],
            "immediate_accepted": summary["immediate"]["accepted"],
            "immediate_rejected": summary["immediate"]["rejected"],
            "be_all_completed_at": be["all_completed_at"], "be_wait_avg": be["wait_avg"],
            "be_wait_max": be["wait_max"], "be_bounded_slowdown_avg": be["bounded_slowdown_avg"],
            "preemptions": summary["preemptions"]}
