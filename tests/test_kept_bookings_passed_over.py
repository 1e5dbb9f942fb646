"""A premature end keeps a booking made for the future, though changes since it was booked reach past its start, where
each changed only nodes its mapper passes over at that start (Replanning._passed_over): on random workloads of leases
of several widths and shapes (hypothesis), every booking it keeps is booked again for real and compared, and the
schedule and the log are the same with the shortcut and without it."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from optlease.domain.lease import LeaseKind, LeaseRequest
from optlease.scheduling import replan
from optlease.scheduling.preparation import PreparationOptions

from test_kept_bookings_images import same_with_and_without_keeping

VM = {"CPU": 100, "Memory": 1024}
HALF = {"CPU": 50, "Memory": 512}
THIRD = {"CPU": 30, "Memory": 256}


@st.composite
def workloads(draw):
    """Best-effort leases one to six VMs wide (alike or not) that often end before their time, among ARs."""
    out = []
    for i in range(1, draw(st.integers(4, 18)) + 1):
        kind = draw(st.sampled_from([LeaseKind.BEST_EFFORT] * 5 + [LeaseKind.AR]))
        arrival = draw(st.integers(0, 15)) * 60
        duration = draw(st.integers(1, 60)) * 60
        real = draw(st.one_of(st.none(), st.integers(1, duration), st.integers(1, duration)))
        start = arrival + draw(st.integers(0, 40)) * 60 if kind is LeaseKind.AR else None
        shape = draw(st.sampled_from([VM, VM, HALF, THIRD]))
        vms = tuple(draw(st.sampled_from([shape] * 3 + [VM, HALF])) for _ in range(draw(st.integers(1, 6))))
        out.append(LeaseRequest(i, kind, arrival, duration, vms, preemptible=draw(st.booleans()), start=start,
                                real_duration=real))
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=workloads(), backfilling=st.sampled_from(["aggressive", "aggressive", "conservative"]),
       nodes=st.integers(3, 7), hosts=st.sampled_from(["greedy", "greedy", "no-policy"]),
       level=st.sampled_from(["INFO", "STATUS"]))
def test_keeping_bookings_whose_changed_nodes_are_passed_over_changes_no_decision(reqs, backfilling, nodes, hosts,
                                                                                  level):
    passed = [0]
    decide = replan.Replanning._passed_over

    def counted(self, lease, vmrr, mark, start):
        found = decide(self, lease, vmrr, mark, start)
        passed[0] += found
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(replan.Replanning, "_passed_over", counted)
        same_with_and_without_keeping(reqs, PreparationOptions(), nodes=nodes, level=level,
                                      backfilling=backfilling, policy_host_selection=hosts)
    event(f"kept though changes reach past their start: {min(passed[0], 3)}{'+' if passed[0] >= 3 else ''}")
