"""The earliest fit of the hint's completion from the nodes' free intervals, where each node holds at most one of the
lease's VMs: the same booking as the VM scheduler's search (`VMScheduler.asap`, strict: the whole run), found
without walking its candidate starts and scoring every busy node at each (models/cpsat-round.md, *Speed at scale*).

Each node's usage leaves room for one VM over some maximal intervals (`room_intervals`); its last one never ends.
A lease of k VMs that each need w seconds (its run and shutdown) starts at the first instant from now at which k
nodes have room over the next w seconds: now, or where some node's room begins (an end of a reservation: a start
the VM scheduler tries). Its VMs go to the first k of those nodes in the host policy's order (-score, node order).
A node idle from the start of its last interval on scores the most a node can (no lease there, nothing changes),
so among such nodes only the first k in node order can be taken; the others are scored one by one."""
from __future__ import annotations

from bisect import bisect_left, insort
from heapq import heappop, heappush
from types import SimpleNamespace

from optlease.formats.timefmt import MAX_SECONDS
from optlease.scheduling.mapper import vms_of
from optlease.scheduling.policies import GreedyHosts
from optlease.scheduling.records import SHUTDOWN, AlikeVMs, RR, Lease, NotSchedulable
from optlease.scheduling.roomindex import room_intervals
from optlease.scheduling.slotqueries import SlotQueries
from optlease.scheduling.slottable import INF, fits, vadd, vsub
from optlease.scheduling.vmsched import VMScheduler

# (a node's room for one VM: (begin, end); `begin` never before now)
Room = tuple[float, float]


class OneEachFits:
    """The earliest whole fits of leases whose VMs each take a node of their own, on one slot table from `now` on
    (built after the completion has lifted its bookings; told of every node a booking changes: `changed`)."""

    def __init__(self, sched, now: int) -> None:
        self.sched, self.table, self.now = sched, sched.table, now
        self.rooms: dict[tuple, _Rooms] = {}   # one VM's demand -> every node's room for it
        # the slot table with the bookings made here, which go into it only when the VM scheduler searches it
        self.view = _Overlay(sched.table)

    @staticmethod
    def applies(sched, images) -> bool:
        """Whether the site allows it at all: nodes all alike and in planning, the greedy host policy, no images."""
        table = sched.table
        return images is None and table.one_cap is not None and not table.down \
            and type(sched.policies.hosts) is GreedyHosts

    def shape_of(self, lease: Lease) -> tuple | None:
        """The one demand of the lease's VMs where a node holds exactly one of them (None: this search does not
        apply: a lease resuming, VMs that ask differently, nodes that hold two)."""
        if lease.is_suspended():
            return None
        shape = vms_of(lease)[1]
        cap = self.table.one_cap
        if shape is None or not fits(shape, cap) or fits(vadd(shape, shape), cap):
            return None
        return shape

    def book(self, lease: Lease) -> RR | None:
        """The lease's booking, as `VMScheduler.asap(lease, now, None, True, False, None, strict=True)` would give
        it with every booking made so far in the slot table, kept here (None: this search does not apply, and the
        caller adds what is kept here to the table, `flush`, before it asks the VM scheduler)."""
        shape = self.shape_of(lease)
        vmrr = self.asap(lease, shape) if shape is not None else None
        if vmrr is not None:
            for rr in (*vmrr.pre, vmrr, *vmrr.post):
                self.view.add(rr)
            self.changed(vmrr.nodes())
        return vmrr

    def flush(self) -> list[RR]:
        """Add the bookings kept here to the slot table, in the order they were made: the reservations added."""
        return self.view.flush()

    def asap(self, lease: Lease, shape: tuple) -> RR | None:
        """The lease's booking (not kept), as `VMScheduler.asap(lease, now, None, True, False, None, strict=True)`
        gives it (None: a node idle for good does not score the most, and that search is asked instead)."""
        vm, now = self.sched.vm, self.now
        remaining, shutdown, duration, _, _, window = vm.shape(lease, False, True)
        rooms = self.rooms.get(shape)
        if rooms is None:
            rooms = self.rooms[shape] = _Rooms(self.view, vsub(self.table.one_cap, shape), now)
        k = len(lease.demands)
        t = rooms.earliest(k, window)
        if t > now + MAX_SECONDS:   # (the VM scheduler's horizon)
            raise NotSchedulable("Could not find enough resources for this request")
        nodes = self._first(rooms, lease, t, window, k)
        if nodes is None:
            return None
        vnodes = lease.demands.keys() if type(lease.demands) is AlikeVMs else sorted(lease.demands)
        vmrr = vm.build(lease, t, t + duration + shutdown, dict(zip(vnodes, nodes)), False, remaining, shutdown)
        if t != now:
            vmrr.backfill = True   # a start found among later ends (VMScheduler.asap)
            # (its note of the walk, read from the table with the bookings kept here)
            VMScheduler._note_walk(SimpleNamespace(policies=vm.policies, table=self.view), lease, vmrr, t)
        return vmrr

    def _first(self, rooms: "_Rooms", lease: Lease, t: int, window: int, k: int) -> list[int] | None:
        """The first k nodes with room over [t, t + window) in the host policy's order: (-score, node order); of
        the nodes idle for good by t, the first k in node order (None: one of them does not score the most)."""
        table, score, rank = self.view, self.sched.policies.hosts.score, self.table.rank
        keyed = [(-score(n, t, lease, table), rank[n], n) for n in rooms.idle_from(t, k)]
        if any(key != -1.0 for key, _, _ in keyed):
            return None
        keyed += [(-score(n, t, lease, table), rank[n], n) for n in rooms.holding(t, window)]
        keyed.sort()
        return [n for *_, n in keyed[:k]]

    def changed(self, nodes) -> None:
        """The usage of these nodes changed (a booking added): their rooms are read again."""
        for rooms in self.rooms.values():
            for n in set(nodes):
                rooms.refile(n)


