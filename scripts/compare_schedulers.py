#!/usr/bin/env python3
"""Greedy (each backfilling mode) against cpsat rounds against the offline optimum on one workload: JSON on stdout, a
Markdown table on stderr (or in --markdown FILE).

Default workload: the Blue Horizon 30days.swf with the work_10-dur_2h-size_1small AR injection on the Blue site
(instances/blue/blue.conf: 144 nodes, AR preemption, suspension all). `--limit-days N` keeps the requests that arrive
in the first N days (a quick run), `--from-days N` those from day N on, moved to begin at 0 on an empty site (a cut of
the middle of a trace); `--modes` picks which schedulers to run, and `--add-mode NAME=BASE:KEY=VALUE,...` makes one
of another's options with some changed. `--leases-out DIR` writes each mode's best-effort leases, one CSV row each,
and its log at INFO, to compare them lease by lease. The greedy modes book what leases ask
for, as Haizea does; cpsat books run-time estimates (`runtime-estimate: user-history`); `--runtime-estimate` sets
one for every mode. `--images vm+reuse` (or `vm+noreuse`) runs the workload in that HPDC'08 VM profile with image
transfers (scripts/bench_simulate.py's, every request given one of 37 images of 4,096 MB by scripts/make_imagefile.py
with seed 1) and adds each mode's transfer volume and cache hit rate; the checker then checks the link and caches.
"""
from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from optlease.accounting.metrics import run_summary  # noqa: E402
from optlease.accounting.rounds import admission_summary  # noqa: E402
from optlease.checker import check_schedule  # noqa: E402
from optlease.errors import InputError  # noqa: E402
from optlease.eventlog import EventLog  # noqa: E402
from optlease.engine.run import apply_trace_options, load_workload, site_of  # noqa: E402
from optlease.engine.simulator import Simulator  # noqa: E402
from optlease.formats.config import SCHEMA, load_config  # noqa: E402
from optlease.formats.schedule_json import schedule_document  # noqa: E402
from optlease.scheduling.options import SchedulingOptions  # noqa: E402
from optlease.scheduling.policies import Policies  # noqa: E402

BLUE = ROOT / "instances" / "blue"
MODES = {   # name -> [scheduling] overrides
    "greedy-off": {"backfilling": "off"},
    "greedy-aggressive": {"backfilling": "aggressive"},
    "greedy-conservative": {"backfilling": "conservative"},
    "greedy-intermediate-4": {"backfilling": "intermediate", "backfilling-reservations": "4"},
    # optlease's scheduler: rounds over bookings of run-time estimates (models/cpsat-round.md)
    "cpsat": {"backfilling": "aggressive", "mapper": "cpsat", "runtime-estimate": "user-history"},
}
ESTIMATE = SCHEMA["scheduling"]["runtime-estimate"]   # its choices and Haizea's default, `requested`


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def setup(conf: Path, trace: Path, injection: Path | None, limit_days: float | None, sched: dict,
          from_days: float = 0):
    tracefile = {"tracefile": str(trace), **({"injectionfile": str(injection)} if injection else {})}
    cfg = load_config(conf, overrides={"scheduling": sched, "tracefile": tracefile})
    opts = SchedulingOptions.from_config(cfg)
    _, workload = load_workload(cfg)
    requests = apply_trace_options(cfg, workload.requests)
    if limit_days is not None:
        requests = [r for r in requests if r.arrival < limit_days * 86400]
    return cfg, opts, site_of(cfg, workload), cut_from(requests, from_days)


def cut_from(requests: list, days: float) -> list:
    """The requests arriving from `days` on, moved so that the first day kept begins at 0 (an empty site then)."""
    if not days:
        return requests
    shift = int(days * 86400)
    return [replace(r, arrival=r.arrival - shift, start=None if r.start is None else r.start - shift)
            for r in requests if r.arrival >= shift]


def simulate(cfg, opts, site, requests, log=None):
    sim = Simulator(site, requests, opts, Policies(opts.policy_admission, opts.policy_preemption,
                                                   opts.policy_host_selection),
                    EventLog(cfg.get("simulation", "starttime"), "STATUS" if log is None else "INFO",
                             io.StringIO() if log is None else log))
    wall, cpu = time.perf_counter(), time.process_time()
    result = sim.run()
    # the CPU time too: what a loaded machine does not inflate
    return sim, result, (time.perf_counter() - wall, time.process_time() - cpu)


