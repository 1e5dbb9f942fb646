"""The hint's completion with its earliest fits from the nodes' free intervals (round_fit) against the VM scheduler's
search for every lease, on random rounds: the same bookings, the same notes on the leases, the same slot table."""
from __future__ import annotations

import io
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optlease.domain.lease import LeaseKind, LeaseRequest
from optlease.domain.site import Site
from optlease.eventlog import EventLog
from optlease.scheduling import round_fit
from optlease.scheduling.leasesched import LeaseScheduler
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.planner import make_planner
from optlease.scheduling.policies import Policies
from optlease.scheduling.records import Lease

CAP = {"CPU": 100, "Memory": 1024}
# one VM per node, one per node with room left beside it, two and three per node (where the fast search does not
# apply; beside the second, a node's room is not idle), and two shapes of one VM per node that fit beside each other
SHAPES = [{"CPU": 100, "Memory": 1024}, {"CPU": 60, "Memory": 512}, {"CPU": 50, "Memory": 512},
          {"CPU": 30, "Memory": 256}, {"CPU": 70, "Memory": 200}, {"CPU": 30, "Memory": 600}]
NOW = 60

running = st.lists(st.tuples(st.integers(0, 5), st.integers(1, 30)), max_size=10)          # shape, minutes
ars = st.lists(st.tuples(st.integers(0, 5), st.integers(1, 3), st.integers(2, 20), st.integers(1, 20)),
               max_size=2)                                            # shape, VMs, start and length (minutes)
queued = st.lists(st.tuples(st.integers(0, 5), st.integers(1, 4), st.integers(1, 30), st.integers(0, 5)),
                  min_size=1, max_size=10)                            # shape, VMs, minutes, waited (minutes)


def completed(nodes: int, runs: list, reservations: list, queue: list, fast: bool):
    """A round's hint completed (the greedy pass first, as the round does), the leases' notes and the slot table."""
    site = Site.homogeneous(nodes, CAP)
    opts = SchedulingOptions(backfilling="aggressive", mapper="cpsat")
    sched = LeaseScheduler(site, opts, Policies(), EventLog(datetime(2006, 11, 25), "STATUS", io.StringIO()))
    planner = make_planner("cpsat", sched)
    planner.fast_fits = fast
    next_id = 1

    def request(kind, arrival, minutes, shape, vms, start=None, now=0):
        nonlocal next_id
        demand = SHAPES[shape]
        req = LeaseRequest(next_id, kind, arrival, minutes * 60, tuple(dict(demand) for _ in range(vms)),
                           start=start)
        sched.request(Lease(req, {v: sched.table.vector(demand) for v in range(1, vms + 1)}), now)
        next_id += 1

    for shape, minutes in runs:
        request(LeaseKind.BEST_EFFORT, 0, minutes, shape, 1)
    sched.schedule(0)
    for rr in sched.table.starting_at(0):
        sched.start_rr(rr, 0)
    for shape, vms, start, minutes in reservations:
        request(LeaseKind.AR, NOW, minutes, shape, vms, start=start * 60, now=NOW)
    for shape, vms, minutes, waited in queue:
        request(LeaseKind.BEST_EFFORT, NOW - waited * 60 if waited else 0, minutes, shape, vms, now=NOW)
    sched.schedule(NOW)
    plans = planner._complete(NOW, planner._movable(NOW))
    notes = {lid: lease.cache.get("walked") for lid, lease in sched.leases.items()}
    table = sorted((rr.lease.id, rr.kind, rr.start, rr.end, sorted(rr.mapping.items()), rr.backfill)
                   for rr in sched.table.reservations)
    return plans, notes, table, sched.table.next_seq()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 8), running, ars, queued)
def test_the_fast_fits_book_what_the_vm_schedulers_search_books(nodes, runs, reservations, queue) -> None:
    assert completed(nodes, runs, reservations, queue, True) == completed(nodes, runs, reservations, queue, False)


def test_the_fast_fits_answer_where_each_node_holds_one_vm() -> None:
    """On a site of one-VM nodes the fast search books every lease (the comparison above is not with itself)."""
    asked = []
    real = round_fit.OneEachFits.asap

    def counted(self, lease, shape):
        found = real(self, lease, shape)
        asked.append(found is not None)
        return found

    round_fit.OneEachFits.asap = counted
    try:
        plans, *_ = completed(4, [(0, 10), (0, 20), (0, 5)], [], [(0, 2, 10, 1), (0, 1, 5, 0), (1, 3, 7, 2)], True)
    finally:
        round_fit.OneEachFits.asap = real
    assert len(plans) >= 2 and asked == [True] * len(plans)


@pytest.mark.parametrize("nodes, runs, queue", [
    (4, [(0, 10), (0, 10), (0, 10), (0, 10)], [(0, 2, 15, 1), (0, 1, 5, 0)]),
], ids=["ties-by-node-order"])
def test_the_comparison_catches_a_fast_search_that_breaks_ties_the_other_way(nodes, runs, queue) -> None:
    """A deliberate break (nodes idle for good taken in reverse node order) is told apart."""
    real = round_fit._Rooms.idle_from

    def reversed_order(self, t, k):
        return sorted((n for a, _, n in self.idle if a <= t), reverse=True)[:k]

    round_fit._Rooms.idle_from = reversed_order
    try:
        broken = completed(nodes, runs, [], queue, True)
    finally:
        round_fit._Rooms.idle_from = real
    assert broken != completed(nodes, runs, [], queue, False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(1, 10), st.integers(0, 60), st.integers(0, 600)),
                max_size=8), st.integers(0, 100), st.integers(0, 1024), st.booleans())
def test_the_rooms_written_out_for_two_resources_are_room_intervals(bookings, l0, l1, three) -> None:
    """round_fit._rooms: the intervals roomindex.room_intervals gives, on random profiles."""
    from optlease.scheduling.profile import Profile
    from optlease.scheduling.roomindex import room_intervals

    prof = Profile((0, 0, 0) if three else (0, 0))
    for a, length, cpu, mem in bookings:
        prof.add(a, a + length, (cpu, mem, 1) if three else (cpu, mem))
    limit = (l0, l1, 1) if three else (l0, l1)
    assert round_fit._rooms(prof, limit) == room_intervals(prof, limit)
