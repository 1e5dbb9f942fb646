"""Promises of the cpsat round: a waiting lease that has waited as long as it asks to run gets a booking the round
keeps, that later rounds may move earlier but never later (conservative backfilling's guarantee, for the leases that
have waited their run: models/cpsat-round.md, *Promises: a bound on the longest wait*)."""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from optlease.scheduling.cpsat.prepare import SLOWDOWN_BOUND
from optlease.scheduling.records import BOOKED, RR, WAITING, Lease, NotSchedulable
from optlease.scheduling.snapshot import LeasePlan, Outcome


class RoundPromises:
    """The promise half of CpsatRound (a mixin: it needs `self.sched`, `self.images`, `_movable`, `_greedy_start`,
    `_asap` and PlanCommit's `_withdraw`, `_restore`, `_build` and `_commit`). `self._promised` maps each promised
    lease to its place in the promise line (the order in which leases were promised; ties in arrival order)."""

    _promised: Mapping[int, int] = MappingProxyType({})   # none until a round promises (`_promise` makes its own)
    _promises_made: int = 0
    # lease id -> (its booking and booked run, the table's mark) where `_move_up` found nothing sooner (CpsatRound's own)
    _no_sooner: dict[int, tuple]

    def _promise_after(self, lease: Lease) -> int:
        """How long a lease waits before it is promised: the run its booking asks for (its run-time estimate, or
        what it asked for), at least the bounded slowdown's bound; once it has waited that long its slowdown, started
        now, is 2, and every later round keeps its place."""
        return max(SLOWDOWN_BOUND, self.sched.vm.estimates.booked_run(lease))

    def _promise(self, now: int, movable: list[Lease]) -> None:
        """Forget leases that have started (or left); promise the waiting leases that have not started yet and have
        waited their run. A promise outlives a while the round may not move the lease (an AR's preemption booked it
        to be suspended before it began): it holds again when the lease is movable again."""
        leases = self.sched.leases
        self._promised = {i: seq for i, seq in self._promised.items()
                          if i in leases and leases[i].first_start is None}
        due = sorted((lease for lease in movable if lease.id not in self._promised and lease.first_start is None
                      and now - lease.req.arrival >= self._promise_after(lease)),
                     key=lambda lease: (lease.req.arrival, lease.id))
        for lease in due:
            self._promised[lease.id] = self._promises_made
            self._promises_made += 1

    def _is_promised(self, lease: Lease) -> bool:
        return lease.id in self._promised

    def _promise_line(self, leases: list[Lease]) -> list[Lease]:
        """The promised leases among `leases`, in the order they were promised."""
        return sorted((lease for lease in leases if lease.id in self._promised), key=lambda l: self._promised[l.id])

    def _book_promised(self, now: int) -> None:
        """A promised lease is never left in the queue without a booking. Where one lost its booking (an AR's
        preemption made it a booking the greedy pass manages, one that runs until the AR and is suspended there,
        and a premature end's re-booking gave aggressive backfilling's one reservation to a younger lease), it is
        booked again before the greedy pass, in promise order, by the greedy pass's own search (which may book it
        to be suspended before an AR, where the round model states whole runs only), with the bookings of leases not
        promised lifted: those not in its way get theirs back, the others go back to the queue. A promise is never
        delayed by a lease booked after it (t03's #147: models/cpsat-round.md, *Promises*). Not with disk images
        managed (their transfers are the round's to plan)."""
        if not self._promised or self.images is not None:
            return
        movable = self._movable(now)
        lost = [lease for lease in self._promise_line(movable) if lease.state in WAITING and lease.first_start is None]
        if not lost:
            return
        sched = self.sched
        lifted = [(lease, self._withdraw(lease)) for lease in movable
                  if lease.state in BOOKED and not self._is_promised(lease)]
        for lease in lost:
            vmrr = self._earliest_run(lease, now)
            if vmrr is None:
                continue
            self._kept = {lease.id}
            self._commit(lease, vmrr, now)
            self._kept = set()
            if sched.log.info_on:
                sched.log.info("LSCHED", "Lease #%i's promise is booked again from %s." % (
                    lease.id, sched.log.t(vmrr.begin())))
        for lease, saved in lifted:
            old = saved.vmrr
            if self._fits((*old.pre, old, *old.post)):
                self._restore(lease, saved)

    def _earliest_run(self, lease: Lease, now: int) -> RR | None:
        """A promised lease's booking where the greedy pass would book it with a reservation (not on the slot table):
        its own search, which may book it to run until an AR and be suspended there, as Haizea books (the round
        model states whole runs only). A promised lease has never run (a promise lasts until its first start): it
        starts afresh."""
        try:
            return self.sched.vm.asap(lease, now, None, True, False, None)
        except NotSchedulable:
            return None

    def _move_up(self, now: int) -> None:
        """Conservative backfilling's compression, without a solve: each promised booking the round keeps (not one
        of the greedy pass's reservations, which it books again itself) moves to its earliest fit where that begins
        sooner, in promise order, as room opens (a premature end). The round keeps promised bookings out of the
        greedy pass's re-booking, which would send all but the first back to the queue, and a solve at once for each
        of them cost the Blue month's first 5 days 1,121 solved rounds instead of 168. Not with disk images managed
        (their transfers are the round's to plan)."""
        if not self._promised or self.images is not None:
            return
        kept = [lease for lease in self._movable(now) if lease.state in BOOKED and not lease.last_vmrr().backfill]
        table, booked_run = self.sched.table, self.sched.vm.estimates.booked_run
        tried = self._no_sooner
        failed: list[Lease] = []   # tried since the last move, nothing sooner found (their searches left the
        # table as it was: each booking taken out is put back)
        for lease in self._promise_line(kept):
            start = self._greedy_start(lease)
            if start is None or start <= now or lease.is_suspended():
                continue
            # its earliest fit began no sooner than its booking, and since then nothing on the table from now on
            # changed (nor its booking or run): a search from now finds nothing sooner either
            key = (lease.last_vmrr().seq, booked_run(lease))
            seen = tried.get(lease.id)
            if seen is not None and seen[0] == key and table.unchanged_from(seen[1], now):
                continue
            saved = self._withdraw(lease)
            try:
                found = self._asap(lease, now)
            except NotSchedulable:
                found = None
            vmrr = None
            if found is not None and found.begin() < start:
                plan = LeasePlan(lease.id, Outcome.ACCEPTED, start=found.begin(),
                                 nodes=tuple(found.mapping[v] for v in sorted(lease.demands)))
                vmrr = self._build(lease, plan, now)
            if vmrr is None:
                self._restore(lease, saved)
                if found is None or found.begin() >= start:
                    failed.append(lease)
                continue
            failed.clear()   # the table changed: what the leases before it found no longer holds
            self._kept = {lease.id}
            self._commit(lease, vmrr, now)
            self._kept = set()
            if self.sched.log.info_on:
                self.sched.log.info("LSCHED", "Lease #%i's promised booking moves up from %s to %s." % (
                    lease.id, self.sched.log.t(start), self.sched.log.t(vmrr.begin())))
        mark = table.mark()
        for lease in failed:
            tried[lease.id] = ((lease.last_vmrr().seq, booked_run(lease)), mark)
