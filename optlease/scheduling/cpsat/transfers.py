"""Disk-image transfers in the CP-SAT round (`lease-preparation: imagetransfer`, models/cpsat-round.md, *Image
transfers*): the repository's link as one resource over transfer intervals, image caches as transfers saved.

A best-effort lease that starts fresh needs its disk image on every node its VMs start on. A node has it without a
transfer of the lease's own when its cache holds the image (from now: the commit pins it there, so it stays) or, with
`avoid-redundant-transfers`, when a transfer of the same image already booked reaches it (a multicast reaches any
node, a unicast the nodes it goes to) by the lease's start. Every other VM's node is fed by the lease's own transfer,
an optional interval on the link that ends by the lease's start: one image's time under multicast (one transfer
feeds all its nodes, as greedy sends it), one per such VM under unicast. The link carries one transfer at a time
(Haizea's: a transfer takes the whole bandwidth), so the link's cumulative of capacity `bandwidth`, every transfer
asking all of it, is a no-overlap over the fixed transfers (ARs', those under way, those shared by several leases)
and the optional ones. Each second of a lease's own transfer costs `Weights.transfer`; a lease left queued pays the
transfer it will still need (`LeaseImage.deferred_copies`).

The caller (scheduling.round_images) states what the round may not change as `Link`; an AR keeps the transfer the
greedy pass booked for it. Solver-free at import, like objective.plan_terms which calls `plan_seconds`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from optlease.scheduling.cpsat.prepare import Job, Role, RoundData, always
from optlease.scheduling.snapshot import Outcome, Plan

if TYPE_CHECKING:
    from optlease.scheduling.cpsat.model import RoundModel


@dataclass(frozen=True)
class LeaseImage:
    """How one lease's image can reach the nodes: `copy` seconds per transfer of it (per VM under unicast);
    `ready` per node, when it is there without a transfer of the lease's own (cache: now; a booked unicast transfer of
    the same image: its end); `everywhere`, when a booked multicast transfer of it that the lease may ride on ends
    (it reaches any node); `booked` the start of the lease's own transfer as booked now, or as the hint books it."""

    copy: int
    image: str = ""
    ready: dict[int, int] = field(default_factory=dict)
    everywhere: int | None = None
    booked: int | None = None
    vms: int = 1

    def deferred_copies(self, unicast: bool) -> int:
        """The copies a lease left queued still needs once it starts, at the least: its image reaches no node
        without a transfer of its own, so every VM's (one under multicast), unless a cache or a booked transfer may
        feed it later (0: not counted). Deferring a lease does not spare its transfer; counting it keeps the
        objective from deferring a lease only to drop its transfer, a deferral that must start over every round."""
        if self.ready or self.everywhere is not None:
            return 0
        return self.vms if unicast else 1

    def at(self, node: int | None) -> int | None:
        """When the image is on `node` (None: a pooled node) without the lease's own transfer (None: never)."""
        if node is not None and node in self.ready:
            return self.ready[node] if self.everywhere is None else min(self.ready[node], self.everywhere)
        return self.everywhere


@dataclass(frozen=True)
class Link:
    """The repository's link as the round sees it: transfers it may not move (`busy`, [start, end) from now on), the
    mechanism, whether a lease may ride on another's transfer of the same image (`share`: multicast with
    `avoid-redundant-transfers`), and the image of each lease that may start fresh."""

    unicast: bool
    busy: tuple[tuple[int, int], ...] = ()
    leases: dict[int, LeaseImage] = field(default_factory=dict)
    share: bool = False
    price: int = 1   # the weight of a second of the link: that of the leases that need it (`link_price`)

    def seconds(self, now: int) -> int:
        """What the automatic look-ahead adds for the link: every fixed transfer, then every lease's own transfer
        of all its VMs, one after another."""
        busy = max((e for _, e in self.busy), default=now) - now
        return max(0, busy) + sum(img.copy * (img.vms if self.unicast else 1) for img in self.leases.values())

    def nodes(self) -> set[int]:
        """Nodes some lease's image reaches on its own without a transfer: no pool or symmetry class may hide them."""
        return {n for img in self.leases.values() for n in img.ready}


