#!/usr/bin/env python3
"""Simulation cost against site size (JSON on stdout): the same Blue jobs on sites of 144, 1,152, 4,608 and 9,216
nodes, with FCFS and with aggressive backfilling.

Each run is a fresh process and reports its wall time, its scheduling events (the simulator's steps) and events
per second, its peak resident memory, and its cost per event; `cost_per_event_vs_144` is that cost over the
144-node site's cost on the same trace and mode (flat means idle nodes cost nothing). `--quick` runs
1000requests.swf with FCFS on 144 and 1,152 nodes.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLUE = ROOT / "instances" / "blue"
SITES = (144, 1_152, 4_608, 9_216)
TRACES = ("30days.swf",)
MODES = ("off", "aggressive")


def one(trace: str, backfilling: str, nodes: int) -> dict:
    """One simulation in this process: its figures."""
    from optlease.accounting.metrics import run_summary
    from optlease.engine.run import simulate
    from optlease.formats.config import load_config

    cfg = load_config(BLUE / "blue.conf", overrides={"scheduling": {"backfilling": backfilling},
                                                     "simulation": {"resources": f"{nodes} CPU:100 Memory:1024"}})
    began = time.perf_counter()
    result = simulate(cfg, tracefile=str(BLUE / trace))
    wall = time.perf_counter() - began
    be = run_summary(result.site, result.leases, result.end_time)["best_effort"]
    # ru_maxrss is in kilobytes on Linux
    return {"trace": trace, "backfilling": backfilling, "nodes": nodes, "leases": len(result.leases),
            "be_completed": be["completed"], "wait_avg_s": round(be["wait_avg"], 1),
            "events": result.rounds, "wall_time_s": round(wall, 3),
            "events_per_s": round(result.rounds / wall, 1), "us_per_event": round(1e6 * wall / result.rounds, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def run(trace: str, backfilling: str, nodes: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", trace, backfilling, str(nodes)],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1000requests.swf with FCFS on 144 and 1,152 nodes")
    parser.add_argument("--one", nargs=3, metavar=("TRACE", "BACKFILLING", "NODES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        trace, backfilling, nodes = args.one
        print(json.dumps(one(trace, backfilling, int(nodes))))
        return
    plan = [("1000requests.swf", "off", n) for n in SITES[:2]] if args.quick else \
        [(t, m, n) for t in TRACES for m in MODES for n in SITES]
    runs = [run(*spec) for spec in plan]
    for r in runs:
        base = next(b for b in runs if b["trace"] == r["trace"] and b["backfilling"] == r["backfilling"]
                    and b["nodes"] == SITES[0])
        r["cost_per_event_vs_144"] = round(r["us_per_event"] / base["us_per_event"], 2)
    json.dump({"runs": runs}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
