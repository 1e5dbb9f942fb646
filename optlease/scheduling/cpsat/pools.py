"""Node pools: the nodes of a round whose identity no decision can tell apart, stated as one cumulative over their
VM slots instead of one per node (models/cpsat-round.md, *Node pools*).

A node joins a pool when every VM that may go there asks for one and the same demand `D`, the node holds `k` such
VMs at once, and all that occupies it is *fixed and started*: running leases that cannot be suspended, each holding
its share from now until it ends. No memory image is on it (no resume, suspension or migration refers to it), no
earlier round planned a VM there (stability counts nodes), and no reservation that has not begun holds it. Nodes of
one capacity that every lease offers alike (the same VMs may go there) form one pool.

Why it is exact. A node of `k` slots with VMs of one demand is `k` unit machines, and what holds it from now on is a
staircase of slots that free up at the ends of its running leases. Unit intervals whose count never exceeds the free
slots can always be laid on the slots in start order: a slot free at a start stays free until it is given to
someone (nothing that has not begun holds a pooled node), so any free slot will do (interval graphs are perfect).
The cumulative over the pool's slots therefore states exactly the plans the per-node cumulatives state, and
`assign` lays each solution on nodes.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from optlease.scheduling.cpsat.prepare import Job, Role, RoundData


@dataclass(frozen=True)
class Pool:
    """Nodes of one capacity offered alike; `slots` VMs of `demand` fit each at once; `blocks` per node the fixed
    holds as (end, slots held until then), ends increasing."""

    index: int
    nodes: tuple[int, ...]
    demand: dict[str, int]
    slots: int
    blocks: dict[int, tuple[tuple[int, int], ...]]

    @property
    def capacity(self) -> int:
        return self.slots * len(self.nodes)


def _pinned(job: Job) -> bool:
    """A reservation the round may not move: its start is fixed and each VM has its one planned node."""
    return job.fixed_start is not None and not job.optional and bool(job.planned_nodes) \
        and all(len(c) == 1 for c in job.candidates)


def _slots(capacity: dict[str, int], demand: dict[str, int], held: dict[str, int]) -> int:
    """How many VMs of `demand` fit in what `held` leaves of `capacity`."""
    fit = [(capacity.get(r, 0) - held.get(r, 0)) // d for r, d in demand.items() if d > 0]
    return max(0, min(fit)) if fit else 0


def round_pools(data: RoundData) -> tuple[Pool, ...]:
    """The round's pools, found once per round data (the window and the model both ask; a window's data that
    holding changed nothing the pools read carries its round's: `pass_on`)."""
    found = data.__dict__.get("pools")
    if found is None:
        found = data.__dict__["pools"] = find_pools(data, local_exclusion=not data.exclusion_global)
    return found


def pass_on(source: RoundData, to: RoundData) -> None:
    """`to` has the pools of `source` (the same pools: nothing they read differs)."""
    to.__dict__["pools"] = round_pools(source)


