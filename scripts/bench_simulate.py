#!/usr/bin/env python3
"""Simulation speed on the Blue Horizon traces (JSON on stdout).

Runs, each in a fresh process: 30days.swf with aggressive backfilling, 60days.swf likewise (and the 60/30 ratio),
and 15days.swf with the 30 % AR injection and suspension on. `--quick` runs 1000requests.swf only.
`wall_time_s` is the simulation's own; `command_wall_s` is the whole `optlease simulate` command (start-up, reading
the trace, the summary), and `command_cpu_s` its CPU time (user + system), which other work on the machine
inflates less than wall time; `load_1min` the machine's load average when the run began and when it ended (other
work inflates CPU time too, by sharing caches and cores: compare runs made side by side at a like load).

`--images` runs 30days.swf with the work_10-dur_2h-size_1small injection in the HPDC'08 VM profiles (suspension,
migration, 5 % runtime overhead, 20 s boot and shutdown), every request given one of 37 images of 4,096 MB drawn
uniformly (scripts/make_imagefile.py, seed 1): without image transfers, vm+noreuse (multicast, no piggybacking, no
caches) and vm+reuse (multicast, piggybacking, 20,480 MB LRU caches), and the ratio of each one's wall time and CPU
time to the first's.

`--hashes` has each run also write its schedule file and report its sha256 (`schedule_sha256`): how a change meant
to keep every decision is checked on the whole month (its CPU time then includes writing the file).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
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
IMAGE_INJECTION = "injected/work_10-dur_2h-size_1small.lwf"
# the HPDC'08 VM profile (Haizea's blue-30days-24h), vm+noreuse as the file has it; the others as what they change
VM_PROFILE = BLUE / "hpdc08-vm.conf"
IMAGE_RUNS = {
    "30days-work10-vm-without-transfers": {"general": {"lease-preparation": "unmanaged"}},
    "30days-work10-vm+noreuse": {},
    "30days-work10-vm+reuse": {"deploy-imagetransfer": {"avoid-redundant-transfers": "True",
                                                        "diskimage-reuse": "image-caches",
                                                        "diskimage-cache-size": "20480"}},
}


def vm_profile(changes: dict, trace: Path, injection: Path, imagefile: Path) -> str:
    """The text of instances/blue/hpdc08-vm.conf with `changes` (section -> option -> value) and these files, named
    by their full paths (the text is written elsewhere)."""
    from optlease.formats.config import render_config
    from optlease.formats.multiconfig import read_sections

    sections = read_sections(VM_PROFILE.read_text(), str(VM_PROFILE))
    for section, options in {**changes, "tracefile": {"tracefile": str(trace), "injectionfile": str(injection),
                                                      "imagefile": str(imagefile)}}.items():
        sections.setdefault(section, {}).update(options)
    return render_config(sections)


def run(trace: str, injection: str | None, conf: str | None = None, hashes: bool = False) -> dict:
    if conf is None:
        conf = (BLUE / "blue.conf").read_text().replace("tracefile: 1000requests.swf", f"tracefile: {BLUE / trace}")
        if injection:
            conf += f"injectionfile: {BLUE / injection}\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.conf"
        path.write_text(conf)
        schedule = Path(tmp) / "schedule.json"
        load = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "optlease.cli.main", "simulate", "-c", str(path), "-q",
                              "--summary-out", "-", *(["--schedule-out", str(schedule)] if hashes else [])],
                             capture_output=True, text=True, check=True, cwd=ROOT)
        command_wall = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        digest = hashlib.sha256(schedule.read_bytes()).hexdigest() if hashes else None
    summary = json.loads(out.stdout)
    be = summary["best_effort"]
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"trace": trace, "injection": injection, "wall_time_s": summary["wall_time_s"],
            "command_wall_s": round(command_wall, 3), "command_cpu_s": round(cpu, 3),
            "load_1min": [round(load, 2), round(os.getloadavg()[0], 2)],
            "leases": summary["leases"], "ar_accepted": summary["ar"]["accepted"],
            "ar_rejected": summary["ar"]["rejected"], "be_completed": be["completed"],
            "wait_avg_s": round(be["wait_avg"], 1), "bounded_slowdown_avg": round(be["bounded_slowdown_avg"], 2),
            "all_be_completed_at_s": be["all_completed_at"], "suspensions": summary["suspensions"],
            "preemptions": summary["preemptions"], **({"images": summary["images"]} if "images" in summary else {}),
            **({"schedule_sha256": digest} if hashes else {})}


def image_runs(hashes: bool = False) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_imagefile import imagefile

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        images = Path(tmp) / "37_uniform.images"
        images.write_text(imagefile(37, 4096, 10000, seed=1))
        for name, changes in IMAGE_RUNS.items():
            conf = vm_profile(changes, BLUE / "30days.swf", BLUE / IMAGE_INJECTION, images)
            results[name] = run("30days.swf", IMAGE_INJECTION, conf, hashes)
    base = results["30days-work10-vm-without-transfers"]
    for name in list(IMAGE_RUNS)[1:]:
        profile = name.rsplit('-', 1)[1]
        results[f"time_ratio_{profile}"] = round(results[name]["wall_time_s"] / base["wall_time_s"], 2)
        # CPU time, which other work on the machine inflates less than wall time
        results[f"cpu_ratio_{profile}"] = round(results[name]["command_cpu_s"] / base["command_cpu_s"], 2)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1000requests.swf only")
    parser.add_argument("--images", action="store_true", help="the month with image transfers only")
    parser.add_argument("--hashes", action="store_true", help="write each run's schedule and report its sha256")
    args = parser.parse_args()
    if args.images:
        json.dump(image_runs(args.hashes), sys.stdout, indent=1)
        print()
        return
    results = {name: run(*spec, hashes=args.hashes) for name, spec in (QUICK if args.quick else RUNS).items()}
    if "60days-aggressive" in results:
        results["ratio_60_to_30"] = round(results["60days-aggressive"]["wall_time_s"]
                                          / results["30days-aggressive"]["wall_time_s"], 2)
    json.dump(results, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
