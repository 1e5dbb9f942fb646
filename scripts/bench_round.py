#!/usr/bin/env python3
"""Round latency of `mapper: cpsat` (JSON on stdout): a site of N identical nodes, every node busy with a running
best-effort lease of random length, Q best-effort leases queued behind them; one scheduling round (the greedy pass,
then the CP-SAT round over its plan) timed, several seeds per size. Reports p50/p95 of the round's wall time and CPU
time (the greedy pass, snapshot, hint, model, solve, commit; CPU time is what a loaded machine does not inflate) and
of the solver alone, every round's status and gap (of the searched neighbourhood: the tails the hint starts after
the next solved round are held, cpsat.window), and the round objective against greedy's and the completed hint's.

Each round also has the CPU time of the cyclic garbage collections that ran in it (`gc_cpu_s`, part of the phases'
times), and its CPU time by phase (`phases`: the greedy pass, the hint's completion, prepare, the window,
model building, the hint given to the solver, the search, decoding, costing plans, committing; measured by timing
those functions in this process, and the rest of the round as `other`), and the p50 of each phase per size.

Each round has two digests, so that a change meant to be faster only can be shown to decide the same: `plan_sha`, of
the plan the round's solve returned (every lease's outcome, start, nodes, suspension; its objective), and
`table_sha`, of the slot table after the round (every reservation's lease, kind, times and mapping). `--hashes`
prints only those, per size and seed. `--collect-first`: a full garbage collection after the (untimed) setup, so
that a collection of the oldest generation the setup left due does not land in the timed round (in the same
process the rounds of several seeds follow each other, and where such a collection fires depends on them all).

Sizes (default): 144 nodes / 50 queued, 1,000 / 500, 5,000 / 2,000; `--sizes 144x50,1000x500` picks others;
`--quick`: the first size only.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import io
import json
import random
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from optlease.domain.lease import LeaseKind, LeaseRequest  # noqa: E402
from optlease.domain.site import Site  # noqa: E402
from optlease.eventlog import EventLog  # noqa: E402
from optlease.scheduling.leasesched import LeaseScheduler  # noqa: E402
from optlease.scheduling.options import SchedulingOptions  # noqa: E402
from optlease.scheduling.planner import make_planner  # noqa: E402
from optlease.scheduling.policies import Policies  # noqa: E402
from optlease.scheduling.records import Lease  # noqa: E402

SIZES = [(144, 50), (1000, 500), (5000, 2000)]
VM = {"CPU": 100, "Memory": 1024}


def phase_points():
    """(phase, module or class, function name): what a round's CPU time is split by (the functions as the round's
    modules call them)."""
    from ortools.sat.python import cp_model

    from optlease.scheduling import cpsat_round, leasesched
    from optlease.scheduling.cpsat import objective, prepare, solve

    # (the round imports prepare and plan_cost from their modules when it runs: they are timed there)
    return [("greedy_pass", leasesched.LeaseScheduler, "schedule"),
            ("completion", cpsat_round.CpsatRound, "_complete"),
            ("prepare", prepare, "prepare"),
            ("window", solve, "hold_outside"),
            ("build", solve, "build_round"),
            ("hint", solve, "add_hint"),
            ("search", cp_model.CpSolver, "solve"),
            ("decode", solve, "decode"),
            ("costing", solve, "plan_cost"),
            ("costing", objective, "plan_cost"),
            ("costing", solve, "cost_difference"),
            ("commit", cpsat_round.CpsatRound, "_apply")]


@contextlib.contextmanager
def collections(into: dict[str, float]):
    """Add the CPU time of Python's cyclic garbage collections to `into["gc"]` while inside (they run within the
    phases, whose times include them: a collection of the oldest generation walks every object the process holds)."""
    began: list[float] = []

    def timed(phase, info):
        if phase == "start":
            began.append(time.process_time())
        elif began:
            into["gc"] = into.get("gc", 0.0) + time.process_time() - began.pop()

    gc.callbacks.append(timed)
    try:
        yield into
    finally:
        gc.callbacks.remove(timed)


@contextlib.contextmanager
def phases(into: dict[str, float]):
    """Add each phase's CPU time (time.process_time, outermost calls only) to `into` while inside."""
    saved, depth = [], [0]

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            if depth[0]:
                return fn(*args, **kwargs)
            depth[0] += 1
            t = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                into[name] = into.get(name, 0.0) + time.process_time() - t
                depth[0] -= 1
        return wrapper

    for name, owner, attr in phase_points():
        if isinstance(owner, type):   # timed where the class hierarchy defines it
            owner = next(c for c in owner.__mro__ if attr in c.__dict__)
        fn = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        saved.append((owner, attr, fn))
        setattr(owner, attr, timed(name, fn))
    try:
        yield into
    finally:
        for owner, attr, fn in reversed(saved):
            setattr(owner, attr, fn)


