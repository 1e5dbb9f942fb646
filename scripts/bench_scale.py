#!/usr/bin/env python3
"""Simulation cost against site size (JSON on stdout): the same Blue jobs on sites of 144, 1,152, 4,608 and 9,216
nodes, with FCFS and with aggressive backfilling.

Each run is a fresh process and reports its wall and CPU time, its scheduling events (the simulator's steps) and
events per second, its peak resident memory, and its cost per event; `cost_per_event_vs_144` is that cost over the
144-node site's cost on the same trace and mode (flat means idle nodes cost nothing), `cpu_cost_per_event_vs_144`
the same from CPU time (other work on the machine inflates it less). `--quick` runs 1000requests.swf with FCFS on
144 and 1,152 nodes.

`--generated` runs instead a workload that `optlease generate-workload` draws at bench time (fixed seed; nothing is
kept): Lublin-Feitelson widths and run times, 10 % ARs and 5 % immediate leases, half of the leases ending before
their requested time, on a site of 9,216 nodes (`--generated-sites` for others, at the same load), with FCFS and
with aggressive backfilling. Its defaults (366 days at load 1.15: about 41,000 leases) are the scale target;
`--horizon-days` shortens it. Each run also says how many VMs its leases have (`vms`): Lublin's widths grow with
the site, and every VM placed is work.

`--read-trace CONF` only reads a configuration's trace (`--repeat` times, 3 by default) and prints the CPU and wall
time of each read and the peak RSS: the reader's own cost (for the year, `gen.conf` of `optlease generate-workload`).

`--hashes` adds to each run the sha256 of its schedule file (the bytes `optlease simulate --schedule-out` writes,
streamed into the hash after the run's times are taken; `hash_wall_time_s` and `peak_rss_with_hash_mb` after it): two
versions of optlease decide alike where the hashes agree.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLUE = ROOT / "instances" / "blue"
SITES = (144, 1_152, 4_608, 9_216)
TRACES = ("30days.swf",)
MODES = ("off", "aggressive")
# the generated workload: what `optlease generate-workload` is given besides its site, load and horizon
GENERATED = ("--ar-share", "0.1", "--immediate-share", "0.05", "--overestimate", "3", "--premature-share", "0.5",
             "--seed", "1")


def schedule_sha256(result, cfg) -> str:
    """The sha256 of the run's schedule file: the bytes write_schedule writes, streamed into the hash (the year's
    document would not fit in memory)."""
    from optlease.formats.schedule_stream import schedule_sha256 as streamed_sha256

    return streamed_sha256(result.site, result.leases, cfg.get("simulation", "starttime"))


def one(trace: str, backfilling: str, nodes: int, setup_only: bool = False, hashes: bool = False) -> dict:
    """One simulation in this process: its figures. `setup_only`: everything but the simulation (what a count of
    the process's instructions subtracts to give the simulation's own)."""
    from optlease.accounting.metrics import run_summary
    from optlease.engine.run import simulate
    from optlease.formats.config import load_config

    cfg = load_config(BLUE / "blue.conf", overrides={"scheduling": {"backfilling": backfilling},
                                                     "simulation": {"resources": f"{nodes} CPU:100 Memory:1024"}})
    if setup_only:
        return {"trace": trace, "backfilling": backfilling, "nodes": nodes, "setup_only": True}
    began, cpu = time.perf_counter(), time.process_time()
    result = simulate(cfg, tracefile=str(BLUE / trace))
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    be = run_summary(result.site, result.leases, result.end_time)["best_effort"]
    # ru_maxrss is in kilobytes on Linux
    out = {"trace": trace, "backfilling": backfilling, "nodes": nodes, "leases": len(result.leases),
           "be_completed": be["completed"], "wait_avg_s": round(be["wait_avg"], 1),
           "events": result.rounds, "wall_time_s": round(wall, 3), "cpu_time_s": round(cpu, 3),
           "events_per_s": round(result.rounds / wall, 1), "us_per_event": round(1e6 * wall / result.rounds, 1),
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if hashes:
        began = time.perf_counter()
        out["schedule_sha256"] = schedule_sha256(result, cfg)
        out["hash_wall_time_s"] = round(time.perf_counter() - began, 3)
        out["peak_rss_with_hash_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def one_generated(conf: str, backfilling: str, hashes: bool = False) -> dict:
    """One simulation of a generated workload's configuration in this process: its figures."""
    from optlease.accounting.metrics import run_summary
    from optlease.engine.run import simulate
    from optlease.formats.config import load_config

    cfg = load_config(Path(conf), overrides={"scheduling": {"backfilling": backfilling}})
    began, cpu = time.perf_counter(), time.process_time()
    result = simulate(cfg)
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    summary = run_summary(result.site, result.leases, result.end_time)
    out = {"backfilling": backfilling, "nodes": len(result.site.node_ids), "leases": len(result.leases),
            "vms": sum(lease.numnodes for lease in result.leases),
            "ar_accepted": summary["ar"]["accepted"], "ar_rejected": summary["ar"]["rejected"],
            "immediate_accepted": summary["immediate"]["accepted"],
            "immediate_rejected": summary["immediate"]["rejected"],
            "be_completed": summary["best_effort"]["completed"],
            "wait_avg_s": round(summary["best_effort"]["wait_avg"], 1),
            "events": result.rounds, "wall_time_s": round(wall, 3), "cpu_time_s": round(cpu, 3),
            "events_per_s": round(result.rounds / wall, 1), "us_per_event": round(1e6 * wall / result.rounds, 1),
            "us_per_vm": round(1e6 * wall / max(1, sum(lease.numnodes for lease in result.leases)), 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if hashes:
        began = time.perf_counter()
        out["schedule_sha256"] = schedule_sha256(result, cfg)
        out["hash_wall_time_s"] = round(time.perf_counter() - began, 3)
        out["peak_rss_with_hash_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def read_trace(conf: str, repeat: int) -> dict:
    """Reading a configuration's trace alone (`engine.run.load_workload`: the reader its format names), `repeat`
    times in this process: the CPU and wall time of each read, and the peak RSS."""
    from optlease.engine.run import load_workload
    from optlease.formats.config import load_config

    cfg = load_config(Path(conf))
    cpu, wall = [], []
    for _ in range(repeat):
        began, used = time.perf_counter(), time.process_time()
        name, workload = load_workload(cfg)
        cpu.append(round(time.process_time() - used, 3))
        wall.append(round(time.perf_counter() - began, 3))
    return {"trace": Path(name).name, "leases": len(workload.requests), "cpu_time_s": cpu, "wall_time_s": wall,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def run(trace: str, backfilling: str, nodes: int, hashes: bool = False) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", trace, backfilling, str(nodes),
                          *(["--hashes"] if hashes else [])],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout)


def generated(sites: list[int], load: float, days: int, hashes: bool = False) -> list[dict]:
    """The generated workload on each site size, with FCFS and aggressive backfilling, each run a fresh process."""
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for nodes in sites:
            lwf, conf = Path(tmp) / f"gen-{nodes}.lwf", Path(tmp) / f"gen-{nodes}.conf"
            subprocess.run([sys.executable, "-m", "optlease.cli.main", "generate-workload", "-o", str(lwf),
                            "--conf", str(conf), "--nodes", f"{nodes} CPU:100 Memory:1024", "--load", str(load),
                            "--horizon", f"{days}:00:00:00", *GENERATED], capture_output=True, text=True,
                           check=True, cwd=ROOT)
            for mode in MODES:
                out = subprocess.run([sys.executable, __file__, "--one-generated", str(conf), mode,
                                      *(["--hashes"] if hashes else [])],
                                     capture_output=True, text=True, check=True, cwd=ROOT)
                runs.append({"workload": f"generated {days} days at load {load}", **json.loads(out.stdout)})
    for r in runs:
        base = next(b for b in runs if b["backfilling"] == r["backfilling"])
        r["cost_per_event_vs_smallest"] = round(r["us_per_event"] / base["us_per_event"], 2)
        r["cpu_cost_per_event_vs_smallest"] = round(r["cpu_time_s"] / r["events"]
                                                    / (base["cpu_time_s"] / base["events"]), 2)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1000requests.swf with FCFS on 144 and 1,152 nodes")
    parser.add_argument("--generated", action="store_true", help="a generated workload instead of the Blue traces")
    parser.add_argument("--generated-sites", default="9216", help="site sizes for --generated, e.g. 144,9216")
    parser.add_argument("--horizon-days", type=int, default=366, help="arrivals of --generated over this many days")
    parser.add_argument("--load", type=float, default=1.15, help="offered load of --generated")
    parser.add_argument("--one", nargs=3, metavar=("TRACE", "BACKFILLING", "NODES"), help=argparse.SUPPRESS)
    parser.add_argument("--one-generated", nargs=2, metavar=("CONF", "BACKFILLING"), help=argparse.SUPPRESS)
    parser.add_argument("--setup-only", action="store_true",
                        help="with --one: everything but the simulation (to subtract from an instruction count)")
    parser.add_argument("--hashes", action="store_true", help="add each run's schedule file sha256")
    parser.add_argument("--read-trace", metavar="CONF", help="only read the configuration's trace (--repeat times)")
    parser.add_argument("--repeat", type=int, default=3, help="reads of --read-trace")
    args = parser.parse_args()
    if args.read_trace:
        print(json.dumps(read_trace(args.read_trace, args.repeat)))
        return
    if args.one:
        trace, backfilling, nodes = args.one
        print(json.dumps(one(trace, backfilling, int(nodes), args.setup_only, args.hashes)))
        return
    if args.one_generated:
        print(json.dumps(one_generated(*args.one_generated, args.hashes)))
        return
    if args.generated:
        sites = sorted(int(n) for n in args.generated_sites.split(","))
        json.dump({"runs": generated(sites, args.load, args.horizon_days, args.hashes)}, sys.stdout, indent=1)
        print()
        return
    plan = [("1000requests.swf", "off", n) for n in SITES[:2]] if args.quick else \
        [(t, m, n) for t in TRACES for m in MODES for n in SITES]
    runs = [run(*spec, hashes=args.hashes) for spec in plan]
    for r in runs:
        base = next(b for b in runs if b["trace"] == r["trace"] and b["backfilling"] == r["backfilling"]
                    and b["nodes"] == SITES[0])
        r["cost_per_event_vs_144"] = round(r["us_per_event"] / base["us_per_event"], 2)
        # the same from CPU time, which other work on the machine inflates less than wall time
        r["cpu_cost_per_event_vs_144"] = round(r["cpu_time_s"] / r["events"] / (base["cpu_time_s"] / base["events"]), 2)
    json.dump({"runs": runs}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
