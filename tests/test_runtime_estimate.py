"""`[scheduling] runtime-estimate: user-history`: best-effort bookings hold the mean of the user's last two runs
(plus the time to suspend), and a lease that runs past that gets the rest of its requested time, never less."""
from __future__ import annotations

import dataclasses
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optlease.checker import check_schedule
from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from optlease.domain.site import Site
from optlease.engine.simulator import Simulator
from optlease.eventlog import EventLog
from optlease.formats.schedule_json import schedule_document
from optlease.scheduling.estimate import RunEstimates
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.records import VM, Lease
from test_simulator_properties import ORIGIN, options, sites, vm

VMSPEC = {"CPU": 100, "Memory": 1024}
ESTIMATES = SchedulingOptions(runtime_estimate="user-history", suspend_rate=32.0, resume_rate=32.0,
                              policy_preemption="ar-preempts-everything")


def be(lease_id: int, user: str, arrival: int, duration: int, real: int) -> LeaseRequest:
    return LeaseRequest(lease_id, LeaseKind.BEST_EFFORT, arrival, duration, (VMSPEC,), preemptible=True,
                        real_duration=real, extra={"user": user})


def lease(req: LeaseRequest) -> Lease:
    return Lease(req, {v + 1: (vm["CPU"], vm["Memory"]) for v, vm in enumerate(req.vms)})


def test_an_estimate_is_the_users_last_two_runs_plus_the_time_to_suspend():
    estimates = RunEstimates(ESTIMATES)
    new = lease(be(9, "u", 0, 3600, 3600))
    assert estimates.booked_run(new) == 3600            # no history: what it asked for
    for lease_id, ran in ((1, 100), (2, 500), (3, 900)):
        done = lease(be(lease_id, "u", 0, 3600, ran))
        done.accumulated = ran
        estimates.learn(done)
    assert estimates.booked_run(new) == (500 + 900) // 2 + 32   # the last two runs, and 1,024 MB at 32 MB/s
    assert estimates.booked_run(lease(be(10, "w", 0, 3600, 3600))) == 3600   # another user's history is not its own
    short = lease(be(11, "u", 0, 600, 600))
    assert estimates.booked_run(short) == 600            # the estimate and margin would be longer than its request
    started = lease(be(12, "u", 0, 3600, 3600))
    started.accumulated = 60
    assert estimates.booked_run(started) == 700 - 60 + 32   # suspended before its estimate ran out: the rest of it
    started.overruns = 1
    assert estimates.booked_run(started) == 3540         # it has run past an estimate: the rest of its request
    past = lease(be(14, "u", 0, 3600, 3600))
    past.accumulated = 800
    assert estimates.booked_run(past) == 2800            # it has run longer than the estimate: the rest of its request
    fixed = lease(LeaseRequest(13, LeaseKind.BEST_EFFORT, 0, 3600, (VMSPEC,), extra={"user": "u"}))
    assert estimates.booked_run(fixed) == 3600           # not preemptible: it could not make way for an AR
    assert RunEstimates(SchedulingOptions(suspend_rate=32.0)).booked_run(new) == 3600   # runtime-estimate requested


def simulate(reqs: list[LeaseRequest], opts: SchedulingOptions = ESTIMATES, nodes: int = 1):
    site = Site.homogeneous(nodes, VMSPEC)
    out = io.StringIO()
    sim = Simulator(site, reqs, opts, Policies(opts.policy_admission, opts.policy_preemption,
                                               opts.policy_host_selection), EventLog(ORIGIN, "INFO", out))
    result = sim.run()
    assert [str(v) for v in check_schedule(schedule_document(result.site, result.leases, ORIGIN))] == []
    return {lease.id: lease for lease in result.leases}, out.getvalue()


def runs(lease: Lease) -> list[tuple[int, int]]:
    return [(h.start, h.end) for h in lease.held if h.kind == VM]