def figures(cfg, site, leases, end_time: int, requests: list, wall: float, images=None) -> dict:
    summary = run_summary(site, leases, end_time)
    violations = check_schedule(schedule_document(site, leases, cfg.get("simulation", "starttime"), images))
    be, ar = summary["best_effort"], summary["ar"]
    return {
        "requests": len(requests),
        "ar_accepted": ar["accepted"], "ar_total": ar["accepted"] + ar["rejected"],
        "ar_acceptance": ar["accepted"] / (ar["accepted"] + ar["rejected"]) if ar["accepted"] + ar["rejected"]
        else None,
        "be_completed": be["completed"], "be_all_completed_at_s": be["all_completed_at"],
        "be_wait_avg_s": be["wait_avg"], "be_wait_max_s": be["wait_max"],
        "be_bounded_slowdown_avg": be["bounded_slowdown_avg"],
        "utilization": summary["cpu_utilization"],
        "preemptions": summary["preemptions"], "migrations": summary["migrations"],
        "estimate_overruns": sum(lease.overruns for lease in leases),
        "wall_time_s": round(wall, 2), "checker_violations": len(violations),
    }


def run_offline(conf: Path, trace: Path, injection: Path | None, limit_days: float | None, solver: dict,
                time_limit: float, from_days: float = 0) -> dict:
    """The clairvoyant offline optimum (optlease optimize) of the same workload, the greedy-aggressive run as hint."""
    from optlease.scheduling.cpsat.offline import greedy_hint, optimize

    cfg, opts, site, requests = setup(conf, trace, injection, limit_days, MODES["greedy-aggressive"], from_days)
    _, greedy, _ = simulate(cfg, opts, site, requests)
    wall = time.perf_counter()
    res = optimize(site, requests, opts, time_limit, hint=greedy_hint(greedy.leases))
    wall = time.perf_counter() - wall
    end = max((lease.end or 0 for lease in res.leases), default=0)
    out = figures(cfg, res.site, res.leases, end, requests, wall)
    s = res.stats
    out.update(rounds=1, round_time_p50_s=s.wall_time, round_time_p95_s=s.wall_time, gap_mean=s.gap,
               solved_rounds=1, objective=s.objective, best_bound=s.best_bound, status=s.status,
               formulation=res.formulation, deferred=len(res.deferred))
    return out


def run(conf: Path, trace: Path, injection: Path | None, limit_days: float | None, overrides: dict,
        solver: dict, leases_out: Path | None = None, from_days: float = 0) -> dict:
    sched = {**overrides, **({k: str(v) for k, v in solver.items()} if overrides.get("mapper") == "cpsat" else {})}
    cfg, opts, site, requests = setup(conf, trace, injection, limit_days, sched, from_days)
    if leases_out is None:
        sim, result, wall = simulate(cfg, opts, site, requests)
    else:   # and the run's log at INFO beside it: what each round did to each lease
        leases_out.parent.mkdir(parents=True, exist_ok=True)
        with leases_out.with_suffix(".log").open("w") as log:
            sim, result, wall = simulate(cfg, opts, site, requests, log)
        leases_out.write_text(lease_rows(result.leases))
    wall, cpu = wall
    out = figures(cfg, result.site, result.leases, result.end_time, requests, wall, result.images)
    out["cpu_time_s"] = round(cpu, 2)
    if result.images is not None:
        out["images"] = result.images.figures()
    out["rounds"] = result.rounds
    hook = sim.stepper.planner
    if hook.name == "greedy":
        out.update(round_time_p50_s=None, round_time_p95_s=None, gap_mean=None, solved_rounds=0, replanned_rounds=0)
    else:
        solved = [r.stats for r in hook.records if r.stats.num_variables > 0]
        times = [s.wall_time for s in solved]
        gaps = [s.gap for s in solved if s.gap is not None]
        statuses: dict[str, int] = {}
        for s in solved:
            key = s.status.split(" ")[0]
            statuses[key] = statuses.get(key, 0) + 1
        out.update(round_time_p50_s=percentile(times, 0.5), round_time_p95_s=percentile(times, 0.95),
                   gap_mean=statistics.mean(gaps) if gaps else None, solved_rounds=len(solved),
                   replanned_rounds=sum(1 for r in hook.records if r.changed),
                   replanned_leases=sum(r.changed for r in hook.records), solver_status=statuses,
                   capped_rounds=sum(1 for s in solved if s.capped),
                   admissions=admission_summary(hook.admissions))
    return out