def find_pools(data: RoundData, local_exclusion: bool) -> tuple[Pool, ...]:
    """The round's pools (see the module); empty where no node qualifies."""
    tails = [j for j in data.jobs if j.has_tail and not _pinned(j)]
    demand = _one_demand(tails)
    if demand is None:
        return ()
    # nodes a decision refers to by name: images (resumes, suspensions), planned VMs, reservations not begun
    named: set[int] = set()
    for j in data.jobs:
        if j.has_tail:
            named.update(j.origin)
        named.update(j.planned_nodes)
        if j.role is Role.START and _pinned(j):
            named.update(n for c in j.candidates for n in c)
    if data.link is not None:   # where an image is cached or a booked transfer goes (cpsat.transfers)
        named.update(data.link.nodes())
    # who may go where, by candidate set (the leases of a round share a few): a resume with its own per-node
    # exclusion cannot share a pooled node's name-free slots, unless the node holds one VM at a time (its
    # capacity then keeps resumes apart, each within its VM's run: on Blue a VM fills a node)
    # (lists many leases share are one tuple: gathered by identity first, then by value once per tuple)
    by_tuple: dict[int, tuple[int, ...]] = {}
    resumed: set[tuple[int, ...]] = set()
    for j in tails:
        for nodes in j.candidates:
            by_tuple.setdefault(id(nodes), nodes)
            if local_exclusion and j.resume > 0:
                resumed.add(nodes)
    blocked: set[int] = set()
    if resumed:
        shared = set().union(*resumed)
        blocked = {n for n in shared if _slots(data.capacity[n], demand, {}) > 1}
    sets = [frozenset(nodes) for nodes in dict.fromkeys(by_tuple.values())]
    offered_anywhere = frozenset().union(*sets) if sets else frozenset()
    # per node its fixed holds: the one (end, demand) of most nodes kept in two dicts, a list only where there are
    # more (no objects per node for the collector)
    end_of: dict[int, int] = {}
    demand_of: dict[int, dict[str, int]] = {}
    more: dict[int, list[tuple[int, dict[str, int]]]] = {}
    for j in data.jobs:
        if j.role is Role.FIXED and j.remaining + j.shutdown > 0:
            end = data.now + j.remaining + j.shutdown
            for vm, n in enumerate(j.origin):
                if n in more:
                    more[n].append((end, j.demand[vm]))
                elif n in end_of:
                    more[n] = [(end_of.pop(n), demand_of.pop(n)), (end, j.demand[vm])]
                else:
                    end_of[n], demand_of[n] = end, j.demand[vm]
    # nodes of one capacity, split until every candidate set holds all of a group or none of it
    groups: dict[tuple, set[int]] = {}
    fits: dict[tuple, bool] = {}   # per capacity (a site has a few): whether it holds one VM
    keyed: dict[int, tuple] = {}   # per capacity dict (nodes of one capacity share one: cpsat.prepare), its key
    for n in offered_anywhere - named - blocked:
        cap = data.capacity[n]
        key = keyed.get(id(cap))
        if key is None:
            key = keyed[id(cap)] = tuple(sorted(cap.items()))
        if key not in fits:
            fits[key] = _slots(cap, demand, {}) >= 1
        if fits[key]:
            groups.setdefault(key, set()).add(n)
    parts = [(cap, nodes) for cap, nodes in groups.items()]
    for nodes_set in sets:
        split = []
        for cap, nodes in parts:
            inside, outside = nodes & nodes_set, nodes - nodes_set
            split.extend((cap, part) for part in (inside, outside) if part)
        parts = split
    pools = []
    for cap_items, nodes in sorted(parts, key=lambda part: min(part[1])):
        cap = dict(cap_items)
        slots = _slots(cap, demand, {})
        ordered = tuple(sorted(nodes))
        # nodes whose fixed holds are alike (most often one running lease of one demand) share one staircase: keyed
        # by end and demand dict (the round's demands are shared dicts, alive all along), equal contents of other
        # dicts given equal staircases of their own
        seen: dict[tuple, tuple] = {}
        blocks = {}
        for n in ordered:
            if n in end_of:
                key = (end_of[n], id(demand_of[n]))
                stairs = seen.get(key)
                if stairs is None:
                    stairs = seen[key] = _staircase(cap, demand, slots, [(end_of[n], demand_of[n])])
            elif n in more:
                stairs = _staircase(cap, demand, slots, more[n])
            else:
                stairs = seen.get(())
                if stairs is None:
                    stairs = seen[()] = _staircase(cap, demand, slots, [])
            blocks[n] = stairs
        pools.append(Pool(len(pools), ordered, demand, slots, blocks))
    return tuple(pools)


def _one_demand(tails: list[Job]) -> dict[str, int] | None:
    """The one VM demand every tail asks, or None (none, or two). A lease's VMs often share one demand dict, and
    leases of one shape share theirs (formats.lwf): each dict is read once, and the search stops at a second demand."""
    seen: set[int] = set()
    first = None
    for j in tails:
        for vm in j.demand:
            if id(vm) in seen:
                continue
            seen.add(id(vm))
            key = tuple(sorted(vm.items()))
            if first is None:
                first = key
            elif key != first:
                return None
    return dict(first) if first is not None else None


def _staircase(cap: dict[str, int], demand: dict[str, int], slots: int,
               holds: list[tuple[int, dict[str, int]]]) -> tuple[tuple[int, int], ...]:
    """A node's fixed holds as slots held until each end: (end, slots held from now until then), ends increasing."""
    out = []
    for end in sorted({e for e, _ in holds}):
        held: dict[str, int] = {}
        for e, d in holds:
            if e >= end:
                for r, v in d.items():
                    held[r] = held.get(r, 0) + v
        out.append((end, slots - _slots(cap, demand, held)))
    return tuple((end, used) for end, used in out if used > 0)


def assign(pool: Pool, now: int, tails: list[tuple[int, int, int, object]]) -> dict[object, list[int]]:
    """Lay the pool's tails (start, end, VM count, key) on its nodes in start order; per key, its nodes (one per
    VM). Each slot is free from when its node's fixed holds leave it; any slot free at a start will do (module), so
    each tail takes the slots free longest (a heap by the time each slot is free from, then node)."""
    free_from: list[tuple[int, int]] = []   # (time, node) per slot
    for n in pool.nodes:
        steps = pool.blocks.get(n, ())
        times = [now] * pool.slots
        held = 0
        for end, used in reversed(steps):   # the last `used` slots stay held until `end`, the longest first
            for s in range(pool.slots - used, pool.slots - held):
                times[s] = end
            held = max(held, used)
        free_from.extend((t, n) for t in times)
    heapq.heapify(free_from)
    out: dict[object, list[int]] = {}
    for start, end, count, key in sorted(tails):
        taken = [heapq.heappop(free_from) for _ in range(count)]
        if any(t > start for t, _ in taken):
            raise AssertionError(f"pool {pool.index}: {key} finds fewer than {count} free slots at {start}")
        out.setdefault(key, []).extend(n for _, n in taken)
        for _, n in taken:
            heapq.heappush(free_from, (end, n))
    return out
