#!/usr/bin/env python3
"""What reading a schedule file costs (JSON on stdout): `optlease check`'s checker read as a stream
(`checker_stream.check_file`) and the report's Gantt chart of it (`gantt_stream.gantt_file_svg`), each in a fresh
process, with its wall and CPU time and its peak resident memory.

    python scripts/bench_check.py SCHEDULE [--what check chart] [--whole]

`--whole` measures instead the readers of the whole document (`load_schedule`, then `check_schedule` or
`gantt_svg`), as `optlease check` and `optlease report` read a schedule before: for a schedule that fits in memory.
The year's schedule (`optlease simulate -c gen.conf --schedule-out year.json` with `backfilling: off`, 25 million
VMs, 2.1 GB) is read by the stream only.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path


def one(path: Path, what: str, whole: bool) -> dict:
    """Runs in this process: one reading, its figures."""
    wall, cpu = time.perf_counter(), time.process_time()
    out: dict = {"schedule": path.name, "bytes": path.stat().st_size, "what": what,
                 "reader": "whole document" if whole else "stream"}
    if what == "check":
        if whole:
            from optlease.checker import check_schedule
            from optlease.formats.schedule_json import load_schedule
            violations = check_schedule(load_schedule(path))
        else:
            from optlease.checker_stream import check_file
            checked = check_file(path)
            violations = checked.violations
            out.update(leases=checked.leases, reservations=checked.reservations)
        out["violations"] = len(violations)
    else:
        if whole:
            from optlease.formats.schedule_json import load_schedule
            from optlease.report.gantt import gantt_svg
            svg = gantt_svg(load_schedule(path), str(path), "chart", "g")
        else:
            from optlease.report.gantt_stream import gantt_file_svg
            svg = gantt_file_svg(path, "chart", "g")
        out["svg_bytes"] = len(svg or "")
    out.update(wall_time_s=round(time.perf_counter() - wall, 2), cpu_time_s=round(time.process_time() - cpu, 2),
               peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("schedule", type=Path)
    parser.add_argument("--what", nargs="+", choices=("check", "chart"), default=["check", "chart"])
    parser.add_argument("--whole", action="store_true", help="read the whole document instead of the stream")
    parser.add_argument("--one", choices=("check", "chart"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.schedule, args.one, args.whole)))
        return
    runs = []
    for what in args.what:
        done = subprocess.run([sys.executable, __file__, str(args.schedule), "--one", what,
                               *(["--whole"] if args.whole else [])], capture_output=True, text=True)
        runs.append(json.loads(done.stdout) if done.returncode == 0 else
                    {"what": what, "failed": done.returncode, "stderr": done.stderr[-500:]})
    print(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