def link_price(weights: list[int]) -> int:
    """The weight of a second of the link: a transfer delays the leases that need the link after it, and the
    round's leases that need it are what those are like, so a second costs their mean weight in the wait level."""
    return max(1, sum(weights) // len(weights)) if weights else 1


def fed(job: Job, data: RoundData) -> LeaseImage | None:
    """The lease's image when the round must bring it (a best-effort first start it may place); else None."""
    link = data.link
    if link is None or job.role is not Role.START or job.origin or job.fixed_start is not None \
            or not job.best_effort:
        return None
    return link.leases.get(job.id)


def _placements(rm: RoundModel) -> dict[int, list]:
    """Per lease, each way a VM may start: (node or None for a pool, literal, VM count)."""
    out: dict[int, list] = {}
    for (lease, _, node), x in rm.vm_to_node.items():
        out.setdefault(lease, []).append((node, x, x))
    for (lease, node), (count, used) in rm.vms_on_node.items():
        out.setdefault(lease, []).append((node, used, count))
    for (lease, _, _), y in rm.vm_to_pool.items():
        out.setdefault(lease, []).append((None, y, y))
    for (lease, _), (count, used) in rm.vms_in_pool.items():
        out.setdefault(lease, []).append((None, used, count))
    return out


def add_transfers(rm: RoundModel) -> dict:
    """Each fed lease's own transfer, ending by its start, for the VMs whose nodes get the image no other way (under
    multicast with `avoid-redundant-transfers`, another fed lease's transfer of the image that ends by its start
    does too); the link carries one transfer at a time. Objective: the link seconds of the leases' own transfers."""
    data, m = rm.data, rm.model
    if data.link is None:
        return {}
    ways = _placements(rm)
    intervals = [m.new_fixed_size_interval_var(max(data.now, s), e - max(data.now, s), f"link[busy={i}]")
                 for i, (s, e) in enumerate(data.link.busy) if e > max(data.now, s)]
    seconds, hints, jobs = [], _HintedLink(rm), []
    for job in data.tails:
        img = fed(job, data)
        if img is None:
            continue
        name, start, present = f"lease={job.id}", rm.start[job.id], rm.present[job.id]
        last = data.horizon
        begin = m.new_int_var(data.now, last, f"transfer_start[{name}]")
        need = m.new_bool_var(f"transfers[{name}]")
        if not always(present):
            m.add_implication(need, present)
        if data.link.unicast:
            copies = m.new_int_var(0, job.numvms, f"copies[{name}]")
            m.add(copies >= 1).only_enforce_if(need)
            m.add(copies == 0).only_enforce_if(~need)
            size = img.copy * copies
            rm.derive(copies, lambda v, job=job: hints.copies(v, job))
            # interval fields are affine: the end of a transfer of a varying size is a variable
            end = m.new_int_var(data.now, last + img.copy * job.numvms, f"transfer_end[{name}]")
            m.add(end == begin + size)
            rm.derive(end, lambda v, job=job, img=img: hints.start(v, job) + img.copy * hints.copies(v, job))
        else:
            copies, size, end = need, img.copy, begin + img.copy
        m.add(end <= start).only_enforce_if(need)
        intervals.append(m.new_optional_interval_var(begin, size, end, need, f"transfer[{name}]"))
        rm.derive(need, lambda v, job=job: int(hints.copies(v, job) > 0))
        rm.derive(begin, lambda v, job=job: hints.start(v, job))
        rm.transfer_starts[job.id] = (begin, need)
        seconds.append(data.link.price * img.copy * copies)
        if not always(present):   # left queued, it still needs its transfer later
            seconds.append(data.link.price * img.copy * img.deferred_copies(data.link.unicast) * (1 - present))
        jobs.append((job, img, need, end, copies))
    share = _add_sharing(rm, jobs, hints) if data.link.share else {}
    for job, img, need, _, copies in jobs:
        start = rm.start[job.id]
        others = [need] + ([share[job.id]] if job.id in share else [])
        waits: dict[int, object] = {}   # per arrival time of a booked transfer: the lease starts after it
        missed = []   # the VM counts that need the lease's own copy (unicast)
        for node, lit, count in ways.get(job.id, ()):
            at = img.at(node)
            if at is None:   # no other way: the lease's own transfer (or one it shares) feeds it
                m.add_bool_or([lit.Not(), *others])
                missed.append(count)
            elif at > job.earliest:   # a booked transfer reaches it at `at`: the lease waits for it, or not
                if at not in waits:
                    waits[at] = m.new_bool_var(f"waits_for_transfer[lease={job.id},t={at}]")
                    m.add(start >= at).only_enforce_if(waits[at])
                    rm.derive(waits[at], lambda v, at=at, start=start: int(v(start) >= at))
                m.add_bool_or([lit.Not(), *others, waits[at]])
                missed.append(count - job.numvms * waits[at])
        if data.link.unicast and missed:
            m.add(copies >= sum(missed))
    if len(intervals) > 1:
        m.add_no_overlap(intervals)
    return {"transfer": sum(seconds)}


def _add_sharing(rm: RoundModel, jobs: list, hints: "_HintedLink") -> dict:
    """Multicast with `avoid-redundant-transfers`: a fed lease may ride on another fed lease's own transfer of the
    same image that ends by its start (as greedy adds a node to a transfer booked and not begun). Per lease, the
    literal that it rides on one."""
    m, by_image, out = rm.model, {}, {}
    for job, img, need, end, _ in jobs:
        by_image.setdefault(img.image, []).append((job, need, end))
    for group in by_image.values():
        if len(group) < 2:
            continue
        for job, _, _ in group:
            rides = []
            for other, need, end in group:
                if other.id == job.id:
                    continue
                r = m.new_bool_var(f"rides_on[lease={job.id},on={other.id}]")
                m.add_implication(r, need)
                m.add(end <= rm.start[job.id]).only_enforce_if(r)
                rm.derive(r, lambda v, job=job, other=other: int(hints.rides(v, job) == other.id))
                rides.append(r)
            shared = m.new_bool_var(f"shares_transfer[lease={job.id}]")
            m.add_bool_or([shared.Not(), *rides])
            rm.derive(shared, lambda v, job=job: int(hints.rides(v, job) is not None))
            out[job.id] = shared
    return out


def own_copies(job: Job, img: LeaseImage, start: int, nodes: tuple[int, ...], unicast: bool) -> int:
    """How many copies a placed lease's own transfer sends: the VMs whose node gets the image no other way by
    `start` (at most one under multicast)."""
    missed = 0
    for n in nodes:
        at = img.at(n)
        missed += at is None or at > start
    return missed if unicast else min(1, missed)


def plan_seconds(data: RoundData, plan: Plan) -> int:
    """The link seconds of the fed leases' own transfers in any plan (objective.plan_terms): under sharing, a lease
    rides on the transfer of a lease of the same image that starts no later (in the leases' start order)."""
    if data.link is None:
        return 0
    got, total, placed = plan.by_id, 0, []
    for job in data.tails:
        img, p = fed(job, data), got.get(job.id)
        if img is None:
            continue
        if p is not None and p.outcome is Outcome.ACCEPTED and p.start is not None:
            placed.append((p.start, job.id, job, img, p))
        else:   # left queued: the transfer it still needs (as add_transfers counts it)
            total += data.link.price * img.copy * img.deferred_copies(data.link.unicast)
    sent: set[str] = set()
    for start, _, job, img, p in sorted(placed, key=lambda x: (x[0], x[1])):
        k = own_copies(job, img, start, p.nodes, data.link.unicast)
        if k and data.link.share and img.image in sent:
            continue
        if k:
            sent.add(img.image)
        total += data.link.price * img.copy * k
    return total


class _HintedLink:
    """The hint's transfers: in the order of the hinted leases' starts, a lease whose image must come rides on an
    earlier lease's transfer of the same image where sharing is allowed and it has ended by then, else gets its
    own: where it is booked (or where the hint's completion put it) when that ends by its start and the link is free
    there, else in the first free stretch from now. Computed once from the hinted decisions."""

    def __init__(self, rm: RoundModel) -> None:
        self.rm = rm
        self._starts: dict[int, int] | None = None
        self._copies: dict[int, int] = {}
        self._rides: dict[int, int] = {}

    def copies(self, v, job: Job) -> int:
        self._place(v)
        return self._copies.get(job.id, 0)

    def start(self, v, job: Job) -> int:
        self._place(v)
        return self._starts.get(job.id, self.rm.data.now)

    def rides(self, v, job: Job) -> int | None:
        self._place(v)
        return self._rides.get(job.id)

    def _place(self, v) -> None:
        if self._starts is not None:
            return
        rm, data = self.rm, self.rm.data
        ways = _placements(rm)
        need = []
        for job in data.tails:
            img = fed(job, data)
            if img is None or not (always(rm.present[job.id]) or v(rm.present[job.id])):
                continue
            start = v(rm.start[job.id])
            nodes = [n for n, lit, count in ways.get(job.id, ()) for _ in range(v(count)) if v(lit)]
            k = own_copies(job, img, start, tuple(nodes), data.link.unicast)
            if k:
                need.append((start, job.id, k, img))
        busy = sorted((max(data.now, s), e) for s, e in data.link.busy if e > data.now)
        starts, sent = {}, {}   # image -> (end, lease) of the transfers placed
        for start, lease, k, img in sorted(need, key=lambda x: (x[0], x[1])):
            ride = sent.get(img.image)
            if data.link.share and ride is not None and ride[0] <= start:
                self._rides[lease] = ride[1]
                continue
            length, booked = img.copy * k, img.booked
            at = booked if booked is not None and data.now <= booked and booked + length <= start \
                and _free(busy, booked, length) else _first_gap(busy, data.now, length)
            if at + length > start:
                at = max(data.now, start - length)   # no room: the solver repairs this hint
            starts[lease] = at
            self._copies[lease] = k
            if img.image not in sent or sent[img.image][0] > at + length:
                sent[img.image] = (at + length, lease)
            busy.append((at, at + length))
            busy.sort()
        self._starts = starts


def _free(busy: list[tuple[int, int]], at: int, length: int) -> bool:
    return all(e <= at or s >= at + length for s, e in busy)


def _last_gap(busy: list[tuple[int, int]], deadline: int, length: int, now: int) -> int | None:
    """The latest start of a stretch `length` long that ends by `deadline`, starts at `now` or later and that no
    interval of `busy` overlaps (None: there is none). A latest stretch ends at the deadline or where an interval
    begins."""
    for end in sorted({deadline, *(s for s, _ in busy if s < deadline)}, reverse=True):
        if end - length < now:
            return None
        if _free(busy, end - length, length):
            return end - length
    return None


def _first_gap(busy: list[tuple[int, int]], t: int, length: int) -> int:
    """The earliest start >= t of a stretch `length` long that no interval of `busy` (sorted by start) overlaps."""
    for s, e in busy:
        if e <= t:
            continue
        if s >= t + length:
            break
        t = max(t, e)
    return t


def decode_transfers(rm: RoundModel, value, plan: Plan) -> Plan:
    """The solution's own-transfer starts in the plan (`LeasePlan.transfer_start`), for the commit."""
    data = rm.data
    if data.link is None:
        return plan
    starts = rm.transfer_starts
    leases = []
    for p in plan.leases:
        got = starts.get(p.lease_id)
        if got is not None and p.outcome is Outcome.ACCEPTED and p.start is not None and value(got[1]):
            p = replace(p, transfer_start=int(value(got[0])))
        leases.append(p)
    return replace(plan, leases=tuple(leases))