class _Overlay:
    """The slot table as the host policy and the rooms read it (each node's profile and reservations), with the
    reservations `add` kept here (usage added to copies of their nodes' profiles) until `flush` adds them to it."""

    def __init__(self, table) -> None:
        self.table, self.nodes, self.rank = table, table.nodes, table.rank
        self.own_profiles: dict = {}
        self.own_rrs: dict = {}
        self.pending: list[RR] = []
        self.profiles = _Either(self.own_profiles, table.profiles)
        self.by_node = _Either(self.own_rrs, table.by_node)

    count_leases_at = SlotQueries.count_leases_at

    def add(self, rr: RR) -> None:
        """As `SlotTable.add` changes a node's reservations and profile (a shutdown of no length is in neither)."""
        self.pending.append(rr)
        start, end, demand = rr.start, rr.end, rr.demand
        if start < end or rr.kind != SHUTDOWN:
            for n in demand:
                self.own_rrs[n] = self.by_node[n].union((rr,))
        if start < end:
            for n, d in demand.items():
                prof = self.own_profiles.get(n)
                if prof is None:
                    prof = self.own_profiles[n] = self.table.profiles[n].copy()
                prof.add(start, end, d)

    def flush(self) -> list[RR]:
        added, self.pending = self.pending, []
        for rr in added:
            self.table.add(rr)
        self.own_profiles.clear()
        self.own_rrs.clear()
        return added


class _Either:
    """A node's own entry where it has one, else the slot table's."""

    __slots__ = ("own", "base")

    def __init__(self, own: dict, base) -> None:
        self.own, self.base = own, base

    def __getitem__(self, n: int):
        found = self.own.get(n)
        return self.base[n] if found is None else found


class _Rooms:
    """Every node's room for one VM (usage within `limit`), from `now` on: the nodes whose last room begins where
    their usage ends for good (idle from there, by (begin, node order)), and the other rooms (by length)."""

    def __init__(self, table, limit: tuple, now: int) -> None:
        self.table, self.limit, self.now = table, limit, now
        self.idle: list[tuple[float, int, int]] = []        # (begin, rank, node), sorted
        self.other: list[tuple[float, float, float, int]] = []   # (-length, begin, end, node), sorted
        self.of: dict[int, list] = {}   # node -> its entries, (True, idle entry) or (False, other entry)
        for n in table.nodes:
            self.of[n] = entries = self._entries(n)
            for idle, entry in entries:
                (self.idle if idle else self.other).append(entry)
        self.idle.sort()
        self.other.sort()

    def refile(self, n: int) -> None:
        for idle, entry in self.of.pop(n, ()):
            held = self.idle if idle else self.other
            del held[bisect_left(held, entry)]
        self.of[n] = entries = self._entries(n)
        for idle, entry in entries:
            insort(self.idle if idle else self.other, entry)

    def _entries(self, n: int) -> list[tuple[bool, tuple]]:
        """The node's rooms from now on: (True, (begin, rank, node)) where it is idle for good from `begin` on (no
        breakpoint after it, nothing in use), else (False, (-length, begin, end, node))."""
        prof, now = self.table.profiles[n], self.now
        entries = []
        for a, b in _rooms(prof, self.limit):
            if b <= now:
                continue
            a = max(a, now)
            if b == INF and (not prof.t or (prof.t[-1] <= a and prof.u[-1] == prof.zero)):
                entries.append((True, (a, self.table.rank[n], n)))
            else:
                entries.append((False, (-(b - a), a, b, n)))
        return entries

    def earliest(self, k: int, window: int) -> float:
        """The first instant from now at which k nodes have room over the next `window` seconds (INF: never)."""
        idle = self.idle
        bound = idle[k - 1][0] if len(idle) >= k else INF   # k nodes idle for good by then
        # rooms that begin before the bound and are long enough, and the idle ones before it: which k overlap first
        events = [(a, INF) for a, _, _ in idle[:k] if a < bound]
        for length, a, b, _ in self.other:
            if -length < window:
                break
            if a < bound:
                events.append((a, b - window))
        events.sort()
        open_ends: list[float] = []
        for a, last in events:
            heappush(open_ends, last)
            while open_ends[0] < a:
                heappop(open_ends)
            if len(open_ends) >= k:
                return a
        return bound

    def idle_from(self, t: float, k: int) -> list[int]:
        """The first k nodes in node order among those idle for good from t or before."""
        idle = self.idle
        out = [n for a, _, n in idle[:k] if a < t]
        at = bisect_left(idle, (t, -1, -1))
        out += [n for a, _, n in idle[at:at + k] if a == t]
        out.sort(key=self.table.rank.__getitem__)
        return out[:k]

    def holding(self, t: float, window: int) -> list[int]:
        """The other nodes with room over [t, t + window)."""
        out = []
        for length, a, b, n in self.other:
            if -length < window:
                break
            if a <= t and t + window <= b:
                out.append(n)
        return out


def _rooms(prof, limit: tuple) -> list[tuple[float, float]]:
    """`roomindex.room_intervals` (the maximal intervals where usage stays within `limit`), with the comparisons
    written out for two resource types, most sites'."""
    if len(limit) != 2:
        return room_intervals(prof, limit)
    l0, l1 = limit
    zero = prof.zero
    out = []
    begin = -INF if zero[0] <= l0 and zero[1] <= l1 else None
    for x, (c0, c1) in zip(prof.t, prof.u):
        if c0 <= l0 and c1 <= l1:
            if begin is None:
                begin = x
        elif begin is not None:
            out.append((begin, x))
            begin = None
    if begin is not None:
        out.append((begin, INF))
    return out
