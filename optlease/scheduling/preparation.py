"""Lease preparation by disk-image transfer (`[general] lease-preparation: imagetransfer`), as Haizea 1.1 plans it.

The image repository reaches the nodes over one link of `imagetransfer-bandwidth` Mbit/s, and a transfer takes the
whole link: transfers on it never overlap. A multicast transfer feeds any number of nodes in the time of one image;
unicast sends one copy per VM, one after another. Before a lease can start, each of its VMs' nodes must have the
lease's disk image, which comes one of three ways:

- a transfer of its own: for an AR, placed on the link to end by the AR's start, in the latest gap there is (and the
  AR is refused when none is left after now); for a best-effort or immediate lease, in the first gap from now, and
  the VMs start once it has arrived;
- a transfer already booked for the same image and not yet begun (`avoid-redundant-transfers`): with multicast it
  feeds one more node for free, with unicast only a node it already goes to;
- the node's image cache (`diskimage-reuse: image-caches`, scheduling.imagecache).

Transfers are reservations of kind `transfer` in the slot table that hold no node capacity; the lease scheduler
calls `earliest` before placing a lease, `plan` after (it may refuse), `commit` once the lease is booked, and
`release` when a booking is given up. This module places leases' images; what is on the link and when it is free is
scheduling.imagelink, the slot table of such a run scheduling.preptable, the options and a plan's records
scheduling.prepplan. Pure: `now` is always passed in.
"""
from __future__ import annotations

from itertools import count
from operator import attrgetter

from optlease.domain.lease import LeaseKind
from optlease.eventlog import EventLog
from optlease.scheduling.copyrounds import copy_rounds
from optlease.scheduling.imagecache import ImageCaches
from optlease.scheduling.imagelink import RepositoryLink, Transfer
from optlease.scheduling.prepplan import FROM_CACHE, PIGGYBACK, Earliest, Plan, PreparationOptions, Ready
from optlease.scheduling.preptable import PreparedTable
from optlease.scheduling.records import RR, TRANSFER, Held, Lease, NotSchedulable
from optlease.scheduling.slottable import SlotTable

__all__ = ["PreparationOptions", "PreparedTable", "Transfer", "Earliest", "Ready", "Plan", "ImageTransfers"]

FROM_CACHE_FIRST = (-1,)    # `first_ready`'s ways when a cache holds the image: the cache alone


