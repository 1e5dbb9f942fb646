"""Haizea's lease scheduler: admission, ARs and immediate leases, booking a lease, and what happens when a
reservation starts or ends; the pass over the best-effort queue (scheduling.queuepass), where suspended leases
resume (scheduling.resumes), preemption (scheduling.preemption) and re-planning when a run ends early or overruns
its estimate (scheduling.replan) are its mixins. Pure: `now` is always passed in; the driver owns the clock."""
from __future__ import annotations

from optlease.domain.lease import LeaseKind, LeaseState
from optlease.domain.site import Site
from optlease.eventlog import EventLog
from optlease.formats.timefmt import MAX_SECONDS, format_duration
from optlease.scheduling.mapper import GreedyMapper
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.preemption import Preemption
from optlease.scheduling.preparation import ImageTransfers, PreparedTable
from optlease.scheduling.queuepass import SUSPENDED, QueuePass
from optlease.scheduling.records import (MIGRATE, RESUME, SHUTDOWN, SUSPEND, TRANSFER, VM, RR, Held, Lease,
                                        NotSchedulable)
from optlease.scheduling.replan import Replanning
from optlease.scheduling.resumes import Resumes
from optlease.scheduling.slottable import SlotTable, vadd, vsub
from optlease.scheduling.vmsched import VMScheduler

S = LeaseState


