"""`[scheduling] solver-suspend: for-waiting`: a CP-SAT round may suspend a running preemptible lease at once so that
waiting leases run first, where that lowers the round's objective; the suspended lease resumes where its image is."""
from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from optlease.domain.site import Site
from optlease.scheduling.cpsat.prepare import Role, prepare
from optlease.scheduling.cpsat_round import CpsatRound
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.records import RESUME, SUSPEND
from optlease.scheduling.snapshot import LeaseSnapshot, Overheads, Phase, Policy, RoundSnapshot, Suspension
from test_runtime_estimate import VMSPEC, runs, simulate

# 1,024 MB at 32 MB/s: a suspension and a resume take 32 s each
ROUNDS = SchedulingOptions(mapper="cpsat", suspend_rate=32.0, resume_rate=32.0, solver_suspend="for-waiting",
                           solver_work_limit=0.05)


def be(lease_id: int, arrival: int, duration: int, preemptible: bool = True) -> LeaseRequest:
    return LeaseRequest(lease_id, LeaseKind.BEST_EFFORT, arrival, duration, (VMSPEC,), preemptible=preemptible,
                        real_duration=duration)


def ops(lease) -> list[tuple[str, int, int]]:
    return [(h.kind, h.start, h.end) for h in lease.held if h.kind in (SUSPEND, RESUME)]


def test_a_short_lease_runs_at_once_and_the_long_one_it_suspends_resumes_after_it():
    """Lease 1 runs 10 h on the one node; lease 2 asks for 10 minutes an hour in. Greedy books it after lease 1
    (from 36000, a wait of 32,400 s); the round suspends lease 1 at 3600 (32 s), runs lease 2 at once, and lease 1
    resumes as lease 2 ends: 664 s later than it would have ended, for 32,368 s less wait."""
    reqs = [be(1, 0, 36000), be(2, 3600, 600)]
    leases, log = simulate(reqs, ROUNDS)
    assert runs(leases[1]) == [(0, 3600), (4264, 36664)]
    assert ops(leases[1]) == [(SUSPEND, 3600, 3632), (RESUME, 4232, 4264)]
    assert runs(leases[2]) == [(3632, 4232)]
    assert (leases[1].preemptions, leases[1].suspensions) == (1, 1)
    assert "Lease #1 is suspended so that waiting leases run." in log
    greedy, _ = simulate(reqs, dataclasses.replace(ROUNDS, solver_suspend="no"))
    assert runs(greedy[2]) == [(36000, 36600)] and runs(greedy[1]) == [(0, 36000)]


def test_a_lease_that_is_not_preemptible_or_has_not_run_its_threshold_is_not_suspended():
    """Lease 1 is not preemptible: lease 2 waits for it. Lease 3 started a minute before lease 4 arrives, less than
    Haizea's scheduling threshold (suspend and resume, twice with factor 1: 128 s): lease 4 waits too."""
    leases, _ = simulate([be(1, 0, 36000, preemptible=False), be(2, 3600, 600)], ROUNDS)
    assert runs(leases[2]) == [(36000, 36600)] and ops(leases[1]) == []
    leases, _ = simulate([be(3, 0, 7200), be(4, 60, 600)], ROUNDS)
    assert runs(leases[4]) == [(7200, 7800)] and ops(leases[3]) == []


def test_a_suspension_that_would_cost_more_than_the_wait_it_saves_is_not_made(monkeypatch):
    """Lease 1 has 100 s left when lease 2 (as long) arrives: suspending it saves lease 2 100 s of waiting and costs
    lease 1 at least 164 s (suspension, resume and lease 2's run), a preemption and overhead. The round at 3600 is
    solved with lease 1 offered for suspension, and does not suspend it."""
    solved = []
    solve = CpsatRound._solve

    def solve_spy(self, now, movable):
        solved.append((now, [lease.id for lease in self._suspendable(now)]))
        return solve(self, now, movable)

    monkeypatch.setattr(CpsatRound, "_solve", solve_spy)
    leases, _ = simulate([be(1, 0, 3700), be(2, 3600, 3600)], ROUNDS)
    assert (3600, [1]) in solved
    assert runs(leases[1]) == [(0, 3700)] and runs(leases[2]) == [(3700, 7300)]


def snapshot(since: int, policy: Policy) -> RoundSnapshot:
    running = LeaseSnapshot(be(1, 0, 36000), Phase.RUNNING, Overheads(suspend=32, resume=32), nodes=(1,),
                            left=36000 - since, since=0)
    waiting = LeaseSnapshot(be(2, since, 600), Phase.QUEUED)
    return RoundSnapshot(since, Site.homogeneous(1, VMSPEC), (running, waiting), policy)


def test_the_round_model_offers_a_suspension_at_once_only_where_the_policy_and_threshold_allow():
    policy = Policy(suspension=Suspension.ALL, suspend_for_waiting=True, non_schedulable_interval=0)
    job = prepare(snapshot(3600, policy)).job(1)
    assert (job.role, job.suspend_ends, job.free_end) == (Role.SUSPENDABLE, (3632,), 3632)
    assert prepare(snapshot(3600, dataclasses.replace(policy, suspend_for_waiting=False))).job(1).role is Role.FIXED
    assert prepare(snapshot(3600, dataclasses.replace(policy, suspension=Suspension.NONE))).job(1).role is Role.FIXED
    # run 60 s, less than the threshold (32 + 32) times factor 1
    assert prepare(snapshot(60, policy)).job(1).role is Role.FIXED


@st.composite
def contended(draw):
    """Long preemptible leases fill 1-3 nodes, short ones arrive while they run, an AR may come too."""
    nodes = draw(st.integers(1, 3))
    reqs = [be(i, draw(st.integers(0, 600)), draw(st.integers(3600, 20000)), draw(st.booleans()))
            for i in range(1, draw(st.integers(2, 2 + nodes)) + 1)]
    for _ in range(draw(st.integers(1, 5))):
        vms = (VMSPEC,) * draw(st.integers(1, nodes))
        reqs.append(LeaseRequest(len(reqs) + 1, LeaseKind.BEST_EFFORT, draw(st.integers(700, 9000)),
                                 draw(st.integers(60, 1200)), vms, preemptible=draw(st.booleans())))
    if draw(st.booleans()):
        start = draw(st.integers(2000, 12000))
        reqs.append(LeaseRequest(len(reqs) + 1, LeaseKind.AR, start - 1800, 1800, (VMSPEC,), start=start))
    opts = dataclasses.replace(ROUNDS, suspension=draw(st.sampled_from(["serial-only", "all"])),
                               exclusion=draw(st.sampled_from(["local", "global"])),
                               threshold_factor=draw(st.integers(0, 2)),
                               migration=draw(st.sampled_from(["no", "yes"])),
                               policy_preemption=draw(st.sampled_from(["no-preemption", "ar-preempts-everything"])))
    return nodes, reqs, opts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=contended())
def test_rounds_that_suspend_for_waiting_leases_are_safe_and_lose_nothing(case):
    """The checker passes (capacity, ARs on time and whole, suspensions before resumes where the image is) and every
    lease ends, having run exactly what it asked for."""
    nodes, reqs, opts = case
    leases, _ = simulate(reqs, opts, nodes=nodes)
    assert len(leases) == len(reqs)
    for lease in leases.values():
        assert lease.state in (LeaseState.DONE, LeaseState.REJECTED), (lease.id, lease.state)
        if lease.state is LeaseState.DONE:
            assert sum(end - start for start, end in runs(lease)) == lease.req.duration
