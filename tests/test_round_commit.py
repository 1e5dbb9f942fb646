"""Committing a cpsat round's plan to the slot table (`round_commit.PlanCommit`): a plan that fits is booked as the
solver says, including a lease that ends exactly where the next booking on its node begins; the admission's fallback
(`_make_room`) books an AR where the greedy pass's search put it and sends the bookings in its way back to the
queue, and changes nothing where the AR does not fit even so."""
from __future__ import annotations

import io
from datetime import datetime

from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from optlease.domain.site import Site
from optlease.eventlog import EventLog
from optlease.scheduling.leasesched import LeaseScheduler
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.planner import make_planner
from optlease.scheduling.policies import Policies
from optlease.scheduling.records import Lease
from optlease.scheduling.snapshot import LeasePlan, Outcome

VM = {"CPU": 100, "Memory": 1024}


def scheduler(cap: dict, nodes: int = 1):
    opts = SchedulingOptions(backfilling="aggressive", mapper="cpsat")   # shutdown-time 0, as on the Blue site
    sched = LeaseScheduler(Site.homogeneous(nodes, cap), opts, Policies(),
                           EventLog(datetime(2006, 11, 25), "STATUS", io.StringIO()))
    return sched, make_planner("cpsat", sched)


def request(sched, lease_id: int, kind: LeaseKind, duration: int, vms: int, now: int, start: int | None = None):
    req = LeaseRequest(lease_id, kind, now, duration, tuple(dict(VM) for _ in range(vms)), start=start)
    lease = Lease(req, {v: sched.table.vector(VM) for v in range(1, vms + 1)})
    sched.request(lease, now)
    return lease


def schedule_and_start(sched, now: int) -> None:
    """The greedy pass at `now`, then every reservation it made that begins then started, as a step starts them."""
    sched.schedule(now)
    for rr in sched.table.starting_at(now):
        sched.start_rr(rr, now)


def test_a_lease_that_ends_where_the_next_booking_begins_is_committed():
    """One node of two VM slots. Lease 1 runs on one slot until 1,000 s; lease 2 (both slots) is booked from
    1,000 s. A plan that runs lease 3 on the free slot from 0 to 1,000 s fits: its shutdown takes no time, and a
    reservation of no length holds no instant. The slot table was asked about the instant 1,000 s, where lease 2
    begins, and the plan was refused (on the Blue month a round's plan and an admission were lost so)."""
    sched, planner = scheduler({"CPU": 200, "Memory": 2048})
    request(sched, 1, LeaseKind.BEST_EFFORT, 1000, 1, 0)
    two = request(sched, 2, LeaseKind.BEST_EFFORT, 1000, 2, 0)
    schedule_and_start(sched, 0)
    assert two.state is LeaseState.SCHEDULED and two.last_vmrr().start == 1000
    three = request(sched, 3, LeaseKind.BEST_EFFORT, 1000, 1, 0)
    vmrr = planner._build(three, LeasePlan(3, Outcome.ACCEPTED, start=0, nodes=(1,), end=1000), 0)
    assert vmrr is not None and (vmrr.start, vmrr.end) == (0, 1000)
    assert [(rr.kind, rr.start, rr.end) for rr in vmrr.post] == [("shutdown", 1000, 1000)]
    planner._commit(three, vmrr, 0)
    assert three.state is LeaseState.SCHEDULED and two.last_vmrr().start == 1000


