"""The pass over the best-effort queue at each instant: which waiting leases are tried, in what order, and the
quick tests that pass over a lease whose try cannot succeed (what its try depends on did not change since it last
did not fit, or there is no room when it could start). Part of Haizea's lease scheduler (`LeaseScheduler`)."""
from __future__ import annotations

from optlease.scheduling.records import Lease, NotSchedulable
from optlease.scheduling.roomahead import RoomAhead
from optlease.scheduling.slottable import fits
from optlease.scheduling.waitindex import WaitIndex, order, position
from optlease.scheduling.waitkeys import PLAIN, QUEUED, SUSPENDED, WaitKeys

__all__ = ["PLAIN", "QUEUED", "SUSPENDED", "QueuePass"]


class QueuePass(WaitKeys):
    """The queue half of LeaseScheduler (a mixin: it needs the scheduler's table, VM scheduler, image transfers,
    options, log, `queue`, `schedule_lease` and the resume tests of `Resumes`; the wait classes' keys are
    `WaitKeys`')."""

    _windex: WaitIndex | None = None    # the waiting leases as a tree (made by the first sweep: `_could_start`)

    def process_queue(self, now: int) -> None:
        """One pass over the queue in its order: each lease is tried where what its try depends on changed since it
        last did not fit, and booked where it fits (FCFS: the pass stops at the first lease that does not)."""
        queue = self.queue
        if self._windex is not None and len(self._windex) != len(queue):
            self._windex.rebuild(queue, self._bound)    # (leases left the queue elsewhere: a cancel, a CP-SAT commit)
        kept: list[Lease] = []      # the leases passed over, in order (put back in front of the queue at the end)
        whole = True                # no lease was passed over or placed yet in this pass
        fresh = True                # what the pass asked of the table is to be asked again (a lease was placed)
        while queue:
            # What every lease's try starts from changes only when one is placed (a try that fails books nothing):
            # asked again only then, not for each of the queue's leases.
            if fresh:
                self._room, self._ready = {}, {}
            if not self.vm.can_schedule_in_future() and self.prep is None and not self.log.info_on:
                start = self._sweep(now, whole)
                if start is None:
                    break
                self._swept = None
                # the lease the sweep found is tried; where it is not booked, the sweep goes on after it, with what
                # the pass asked of the table (as `_visit_quiet` would go on)
                lease = queue[start]
                cls, attempt, _ = self._attempt(lease, now, False)
                whole = False
                refusal = self._try(lease, now, kept, queue, start + 1)
                fresh = refusal is None
                if not fresh:
                    self._tried(lease, attempt, cls, refusal)
                    if self.opts.backfilling == "off":
                        break   # (FCFS: the queue's first lease alone)
                continue
            self._swept = None
            fresh = True
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
            # Most leases last did not fit with the very key their wait class has now (`_attempt`): nothing their
            # try depends on changed, and they are passed over at once. The others take the quick tests (no room
            # when they could start), which most fail, and no exception is raised for them; a queued lease whose
            # image comes at an instant where this pass already found the site, or the nodes the image reaches by
            # then, short of room for it fails them at once.
            found = ready.get(lease.wait_class)
            if found is not None and lease.failed_with is found[0]:
                placed = False
            elif found is not None and len(found) == 2 and found[1] is not None \
                    and self._short_of_room(lease, *found[1]):
                lease.failed_with = found[0]
                placed = False
            else:
                cls, attempt, first = self._attempt(lease, now, future)
                if lease.failed_with == attempt:
                    placed = False
                elif future:
                    placed = None
                else:
                    # it must start at once, or (images managed) as soon as its image can be there
                    placed = None if (self.room_now(lease, now) if first is None
                                      else self._room_when_ready(lease, *first)) else False
                refusal = None
                if placed is None:
                    try:
                        self.schedule_lease(lease, now)
                        placed = True
                    except NotSchedulable as exc:
                        placed, refusal = False, exc
                if placed:
                    if self._windex is not None:
                        self._windex.remove(lease)
                    return True
                if refusal is not None:
                    self._tried(lease, attempt, cls, refusal)
                else:
                    lease.failed_with, lease.wait_class = attempt, cls
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
        again (neither changes while it waits: `_attempt`); the queue is walked in order and cut only before a try."""
        queue, ready = self.queue, self._ready
        future = self.vm.can_schedule_in_future()
        if not queue or (not future and self.table.is_full(now)):
            return False
        once = self.opts.backfilling == "off"
        room_when_ready = self._room_when_ready
        image_ready = self._image_ready
        i = 0
        while True:
            for i, lease in enumerate(queue[:1] if once else queue, 1):     # (FCFS: the first lease alone)
                found = ready.get(lease.wait_class)
                failed = lease.failed_with
                if found is None or failed is not found[0]:
                    if found is not None and len(found) == 2 and found[1] is not None and not future \
                            and failed != found[0]:
                        # (a queued lease of an image's class: its quick tests at the class's start, without the
                        # layers `_attempt` and `_room_when_ready` go through for every class)
                        cls, attempt = lease.wait_class, found[0]
                        ok = image_ready(lease, *found[1])
                    else:
                        if found is not None and (len(found) == 3 or found[1] is not None):
                            # (suspended leases' resume, or an image's class where the future may be booked or the
                            # lease's mark equals its key: what `_attempt` would answer)
                            cls, attempt = lease.wait_class, found[0]
                            first = found[1] if len(found) == 2 else (found[1],
                                                                      self._image_ways(lease) if found[2] else None)
                        else:
                            cls, attempt, first = self._attempt(lease, now, future)
                        ok = failed != attempt and (
                            future or (self.room_now(lease, now) if first is None else room_when_ready(lease, *first)))
                    if not ok:
                        lease.failed_with, lease.wait_class = attempt, cls
                    else:
                        refusal = self._try(lease, now, kept, queue, i)
                        if refusal is None:
                            return True
                        self._tried(lease, attempt, cls, refusal)
                        i = 0
                        break    # (the walk goes on from the start of what is left)
            else:
                break   # (the end of the queue)
            if once:
                break
        kept += queue[:i]
        del queue[:i]
        return False

    def _try(self, lease: Lease, now: int, kept: list[Lease], queue: list[Lease], i: int) -> NotSchedulable | None:
        """`_visit_quiet`'s try of the queue's `i`-th lease (counting from 1), the leases before it passed over:
        None when it is booked; else its refusal, and it is passed over too (and the caller walks the queue left
        from its start)."""
        kept += queue[:i - 1]
        del queue[:i]
        try:
            self.schedule_lease(lease, now)
        except NotSchedulable as refusal:
            kept.append(lease)
            return refusal
        if self._windex is not None:
            self._windex.remove(lease)
        return None

    def _tried(self, lease: Lease, attempt: tuple, cls, refusal: NotSchedulable) -> None:
        """Mark a lease whose try just failed with the key it failed with: it is passed over until the key changes.
        Not where its refusal came after a walk of the nodes at a start with room and the host policy's order
        moves with the instant (`Policies.order_moves_with_time`): the walk at a later instant, with nothing booked
        or freed, may take the nodes in another order and place it, as Haizea's try at every instant does."""
        lease.wait_class = cls
        lease.failed_with = None if refusal.walked and self.policies.order_moves_with_time else attempt

    def _sweep(self, now: int, whole: bool) -> int | None:
        """Where the first lease left in the queue that the pass would try to book stands in it (None: none), found
        with the pass's own tests, where every queued lease is of the plain wait class and must start now (images
        not managed, no booking for the future allowed) and no log line is written: what `_visit` does up to that
        lease, with the site's free room read once and (with backfilling) only the leases that could pass the
        quick tests looked at (`WaitIndex`). `whole`: the queue is whole (no lease was passed over or placed in this
        pass yet)."""
        table = self.table
        key = (table.released, False, self._began_key(now))
        if whole and self._swept == (key, self._enqueued):
            return None     # no lease was queued and no room given back since no lease could start
        if table.is_full(now):
            return None
        key = self._kept_key(PLAIN, key)
        self._ready[PLAIN] = (key, None)
        free = self._room["total"] = table.total_free(now)
        queue = self.queue
        once = self.opts.backfilling == "off"
        pair = len(free) == 2       # (most sites: CPU and memory, compared inline)
        first, second = free[0], free[-1]
        resumes = False     # a suspended lease of a class of its own was passed over (its key is not `key`)
        for lease in queue[:1] if once else self._could_start(now, queue[0]):
            if lease.failed_with == key:
                continue
            if lease.state in SUSPENDED:
                # (one that must wait for copies of its memory images resumes later than now: its own class)
                cls, attempt, ready_at = self._attempt(lease, now, False)
                resumes = resumes or cls is not PLAIN
                if lease.failed_with != attempt and (
                        self.room_now(lease, now) if ready_at is None else self._room_when_ready(lease, *ready_at)):
                    return 0 if once else position(queue, lease)
                lease.failed_with, lease.wait_class = attempt, cls
            else:
                need = lease.total_demand
                if ((need[0] <= first and need[1] <= second) if pair else fits(need, free)) \
                        and self._room_over_window(lease, now, True):
                    return 0 if once else position(queue, lease)
                lease.failed_with, lease.wait_class = key, PLAIN
        if whole and not resumes:
            self._swept = (key, self._enqueued)
        return None

    def _could_start(self, now: int, head: Lease):
        """The leases of the queue from `head` on, in its order, that could pass the quick tests now (`WaitIndex`:
        their need within the site's room over their window from now), and the suspended ones."""
        index = self._windex
        if index is None:
            index = self._windex = WaitIndex()
            index.rebuild(self.queue, self._bound)
        return index.candidates(order(head), self._ahead(now).room)

    def _bound(self, lease: Lease) -> tuple | None:
        """What a waiting lease needs at the least to pass the sweep's quick tests: its need, over its window from
        now (none where an estimate may change its window); None for a suspended lease (tests of its own)."""
        if lease.state in SUSPENDED:
            return None
        return lease.total_demand, (0 if self.vm.estimates.enabled else self._window(lease))

    def _room_when_ready(self, lease: Lease, t: int, ways: tuple | None) -> bool:
        """A necessary condition for a lease that must start at `t`, as soon as its image (or its memory image) can
        be there (the one start `VMScheduler.asap` would try): the site as a whole has room for it from `t` on, and
        the nodes its image reaches by then (`ways`, as `ImageTransfers.first_ready` names them, or the set of nodes
        a suspended lease may resume on then; None: every node) have room for it at `t`."""
        if t is None:
            return True     # (several tries, each on the nodes ready by then: `_image_attempt`)
        if not fits(lease.total_demand, self._room_within(t, self._window(lease))):
            return False
        # then the nodes its image reaches first (shared by the leases of that image in this pass), or the nodes
        # its images are on (a suspended lease's own)
        if isinstance(ways, frozenset):
            return fits(lease.total_demand, self.table.free_of(ways, t))
        return ways is None or ways == (0,) or self._room_on_ways(lease, t, ways)

    def _image_ready(self, lease: Lease, t: int | None, ways: tuple) -> bool:
        """`_room_when_ready` for a queued lease of an image's class (`ways` as `ImageTransfers.first_ready` names
        them): the site's room over its window from `t` is read once for every lease of that window in the pass."""
        if t is None:
            return True
        if not fits(lease.total_demand, self._room_within(t, self._window(lease))):
            return False
        return ways is None or ways == (0,) or self._room_on_ways(lease, t, ways)

    def _room_within(self, t: int, window: int) -> tuple:
        """What the site as a whole has free at every instant of [t, t + window) (`RoomAhead.room`), asked once
        in a pass over the queue for each instant and window, until something is placed."""
        key = ("within", t, window)
        room = self._room.get(key)
        if room is None:
            room = self._room[key] = self._ahead(t).room(window)
        return room

    def _window(self, lease: Lease) -> int:
        """The window the site as a whole must have room over from a waiting lease's start (`VMScheduler.shape`,
        which keeps it while no estimate learns from others' runs). Asked at every quick test: kept with the lease
        as well, with the run it has had and whether it resumes, which fix it (no shape looked up each time)."""
        resuming = lease.state in SUSPENDED
        kept = lease.cache.get("window")
        if kept is not None and kept[0] == lease.accumulated and kept[1] is resuming:
            return kept[2]
        window = self.vm.shape(lease, resuming)[-1]
        if not self.vm.estimates.enabled:
            lease.cache["window"] = (lease.accumulated, resuming, window)
        return window

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
        return self._ahead(t).admits(lease, self._window(lease), placed)

    def _ahead(self, t: int) -> RoomAhead:
        """The site's room from `t` on, one walk for the pass until something is placed."""
        ahead = self._room.get(("ahead", t))
        if ahead is None:
            ahead = self._room[("ahead", t)] = RoomAhead(self.table, t)
        return ahead

    def enqueue(self, lease: Lease) -> None:
        """Insert in arrival order (requeued and suspended leases go back to their place)."""
        lease.failed_with = lease.wait_class = None
        self._enqueued += 1
        if self._windex is not None:
            self._windex.add(lease, self._bound)
        key = (lease.req.arrival, lease.id)
        i = len(self.queue)
        while i > 0 and (self.queue[i - 1].req.arrival, self.queue[i - 1].id) > key:
            i -= 1
        self.queue.insert(i, lease)