# Lease 1 teaches the estimate (user u ran 600 s). Lease 2 of u asks for an hour and runs 2,000 s: it is booked
# [1000, 1632), 600 s and 32 s to suspend, with its checkpoint at 1600.
HISTORY = [be(1, "u", 0, 3600, 600), be(2, "u", 1000, 3600, 2000)]


@pytest.mark.parametrize("mapper", ["greedy", "cpsat"])
def test_a_lease_that_runs_past_its_estimate_runs_on_and_what_was_booked_behind_it_waits(mapper):
    """Lease 3 arrives at 1100 and is booked behind lease 2's estimate, from 1632. At 1600 lease 2 still runs: it
    keeps running, lease 3 goes back to the queue, and starts when lease 2 really ends at 3000. (Under cpsat with
    `solver-suspend: for-waiting` the round may instead suspend lease 2 for lease 3: tests/test_round_suspensions.py;
    here it suspends only for ARs, as greedy does.)"""
    opts = dataclasses.replace(ESTIMATES, mapper=mapper, solver_suspend="no")
    leases, log = simulate([*HISTORY, be(3, "v", 1100, 600, 600)], opts)
    assert runs(leases[2]) == [(1000, 3000)] and leases[2].suspensions == 0
    assert leases[3].first_start == 3000 and leases[3].state is LeaseState.DONE
    assert "Lease #2 runs past its estimate" in log and "Lease #3 goes back to the queue: lease #2 runs on" in log
    # with the requested time booked, lease 3 waits for lease 2's end just the same: nothing is lost by estimating
    same, _ = simulate([*HISTORY, be(3, "v", 1100, 600, 600)],
                       dataclasses.replace(opts, runtime_estimate="requested"))
    assert runs(same[2]) == [(1000, 3000)] and same[3].first_start == 3000


def test_a_lease_running_past_its_estimate_never_pushes_back_a_lease_that_came_first():
    """Two nodes. Lease 5 runs on node 2 until 5000; lease 3 arrives at 700 for both nodes and is booked from 5000.
    Lease 2 (u's, estimated 632 s) fits on node 1 before that, from 1000. At 1600 it still runs: growing to its
    requested 6,000 s would push lease 3 back, which came first; so it runs until it must be suspended for lease 3
    (32 s before 5000), and resumes on its node when lease 3 is done. Its whole run is kept."""
    reqs = [be(1, "u", 0, 3600, 600), be(2, "u", 1000, 6000, 4500),
            LeaseRequest(3, LeaseKind.BEST_EFFORT, 700, 3600, (VMSPEC, VMSPEC), preemptible=True, real_duration=3600),
            be(5, "w", 0, 5000, 5000)]
    leases, log = simulate(reqs, nodes=2)
    assert runs(leases[3]) == [(5000, 8600)]
    assert runs(leases[2]) == [(1000, 4968), (8632, 9164)] and leases[2].suspensions == 1
    assert "goes back to the queue" not in log


def test_an_ar_booked_behind_an_estimate_starts_on_time_and_the_lease_is_suspended_for_it():
    """An AR arriving at 1200 for [1632, 2132) fits after lease 2's estimate. At the checkpoint, 1600, lease 2 still
    runs: it is suspended in the 32 s its booking kept for that, the AR starts exactly on time, and lease 2 resumes
    after the AR (32 s) and runs the 1,400 s it had left: nothing of its run is lost."""
    ar = LeaseRequest(4, LeaseKind.AR, 1200, 500, (VMSPEC,), start=1632)
    leases, log = simulate([*HISTORY, ar])
    assert leases[4].state is LeaseState.DONE and runs(leases[4]) == [(1632, 2132)]
    assert leases[2].suspensions == 1 and runs(leases[2]) == [(1000, 1600), (2164, 3564)]
    assert sum(end - start for start, end in runs(leases[2])) == 2000
    assert leases[2].end == 3564 and leases[2].state is LeaseState.DONE


