"""Disk images in a CP-SAT round (`lease-preparation: imagetransfer`): what the round model is told about the link
and the caches (`cpsat.transfers.Link`), how the hint's completion waits for images, and how a committed plan gets
its images through the greedy scheduler's own bookkeeping (scheduling.preparation), all or nothing.

- **Movable**: a best-effort booking whose image has started to come (a transfer of its own under way or over) is a
  commitment, like a memory-image copy that has begun: the round leaves it where it is. A transfer that begins at
  the round's instant has sent nothing yet: the round still decides it (a round is solved whenever a movable
  lease's transfer begins, `CpsatRound._transfer_due`), else every transfer booked for later, the commit's just in
  time ones first, would begin unseen.
- **Fixed on the link**: every transfer not begun that feeds more than one lease or a lease the round may not move
  (ARs keep the transfers the greedy pass booked for them), and every transfer under way. A transfer that feeds one
  movable lease alone is that lease's own: the model decides it again.
- **Committed** VM by VM as the greedy scheduler plans it: from the node's cache (pinned until the VMs start), riding
  on a booked transfer of the image that arrives in time (`avoid-redundant-transfers`), or by the lease's own
  transfer, at the model's start where the link is free there, else in the first free stretch that ends by the
  lease's start; `ImageTransfers.commit` books it. A lease taken out gives its transfers and pins back
  (`ImageTransfers.release`), and an undone round puts them back as they were.
"""
from __future__ import annotations

from math import inf as INF

from optlease.domain.lease import LeaseKind
from optlease.scheduling.cpsat.prepare import wait_weight
from optlease.scheduling.cpsat.transfers import LeaseImage, Link, _first_gap, _free, _last_gap, link_price
from optlease.scheduling.preparation import Plan as ImagePlan
from optlease.scheduling.records import BOOKED, RR, TRANSFER, Lease, NotSchedulable

# how many nodes whose cache holds a lease's image the neighbourhood adds for it (the first by node id): enough to
# move it to a cached copy, few enough that a round over a site where every image is cached widely stays small
CACHED_NODES = 16