class ImageTransfers(RepositoryLink):
    """Where and when each lease's image comes from: transfers booked, ridden on and given up, the caches'
    pins, and what happens as transfers begin and end (the link's own bookkeeping: `RepositoryLink`)."""

    def __init__(self, table: SlotTable, opts: PreparationOptions, log: EventLog) -> None:
        self.table = table
        self.opts = opts
        self.log = log
        self._init_link()
        self.caches = ImageCaches(table.nodes, opts.cache_size) if opts.reuse == "image-caches" else None
        self.waiting: dict[int, list[Transfer]] = {}       # lease id -> transfers not over that feed it
        self.pinned: dict[int, list[tuple[int, str, int]]] = {}   # lease id -> (node, image, vnode) it starts from
        self._ids = count(1)
        self._firsts: dict[tuple, tuple[int, tuple]] = {}  # first_ready's answers at one instant, while the link
        self._firsts_at = -1                                # is unchanged
        self.open: dict[str, list[Transfer]] = {}         # image -> its transfers booked and not begun
        # per image, bumped when a cache takes it in or a transfer of it is booked: what can let a lease that did
        # not fit start sooner (its nodes' capacity aside)
        self.changes: dict[str, int] = {}
        self.sources: dict[int, tuple[int, int]] = {}   # lease id -> VMs booked from a cache, by a transfer
        self.transfers = 0      # transfers completed
        self.volume = 0         # MB sent over the link by them
        self.seconds = 0        # link time they took
        if isinstance(table, PreparedTable):
            table.link = self

    def _link_changed(self) -> None:
        super()._link_changed()
        self._firsts.clear()

    def disk_rounds(self, vmrr: RR) -> list[tuple[int, dict[int, int]]]:
        """The copies of the lease's disk image that its resume `vmrr` elsewhere needs, as Haizea makes them: from
        the node each VM was suspended on to the one it resumes on, in rounds in which no node sends or receives
        twice, each as long as one image. A node whose cache holds the image needs no copy: the image is pinned
        there until the VMs start. [(duration, {vnode: origin})]"""
        lease = vmrr.lease
        image = lease.req.software
        def copies():
            for vnode in sorted(vmrr.mapping):
                origin, dest = lease.image_nodes[vnode], vmrr.mapping[vnode]
                if origin == dest:
                    continue
                if self.caches is not None and self.caches.nodes[dest].has(image.id):
                    self.caches.nodes[dest].pin(image.id, (lease.id, vnode), vmrr.end)
                    self.pinned.setdefault(lease.id, []).append((dest, image.id, vnode))
                    continue
                yield vnode, origin, dest
        return [(self._copy_time(image.size), moves) for moves in copy_rounds(copies())]

    # -- placing a lease ------------------------------------------------------------------------------------
    def needs(self, lease: Lease) -> bool:
        return lease.req.software is not None

    def version(self, lease: Lease) -> int:
        """How often the ways the lease's image can come changed: which caches hold it, which transfers of it a
        lease could ride on (0: it has no image)."""
        return self.changes.get(lease.req.software.id, 0) if lease.req.software is not None else 0

    def _changed(self, image: str) -> None:
        self.changes[image] = self.changes.get(image, 0) + 1

    def earliest(self, lease: Lease, now: int, without=()) -> Earliest:
        """When each node could have the lease's image: by a transfer in the link's first free stretch, from its
        cache, or riding on a transfer of the same image that has not begun (`without`: as if the given transfers
        were off the link)."""
        image = lease.req.software.id
        length = self.duration(lease, lease.numnodes)
        start = self.first_gap(now, length, without)
        rides = [t for t in self.open.get(image, ()) if t.end > now and t not in without] \
            if self.opts.avoid_redundant else ()
        ready = Earliest(dict.fromkeys(self.table.nodes, start + length), start, {})
        if rides and self.opts.mechanism == "multicast":
            # A multicast reaches every node at no cost: a node that no cache holds it on gets the first of the
            # rides that end soonest, where that is before its own transfer's end (as taking each ride in turn
            # where it ends strictly sooner gives), every node at once.
            first = min(rides, key=attrgetter("end"))
            if first.end < start + length:
                ready = Earliest(dict.fromkeys(ready.times, first.end), start,
                                 dict.fromkeys(ready.times, Ready(first.end, PIGGYBACK, on=first)))
            rides = ()
        times = ready.times
        if self.caches is not None:
            hit = Ready(now, FROM_CACHE)    # (one answer for every node: it is never changed)
            for n in self.caches.holding(image):
                if n in times:
                    times[n] = now
                    ready.how[n] = hit
        for t in rides:
            # a unicast only to the nodes it already goes to (a cache's copy comes sooner: a ride ends after now)
            ride = Ready(t.end, PIGGYBACK, on=t)
            for n in {p for _, _, p in t.feeds}:
                if n in times and t.end < times[n]:
                    times[n] = t.end
                    ready.how[n] = ride
        return ready

    def first_ready(self, lease: Lease, now: int) -> tuple[int, tuple]:
        """The earliest time `earliest` gives any node, and which ways reach a node by then (cache, the transfers
        to ride on by id, a transfer of its own), without building it: with `version`, they say which nodes."""
        image = lease.req.software.id
        # (fixed by its image, its width and this link: asked at every pass)
        mine, length = lease.cache.get("own-transfer", (None, 0))
        if mine is not self:
            length = self.duration(lease, lease.numnodes)
            lease.cache["own-transfer"] = (self, length)
        if length > 0 and self.caches is not None and self.caches.where.get(image):
            # a cache holds it now, and every other way brings it later (a ride ends after now, its own transfer
            # takes time)
            return now, FROM_CACHE_FIRST
        if self._firsts_at != now:
            self._firsts.clear()
            self._firsts_at = now
        # (without caches or rides, a transfer of its own is the one way, the same for every image as long)
        shared = self.caches is None and not self.opts.avoid_redundant
        key = (None, length, 0) if shared else (image, length, self.changes.get(image, 0))
        found = self._firsts.get(key)
        if found is None:
            # a transfer of its own (way 0) first; then the cache (-1) and the transfers to ride on, by id
            first, named = self.first_gap(now, length) + length, [0]
            others = []
            if self.caches is not None and self.caches.holding(image):
                others.append((now, -1))
            if self.opts.avoid_redundant:
                others += [(t.end, t.tid) for t in self.open.get(image, ()) if t.end > now]
            for t, way in others:
                if t < first:
                    first, named = t, [way]
                elif t == first:
                    named.append(way)
            found = self._firsts[key] = (first, tuple(sorted(named)))
        return found

    def nodes_by(self, lease: Lease, ways: tuple) -> set[int] | None:
        """The nodes the given ways (as `first_ready` names them) bring the lease's image to; None: every node (the
        caches' own set where they alone do: not to be changed)."""
        image = lease.req.software.id
        if ways == FROM_CACHE_FIRST:
            return self.caches.holding(image)
        nodes: set[int] = set()
        for way in ways:
            if way == 0 or (way > 0 and self.opts.mechanism == "multicast"):
                return None
            if way == -1:
                nodes |= self.caches.holding(image)
            else:
                nodes |= {p for t in self.open.get(image, ()) if t.tid == way for _, _, p in t.feeds}
        return nodes

    def plan(self, lease: Lease, vmrr: RR, ready: Earliest | None, now: int) -> Plan:
        """How the booking `vmrr` gets its images; NotSchedulable when an AR's cannot arrive by its start."""
        plan = Plan(lease)
        image = lease.req.software.id
        for vnode, pnode in sorted(vmrr.mapping.items()):
            if lease.kind is LeaseKind.AR:
                cached = self.caches is not None and self.caches.nodes[pnode].has(image)
                how = Ready(now, FROM_CACHE) if cached else None
            else:
                how = ready.how.get(pnode)
            if how is not None and how.how == FROM_CACHE:
                plan.hits[vnode] = pnode
            elif how is not None and how.how == PIGGYBACK:
                plan.rides[vnode] = (pnode, how.on)
            else:
                plan.own[vnode] = pnode
        if plan.own:
            length = self.duration(lease, len(plan.own))
            if lease.kind is LeaseKind.AR:
                start = self.last_gap(lease.req.start, length, now)
                if start is None:
                    raise NotSchedulable("Could not schedule the file transfer to complete in time.")
            else:
                start = ready.start
            plan.start, plan.end = start, start + length
        return plan

    def commit(self, plan: Plan, vmrr: RR) -> None:
        """Book what `plan` says (after the lease's preemptions, so that its transfer follows them in the table)."""
        lease = plan.lease
        image = lease.req.software
        if plan.hits:
            self.caches.pin_all(lease.id, image.id, plan.hits, vmrr.end)
            self.pinned.setdefault(lease.id, []).extend((pnode, image.id, vnode) for vnode, pnode in plan.hits.items())
        waiting = self.waiting.setdefault(lease.id, [])
        for vnode, (pnode, transfer) in plan.rides.items():
            transfer.feeds.append((lease, vnode, pnode))
            if transfer not in waiting:
                waiting.append(transfer)
        if plan.own:
            t = Transfer(lease, TRANSFER, plan.start, plan.end, dict(plan.own), {}, self.table.next_seq())
            t.image, t.size, t.tid = image.id, image.size, next(self._ids)
            t.copies = len(plan.own) if self.opts.mechanism == "unicast" else 1
            t.feeds = [(lease, v, p) for v, p in sorted(plan.own.items())]
            self._put_on(t)
            self.open.setdefault(image.id, []).append(t)
            self.table.add(t)
            waiting.append(t)
            self._changed(image.id)
        self.sources[lease.id] = (len(plan.hits), len(plan.rides) + len(plan.own))
        if not waiting:
            del self.waiting[lease.id]

    def given_up(self, lease: Lease) -> set[Transfer]:
        """The transfers `release` would take off the link: those that feed the lease alone."""
        return {t for t in self.waiting.get(lease.id, ()) if t.state in ("scheduled", "active")
                and all(f[0] is lease for f in t.feeds)}

    def release(self, lease: Lease) -> None:
        """The lease's booking is given up: it no longer waits for transfers (one that feeds nobody else is taken
        off the link, even under way, as Haizea does) nor holds cached images."""
        for t in self.waiting.pop(lease.id, ()):
            t.feeds = [f for f in t.feeds if f[0] is not lease]
            if not t.feeds and t.state in ("scheduled", "active"):
                self._off_link(t)
                self.table.remove(t)
                t.state = "cancelled"
        self.sources.pop(lease.id, None)
        self._unpin(lease)

    def reinstate(self, t: Transfer, state: str) -> None:
        """Put back a transfer `release` took off the link (a CP-SAT round's commit undone), in `state`."""
        t.state = state
        self._put_on(t)
        if state == "scheduled":
            self.open.setdefault(t.image, []).append(t)
        self.table.add(t)
        self._changed(t.image)

    def started(self, lease: Lease) -> None:
        """The lease's VMs started: they run from their own copies, so the cached images they came from are free
        to be evicted again. The booking counts toward the caches' hit rate (one that is given up does not)."""
        hits, misses = self.sources.pop(lease.id, (0, 0))
        if self.caches is not None:
            self.caches.hits += hits
            self.caches.misses += misses
        self._unpin(lease)

    def _unpin(self, lease: Lease) -> None:
        pins = self.pinned.pop(lease.id, None)
        if pins:
            self.caches.unpin_all(lease.id, pins)

    # -- transfers starting and ending ----------------------------------------------------------------------
    def start(self, t: Transfer) -> None:
        self.log.info("DEPLOY", "Starting image transfer for lease %i" % t.lease.id)
        self._close(t)     # under way: nobody can ride on it any more

    def end(self, t: Transfer, now: int) -> None:
        self.log.info("DEPLOY", "Completed image transfer for lease %i" % t.lease.id)
        self._off_link(t)
        self.transfers += 1
        self.volume += t.size * t.copies
        self.seconds += t.end - t.start
        by_lease: dict[int, tuple[Lease, dict[int, int]]] = {}
        for lease, vnode, pnode in t.feeds:
            by_lease.setdefault(lease.id, (lease, {}))[1][vnode] = pnode
        extra = {"image": t.image, "size": t.size, "transfer": t.tid, "bandwidth": self.opts.bandwidth}
        for lease, mapping in by_lease.values():
            lease.held.append(Held(TRANSFER, t.start, t.end, mapping, extra=extra))
            waiting = self.waiting.get(lease.id)
            if waiting is not None and t in waiting:
                waiting.remove(t)
                if not waiting:
                    del self.waiting[lease.id]
        if self.caches is not None:
            for pnode in sorted({p for _, _, p in t.feeds}):
                uses = [lease.last_vmrr().end for lease, _, p in t.feeds if p == pnode and lease.last_vmrr()]
                cache = self.caches.nodes[pnode]
                before = set(cache.entries)
                cache.admit(t.image, t.size, now, max(uses, default=now))
                for image in before ^ set(cache.entries):      # taken in, or evicted to make room
                    self._changed(image)

    def _off_link(self, t: Transfer) -> None:
        self._close(t)
        self._take_off(t)

    def _close(self, t: Transfer) -> None:
        """No lease can ride on `t` any more."""
        rides = self.open.get(t.image)
        if rides is not None and t in rides:
            rides.remove(t)
            if not rides:
                del self.open[t.image]
            self._changed(t.image)

    # -- what the run reports -------------------------------------------------------------------------------
    def figures(self) -> dict:
        out = {"image_transfers": self.transfers, "transfer_volume_mb": self.volume,
               "transfer_seconds": self.seconds}
        if self.caches is not None:
            asked = self.caches.hits + self.caches.misses
            out.update(cache_hits=self.caches.hits, cache_misses=self.caches.misses,
                       cache_hit_rate=round(self.caches.hits / asked, 4) if asked else None)
        return out

    def document(self, iso) -> dict:
        """The schedule file's `images` section: the link, the cache size and every stay of an image in a cache
        (`iso` writes a time)."""
        doc = {"bandwidth": self.opts.bandwidth, "mechanism": self.opts.mechanism, "reuse": self.opts.reuse,
               "cache_size": self.opts.cache_size if self.caches is not None else None, "caches": []}
        if self.caches is not None:
            doc["caches"] = [{"node": s.node, "image": s.image, "size": s.size, "start": iso(s.start),
                              "end": None if s.end is None else iso(s.end)}
                             for s in sorted(self.caches.spans(), key=lambda s: (s.start, s.node, s.image))]
        return doc
