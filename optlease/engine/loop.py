"""The per-instant step that the simulator and the daemon share, and what a user may do to a lease between steps.

At each instant, in Haizea's order: premature ends, reservations ending, reservations starting, new requests and
one scheduling round, then starts and ends again (for what the round placed now and for zero-length reservations).
Between premature ends and reservations ending, leases that run past the estimate their booking was made from get
the rest of their requested time (scheduling.estimate).
Only the clock (simulated or real) and the enactment around it differ between a simulation and a daemon.
"""
from __future__ import annotations

import heapq
from typing import Iterable

from optlease.domain.lease import TRANSITIONS, LeaseState
from optlease.scheduling.leasesched import LeaseScheduler
from optlease.scheduling.planner import Planner, make_planner
from optlease.scheduling.records import Lease

S = LeaseState


class Stepper:
    """Runs steps of one LeaseScheduler, each round decided by one planner (`[scheduling] mapper` unless the driver
    gives one), and knows when the next thing will happen."""

    def __init__(self, sched: LeaseScheduler, planner: Planner | None = None) -> None:
        self.sched = sched
        self.planner = planner if planner is not None else make_planner(sched.opts.mapper, sched)
        self.rounds = 0
        self._premature: list[tuple[int, int, int, Lease]] = []
        self._checkpoints: list[tuple[int, int, int, Lease]] = []   # bookings made from run-time estimates

    def step(self, now: int, arrivals: Iterable[Lease] = ()) -> None:
        sched = self.sched
        sched.log.now = now
        self._prematures(now)
        self._overruns(now)
        self._end(now)
        self._start(now)
        for lease in arrivals:
            sched.request(lease, now)
        self.planner.plan(now)
        self.rounds += 1
        self._start(now)
        self._end(now)
        if self.rounds % 512 == 0:
            sched.table.prune(now)

    def next_event(self, now: int) -> int | None:
        """The next instant at which a reservation starts or ends, or a lease really ends (None: nothing planned)."""
        first = self.sched.table.next_event_after(now)
        for t in (self._next_premature(), self._next_checkpoint()):
            if t is not None and (first is None or t < first):
                first = t
        return first

    def _start(self, now: int) -> None:
        for rr in self.sched.table.starting_at(now):
            if rr.state != "scheduled":
                continue
            real_end = self.sched.start_rr(rr, now)
            if real_end is not None:
                heapq.heappush(self._premature, (real_end, rr.lease.id, rr.seq, rr.lease))
            if rr.checkpoint is not None:
                heapq.heappush(self._checkpoints, (rr.checkpoint, rr.lease.id, rr.seq, rr.lease))

    def _end(self, now: int) -> None:
        for rr in self.sched.table.ending_at(now):
            if rr.state == "active":
                self.sched.end_rr(rr, now)

    def _prematures(self, now: int) -> None:
        while self._premature and self._premature[0][0] <= now:
            t, _, seq, lease = heapq.heappop(self._premature)
            if t == now and _ends_early(t, seq, lease):
                self.sched.premature_end(lease, now)

    def _overruns(self, now: int) -> None:
        while self._checkpoints and self._checkpoints[0][0] <= now:
            t, _, seq, lease = heapq.heappop(self._checkpoints)
            if _at_checkpoint(t, seq, lease):
                real_end = self.sched.overrun(lease.last_vmrr(), now)
                if real_end is not None:
                    heapq.heappush(self._premature, (real_end, lease.id, seq, lease))

    def _next_checkpoint(self) -> int | None:
        return _first_valid(self._checkpoints, _at_checkpoint)

    def _next_premature(self) -> int | None:
        return _first_valid(self._premature, _ends_early)


def _ends_early(t: int, seq: int, lease: Lease) -> bool:
    """Whether the lease still runs on that VM reservation and really ends at t, before the reservation does."""
    vmrr = lease.last_vmrr()
    return vmrr is not None and vmrr.seq == seq and vmrr.state == "active" and t < vmrr.end


def _at_checkpoint(t: int, seq: int, lease: Lease) -> bool:
    """Whether the lease still runs on the booking that has this checkpoint (it has not ended or been preempted
    since)."""
    vmrr = lease.last_vmrr()
    return vmrr is not None and vmrr.seq == seq and vmrr.state == "active" and vmrr.checkpoint == t


def _first_valid(heap: list[tuple[int, int, int, Lease]], valid) -> int | None:
    """The earliest time in a heap of (time, lease id, VM reservation seq, lease) whose entry is still `valid`; stale
    entries on top are dropped."""
    while heap:
        t, _, seq, lease = heap[0]
        if valid(t, seq, lease):
            return t
        heapq.heappop(heap)
    return None


