"""Accounting: counters and their averages as Haizea computes them, the built-in probes on workloads whose figures
are worked out by hand, probes of a user's own by dotted path, and a probe that fails (one line naming it)."""
from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from conftest import INSTANCES, REPO, simulated_config
from inproc import optlease
from optlease.accounting.collection import AccountingDataCollection as ADC, with_averages
from optlease.accounting.datafile import read_run
from optlease.domain.lease import LeaseKind, LeaseRequest
from optlease.formats.lwf import Workload
from optlease.formats.lwf_write import dump_lwf

VM = {"CPU": 100, "Memory": 1024}


def collection_with(kind: str, appends: list[tuple[int, float, int | None]], end: int) -> list[tuple]:
    acct = ADC()
    acct.create_counter("c", kind)
    acct.start(0)
    for now, value, lease in appends:
        acct.now = now
        acct.append_to_counter("c", value, lease)
    acct.stop(end)
    return acct.counters["c"]


@pytest.mark.parametrize("kind, expected", [
    # rows: (0, 2) replaces the start's (0, 0); (10, 4); (30, 1); the run's end (40) repeats 1 without a lease
    # id, which Haizea does not add
    (ADC.AVERAGE_NONE, [(0, 2, None), (10, 4, None), (30, 1, None)]),
    (ADC.AVERAGE_NORMAL, [(0, 2, 2.0), (10, 4, 3.0), (30, 1, 7 / 3)]),
    # step function: 2 on [0, 10), 4 on [10, 30): (2*10 + 4*20) / 30 at t=30
    (ADC.AVERAGE_TIMEWEIGHTED, [(0, 2, 2.0), (10, 4, 2.0), (30, 1, 100 / 30)]),
], ids=["none", "normal", "timeweighted"])
def test_counter_averages_as_haizea_computes_them(kind, expected):
    rows = collection_with(kind, [(0, 2, None), (10, 4, None), (30, 1, None)], end=40)
    assert [(t, v) for t, v, _ in rows] == [(t, v) for t, v, _ in expected]
    assert [a for _, _, a in rows] == pytest.approx([a for _, _, a in expected])


def test_counter_rows_follow_haizeas_rules():
    """A second value at one instant replaces the first; a repeat of the last row is dropped unless another lease
    caused it; the run's end closes the counter with its last value (here: the last row had a lease id)."""
    rows = collection_with(ADC.AVERAGE_TIMEWEIGHTED, [(5, 1, 1), (5, 3, 1), (8, 3, 1), (9, 3, 2)], end=20)
    assert [(t, v) for t, v, _ in rows] == [(0, 0), (5, 3), (9, 3), (20, 3)]
    # 0 on [0, 5), 3 on [5, 20): 45 / 20
    assert rows[-1][2] == pytest.approx(45 / 20)


def test_timeweighted_average_is_the_mean_of_the_step_function():
    rows = [(0, 1.0), (3, 5.0), (4, 0.0), (10, 2.0)]
    averages = [a for _, _, a in with_averages(rows, ADC.AVERAGE_TIMEWEIGHTED)]
    assert averages == pytest.approx([1.0, 1.0, 8 / 4, 8 / 10])


def request(lease_id: int, kind: LeaseKind, arrival: int, duration: int, nodes: int, start: int | None = None,
            preemptible: bool = False) -> LeaseRequest:
    return LeaseRequest(lease_id, kind, arrival, duration, tuple(dict(VM) for _ in range(nodes)),
                        preemptible=preemptible, start=start)


# Two nodes (lease ids in arrival order). AR 1 holds both on [600, 1200); best-effort 2 (1 node, [0, 300)) and 3
# (1 node, [0, 600)) start at once; AR 4 asks for both on [900, 1500) and is rejected; best-effort 5 (2 nodes,
# 100 s) arrives at 100, cannot start before AR 1 ends and waits 1100 s; immediate lease 6 asks for both at 700,
# inside AR 1, and is rejected.
ADMISSIONS = [
    request(1, LeaseKind.AR, 0, 600, 2, start=600),
    request(2, LeaseKind.BEST_EFFORT, 0, 300, 1),
    request(3, LeaseKind.BEST_EFFORT, 0, 600, 1),
    request(4, LeaseKind.AR, 60, 600, 2, start=900),
    request(5, LeaseKind.BEST_EFFORT, 100, 100, 2),
    request(6, LeaseKind.IMMEDIATE, 700, 100, 2),
]


