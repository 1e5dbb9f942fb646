"""The round model's admission never refuses what its hint admits (models/cpsat-round.md, step 6)."""
from __future__ import annotations

import pytest

from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from test_cpsat_simulation import VM1, reservations, run_requests


@pytest.mark.parametrize("mapper", ["greedy", "cpsat"])
def test_an_ar_the_hint_admits_is_admitted_whatever_the_waiting_it_costs(mapper):
    """One node, no preemption. Lease 1 runs until 1,000 s; lease 2 (10 s, arrived at 1 s) is booked from 1,000 s;
    AR 3 holds the node from 1,020 s for 4,000 s. AR 4 asks at 100 s for 1,000-1,015 s: lease 2's booking is in
    its way, so the greedy pass refuses it. Offered to the round model, its hint (the greedy pass's search with the
    round's bookings lifted) admits it and books lease 2 again after AR 3, at 5,020 s. The model used to refuse it:
    15 node-seconds at `weight-rejected` (15,000 s of waiting) against 4,020 s more waiting of a 10-s lease, whose
    weight is 360 seconds of waiting per second (its bounded slowdown), is the cheaper plan by the objective. An
    admission greedy's own search finds is now the model's to keep: it decides only how the others make way."""
    reqs = [LeaseRequest(1, LeaseKind.BEST_EFFORT, 0, 1000, (VM1,)),
            LeaseRequest(2, LeaseKind.BEST_EFFORT, 1, 10, (VM1,)),
            LeaseRequest(3, LeaseKind.AR, 50, 4000, (VM1,), start=1020),
            LeaseRequest(4, LeaseKind.AR, 100, 15, (VM1,), start=1000)]
    sim, leases, _, _ = run_requests("1 CPU:100 Memory:1024", reqs, mapper=mapper)
    assert leases[3].state is LeaseState.DONE and leases[3].first_start == 1020
    if mapper == "greedy":
        assert leases[4].state is LeaseState.REJECTED and leases[2].first_start == 1000
        return
    assert leases[4].state is LeaseState.DONE and leases[4].first_start == 1000
    assert leases[2].first_start == 5020
    assert [(a.now, a.lease_id, a.admitted, a.moved) for a in sim.stepper.planner.admissions] == [(100, 4, True, 1)]


def _young_run_and_an_immediate_lease(arrival: int, duration: int = 100) -> list[LeaseRequest]:
    """Two nodes, each holding one VM. Preemptible best-effort lease 1 (both nodes, 1,000 s) starts at 0; immediate
    lease 2 asks at `arrival` for one node for `duration`: no node is free then."""
    return [LeaseRequest(1, LeaseKind.BEST_EFFORT, 0, 1000, (VM1, VM1), preemptible=True),
            LeaseRequest(2, LeaseKind.IMMEDIATE, arrival, duration, (VM1,))]


@pytest.mark.parametrize("mapper", ["greedy", "cpsat"])
def test_an_immediate_lease_is_admitted_by_requeueing_a_run_younger_than_the_threshold(mapper):
    """Lease 1 has run 10 s when immediate lease 2 arrives, less than its scheduling threshold (128 s: twice the 64 s
    of suspending its two 1,024 MB VMs at 32 MB/s), so Haizea's preemption would cancel and requeue it rather than
    suspend it. Greedy refuses lease 2 (only ARs preempt, and a suspension would not free a node at its arrival).
    The cpsat round, whose model cannot admit it (nothing it may move, and an immediate lease must start at its
    arrival), requeues lease 1 (10 s of two VMs lost: 20 node-seconds, no more than the 100 lease 2 asks for), starts
    lease 2 at its arrival and lease 1 again after it."""
    reqs = _young_run_and_an_immediate_lease(10)
    sim, leases, doc, _ = run_requests("2 CPU:100 Memory:1024", reqs, mapper=mapper,
                                       policy_preemption="ar-preempts-everything")
    assert leases[1].state is LeaseState.DONE
    if mapper == "greedy":
        assert leases[2].state is LeaseState.REJECTED and leases[1].requeues == 0 and leases[1].end == 1000
        return
    assert leases[2].state is LeaseState.DONE and leases[2].first_start == 10 and leases[2].end == 110
    assert leases[1].requeues == 1 and leases[1].end == 110 + 1000
    assert [(a.now, a.lease_id, a.admitted, a.requeued) for a in sim.stepper.planner.admissions] == [(10, 2, True, 1)]
    # its first run, cut at 10 s (requeued: lost), then the whole run again after lease 2 (the checker passed)
    assert [r[:3] for r in reservations(doc, 1)] == [("vm", 0, 10), ("vm", 110, 1110), ("shutdown", 1110, 1110)]


@pytest.mark.parametrize("arrival, duration, preemption", [(200, 100, "ar-preempts-everything"),
                                                          (10, 19, "ar-preempts-everything"),
                                                          (10, 100, "no-preemption")],
                         ids=["run-past-the-threshold", "more-work-lost-than-asked", "no-preemption-policy"])
def test_an_immediate_lease_is_refused_where_requeueing_cannot_make_room_for_it(arrival, duration, preemption):
    """Past the threshold, Haizea's preemption would suspend lease 1, which frees no node before the suspension is
    over, after lease 2's arrival: the round refuses lease 2 as greedy does. A 19-s lease 2 asks for fewer
    node-seconds (19) than requeueing lease 1 at 10 s would lose (20). Under `no-preemption` nothing is requeued."""
    sim, leases, _, _ = run_requests("2 CPU:100 Memory:1024", _young_run_and_an_immediate_lease(arrival, duration),
                                     mapper="cpsat", policy_preemption=preemption)
    assert leases[2].state is LeaseState.REJECTED
    assert leases[1].requeues == 0 and leases[1].end == 1000


def test_a_lease_older_than_the_aging_horizon_is_not_requeued_for_an_immediate_lease():
    """As for an AR, a lease that asked more than the preemption policy's seven days ago never gives way: lease 1
    waited a week behind lease 0 (not preemptible), and has run 10 s when immediate lease 2 arrives, younger than
    its threshold but older than the horizon. The round refuses lease 2; a week less of waiting and it requeues
    lease 1 (the test above)."""
    week = 7 * 86400
    reqs = [LeaseRequest(0, LeaseKind.BEST_EFFORT, 0, week, (VM1, VM1)),
            *_young_run_and_an_immediate_lease(week + 10)]
    sim, leases, _, _ = run_requests("2 CPU:100 Memory:1024", reqs, mapper="cpsat",
                                     policy_preemption="ar-preempts-everything")
    assert leases[1].first_start == week and leases[1].requeues == 0 and leases[1].end == week + 1000
    assert leases[2].state is LeaseState.REJECTED
