"""Where and when a lease's VMs run: exact placement of ARs, as-soon-as-possible placement of best-effort and
immediate leases, and the suspend / resume / shutdown reservations around each VM reservation (Haizea's VM
scheduler). Builds reservations; the lease scheduler decides what to commit."""
from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections import Counter

from optlease.domain.lease import LeaseKind
from optlease.eventlog import EventLog
from optlease.formats.timefmt import MAX_SECONDS
from optlease.scheduling import overheads as oh
from optlease.scheduling.estimate import RunEstimates
from optlease.scheduling.mapper import GreedyMapper, vms_of
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.records import (RESUME, SHUTDOWN, SUSPEND, VM, RR, Lease, NotSchedulable, OneVMEach,
                                        Placement, placement)
from optlease.scheduling.roomahead import WIDE
from optlease.scheduling.slottable import INF, SlotTable, fits, vadd

class VMScheduler:
    def __init__(self, table: SlotTable, opts: SchedulingOptions, policies: Policies, log: EventLog) -> None:
        self.table = table
        self.opts = opts
        self.policies = policies
        self.mapper = GreedyMapper(table, policies)
        self.log = log
        self.future_count = 0  # best-effort reservations made for the future and not yet started
        self.estimates = RunEstimates(opts)

    def can_schedule_in_future(self) -> bool:
        limit = self.opts.max_in_future
        return limit == -1 or self.future_count < limit

    @property
    def tries_every_first(self) -> bool:
        """Whether a best-effort lease that may not book the future tries each node's earliest time in turn (with
        the nodes ready by then), as Haizea does, rather than the first alone: under FCFS, where it never may (a
        lease whose image a cache holds on too few nodes would otherwise never run). With backfilling, the first
        alone, and the lease books a later start once the backfilling limit allows (docs/haizea-differences.md)."""
        return self.opts.max_in_future == 0

    def rr(self, lease: Lease, kind: str, start: int, end: int, mapping: dict[int, int], of: RR | None = None) -> RR:
        """A reservation of the lease's VMs placed by `mapping`; `of`: the VM reservation whose VMs it holds (its
        resume, suspension, shutdown or image copy), which then shares its mapping and demand (neither is ever
        changed in place: a wide lease's reservations would otherwise each copy them)."""
        if of is not None and of.mapping is mapping and of.lease is lease:
            return RR(lease, kind, start, end, mapping, of.demand, self.table.next_seq())
        shape = vms_of(lease)[1]
        # (VMs 1..n: one pointer per VM, not a dict entry)
        placed = placement(mapping, len(lease.demands))
        if shape is not None and len(placed) == len(lease.demands):
            if type(placed) is Placement and self._one_each(shape):
                # no node can hold two of these VMs: each of its nodes holds one (no entry per node)
                return RR(lease, kind, start, end, placed, OneVMEach(placed.pnodes, shape), self.table.next_seq())
            # VMs that all ask alike: a node's demand is the one VM's times the VMs it takes (the same sums)
            demand = dict.fromkeys(placed.values(), shape)
            if len(demand) < len(placed):
                for pnode, k in Counter(placed.values()).items():
                    if k > 1:
                        demand[pnode] = tuple(x * k for x in shape)
            return RR(lease, kind, start, end, placed, demand, self.table.next_seq())
        demand = {}
        for vnode, pnode in placed.items():
            d = lease.demands[vnode]
            demand[pnode] = vadd(demand[pnode], d) if pnode in demand else d
        return RR(lease, kind, start, end, placed, demand, self.table.next_seq())

    def _one_each(self, shape: tuple) -> bool:
        """Whether no node of the site can hold two VMs that ask `shape` (the nodes all alike): a placement of such
        VMs puts one on each of its nodes."""
        cap = self.table.one_cap
        return cap is not None and not fits(vadd(shape, shape), cap)

    def schedule(self, lease: Lease, now: int, earliest: dict[int, int] | None, resuming: bool,
                 fixed: dict[int, int] | None = None, preempting: bool = True) -> tuple[RR, list[Lease]]:
        """Book the lease: an AR at its start (preempting others where the policy allows and `preempting`), an
        immediate lease now, a best-effort lease as soon as it fits (in the future within the backfilling limit)."""
        if lease.kind is LeaseKind.AR:
            return self.exact(lease, now, preempting)
        if lease.kind is LeaseKind.IMMEDIATE:
            return self.asap(lease, now, earliest, False, resuming, fixed, strict=True), []
        return self.asap(lease, now, earliest, self.can_schedule_in_future(), resuming, fixed), []

    # -- advance reservations -------------------------------------------------------------------------------
    def exact(self, lease: Lease, now: int, preempting: bool = True) -> tuple[RR, list[Lease]]:
        start = lease.req.start
        if start < now:
            raise NotSchedulable("its requested start time has already passed")
        end = start + lease.req.duration + oh.shutdown_time(lease, self.opts)
        mapping, _, preempt = self.mapper.map(lease, start, end, strictend=True,
                                              allow_preemption=preempting and self.policies.preemption_enabled)
        if mapping is None:
            raise NotSchedulable("Not enough resources in specified interval")
        return self.whole_run(lease, start, mapping), preempt

    def whole_run(self, lease: Lease, start: int, mapping: dict[int, int]) -> RR:
        """The VM reservation of a lease that runs its whole requested time from `start` on `mapping`, and its
        shutdown (an AR, or an immediate lease)."""
        vmrr = self.rr(lease, VM, start, start + lease.req.duration, mapping)
        self.add_shutdown(vmrr, oh.shutdown_time(lease, self.opts))
        return vmrr

    # -- best-effort and immediate leases -------------------------------------------------------------------
    def asap(self, lease: Lease, now: int, earliest: dict[int, int] | None, allow_in_future: bool, resuming: bool,
             fixed: dict[int, int] | None, strict: bool = False) -> RR:
        remaining, shutdown, duration, min_duration, strictend, window = self.shape(lease, resuming, strict)
        need = lease.total_demand
        firsts = {now} if earliest is None else set(earliest.values())
        # from `everywhere` on, every node of the table may take the lease (a resume that may go anywhere waits for
        # the same estimate on every node): the mapper then needs no list of nodes
        everywhere = max(firsts) if earliest is not None and len(earliest) == len(self.table.nodes) else INF
        room_from = -INF   # no candidate before this has room on the site as a whole over its window
        # (the candidates skip to it at once: `floor`)
        floor = [room_from]
        # Nothing is booked to start more than a century ahead: each lease and transfer is bounded, but enough of them
        # in line (image transfers one after another on a slow link) would plan past the calendar's end. Such a lease
        # waits in the queue until its start comes within reach.
        horizon = now + MAX_SECONDS
        every = not strict and self.tries_every_first
        walked = False      # the mapper walked the nodes at a start with room (the refusal says so)
        for t in self._candidates(now, firsts, allow_in_future, fixed, floor, every):
            if t > horizon:
                break
            if t < room_from:
                continue
            room_from = self.table.earliest_total_room(t, window, need)
            if room_from > t:
                floor[0] = room_from
                continue
            end = t + duration + shutdown
            if fixed is not None:
                mapping, actualend = self.mapper.map_fixed(lease, fixed, t, end, strictend)
            else:
                onlynodes = None
                if earliest is not None and t < everywhere:
                    onlynodes = {n for n, e in earliest.items() if e <= t}
                    if len(onlynodes) == len(self.table.nodes):
                        onlynodes = None
                if onlynodes is None and self._too_few_hold(lease, t, window):
                    continue
                walked = True
                mapping, actualend, _ = self.mapper.map(lease, t, end, strictend, onlynodes)
            if mapping is None or (actualend < end and actualend - t < min_duration):
                continue
            if actualend < end and actualend - t > duration:
                continue   # room for the run but not its shutdown: Haizea will not suspend a shutdown
            try:
                vmrr = self.build(lease, t, actualend, mapping, resuming, remaining, shutdown)
            except NotSchedulable:
                continue
            if t not in firsts:
                vmrr.backfill = True   # a start found among later ends (Haizea's "in the future")
                if fixed is None:
                    self._note_walk(lease, vmrr, t)
            if self.log.info_on:
                self.log.info("VMSCHED", "Lease #%i can be scheduled on nodes %s from %s%s to %s%s" % (
                    lease.id, vmrr.nodes(), self.log.t(t), " (resuming)" if resuming else "",
                    self.log.t(actualend), " (suspending)" if vmrr.post[0].kind == SUSPEND else ""))
            return vmrr
        raise NotSchedulable("Could not find enough resources for this request", walked)

    def _note_walk(self, lease: Lease, vmrr: RR, t: int) -> None:
        """Where the mapper's walk at t ended for a booking made for the future (what a premature end asks,
        `Replanning._passed_over`): the key of the node that took its last VM in the host policy's order (-score,
        rank), by the booking's number. A node whose key comes after it was never reached."""
        if not self.policies.builtin_hosts:
            return
        mapping = vmrr.mapping
        last = mapping.pnodes[-1] if type(mapping) is Placement else mapping[max(mapping)]
        ((score, _),) = self.policies.score_hosts([last], t, lease, self.table)
        lease.cache["walked"] = (vmrr.seq, (-score, self.table.rank[last]))

    def _too_few_hold(self, lease: Lease, t: int, window: int) -> bool:
        """Whether no placement from t that the search keeps exists for a lease whose VMs ask alike: a kept one
        holds every VM over the window from t (its end is the booking's, or at least the least run worth placing
        away), and the site's nodes could not hold them all over it, each as many as fit there
        (`SlotTable.holds_over`). The mapper would place them, if at all, to an end the search refuses. (Asked of
        leases of `WIDE` VMs or more: a narrower lease's walk is short.)"""
        shape, most = vms_of(lease)[1], len(lease.demands)
        if shape is None or most < WIDE:
            return False
        held = self.table.holds_over(t, window, shape, most)
        return held is not None and held < most

    def shape(self, lease: Lease, resuming: bool, strict: bool = False) -> tuple[int, int, int, int, bool, int]:
        """What an as-soon-as-possible booking of the lease holds: the run it books, its shutdown, the time it
        books before that (the run and, when resuming, the resume), the least run worth placing, whether it must
        run to its end (it cannot be suspended), and the window the site as a whole must have room over from its
        start."""
        # fixed while the lease waits, when it books the time it asked for (no estimate learns from others' runs)
        key = ("shape", resuming, strict, lease.accumulated)
        if not self.estimates.enabled:
            found = lease.cache.get(key)
            if found is not None:
                return found
        opts = self.opts
        remaining = self.estimates.booked_run(lease)
        shutdown = oh.shutdown_time(lease, opts)
        duration = remaining + (self.resume_allowance(lease) if resuming else 0)
        min_duration = oh.scheduling_threshold(lease, opts, resuming)
        strictend = strict or not oh.can_be_suspended(lease, opts)
        # A start that fits the whole booking is taken whatever the threshold (Haizea): the window is never longer
        # than the booking itself.
        window = duration + shutdown if strictend else min(duration + shutdown, max(min_duration, 1))
        found = remaining, shutdown, duration, min_duration, strictend, window
        if not self.estimates.enabled:
            lease.cache[key] = found
        return found

    def _candidates(self, now: int, firsts: set[int], allow_in_future: bool, fixed: dict[int, int] | None = None,
                    floor: list | None = None, every: bool = True):
        """Start times to try, in order: now, the nodes' earliest times (`firsts`), and every later end of a
        reservation (on the lease's own nodes when its placement is fixed). `floor`: a one-item list the caller may
        raise as it goes; candidates below it are then skipped without being walked (placement not fixed)."""
        first = min(firsts)
        if not allow_in_future:
            # Now, or as soon as the lease's own preparation allows; with `every` (`tries_every_first`), where some
            # nodes are ready before others (its image in a cache, its memory image on its own nodes), each node's
            # earliest time in turn, with the nodes ready by then (Haizea's changepoints)
            last = None
            for t in sorted(firsts) if every else (first,):
                t = max(now, t)
                if t != last:
                    last = t
                    yield t
            return
        if floor is not None and fixed is None:
            yield from self._candidates_above(now, sorted(firsts), floor)
            return
        if fixed is not None:
            ends = sorted({rr.end for p in set(fixed.values()) for rr in self.table.by_node[p] if rr.end > now})
        else:
            ends = self.table.ends_after(now)
        last = None
        for t in heapq.merge(sorted(firsts), ends):
            if t >= first and t != last:
                last = t
                yield t

    def _candidates_above(self, now: int, firsts: list[int], floor: list):
        """`_candidates` with the placement free: `firsts` (sorted) and the ends of reservations after now, each
        once, in order, from the first of `firsts` on and never below `floor[0]`, each looked up from the last one
        (or the floor) in the table's sorted ends rather than walked to (the completion of a CP-SAT round's hint
        asks 500 leases' starts, each past hundreds of ends the site as a whole has no room at)."""
        ends, last = self.table.ends, None
        after_now = ends.bisect_right(now)   # (nothing is booked while the caller tries: the ends stay put)
        while True:
            if last is None or floor[0] > last:   # from the first of firsts, or the floor, on
                at = max(firsts[0], floor[0])
                i, j = bisect_left(firsts, at), ends.bisect_left(at)
            else:                                  # after the last candidate
                i, j = bisect_right(firsts, last), ends.bisect_right(last)
            j = max(j, after_now)
            last = min(firsts[i] if i < len(firsts) else INF, ends[j] if j < len(ends) else INF)
            if last == INF:
                return
            yield last

    def resume_allowance(self, lease: Lease) -> int:
        """The time a booking leaves for resuming: Haizea's estimate (overheads.resume_estimate), never below the
        worst case of resuming the VMs one after another."""
        if "resume-plan" in lease.cache:
            return lease.cache["resume-plan"]
        worst = oh.serial_time(lease, self.opts, suspend=False)
        lease.cache["resume-plan"] = max(oh.resume_estimate(lease, self.opts), worst)
        return lease.cache["resume-plan"]

    def build(self, lease: Lease, start: int, end: int, mapping: dict[int, int], resuming: bool, remaining: int,
              shutdown: int) -> RR:
        """The VM reservation on [start, end) with its resume, suspend or shutdown reservations. `remaining` is the
        run to book: less than the lease has left when it is a run-time estimate (the booking then has a checkpoint
        where the estimate runs out, before the margin to suspend)."""
        vmrr = self.rr(lease, VM, start, end, mapping)
        if resuming:
            self.add_blocks(vmrr, oh.susprem_blocks(lease, mapping, start, oh.FORWARD, self.opts, suspend=False),
                            RESUME)
            vmrr.start = max(rr.end for rr in vmrr.pre)
            if vmrr.start >= vmrr.end:
                raise NotSchedulable("no time left to run after resuming")
        if vmrr.end - vmrr.start < remaining + shutdown:
            if not oh.can_be_suspended(lease, self.opts):
                raise NotSchedulable("it would have to be suspended, and it cannot be")
            self.suspend(vmrr, end)
        else:
            vmrr.end = vmrr.start + remaining
            self.add_shutdown(vmrr, shutdown)
            if remaining < lease.remaining():
                vmrr.checkpoint = vmrr.end - self.estimates.margin(lease)
        return vmrr

    def suspend(self, vmrr: RR, by: int, now: int | None = None) -> None:
        """Suspension reservations that finish by `by`; the VM reservation ends where they begin."""
        blocks = oh.susprem_blocks(vmrr.lease, vmrr.mapping, by, oh.BACKWARD, self.opts, suspend=True)
        begin = min(b[0] for b in blocks)
        if begin <= vmrr.start:
            raise NotSchedulable("no time left to run before it must be suspended")
        if now is not None and begin < now:
            raise NotSchedulable("too late to suspend it in time")
        vmrr.post = []
        self.add_blocks(vmrr, blocks, SUSPEND)
        vmrr.end = begin

    def add_blocks(self, vmrr: RR, blocks: list, kind: str) -> None:
        rrs = []
        for start, end, _nodes in sorted(blocks, key=lambda b: b[0]):
            # Each block holds the whole lease: VMs waiting for their turn (or already resumed) are in memory.
            rr = self.rr(vmrr.lease, kind, start, end, vmrr.mapping, of=vmrr)
            rr.vm = vmrr
            rr.first = rr.last = False
            rrs.append(rr)
        rrs[0].first = True
        rrs[-1].last = True
        (vmrr.pre if kind == RESUME else vmrr.post).extend(rrs)

    def add_shutdown(self, vmrr: RR, shutdown: int) -> None:
        rr = self.rr(vmrr.lease, SHUTDOWN, vmrr.end, vmrr.end + shutdown, vmrr.mapping, of=vmrr)
        rr.vm = vmrr
        vmrr.post = [rr]