def write_case(tmp_path, probes: str, requests=ADMISSIONS, resources: str = "2 CPU:100 Memory:1024"):
    trace = tmp_path / "case.lwf"
    trace.write_bytes(dump_lwf(Workload("case", requests)))
    conf = tmp_path / "case.conf"
    text = simulated_config(resources, clock="simulated", starttime="2006-11-25 13:00:00", tracefile=str(trace))
    conf.write_text(text.replace("[accounting]\n", f"[accounting]\ndatafile: case.parquet\nprobes: {probes}\n"))
    return conf


def simulate(conf, fresh: bool = False) -> subprocess.CompletedProcess:
    """`optlease simulate -c CONF -q`: in this process, or (`fresh`) in a new interpreter started in tests/, as a
    user whose probe module is in the current directory runs it."""
    if not fresh:
        return optlease("simulate", "-c", conf, "-q")
    return subprocess.run([sys.executable, "-m", "optlease.cli.main", "simulate", "-c", str(conf), "-q"],
                          cwd=REPO / "tests", capture_output=True, text=True, timeout=120)


def test_builtin_probes_count_each_lease_once(tmp_path):
    conf = write_case(tmp_path, "ar best-effort immediate lease")
    proc = simulate(conf, fresh=True)
    assert proc.returncode == 0, proc.stderr
    run = read_run(tmp_path / "case.parquet")
    stats = run.per_run
    assert (stats["Total accepted AR"], stats["Total rejected AR"]) == (1, 1)
    assert (stats["Total accepted Immediate"], stats["Total rejected Immediate"]) == (0, 1)
    assert (stats["Total requested leases"], stats["Total completed leases"], stats["Total rejected leases"]) == \
        (6, 4, 2)
    assert (stats["accepted_ar"], stats["rejected_ar"], stats["rejected_immediate"]) == (1, 1, 1)
    leases = {row["id"]: row for row in run.per_lease}
    assert {i: leases[i].get("Waiting time") for i in leases} == {1: None, 2: 0, 3: 0, 4: None, 5: 1100, 6: None}
    assert leases[4]["state"] == "rejected" and leases[6]["state"] == "rejected"
    assert leases[5]["Slowdown"] == pytest.approx((1300 - 100) / 100)
    assert stats["Total best-effort completed"] == 3 and stats["all-best-effort"] == 1300
    assert run.counters["Rejected AR"] == [(0, 0.0, None), (60, 1.0, None), (1300, 1.0, None)]
    # the queue: lease 5 waits alone on [100, 1200)
    queue = run.counters["Queue size"]
    assert [(t, v) for t, v, _ in queue] == [(0, 0), (100, 1), (1200, 0)]
    assert queue[-1][2] == pytest.approx(1100 / 1200)
    assert "ARs rejected:" in proc.stderr and "all best-effort leases completed at:  1300 s" in proc.stderr


def test_cpu_utilization_counter_matches_the_run_figure(tmp_path):
    """The counter's time-weighted average at the end is the run's CPU utilization computed from the leases'
    reservations, a different path through the same run."""
    conf = tmp_path / "qs.conf"
    qs = INSTANCES / "quickstart"
    conf.write_text((qs / "quickstart.conf").read_text()
                    .replace("tracefile: quickstart.lwf", f"tracefile: {qs / 'quickstart.lwf'}")
                    .replace("probes: ar best-effort immediate cpu-utilization",
                             "probes: utilization disk-usage\ndatafile: qs.parquet"))
    assert simulate(conf).returncode == 0
    run = read_run(tmp_path / "qs.parquet")
    cpu = run.counters["CPU utilization"]
    assert run.counter_kinds["CPU utilization"] == "AVERAGE_TIMEWEIGHTED"
    assert cpu[-1][2] == pytest.approx(run.per_run["cpu_utilization"])
    # lease 1 (1 of 4 nodes) runs until its suspension begins; AR 2 holds all 4 nodes on [1800, 3600)
    assert (1800, 1.0) in [(t, v) for t, v, _ in cpu]
    # lease 1's memory image (1024 MB) is on disk while it is suspended, then gone
    assert [(t, v) for t, v, _ in run.counters["Disk usage"]] == [(0, 0), (1800, 1024), (3600, 0)]


