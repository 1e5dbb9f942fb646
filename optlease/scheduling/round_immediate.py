"""Room for an immediate lease that the round model cannot admit (a mixin of CpsatRound): the best-effort work in
its way that Haizea's own preemption would cancel rather than suspend goes back to the queue
(models/cpsat-round.md, *Immediate leases: room by requeueing*).

An immediate lease is now or never: it must start at its arrival (the schedule contract), so a suspension, which
holds its nodes while the memory images are written, never makes room for it in time. What can make room at once is
what Haizea's `preempt` cancels and requeues for an AR instead of suspending: a booking that has not begun (it loses
nothing: its copy under way, if any, is given up) and a first run younger than the scheduling threshold (it loses
what it ran, at most the threshold). The cheapest such work is taken first, no more of it lost in all than the
node-seconds the immediate lease asks for, and only where the greedy pass's own search then finds the lease a place."""
from __future__ import annotations

from optlease.domain.lease import LeaseKind, LeaseState
from optlease.scheduling import overheads as oh
from optlease.scheduling.policies import AGING_HORIZON, ARPreemptsEverything
from optlease.scheduling.records import MIGRATE, RR, Lease, NotSchedulable

S = LeaseState
# a booking not begun: booked, or its memory images' copy under way before the resume
NOT_BEGUN = (S.SCHEDULED, S.SUSPENDED_SCHEDULED, S.MIGRATING)


class ImmediateRoom:
    """The requeueing half of CpsatRound's admission (a mixin: it needs `self.sched`, `self.images` and `_fits`)."""

    def _requeueable(self, now: int) -> list[tuple[int, Lease]]:
        """The best-effort leases whose preemption now is, by Haizea's rule, a cancellation: each with the work it
        loses (node-seconds), the cheapest first (ties by id)."""
        sched, out = self.sched, []
        for lease in sched.leases.values():
            if lease.kind is not LeaseKind.BEST_EFFORT or not lease.req.preemptible or not lease.vmrrs \
                    or now - lease.req.arrival >= AGING_HORIZON or self._is_promised(lease):
                continue    # (a lease older than the policy's aging horizon never gives way, as for an AR; nor a
                # promised booking: round_promise)
            vmrr = lease.last_vmrr()
            if lease.state in NOT_BEGUN:
                # nothing of it has begun but a copy of its images (which holds no node)
                if vmrr.state == "scheduled" and vmrr.start >= now \
                        and all(rr.state == "scheduled" or rr.kind == MIGRATE for rr in vmrr.pre):
                    out.append((0, lease))
            elif lease.state is S.ACTIVE and vmrr.state == "active" and lease.accumulated == 0 \
                    and now - vmrr.start < oh.scheduling_threshold(lease, sched.opts, resuming=False) \
                    and all(rr.state == "scheduled" for rr in vmrr.post):
                # a first run younger than the threshold: Haizea cancels it rather than suspend it (a resumed run
                # is not taken: cancelling it would lose everything it ran before its suspensions too)
                out.append(((now - vmrr.start) * lease.numnodes, lease))
        out.sort(key=lambda item: (item[0], item[1].id))
        return out

    def _room_by_requeueing(self, lease: Lease, now: int) -> list[Lease] | None:
        """Admit an immediate lease by requeueing the cheapest requeueable work in its way (`_requeueable`), losing no
        more node-seconds of work than the lease asks for: the leases requeued, or None (nothing changed) where that
        work does not make room. None too with disk images managed (its transfers would have to be planned) and under
        a preemption policy other than `ar-preempts-everything` (nothing preempted, or a policy of the user's, whose
        rule for an immediate lease is not known)."""
        sched = self.sched
        if lease.kind is not LeaseKind.IMMEDIATE or self.images is not None \
                or type(sched.policies.preemption) is not ARPreemptsEverything:
            return None
        # the cheapest work first, and never more work lost than the lease asks for: requeueing a wide run to admit
        # a few node-seconds would waste more of the site than it serves
        order, lost = [], 0
        for cost, other in self._requeueable(now):
            lost += cost
            if lost > lease.numnodes * lease.req.duration:
                break
            order.append(other)
        found, taken = self._search_without(lease, now, order)
        if found is None:
            return None
        rrs = (*found.pre, found, *found.post)
        victims = [other for other, held in taken if any(_overlaps(rr, mine) for rr in held for mine in rrs)]
        # only the leases the booking needs are requeued: check it fits with just their reservations out
        held = [rr for other, out in taken if other in victims for rr in out]
        for rr in held:
            sched.table.remove(rr)
        try:
            fits = self._fits(rrs)
        finally:
            for rr in held:
                sched.table.add(rr)
        if not fits:
            return None
        for other in victims:
            sched.preempt(other, now, now)   # Haizea's preemption: a cancellation here, the lease requeued
        for rr in rrs:
            sched.table.add(rr)
        lease.vmrrs.append(found)
        lease.set_state(S.SCHEDULED)
        return victims

    def _search_without(self, lease: Lease, now: int, order: list[Lease]) -> tuple[RR | None, list]:
        """The greedy pass's search for `lease` with the reservations of `order` taken out one lease at a time,
        until it finds a place: that booking (not on the slot table) and the leases taken out with their
        reservations; the slot table is left as it was."""
        sched, taken, found = self.sched, [], None
        log, quiet = sched.log, sched.log.info_on
        log.info_on = False
        try:
            for other in order:
                vmrr = other.last_vmrr()
                out = [rr for rr in (*vmrr.pre, vmrr, *vmrr.post) if rr.state in ("scheduled", "active")]
                for rr in out:
                    sched.table.remove(rr)
                taken.append((other, out))
                try:
                    found, _ = sched.vm.schedule(lease, now, None, False, None, preempting=False)
                    break
                except NotSchedulable:
                    continue
        finally:
            for _, out in taken:
                for rr in out:
                    sched.table.add(rr)
            log.info_on = quiet
        return found, taken


def _overlaps(a: RR, b: RR) -> bool:
    """Whether two reservations hold a node in common at a common instant."""
    return a.start < b.end and b.start < a.end and bool(set(a.demand) & set(b.demand))
