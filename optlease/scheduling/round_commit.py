"""Committing a CP-SAT round's plan to the slot table: suspensions, bookings built by the VM scheduler at the
solver's starts and nodes, each checked against the node profiles; all or nothing."""
from __future__ import annotations

from optlease.domain.lease import LeaseState
from optlease.scheduling import overheads as oh
from optlease.scheduling.preemption import Withdrawn
from optlease.scheduling.records import BOOKED, SHUTDOWN, RR, Lease, NotSchedulable
from optlease.scheduling.snapshot import LeasePlan, Outcome

S = LeaseState


class PlanCommit:
    """The commit half of CpsatRound (a mixin: it needs `self.sched`)."""

    _for_image: set[int] = frozenset()   # later bookings a round keeps for their disk image (CpsatRound._committed)
    _kept: set[int] = frozenset()        # later bookings a round keeps for a promise, the head's aside (round_promise)

    def _apply(self, now: int, moves: list[Lease], plan: dict[int, LeasePlan], stops: list[Lease] = (),
               new: tuple[Lease, LeasePlan] | None = None) -> bool:
        """Suspend `stops` when the plan says (now, for waiting leases; before an AR the model admitted), book `new`
        (an AR or immediate lease the model admitted, with its plan) and re-plan `moves` as the solver says; all or
        nothing (False: the greedy plan is left as it was). A suspended lease goes back to the queue when its
        suspension is over, and its resume is booked then."""
        if self.images is not None:
            self.images.begin_commit(plan, moves)
        stopped = []
        for lease in stops:
            undo = self._suspend(lease, plan[lease.id].suspend_at, now)
            if undo is None:
                for vmrr, saved in reversed(stopped):
                    self.sched.unsuspend(vmrr, saved)
                return False
            stopped.append((lease.last_vmrr(), undo))
        withdrawn = [(lease, self._withdraw(lease)) for lease in moves]
        placed: list[Lease] = []
        ok = new is None or self._book_new(*new, now)
        # a lease that rides on another's image transfer is booked after it: by when each needs the link, else starts
        order = sorted(moves, key=lambda l: (_first_need(plan[l.id]), l.id))
        for lease in order if ok else []:
            p = plan[lease.id]
            if p.outcome is not Outcome.ACCEPTED or p.start is None:
                continue   # deferred: it stays in the queue
            vmrr = self._build(lease, p, now)
            if vmrr is None or (self.images is not None and not self.images.book(lease, vmrr, p.transfer_start, now)):
                ok = False
                break
            self._commit(lease, vmrr, now)
            placed.append(lease)
        if ok:
            for vmrr, _ in stopped:
                vmrr.lease.preemptions += 1
                if vmrr.end == now:
                    self.sched.log.info("LSCHED", "Lease #%i is suspended so that waiting leases run." % vmrr.lease.id)
                    self.sched.end_rr(vmrr, now)   # its run ends now: the suspension begins
                else:
                    self.sched.log.info("LSCHED", "Lease #%i will be suspended at %s%s." % (
                        vmrr.lease.id, self.sched.log.t(vmrr.end), " for lease #%i" % new[0].id if new else ""))
            return True
        for lease in placed:
            self._withdraw(lease)
        if new is not None and new[0].state is S.SCHEDULED:
            self.sched.cancel_vmrr(new[0].vmrrs.pop(), now)
            new[0].set_state(S.PENDING)
        for lease, saved in withdrawn:
            self._restore(lease, saved)
        for vmrr, saved in reversed(stopped):
            self.sched.unsuspend(vmrr, saved)
        return False

    def _make_room(self, lease: Lease, p: LeasePlan, movable: list[Lease], now: int) -> list[Lease] | None:
        """Book a new lease at `p` (found with the round's bookings lifted, `_rebook`), sending the movable
        bookings on its nodes during its run back to the queue, as Haizea's queued leases wait behind an AR; the
        leases sent back, or None (nothing changed) where it does not fit so."""
        nodes, end = set(p.nodes), p.end + oh.shutdown_time(lease, self.sched.opts)
        if self.images is not None:
            self.images.begin_commit()
        in_way = []
        for other in movable:
            if other.state in BOOKED:
                vmrr = other.last_vmrr()
                if any(rr.start < end and p.start < rr.end and nodes & set(rr.demand)
                       for rr in (*vmrr.pre, vmrr, *vmrr.post)):
                    in_way.append(other)
        withdrawn = [(other, self._withdraw(other)) for other in in_way]
        if self._book_new(lease, p, now):
            return in_way
        for other, saved in reversed(withdrawn):
            self._restore(other, saved)
        return None

    def _book_new(self, lease: Lease, p: LeasePlan, now: int) -> bool:
        """Book an admitted AR or immediate lease where the plan says, if it fits the slot table as it stands."""
        vmrr = self.sched.vm.whole_run(lease, p.start, {v: n for v, n in zip(sorted(lease.demands), p.nodes)})
        if not self._fits((vmrr, *vmrr.post)):
            return False
        if self.images is not None and not self.images.book_new(lease, vmrr, now):
            return False
        for rr in (vmrr, *vmrr.post):
            self.sched.table.add(rr)
        lease.vmrrs.append(vmrr)
        lease.set_state(S.SCHEDULED)
        return True

    def _suspend(self, lease: Lease, at: int, now: int) -> tuple | None:
        """Book the lease's suspension from `at` on (its VM reservation ends then); what `LeaseScheduler.unsuspend`
        needs to take it back, or None when it cannot be booked so."""
        vmrr = lease.last_vmrr()
        try:
            saved = self.sched.suspend_at(vmrr, at + self._op_time(lease, vmrr.mapping, True), now)
        except NotSchedulable:
            return None
        if vmrr.end != at:
            self.sched.unsuspend(vmrr, saved)
            return None
        return saved

    def _build(self, lease: Lease, p: LeasePlan, now: int) -> RR | None:
        """The lease's booking at the plan's start and nodes; a suspended lease resumed off its images' nodes has them
        copied in the migration time just before (`migration: yes`; the copy holds no node's capacity), or just moves
        them (`yes-notransfer`, when it is committed). None where it does not fit the slot table."""
        sched, opts = self.sched, self.sched.opts
        resuming = lease.is_suspended()
        remaining, shutdown = sched.vm.estimates.booked_run(lease), oh.shutdown_time(lease, opts)
        mapping = {v: n for v, n in zip(sorted(lease.demands), p.nodes)}
        moved = resuming and mapping != lease.image_nodes
        if moved and sched.resumes_in_place(lease):
            return None
        resume = self._op_time(lease, mapping, False) if resuming else 0
        try:
            vmrr = sched.vm.build(lease, p.start, p.start + resume + remaining + shutdown, mapping, resuming,
                                  remaining, shutdown)
        except NotSchedulable:
            return None
        if not vmrr.post or vmrr.post[0].kind != SHUTDOWN or vmrr.start < now:
            return None
        copy = oh.migration_time(lease, opts) if moved else 0
        if copy:
            if p.start - copy < now:
                return None
            sched.copy_images(vmrr, p.start - copy, p.start)
        return vmrr if self._fits((*vmrr.pre, vmrr, *vmrr.post)) else None

    def _resume_time(self, lease: Lease) -> int:
        """How long resuming a suspended lease on its image's nodes takes (the model's resume time wherever it
        resumes; `_build` books the span on the nodes it resumes on)."""
        return self._op_time(lease, lease.image_nodes, False)

    def _op_time(self, lease: Lease, mapping: dict[int, int], suspend: bool) -> int:
        """How long suspending or resuming a lease placed by `mapping` takes: the span of the blocks the VM scheduler
        builds for it."""
        blocks = oh.susprem_blocks(lease, mapping, 0, oh.FORWARD, self.sched.opts, suspend=suspend)
        return max(end for _, end, _ in blocks)

    def _commit(self, lease: Lease, vmrr: RR, now: int) -> None:
        sched = self.sched
        if lease in sched.queue:
            sched.queue.remove(lease)
        # as the greedy pass counts them: a best-effort reservation for later than now (only the oldest lease's, as
        # a round commits: aggressive backfilling's one reservation), which a premature end books again sooner; a
        # later booking kept for its disk image starts when its image is there, which greedy does not count either
        vmrr.backfill = vmrr.begin() > now and lease.id not in self._for_image and lease.id not in self._kept
        if vmrr.backfill:
            sched.vm.future_count += 1
        resuming = lease.state is S.SUSPENDED_QUEUED
        if resuming and vmrr.mapping != lease.image_nodes and sched.opts.migration == "yes-notransfer":
            sched.move_images(lease, vmrr.mapping, now)
        for rr in (*vmrr.pre, vmrr, *vmrr.post):
            sched.table.add(rr)
        lease.vmrrs.append(vmrr)
        lease.set_state(S.SUSPENDED_SCHEDULED if resuming else S.SCHEDULED)

    def _withdraw(self, lease: Lease) -> Withdrawn:
        """Take a lease's booked (not started) reservation out and put it back in the queue."""
        sched = self.sched
        saved = sched.take_out(lease)
        if self.images is not None:   # its transfers and cache pins are given back too
            self.images.withdraw(lease)
        if saved.vmrr is not None:
            lease.set_state(S.SUSPENDED_QUEUED if lease.state is S.SUSPENDED_SCHEDULED else S.QUEUED)
            sched.enqueue(lease)
        return saved

    def _restore(self, lease: Lease, saved: Withdrawn) -> None:
        """Undo `_withdraw` once what the round booked for the lease is gone."""
        if saved.vmrr is not None and lease in self.sched.queue:
            self.sched.queue.remove(lease)
        self.sched.put_back(lease, saved)
        if self.images is not None:
            self.images.restore(lease)

    def _fits(self, rrs) -> bool:
        """Whether reservations not on the slot table fit on their nodes as it stands. A reservation of no length
        (a shutdown of `shutdown-time` 0) holds no instant, so it fits whatever starts where it is: asking the node
        profile about it would ask about the instant after it, where the next booking on its nodes may begin (a round's
        plan that ends a lease exactly there was refused so, and an admission fell back on `_make_room`)."""
        table = self.sched.table
        return all(table.profiles[pnode].fits_between(rr.start, rr.end, d, table.caps[pnode])
                   for rr in rrs if rr.end > rr.start for pnode, d in rr.demand.items())


def _first_need(p: LeasePlan) -> int:
    """When a plan first needs anything: its own image transfer, else its start."""
    if p.transfer_start is not None:
        return p.transfer_start
    return p.start if p.start is not None else 0
