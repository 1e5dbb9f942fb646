"""The hint of a CP-SAT round: the greedy plan completed by booking every movable lease in the line's order at its
earliest fit (conservative backfilling, tried on the slot table and taken out again), and the head's guard."""
from __future__ import annotations

from optlease.scheduling import overheads as oh
from optlease.scheduling.cpsat.prepare import wait_weight
from optlease.scheduling.roomindex import RoomIndex
from optlease.scheduling.round_fit import OneEachFits
from optlease.scheduling.records import BOOKED, RR, WAITING, Lease, NotSchedulable
from optlease.scheduling.snapshot import LeasePlan, Migration, Outcome



class HintCompletion:
    """The hint half of CpsatRound (a mixin: it needs `self.sched`, `self.policy` and `_expected`)."""

    # the completion's earliest fits from the nodes' free intervals where they apply (round_fit); False: the VM
    # scheduler's search for every lease (what the tests compare them with)
    fast_fits = True

    def _latest_start(self, lease: Lease, hint: LeasePlan, head: bool, now: int) -> int | None:
        """The head's guard (models/cpsat-round.md, step 3): the oldest movable lease never starts later than the hint
        books it, as aggressive backfilling never lets a younger lease delay the reservation of the head of its
        queue; nor does a promised lease (round_promise), which the hint books first; the others have no bound, so
        that the round may reorder them for the objective. A wait bound of a
        fixed length (6 h until this version) held a lease in arrival order whatever its size, and the round's
        plans became conservative backfilling of every lease that had waited that long (models/cpsat-round.md,
        *On workloads it was not tuned on*)."""
        if not (head or self._is_promised(lease)) or hint.outcome is not Outcome.ACCEPTED or hint.start is None \
                or now <= lease.req.arrival:
            return None   # a lease in its arrival round has waited for nothing yet: the round may place it freely
        return hint.start

    def _complete(self, now: int, movable: list[Lease]) -> dict[int, LeasePlan]:
        """The hint's bookings: from the oldest lease the greedy pass left queued on (every movable lease, where some
        are promised), every movable lease booked in the line's order (`_line`) at its earliest fit (conservative
        backfilling; tried on the slot table and taken out again). Bookings made earlier give way, so a lease an AR
        sent back to the queue gets its place in line back. It books the whole line, whatever that takes: a
        completion cut short by the clock would make the round's plan depend on the machine."""
        queued = [(lease.req.arrival, lease.id) for lease in movable if lease.state in WAITING]
        promised = any(self._is_promised(lease) for lease in movable)
        if not queued and not promised:
            return {}
        # with promises, the whole line is booked again, promises first: one that an AR or a premature end's
        # re-booking displaced gets its place back from whatever took it (round_promise)
        oldest = (-1, -1) if promised else min(queued)
        out, _ = self._rebook(now, self._line(now, [lease for lease in movable
                                                    if (lease.req.arrival, lease.id) >= oldest]))
        return out

    def _rebook(self, now: int, rebook: list[Lease], new: Lease | None = None) \
            -> tuple[dict[int, LeasePlan], LeasePlan | None]:
        """Book `rebook` in order, each at its earliest fit, with their own bookings lifted; tried on the slot table
        and taken out again. With `new` (an AR or immediate lease the greedy pass refused), the greedy pass's own
        search books it first, without preempting anyone: the bookings of a round are plans, which an AR displaces
        as Haizea's AR displaces queued best-effort work, and the leases are booked again after it (a lease that
        then fits nowhere is deferred). Returns the plans, and the new lease's plan (None: it does not fit even
        with every booking lifted, and nothing is planned)."""
        sched, out, added, first = self.sched, {}, [], None
        withdrawn = [rr for lease in rebook if lease.state in BOOKED
                     for rr in (*lease.last_vmrr().pre, lease.last_vmrr(), *lease.last_vmrr().post)]
        log, quiet = sched.log, sched.log.info_on
        log.info_on = False
        if self.images is not None:   # the link as the completion books it: the transfers of the leases kept
            self.images.start_hint(now, {lease.id for lease in rebook})
        for rr in withdrawn:
            sched.table.remove(rr)
        table, kept = sched.table, sched.table.touched
        if kept is None:
            table.touched = []   # the room index follows the table's changes in its touched log
        table.room = RoomIndex(table)   # the searches below ask which busy nodes have room, instant after instant
        try:
            if new is not None:
                try:
                    vmrr, _ = sched.vm.schedule(new, now, None, False, None, preempting=False)
                except NotSchedulable:
                    return {}, None
                for rr in (*vmrr.pre, vmrr, *vmrr.post):
                    sched.table.add(rr)
                    added.append(rr)
                first = LeasePlan(new.id, Outcome.ACCEPTED, start=vmrr.start,
                                  nodes=tuple(vmrr.mapping[v] for v in sorted(new.demands)), end=vmrr.end)
            # the earliest fits from the nodes' free intervals, where each node holds one of a lease's VMs
            fast = OneEachFits(sched, now) if self.fast_fits and OneEachFits.applies(sched, self.images) else None
            for lease in rebook:
                try:
                    vmrr = fast.book(lease) if fast is not None else None
                    kept = vmrr is not None   # (booked by `fast`, which keeps it)
                    if not kept:
                        if fast is not None:
                            added.extend(fast.flush())   # the VM scheduler searches a table with every booking
                        vmrr = self._asap(lease, now)
                except NotSchedulable:
                    if new is not None:
                        out[lease.id] = LeasePlan(lease.id, Outcome.DEFERRED, reason="no room after the new lease")
                    continue
                if not kept:
                    for rr in (*vmrr.pre, vmrr, *vmrr.post):
                        sched.table.add(rr)
                        added.append(rr)
                    if fast is not None:
                        fast.changed(vmrr.nodes())
                if self.images is not None:
                    self.images.hint_booked(lease, vmrr, now)
                start = vmrr.begin()
                nodes = tuple(vmrr.mapping[v] for v in sorted(lease.demands))
                out[lease.id] = LeasePlan(lease.id, Outcome.ACCEPTED, start=start, nodes=nodes, end=vmrr.end)
        finally:
            for rr in added:
                sched.table.remove(rr)
            for rr in withdrawn:
                sched.table.add(rr)
            log.info_on = quiet
            table.room = None
            if kept is None:
                table.touched = None
        return out, first

    def _line(self, now: int, leases: list[Lease]) -> list[Lease]:
        """The order the completion books leases in: the promised leases first, in promise order (round_promise);
        then the oldest (the head, whose place the guard keeps); then the others by run time over their weight in
        the round's objective, shortest first (Smith's rule for the weighted completion time the round minimizes;
        ties in arrival order); the run is what a booking holds: what the lease has left, or its run-time estimate
        (scheduling.estimate)."""
        weights = self.sched.opts.weights
        ordered = sorted(leases, key=lambda lease: (lease.req.arrival, lease.id))
        promised = self._promise_line(ordered)   # first: a promise is never delayed by a lease booked after it
        head = [lease for lease in ordered[:1] if lease not in promised]
        rest = [lease for lease in ordered[1:] if not self._is_promised(lease)]
        booked_run = self.sched.vm.estimates.booked_run

        def smith(lease: Lease) -> float:
            run = booked_run(lease)
            return run / wait_weight(now, lease.req, weights, self._expected(lease, run))

        rest.sort(key=lambda lease: (smith(lease), lease.req.arrival, lease.id))
        return promised + head + rest

    def _asap(self, lease: Lease, now: int) -> RR:
        """The lease's earliest whole booking from now, not added to the slot table: a suspended lease resumes where
        its image is or, where `migration` allows, anywhere once its image is copied, whichever begins first (the
        booking holds no copy: `_build` adds it)."""
        vm = self.sched.vm
        if not lease.is_suspended():   # from now, or (disk images managed) when its image can be on each node
            if self.images is not None:
                return self.images.asap(lease, now)
            return vm.asap(lease, now, None, True, False, None, strict=True)
        tries = [(dict(lease.image_nodes), {n: now for n in set(lease.image_nodes.values())})]
        if self.policy.migration is not Migration.NO and not self.sched.resumes_in_place(lease):
            copy = oh.migration_time(lease, self.sched.opts)
            tries.append((None, {n: now + copy for n in self.sched.table.nodes}))
        best = None
        for fixed, earliest in tries:
            if best is not None and best.begin() == now:
                break   # nothing begins sooner
            try:
                found = vm.asap(lease, now, earliest, True, True, fixed, strict=True)
            except NotSchedulable:
                continue
            if best is None or found.begin() < best.begin():
                best = found
        if best is None:
            raise NotSchedulable("no room for it at this time")
        return best
