"""Haizea's lease scheduler: admission, the best-effort queue, ARs and immediate leases, and what happens when a
reservation starts or ends; preemption (scheduling.preemption) and re-planning when a run ends early or overruns
its estimate (scheduling.replan) are its mixins. Pure: `now` is always passed in; the driver owns the clock."""
from __future__ import annotations

from optlease.domain.lease import LeaseKind, LeaseState
from optlease.domain.site import Site
from optlease.eventlog import EventLog
from optlease.formats.timefmt import MAX_SECONDS, format_duration
from optlease.scheduling import overheads as oh
from optlease.scheduling.mapper import GreedyMapper
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.preemption import Preemption
from optlease.scheduling.preparation import ImageTransfers, PreparedTable
from optlease.scheduling.records import (MIGRATE, RESUME, SHUTDOWN, SUSPEND, TRANSFER, VM, RR, Held, Lease,
                                        NotSchedulable)
from optlease.scheduling.replan import Replanning
from optlease.scheduling.slottable import SlotTable, fits
from optlease.scheduling.vmsched import VMScheduler

S = LeaseState
SUSPENDED = (S.SUSPENDED_PENDING, S.SUSPENDED_QUEUED)
QUEUED = S.QUEUED
PLAIN = ("plain",)   # the wait class of every lease whose try depends on the table alone (`_attempt`)