def test_the_admission_fallback_sends_the_bookings_in_an_ars_way_back_to_the_queue():
    """Two nodes. Lease 1 runs on node 1 until 5,000 s; leases 2 and 3 are booked by the greedy pass. An AR asks for
    both nodes from 6,000 s: `_make_room` books it where the greedy pass's search put it, and the bookings on its
    nodes during its run go back to the queue, as Haizea's queued leases wait behind an AR. An AR that does not fit
    even so (a running lease holds one of its nodes) is refused, and nothing changes."""
    sched, planner = scheduler(VM, nodes=2)
    request(sched, 1, LeaseKind.BEST_EFFORT, 5000, 1, 0)
    two = request(sched, 2, LeaseKind.BEST_EFFORT, 3000, 1, 0)
    three = request(sched, 3, LeaseKind.BEST_EFFORT, 3000, 2, 0)
    schedule_and_start(sched, 0)
    assert two.state is LeaseState.ACTIVE and three.state is LeaseState.SCHEDULED
    assert three.last_vmrr().start == 5000
    now = 100
    ar = request(sched, 4, LeaseKind.AR, 1000, 2, now, start=6000)
    movable = planner._movable(now)
    assert [lease.id for lease in movable] == [3]
    in_way = planner._make_room(ar, LeasePlan(4, Outcome.ACCEPTED, start=6000, nodes=(1, 2), end=7000), movable, now)
    assert [lease.id for lease in in_way] == [3]
    assert three.state is LeaseState.QUEUED and three in sched.queue
    assert ar.state is LeaseState.SCHEDULED and (ar.last_vmrr().start, ar.last_vmrr().end) == (6000, 7000)
    # an AR that does not fit even with the bookings sent back: lease 1 holds node 1 until 5,000 s
    late = request(sched, 5, LeaseKind.AR, 1000, 2, now, start=4000)
    before = [(rr.lease.id, rr.start, rr.end) for rr in sched.table.reservations]
    assert planner._make_room(late, LeasePlan(5, Outcome.ACCEPTED, start=4000, nodes=(1, 2), end=5000),
                              planner._movable(now), now) is None
    assert late.state is not LeaseState.SCHEDULED
    assert [(rr.lease.id, rr.start, rr.end) for rr in sched.table.reservations] == before


def test_a_premature_end_keeps_the_earliest_booking_where_a_rounds_bookings_exceed_the_backfilling_limit():
    """Three nodes of one VM slot, aggressive backfilling (one booking for the future). Leases 1-3 run from 0 s, lease
    1 asks 1,000 s and ends at 500 s; lease 4 (all three nodes) is the greedy pass's booking, from 3,000 s; the round
    books lease 5 (one node, 2,800 s) on lease 1's node from 3,100 s, a second booking for the future. At lease 1's
    end the future is booked again in order of starts: lease 4 keeps 3,000 s, and lease 5, which could start at once
    only by running through it, goes back to the queue. Counting lease 5's booking against the limit refused lease 4
    its own, lease 5 then started at once in its room, and lease 4 was booked again from 3,300 s, behind a lease
    booked after it (on a generated 64-node workload, its widest lease waited 1.6 times as long so)."""
    sched, planner = scheduler(VM, nodes=3)
    first = request(sched, 1, LeaseKind.BEST_EFFORT, 1000, 1, 0)
    request(sched, 2, LeaseKind.BEST_EFFORT, 3000, 1, 0)
    request(sched, 3, LeaseKind.BEST_EFFORT, 3000, 1, 0)
    four = request(sched, 4, LeaseKind.BEST_EFFORT, 100, 3, 0)
    five = request(sched, 5, LeaseKind.BEST_EFFORT, 2800, 1, 0)
    schedule_and_start(sched, 0)
    assert four.state is LeaseState.SCHEDULED and four.last_vmrr().start == 3000 and five in sched.queue
    node = first.last_vmrr().mapping[1]
    vmrr = planner._build(five, LeasePlan(5, Outcome.ACCEPTED, start=3100, nodes=(node,), end=5900), 0)
    planner._commit(five, vmrr, 0)
    assert five.state is LeaseState.SCHEDULED and sched.vm.future_count == 2
    sched.premature_end(first, 500)
    sched.schedule(500)
    assert four.state is LeaseState.SCHEDULED and four.last_vmrr().start == 3000
    assert five.state is LeaseState.QUEUED and five in sched.queue
    assert sched.vm.future_count == 1
