"""The round model's admission never refuses what its hint admits (models/cpsat-round.md, step 6)."""
from __future__ import annotations

import pytest

from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from test_cpsat_simulation import VM1, run_requests


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
