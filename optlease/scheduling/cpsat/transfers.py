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
and the optional ones. Each second of a lease's own transfer costs `Weights.transfer`.

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
    `ready` per node, when it is there without a transfer of the lease's own (cache: now; a booked transfer of the
    same image: its end); `booked` the start of the lease's own transfer as booked now, or as the hint books it."""

    copy: int
    ready: dict[int, int] = field(default_factory=dict)
    booked: int | None = None


@dataclass(frozen=True)
class Link:
    """The repository's link as the round sees it: transfers it may not move (`busy`, [start, end) from now on), the
    mechanism, and the image of each lease that may start fresh."""

    unicast: bool
    busy: tuple[tuple[int, int], ...] = ()
    leases: dict[int, LeaseImage] = field(default_factory=dict)

    def nodes(self) -> set[int]:
        """Nodes some lease's image reaches without its own transfer: no pool or symmetry class may hide them."""
        return {n for img in self.leases.values() for n in img.ready}


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
    """Each fed lease's own transfer, ending by its start, for the VMs whose nodes get the image no other way; the
    link carries one transfer at a time. Objective: the link seconds of the leases' own transfers."""
    data, m = rm.data, rm.model
    if data.link is None:
        return {}
    ways = _placements(rm)
    intervals = [m.new_fixed_size_interval_var(max(data.now, s), e - max(data.now, s), f"link[busy={i}]")
                 for i, (s, e) in enumerate(data.link.busy) if e > max(data.now, s)]
    seconds, hints = [], _HintedLink(rm)
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
        else:
            copies, size = need, img.copy
        end = begin + size
        if data.link.unicast:   # interval fields are affine: the end of a transfer of a varying size is a variable
            end = m.new_int_var(data.now, last + img.copy * job.numvms, f"transfer_end[{name}]")
            m.add(end == begin + size)
            rm.derive(end, lambda v, job=job, img=img: hints.start(v, job) + img.copy * hints.copies(v, job))
        m.add(end <= start).only_enforce_if(need)
        intervals.append(m.new_optional_interval_var(begin, size, end, need, f"transfer[{name}]"))
        rm.derive(need, lambda v, job=job: int(hints.copies(v, job) > 0))
        rm.derive(begin, lambda v, job=job: hints.start(v, job))
        rm.transfer_starts[job.id] = (begin, need)
        missed = []   # the VM counts that need the lease's own copy (unicast)
        for node, lit, count in ways.get(job.id, ()):
            at = img.ready.get(node) if node is not None else None
            if at is None:   # no other way: the lease's own transfer feeds it
                m.add_implication(lit, need)
                missed.append(count)
            elif at > job.earliest:   # a booked transfer of the image reaches it at `at`: the lease waits for it,
                rides = m.new_bool_var(f"rides[{name},node={node}]")   # or its own transfer feeds the node too
                m.add(start >= at).only_enforce_if(rides)
                m.add_bool_or([lit.Not(), need, rides])
                rm.derive(rides, lambda v, lit=lit, at=at, start=start: int(bool(v(lit)) and v(start) >= at))
                missed.append(count - job.numvms * rides)
        if data.link.unicast and missed:
            m.add(copies >= sum(missed))
        seconds.append(img.copy * copies)
    if len(intervals) > 1:
        m.add_no_overlap(intervals)
    return {"transfer": sum(seconds)}


def own_copies(job: Job, img: LeaseImage, start: int, nodes: tuple[int, ...], unicast: bool) -> int:
    """How many copies a placed lease's own transfer sends: the VMs whose node gets the image no other way by
    `start` (at most one under multicast)."""
    missed = sum(1 for n in nodes if img.ready.get(n) is None or img.ready[n] > start)
    return missed if unicast else min(1, missed)


def plan_seconds(data: RoundData, plan: Plan) -> int:
    """The link seconds of the fed leases' own transfers in any plan (objective.plan_terms)."""
    if data.link is None:
        return 0
    got, total = plan.by_id, 0
    for job in data.tails:
        img, p = fed(job, data), got.get(job.id)
        if img is not None and p is not None and p.outcome is Outcome.ACCEPTED and p.start is not None:
            total += img.copy * own_copies(job, img, p.start, p.nodes, data.link.unicast)
    return total


class _HintedLink:
    """The hint's transfers: each hinted lease's own transfer where it is booked (or where the hint's completion
    put it) when that ends by its start and the link is free there, else in the first free stretch from now, in
    the order of the leases' starts; computed once from the hinted decisions."""

    def __init__(self, rm: RoundModel) -> None:
        self.rm = rm
        self._starts: dict[int, int] | None = None
        self._copies: dict[int, int] = {}

    def copies(self, v, job: Job) -> int:
        self._place(v)
        return self._copies.get(job.id, 0)

    def start(self, v, job: Job) -> int:
        self._place(v)
        return self._starts.get(job.id, self.rm.data.now)

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
                need.append((start, job.id, img.copy * k, img.booked))
                self._copies[job.id] = k
        busy = sorted((max(data.now, s), e) for s, e in data.link.busy if e > data.now)
        starts = {}
        for start, lease, length, booked in sorted(need):
            at = booked if booked is not None and data.now <= booked and booked + length <= start \
                and _free(busy, booked, length) else _first_gap(busy, data.now, length)
            if at + length > start:
                at = max(data.now, start - length)   # no room: the solver repairs this hint
            starts[lease] = at
            busy.append((at, at + length))
            busy.sort()
        self._starts = starts


def _free(busy: list[tuple[int, int]], at: int, length: int) -> bool:
    return all(e <= at or s >= at + length for s, e in busy)


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