def test_a_probe_of_ones_own_by_dotted_path(tmp_path):
    conf = write_case(tmp_path, "best-effort accounting_probes.OddEven")
    proc = simulate(conf, fresh=True)
    assert proc.returncode == 0, proc.stderr
    run = read_run(tmp_path / "case.parquet")
    assert {row["id"]: row["Odd or even?"] for row in run.per_lease} == \
        {i: "odd" if i % 2 else "even" for i in range(1, 7)}
    assert run.per_run["Leases seen"] == 6
    assert run.counter_kinds["Leases in the system"] == "AVERAGE_NORMAL"
    values = [v for _, v, _ in run.counters["Leases in the system"]]
    assert run.counters["Leases in the system"][-1][2] == pytest.approx(sum(values) / len(values))


@pytest.mark.parametrize("probe, words", [
    ("accounting_probes.FailsAtTimestep", "probe accounting_probes.FailsAtTimestep failed in at_timestep "
                                          "(ZeroDivisionError: division by zero)"),
    ("accounting_probes.FailsInConstructor", "probe accounting_probes.FailsInConstructor failed in its "
                                             "constructor (ValueError"),
    ("accounting_probes.SetsUncreatedStat", "failed in finalize_accounting (KeyError"),
    ("accounting_probes.NotAProbe", "is not an accounting probe"),
    ("accounting_probes.Missing", "cannot load probe 'accounting_probes.Missing'"),
    ("no_such_module.Probe", "cannot load probe 'no_such_module.Probe' (ModuleNotFoundError"),
    ("cpu-usage", "unknown probe 'cpu-usage'"),
], ids=["raises", "constructor", "uncreated-stat", "not-a-probe", "missing-class", "missing-module", "unknown"])
def test_a_failing_probe_is_named_in_one_line(tmp_path, probe, words):
    proc = simulate(write_case(tmp_path, f"ar {probe}"))
    assert proc.returncode != 0
    assert words in proc.stderr and "[accounting] probes" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "case.parquet").exists()


def test_bad_attributes_are_named(tmp_path):
    conf = write_case(tmp_path, "ar")
    conf.write_text(conf.read_text().replace("[accounting]\n", "[accounting]\nattributes: profile=a,oops\n"))
    proc = simulate(conf)
    assert proc.returncode != 0 and "[accounting] attributes: expected name=value" in proc.stderr


def test_cpsat_rounds_are_in_the_data_file(tmp_path):
    """Under `mapper: cpsat`: one "Round wall time" row per solved round, its running mean, and the per-run round
    figures agree with the rows."""
    extra = [request(7 + i, LeaseKind.BEST_EFFORT, 120 + 10 * i, 200 + 50 * i, 1 + i % 2) for i in range(6)]
    conf = write_case(tmp_path, "ar", ADMISSIONS + extra)
    conf.write_text(conf.read_text().replace("[scheduling]\n", "[scheduling]\nmapper: cpsat\n"))
    proc = simulate(conf)
    assert proc.returncode == 0, proc.stderr
    run = read_run(tmp_path / "case.parquet")
    stats, rows = run.per_run, run.counters["Round wall time"]
    assert stats["mapper"] == "cpsat" and stats["rounds_solved"] == len(rows) > 0
    assert sum(v for k, v in stats.items() if k.startswith("round_status_")) == stats["rounds"]
    values = [v for _, v, _ in rows]
    assert rows[-1][2] == pytest.approx(sum(values) / len(values))
    assert stats["round_wall_time_max"] == pytest.approx(max(values), abs=1e-4)
    assert run.counter_kinds["Round gap"] == "AVERAGE_NORMAL"
    assert "round wall time, p95:" in proc.stderr


def test_all_best_effort_is_the_last_completion_not_the_runs_end():
    """An AR that runs on after the last best-effort lease completed does not move "all-best-effort" (Haizea's
    counter row at the run's end did)."""
    from types import SimpleNamespace

    from optlease.accounting.probes import BEProbe
    from optlease.domain.lease import LeaseState

    acct = ADC()
    acct.add_probe("best-effort", BEProbe)
    acct.start(0)
    for lease_id, end in ((1, 500), (2, 800)):
        acct.now = end
        acct.at_lease_done(SimpleNamespace(id=lease_id, kind=LeaseKind.BEST_EFFORT, state=LeaseState.DONE,
                                           first_start=0, end=end, req=SimpleNamespace(arrival=0,
                                                                                       actual_duration=end)))
    acct.stop(5000)   # an AR kept the run going
    assert acct.stats["all-best-effort"] == 800 and acct.stats["Total best-effort completed"] == 2
    assert [(t, v) for t, v, _ in acct.counters["Best-effort completed"]] == [(0, 0), (500, 1), (800, 2), (5000, 2)]


