"""Every script in scripts/ runs and prints what it promises."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO


def test_bench_simulate_quick_prints_json_figures():
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_simulate.py"), "--quick"],
                         capture_output=True, text=True, check=True, timeout=300)
    run = json.loads(out.stdout)["1000requests-aggressive"]
    assert run["be_completed"] == 951 and run["wall_time_s"] > 0
    assert abs(run["wait_avg_s"] - 376.3) / 376.3 < 0.05
    assert len(run["load_1min"]) == 2 and min(run["load_1min"]) >= 0    # the load it ran at, begun and ended


def test_bench_simulate_hashes_the_schedule_it_writes():
    """`--hashes` reports the sha256 of the schedule file the run writes: the digest tests/test_schedule_hashes.py
    keeps for 1000requests.swf with aggressive backfilling, so a month's digest from the script means the same."""
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_simulate.py"), "--quick", "--hashes"],
                         capture_output=True, text=True, check=True, timeout=300)
    run = json.loads(out.stdout)["1000requests-aggressive"]
    assert run["schedule_sha256"] == "35ebd4131a74952e08bd31ba960a628c323de0cb76e800da4120299187884832"


def test_bench_scale_hashes_the_schedule_of_a_run():
    """`bench_scale.py --hashes` adds the run's schedule sha256: the digest tests/test_schedule_hashes.py keeps for
    1000requests.swf with FCFS on 144 nodes."""
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_scale.py"), "--one", "1000requests.swf",
                          "off", "144", "--hashes"], capture_output=True, text=True, check=True, timeout=300)
    run = json.loads(out.stdout)
    assert run["schedule_sha256"] == "a6fd6b496bf6f467507e426d719e28eee6c8d8126d78369cc9c916f60c06df4b"


def test_bench_scale_reads_a_trace_alone():
    """`bench_scale.py --read-trace CONF` times reading the configuration's trace, each read a figure."""
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_scale.py"), "--read-trace",
                          str(REPO / "instances" / "quickstart" / "quickstart.conf"), "--repeat", "2"],
                         capture_output=True, text=True, check=True, timeout=300)
    run = json.loads(out.stdout)
    assert run["leases"] == 2 and len(run["cpu_time_s"]) == len(run["wall_time_s"]) == 2
    assert run["peak_rss_mb"] > 0


def test_bench_restart_prints_its_replay_figures():
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_restart.py"), "--entries", "200"],
                         capture_output=True, text=True, check=True, timeout=300)
    run = json.loads(out.stdout)
    assert run["entries"] == 200 and run["leases"] == 100 and run["consistent"] is True
    # fewer entries than one checkpoint's worth: the restart replays them all
    assert run["checkpoints"] is True and run["replayed_entries"] == 200 and run["restart_s"] >= 0


def test_bench_scale_quick_prints_cost_per_event_by_site_size():
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_scale.py"), "--quick"],
                         capture_output=True, text=True, check=True, timeout=300)
    small, large = json.loads(out.stdout)["runs"]
    assert (small["nodes"], large["nodes"]) == (144, 1152)
    assert small["be_completed"] == large["be_completed"] == 951
    # FCFS on the Blue site reproduces the reference wait; on eight times the site nobody waits
    assert abs(small["wait_avg_s"] - 1816.0) / 1816.0 < 0.001 and large["wait_avg_s"] == 0
    for run in (small, large):
        assert run["events"] > 951 and run["peak_rss_mb"] > 0
        # the cost of an event is the wall time over the events (the wall time is rounded to the millisecond)
        assert abs(run["us_per_event"] - 1e6 * run["wall_time_s"] / run["events"]) < 1
    assert small["cost_per_event_vs_144"] == 1.0 and large["cost_per_event_vs_144"] > 0


def test_make_imagefile_writes_the_same_haizea_image_file_for_the_same_seed(tmp_path):
    from optlease.engine.run import read_imagefile

    def make(seed: int, out):
        subprocess.run([sys.executable, str(REPO / "scripts" / "make_imagefile.py"), "--images", "5", "--size",
                        "700", "--requests", "400", "--seed", str(seed), "-o", str(out)], check=True, timeout=60)
        return out.read_text()

    first, again, other = make(1, tmp_path / "a"), make(1, tmp_path / "b"), make(2, tmp_path / "c")
    assert first == again and first != other
    images = read_imagefile(tmp_path / "a")
    assert len(images) == 400 and {i.size for i in images} == {700}
    assert {i.id for i in images} == {f"image_{n}" for n in range(1, 6)}   # uniform: 400 draws reach all five


