"""`[scheduling] mapper: cpsat` in the simulator: every schedule it writes obeys the contract (quickstart, Haizea's
scenarios, random workloads), each round records its solver statistics, and where it decides differently from the
greedy scheduler the test says what it did and why that is better."""
from __future__ import annotations

import dataclasses
import importlib.util
import io

import pytest
from hypothesis import HealthCheck, given, settings

from conftest import INSTANCES, REPO
from optlease.accounting.metrics import run_summary
from optlease.checker import check_schedule
from optlease.domain.lease import LeaseKind, LeaseState
from optlease.eventlog import EventLog
from optlease.engine.run import apply_trace_options, load_workload, simulate, site_of
from optlease.engine.simulator import Simulator
from optlease.formats.config import load_config
from optlease.formats.schedule_json import schedule_document
from optlease.scheduling.cpsat_round import CpsatRound
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.records import BOOKED, NOT_PROMISED
from test_cpsat_round import check_plan
from test_simulator_properties import ORIGIN, booked_again_begins_earlier, options, requests, sites

SCENARIOS = sorted((INSTANCES / "haizea" / "expected").glob("*.conf"))
CONFS = [INSTANCES / "quickstart" / "quickstart.conf", INSTANCES / "quickstart" / "quickstart-nosusp.conf",
         *SCENARIOS]


def run_conf(path, mapper: str):
    """One configuration with its mapper overridden: the simulator (its scheduler keeps the round hook)."""
    cfg = load_config(path, overrides={"scheduling": {"mapper": mapper}})
    opts = SchedulingOptions.from_config(cfg)
    _, workload = load_workload(cfg)
    sim = Simulator(site_of(cfg, workload), apply_trace_options(cfg, workload.requests), opts,
                    Policies(opts.policy_admission, opts.policy_preemption, opts.policy_host_selection),
                    EventLog(cfg.get("simulation", "starttime"), "INFO", io.StringIO()))
    result = sim.run()
    doc = schedule_document(result.site, result.leases, cfg.get("simulation", "starttime"))
    return sim, result, doc


def test_config_selects_cpsat_with_its_solver_options(tmp_path):
    conf = (INSTANCES / "quickstart" / "quickstart.conf").read_text().replace(
        "mapper: greedy", "mapper: cpsat\nsolver-time-limit: 0.5\nsolver-workers: 1\nsolver-seed: 7\nlookahead: 3600")
    path = tmp_path / "qs.conf"
    path.write_text(conf)
    (tmp_path / "quickstart.lwf").write_text((INSTANCES / "quickstart" / "quickstart.lwf").read_text())
    opts = SchedulingOptions.from_config(load_config(path))
    assert (opts.mapper, opts.solver_time_limit, opts.solver_workers, opts.solver_seed, opts.lookahead) == \
        ("cpsat", 0.5, 1, 7, 3600)
    greedy = SchedulingOptions.from_config(load_config(INSTANCES / "quickstart" / "quickstart.conf"))
    assert (greedy.mapper, greedy.solver_time_limit, greedy.solver_workers, greedy.solver_seed, greedy.lookahead) \
        == ("greedy", 1.0, 2, 0, None)
    assert simulate(load_config(path), out=io.StringIO()).end_time > 0


@pytest.mark.parametrize("conf", CONFS, ids=lambda p: p.stem)
def test_every_cpsat_schedule_passes_the_checker(conf):
    sim, result, doc = run_conf(conf, "cpsat")
    assert [str(v) for v in check_schedule(doc)] == []
    assert all(lease.state in (LeaseState.DONE, LeaseState.REJECTED) for lease in result.leases)
    hook = sim.sched.round_hook
    assert isinstance(hook, CpsatRound)
    assert len(hook.records) == result.rounds, "every round records its statistics"
    for record in hook.records:
        assert record.stats.source in ("greedy", "cpsat")
        assert record.changed == 0 or record.stats.source == "cpsat"
    # same ARs accepted as greedy, and never a later completion of all best-effort work on these scenarios
    _, greedy, _ = run_conf(conf, "greedy")
    ours, theirs = (run_summary(r.site, r.leases, r.end_time) for r in (result, greedy))
    assert ours["ar"] == theirs["ar"]
    if theirs["best_effort"]["all_completed_at"] is not None:
        assert ours["best_effort"]["all_completed_at"] <= theirs["best_effort"]["all_completed_at"]


def test_greedy_runs_no_round_hook():
    sim, _, _ = run_conf(INSTANCES / "quickstart" / "quickstart.conf", "greedy")
    assert sim.sched.round_hook is None


