"""The pass over the best-effort queue at each instant: which waiting leases are tried, in what order, and the
quick tests that pass over a lease whose try cannot succeed (what its try depends on did not change since it last
did not fit, or there is no room when it could start). Part of Haizea's lease scheduler (`LeaseScheduler`)."""
from __future__ import annotations

from optlease.domain.lease import LeaseState
from optlease.formats.timefmt import MAX_SECONDS
from optlease.scheduling.records import Lease, NotSchedulable
from optlease.scheduling.roomahead import RoomAhead
from optlease.scheduling.slottable import fits

S = LeaseState
SUSPENDED = (S.SUSPENDED_PENDING, S.SUSPENDED_QUEUED)
QUEUED = S.QUEUED
PLAIN = ("plain",)   # the wait class of every lease whose try depends on the table alone (`_attempt`)


class QueuePass:
    """The queue half of LeaseScheduler (a mixin: it needs the scheduler's table, VM scheduler, image transfers,
    options, log, `queue`, `schedule_lease` and the resume tests of `Resumes`)."""

    def process_queue(self, now: int) -> None:
        """One pass over the queue in its order: each lease is tried where what its try depends on changed since it
        last did not fit, and booked where it fits (FCFS: the pass stops at the first lease that does not)."""
        queue = self.queue
        kept: list[Lease] = []      # the leases passed over, in order (put back in front of the queue at the end)
        whole = True                # no lease was passed over or placed yet in this pass
        while queue:
            # What every lease's try starts from changes only when one is placed (a try that fails books nothing):
            # asked again only then, not for each of the queue's leases.
            self._room, self._ready = {}, {}
            if not self.vm.can_schedule_in_future() and self.prep is None and not self.log.info_on:
                start = self._sweep(now, whole)
                if start is None:
                    break
                kept += queue[:start]
                del queue[:start]
            self._swept = None
            if not (self._visit(now, kept) if self.log.info_on else self._visit_quiet(now, kept)):
                break
            whole = False
        queue[:0] = kept

    def _visit(self, now: int, kept: list[Lease]) -> bool:
        """`process_queue`'s pass over the leases left in the queue, each tried in turn (or passed over: appended to
        `kept`), until one is placed (True) or the pass is over (False)."""
        queue, ready = self.queue, self._ready
        future = self.vm.can_schedule_in_future()
        full = None
        info, table = self.log.info_on, self.table
        once = self.opts.backfilling == "off"
        while queue:
            if not future:
                if full is None:
                    full = table.is_full(now)
                if full:
                    return False
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
                    return True
                cache["failed"], cache["wait"] = attempt, cls
            kept.append(lease)
            if info:
                self.log.info("LSCHED", "Lease %i could not be scheduled at this time." % lease.id)
            if once:
                return False
        return False

    def _visit_quiet(self, now: int, kept: list[Lease]) -> bool:
        """`_visit` where no log line is written: the same leases tried, passed over and marked, in the same order.
        A lease whose wait class this pass already asked (an image's, or suspended leases' whose copies take as
        long) is decided from what the pass holds for its class, its key and start, without its class being asked
        again (neither changes while it waits: `_attempt`); the queue is walked by index and cut only before a try."""
        queue, ready = self.queue, self._ready
        future = self.vm.can_schedule_in_future()
        if not queue or (not future and self.table.is_full(now)):
            return False
        once = self.opts.backfilling == "off"
        room_when_ready = self._room_when_ready
        i, n = 0, len(queue)
        while i < n:
            lease = queue[i]
            i += 1
            cache = lease.cache
            found = ready.get(cache.get("wait"))
            failed = cache.get("failed")
            if found is None or failed is not found[0]:
                if found is not None and (len(found) == 3 or found[1] is not None):
                    # (an image's class with its start, or suspended leases' resume: what `_attempt` would answer)
                    cls, attempt = cache["wait"], found[0]
                    first = found[1] if len(found) == 2 else (found[1], self._image_ways(lease) if found[2] else None)
                else:
                    cls, attempt, first = self._attempt(lease, now, future)
                if failed == attempt or not (
                        future or (self.room_now(lease, now) if first is None else room_when_ready(lease, *first))):
                    cache["failed"], cache["wait"] = attempt, cls
                elif self._try(lease, now, kept, queue, i):
                    return True
                else:
                    cache["failed"], cache["wait"] = attempt, cls
                    i, n = 0, len(queue)
            if once:
                break
        kept += queue[:i]
        del queue[:i]
        return False

    def _try(self, lease: Lease, now: int, kept: list[Lease], queue: list[Lease], i: int) -> bool:
        """`_visit_quiet`'s try of the queue's `i`-th lease (counting from 1), the leases before it passed over:
        True when it is booked; else it is passed over too (and the caller walks the queue left from its start)."""
        kept += queue[:i - 1]
        del queue[:i]
        try:
            self.schedule_lease(lease, now)
            return True
        except NotSchedulable:
            kept.append(lease)
            return False

    def _sweep(self, now: int, whole: bool) -> int | None:
        """The first lease left in the queue that the pass would try to book (None: none), found with the pass's
        own tests and marked as the pass marks them, where every lease is of the plain wait class and must start
        now (images not managed, no booking for the future allowed) and no log line is written: what `_visit` does
        up to that lease, in a plain loop with the site's free room read once. `whole`: the queue is whole (no
        lease was passed over or placed in this pass yet)."""
        table = self.table
        key = (table.released, False, self._began_key(now))
        if whole and self._swept == (key, self._enqueued):
            return None     # no lease was queued and no room given back since no lease could start
        if table.is_full(now):
            return None
        key = self._kept_key(PLAIN, key)
        self._ready[PLAIN] = (key, None)
        free = self._room["total"] = table.total_free(now)
        once = self.opts.backfilling == "off"
        pair = len(free) == 2       # (most sites: CPU and memory, compared inline)
        first, second = free[0], free[-1]
        resumes = False     # a suspended lease of a class of its own was passed over (its key is not `key`)
        for i, lease in enumerate(self.queue):
            cache = lease.cache
            if cache.get("failed") != key:
                if lease.state in SUSPENDED:
                    # (one that must wait for copies of its memory images resumes later than now: its own class)
                    cls, attempt, ready_at = self._attempt(lease, now, False)
                    resumes = resumes or cls is not PLAIN
                    if cache.get("failed") != attempt and (
                            self.room_now(lease, now) if ready_at is None else self._room_when_ready(lease, *ready_at)):
                        return i
                    cache["failed"], cache["wait"] = attempt, cls
                else:
                    need = lease.total_demand
                    if ((need[0] <= first and need[1] <= second) if pair else fits(need, free)) \
                            and self._room_over_window(lease, now, True):
                        return i
                    cache["failed"], cache["wait"] = key, PLAIN
            if once:
                return None     # (FCFS: the queue's first lease alone)
        if whole and not resumes:
            self._swept = (key, self._enqueued)
        return None

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
        if lease.state in SUSPENDED and self.opts.migration == "yes" and not future \
                and not self.resumes_in_place(lease):
            # Suspended leases whose copies take as long, with images somewhere or not, may resume from the same
            # instant and wait for the same ends (the copies hold no node capacity: what is free now says nothing
            # of their resume); with disk images managed, the nodes it may resume on then are its own while the
            # link is busy for the copies elsewhere, and every node once it is free (a transfer that ends frees the
            # link without giving back any room: the key says which).
            cls = ("resume", self._copies_wait(lease), not lease.image_nodes)
            found = ready.get(cls)
            if found is None:
                first, everywhere = self._resume_first(lease, now)
                own = everywhere != first
                # (room given back anywhere counts, not only at or after now as for an image that must come: the
                # greedy mapper's choice of nodes, and so how long a resume that may be suspended again runs, moves
                # with what starts on each node, and a later start is not always harder to place)
                if own and self.vm.tries_every_first:
                    # its own nodes first, every node later, each a try: no quick test answers for both
                    key = (self.table.released, future, self.table.ends.bisect_right(everywhere), own, everywhere)
                    found = ready[cls] = (self._kept_key(cls, key), None, own)
                else:
                    key = (self.table.released, future, self.table.ends.bisect_right(first), own)
                    found = ready[cls] = (self._kept_key(cls, key), max(now, first), own)
            return cls, found[0], (found[1], self._image_ways(lease) if found[2] else None)
        found = ready.get(PLAIN)
        if found is None:
            found = ready[PLAIN] = (self._kept_key(PLAIN, (self.table.released, future, self._began_key(now))),
                                    None)
        return PLAIN, found[0], None

    def _began_key(self, now: int) -> int | None:
        """What a try at `now` depends on besides the room given back: a reservation that began since the last try
        (an AR that started, a lease whose image arrived) changes where the mapper places a lease that may be cut
        short by what is booked later, with no room given back. Under FCFS, the instant (once a lease per instant:
        the head alone is tried); with backfilling, the last instant at or before `now` at which a reservation in
        the table began."""
        if self.opts.backfilling == "off":
            return now
        starts = self.table.starts
        i = starts.bisect_right(now)
        return starts[i - 1] if i else None

    def _image_attempt(self, cls, lease: Lease, now: int, future: bool) -> tuple[tuple, tuple | None]:
        """`_attempt`'s key and start for the leases of one image (and, unicast, one width) waiting in the queue."""
        table, prep = self.table, self.prep
        version = prep.changes.get(lease.req.software.id, 0)   # (`ImageTransfers.version`)
        if future:
            return self._kept_key(cls, (table.released, future, version)), None
        first, ways = prep.first_ready(lease, now)
        if self.vm.tries_every_first and not self._everywhere(ways):
            # Its tries are at `first`, on the nodes those ways reach, and then later as other nodes get its image
            # (at the latest, its own transfer: `VMScheduler._candidates`): no quick test answers for them all, and
            # room given back anywhere, an end before its own transfer's arrival or a change on the link lets it go
            # otherwise.
            own = prep.first_gap(now, prep.duration(lease, lease.numnodes)) + prep.duration(lease, lease.numnodes)
            key = ("tries", table.released, future, version, ways, own, self._ends_until(own))
            return self._kept_key(cls, key), (None, ways)
        if first > now and self.opts.runtime_estimate == "requested" and first - now <= MAX_SECONDS:
            # Its try is at `first`, after now: a reservation ending now gives back no room there, so only
            # room given back at or after now, or an end of a reservation holding node capacity that came to lie
            # before its start, lets it go otherwise (ends that have passed are counted with those still in the
            # table; a transfer placed before it moves its start later and gives back no room).
            key = ("ahead", table.gave_back, future, version, ways, self._room_ends_until(first))
        elif first == now and ways == (-1,) and self.opts.runtime_estimate == "requested":
            # Its try is now, on the nodes whose caches hold its image and on no other (its own transfer and the
            # rides come later, and it may not try then: `VMScheduler.tries_every_first`): only room given back on
            # those nodes lets it go otherwise (with no estimate learning from runs that end elsewhere).
            key = ("cached", table.released_on(prep.caches.holding(lease.req.software.id)), future, version, ways,
                   self._ends_until(first))
        else:
            key = (table.released, future, version, ways, self._ends_until(first))
        return self._kept_key(cls, key), (max(now, first), ways)

    def _everywhere(self, ways: tuple) -> bool:
        """Whether the ways that bring a lease's image first (as `ImageTransfers.first_ready` names them) reach every
        node: its own transfer, or a multicast one to ride on."""
        return 0 in ways or (self.prep.opts.mechanism == "multicast" and any(way > 0 for way in ways))

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
        if t is None:
            return True     # (several tries, each on the nodes ready by then: `_image_attempt`)
        if not self._room_over_window(lease, t):
            return False
        # then the nodes its image reaches first (shared by the leases of that image in this pass), or the nodes
        # its images are on (a suspended lease's own)
        if isinstance(ways, frozenset):
            return fits(lease.total_demand, self.table.free_of(ways, t))
        return ways is None or ways == (0,) or self._room_on_ways(lease, t, ways)

    def _window(self, lease: Lease) -> int:
        """The window the site as a whole must have room over from a waiting lease's start (`VMScheduler.shape`,
        which keeps it while no estimate learns from others' runs)."""
        return self.vm.shape(lease, lease.state in SUSPENDED)[-1]

    def _short_of_room(self, lease: Lease, t: int, ways: tuple) -> bool:
        """Whether what this pass already found free on the site over the lease's window from `t`, or on the nodes
        its image reaches by then (`ways`), is too little for it (`_room_when_ready`'s tests, answered from what it
        kept; False: not asked yet)."""
        if self.vm.estimates.enabled or t is None:
            return False    # (its window is worked out again at each try, or it has several: `_room_when_ready`)
        ahead = self._room.get(("ahead", t))
        if ahead is None:
            return False
        if not ahead.fits(lease.total_demand, self._window(lease)):
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
            free = self._room[nodes_key] = None if nodes is None else self.table.free_of(nodes, t)
        return free is None or fits(lease.total_demand, free)

    def room_now(self, lease: Lease, now: int) -> bool:
        """A necessary condition for starting now, answered from what is free at this instant (cached in
        `_room` for one pass over the queue, until something is placed), and, for a lease whose one try is now (a
        queued lease, a resume in place), from what the site has room for over its window from now: its try
        (`VMScheduler.asap`) asks that first and fails at once without it."""
        room = self._room
        if "total" not in room:
            room["total"] = self.table.total_free(now)
        if lease.state not in SUSPENDED:
            return fits(lease.total_demand, room["total"]) and self._room_over_window(lease, now, True)
        if not self.resumes_in_place(lease):
            return fits(lease.total_demand, room["total"])
        for vnode, pnode in lease.image_nodes.items():
            if pnode not in room:
                room[pnode] = self.table.free_at(pnode, now)
            if not fits(lease.demands[vnode], room[pnode]):
                return False
        return self._room_over_window(lease, now)

    def _room_over_window(self, lease: Lease, t: int, placed: bool = False) -> bool:
        """Whether the site as a whole has room for the lease over its window from `t`, and (`placed`: the mapper
        places it) its nodes could hold its VMs alike over it (`RoomAhead`: one walk for the pass, until something
        is placed, that every lease asking about `t` shares)."""
        ahead = self._room.get(("ahead", t))
        if ahead is None:
            ahead = self._room[("ahead", t)] = RoomAhead(self.table, t)
        return ahead.admits(lease, self._window(lease), placed)

    def enqueue(self, lease: Lease) -> None:
        """Insert in arrival order (requeued and suspended leases go back to their place)."""
        lease.cache.pop("failed", None)
        lease.cache.pop("wait", None)
        self._enqueued += 1
        key = (lease.req.arrival, lease.id)
        i = len(self.queue)
        while i > 0 and (self.queue[i - 1].req.arrival, self.queue[i - 1].id) > key:
            i -= 1
        self.queue.insert(i, lease)