def test_haizeas_full_probe_names_run_unchanged(tmp_path):
    conf = write_case(tmp_path, "haizea.pluggable.accounting.leases.ARProbe "
                                "haizea.pluggable.accounting.utilization.CPUUtilizationProbe")
    assert simulate(conf).returncode == 0
    run = read_run(tmp_path / "case.parquet")
    assert run.per_run["Total rejected AR"] == 1 and "CPU utilization" in run.counters


@settings(max_examples=80, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 50), st.integers(-5, 5), st.sampled_from([None, 1, 2])),
                      max_size=20),
       tail=st.integers(0, 50))
def test_any_counter_is_a_step_function_and_its_averages_agree(steps, tail):
    """Whatever the appends: times strictly increase, the time-weighted average at the end is the step function's
    integral over the run divided by its length, and the normal average the mean of the rows."""
    acct = ADC()
    for kind in (ADC.AVERAGE_NORMAL, ADC.AVERAGE_TIMEWEIGHTED):
        acct.create_counter(kind, kind)
    acct.start(0)
    now, timeline = 0, {0: 0}
    for gap, value, lease in steps:
        now += gap
        acct.now = now
        for kind in (ADC.AVERAGE_NORMAL, ADC.AVERAGE_TIMEWEIGHTED):
            acct.append_to_counter(kind, value, lease)
        timeline[now] = value
    acct.stop(now + tail)
    rows = acct.counters[ADC.AVERAGE_TIMEWEIGHTED]
    assert all(a[0] < b[0] for a, b in zip(rows, rows[1:]))
    end = rows[-1][0]
    changes = sorted(timeline.items())
    integral = sum(v * (min(t2, end) - t1) for (t1, v), (t2, _) in zip(changes, changes[1:] + [(end, 0)]) if t1 < end)
    assert rows[-1][2] == pytest.approx(integral / end if end else rows[-1][1])
    normal = acct.counters[ADC.AVERAGE_NORMAL]
    assert normal[-1][2] == pytest.approx(sum(v for _, v, _ in normal) / len(normal))


def _first_days(src, dst, days: int, time_field: int) -> str:
    """The requests of `src` that arrive in its first `days` days (SWF: field 2; old LWF: field 1)."""
    kept = [line for line in src.read_text().splitlines()
            if not line.strip() or line.startswith(";") or float(line.split()[time_field]) < days * 86_400]
    dst.write_text("\n".join(kept) + "\n")
    return str(dst)


@pytest.mark.parametrize("scheduling", [
    {"backfilling": "aggressive"},
    {"backfilling": "conservative", "migration": "yes"},
    {"backfilling": "off", "migration": "yes-notransfer"},
    {"backfilling": "aggressive", "runtime-estimate": "user-history"},
], ids=["aggressive", "conservative-migration", "fcfs-notransfer", "aggressive-estimates"])
def test_cpu_in_use_kept_as_vms_start_and_stop_is_the_sum_over_every_lease(tmp_path, scheduling):
    # The scheduler keeps what its running VMs hold as they start and stop (ARs preempting best-effort leases,
    # suspensions, resumes elsewhere, runs past their estimate): at every instant, what summing over every lease in
    # the system gives.
    from optlease.accounting.probes import cpu_held, site_cpu
    from optlease.engine.run import simulate
    from optlease.formats.config import load_config

    blue = INSTANCES / "blue"
    cfg = load_config(blue / "blue.conf", overrides={"scheduling": scheduling})
    seen = []

    def observe(now, sched):
        cpu, _ = site_cpu(sched.site)
        seen.append((now, sched.running_use[cpu], cpu_held(sched.leases.values(), now, cpu, {})))

    simulate(cfg, tracefile=_first_days(blue / "30days.swf", tmp_path / "3days.swf", 3, 1),
             injection=_first_days(blue / "injected" / "work_30-dur_2h-size_1small.lwf", tmp_path / "3days.lwf", 3, 0),
             observe=observe)
    assert [row for row in seen if row[1] != row[2]] == []
    assert max(used for _, used, _ in seen) > 0
