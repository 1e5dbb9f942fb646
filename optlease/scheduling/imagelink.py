"""The image repository's link (`[simulation] imagetransfer-bandwidth`): what is booked on it (transfers of disk images
and, with `migration: yes` under greedy, copies of a suspended lease's images), in order of start, and its free
stretches: the first one of a given length from an instant, the last one that ends by a deadline. Anything on the
link takes all of it: what is on it never overlaps. And how long a transfer or a copy takes. Pure bookkeeping."""
from __future__ import annotations

import math
from bisect import bisect_right, insort
from itertools import accumulate, islice

from optlease.scheduling.records import RR, Lease


class Transfer(RR):
    """One transfer over the repository's link: `feeds` are the (lease, vnode, node) it brings the image to."""

    __slots__ = ("image", "size", "feeds", "tid", "copies")


class RepositoryLink:
    """What is on the link and when it is free (a mixin of `ImageTransfers`: it needs `opts`, a
    PreparationOptions, and `_link_changed`, called whenever what is on the link changes)."""

    def _init_link(self) -> None:
        self.link: list[tuple[int, int, RR]] = []        # transfers and copies booked and not over, by start
        self._gaps: dict[tuple[int, int], int] = {}      # first_gap's answers while the link is unchanged
        self._index: tuple | None = None   # the link's free stretches while it is unchanged (`_gap_index`)
        self._lengths: dict[tuple[int, int], int] = {}   # duration's answers by image size and copies

    def _link_changed(self) -> None:
        self._gaps.clear()
        self._index = None

    def _put_on(self, t: Transfer) -> None:
        insort(self.link, (t.start, t.tid, t), key=lambda x: (x[0], x[1]))
        self._link_changed()

    def _take_off(self, rr: RR) -> None:
        """Off the link (whether or not it was on it)."""
        self._link_changed()
        for i, (_, _, other) in enumerate(self.link):
            if other is rr:
                del self.link[i]
                return

    def duration(self, lease: Lease, copies: int = 1) -> int:
        """One transfer of the lease's image for `copies` VMs (unicast sends each copy in turn)."""
        key = (lease.req.software.size, copies)
        found = self._lengths.get(key)     # (asked for every image's leases at each pass over the queue)
        if found is None:
            if self.opts.force_time is not None:
                one = self.opts.force_time
            else:
                one = math.ceil(lease.req.software.size * 8 / self.opts.bandwidth - 1e-9)
            found = self._lengths[key] = one * (copies if self.opts.mechanism == "unicast" else 1)
        return found

    def first_gap(self, t: int, length: int, without=()) -> int:
        """The earliest start >= t of a free stretch of the link `length` long (remembered until the link
        changes: every lease in the queue asks at the same instant); `without`: as if these were off the link."""
        key = (t, length)
        found = None if without else self._gaps.get(key)
        if found is None:
            found = self._walk(t, length, without) if without or length <= 0 else self._from_gaps(t, length)
            if not without:
                self._gaps[key] = found
        return found

    def _walk(self, t: int, length: int, without=()) -> int:
        """`first_gap` by walking the link's items from the first that ends after t (those before all end by t)."""
        found = t
        for _, _, x in islice(self.link, bisect_right(self._gap_index()[0], t), None):
            if x.end <= found or x in without:
                continue
            if x.start >= found + length:
                break
            found = x.end
        return found

    def _from_gaps(self, t: int, length: int) -> int:
        """`_walk` (length > 0) from the link's free stretches between its items: the walk goes on from the latest
        end among the items before each one it reaches, so it stops at the first item after the first one ending
        after t whose start leaves `length` free after that end (the first such free stretch), or after the last."""
        reach, at, free, longest = self._gap_index()
        first = bisect_right(reach, t)     # (the first item that ends after t: the walk passes over those before)
        if first == len(reach) or self.link[first][2].start >= t + length:
            return t
        k = bisect_right(at, first)
        if k == len(at) or longest[k] < length:
            return reach[-1]    # (no free stretch after it is that long: after the last item)
        while free[k] < length:
            k += 1
        return reach[at[k] - 1]

    def _gap_index(self) -> tuple[list[int], list[int], list[int], list[int]]:
        """Made once while the link is unchanged: the latest end among its first i+1 items, for each i; the items
        whose start comes after the latest end before them, how long the free stretch before each one is, and the
        longest of those from each one on."""
        index = self._index
        if index is None:
            reach, at, free = [], [], []
            latest = -math.inf
            for j, (_, _, x) in enumerate(self.link):     # (one walk: the link changes as often as it is asked)
                if x.start > latest and j:
                    at.append(j)
                    free.append(x.start - latest)
                if x.end > latest:
                    latest = x.end
                reach.append(latest)
            longest = list(accumulate(reversed(free), max))[::-1]
            index = self._index = (reach, at, free, longest)
        return index

    def last_gap(self, deadline: int, length: int, now: int) -> int | None:
        """The latest start of a free stretch of the link `length` long that ends by `deadline`, not before `now`
        (None: there is none)."""
        end = deadline
        for _, _, x in reversed(self.link):
            if x.start >= end:
                continue
            if x.end <= end - length:
                break
            end = x.start
        return end - length if end - length >= now else None

    def copy_on(self, rr: RR) -> None:
        """A copy of memory or disk images to a resume's nodes takes the link as a transfer does."""
        insort(self.link, (rr.start, -rr.seq, rr), key=lambda x: (x[0], x[1]))
        self._link_changed()

    def copy_off(self, rr: RR) -> None:
        for i, (_, _, other) in enumerate(self.link):
            if other is rr:
                del self.link[i]
                self._link_changed()
                return

    def disk_estimate(self, lease: Lease) -> int:
        """How long a resume elsewhere waits for the lease's disk image, as Haizea estimates it: each VM's copy in
        turn (at the link's bandwidth, which is also the one memory images are copied at)."""
        if lease.req.software is None or not lease.image_nodes:
            return 0
        return self._copy_time(lease.req.software.size) * lease.numnodes

    def _copy_time(self, size: int) -> int:
        """Copying `size` MB between nodes at the link's bandwidth (Haizea's, whatever `force-imagetransfer-time`
        says), in whole seconds, rounded up as memory images are (overheads.transfer_time)."""
        return math.ceil(size * 8 / self.opts.bandwidth - 1e-9)