def test_bench_check_reads_a_schedule_as_a_stream_and_whole(tmp_path):
    """`bench_check.py` times `optlease check`'s reading of a schedule file and the report's chart of it, by the
    stream and by the whole document: the same verdict and chart either way."""
    schedule = tmp_path / "quickstart.json"
    subprocess.run([sys.executable, "-m", "optlease.cli.main", "simulate", "-c",
                    str(REPO / "instances" / "quickstart" / "quickstart.conf"), "-q", "--schedule-out",
                    str(schedule)], cwd=REPO, capture_output=True, check=True, timeout=300)
    runs = {}
    for whole in ([], ["--whole"]):
        out = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_check.py"), str(schedule), *whole],
                             capture_output=True, text=True, check=True, timeout=300)
        runs[bool(whole)] = {run["what"]: run for run in json.loads(out.stdout)}
    for by in runs.values():
        assert by["check"]["violations"] == 0 and by["check"]["peak_rss_mb"] > 0
        assert by["chart"]["svg_bytes"] > 0 and by["chart"]["cpu_time_s"] >= 0
    assert runs[False]["chart"]["svg_bytes"] == runs[True]["chart"]["svg_bytes"]
    doc = json.loads(schedule.read_text())
    assert (runs[False]["check"]["leases"], runs[False]["check"]["reservations"]) == (
        len(doc["leases"]), sum(len(lease["reservations"]) for lease in doc["leases"]))


CPSAT_T01 = """[general]
mode: simulated
lease-preparation: unmanaged
[simulation]
clock: simulated
starttime: 2006-11-25 00:00:00
resources: in-tracefile
imagetransfer-bandwidth: 100
[scheduling]
policy-admission: accept-all
policy-preemption: ar-preempts-everything
policy-host-selection: greedy
suspension: all
suspend-rate: 32
resume-rate: 32
migration: yes
mapper: {mapper}
backfilling: aggressive
runtime-estimate: user-history
[accounting]
probes: ar best-effort immediate cpu-utilization
[tracefile]
tracefile: {trace}
"""


def test_round_searches_records_every_search_of_a_run(tmp_path):
    """`round_searches.py` records each CP-SAT search of a cpsat run, as many as the run's summary counts solved
    rounds; at the run's own work limit (and a size-scaled one that scales nothing) no search ends worse. A greedy
    run has no search to record: a one-line error."""
    conf = tmp_path / "t01.conf"
    trace = REPO / "instances" / "suite" / "tuning" / "t01-10n-load75.lwf"
    conf.write_text(CPSAT_T01.format(mapper="cpsat", trace=trace))
    summary = subprocess.run([sys.executable, "-m", "optlease.cli.main", "simulate", "-c", str(conf), "-q",
                              "--summary-out", "-"], cwd=REPO, capture_output=True, text=True, check=True,
                             timeout=300)
    rounds = json.loads(summary.stdout)["rounds"]
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "round_searches.py"), str(conf), "--limits",
                          "0.05,0.001", "--scaled", "100000", "--records", str(tmp_path / "searches.jsonl")],
                         capture_output=True, text=True, check=True, timeout=300)
    doc = json.loads(out.stdout)
    assert doc["searches"] == rounds["solved"] + rounds["admissions"]["offered"] > 0
    records = [json.loads(line) for line in (tmp_path / "searches.jsonl").read_text().splitlines()]
    assert len(records) == doc["searches"] and all(r["plans"] and r["limit"] == 0.05 for r in records)
    sizes = doc["by_size"].values()
    assert sum(row["searches"] for row in sizes) == doc["searches"]
    for row in sizes:
        for own in (row["limit 0.05"], row["scaled 100000"]):
            assert own["worse"] == 0 and own["kept_share"] == 1.0
        assert row["limit 0.001"]["cpu_s"] <= row["cpu_s"]
    conf.write_text(CPSAT_T01.format(mapper="greedy", trace=trace))
    bad = subprocess.run([sys.executable, str(REPO / "scripts" / "round_searches.py"), str(conf)],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "no CP-SAT rounds" in bad.stderr and len(bad.stderr.splitlines()) == 1
    for limits in ("0.01,abc", "0.01,-1", "nan"):   # a bad limit: a usage error naming it, no traceback
        bad = subprocess.run([sys.executable, str(REPO / "scripts" / "round_searches.py"), str(conf), "--limits",
                              limits], capture_output=True, text=True, timeout=300)
        assert bad.returncode == 2 and "argument --limits" in bad.stderr and "Traceback" not in bad.stderr
