"""scripts/quality_suite.py on a tiny suite run as a user runs the real one: two generated workloads, the suite's own
profiles through `run-experiments`, the offline optimum of one through `compare`; its figures are checked against
the data files themselves."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

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
        no_room = bsd[best] < 1.2 or (offline is not None and abs(offline - bsd[best]) <= 0.1 * bsd[best])
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


SUITE = REPO / "instances" / "suite"
SHARED = REPO.parent / "shared" / "instances" / "haizea" / "blue" / "injected_leases"
LOADS = [f"work_{n:02d}" for n in (5, 10, 15, 20, 25, 30)]
SIZES = ["size_1small", "size_2medium", "size_3large"]


@pytest.mark.parametrize("workloads, sums, count", [("synthetic", "SHA256SUMS", 10),
                                                    ("tuning", "TUNING-SHA256SUMS", 6)])
def test_the_generated_sets_are_regenerated_byte_for_byte(tmp_path, workloads, sums, count):
    """make-workloads.sh writes each set's committed workloads again from their seeds, and checks them against its
    sums."""
    copy = tmp_path / "suite"
    copy.mkdir()
    for name in ("make-workloads.sh", f"{workloads}.workloads", sums):
        (copy / name).write_bytes((SUITE / name).read_bytes())
    optlease = Path(sys.executable).with_name("optlease")
    done = subprocess.run(["sh", str(copy / "make-workloads.sh"), workloads], capture_output=True, text=True,
                          timeout=120, env={"OPTLEASE": str(optlease), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in (copy / workloads).glob("*.lwf"))
    assert written == sorted(p.name for p in (SUITE / workloads).glob("*.lwf")) and len(written) == count
    assert all((copy / workloads / n).read_bytes() == (SUITE / workloads / n).read_bytes() for n in written)


def test_the_workload_script_refuses_an_unknown_set_in_one_line():
    done = subprocess.run(["sh", str(SUITE / "make-workloads.sh"), "../etc"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "synthetic or tuning" in done.stderr


def test_the_suites_files_expand_and_the_blue_months_cover_every_ar_load_and_size(tmp_path):
    """Every multi-configuration of the suite expands; the HPDC'08 cpsat grid and the suite's 30-day family are the
    same seventeen injections, covering every AR load and size class, with the same options for cpsat, so the grid's
    runs serve the suite."""
    from optlease.formats.multiconfig import load_multiconfig

    expected = {"synthetic.conf": 90, "blue15.conf": 54, "blue30.conf": 153}
    runs = {}
    for name, count in expected.items():
        injections = {"blue15.conf": SHARED / "15days", "blue30.conf": SHARED / "30days"}.get(name)
        dirs = {"datadir": str(tmp_path / name), **({"injectiondir": str(injections)} if injections else {})}
        multi = load_multiconfig(SUITE / name, dirs)
        runs[name] = multi.runs()
        assert len(runs[name]) == count, name
    grid = load_multiconfig(REPO / "instances" / "experiments" / "hpdc08-cpsat.conf",
                            {"injectiondir": str(SHARED / "30days"), "datadir": str(tmp_path / "grid")}).runs()
    for family in (grid, runs["blue15.conf"], runs["blue30.conf"]):
        stems = {r.injectionfile.stem for r in family}
        assert all(any(load in s for s in stems) for load in LOADS) and all(any(z in s for s in stems) for z in SIZES)
    assert {r.injectionfile.stem for r in grid} == {r.injectionfile.stem for r in runs["blue30.conf"]}
    assert "work_10-dur_2h-size_1small" in {r.injectionfile.stem for r in grid}

    def options(run):   # what decides the schedule: everything but where the files go and the labels
        return {(s, k): v for s, opts in run.sections.items() for k, v in opts.items()
                if (s, k) not in {("accounting", "datafile"), ("accounting", "schedule-file"),
                                  ("accounting", "attributes"), ("tracefile", "tracefile")}}
    suite_cpsat = {r.injectionfile.stem: options(r) for r in runs["blue30.conf"] if r.profile == "cpsat"}
    assert all(options(r) == suite_cpsat[r.injectionfile.stem] for r in grid)