@pytest.mark.parametrize("estimate", ["user-history", "requested"])
def test_a_lease_suspended_in_a_hole_resumes_for_the_rest_of_its_estimate_and_an_ar_fits_after_it(estimate):
    """One node, no preemption. An AR holds [1400, 1900). Lease 2 (u's, estimated 632 s, really 550 s) is booked
    into the hole before it: it runs [1000, 1368), is suspended for the AR and resumes after it, [1900, 1932). It is
    booked for the rest of its estimate, 232 s and 32 s to suspend, with a checkpoint, and really ends at 2114. An
    AR asked for at 2000 for [2300, 2500) fits after that booking. Booked for the rest of its request (3,232 s, as
    with requested times) the resumed lease is in the AR's way and, with no preemption, the AR is refused."""
    opts = dataclasses.replace(ESTIMATES, runtime_estimate=estimate, policy_preemption="no-preemption")
    reqs = [be(1, "u", 0, 3600, 600), LeaseRequest(3, LeaseKind.AR, 900, 500, (VMSPEC,), start=1400),
            be(2, "u", 1000, 3600, 550), LeaseRequest(4, LeaseKind.AR, 2000, 200, (VMSPEC,), start=2300)]
    leases, _ = simulate(reqs, opts)
    assert runs(leases[2]) == [(1000, 1368), (1932, 2114)] and leases[2].suspensions == 1
    if estimate == "user-history":
        assert leases[2].overruns == 0 and leases[4].state is LeaseState.DONE and runs(leases[4]) == [(2300, 2500)]
    else:
        assert leases[4].state is LeaseState.REJECTED


@st.composite
def estimated_workloads(draw):
    """Best-effort leases of two users that mostly run far shorter than they ask (so estimates are made and run
    past), with ARs among them."""
    out = []
    for i in range(1, draw(st.integers(4, 14)) + 1):
        kind = draw(st.sampled_from([LeaseKind.BEST_EFFORT] * 3 + [LeaseKind.AR]))
        arrival = draw(st.integers(0, 240)) * 60
        duration = draw(st.integers(5, 120)) * 60
        vms = tuple(draw(st.lists(vm, min_size=1, max_size=3)))
        if kind is LeaseKind.AR:
            out.append(LeaseRequest(i, kind, arrival, duration, vms, start=arrival + draw(st.integers(0, 60)) * 60))
            continue
        real = draw(st.one_of(st.integers(1, duration), st.integers(1, max(1, duration // 6))))
        out.append(LeaseRequest(i, kind, arrival, duration, vms, preemptible=True, real_duration=real,
                                extra={"user": draw(st.sampled_from(["a", "b"]))}))
    return out


def assert_safe(site, reqs, opts) -> None:
    log = EventLog(ORIGIN, "INFO", io.StringIO())
    result = Simulator(site, reqs, opts, Policies(opts.policy_admission, opts.policy_preemption,
                                                  opts.policy_host_selection), log).run()
    doc = schedule_document(result.site, result.leases, ORIGIN)
    assert [str(v) for v in check_schedule(doc)] == []    # capacity, ARs exactly on time, runs of the real length
    assert all(lease.state in (LeaseState.DONE, LeaseState.REJECTED) for lease in result.leases)
    for lease in result.leases:
        if lease.kind is LeaseKind.BEST_EFFORT:
            assert lease.state is LeaseState.DONE or "never fit" in lease.reason


estimating = options.map(lambda o: dataclasses.replace(o, runtime_estimate="user-history", suspension="all"))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(site=sites, reqs=estimated_workloads(), opts=estimating)
def test_schedules_with_estimates_are_safe_and_nothing_is_lost(site, reqs, opts):
    assert_safe(site, reqs, opts)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(site=sites, reqs=estimated_workloads(), opts=estimating)
def test_cpsat_schedules_with_estimates_are_safe_and_nothing_is_lost(site, reqs, opts):
    assert_safe(site, reqs, dataclasses.replace(opts, mapper="cpsat"))
