"""scripts/quality_suite.py on a tiny suite run as a user runs the real one: two generated workloads, the suite's own
profiles through `run-experiments`, the offline optimum of one through `compare`; its figures are checked against
the data files themselves."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from optlease.accounting.datafile import read_run
from optlease.cli.main import main

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "quality_suite.py"
PROFILES = {"off-requested": ("greedy-off", "requested"), "aggressive-requested": ("greedy-aggressive", "requested"),
            "aggressive-history": ("greedy-aggressive", "user-history"), "cpsat": ("cpsat", "user-history")}
WORKLOADS = {"t1": ["--nodes", "4 CPU:100 Memory:2048", "--load", "0.9", "--seed", "11"],
             "t2": ["--nodes", "3 CPU:100 Memory:2048", "--nodes", "2 CPU:200 Memory:4096", "--load", "0.7",
                    "--seed", "12"]}


def run_tiny_suite(tmp_path: Path) -> Path:
    for name, options in WORKLOADS.items():
        assert main(["generate-workload", "-o", str(tmp_path / f"{name}.lwf"), "--horizon", "06:00:00",
                     "--ar-share", "0.2", "--ar-notice", "00:30:00", "--immediate-share", "0.1",
                     "--overestimate", "3", "--premature-share", "0.5", *options]) == 0
    # the synthetic family's own sections and profiles, over the two workloads
    suite = (REPO / "instances" / "suite" / "synthetic.conf").read_text().split("[common:general]", 1)[1]
    multi = tmp_path / "tiny.conf"
    multi.write_text(f"[multi]\ntracedir: {tmp_path}\ntracefiles: t1.lwf t2.lwf\nbasedatadir: data\n"
                     f"[common:general]{suite}")
    assert main(["run-experiments", "-c", str(multi), "-d", str(tmp_path / "confs"), "--workers", "1",
                 "--profiles", ",".join(PROFILES)]) == 0
    data = tmp_path / "data"
    assert main(["compare", "-c", str(tmp_path / "confs" / "aggressive-requested_t1.conf"), "--schedulers",
                 "offline", "--offline-time-limit", "2", "-o", str(data / "offline" / "t1")]) == 0
    return data


def test_the_suite_script_computes_its_table_from_the_data_files(tmp_path, capsys):
    data = run_tiny_suite(tmp_path)
    capsys.readouterr()
    out = subprocess.run([sys.executable, str(SCRIPT), "--family", f"tiny={data}", "--markdown",
                          str(tmp_path / "suite.md")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    rows = {r["workload"]: r for r in report["workloads"]}
    assert sorted(rows) == ["t1", "t2"] and all(r["family"] == "tiny" for r in rows.values())

    for workload, row in rows.items():
        runs = {p: read_run(data / f"{p}_{workload}.parquet").per_run for p in PROFILES}
        bsd = {p: r["bounded_slowdown_avg"] for p, r in runs.items()}
        # greedy-aggressive takes the estimate with the lower slowdown, requested on a tie
        agg = "aggressive-requested" if bsd["aggressive-requested"] <= bsd["aggressive-history"] \
            else "aggressive-history"
        assert row["greedy"]["greedy-aggressive"] == {"estimate": PROFILES[agg][1], "bounded_slowdown": bsd[agg]}
        assert row["greedy"]["greedy-off"]["bounded_slowdown"] == bsd["off-requested"]
        best = min(("off-requested", agg), key=lambda p: (bsd[p], p != "off-requested"))
        assert row["best_greedy"]["mode"] == PROFILES[best][0]
        assert row["ratio"] == bsd["cpsat"] / bsd[best]
        assert row["max_wait_ratio"] == runs["cpsat"]["best_effort_wait_max"] / runs[best]["best_effort_wait_max"]
        for kind in ("ar", "immediate"):
            def share(r):
                n = r[f"accepted_{kind}"] + r[f"rejected_{kind}"]
                return r[f"accepted_{kind}"] / n if n else None
            assert row["cpsat"][f"{kind}_acceptance"] == share(runs["cpsat"])
            expected = None if share(runs["cpsat"]) is None else share(runs["cpsat"]) - share(runs[best])
            assert row[f"{kind}_acceptance_delta"] == expected
        assert (row["cpsat"]["preemptions"], row["best_greedy"]["preemptions"]) == \
            (runs["cpsat"]["preemptions"], runs[best]["preemptions"])
        # listed but not counted where there is no room to gain
        offline = read_run(data / "offline" / "t1" / "offline.parquet").per_run["bounded_slowdown_avg"] \
            if workload == "t1" else None
        assert row["offline_bounded_slowdown"] == offline
        no_room = bsd[best] < 1.2 or (offline is not None and offline >= 0.9 * bsd[best])
        assert row["counted"] is not no_room

    counted = [r["ratio"] for r in rows.values() if r["counted"]]
    summary = report["summary"]
    assert summary["counted"] == len(counted) and summary["workloads"] == 2
    assert summary["suite_mean_ratio"] == (statistics.fmean(counted) if counted else None)
    assert summary["family_mean_ratio"] == {"tiny": summary["suite_mean_ratio"]}
    table = (tmp_path / "suite.md").read_text()
    assert all(f"| tiny | {w} | " in table for w in rows)
    assert f"Counted workloads: {len(counted)} of 2." in table


def test_bad_input_is_one_line(tmp_path):
    for args, message in ((["--family", str(tmp_path)], "expected NAME=DIR"),
                          (["--family", f"x={tmp_path}"], "no data file"),
                          (["--family", f"x={tmp_path / 'none'}"], "not a folder")):
        out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and message in out.stderr and out.stderr.count("\n") == 1, out.stderr
