"""The slot table of a run with image transfers (`lease-preparation: imagetransfer`): besides the reservations, what
the queue's keys ask about a waiting lease that tries a few nodes alone or at a later instant (room given back node
by node, the ends of reservations that hold node capacity), what a few nodes have free, added up, and the copies
over the repository's link that its reservations put on it or take off. Pure bookkeeping."""
from __future__ import annotations

import math
from bisect import bisect_right
from collections import _count_elements     # (Counter's own counting, in C, without setting up a Counter)
from operator import sub as _sub

from optlease.scheduling.records import MIGRATE
from optlease.scheduling.slottable import SlotTable, Times, Vec

FEW_NODES = 3   # `PreparedTable.free_of` adds up at most this many nodes one by one


class PreparedTable(SlotTable):
    """The slot table of a run with image transfers: it also adds up what a few nodes have free (`free_of`), which a
    pass over the queue asks for each suspended lease's own nodes, and counts what the queue's keys ask about a
    waiting lease that tries a few nodes alone or at a later instant (`released_on`, `room_ends_until`).

    The copies of a suspended lease's images to the nodes it resumes on that greedy books (`migrate` reservations
    with the link's `extra`) go over the repository's link too: whatever puts one in the table or takes it out
    (booking, cancelling, a round's undo and redo) puts it on the link or takes it off (`ImageTransfers`, once it
    is made, is `link`). The CP-SAT round's copies do not (yet)."""

    def __init__(self, site) -> None:
        super().__init__(site)
        self.link = None    # the run's ImageTransfers, once made
        # per node, bumped whenever room on it comes back (`released`, node by node): a lease whose try looks at
        # a few nodes alone (those whose caches hold its image) is tried again only when one of them gave some back
        self.node_released = dict.fromkeys(self.caps, 0)
        # The ends of the reservations that hold node capacity (not transfers, not copies over the link), and how
        # many of them were dropped because they had passed: a lease that tries at a later instant than now (its
        # image must come over the link first) may fit otherwise only where one of these comes to lie before its
        # start (`ends` and `past_ends` count the link's too, which give back no room on any node).
        self.room_ends = Times()     # (a sorted list: most ends come last, as the table's own `ends`)
        self.past_room_ends = 0

    def released_on(self, nodes) -> int:
        """How often room came back on the given nodes (it only grows: unchanged exactly when no node's did)."""
        return sum(map(self.node_released.__getitem__, nodes))

    def _gave_back_on(self, nodes) -> None:
        _count_elements(self.node_released, nodes)     # (each node's count, one up: a wide lease's in C)

    def count_as_rebooked(self, rrs) -> None:
        """Reservations a premature end keeps, booking them again giving them back unchanged: counted as taken out
        (`remove`: room given back, on their nodes too), so that every key the queue asks is the one booking them
        again would give."""
        for rr in rrs:
            self.released += 1
            self.gave_back += 1
            self._gave_back_on(rr.demand)

    def changed_until(self, mark: tuple[int, int]) -> float | None:
        """How far in time the changes to the reservations since `mark` reach (-inf: there were none; None: the
        mark no longer holds): from there on, the table is what it was at the mark (`unchanged_from`)."""
        epoch, pos = mark
        if epoch != self.edit_epoch:
            return None
        return max(self.edits[pos:], default=-math.inf)

    def room_ends_until(self, t: int) -> int:
        """How many reservations that hold node capacity end at or before t, those that have passed included."""
        return self.room_ends.bisect_right(t) + self.past_room_ends

    def add(self, rr) -> None:
        super().add(rr)
        if rr.demand:
            self.room_ends.add(rr.end)
        if rr.kind == MIGRATE and rr.extra is not None:
            self.link.copy_on(rr)

    def remove(self, rr) -> None:
        super().remove(rr)
        if rr.kind == MIGRATE and rr.extra is not None:
            self.link.copy_off(rr)

    def forget(self, rr, now: int | None = None) -> None:
        super().forget(rr, now)
        if rr.demand:
            self.room_ends.discard(rr.end)
            if now is not None and rr.end <= now:
                self.past_room_ends += 1
        self._gave_back_on(rr.demand)
        if rr.kind == MIGRATE and rr.extra is not None:
            self.link.copy_off(rr)

    def cut(self, rr, end: int, prune: bool = False) -> None:
        old = rr.end
        super().cut(rr, end, prune)
        if rr.demand and rr.start <= end < old:    # (otherwise moved: taken out and added again)
            self.room_ends.discard(old)
            self.room_ends.add(end)
        self._gave_back_on(rr.demand)

    def bring_up(self, node: int) -> None:
        super().bring_up(node)
        self._gave_back_on((node,))

    def free_of(self, nodes, t: int) -> Vec:
        """What the given nodes in planning have free at instant t, added up (a node over its capacity adds
        nothing), as `free_on` gives it: for a handful of nodes (most suspended leases' images are on one to three)
        node by node, which costs less than counting the profiles they share."""
        if len(nodes) > FEW_NODES:
            return self._free_by_profile(nodes, t)
        profiles, caps, down = self.profiles, self.caps, self.down
        if len(self.zero) == 2 and not down:    # (most sites: two resource types, the sums written out)
            f0 = f1 = 0
            for n in nodes:
                c0, c1 = caps[n]
                u0, u1 = profiles[n].at(t)
                if c0 > u0:
                    f0 += c0 - u0
                if c1 > u1:
                    f1 += c1 - u1
            return f0, f1
        free = list(self.zero)
        for n in nodes:
            if n in down:
                continue
            for i, left in enumerate(map(_sub, caps[n], profiles[n].at(t))):
                if left > 0:
                    free[i] += left
        return tuple(free)

    def _free_by_profile(self, nodes, t: int) -> Vec:
        """`free_on`, with the sums written out where every node in planning has one capacity of two resource types
        (most sites): what a suspended lease's own nodes, or the nodes caching an image, have free at t."""
        cap = self.one_cap
        if cap is None or self.down or len(cap) != 2:
            return self.free_on(nodes, t)
        c0, c1 = cap
        f0 = f1 = 0
        counts: dict = {}
        _count_elements(counts, map(self.profiles.__getitem__, nodes))
        for prof, k in counts.items():
            times = prof.t
            i = bisect_right(times, t) - 1
            u0, u1 = prof.u[i] if i >= 0 else prof.zero
            if c0 > u0:
                f0 += k * (c0 - u0)
            if c1 > u1:
                f1 += k * (c1 - u1)
        return f0, f1