def one_round(nodes: int, queued: int, seed: int, opts: SchedulingOptions, collect_first: bool = False) -> dict:
    rng = random.Random(seed)
    site = Site.homogeneous(nodes, VM)
    sched = LeaseScheduler(site, opts, Policies(), EventLog(datetime(2006, 11, 25), "STATUS", io.StringIO()))
    planner = make_planner("cpsat", sched)
    next_id = 1
    for _ in range(nodes):   # every node busy, each lease with 1 VM and its own end
        req = LeaseRequest(next_id, LeaseKind.BEST_EFFORT, 0, rng.randint(10, 240) * 60, (dict(VM),))
        sched.request(Lease(req, {1: sched.table.vector(VM)}), 0)
        next_id += 1
    sched.schedule(0)   # fill the site greedily first, untimed
    for rr in sched.table.starting_at(0):
        sched.start_rr(rr, 0)
    now = 60
    for _ in range(queued):   # the queue: 1 to 8 VMs, 10 minutes to 4 hours
        vms = rng.choice([1, 1, 1, 2, 4, 8])
        req = LeaseRequest(next_id, LeaseKind.BEST_EFFORT, now - rng.randint(0, 3600) if now > 3600 else 0,
                           rng.randint(10, 240) * 60, tuple(dict(VM) for _ in range(vms)))
        sched.request(Lease(req, {v: sched.table.vector(VM) for v in range(1, vms + 1)}), now)
        next_id += 1
    if collect_first:   # the setup's garbage collected first: the round's collections are its own
        gc.collect()
    split: dict[str, float] = {}
    collected: dict[str, float] = {}
    plans = []
    solve = planner._plan   # the round's solve, seen from here to digest its plan (the instance's own attribute)
    planner._plan = lambda *args: plans.append(solve(*args)) or plans[-1]
    with phases(split), collections(collected):
        wall, cpu = time.perf_counter(), time.process_time()
        planner.plan(now)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    split["other"] = cpu - sum(split.values())
    del planner._plan
    record = planner.records[-1]
    s = record.stats
    return {"round_s": wall, "round_cpu_s": cpu, "solver_s": s.wall_time, "status": s.status, "source": s.source,
            "gap": s.gap,
            "objective": s.objective, "greedy_objective": record.greedy_objective,
            "completion_objective": s.hint_objective, "replanned": record.changed,
            "capped": s.capped, "held": s.held, "variables": s.num_variables, "constraints": s.num_constraints,
            "phases_cpu_s": {k: round(v, 4) for k, v in split.items()},
            "gc_cpu_s": round(collected.get("gc", 0.0), 4),
            "plan_sha": plan_digest(plans), "table_sha": table_digest(sched)}


def plan_digest(plans: list) -> str:
    """sha256 (first 16 hex digits) of the plans a round's solves returned: each lease's decisions and the objective."""
    text = repr([(p.stats.objective if p.stats else None, sorted(repr(lp) for lp in p.leases)) for p in plans])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def table_digest(sched: LeaseScheduler) -> str:
    """sha256 (first 16 hex digits) of the slot table: every reservation's lease, kind, state, times and mapping."""
    rows = sorted((rr.lease.id, rr.kind, rr.state, rr.start, rr.end, sorted(rr.mapping.items()),
                   sorted((n, tuple(d)) for n, d in rr.demand.items())) for rr in sched.table.reservations)
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="144 nodes / 50 queued only")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--work-limit", type=float, default=SchedulingOptions.solver_work_limit,
                    help="solver-work-limit: CP-SAT deterministic seconds per search")
    ap.add_argument("--time-limit", type=float, default=SchedulingOptions.solver_time_limit,
                    help="solver-time-limit: the wall-clock safety net per search (s)")
    ap.add_argument("--sizes", help="NODESxQUEUED,... (default: 144x50,1000x500,5000x2000)")
    ap.add_argument("--hashes", action="store_true", help="print only each round's plan and slot-table digests")
    ap.add_argument("--collect-first", action="store_true",
                    help="a full garbage collection before each timed round (after the untimed setup)")
    args = ap.parse_args(argv)
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")] if args.sizes else SIZES
    opts = SchedulingOptions(backfilling="aggressive", mapper="cpsat", solver_work_limit=args.work_limit,
                             solver_time_limit=args.time_limit)
    out = {}
    for nodes, queued in sizes[:1] if args.quick else sizes:
        runs = [one_round(nodes, queued, seed, opts, args.collect_first) for seed in range(args.seeds)]
        if args.hashes:
            out[f"{nodes}-nodes-{queued}-queued"] = [{"seed": seed, "plan_sha": r["plan_sha"],
                                                       "table_sha": r["table_sha"], "objective": r["objective"],
                                                       "status": r["status"]} for seed, r in enumerate(runs)]
            print(f"{nodes}/{queued}: done", file=sys.stderr, flush=True)
            continue
        gaps = [r["gap"] for r in runs if r["gap"] is not None]
        out[f"{nodes}-nodes-{queued}-queued"] = {
            "round_p50_s": pct([r["round_s"] for r in runs], 0.5),
            "round_p95_s": pct([r["round_s"] for r in runs], 0.95),
            "round_cpu_p50_s": pct([r["round_cpu_s"] for r in runs], 0.5),
            "round_cpu_p95_s": pct([r["round_cpu_s"] for r in runs], 0.95),
            "solver_p50_s": pct([r["solver_s"] for r in runs], 0.5),
            "phases_cpu_p50_s": {k: round(pct([r["phases_cpu_s"].get(k, 0.0) for r in runs], 0.5), 4)
                                 for k in runs[0]["phases_cpu_s"]},
            "solver_p95_s": pct([r["solver_s"] for r in runs], 0.95),
            "gc_cpu_p50_s": pct([r["gc_cpu_s"] for r in runs], 0.5),
            "gap_mean": statistics.mean(gaps) if gaps else None,
            "statuses": {st: sum(r["status"] == st for r in runs) for st in sorted({r["status"] for r in runs})},
            "gaps": [r["gap"] for r in runs],
            "plans_of_the_model": sum(r["source"] == "cpsat" and r["objective"] < r["completion_objective"]
                                      for r in runs),
            "capped": sum(r["capped"] for r in runs),
            "objective_vs_greedy_mean": statistics.mean(r["objective"] / r["greedy_objective"] for r in runs
                                                        if r["objective"] and r["greedy_objective"]),
            "never_worse_than_greedy": all(r["source"] == "greedy" or r["objective"] < r["greedy_objective"]
                                           for r in runs),
            "runs": runs,
        }
        print(f"{nodes}/{queued}: done", file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