class LeaseScheduler(QueuePass, Resumes, Preemption, Replanning):
    def __init__(self, site: Site, opts: SchedulingOptions, policies: Policies, log: EventLog) -> None:
        self.site = site
        self.opts = opts
        self.policies = policies
        self.log = log
        self.table = PreparedTable(site) if opts.preparation.managed else SlotTable(site)
        self.vm = VMScheduler(self.table, opts, policies, log)
        # disk-image transfers and caches (`lease-preparation: imagetransfer`); None: images are not managed
        self.prep = ImageTransfers(self.table, opts.preparation, log) if opts.preparation.managed else None
        self.queue: list[Lease] = []
        self.pending: list[Lease] = []
        self.leases: dict[int, Lease] = {}     # in the system: not done, rejected or cancelled
        self.finished: list[Lease] = []
        # leases whose VMs run (a VM reservation started and not ended or cancelled), what each one's VM
        # reservation holds, and the sum of those (one figure per resource type): what the CPU-utilization probe
        # reads at each instant, kept up to date as VMs start and stop rather than summed there
        self.running: dict[int, Lease] = {}
        self._running_held: dict[int, tuple] = {}
        self.running_use: tuple = (0,) * len(site.resource_types)
        self._empty = GreedyMapper(SlotTable(site), policies)
        self._fits_empty: dict[tuple, bool] = {}
        self._room: dict = {}
        self._ready: dict = {}     # one pass over the queue: wait class -> what a try of its leases starts from
        self._keys: dict = {}      # wait class -> the key it had when last asked (`_kept_key`)
        self._enqueued = 0         # leases put in the queue so far (`enqueue`)
        # (key, enqueued) after a sweep (`_sweep`) found that no lease in the queue could start: the next pass is
        # skipped while neither changed
        self._swept: tuple | None = None
        # a planner's last word on an AR or immediate lease this scheduler refused: True if it booked it after all
        # (scheduling.planner; None: Haizea's refusal stands)
        self.on_refusal = None

    # -- requests -------------------------------------------------------------------------------------------
    def request(self, lease: Lease, now: int) -> None:
        info = self.log.info_on     # (no line formatted when the log does not write it)
        if info:
            self.log.info("LSCHED", "Lease #%i has been requested." % lease.id)
        lease.set_state(S.PENDING)
        reason = self.policies.admission.accept(lease)
        if reason is None and not self._fits_site(lease):
            reason = "it can never fit the site (no node or set of nodes is large enough)"
        if reason is None and self.prep is not None and self.prep.needs(lease) \
                and self.prep.duration(lease, lease.numnodes) > MAX_SECONDS:
            # nothing is booked more than a century ahead (VMScheduler.asap): such a lease would wait forever
            reason = "its image's transfer alone would take more than 100 years over the repository's link"
        if reason is not None:
            self.log.info("LSCHED", "Lease #%i has not been accepted: %s" % (lease.id, reason))
            self.reject(lease, now, reason)
            return
        if info:
            self.log.info("LSCHED", "Lease #%i has been marked as pending." % lease.id)
        self.leases[lease.id] = lease
        self.pending.append(lease)

    def _fits_site(self, lease: Lease) -> bool:
        key = lease.demands_key()
        if key not in self._fits_empty:
            mapping, _, _ = self._empty.map(lease, 0, 1, strictend=True)
            self._fits_empty[key] = mapping is not None
        return self._fits_empty[key]

    def reject(self, lease: Lease, now: int, reason: str) -> None:
        lease.set_state(S.REJECTED)
        lease.reason = reason
        lease.end = now
        self.leases.pop(lease.id, None)
        self.finished.append(lease)

    # -- one scheduling round -------------------------------------------------------------------------------
    def schedule(self, now: int) -> None:
        if not self.pending:    # (most instants: no request arrived)
            self.process_queue(now)
            return
        pending, self.pending = self.pending, []
        for lease in pending:
            if lease.kind is LeaseKind.BEST_EFFORT:
                lease.set_state(S.QUEUED)
                self.enqueue(lease)
                if self.log.info_on:
                    self.log.info("LSCHED", "Queued lease request #%i, %i nodes for %s." % (
                        lease.id, lease.numnodes, format_duration(lease.req.duration)))
        # ARs and immediate leases in one pass, by id, as Haizea walks its lease table
        for lease in sorted(pending, key=lambda lease: lease.id):
            if lease.kind is LeaseKind.BEST_EFFORT:
                continue
            self.log.info("LSCHED", "Scheduling lease #%i (%i nodes) -- %s" % (lease.id, lease.numnodes,
                                                                            lease.kind.label))
            if lease.kind is LeaseKind.AR and self.log.info_on:
                self.log.info("LSCHED", "From %s to %s" % (
                    self.log.t(lease.req.start), self.log.t(lease.req.start + lease.req.duration)))
            self._schedule_or_reject(lease, now)
        self.process_queue(now)

    def _schedule_or_reject(self, lease: Lease, now: int) -> None:
        try:
            self.schedule_lease(lease, now)
            self.log.info("LSCHED", "Lease #%i has been scheduled." % lease.id)
        except NotSchedulable as exc:
            if self.on_refusal is not None and self.on_refusal(lease, now):
                self.log.info("LSCHED", "Lease #%i has been scheduled." % lease.id)
                return
            self.log.info("LSCHED", "Lease request #%i cannot be scheduled: %s" % (lease.id, exc))
            self.reject(lease, now, str(exc))

    def schedule_lease(self, lease: Lease, now: int, preempting: bool = True) -> None:
        """Book the lease (`VMScheduler.schedule`); NotSchedulable if it fits nowhere."""
        resuming = lease.state in SUSPENDED
        fixed = None
        nodes = self.table.nodes
        ready = None
        begin = now     # where copies of a suspended lease's images to other nodes begin
        prep = self.prep if self.prep is not None and not resuming and self.prep.needs(lease) else None
        if not resuming:
            earliest = None  # every node, from now
            if prep is not None and lease.kind is not LeaseKind.AR:
                # a best-effort or immediate lease starts where and when its image can be there
                ready = prep.earliest(lease, now)
                earliest = ready.times
        elif self.resumes_in_place(lease):
            fixed = lease.image_nodes
            earliest = {n: now for n in set(fixed.values())}
        else:
            earliest, begin = self._resume_earliest(lease, now)
        vmrr, preempt = self.vm.schedule(lease, now, earliest, resuming, fixed, preempting)
        if resuming and begin + self._copies_wait(lease) > vmrr.begin() and vmrr.mapping != lease.image_nodes:
            # placed before copies could be over (on its images' nodes, but with VMs swapped between them): booked
            # again where it waits for them on every node
            earliest = dict.fromkeys(nodes, begin + self._copies_wait(lease))
            vmrr, preempt = self.vm.schedule(lease, now, earliest, resuming, fixed, preempting)
        plan = prep.plan(lease, vmrr, ready, now) if prep is not None else None
        if preempt:
            self.log.info("LSCHED", "Must preempt leases %s to make room for lease #%i" % (
                [p.id for p in preempt], lease.id))
            for victim in preempt:
                self.preempt(victim, vmrr.start, now)
        if resuming and vmrr.mapping != lease.image_nodes:
            if self.opts.migration == "yes-notransfer":
                self.move_images(lease, vmrr.mapping, now)
            else:
                self.copy_in_rounds(vmrr, begin)
        if plan is not None:
            prep.commit(plan, vmrr)
        if vmrr.backfill:
            self.vm.future_count += 1
        for rr in (*vmrr.pre, vmrr, *vmrr.post):
            self.table.add(rr)
        if vmrr.backfill:
            # what a premature end asks (Replanning): the booking, by its number (not kept alive), a mark, and
            # from when each node could take it (its image or its memory image there; None: every node, now)
            lease.cache["booked"] = (vmrr.seq, self.table.mark(), earliest)
        lease.vmrrs.append(vmrr)
        lease.set_state(S.SUSPENDED_SCHEDULED if resuming else S.SCHEDULED)

    # -- reservations starting and ending -------------------------------------------------------------------
    def start_rr(self, rr: RR, now: int) -> int | None:
        """Start a reservation; for a VM that will really end before its reservation does, return that time."""
        rr.state = "active"
        lease = rr.lease
        if rr.kind == TRANSFER:
            self.prep.start(rr)
            return None
        if rr.kind == VM:
            if self.prep is not None:
                self.prep.started(lease)
            if rr.backfill:
                self.vm.future_count -= 1
                rr.backfill = False
            if self.log.info_on:
                self.log.info("VMSCHED", "Started VMs for lease %i on nodes %s" % (lease.id, rr.nodes()))
            lease.set_state(S.ACTIVE)
            self.runs(lease, rr)
            if lease.first_start is None:
                lease.first_start = now
            real_end = now + lease.real_remaining()
            return real_end if real_end < rr.end else None
        if rr.kind == SUSPEND and rr.first:
            self.log.info("VMSCHED", "Suspending lease %i..." % lease.id)
            lease.set_state(S.SUSPENDING)
        elif rr.kind == RESUME and rr.first:
            self.log.info("VMSCHED", "Resuming lease %i..." % lease.id)
            lease.set_state(S.RESUMING)
        elif rr.kind == MIGRATE:
            self.log.info("VMSCHED", "Migrating lease %i..." % lease.id)
            lease.set_state(S.MIGRATING)
        return None

    def end_rr(self, rr: RR, now: int) -> None:
        rr.state = "done"
        released = self.table.released
        self.table.forget(rr, now)
        lease = rr.lease
        if rr.kind == TRANSFER:
            # a transfer's end frees no node capacity and no link time ahead: a lease that did not fit still does
            # not, unless a cache now holds its image (`ImageTransfers.version`)
            self.table.released = released
            self.prep.end(rr, now)
            return
        self._hold(rr, rr.start, rr.end)
        if rr.kind == VM:
            self.stops(lease.id)
            if self.log.info_on:
                self.log.info("VMSCHED", "Stopped VMs for lease %i on nodes %s" % (lease.id, rr.nodes()))
            lease.accumulated += rr.end - rr.start
        elif rr.kind == SUSPEND:
            self.log.info("VMSCHED", "Lease %i suspended." % lease.id)   # after each step, as Haizea logs it
            if not rr.last:
                return
            lease.set_state(S.SUSPENDED_PENDING)
            lease.image_nodes = dict(rr.vm.mapping)
            lease.suspensions += 1
            lease.set_state(S.SUSPENDED_QUEUED)
            self.enqueue(lease)
        elif rr.kind == RESUME and rr.last:
            self.log.info("VMSCHED", "Resumed lease %i" % lease.id)
        elif rr.kind == MIGRATE:
            self.log.info("VMSCHED", "Migrated lease %i..." % lease.id)
            if rr.extra is None or rr.extra["what"] != "disk-image":
                # the memory images are where the lease resumes from (a disk image follows them, before them)
                lease.image_nodes = {**lease.image_nodes, **{v: rr.mapping[v] for v in rr.origin}}
            lease.migrations += rr.last
            lease.set_state(S.SUSPENDED_SCHEDULED)
        elif rr.kind == SHUTDOWN:
            if self.log.info_on:
                self.log.info("VMSCHED", "Lease %i's VMs have shutdown." % lease.id)
            self.finish(lease, now)

    def finish(self, lease: Lease, now: int) -> None:
        if self.prep is not None:
            self.prep.release(lease)
        self.vm.estimates.learn(lease)
        lease.set_state(S.DONE)
        lease.end = now
        self.leases.pop(lease.id, None)
        self.stops(lease.id)
        self.finished.append(lease)

    def runs(self, lease: Lease, vmrr: RR) -> None:
        """The lease's VMs run, in its VM reservation `vmrr` (`running`, `running_use`)."""
        self.stops(lease.id)
        self.running[lease.id] = lease
        held = vmrr.total()     # (None: no VM; its demand never changes while it runs)
        if held is not None:
            self._running_held[lease.id] = held
            self.running_use = vadd(self.running_use, held)

    def stops(self, lease_id: int) -> None:
        """The lease's VMs no longer run (if they did): its VM reservation ended or was cancelled."""
        if self.running.pop(lease_id, None) is not None:
            held = self._running_held.pop(lease_id, None)
            if held is not None:
                self.running_use = vsub(self.running_use, held)

    def _hold(self, rr: RR, start: int, end: int, outcome: str | None = None) -> None:
        # the reservation's mapping itself: no reservation's mapping is changed in place
        rr.lease.held.append(Held(rr.kind, start, end, rr.mapping, rr.origin, outcome, rr.extra))