def added_mode(spec: str, modes: dict[str, dict]) -> tuple[str, dict | None]:
    """`NAME=BASE[:KEY=VALUE,...]`: the mode NAME, BASE's options with those changed (None: not of that form)."""
    name, _, rest = spec.partition("=")
    base, _, changes = rest.partition(":")
    if not name or base not in modes:
        return name, None
    mode = dict(modes[base])
    for change in filter(None, changes.split(",")):
        key, eq, value = change.partition("=")
        if not eq or not key:
            return name, None
        mode[key.strip()] = value.strip()
    return name, mode


def lease_rows(leases) -> str:
    """One CSV row per best-effort lease: when it arrived, asked, started and ended, and its bounded slowdown."""
    from optlease.accounting.metrics import bounded_slowdown
    from optlease.domain.lease import LeaseKind, LeaseState

    out = ["lease_id,arrival,numnodes,requested,real,first_start,end,wait,bounded_slowdown,preemptions"]
    for lease in sorted(leases, key=lambda lease: lease.id):
        if lease.kind is not LeaseKind.BEST_EFFORT or lease.state is not LeaseState.DONE:
            continue
        out.append(f"{lease.id},{lease.req.arrival},{lease.numnodes},{lease.req.duration},{lease.req.actual_duration},"
                   f"{lease.first_start},"
                   f"{lease.end},{lease.first_start - lease.req.arrival},{bounded_slowdown(lease):.6g},"
                   f"{lease.preemptions}")
    return "\n".join(out) + "\n"


COLUMNS = [("AR accepted", lambda r: f"{round(r['ar_accepted'], 1):g}/{r['ar_total']}"),
           ("BE all done (s)", lambda r: _n(r["be_all_completed_at_s"])),
           ("BE wait avg (s)", lambda r: _n(r["be_wait_avg_s"])),
           ("BE wait max (s)", lambda r: _n(r["be_wait_max_s"])),
           ("bounded slowdown", lambda r: _n(r["be_bounded_slowdown_avg"], 2)),
           ("utilization", lambda r: _n(r["utilization"], 3)),
           ("preemptions", lambda r: _n(r["preemptions"])), ("migrations", lambda r: _n(r["migrations"])),
           ("estimate overruns", lambda r: _n(r["estimate_overruns"])),
           ("round p50 (s)", lambda r: _n(r["round_time_p50_s"], 3)),
           ("round p95 (s)", lambda r: _n(r["round_time_p95_s"], 3)),
           ("mean gap", lambda r: _n(r["gap_mean"], 3)), ("wall (s)", lambda r: _n(r["wall_time_s"], 1)),
           ("CPU (s)", lambda r: _n(r.get("cpu_time_s"), 1)),
           ("checker", lambda r: "ok" if r["checker_violations"] == 0 else f"{r['checker_violations']} violations")]


def _n(value, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}" if digits else f"{round(value):,}"