class RoundImages:
    """The image half of a cpsat round over `sched.prep` (an ImageTransfers)."""

    def __init__(self, sched) -> None:
        self.sched = sched
        self.prep = sched.prep
        self.exclude: set[int] = set()     # the round's movable leases: their own transfers are the model's to place
        self.scratch: list[tuple[int, int]] = []   # transfers the hint's completion books (not on the link)
        self.hinted: dict[int, int] = {}   # lease id -> start of the transfer the completion booked for it
        self.sent: dict[str, int] = {}     # image -> the earliest end of a transfer of it the completion booked
        self.price = 1                     # the weight of a second of the link this round (transfers.link_price)
        self._saved: dict[int, tuple] = {}     # lease id -> its image state before this commit took it out
        self._feeds: dict[int, tuple] = {}     # transfer id -> (transfer, feeds, state) before this commit
        self._reserved: dict[int, tuple] = {}  # lease id -> (image, start, end) of the own transfer the plan gives it
        self._riders: dict[str, list[int]] = {}   # image -> starts of the plan's leases without an own transfer

    # -- what the round sees ------------------------------------------------------------------------------------
    def movable(self, lease: Lease, now: int) -> bool:
        """Whether a booked lease's image has not started to come: no transfer of its own under way (before now)
        or over."""
        if lease.state not in BOOKED or lease.is_suspended() or not self.prep.needs(lease):
            return True
        if any(h.kind == TRANSFER for h in lease.held):
            return False
        return all(_unbegun(t, now) for t in self.prep.waiting.get(lease.id, ()))

    def _own(self, t, now: int) -> bool:
        """Whether a transfer is a movable lease's own (the model places it again). The link also carries the
        copies of suspended leases' images to the nodes they resume on (`migrate` reservations): fixed."""
        if t.kind != TRANSFER:
            return False
        ids = {lease.id for lease, _, _ in t.feeds}
        return _unbegun(t, now) and len(ids) == 1 and next(iter(ids)) in self.exclude

    def busy(self, now: int) -> list[tuple[int, int]]:
        """The link's fixed transfers from now on, by start."""
        return sorted((max(now, t.start), t.end) for _, _, t in self.prep.link
                      if t.end > now and not self._own(t, now))

    def ready(self, lease: Lease, now: int) -> tuple[dict[int, int], int | None]:
        """When the lease's image is there without a transfer of its own: per node, from its cache (now) or a fixed
        unicast transfer of the image that goes there; on every node, a fixed multicast transfer of it not begun
        (`avoid-redundant-transfers`, as greedy's piggybacking: a multicast reaches one more node for free)."""
        prep, image = self.prep, lease.req.software.id
        out: dict[int, int] = {}
        everywhere = None
        if prep.caches is not None:
            out.update((n, now) for n in prep.caches.holding(image) if n in self.sched.table.caps)
        if prep.opts.avoid_redundant:
            for t in prep.open.get(image, ()):
                if t.end <= now or t.state != "scheduled" or self._own(t, now):
                    continue
                if prep.opts.mechanism == "multicast":
                    everywhere = t.end if everywhere is None else min(everywhere, t.end)
                    continue
                for n in {p for _, _, p in t.feeds}:
                    if t.end < out.get(n, t.end + 1):
                        out[n] = t.end
        return out, everywhere

    def near(self, lease: Lease, now: int, ranked: list[int] = ()) -> set[int]:
        """Nodes the neighbourhood adds for a fresh lease: those whose cache holds its image, the first to free up
        (in the order `ranked`, else by node id): a cached copy on a node busy for long saves no transfer soon."""
        if not self.prep.needs(lease) or lease.is_suspended() or self.prep.caches is None:
            return set()
        order = {n: i for i, n in enumerate(ranked)}
        held = self.prep.caches.holding(lease.req.software.id)
        return set(sorted(held, key=lambda n: (order.get(n, len(order)), n))[:CACHED_NODES])

    def decides(self, lease: Lease) -> bool:
        """Whether a round's later booking of a lease is about its disk image, and so committed rather than left
        queued (`CpsatRound._committed`): a fresh lease whose image must come. Left queued, it would be the greedy
        pass's again, which books its image a transfer of its own in the link's first free stretch, usually at once
        and so before a round sees it again: a transfer the plan spared (by a cache, or a ride on another lease's)
        or placed later. Committed, its own transfer is booked just in time (`book`), so that a later round may
        still move it, and the lease with it, until the transfer begins."""
        return self.prep.needs(lease) and not lease.is_suspended()

    def link(self, now: int, movable: list[Lease], allowed: dict[int, tuple[int, ...]] | None = None) -> Link:
        """The link as the round model sees it (cpsat.transfers); `allowed`: per lease, the only nodes it may start
        on (its neighbourhood), where alone its cached copies matter."""
        prep, leases = self.prep, {}
        for lease in movable:
            if lease.is_suspended() or not prep.needs(lease):
                continue
            booked = next((t.start for t in prep.waiting.get(lease.id, ()) if self._own(t, now)), None)
            booked = self.hinted.get(lease.id, booked)
            ready, everywhere = self.ready(lease, now)
            if allowed and allowed.get(lease.id):
                near = set(allowed[lease.id])
                ready = {n: t for n, t in ready.items() if n in near}
            leases[lease.id] = LeaseImage(prep.duration(lease, 1), lease.req.software.id, ready, everywhere, booked,
                                          lease.numnodes)
        multicast = prep.opts.mechanism == "multicast"
        return Link(not multicast, tuple(self.busy(now)), leases, share=multicast and prep.opts.avoid_redundant,
                    price=self.price)

    def transfer_start(self, lease: Lease) -> int | None:
        """When a booked lease's own transfer begins (None: it has none)."""
        return next((t.start for t in self.prep.waiting.get(lease.id, ()) if t.lease is lease), None)

    # -- the hint's completion ----------------------------------------------------------------------------------
    def start_hint(self, now: int, rebooked: set[int] = frozenset()) -> None:
        """The completion starts over: the fixed transfers, and the own transfers of the movable leases it does not
        book again, are on its link."""
        kept = [(max(now, t.start), t.end) for _, _, t in self.prep.link
                if t.end > now and self._own(t, now) and t.feeds[0][0].id not in rebooked]
        self.scratch, self.hinted, self.sent = sorted(self.busy(now) + kept), {}, {}
        weights, run = self.sched.opts.weights, self.sched.vm.estimates.booked_run
        self.price = link_price([wait_weight(now, lease.req, weights, run(lease)) for lease in
                                 (self.sched.leases.get(i) for i in sorted(self.exclude))
                                 if lease is not None and self.prep.needs(lease) and not lease.is_suspended()])

    def earliest(self, lease: Lease, now: int) -> dict[int, int] | None:
        """Per node, the earliest a fresh lease's VM may start there: its image from a cache or a fixed transfer,
        or by a transfer of its own in the link's first free stretch (the fixed transfers and the completion's)."""
        if not self.prep.needs(lease) or lease.is_suspended():
            return None
        length = self.prep.duration(lease, lease.numnodes)
        own = _first_gap(self.scratch or self.busy(now), now, length) + length
        ready, everywhere = self._arrivals(lease, now)
        if everywhere is not None:
            own = min(own, everywhere)
        times = dict.fromkeys(self.sched.table.nodes, own)
        for n, at in ready.items():
            if n in times:
                times[n] = min(own, at)
        return times

    def _arrivals(self, lease: Lease, now: int) -> tuple[dict[int, int], int | None]:
        """`ready`, with a transfer of the image the completion booked as one more multicast to ride on."""
        ready, everywhere = self.ready(lease, now)
        shared = self.sent.get(lease.req.software.id)   # a transfer the completion booked for the same image
        if shared is not None and self.prep.opts.mechanism == "multicast" and self.prep.opts.avoid_redundant:
            everywhere = shared if everywhere is None else min(everywhere, shared)
        return ready, everywhere

    def asap(self, lease: Lease, now: int) -> RR:
        """The completion's booking of a fresh lease (not added to the slot table): its earliest whole fit, unless a
        fit on the nodes its image reaches without a transfer of its own (a cache, a booked transfer) begins no
        later than the transfer it spares is worth to it (`patience`). Of two fits that begin together, the one that
        sends no image. A tail the search holds where the hint books it (cpsat.window) is booked so too."""
        vm = self.sched.vm
        times = self.earliest(lease, now)
        found = vm.asap(lease, now, times, True, False, None, strict=True)
        if times is None:
            return found
        ready, everywhere = self._arrivals(lease, now)
        own = self._own_nodes(found, ready, everywhere)
        free = {n: at for n in times if (at := min(ready.get(n, INF), INF if everywhere is None else everywhere))
                < INF}
        if not own or not self._room(lease, free):
            return found
        copies = len(own) if self.prep.opts.mechanism == "unicast" else 1
        try:
            spared = vm.asap(lease, now, free, True, False, None, strict=True)
        except NotSchedulable:
            return found
        return spared if spared.begin() - found.begin() <= self.patience(lease, now, copies) else found

    def patience(self, lease: Lease, now: int, copies: int) -> float:
        """How much later a fresh lease may start to spare `copies` copies of its image: the seconds of its own
        waiting that cost the round's objective what the copies' link seconds do (each at the round's `price`)."""
        weights = self.sched.opts.weights
        weight = wait_weight(now, lease.req, weights, self.sched.vm.estimates.booked_run(lease))
        return self.price * weights.transfer * self.prep.duration(lease, copies) / (weights.wait * weight)

    def _room(self, lease: Lease, nodes) -> bool:
        """Whether `nodes`, empty, hold every VM of the lease (else no fit on them alone is worth looking for)."""
        caps, need = self.sched.table.caps, set(lease.demands.values())
        return sum(min(_count(caps[n], d) for d in need) for n in nodes if n in caps) >= lease.numnodes

    @staticmethod
    def _own_nodes(vmrr: RR, ready: dict[int, int], everywhere: int | None) -> list[int]:
        """The nodes of a booking that its image reaches by its start only by a transfer of the lease's own."""
        late = vmrr.start + 1
        return [n for n in vmrr.mapping.values()
                if min(ready.get(n, late), everywhere if everywhere is not None else late) > vmrr.start]

    def hint_booked(self, lease: Lease, vmrr: RR, now: int) -> None:
        """The completion booked `vmrr`: its own transfer, if it needs one, takes the link's first free stretch."""
        if not self.prep.needs(lease) or lease.is_suspended():
            return
        ready, everywhere = self._arrivals(lease, now)
        image = lease.req.software.id
        own = self._own_nodes(vmrr, ready, everywhere)
        if not own:
            return
        length = self.prep.duration(lease, len(own) if self.prep.opts.mechanism == "unicast" else 1)
        at = _first_gap(self.scratch, now, length)
        self.hinted[lease.id] = at
        self.sent[image] = min(self.sent.get(image, at + length), at + length)
        self.scratch.append((at, at + length))
        self.scratch.sort()

    # -- committing -----------------------------------------------------------------------------------------
    def begin_commit(self, plan: dict | None = None, moves: list[Lease] = ()) -> None:
        """A commit starts: what it takes out is remembered until it ends. `plan` and `moves`: the round's plan of
        the leases it books again, whose own transfers the model placed (`_reserved`) and whose riders need a
        transfer of their image by their start (`_riders`)."""
        self._saved, self._feeds, self._reserved, self._riders = {}, {}, {}, {}
        for lease in moves:
            p = (plan or {}).get(lease.id)
            if p is None or p.start is None or not self.prep.needs(lease) or lease.is_suspended():
                continue
            image = lease.req.software.id
            if p.transfer_start is not None:
                copies = 1 if self.prep.opts.mechanism == "multicast" else lease.numnodes
                self._reserved[lease.id] = (image, p.transfer_start,
                                            p.transfer_start + self.prep.duration(lease, copies))
            else:
                self._riders.setdefault(image, []).append(p.start)

    def withdraw(self, lease: Lease) -> None:
        """The lease's booking is taken out: its transfers and cache pins are given back, remembered for `restore`."""
        prep = self.prep
        for t in prep.waiting.get(lease.id, ()):
            self._feeds.setdefault(t.tid, (t, list(t.feeds), t.state))
        if lease.id not in self._saved:
            self._saved[lease.id] = (list(prep.waiting.get(lease.id, ())), list(prep.pinned.get(lease.id, ())),
                                     prep.sources.get(lease.id))
        prep.release(lease)

    def restore(self, lease: Lease) -> None:
        """Undo `withdraw` once the lease's booking is back (`last_vmrr`)."""
        saved = self._saved.pop(lease.id, None)
        if saved is None:
            return
        prep = self.prep
        waiting, pinned, sources = saved
        for t in waiting:
            _, feeds, state = self._feeds[t.tid]
            t.feeds = list(feeds)
            if t.state == "cancelled":
                prep.reinstate(t, state)
        if waiting:
            prep.waiting[lease.id] = list(waiting)
        end = lease.last_vmrr().end if lease.last_vmrr() is not None else None
        for pnode, image, vnode in pinned:
            prep.caches.nodes[pnode].pin(image, (lease.id, vnode), end)
        if pinned:
            prep.pinned[lease.id] = list(pinned)
        if sources is not None:
            prep.sources[lease.id] = sources

    def book(self, lease: Lease, vmrr: RR, transfer_start: int | None, now: int) -> bool:
        """Book how a fresh best-effort booking `vmrr` (not yet on the slot table) gets its image: cache, a ride, or
        its own transfer ending by its start; False (nothing booked) where the link has no room for it."""
        prep = self.prep
        if not prep.needs(lease) or lease.is_suspended():
            return True
        plan, image, start = ImagePlan(lease), lease.req.software.id, vmrr.start
        for vnode, pnode in sorted(vmrr.mapping.items()):
            if prep.caches is not None and prep.caches.nodes[pnode].has(image):
                plan.hits[vnode] = pnode
                continue
            ride = None
            if prep.opts.avoid_redundant:
                ride = next((t for t in prep.open.get(image, ()) if t.state == "scheduled" and now < t.end <= start
                             and (prep.opts.mechanism == "multicast" or pnode in {p for _, _, p in t.feeds})), None)
            if ride is not None:
                plan.rides[vnode] = (pnode, ride)
            else:
                plan.own[vnode] = pnode
        mine = self._reserved.pop(lease.id, None)
        if plan.own:
            length = prep.duration(lease, len(plan.own))
            busy = sorted([(max(now, t.start), t.end) for _, _, t in prep.link if t.end > now]
                          + [(b, e) for _, b, e in self._reserved.values()])
            # just in time: the latest free stretch that ends by its start and by the start of a lease of this
            # round's plan that rides on it, leaving the transfers the model placed for the others where they are;
            # a transfer not begun keeps the lease movable, and one that is not sent early is not lost when an AR
            # takes the booking
            deadline = min([start] + [t for t in self._riders.get(image, ()) if mine is None or t >= mine[2]])
            at = _last_gap(busy, deadline, length, now)
            if at is None:
                at = transfer_start
                if at is None or at < now or at + length > start or not _free(busy, at, length):
                    at = _first_gap(busy, now, length)
            if at + length > start:
                return False
            plan.start, plan.end = at, at + length
        prep.commit(plan, vmrr)
        return True

    def book_new(self, lease: Lease, vmrr: RR, now: int) -> bool:
        """An AR or immediate lease the round model admitted: its image as the greedy scheduler books an AR's (cache,
        or the latest free stretch of the link that ends by its start); False where it cannot arrive in time."""
        prep = self.prep
        if not prep.needs(lease):
            return True
        if lease.kind is LeaseKind.AR:
            try:
                plan = prep.plan(lease, vmrr, None, now)
            except NotSchedulable:
                return False
            prep.commit(plan, vmrr)
            return True
        return self.book(lease, vmrr, None, now)


def _count(cap: tuple, need: tuple) -> int:
    """How many VMs asking `need` an empty node of capacity `cap` holds."""
    return min((c // d for c, d in zip(cap, need) if d > 0), default=1 << 30)


def _unbegun(t, now: int) -> bool:
    """Whether a transfer has sent nothing yet: booked, or starting at this very instant (the step starts what
    begins now before the round looks, and a transfer the round moves then has cost the link nothing)."""
    return t.state == "scheduled" or (t.state == "active" and t.start == now)
