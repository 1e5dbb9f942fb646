"""The wait classes' keys of the pass over the best-effort queue (scheduling.queuepass): what a waiting lease's try
depends on, shared by the leases of one class in a pass, so that a lease whose key did not change since it last did
not fit is passed over. Part of Haizea's lease scheduler (`LeaseScheduler`)."""
from __future__ import annotations

from optlease.domain.lease import LeaseState
from optlease.formats.timefmt import MAX_SECONDS
from optlease.scheduling.records import Lease

S = LeaseState
SUSPENDED = (S.SUSPENDED_PENDING, S.SUSPENDED_QUEUED)
QUEUED = S.QUEUED
PLAIN = ("plain",)   # the wait class of every lease whose try depends on the table alone (`_attempt`)


class WaitKeys:
    """The keys half of the queue pass (a mixin of `QueuePass`: it needs the scheduler's table, VM scheduler, image
    transfers, options, the pass's `_ready` and `_room`, and the resume tests of `Resumes`)."""

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
                    # its own nodes first, every node later, each a try: no quick test answers for both. The try
                    # on its own nodes is at `first`, which moves with now: an end that came to lie before it (an
                    # AR in its way ending before the copies could be done) lets it go with nothing freed
                    ends = self.table.ends
                    key = (self.table.released, future, ends.bisect_right(first), ends.bisect_right(everywhere), own,
                           everywhere)
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
