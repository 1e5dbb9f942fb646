"""Preempting a lease and taking bookings back: suspending it by a given instant or cancelling and requeueing it,
taking a reservation out of the slot table and putting it back as it was. Part of Haizea's lease scheduler
(`LeaseScheduler`), kept apart because the CP-SAT round's commit undoes and redoes bookings with the same steps."""
from __future__ import annotations

from typing import NamedTuple

from optlease.domain.lease import LeaseState
from optlease.scheduling import overheads as oh
from optlease.scheduling.records import BOOKED, VM, RR, Lease, NotSchedulable

S = LeaseState


class Preemption:
    """The preemption half of LeaseScheduler (a mixin: it needs the scheduler's table, VM scheduler, image
    transfers, options, log, `stops`, `enqueue` and `_hold`)."""

    def preempt(self, lease: Lease, t: int, now: int) -> None:
        self.log.info("LSCHED", "Preempting lease #%i..." % lease.id)
        lease.preemptions += 1
        vmrr = lease.last_vmrr()
        cancel = (vmrr.state == "scheduled" and vmrr.start >= t) or not oh.can_be_suspended(lease, self.opts) \
            or t - vmrr.start < oh.scheduling_threshold(lease, self.opts, resuming=False)
        if not cancel:
            try:
                self.suspend_at(vmrr, t, now)
            except NotSchedulable:
                cancel = True
            else:
                self.log.info("LSCHED", "... lease #%i will be suspended at %s." % (lease.id, self.log.t(t)))
                return
        self.log.info("LSCHED", "... lease #%i has been cancelled and requeued." % lease.id)
        self.cancel_vmrr(vmrr, now)
        lease.vmrrs.pop()
        lease.requeues += 1
        if lease.state in (S.SUSPENDED_SCHEDULED, S.MIGRATING, S.RESUMING):
            # Still suspended: its memory images stay where they are now. A copy under way is given up (the rounds
            # done stay done, as after a premature end); Haizea would fail here (migrating -> queued).
            if lease.state is S.MIGRATING:
                lease.set_state(S.SUSPENDED_SCHEDULED)
            lease.set_state(S.SUSPENDED_QUEUED)
        else:
            if lease.state is S.ACTIVE:
                # The VM is destroyed: everything it ran, before earlier suspensions too, is lost.
                for held in lease.held:
                    if held.kind == VM and held.outcome is None:
                        held.outcome = "requeued"
                lease.accumulated = 0
                lease.image_nodes = None
            lease.set_state(S.QUEUED)
        self.enqueue(lease)

    def suspend_at(self, vmrr: RR, t: int, now: int) -> tuple:
        """Book the VM reservation's suspension so that it is over by `t`; what `unsuspend` needs to take it back."""
        saved = (vmrr.end, vmrr.post, vmrr.checkpoint)
        for rr in (vmrr, *vmrr.post):
            self.table.remove(rr)
        try:
            self.vm.suspend(vmrr, t, now)
        except NotSchedulable:
            self._put_back(vmrr, saved)
            raise
        vmrr.checkpoint = None   # it ends in a suspension now, not where an estimate runs out
        for rr in (vmrr, *vmrr.post):
            self.table.add(rr)
        return saved

    def unsuspend(self, vmrr: RR, saved: tuple) -> None:
        """Take back a suspension `suspend_at` booked (it has not begun)."""
        for rr in (vmrr, *vmrr.post):
            self.table.remove(rr)
        self._put_back(vmrr, saved)

    def _put_back(self, vmrr: RR, saved: tuple) -> None:
        vmrr.end, vmrr.post, vmrr.checkpoint = saved
        for rr in (vmrr, *vmrr.post):
            self.table.add(rr)

    def cancel_vmrr(self, vmrr: RR, now: int) -> None:
        """Take a VM reservation and everything around it out of the table (what already ran is kept)."""
        if vmrr.backfill and vmrr.state == "scheduled":
            self.vm.future_count -= 1
            vmrr.backfill = False
        if self.prep is not None:
            self.prep.release(vmrr.lease)
        for rr in (*vmrr.pre, vmrr, *vmrr.post):
            if rr.state == "active":
                self._hold(rr, rr.start, now, outcome="requeued" if rr.kind == VM else "cancelled")
                if rr.kind == VM:
                    self.stops(rr.lease.id)
            if rr.state != "done":
                self.table.remove(rr)
                rr.state = "cancelled"

    def take_out(self, lease: Lease) -> Withdrawn:
        """Take a booked lease's reservation (not begun) out of the slot table, and remember what `put_back` needs
        to undo that and what is booked for the lease since; a lease with no booking is only remembered. Its state
        is the caller's to set."""
        old = lease.last_vmrr() if lease.state in BOOKED else None
        if old is not None:
            for rr in (*old.pre, old, *old.post):
                self.table.remove(rr)
            if old.backfill:
                self.vm.future_count -= 1
            lease.vmrrs.pop()
        return Withdrawn(old, lease.state, lease.image_nodes, lease.migrations, len(lease.held))

    def put_back(self, lease: Lease, saved: Withdrawn) -> None:
        """Undo `take_out` once what was booked since is gone: the images and history as they were (a resume
        elsewhere without copying moves the images when it is booked), the reservation, the state."""
        lease.image_nodes, lease.migrations = saved.image_nodes, saved.migrations
        del lease.held[saved.held:]
        old = saved.vmrr
        if old is not None:
            lease.vmrrs.append(old)
            for rr in (*old.pre, old, *old.post):
                self.table.add(rr)
            if old.backfill:
                self.vm.future_count += 1
        if lease.state is not saved.state:
            lease.set_state(saved.state)


class Withdrawn(NamedTuple):
    """A booked lease's reservation taken out of the slot table (`LeaseScheduler.take_out`; None: it had none), and
    what booking it again may change."""
    vmrr: RR | None
    state: S
    image_nodes: dict[int, int] | None
    migrations: int
    held: int           # how many held reservations the lease had