def cancel(sched: LeaseScheduler, lease: Lease, now: int, said: str = "cancelled") -> None:
    """A user cancels a lease: its reservations leave the slot table (what already ran is kept as history), it
    leaves the queue, and it ends as cancelled. The next scheduling round uses the room it frees."""
    if lease.state is S.NEW:
        lease.set_state(S.PENDING)
    if lease in sched.pending:
        sched.pending.remove(lease)
    if lease in sched.queue:
        sched.queue.remove(lease)
    vmrr = lease.last_vmrr()
    if vmrr is not None and any(rr.state in ("scheduled", "active") for rr in (*vmrr.pre, vmrr, *vmrr.post)):
        sched.cancel_vmrr(vmrr, now)
    sched.log.info("LSCHED", "Lease #%i has been %s." % (lease.id, said))
    lease.set_state(S.CANCELLED)
    lease.end = now
    sched.leases.pop(lease.id, None)
    sched.finished.append(lease)


def fail(sched: LeaseScheduler, lease: Lease, now: int, reason: str) -> None:
    """Enactment could not carry a lease out (an error or no answer from its host): like a cancellation, its
    reservations leave the slot table and the next round uses the room, but it ends as failed, with the reason."""
    state = lease.state
    cancel(sched, lease, now, said="failed")
    # cancel() ended it as cancelled; a failure is said as such when allowed
    lease.state = S.PENDING if state is S.NEW else state
    lease.set_state(S.FAILED if S.FAILED in TRANSITIONS[state] else S.CANCELLED)
    lease.reason = reason[:200]


def requeue(sched: LeaseScheduler, lease: Lease, now: int) -> None:
    """A best-effort lease whose host went away: its VMs are gone, so it goes back to the queue from scratch
    (as Haizea requeues a preempted lease it cannot suspend)."""
    vmrr = lease.last_vmrr()
    if vmrr is not None:
        sched.cancel_vmrr(vmrr, now)
        lease.vmrrs.pop()
    lease.requeues += 1
    for held in lease.held:
        if held.outcome is None:
            held.outcome = "requeued"
    lease.accumulated = 0
    lease.image_nodes = None
    lease.set_state(S.QUEUED)
    sched.log.info("LSCHED", "Lease #%i has been requeued: its host is gone." % lease.id)
    sched.enqueue(lease)


def defer(sched: LeaseScheduler, lease: Lease, now: int) -> None:
    """A best-effort lease that a step started, resumed or migrated at an instant the hosts never saw (the daemon
    was down, in mode fast): nothing of it ran, so it goes back to the queue as it was before that step, and the
    next round books it again. A fresh lease is queued from scratch; a suspended one stays suspended, its memory
    images where they are and its progress kept. Not a requeue: it lost nothing, so it is not counted as one."""
    vmrr = lease.last_vmrr()
    if vmrr is not None:
        sched.cancel_vmrr(vmrr, now)
        lease.vmrrs.pop()
    # what cancel_vmrr kept of the reservations begun at this instant lasted no time and never happened
    lease.held = [held for held in lease.held if not held.start == held.end == now]
    if lease.first_start == now:
        lease.first_start = None
    if lease.state in (S.SUSPENDED_SCHEDULED, S.MIGRATING, S.RESUMING):
        if lease.state is S.MIGRATING:
            lease.state = S.SUSPENDED_SCHEDULED
        lease.set_state(S.SUSPENDED_QUEUED)
    else:
        lease.set_state(S.QUEUED)
    sched.log.info("LSCHED", "Lease #%i did not start: back in the queue." % lease.id)
    sched.enqueue(lease)


def on_node(lease: Lease, node: int) -> bool:
    """Whether a lease holds or will hold the node: a reservation not yet over maps a VM there, or its suspended
    memory image is there."""
    vmrr = lease.last_vmrr()
    if vmrr is not None:
        for rr in (*vmrr.pre, vmrr, *vmrr.post):
            if rr.state in ("scheduled", "active") and (node in rr.mapping.values() or node in rr.demand):
                return True
    return lease.image_nodes is not None and node in lease.image_nodes.values()


def leases_on(sched: LeaseScheduler, node: int) -> list[Lease]:
    """The leases in the system that a node going down takes with it, in id order."""
    return [lease for _, lease in sorted(sched.leases.items()) if on_node(lease, node)]


def node_down(sched: LeaseScheduler, node: int, now: int) -> None:
    """Take a node out of planning from now on. The caller has first requeued or failed `leases_on(node)`, so
    nothing planned remains there; the next round plans around it."""
    sched.table.take_down(node)
    sched.log.info("LSCHED", "Node %i is down: left out of planning." % node)


def node_up(sched: LeaseScheduler, node: int, now: int) -> None:
    """Give a node back: the next round may use it (leases that did not fit are tried again)."""
    sched.table.bring_up(node)
    for lease in sched.queue:
        lease.failed_with = None
    sched.log.info("LSCHED", "Node %i is up: back in planning." % node)
