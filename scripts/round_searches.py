#!/usr/bin/env python3
"""Where a `mapper: cpsat` run's searches find their plans (JSON on stdout): a configuration simulated in this
process, every CP-SAT search of its rounds recorded (the model's size, the solver's status, its deterministic work
and CPU time, and each improving plan the search found, with when), then summed by the model's size in variables.

For each size it reports the searches, those the work limit stopped, their CPU and deterministic seconds, and those
that ended with a plan better than the first they had (the completed hint); and, for each other work limit asked for
(`--limits`, in deterministic seconds, or `--scaled V`: the work limit times min(1, V / variables)), how many of
those searches would have ended with a worse plan and what share of their improvement over the hint they would
have kept. That is what a smaller, or size-scaled, limit would cost each round by itself; a run under that limit
makes other rounds from then on, so its schedule is measured by running it (models/cpsat-round.md).

When a plan was found is read from the wall clock (CP-SAT 9.15's solution callback gives no deterministic time) and
mapped onto the search's deterministic work in proportion, which is close within one search of one worker. The
callback changes no decision: the schedules are the same as without it. A plan is taken as found no later than the
search's end, so a limit at or above a search's whole work keeps all of it.

    python scripts/round_searches.py CONF [--limits 0.005,0.01,0.02] [--scaled 500,1000] [--records FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUCKETS = (0, 100, 300, 1000, 2000, 5000)   # model sizes, in variables


def record_searches(records: list[dict]) -> None:
    """Wrap CP-SAT's solve and the round's solve_round so that each search appends one record to `records`."""
    from ortools.sat.python import cp_model

    import optlease.scheduling.cpsat.solve as solve_module

    class Plans(cp_model.CpSolverSolutionCallback):
        def __init__(self) -> None:
            super().__init__()
            self.found: list[tuple[float, float]] = []   # (wall time, objective) of each improving plan

        def on_solution_callback(self) -> None:
            self.found.append((self.wall_time, self.objective_value))

    solve, solve_round = cp_model.CpSolver.solve, solve_module.solve_round
    search: dict = {}

    def timed_solve(self, model, callback=None):
        plans, cpu = Plans(), time.process_time()
        status = solve(self, model, plans)
        wall, work = self.wall_time, self.response_proto.deterministic_time
        search.update(cpu=time.process_time() - cpu, work=work, limit=self.parameters.max_deterministic_time,
                      plans=[(min(work, at / wall * work) if wall > 0 else 0.0, value) for at, value in plans.found])
        return status

    def recorded_round(snap, options=solve_module.SolveOptions(), hint=None, data=None):
        search.clear()
        plan = solve_round(snap, options, hint, data)
        if search:
            stats = plan.stats
            records.append(dict(now=snap.now, variables=stats.num_variables, held=stats.held, status=stats.status,
                                beat_hint=stats.source == "cpsat" and stats.objective < stats.hint_objective,
                                **search))
        return plan

    cp_model.CpSolver.solve = timed_solve
    solve_module.solve_round = recorded_round


def bucket(variables: int) -> str:
    low = max(b for b in BUCKETS if variables >= b)
    high = next((b for b in BUCKETS if b > low), None)
    return f"{low}-{high - 1}" if high else f"{low}+"


def kept_at(record: dict, limit: float) -> tuple[bool, float, float]:
    """A search stopped at `limit` deterministic seconds: (ends worse, improvement over its first plan it keeps,
    that at its own limit)."""
    plans = record["plans"]
    first, final = plans[0][1], plans[-1][1]
    if limit >= record["limit"]:   # the same search, or a longer one: what it found at its own limit at least
        return False, first - final, first - final
    within = [value for at, value in plans if at <= limit]
    value = within[-1] if within else first
    return value > final, first - value, first - final


def summary(records: list[dict], limits: list[tuple[str, object]]) -> dict:
    by_size: dict[str, dict] = {}
    for record in records:
        row = by_size.setdefault(bucket(record["variables"]), dict(
            searches=0, stopped_by_limit=0, cpu_s=0.0, work_s=0.0, beat_hint=0,
            **{name: dict(worse=0, kept=0.0, improvement=0.0, cpu_s=0.0) for name, _ in limits}))
        row["searches"] += 1
        row["stopped_by_limit"] += record["work"] >= 0.99 * record["limit"]
        row["cpu_s"] += record["cpu"]
        row["work_s"] += record["work"]
        row["beat_hint"] += record["beat_hint"]
        if not record["plans"]:
            continue
        for name, limit_of in limits:
            limit = limit_of(record["variables"], record["limit"])
            worse, kept, improvement = kept_at(record, limit)
            cell = row[name]
            cell["worse"] += worse
            cell["kept"] += kept
            cell["improvement"] += improvement
            # a search's CPU is about in proportion to its deterministic work (models/cpsat-round.md)
            cell["cpu_s"] += record["cpu"] * min(1.0, limit / record["work"]) if record["work"] > 0 else 0.0
    for row in by_size.values():
        row["cpu_s"], row["work_s"] = round(row["cpu_s"], 3), round(row["work_s"], 4)
        for name, _ in limits:
            cell = row[name]
            cell["kept_share"] = round(cell["kept"] / cell["improvement"], 3) if cell["improvement"] else 1.0
            cell["cpu_s"] = round(cell["cpu_s"], 3)
            del cell["kept"], cell["improvement"]
    return dict(sorted(by_size.items(), key=lambda item: int(item[0].split("-")[0].rstrip("+"))))


def positives(text: str) -> list[float]:
    """A comma-separated list of positive numbers (empty: none), for argparse: a bad one is a one-line usage error."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if any(not value > 0 or value == float("inf") for value in values):
        raise argparse.ArgumentTypeError(f"every value must be a positive number: {text!r}")
    return values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("conf", type=Path, help="a configuration with `mapper: cpsat`")
    ap.add_argument("--limits", type=positives, default="0.005,0.01,0.02",
                    help="other work limits (deterministic s), comma-separated")
    ap.add_argument("--scaled", type=positives, default="500,1000",
                    help="size-scaled limits: V, comma-separated, for the configuration's limit times "
                         "min(1, V / variables)")
    ap.add_argument("--records", type=Path, help="also write every search's record here (JSON lines)")
    args = ap.parse_args()

    from optlease.engine.run import simulate
    from optlease.errors import InputError
    from optlease.formats.config import load_config

    limits = [(f"limit {w:g}", lambda v, own, w=w: w) for w in args.limits]
    limits += [(f"scaled {s:g}", lambda v, own, s=s: own * min(1.0, s / v)) for s in args.scaled]
    records: list[dict] = []
    record_searches(records)
    try:
        cfg = load_config(args.conf)
        cpu = time.process_time()
        result = simulate(cfg, out=None)
    except (InputError, OSError) as exc:
        sys.exit(f"round_searches: {exc}")
    if result.round_records is None:
        sys.exit(f"round_searches: {args.conf}: the run has no CP-SAT rounds (mapper is not cpsat)")
    if args.records:
        args.records.write_text("".join(json.dumps(record) + "\n" for record in records))
    json.dump(dict(conf=str(args.conf), cpu_s=round(time.process_time() - cpu, 2), searches=len(records),
                   by_size=summary(records, limits)), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