def test_where_cpsat_differs_it_resumes_as_soon_as_the_reservation_frees_its_node():
    """preemption_prematureend2: an AR preempts best-effort lease 1 (suspended at 13:30), then ends early at 13:40.
    The greedy pass keeps the resume it booked for lease 1 at 13:41:22, behind the AR's booked end and
    overheads; the CP-SAT round sees node 1 free at 13:40:00 and moves the resume there, so lease 1 (and with it
    all best-effort work) finishes 82 s sooner, with the same AR, preemption and suspension."""
    conf = INSTANCES / "haizea" / "expected" / "preemption_prematureend2.conf"
    sim, result, doc = run_conf(conf, "cpsat")
    _, greedy, gdoc = run_conf(conf, "greedy")

    def resumes(d):
        lease = next(item for item in d["leases"] if item["id"] == 1)
        return [r["start"][11:] for r in lease["reservations"] if r["kind"] == "resume"]

    assert resumes(gdoc) == ["13:41:22"]
    assert resumes(doc) == ["13:40:00"]
    ours, theirs = (run_summary(r.site, r.leases, r.end_time) for r in (result, greedy))
    assert theirs["best_effort"]["all_completed_at"] - ours["best_effort"]["all_completed_at"] == 82
    assert ours["best_effort"]["bounded_slowdown_avg"] < theirs["best_effort"]["bounded_slowdown_avg"]
    assert (ours["ar"], ours["preemptions"], ours["suspensions"]) == \
        (theirs["ar"], theirs["preemptions"], theirs["suspensions"])
    changed = [r for r in sim.sched.round_hook.records if r.changed]
    assert [(r.now, r.changed, r.stats.source) for r in changed] == [(2400, 1, "cpsat")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(site=sites, reqs=requests(), opts=options)
def test_random_cpsat_schedules_are_safe_and_nothing_is_lost(site, reqs, opts):
    opts = dataclasses.replace(opts, mapper="cpsat", solver_time_limit=0.2, solver_workers=1)
    log = EventLog(ORIGIN, "INFO", io.StringIO())
    policies = Policies(opts.policy_admission, opts.policy_preemption, opts.policy_host_selection)
    sim = Simulator(site, reqs, opts, policies, log)
    result = sim.run()
    doc = schedule_document(result.site, result.leases, ORIGIN)
    assert [str(v) for v in check_schedule(doc)] == []
    for lease in result.leases:
        assert lease.state in (LeaseState.DONE, LeaseState.REJECTED), (lease.id, lease.state)
        if lease.kind is LeaseKind.BEST_EFFORT and lease.state is LeaseState.REJECTED:
            assert "never fit" in lease.reason
    assert len(sim.sched.round_hook.records) == result.rounds


def test_a_neighbourhood_limits_the_nodes_a_lease_may_take():
    from optlease.domain.lease import LeaseRequest
    from optlease.domain.site import Site
    from optlease.scheduling.cpsat.solve import SolveOptions, solve_round
    from optlease.scheduling.snapshot import LeaseSnapshot, Outcome, Phase, Policy, RoundSnapshot

    vm = {"CPU": 100, "Memory": 1024}
    site = Site.homogeneous(6, vm)
    busy = LeaseSnapshot(LeaseRequest(1, LeaseKind.AR, 0, 600, (vm,), start=0), Phase.RUNNING, nodes=(5,))
    free = LeaseSnapshot(LeaseRequest(2, LeaseKind.BEST_EFFORT, 0, 300, (vm, vm)), Phase.QUEUED,
                         allowed_nodes=(4, 5, 6))
    plan = solve_round(RoundSnapshot(100, site, (busy, free), Policy(non_schedulable_interval=0)),
                       SolveOptions(workers=1, time_limit=5))
    got = plan.of(2)
    assert got.outcome is Outcome.ACCEPTED and got.start == 100 and sorted(got.nodes) == [4, 6]


@pytest.mark.parametrize("conf, objective", [
    pytest.param(INSTANCES / "haizea" / "expected" / "wait.conf", 1304960, id="wait-greedy-is-optimal"),
    pytest.param(INSTANCES / "haizea" / "expected" / "reservation.conf", 126080, id="reservation"),
], )
def test_optimize_reports_a_proven_offline_optimum_and_a_valid_schedule(cli, tmp_path, conf, objective):
    import json

    out = tmp_path / "offline.json"
    res = cli("optimize", "-c", conf, "--time-limit", "10", "--workers", "1", "--schedule-out", out)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert (got["status"], got["objective"], got["best_bound"], got["gap"]) == ("OPTIMAL", objective, objective, 0.0)
    assert got["objective"] <= got["greedy_objective"] and got["checker_violations"] == 0
    assert check_schedule(json.loads(out.read_text())) == []


def test_the_objective_weights_come_from_the_configuration(cli, tmp_path):
    """[scheduling] weight-*: with the model's weights the quickstart's AR is worth more than the hour its best-effort
    lease waits for it; with weight-rejected 0 refusing it costs nothing, so the offline optimum refuses it and the
    best-effort lease runs at once. A weight that is not a number is refused with the place named."""
    import json

    (tmp_path / "quickstart.lwf").write_text((INSTANCES / "quickstart" / "quickstart.lwf").read_text())
    base = (INSTANCES / "quickstart" / "quickstart.conf").read_text()
    got = {}
    for extra in ("", "weight-rejected: 0\nweight-aging: 01:00:00"):
        path = tmp_path / "q.conf"
        path.write_text(base.replace("mapper: greedy", f"mapper: greedy\n{extra}"))
        res = cli("optimize", "-c", path, "--time-limit", "10", "--workers", "1")
        assert res.returncode == 0, res.stderr
        got[extra] = json.loads(res.stdout)
    default, free = got.values()
    assert (default["offline"]["ar_accepted"], default["offline"]["be_wait_max"]) == (1, 3600)
    assert (free["offline"]["ar_accepted"], free["offline"]["be_wait_max"]) == (0, 0)
    assert free["objective"] < default["objective"]
    path.write_text(base.replace("mapper: greedy", "mapper: greedy\nweight-slowdown: 0\nweight-aging: 02:00:00\n"
                                                   "weight-preemption: 7"))
    from optlease.scheduling.snapshot import Weights
    assert SchedulingOptions.from_config(load_config(path)).weights == Weights(slowdown=0, aging=7200, preemptions=7)
    path.write_text(base.replace("mapper: greedy", "mapper: greedy\nweight-wait: ten"))
    res = cli("optimize", "-c", path)
    assert res.returncode != 0 and "weight-wait" in res.stderr and "Traceback" not in res.stderr


def test_compare_schedulers_prints_json_and_a_table(tmp_path):
    import json
    import subprocess
    import sys

    from conftest import REPO

    table = tmp_path / "table.md"
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "compare_schedulers.py"), "--limit-days", "0.5",
                          "--modes", "greedy-aggressive,cpsat,offline", "--time-limit", "0.2",
                          "--offline-time-limit", "5", "--promises", "4", "--promise-resumes", "no",
                          "--seeds", "0,1", "--markdown", str(table)],
                         capture_output=True, text=True, check=True, timeout=300)
    doc = json.loads(out.stdout)
    results = doc["results"]
    # the cpsat run's options are reported with its figures
    assert (doc["solver"]["solver-promises"], doc["solver"]["solver-promise-resumes"]) == (4, "no")
    # by default greedy books what leases ask for, as Haizea does, and cpsat its run-time estimates
    assert doc["runtime_estimate"]["greedy-aggressive"] == "requested"
    assert doc["runtime_estimate"]["cpsat"] == "user-history"
    seeds = ["cpsat (seed 0)", "cpsat (seed 1)"]
    assert set(results) == {"greedy-aggressive", *seeds, "cpsat (mean of 2 seeds)", "offline"}
    for r in results.values():
        assert r["checker_violations"] == 0 and r["ar_total"] > 0
    mean = results["cpsat (mean of 2 seeds)"]
    assert mean["be_bounded_slowdown_avg"] == pytest.approx(
        sum(results[s]["be_bounded_slowdown_avg"] for s in seeds) / 2)
    assert all(results[s]["ar_accepted"] == results["greedy-aggressive"]["ar_accepted"] for s in seeds)
    offline = results["offline"]   # the Blue site is 144 alike slots: the whole half day is one cumulative
    assert offline["formulation"] == "slots" and offline["best_bound"] <= offline["objective"]
    assert table.read_text().count("\n") == 7
    bad = subprocess.run([sys.executable, str(REPO / "scripts" / "compare_schedulers.py"), "--seeds", "0,x"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--seeds '0,x'" in bad.stderr
    bad = subprocess.run([sys.executable, str(REPO / "scripts" / "compare_schedulers.py"), "--runtime-estimate",
                          "guess"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "'guess'" in bad.stderr


def test_compare_schedulers_runs_every_online_mode_with_the_runtime_estimate_asked_for():
    """--runtime-estimate user-history reaches greedy and cpsat runs alike (their bookings hold estimates and
    leases run past them), and the report says which estimate the figures are of."""
    import json
    import subprocess
    import sys

    from conftest import REPO

    def overruns(estimate: str) -> dict:
        out = subprocess.run([sys.executable, str(REPO / "scripts" / "compare_schedulers.py"), "--limit-days", "1",
                              "--modes", "greedy-aggressive,cpsat", "--time-limit", "0.2",
                              "--runtime-estimate", estimate], capture_output=True, text=True, check=True, timeout=300)
        doc = json.loads(out.stdout)
        assert set(doc["runtime_estimate"].values()) == {estimate}
        assert all(r["checker_violations"] == 0 for r in doc["results"].values())
        return {mode: r["estimate_overruns"] for mode, r in doc["results"].items()}

    assert overruns("requested") == {"greedy-aggressive": 0, "cpsat": 0}
    assert all(n > 0 for n in overruns("user-history").values())


def blue_simulator(days: float, **scheduling: str) -> tuple[Simulator, object]:
    """The first `days` of 30days.swf + work_10 on the Blue site with mapper cpsat and these [scheduling] options."""
    blue = INSTANCES / "blue"
    cfg = load_config(blue / "blue.conf", overrides={
        "scheduling": {"mapper": "cpsat", "solver-time-limit": "0.3", "solver-workers": "1", **scheduling},
        "tracefile": {"tracefile": str(blue / "30days.swf"),
                      "injectionfile": str(blue / "injected" / "work_10-dur_2h-size_1small.lwf")}})
    opts = SchedulingOptions.from_config(cfg)
    _, workload = load_workload(cfg)
    reqs = [r for r in apply_trace_options(cfg, workload.requests) if r.arrival < days * 86400]
    sim = Simulator(site_of(cfg, workload), reqs, opts, Policies(opts.policy_admission, opts.policy_preemption,
                                                                 opts.policy_host_selection),
                    EventLog(cfg.get("simulation", "starttime"), "STATUS", io.StringIO()))
    return sim, cfg


def assert_safe(sim: Simulator, result, cfg) -> None:
    doc = schedule_document(result.site, result.leases, cfg.get("simulation", "starttime"))
    assert check_schedule(doc) == []
    assert all(lease.state in (LeaseState.DONE, LeaseState.REJECTED) for lease in result.leases)


def test_solver_interval_spaces_solved_rounds_and_stays_safe():
    """With rounds solved at most once an hour, the rounds in between keep the greedy plan (SPACED)."""
    sim, cfg = blue_simulator(1.3, **{"solver-interval": "3600"})
    result = sim.run()
    records = sim.sched.round_hook.records
    solved = [r.now for r in records if r.stats.num_variables > 0]
    assert len(solved) >= 2 and any(r.stats.status == "SPACED" for r in records)
    assert all(b - a >= 3600 for a, b in zip(solved, solved[1:]))
    assert_safe(sim, result, cfg)


def test_a_work_limit_gives_a_round_the_same_plan_whatever_its_wall_clock_budget():
    """A round of 144 nodes / 50 queued that the search does not finish: with solver-work-limit, a 3 s and a 10 s
    budget end with the same plan (without it, a search stopped by the clock ends where the clock says: 0.5 s and 5 s
    gave 7,335,600 and 6,982,200). The budgets stay far above the work limit's time, which the first round of a
    process may need more of (libraries loading)."""
    spec = importlib.util.spec_from_file_location("bench_round", REPO / "scripts" / "bench_round.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    got = []
    for budget in (3.0, 10.0):
        opts = SchedulingOptions(backfilling="aggressive", mapper="cpsat", solver_time_limit=budget, solver_workers=2,
                                 solver_stall=1.0, solver_work_limit=0.05)
        r = bench.one_round(144, 50, 0, opts)
        assert r["source"] == "cpsat" and r["objective"] < r["greedy_objective"]
        got.append((r["status"], r["objective"], r["replanned"]))
    assert got[0][0] == "FEASIBLE"   # cut by the work limit, not proven optimal
    assert got[0] == got[1]


def test_a_work_limit_makes_a_cpsat_simulation_reproducible():
    """With solver-work-limit the same workload gives the same schedule, round for round: nothing in the simulator or
    the round (snapshot order, completion, commit) adds a choice of its own. That the search itself no longer depends
    on the clock is the test above: on this first day the rounds are small enough to end the same either way."""
    runs = []
    for _ in range(2):
        sim, cfg = blue_simulator(1, **{"solver-work-limit": "0.05", "solver-interval": "600"})
        result = sim.run()
        assert_safe(sim, result, cfg)
        records = sim.sched.round_hook.records
        runs.append((schedule_document(result.site, result.leases, cfg.get("simulation", "starttime")),
                     [(r.now, r.stats.status, r.stats.objective, r.changed) for r in records]))
    assert any(status in ("OPTIMAL", "FEASIBLE") and changed for _, status, _, changed in runs[0][1])
    assert runs[0] == runs[1]


def test_solver_commit_books_only_the_near_part_of_a_plan():
    """With solver-commit, every booking a round makes starts within that many seconds of the round."""
    sim, cfg = blue_simulator(2, **{"solver-commit": "3600", "solver-interval": "600"})
    hook, booked = sim.sched.round_hook, []
    commit = hook._commit

    def spy(lease, vmrr, now):
        booked.append((now, vmrr.begin()))
        commit(lease, vmrr, now)

    hook._commit = spy
    result = sim.run()
    assert booked and all(start <= now + 3600 for now, start in booked)
    assert_safe(sim, result, cfg)


def test_a_promised_booking_stays_when_a_lease_ends_early():
    """When a lease ends before its requested time, the greedy pass re-schedules the bookings for later (Haizea: each
    may start earlier). Under aggressive backfilling greedy keeps one future reservation, so every other booking went
    back to the queue, where ARs displace it again: a booking that has become a promise stays where it is instead
    (the next round may move it earlier, never later). On the month, without this the 140-VM leases waited 30 days."""
    sim, cfg = blue_simulator(2, **{"solver-promise-after": "600", "solver-interval": "600"})
    sched, kept = sim.sched, []
    reevaluate = sched.reevaluate

    def spy(now):
        promised = {lease.id: lease.last_vmrr() for lease in sched.leases.values()
                    if lease.round_promise(now)}
        reevaluate(now)
        for lease_id, vmrr in promised.items():
            lease = sched.leases[lease_id]
            assert lease.last_vmrr() is vmrr and lease.state in (LeaseState.SCHEDULED, LeaseState.SUSPENDED_SCHEDULED)
        kept.append(len(promised))

    def promised_starts(now):
        return {lease.id: lease.last_vmrr().start for lease in sched.leases.values()
                if lease.round_promise(now)}

    hook, moved = sched.round_hook, []

    def round_spy(now):   # a round may move a promise earlier, never later
        before = promised_starts(now)
        hook(now)
        after = promised_starts(now)
        assert all(after[i] <= start for i, start in before.items() if i in after)
        moved.append(sum(after.get(i, start) < start for i, start in before.items()))

    sched.reevaluate, sched.round_hook = spy, round_spy
    result = sim.run()
    assert sum(kept) > 0 and sum(moved) > 0
    assert_safe(sim, result, cfg)


def test_a_rounds_plan_moves_up_or_stays_when_a_lease_ends_early():
    """A round's booking that is still a plan is not sent back to the queue on a premature end either: it moves to
    where the lease now fits whole sooner, or stays. In the queue, leases booked after it took its place; on the
    month (seed 1) two 50-node leases went back to the queue 31 times and waited 21 h (models/cpsat-round.md).
    A booking is tried again only where the site as a whole has room for it sooner: where that says no, booking it
    again (as it was before that test) would not have moved it either."""
    sim, cfg = blue_simulator(2, **{"solver-interval": "600"})
    sched, kept, moved, answers = sim.sched, [], [], []
    reevaluate, may_begin_before = sched.reevaluate, sched.vm.may_begin_before

    def filter_spy(vmrr, now, resuming):
        answer = may_begin_before(vmrr, now, resuming)
        answers.append(answer)
        assert answer or not booked_again_begins_earlier(sched, vmrr.lease, now)
        return answer

    def spy(now):
        plans = {lease.id: lease.last_vmrr().begin() for lease in sched.leases.values()
                 if lease.round_plan() is not None and not lease.round_promise(now)}
        reevaluate(now)
        for lease_id, before in plans.items():
            lease = sched.leases[lease_id]
            assert lease.state in BOOKED and lease.last_vmrr().begin() <= before
            (moved if lease.last_vmrr().begin() < before else kept).append(lease_id)

    sched.reevaluate, sched.vm.may_begin_before = spy, filter_spy
    result = sim.run()
    assert moved and kept and True in answers and False in answers
    assert_safe(sim, result, cfg)


def test_an_ar_may_displace_a_rounds_booking_until_it_becomes_a_promise():
    """Haizea never preempts a lease that has waited seven days (its age counted at the AR's start). A CP-SAT round's
    booking that has not begun is a plan: an AR that arrives before the booking becomes a promise (its lease has then
    waited solver-promise-after, here seven days) may still send it back to the queue, however old the lease
    will be at the AR's start (else young leases' far bookings refuse ARs); an AR that arrives later may not (else a
    lease that needs the whole site is displaced by every AR, for weeks)."""
    from optlease.domain.lease import LeaseRequest
    from optlease.scheduling.policies import AGING_HORIZON, ARPreemptsEverything
    from optlease.scheduling.records import RR, VM, Lease

    vm = {"CPU": 100, "Memory": 1024}
    old = Lease(LeaseRequest(1, LeaseKind.BEST_EFFORT, 0, 3600, (vm,), preemptible=True), {1: (100, 1024)})
    later = AGING_HORIZON + 86400
    old.vmrrs.append(RR(old, VM, later, later + 3600, {1: 1}, {1: (100, 1024)}, 1))
    early = Lease(LeaseRequest(2, LeaseKind.AR, AGING_HORIZON - 60, 3600, (vm,), start=later), {1: (100, 1024)})
    late = Lease(LeaseRequest(3, LeaseKind.AR, AGING_HORIZON + 60, 3600, (vm,), start=later), {1: (100, 1024)})
    policy = ARPreemptsEverything()
    assert policy.score(early, old, later) == -1     # greedy's booking: protected by its age at the AR's start
    old.vmrrs[-1].promised_from = AGING_HORIZON
    assert policy.score(early, old, later) == 0      # the round's plan: it gives way, after younger leases
    assert policy.score(late, old, later) == -1      # it had become a promise when this AR arrived
    old.vmrrs[-1].promised_from = AGING_HORIZON + 3600
    assert policy.score(late, old, later) == 0       # a later promise (solver-promise-after longer than the horizon)
    old.vmrrs[-1].state = "active"
    assert policy.score(early, old, later) == -1     # once it runs, its age protects it again
    now = AGING_HORIZON + 60
    young = Lease(LeaseRequest(4, LeaseKind.BEST_EFFORT, now - 60, 3600, (vm,), preemptible=True), {1: (100, 1024)})
    assert policy.score(late, young, now) > 0
    young.vmrrs.append(RR(young, VM, later, later + 3600, {1: 1}, {1: (100, 1024)}, 2))
    young.vmrrs[-1].promised_from = now - 60
    assert policy.score(late, young, now) == -1      # solver-promise-after shorter than the horizon: a promise now
    young.vmrrs[-1].promised_from = NOT_PROMISED
    assert policy.score(late, young, now) > 0        # solver-promises older leases hold promises: a plan again


def test_an_ar_moves_the_promises_in_its_way_only_within_the_slack():
    """With solver-promise-slack, an AR the greedy pass refused is admitted by booking the promises in its way again
    after it (and, where they would wait behind the line, the bookings behind them too), when each promise still
    begins at most its slack after the earliest begin it was promised: the slack, or where more
    solver-promise-share of its wait and run at that begin; otherwise the AR is refused and every promise stays
    exactly where it was. On work_20 promised bookings refused nearly every AR."""
    sim, cfg = blue_simulator(2, **{"solver-promise-after": "600", "solver-interval": "600",
                                     "solver-promise-slack": "3600", "solver-promise-share": "0.2",
                                     "solver-promise-stretch": "0"})
    sched, outcomes, by_share = sim.sched, [], []
    displace = sched._displace_promises

    def slack(vmrr) -> int:
        return max(3600, int(0.2 * (vmrr.begin() - vmrr.lease.req.arrival + vmrr.end - vmrr.start)))

    def spy(ar, now, stretch=False):
        before = {lease.id: (lease.last_vmrr(), lease.last_vmrr().begin()) for lease in sched.leases.values()
                  if lease.round_promise(now)}
        admitted = displace(ar, now, stretch)
        after = {lease.id: (lease.last_vmrr(), lease.last_vmrr().begin()) for lease in sched.leases.values()
                 if lease.round_promise(now)}
        assert after.keys() == before.keys()   # nothing lost, nothing sent back to the queue
        moved = [i for i in before if after[i][0] is not before[i][0]]
        if admitted:
            assert ar.state is LeaseState.SCHEDULED and ar.last_vmrr().start == ar.req.start and moved
            assert all(after[i][1] <= before[i][1] + slack(before[i][0]) and after[i][1] <= sched.leases[i].promise_by
                       for i in moved)
            by_share.extend(after[i][1] > before[i][1] + 3600 for i in moved)
        else:
            assert ar.state is LeaseState.PENDING and not ar.vmrrs and not moved
        outcomes.append(admitted)
        return admitted

    sched._displace_promises = spy
    result = sim.run()
    assert True in outcomes and False in outcomes
    assert True in by_share   # a promise that had waited long moved further than the slack alone allows
    assert_safe(sim, result, cfg)


@pytest.mark.parametrize("slack,admitted", [(900, True), (500, False)])
def test_an_ar_moves_the_line_behind_a_promise_where_moving_the_promise_alone_is_too_late(slack, admitted):
    """Two nodes: lease 1 runs until 1,000 s, promises 2 and 3 (both nodes, 1,000 s each) are booked one after the
    other from 1,000 s. An AR asks for one node from 1,500 s to 1,600 s. Moving promise 2 alone puts it behind
    promise 3, 2,000 s late; moving the line behind it too puts each only 600 s later. With a slack of 900 s (share
    0) the AR is admitted that way and each promise's first limit is recorded; with 500 s it is refused and both
    promises stay where they were."""
    from test_node_down import lease, scheduler

    sched = scheduler(2, backfilling="conservative", policy_preemption="ar-preempts-everything",
                      solver_promise_slack=slack, solver_promise_share=0.0)
    leases = [lease(sched, i, duration=1000, vms=2) for i in (1, 2, 3)]
    for x in leases:
        sched.request(x, 0)
    sched.schedule(0)
    assert [x.last_vmrr().begin() for x in leases] == [0, 1000, 2000]
    for x in leases[1:]:
        x.last_vmrr().promised_from = 0   # as a round's booking that has become a promise
    ar = lease(sched, 4, arrival=10, duration=100, kind=LeaseKind.AR, start=1500)
    sched.request(ar, 10)
    sched.schedule(10)
    if admitted:
        assert ar.state is LeaseState.SCHEDULED and ar.last_vmrr().start == 1500
        assert [x.last_vmrr().begin() for x in leases[1:]] == [1600, 2600]
        assert [x.promise_by for x in leases[1:]] == [1000 + slack, 2000 + slack]
        assert all(x.round_promise(10) for x in leases[1:])   # still promises
    else:
        assert ar.state is LeaseState.REJECTED
        assert [x.last_vmrr().begin() for x in leases[1:]] == [1000, 2000]
        assert all(x.round_promise(10) and x.promise_by == NOT_PROMISED for x in leases[1:])



@pytest.mark.parametrize("stretch,admitted", [(0.0, False), (0.25, False), (0.3, True)])
def test_an_ar_nothing_else_places_may_stretch_the_promises_up_to_a_limit_in_all(stretch, admitted):
    """As above with a slack of 500 s (share 0), too little for the AR at 1,500 s: solver-promise-stretch then lets
    it move each promise by that share of the wait and run it had when first moved, in all. With 0.3 promise 2
    (1,000 s waited, 1,000 s run) may begin 600 s later and promise 3 900 s: the AR is admitted, both move 600 s,
    and their limits are recorded; a second AR from 2,700 s to 3,000 s, which would need promise 3 to begin 400 s
    later again, is refused, as 0.3 of its wait and run then would allow but its first stretch's limit (2,900 s)
    does not. With 0.25 (500 s for promise 2) and with the stretch off the first AR is refused and nothing moves."""
    from test_node_down import lease, scheduler

    sched = scheduler(2, backfilling="conservative", policy_preemption="ar-preempts-everything",
                      solver_promise_slack=500, solver_promise_share=0.0, solver_promise_stretch=stretch)
    leases = [lease(sched, i, duration=1000, vms=2) for i in (1, 2, 3)]
    for x in leases:
        sched.request(x, 0)
    sched.schedule(0)
    for x in leases[1:]:
        x.last_vmrr().promised_from = 0   # as a round's booking that has become a promise
    ar = lease(sched, 4, arrival=10, duration=100, kind=LeaseKind.AR, start=1500)
    sched.request(ar, 10)
    sched.schedule(10)
    if not admitted:
        assert ar.state is LeaseState.REJECTED
        assert [(x.last_vmrr().begin(), x.promise_by, x.stretch_by) for x in leases[1:]] == \
            [(1000, NOT_PROMISED, NOT_PROMISED), (2000, NOT_PROMISED, NOT_PROMISED)]
        return
    assert ar.state is LeaseState.SCHEDULED and ar.last_vmrr().start == 1500
    assert [(x.last_vmrr().begin(), x.promise_by, x.stretch_by) for x in leases[1:]] == \
        [(1600, 1500, 1600), (2600, 2500, 2900)]
    ar2 = lease(sched, 5, arrival=20, duration=300, kind=LeaseKind.AR, start=2700)
    sched.request(ar2, 20)
    sched.schedule(20)
    assert ar2.state is LeaseState.REJECTED
    assert [x.last_vmrr().begin() for x in leases[1:]] == [1600, 2600]


@pytest.mark.parametrize("admit, guard", [(True, 21600), (True, 5), (False, 21600)])
def test_the_round_model_admits_an_ar_by_suspending_a_running_lease_and_moving_a_promise(admit, guard):
    """Two nodes: preemptible lease 1 runs on one from 0 s (5,000 s), lease 2 on the other to 1,001 s, and promise 3
    follows it there to 2,001 s. An AR asks at 10 s for both nodes from 1,500 s to 1,600 s. Greedy could suspend
    lease 1 but not move the promise, and moving the promise (the limits' step) does not preempt: both refuse it. The
    round model admits it by doing both: lease 1 is suspended to end at 1,500 s (written in 32 s) and resumes on its
    node after the AR, promise 3 starts at 1,600 s, 599 s later and within its limit. So it does too where promise 3
    has waited past the wait guard (5 s): its limit, not the guard, bounds it (a guard that held it at its booking
    refused the AR). With solver-admit: no the AR is refused and nothing moves."""
    from test_node_down import lease, scheduler
    from optlease.domain.lease import LeaseRequest
    from optlease.engine.loop import Stepper
    from optlease.scheduling.records import Lease

    sched = scheduler(2, mapper="cpsat", policy_preemption="ar-preempts-everything", solver_admit=admit,
                      solver_workers=1, solver_work_limit=0.05, solver_wait_guard=guard)
    req = LeaseRequest(1, LeaseKind.BEST_EFFORT, 0, 5000, (VM1,), preemptible=True)
    l1 = Lease(req, {1: sched.table.vector(VM1)})
    l2, l3 = lease(sched, 2, arrival=1, duration=1000), lease(sched, 3, arrival=2, duration=1000)
    step = Stepper(sched)
    for t, x in enumerate((l1, l2, l3)):
        step.step(t, [x])
    assert [(x.state, x.last_vmrr().begin()) for x in (l1, l2, l3)] == \
        [(LeaseState.ACTIVE, 0), (LeaseState.ACTIVE, 1), (LeaseState.SCHEDULED, 1001)]
    l3.last_vmrr().promised_from = 0   # as a round's booking that has become a promise
    ar = lease(sched, 4, arrival=10, duration=100, vms=2, kind=LeaseKind.AR, start=1500)
    step.step(10, [ar])
    if not admit:
        assert ar.state is LeaseState.REJECTED
        assert (l1.last_vmrr().end, l3.last_vmrr().begin()) == (5000, 1001)
        return
    assert ar.state is LeaseState.SCHEDULED and ar.last_vmrr().start == 1500
    assert [(rr.kind, rr.start, rr.end) for rr in l1.last_vmrr().post] == [("suspend", 1468, 1500)]
    # its first move's limits are kept (the stretch's too: 0.07 of its wait and run is less than the slack)
    assert (l3.last_vmrr().begin(), l3.promise_by, l3.stretch_by) == (1600, 1001 + 7200, 1001 + 7200)
    assert [(a.now, a.lease_id, a.admitted, a.moved, a.suspended) for a in sched.round_hook.admissions] == \
        [(10, 4, True, 1, 1)]
    now = 10
    while (t := step.next_event(now)) is not None:
        now = t
        step.step(now)
    doc = schedule_document(sched.site, list(sched.leases.values()), ORIGIN)
    assert [str(v) for v in check_schedule(doc)] == []
    assert all(x.state is LeaseState.DONE for x in sched.leases.values())
    assert [(h.kind, h.start, h.end) for h in l1.held][:4] == \
        [("vm", 0, 1468), ("suspend", 1468, 1500), ("resume", 1600, 1632), ("vm", 1632, 5164)]

def test_only_the_oldest_leases_bookings_are_promises():
    """With solver-promises 2, after every round the two earliest-arrived leases among those a round has booked to
    start (resume bookings stay plans by default) hold promises (from solver-promise-after); the later ones'
    bookings stay plans that ARs may displace, so that a long queue of promised bookings does not refuse every AR
    (work_20: 253 of 285 ARs with every booking a promise)."""
    sim, cfg = blue_simulator(2, **{"solver-promise-after": "600", "solver-interval": "600",
                                     "solver-promises": "2"})
    sched = sim.sched
    hook, crowded = sched.round_hook, []

    def round_spy(now):
        hook(now)
        booked = sorted((lease for lease in sched.leases.values() if lease.round_plan() is not None),
                        key=lambda lease: (lease.req.arrival, lease.id))
        assert all(lease.round_plan() == NOT_PROMISED for lease in booked if lease.is_suspended())
        booked = [lease for lease in booked if not lease.is_suspended()]
        assert [lease.round_plan() for lease in booked[:2]] == [lease.req.arrival + 600 for lease in booked[:2]]
        assert all(lease.round_plan() == NOT_PROMISED and not lease.round_promise(now) for lease in booked[2:])
        crowded.append(len(booked) > 2)

    sched.round_hook = round_spy
    result = sim.run()
    assert any(crowded)
    assert_safe(sim, result, cfg)


def test_the_completion_books_long_waiting_leases_in_arrival_order_then_the_shortest_weighted_run_first():
    """The hint's line: leases that have waited past solver-wait-guard (6 h) keep their place in arrival order; the
    others go by run time over their weight in the objective (aging: 1 + hours waited; with weight-slowdown, times
    an hour over the run), so a short young lease does not wait behind a long one (Smith's rule for the weighted
    completion time the round minimizes); ties in arrival order."""
    from types import SimpleNamespace

    from optlease.domain.lease import LeaseRequest
    from optlease.scheduling.estimate import RunEstimates
    from optlease.scheduling.records import Lease
    from optlease.scheduling.snapshot import Weights

    now, vm = 10 * 3600, {"CPU": 100, "Memory": 1024}

    def lease(lease_id: int, waited: int, duration: int) -> Lease:
        req = LeaseRequest(lease_id, LeaseKind.BEST_EFFORT, now - waited, duration, (vm,))
        return Lease(req, {1: (100, 1024)})

    leases = [lease(1, 7 * 3600, 10 * 3600), lease(2, 8 * 3600, 3600), lease(3, 3600, 7200), lease(4, 600, 1800),
              lease(5, 5 * 3600, 3 * 3600)]

    def line(**opts) -> list[int]:
        hook = CpsatRound.__new__(CpsatRound)
        options = SchedulingOptions(mapper="cpsat", **opts)
        hook.sched = SimpleNamespace(opts=options, vm=SimpleNamespace(estimates=RunEstimates(options)))
        return [lease.id for lease in hook._line(now, leases)]

    # 2 and 1 waited past 6 h; then by run / (aging weight x 3,600 / run): 4 (1,800 / 2), 5 (10,800 / 6 x 1/3 -> 2),
    # 3 (7,200 / 2 x 1/2 -> 1)
    assert line() == [2, 1, 4, 5, 3]
    assert line(solver_wait_guard=0) == [2, 4, 5, 3, 1]   # no guard: 1 (36,000 / 1) last
    # the plain weighted completion time: 5 (10,800 / 6) and 4 (1,800 / 1) tie, 5 arrived first; then 3 (7,200 / 2)
    assert line(weights=Weights(slowdown=0)) == [2, 1, 5, 4, 3]


def test_a_completion_the_budget_cuts_short_leaves_a_hint_that_fits(monkeypatch):
    """When the round's budget runs out during the completion (5,000 nodes / 2,000 queued), the leases it did not
    reach keep their bookings where these still fit around what it booked, and are deferred in the hint where they
    do not: the completed hint stays a plan the slot table can take, so a round that commits it never has to undo."""
    import time
    from types import SimpleNamespace

    import optlease.scheduling.round_hint as round_hint
    from optlease.scheduling.cpsat.decode import holding_plan
    from optlease.scheduling.cpsat.prepare import prepare
    from optlease.scheduling.snapshot import Plan

    sim, cfg = blue_simulator(2, **{"solver-interval": "600"})
    hook = sim.sched.round_hook
    late = {"by": 0.0}   # the completion's clock: its budget is spent once it has booked one lease
    monkeypatch.setattr(round_hint, "time", SimpleNamespace(perf_counter=lambda: time.perf_counter() + late["by"]))
    asap, complete, keep = hook._asap, hook._complete, hook._keep
    kept = []

    def asap_spy(lease, now):
        late["by"] = 1e6
        return asap(lease, now)

    def complete_spy(now, movable):
        late["by"] = 0.0
        try:
            return complete(now, movable)
        finally:
            late["by"] = 0.0

    def keep_spy(leases, added):
        out = keep(leases, added)
        kept.append(sum(1 for lease in leases if lease.state in BOOKED) - len(out))
        return out

    snapshot, hints = hook.snapshot, []

    def snapshot_spy(now, movable, *running):
        snap, greedy, hint = snapshot(now, movable, *running)
        hints.append((snap, hint))
        return snap, greedy, hint

    hook._asap, hook._complete, hook._keep, hook.snapshot = asap_spy, complete_spy, keep_spy, snapshot_spy
    result = sim.run()
    assert sum(kept) > 0   # cut completions left bookings where they were
    for snap, hint in hints:   # no node over its capacity in any completed hint (running leases as they run)
        held = holding_plan(prepare(snap, hook.options.weights, hook.options.lookahead)).by_id
        check_plan(snap, Plan(tuple({**held, **hint.by_id}.values())))
    assert_safe(sim, result, cfg)


def test_the_completion_leaves_part_of_the_budget_for_preparing_the_model(monkeypatch):
    """The hint's completion stops at 70 % of solver-time-limit, before the search's 85 %: the model's data, which
    costing greedy's plan and the hint needs even when no search is left, is prepared within the round's budget (at
    1,000 nodes / 500 queued the completion alone fills any budget)."""
    import time
    from types import SimpleNamespace

    import optlease.scheduling.round_hint as round_hint

    sim, cfg = blue_simulator(1)
    hook = sim.sched.round_hook
    clock = {"share": 0.0}   # the completion's clock, as a share of the round's budget
    monkeypatch.setattr(round_hint, "time", SimpleNamespace(
        perf_counter=lambda: hook.sched.round_began + clock["share"] * hook.options.time_limit))
    asap, complete, searched = hook._asap, hook._complete, {}

    def asap_spy(lease, now):
        searched[clock["share"]] = searched.get(clock["share"], 0) + 1
        return asap(lease, now)

    def complete_spy(now, movable):
        for share in (0.75, 0.65):   # the last call's hint is the round's
            clock["share"] = share
            out = complete(now, movable)
        return out

    hook._asap, hook._complete = asap_spy, complete_spy
    result = sim.run()
    assert searched.get(0.75, 0) == 0 < searched[0.65]
    assert_safe(sim, result, cfg)


@pytest.mark.parametrize("promise_resumes", ["yes", "no"])
def test_resume_bookings_are_promises_unless_solver_promise_resumes_says_no(promise_resumes):
    """A round's booking to resume a suspended lease becomes a promise like any other (from solver-promise-after); with
    solver-promise-resumes: no it stays a plan that ARs may displace (on work_20 large that let 164 of 172 ARs in,
    against 151), while bookings of leases that have not started still become promises."""
    sim, cfg = blue_simulator(1.5, **{"solver-promise-after": "600", "solver-interval": "600",
                                     "runtime-estimate": "user-history", "solver-promise-resumes": promise_resumes})
    sched = sim.sched
    hook, seen = sched.round_hook, {"resumes": 0, "starts": 0}

    def round_spy(now):
        hook(now)
        for lease in sched.leases.values():
            promised_from = lease.round_plan()
            if promised_from is None:
                continue
            if lease.is_suspended():
                seen["resumes"] += 1
                expected = lease.req.arrival + 600 if promise_resumes == "yes" else NOT_PROMISED
            else:
                seen["starts"] += 1
                expected = lease.req.arrival + 600
            assert promised_from == expected, (lease.id, promised_from)

    sched.round_hook = round_spy
    result = sim.run()
    assert seen["resumes"] > 0 and seen["starts"] > 0
    assert_safe(sim, result, cfg)


VM1 = {"CPU": 100, "Memory": 1024}   # one VM fills a node of the sites below


def run_requests(resources: str, reqs, **opts):
    """A workload simulated with these options (aggressive backfilling); its schedule passes the checker. The
    simulator, the leases by id, the schedule document and the run summary."""
    from optlease.domain.site import Site

    opts = SchedulingOptions(backfilling="aggressive", **opts)
    sim = Simulator(Site.parse_resources(resources), reqs, opts,
                    Policies(opts.policy_admission, opts.policy_preemption, opts.policy_host_selection),
                    EventLog(ORIGIN, "INFO", io.StringIO()))
    result = sim.run()
    doc = schedule_document(result.site, result.leases, ORIGIN)
    assert [str(v) for v in check_schedule(doc)] == []
    return sim, {lease.id: lease for lease in result.leases}, doc, run_summary(result.site, result.leases,
                                                                               result.end_time)


def reservations(doc, lease_id: int) -> list[tuple]:
    """A lease's reservations in a schedule document: (kind, start, end, nodes), times as seconds since 13:00."""
    def sec(stamp: str) -> int:
        h, m, s = map(int, stamp[11:19].split(":"))
        return (h - 13) * 3600 + m * 60 + s

    lease = next(item for item in doc["leases"] if item["id"] == lease_id)
    return [(r["kind"], sec(r["start"]), sec(r["end"]), sorted(r["mapping"].values())) for r in lease["reservations"]]


@pytest.mark.parametrize("mapper", ["greedy", "cpsat"])
def test_the_round_model_admits_an_immediate_lease_greedy_refuses_by_moving_a_plan(mapper):
    """Two nodes. Lease 1 runs on one node until 1,000 s, lease 2 on the other until 500 s; lease 3 (both nodes) is
    booked from 1,000 s. Immediate lease 4 asks at 600 s for one node for 600 s: greedy refuses it (now or never,
    and lease 3's booking is in the way at 1,000 s). With mapper cpsat the round model is offered what greedy refused:
    it admits lease 4 and books lease 3 from 1,200 s instead — an accepted lease against 200 s more of waiting for a
    plan that was no promise. With solver-admit: no greedy's refusal stands."""
    from optlease.domain.lease import LeaseRequest

    reqs = [LeaseRequest(1, LeaseKind.BEST_EFFORT, 0, 1000, (VM1,)),
            LeaseRequest(2, LeaseKind.BEST_EFFORT, 0, 500, (VM1,)),
            LeaseRequest(3, LeaseKind.BEST_EFFORT, 10, 500, (VM1, VM1)),
            LeaseRequest(4, LeaseKind.IMMEDIATE, 600, 600, (VM1,))]
    sim, leases, _, _ = run_requests("2 CPU:100 Memory:1024", reqs, mapper=mapper)
    if mapper == "greedy":
        assert leases[4].state is LeaseState.REJECTED and leases[3].first_start == 1000
        return
    assert leases[4].state is LeaseState.DONE and leases[4].first_start == 600
    assert leases[3].first_start == 1200
    assert [(a.now, a.lease_id, a.admitted, a.moved) for a in sim.sched.round_hook.admissions] == [(600, 4, True, 1)]
    _, refused, _, _ = run_requests("2 CPU:100 Memory:1024", reqs, mapper=mapper, solver_admit=False)
    assert refused[4].state is LeaseState.REJECTED and refused[3].first_start == 1000


# Lease 1 (preemptible) runs on a node from 0 s; AR 5 (asked at 100 s) takes that node from 300 s to 900 s and suspends
# lease 1 there (32 s to write its 1,024 MB, 32 s to read it back)
SUSPENDED_BY_AN_AR = [(1, LeaseKind.BEST_EFFORT, 0, 1000, {"preemptible": True}),
                      (5, LeaseKind.AR, 100, 600, {"start": 300})]


def test_where_cpsat_differs_it_resumes_where_the_image_is_and_lets_a_waiting_lease_run():
    """Two nodes, `migration: yes` at 16 Mbit/s (a 1,024 MB image takes 512 s to copy). Lease 2 holds the other node,
    booked to 1,000 s but done at 300 s, so the AR had to suspend lease 1; lease 4 (600 s) arrives at 300 s.
    Greedy, in arrival order, books lease 1's resume on the freed node — copying its image from 300 s to 812 s —
    and lease 4 waits for the AR's node until 900 s. The round model lets lease 4 run on the freed node at once and
    resumes lease 1 where its image is when the AR ends: no copy, lease 4 waits 0 s instead of 600 s, and the
    bounded slowdown falls; lease 1 finishes 88 s later (the last best-effort completion with it)."""
    from optlease.domain.lease import LeaseRequest

    reqs = [LeaseRequest(i, kind, arrival, duration, (VM1,), **kw) for i, kind, arrival, duration, kw in
            [*SUSPENDED_BY_AN_AR, (2, LeaseKind.BEST_EFFORT, 0, 1000, {"real_duration": 300}),
             (4, LeaseKind.BEST_EFFORT, 300, 600, {})]]
    opts = dict(migration="yes", bandwidth=16, policy_preemption="ar-preempts-everything")
    _, greedy, gdoc, theirs = run_requests("2 CPU:100 Memory:1024", reqs, mapper="greedy", **opts)
    sim, ours, doc, mine = run_requests("2 CPU:100 Memory:1024", reqs, mapper="cpsat", **opts)
    image = reservations(gdoc, 1)[1][3]   # where lease 1 was suspended
    assert [r[:3] for r in reservations(gdoc, 1)[2:4]] == [("migrate", 300, 812), ("resume", 812, 844)]
    assert reservations(gdoc, 4)[0][:2] == ("vm", 900)
    assert [r[:3] for r in reservations(doc, 1)[2:3]] == [("resume", 900, 932)]
    assert reservations(doc, 1)[2][3] == image
    assert reservations(doc, 4)[0][:2] == ("vm", 300) and reservations(doc, 4)[0][3] != image
    assert (greedy[1].migrations, ours[1].migrations) == (1, 0)
    g, o = theirs["best_effort"], mine["best_effort"]
    assert (g["wait_avg"], o["wait_avg"], g["wait_max"], o["wait_max"]) == (200, 0, 600, 0)
    assert o["bounded_slowdown_avg"] < g["bounded_slowdown_avg"]
    assert o["all_completed_at"] - g["all_completed_at"] == 88
    changed = [(r.now, r.changed, r.stats.source) for r in sim.sched.round_hook.records if r.changed]
    assert changed == [(300, 2, "cpsat")]


def test_where_cpsat_differs_it_copies_an_image_while_the_target_node_is_still_busy():
    """Three nodes, `migration: yes` at 128 Mbit/s (64 s per image). Lease 2 holds a node to 2,000 s and lease 3 one
    to 400 s; lease 4 (all three nodes) waits for 2,000 s and holds aggressive backfilling's one reservation, so when
    the AR suspends lease 1 at 300 s greedy cannot book its resume ahead: at 400 s it books the copy to lease 3's
    node from then on (400-464 s) and the resume after it. The round at 300 s books the same move with the copy in
    the 64 s before lease 3 ends (336-400 s, a copy holds no node), so lease 1 resumes at 400 s, 64 s sooner."""
    from optlease.domain.lease import LeaseRequest

    reqs = [LeaseRequest(i, kind, arrival, duration, vms, **kw) for i, kind, arrival, duration, vms, kw in
            [(*head, (VM1,), kw) for *head, kw in SUSPENDED_BY_AN_AR] +
            [(2, LeaseKind.BEST_EFFORT, 0, 2000, (VM1,), {}), (3, LeaseKind.BEST_EFFORT, 0, 400, (VM1,), {}),
             (4, LeaseKind.BEST_EFFORT, 50, 100, (VM1, VM1, VM1), {})]]
    opts = dict(migration="yes", bandwidth=128, policy_preemption="ar-preempts-everything")
    _, greedy, gdoc, _ = run_requests("3 CPU:100 Memory:1024", reqs, mapper="greedy", **opts)
    sim, ours, doc, _ = run_requests("3 CPU:100 Memory:1024", reqs, mapper="cpsat", **opts)
    target = reservations(gdoc, 3)[0][3]   # lease 3's node
    assert reservations(gdoc, 1)[2:4] == [("migrate", 400, 464, target), ("resume", 464, 496, target)]
    assert reservations(doc, 1)[2:4] == [("migrate", 336, 400, target), ("resume", 400, 432, target)]
    assert (greedy[1].migrations, ours[1].migrations) == (1, 1)
    assert reservations(doc, 1)[4][:3] == ("vm", 432, reservations(gdoc, 1)[4][2] - 64)   # done 64 s sooner
    assert [(r.now, r.stats.source) for r in sim.sched.round_hook.records if r.changed] == [(300, "cpsat")]