class LeaseScheduler(Preemption, Replanning):
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
        # leases whose VMs run (a VM reservation started and not ended or cancelled): what the CPU-utilization
        # probe sums at each instant, without a walk over every lease in the system
        self.running: dict[int, Lease] = {}
        self._empty = GreedyMapper(SlotTable(site), policies)
        self._fits_empty: dict[tuple, bool] = {}
        self._room: dict = {}
        self._ready: dict = {}     # one pass over the queue: wait class -> what a try of its leases starts from
        self._keys: dict = {}      # wait class -> the key it had when last asked (`_kept_key`)
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
        key = tuple(map(lease.demands.__getitem__, sorted(lease.demands)))
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

    def process_queue(self, now: int) -> None:
        kept: list[Lease] = []
        queue = self.queue
        # What every lease's try starts from changes only when one is placed (a try that fails books nothing):
        # asked again only then, not for each of the queue's leases.
        self._room, self._ready = {}, {}
        ready = self._ready
        future = self.vm.can_schedule_in_future()
        full = None
        info, table = self.log.info_on, self.table
        once = self.opts.backfilling == "off"
        while queue:
            if not future:
                if full is None:
                    full = table.is_full(now)
                if full:
                    break
            lease = queue.pop(0)
            if info:
                self.log.info("LSCHED", "Next request in the queue is lease %i. Attempting to schedule..." % lease.id)
            cache = lease.cache
            # Most leases last did not fit with the very key their wait class has now (`_attempt`): nothing their
            # try depends on changed, and they are passed over at once. The others take the quick tests (no room
            # when they could start), which most fail, and no exception is raised for them; a queued lease whose
            # image comes at an instant where this pass already found the site, or the nodes the image reaches by
            # then, short of room for it fails them at once.
            found = ready.get(cache.get("wait"))
            if found is not None and cache.get("failed") is found[0]:
                placed = False
            elif found is not None and len(found) == 2 and found[1] is not None \
                    and self._short_of_room(lease, *found[1]):
                cache["failed"] = found[0]
                placed = False
            else:
                cls, attempt, first = self._attempt(lease, now, future)
                if cache.get("failed") == attempt:
                    placed = False
                elif future:
                    placed = None
                else:
                    # it must start at once, or (images managed) as soon as its image can be there
                    placed = None if (self.room_now(lease, now) if first is None
                                      else self._room_when_ready(lease, *first)) else False
                if placed is None:
                    try:
                        self.schedule_lease(lease, now)
                        placed = True
                    except NotSchedulable:
                        placed = False
                if placed:
                    self._room, self._ready = {}, {}
                    ready = self._ready
                    future, full = self.vm.can_schedule_in_future(), None
                    continue
                cache["failed"], cache["wait"] = attempt, cls
            kept.append(lease)
            if info:
                self.log.info("LSCHED", "Lease %i could not be scheduled at this time." % lease.id)
            if once:
                break
        queue[:0] = kept

    def _attempt(self, lease: Lease, now: int, future: bool) -> tuple[object, tuple, tuple | None]:
        """What a lease's try depends on (`process_queue` skips a lease whose key did not change since it last did
        not fit), and, for a lease that must start as soon as its image (or its memory image) can be there, when
        that is and on which nodes (None: now, or it may book a later start); with the lease's wait class, the
        leases that share the key. With images transferred, besides what was freed: its image may come sooner (a
        cache took it in, a transfer of it was booked); and such a lease starts later at each step, where an end in
        between may have made room although none has happened yet. Steps at transfers' ends, which free nothing,
        make that matter.

        The key of a class is asked once in a pass over the queue, until a lease is placed (`_ready` is then
        emptied), and a key equal to the one the class had before is that very object: a lease that last did not
        fit with it is known by identity (`process_queue`)."""
        ready = self._ready
        image = lease.req.software
        if self.prep is not None and lease.state is QUEUED and image is not None:
            # Leases of one image (and, unicast, one width) wait for the same ways at one instant, and neither
            # those nor the table's ends change in a pass over the queue until a lease is placed.
            cls = (image.id, lease.numnodes) if self.prep.opts.mechanism == "unicast" else image.id
            found = ready.get(cls)
            if found is None:
                found = ready[cls] = self._image_attempt(cls, lease, now, future)
            return cls, found[0], found[1]
        if self.prep is not None and lease.state in SUSPENDED and self.opts.migration == "yes" and not future \
                and not self.resumes_in_place(lease):
            # Suspended leases whose copies take as long, with images somewhere or not, may resume from the same
            # instant and wait for the same ends; the nodes it may resume on then are its own while the link is busy
            # for the copies elsewhere, and every node once it is free (a transfer that ends frees the link without
            # giving back any room: the key says which).
            cls = ("resume", self._copies_wait(lease), not lease.image_nodes)
            found = ready.get(cls)
            if found is None:
                first, own = self._resume_first(lease, now)
                # (room given back anywhere counts, not only at or after now as for an image that must come: the
                # greedy mapper's choice of nodes, and so how long a resume that may be suspended again runs, moves
                # with what starts on each node, and a later start is not always harder to place)
                key = (self.table.released, future, self.table.ends.bisect_right(first), own)
                found = ready[cls] = (self._kept_key(cls, key), max(now, first), own)
            return cls, found[0], (found[1], self._image_ways(lease) if found[2] else None)
        found = ready.get(PLAIN)
        if found is None:
            found = ready[PLAIN] = (self._kept_key(PLAIN, (self.table.released, future)), None)
        return PLAIN, found[0], None

    def _image_attempt(self, cls, lease: Lease, now: int, future: bool) -> tuple[tuple, tuple | None]:
        """`_attempt`'s key and start for the leases of one image (and, unicast, one width) waiting in the queue."""
        table, prep = self.table, self.prep
        if future:
            return self._kept_key(cls, (table.released, future, prep.version(lease))), None
        first, ways = prep.first_ready(lease, now)
        if first > now and self.opts.runtime_estimate == "requested" and first - now <= MAX_SECONDS:
            # Its try is at `first`, after now: a reservation ending now gives back no room there, so only
            # room given back at or after now, or an end of a reservation holding node capacity that came to lie
            # before its start, lets it go otherwise (ends that have passed are counted with those still in the
            # table; a transfer placed before it moves its start later and gives back no room).
            key = ("ahead", table.gave_back, future, prep.version(lease), ways, self._room_ends_until(first))
        elif first == now and ways == (-1,) and self.opts.runtime_estimate == "requested":
            # Its try is now, on the nodes whose caches hold its image and on no other (its own transfer and the
            # rides come later): only room given back on those nodes lets it go otherwise (with no estimate
            # learning from runs that end elsewhere).
            key = ("cached", table.released_on(prep.caches.holding(lease.req.software.id)), future,
                   prep.version(lease), ways, self._ends_until(first))
        else:
            key = (table.released, future, prep.version(lease), ways, self._ends_until(first))
        return self._kept_key(cls, key), (max(now, first), ways)

    def _ends_until(self, t: int) -> int:
        """How many reservations in the table end at or before t (asked once per instant in a pass over the queue,
        until something is placed: the leases of every image whose transfer would come then ask it)."""
        found = self._room.get(("ends", t))
        if found is None:
            found = self._room[("ends", t)] = self.table.ends.bisect_right(t)
        return found

    def _room_ends_until(self, t: int) -> int:
        """How many reservations that hold node capacity end at or before t, those that have passed included
        (`PreparedTable.room_ends_until`; asked once per instant in a pass over the queue, as `_ends_until`): a
        transfer or a copy over the link that ends gives back no room on any node."""
        found = self._room.get(("room-ends", t))
        if found is None:
            found = self._room[("room-ends", t)] = self.table.room_ends_until(t)
        return found

    def _kept_key(self, cls, key: tuple) -> tuple:
        """The key a wait class had before when equal to `key` (the same object), else `key`, kept for next time."""
        kept = self._keys.get(cls)
        if kept == key:
            return kept
        self._keys[cls] = key
        return key

    def _room_when_ready(self, lease: Lease, t: int, ways: tuple | None) -> bool:
        """A necessary condition for a lease that must start at `t`, as soon as its image (or its memory image) can
        be there (the one start `VMScheduler.asap` would try): the site as a whole has room for it from `t` on, and
        the nodes its image reaches by then (`ways`, as `ImageTransfers.first_ready` names them, or the set of nodes
        a suspended lease may resume on then; None: every node) have room for it at `t`."""
        window = self.vm.shape(lease, lease.state in SUSPENDED)[-1]   # (kept while it waits: `VMScheduler.shape`)
        # What the site has free over the window from `t` is the same for every lease that asks in this pass over
        # the queue (until something is placed): the walk is made once, and each lease compares its need with it.
        room_key = ("over", t, window)
        room = self._room.get(room_key)
        if room is None:
            room = self._room[room_key] = self.table.room_over(t, window)
        if not fits(lease.total_demand, room):
            return False
        # then the nodes its image reaches first (shared by the leases of that image in this pass), or the nodes
        # its images are on (a suspended lease's own)
        if isinstance(ways, frozenset):
            return fits(lease.total_demand, self.table.free_of(ways, t))
        return ways is None or ways == (0,) or self._room_on_ways(lease, t, ways)

    def _short_of_room(self, lease: Lease, t: int, ways: tuple) -> bool:
        """Whether what this pass already found free on the site over the lease's window from `t`, or on the nodes
        its image reaches by then (`ways`), is too little for it (`_room_when_ready`'s tests, answered from what it
        kept; False: not asked yet)."""
        if self.vm.estimates.enabled:
            return False    # (its window is worked out again at each try: `_room_when_ready` asks)
        room = self._room.get(("over", t, self.vm.shape(lease, lease.state in SUSPENDED)[-1]))
        if room is None:
            return False
        if not fits(lease.total_demand, room):
            return True
        if ways == (0,):
            return False
        free = self._room.get(("ways", lease.req.software.id, self.prep.version(lease), ways, t))
        return free is not None and not fits(lease.total_demand, free)

    def _room_on_ways(self, lease: Lease, t: int, ways: tuple) -> bool:
        """Whether the nodes the given ways bring the lease's image to by `t` have room for it then, added up (once
        for every lease asking about them in this pass over the queue, until something is placed)."""
        nodes_key = ("ways", lease.req.software.id, self.prep.version(lease), ways, t)
        free = self._room.get(nodes_key, False)
        if free is False:
            nodes = self.prep.nodes_by(lease, ways)     # None: every node (nothing to add up)
            free = self._room[nodes_key] = None if nodes is None else self.table.free_on(nodes, t)
        return free is None or fits(lease.total_demand, free)

    def room_now(self, lease: Lease, now: int) -> bool:
        """A necessary condition for starting now, answered from what is free at this instant (cached in
        `_room` for one pass over the queue, until something is placed)."""
        room = self._room
        if lease.state in SUSPENDED and self.resumes_in_place(lease):
            for vnode, pnode in lease.image_nodes.items():
                if pnode not in room:
                    room[pnode] = self.table.free_at(pnode, now)
                if not fits(lease.demands[vnode], room[pnode]):
                    return False
            return True
        if "total" not in room:
            room["total"] = self.table.total_free(now)
        return fits(lease.total_demand, room["total"])

    def enqueue(self, lease: Lease) -> None:
        """Insert in arrival order (requeued and suspended leases go back to their place)."""
        lease.cache.pop("failed", None)
        lease.cache.pop("wait", None)
        key = (lease.req.arrival, lease.id)
        i = len(self.queue)
        while i > 0 and (self.queue[i - 1].req.arrival, self.queue[i - 1].id) > key:
            i -= 1
        self.queue.insert(i, lease)

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

    def resumes_in_place(self, lease: Lease) -> bool:
        """Whether a suspended lease may resume only on the nodes its images are on, each VM where it was:
        `migration: no`, or under the CP-SAT mapper a lease whose disk image is managed (`migration: yes`), since
        only greedy copies disk images (over the repository's link) and a VM resumed elsewhere would find none."""
        return self.opts.migration == "no" or (
            self.opts.migration == "yes" and self.opts.mapper != "greedy" and self.prep is not None
            and self.prep.needs(lease))

    def _copies_wait(self, lease: Lease) -> int:
        """Haizea's estimate of the copies a resume elsewhere needs: its memory images, and with images managed
        (`migration: yes`, greedy: the CP-SAT round does not copy disk images yet) its disk image."""
        # fixed by where its images are (a new dict whenever they move): asked at every pass while it waits
        images, wait = lease.cache.get("copies-wait", (None, 0))
        if images is lease.image_nodes and images is not None:
            return wait
        wait = oh.migration_estimate(lease, self.opts)
        if self.prep is not None and self.opts.migration == "yes" and self.opts.mapper == "greedy":
            wait += self.prep.disk_estimate(lease)
        lease.cache["copies-wait"] = (lease.image_nodes, wait)
        return wait

    def _resume_earliest(self, lease: Lease, now: int) -> tuple[dict[int, int], int]:
        """When a suspended lease could resume on each node (`migration` yes or yes-notransfer), and when the copies
        a resume elsewhere needs would begin. Haizea: the resume waits for its estimate of the copies wherever it
        goes (one estimate for every node; with images managed, its disk image's copies count too). Managed, the
        copies go over the repository's link and begin in its first free stretch that long: the nodes its images
        are on, where it resumes with no copy, wait only for the estimate, as without the link."""
        wait = self._copies_wait(lease)
        # (the CP-SAT round books its own copies, off the link: greedy's resumes there wait as without it)
        if self.prep is None or self.opts.migration != "yes" or self.opts.mapper != "greedy":
            return dict.fromkeys(self.table.nodes, now + wait), now
        begin = self.prep.first_gap(now, wait) if wait else now
        earliest = dict.fromkeys(self.table.nodes, begin + wait)
        for pnode in (lease.image_nodes or {}).values():
            earliest[pnode] = now + wait
        return earliest, begin

    def _resume_first(self, lease: Lease, now: int) -> tuple[int, bool]:
        """The earliest time `_resume_earliest` gives any node, and whether only the nodes its images are on have it
        then (while the link is busy for the copies elsewhere; False: every node), without building its dict of
        every node, at each pass the lease waits. The same for every lease whose copies take as long."""
        wait = self._copies_wait(lease)
        if self.prep is None or self.opts.migration != "yes" or self.opts.mapper != "greedy" or not wait:
            return now + wait, False
        begin = self.prep.first_gap(now, wait)
        if not lease.image_nodes:
            return begin + wait, False
        return now + wait, begin != now

    def _image_ways(self, lease: Lease) -> frozenset | None:
        """The nodes a suspended lease's images are on (None: every node holds some of them)."""
        images, ways = lease.cache.get("image-nodes", (None, None))
        if images is not lease.image_nodes:
            ways = frozenset(lease.image_nodes.values())
            if len(ways) == len(self.table.nodes):
                ways = None
            lease.cache["image-nodes"] = (lease.image_nodes, ways)
        return ways

    def move_images(self, lease: Lease, mapping: dict[int, int], now: int) -> None:
        """Images on shared storage (`migration: yes-notransfer`): a lease booked to resume elsewhere just moves
        them, now; nothing is copied (with disk images managed, its disk image moves the same way)."""
        lease.held.append(Held(MIGRATE, now, now, dict(mapping), dict(lease.image_nodes)))
        if self.prep is not None and self.prep.needs(lease):
            lease.held.append(Held(MIGRATE, now, now, dict(mapping), dict(lease.image_nodes),
                                   extra={"what": "disk-image"}))
        lease.image_nodes = dict(mapping)
        lease.migrations += 1

    def copy_images(self, vmrr: RR, start: int, end: int) -> None:
        """Book the copy of a lease's memory images to the nodes of its resume `vmrr` (`migration: yes`) on
        [start, end), before the resume, all at once; the copy holds no node capacity."""
        vmrr.pre.insert(0, self._copy(vmrr, start, end, dict(vmrr.lease.image_nodes)))

    def copy_in_rounds(self, vmrr: RR, start: int) -> None:
        """Book the copies of the memory images that move for the resume `vmrr`, from `start`, in Haizea's rounds
        (`overheads.migration_rounds`), one after another before the resume. With disk images managed, the copies
        of the disk image where no cache holds it come first (Haizea: its preparation scheduler's migrations before
        its VM scheduler's), and every copy goes over the repository's link, whose bandwidth the schedule file
        gives it."""
        rounds = [("memory-image", r) for r in oh.migration_rounds(vmrr.lease, vmrr.mapping, self.opts)]
        link = self.prep is not None and self.opts.mapper == "greedy"
        if link and self.prep.needs(vmrr.lease):
            rounds[:0] = [("disk-image", r) for r in self.prep.disk_rounds(vmrr)]
        copies = []
        for what, (duration, moves) in rounds:
            copy = self._copy(vmrr, start, start + duration, moves)
            if link:
                copy.extra = {"what": what, "bandwidth": self.prep.opts.bandwidth}
            copies.append(copy)
            start += duration
        for i, copy in enumerate(copies):
            copy.first, copy.last = i == 0, i == len(copies) - 1
        vmrr.pre[:0] = copies

    def _copy(self, vmrr: RR, start: int, end: int, origin: dict[int, int]) -> RR:
        copy = self.vm.rr(vmrr.lease, MIGRATE, start, end, vmrr.mapping, of=vmrr)
        copy.demand = {}
        copy.origin = origin   # the images it moves: vnode -> where from
        return copy

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
            self.running[lease.id] = lease
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
            self.running.pop(lease.id, None)
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
        self.running.pop(lease.id, None)
        self.finished.append(lease)

    def _hold(self, rr: RR, start: int, end: int, outcome: str | None = None) -> None:
        # the reservation's mapping itself: no reservation's mapping is changed in place
        rr.lease.held.append(Held(rr.kind, start, end, rr.mapping, rr.origin, outcome, rr.extra))
