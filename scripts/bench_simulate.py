#!/usr/bin/env python3
"""Simulation speed on the Blue Horizon traces (JSON on stdout).

Runs, each in a fresh process: 30days.swf with aggressive backfilling, 60days.swf likewise (and the 60/30 ratio),
and 15days.swf with the 30 % AR injection and suspension on. `--quick` runs 1000requests.swf only.
`wall_time_s` is the simulation's own; `command_wall_s` is the whole `optlease simulate` command (start-up, reading
the trace, the summary), and `command_cpu_s` its CPU time (user + system), which other work on the machine
inflates less than wall time.
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

RUNS = {
    "30days-aggressive": ("30days.swf", None),
    "60days-aggressive": ("60days.swf", None),
    "15days-ar30-suspension": ("15days.swf", "injected/15days-work_30-dur_2h-size_1small.lwf"),
}
QUICK = {"1000requests-aggressive": ("1000requests.swf", None)}


def run(trace: str, injection: str | None) -> dict:
    conf = (BLUE / "blue.conf").read_text().replace("tracefile: 1000requests.swf", f"tracefile: {BLUE / trace}")
    if injection:
        conf += f"injectionfile: {BLUE / injection}\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.conf"
        path.write_text(conf)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "optlease.cli.main", "simulate", "-c", str(path), "-q",
                              "--summary-out", "-"], capture_output=True, text=True, check=True, cwd=ROOT)
        command_wall = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.loads(out.stdout)
    be = summary["best_effort"]
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"trace": trace, "injection": injection, "wall_time_s": summary["wall_time_s"],
            "command_wall_s": round(command_wall, 3), "command_cpu_s": round(cpu, 3),
            "leases": summary["leases"], "ar_accepted": summary["ar"]["accepted"],
            "ar_rejected": summary["ar"]["rejected"], "be_completed": be["completed"],
            "wait_avg_s": round(be["wait_avg"], 1), "bounded_slowdown_avg": round(be["bounded_slowdown_avg"], 2),
            "all_be_completed_at_s": be["all_completed_at"], "suspensions": summary["suspensions"],
            "preemptions": summary["preemptions"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1000requests.swf only")
    args = parser.parse_args()
    results = {name: run(*spec) for name, spec in (QUICK if args.quick else RUNS).items()}
    if "60days-aggressive" in results:
        results["ratio_60_to_30"] = round(results["60days-aggressive"]["wall_time_s"]
                                          / results["30days-aggressive"]["wall_time_s"], 2)
    json.dump(results, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