def markdown(results: dict[str, dict]) -> str:
    lines = ["| scheduler | " + " | ".join(name for name, _ in COLUMNS) + " |",
             "|---|" + "---|" * len(COLUMNS)]
    for mode, r in results.items():
        lines.append(f"| {mode} | " + " | ".join(cell(r) for _, cell in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=BLUE / "30days.swf")
    ap.add_argument("--injection", type=Path, default=BLUE / "injected" / "work_10-dur_2h-size_1small.lwf",
                    help="AR injection file ('none' for the trace alone)")
    ap.add_argument("--conf", type=Path, default=BLUE / "blue.conf", help="site and scheduling options")
    ap.add_argument("--limit-days", type=float, default=None, help="keep requests arriving in the first N days")
    ap.add_argument("--from-days", type=float, default=0.0,
                    help="keep requests arriving from day N on, moved to begin at 0 on an empty site (a cut of the "
                    "middle of a trace; users' run-time histories begin there too)")
    ap.add_argument("--modes", default=",".join([*MODES, "offline"]),
                    help=f"comma-separated, of: {', '.join(MODES)}, offline")
    ap.add_argument("--offline-time-limit", type=float, default=120.0,
                    help="offline: solver seconds for the whole workload")
    ap.add_argument("--work-limit", type=float, default=SchedulingOptions.solver_work_limit,
                    help="cpsat: solver-work-limit, CP-SAT deterministic seconds per search")
    ap.add_argument("--time-limit", type=float, default=SchedulingOptions.solver_time_limit,
                    help="cpsat: solver-time-limit, the wall-clock safety net per search (s)")
    ap.add_argument("--runtime-estimate", default=None, help="every online mode: how long best-effort bookings "
                    "hold, 'requested' or 'user-history' (the user's last two runs; models/cpsat-round.md); default: "
                    "greedy modes book what leases ask for, as Haizea, and cpsat its estimates")
    ap.add_argument("--markdown", type=Path, default=None, help="write the Markdown table here (default: stderr)")
    ap.add_argument("--add-mode", action="append", default=[], metavar="NAME=BASE[:KEY=VALUE,...]",
                    help="a mode of its own: BASE's [scheduling] options with these changed, e.g. "
                    "cpsat-cons=cpsat:backfilling=conservative,solver-suspend=no (then name it in --modes)")
    ap.add_argument("--leases-out", type=Path, default=None,
                    help="write each mode's best-effort leases, one CSV row each, in this folder (MODE.csv), and "
                    "its log at INFO (MODE.log)")
    ap.add_argument("--images", default=None, choices=["vm+reuse", "vm+noreuse"],
                    help="run in this HPDC'08 VM profile with image transfers (replaces --conf)")
    args = ap.parse_args(argv)
    if args.images is not None:
        with tempfile.TemporaryDirectory() as tmp:
            args.conf = image_profile(Path(tmp), args.images, args.trace, args.injection)
            return _main(args)
    return _main(args)


def image_profile(folder: Path, profile: str, trace: Path, injection: Path) -> Path:
    """The HPDC'08 VM profile's configuration with image transfers (scripts/bench_simulate.py), in `folder`."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_simulate import IMAGE_RUNS, vm_profile
    from make_imagefile import imagefile

    images = folder / "37_uniform.images"
    images.write_text(imagefile(37, 4096, 10000, seed=1))
    conf = folder / "images.conf"
    conf.write_text(vm_profile(IMAGE_RUNS[f"30days-work10-{profile}"], trace.resolve(), injection.resolve(), images))
    return conf


def _main(args) -> int:
    # paths on the command line are the caller's (the configuration resolves its own against its folder)
    injection = None if str(args.injection) == "none" else args.injection.resolve()
    args.trace, args.conf = args.trace.resolve(), args.conf.resolve()
    solver = {"solver-work-limit": args.work_limit, "solver-time-limit": args.time_limit}
    if args.runtime_estimate is not None and args.runtime_estimate not in ESTIMATE.choices:
        print(f"compare_schedulers: --runtime-estimate {args.runtime_estimate!r}: expected one of "
              f"{', '.join(ESTIMATE.choices)}", file=sys.stderr)
        return 2
    estimate = {"runtime-estimate": args.runtime_estimate} if args.runtime_estimate else {}
    modes = {name: {**sched, **estimate} for name, sched in MODES.items()}
    for spec in args.add_mode:
        name, mode = added_mode(spec, modes)
        if mode is None:
            print(f"compare_schedulers: --add-mode {spec!r}: expected NAME=BASE[:KEY=VALUE,...] with BASE one of "
                  f"{', '.join(modes)}", file=sys.stderr)
            return 2
        modes[name] = mode
    results = {}
    for mode in args.modes.split(","):
        if mode not in modes and mode != "offline":
            print(f"compare_schedulers: unknown mode {mode!r} (known: {', '.join(modes)}, offline)", file=sys.stderr)
            return 2
        if mode == "offline":
            results[mode] = run_offline(args.conf, args.trace, injection, args.limit_days, solver,
                                        args.offline_time_limit, args.from_days)
        else:
            results[mode] = run(args.conf, args.trace, injection, args.limit_days, modes[mode], solver,
                                args.leases_out / f"{mode}.csv" if args.leases_out else None, args.from_days)
        print(f"{mode}: done in {results[mode]['wall_time_s']} s", file=sys.stderr)
    doc = {"workload": {"trace": args.trace.name, "injection": injection.name if injection else None,
                        "limit_days": args.limit_days, "from_days": args.from_days},
           "runtime_estimate": {mode: modes[mode].get("runtime-estimate", ESTIMATE.default) for mode in modes},
           "solver": solver, "results": results}
    print(json.dumps(doc, indent=1))
    table = markdown(results)
    if args.markdown:
        args.markdown.write_text(table)
    else:
        print(table, file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except InputError as exc:
        print(f"compare_schedulers: {exc}", file=sys.stderr)
        sys.exit(2)
