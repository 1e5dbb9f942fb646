"""Nodes alike in the slot table: nodes with the same usage over time share one profile (copied on write), the
nodes that hold each profile are known, and nodes with nothing booked are filed apart as idle, in node order per
capacity (node ids grow with node order), so that a change or a question about nodes alike is made once for all of
them."""
from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from itertools import chain, groupby, repeat
from typing import Collection, Iterable, Iterator

from optlease.scheduling.profile import Profile, Vec, fits
from optlease.scheduling.records import OneVMEach


SPAN_LEAST = 16     # nodes from which a change looks for stretches of consecutive ids among them
STRETCH_NODES = 16  # nodes per stretch, on average, below which a change goes node by node (in C) instead


class Ordered(list):
    """Distinct nodes in node order, as `stretches` gives them (nothing changes such a list in place; a slice of it
    is a plain list), with that answer (`found`): a change handed such a list on asks it again."""

    __slots__ = ("found",)


def stretches(nodes) -> tuple[list[int], list[tuple[int, int]]] | None:
    """The given distinct nodes in order, and the stretches of consecutive ids they make, as (first, last + 1) in
    order: from SPAN_LEAST nodes, where the stretches hold STRETCH_NODES nodes on average or more (busy nodes left
    between idle ones split a wide lease's nodes into a few long stretches); else None. Each stretch's end is found
    by halving (ordered[k] - k never decreases, and stays put exactly along a stretch), not by a look at each node."""
    n = len(nodes)
    if n < SPAN_LEAST:
        return None
    kind = type(nodes)
    if kind is Ordered:         # (what an earlier call gave, handed on to the next change)
        return nodes.found
    if kind is OneVMEach:       # (a reservation's nodes: asked at each change of it, answered once)
        found = nodes.stretched
        if found is False:
            found = nodes.stretched = stretches(nodes.nodes)
        return found
    ordered = Ordered(nodes)
    ordered.sort()              # (a pass of comparisons of ints where they come in order, as most do)
    first = ordered[0]
    if ordered[-1] - first == n - 1:
        ordered.found = found = ordered, [(first, first + n)]
        return found
    most = n // STRETCH_NODES
    out = []
    i = 0
    while i < n:
        if len(out) >= most:
            return None
        first = ordered[i]
        base = first - i
        lo, hi = i + 1, n       # the stretch ends at the first k > i where ordered[k] - k != base (or at n)
        while lo < hi:
            mid = (lo + hi) // 2
            if ordered[mid] - mid == base:
                lo = mid + 1
            else:
                hi = mid
        out.append((first, first + lo - i))
        i = lo
    ordered.found = found = ordered, out
    return found


def read(values: list, ends: list[tuple[int, int]]) -> list:
    """The values at the nodes of the given stretches, in order: one slice each, added to the list in one copy (not
    value by value)."""
    if len(ends) == 1:
        ((lo, hi),) = ends
        return values[lo:hi]
    out: list = []
    for lo, hi in ends:
        out += values[lo:hi]
    return out


def same_runs(values: list, i: int = 0) -> Iterator[tuple[object, int, int]]:
    """(value, i, j) for each stretch values[i:j] of one object (objects that compare by identity, as profiles do),
    in order, from i on, found as they are asked for (a walk that ends early asks no further): the groups `groupby`
    makes. Each stretch's end is found by tests at a few items (steps that double, then halve), and the stretch
    checked in C (`count`: a pass over items that are all its value is quick); where a stretch is not as found (the
    value comes again after another in between), and for the last items once fewer than SPAN_LEAST are left, the
    rest goes by `groupby`, item by item."""
    n = len(values)
    while n - i >= SPAN_LEAST:
        value = values[i]
        lo, step = i + 1, 1        # values[lo - 1] is value: the stretch ends at lo or later
        while lo + step <= n and values[lo + step - 1] is value:
            lo += step
            step *= 2
        hi = min(n, lo + step - 1)     # values[hi] is not value, where hi < n
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if values[mid - 1] is value:
                lo = mid
            else:
                hi = mid - 1
        if (lo < n and values[lo] is value) or values[i:lo].count(value) != lo - i:
            break
        yield value, i, lo
        i = lo
    for value, same in groupby(values[i:] if i else values):
        k = len(list(same))
        yield value, i, i + k
        i += k


def all_alike(values: list, first) -> bool:
    """Whether every item of `values` equals `first` (an item of them): `count` in C, which compares by identity
    first (a value most often shares one object: nodes booked together share their profile and reservation set).
    The last item is compared first: where it differs, most often some do, and `count` would compare each other
    object in full (a reservation set with another, item by item)."""
    last = values[-1]
    return (last is first or last == first) and values.count(first) == len(values)


def fill(values: list, nodes, value) -> None:
    """Set every given node's value (distinct nodes): a stretch of consecutive ids in one slice."""
    if len(nodes) == 1:
        for node in nodes:
            values[node] = value
        return
    found = stretches(nodes)
    if found is not None:
        for lo, hi in found[1]:
            values[lo:hi] = [value] * (hi - lo)
    else:
        any(map(values.__setitem__, nodes, repeat(value)))


def _without(idle: list[int], ends: list[tuple[int, int]]) -> list[int] | None:
    """An idle list (in order, distinct) without the stretches of nodes (first, last + 1) given in order, made from
    the slices between them in one pass; None where it does not hold every node of them."""
    out, prev = [], 0
    for lo, hi in ends:
        i = bisect_left(idle, lo, prev)
        j = i + hi - lo
        if j > len(idle) or idle[i] != lo or idle[j - 1] != hi - 1:
            return None
        out += idle[prev:i]
        prev = j
    out += idle[prev:]
    return out


class NodeClasses:
    """The slot table's nodes by profile and by idleness (SlotTable sets the state: `profiles`, `empty`, `holders`,
    `idle`, `down`, `caps`, `rank`, `site`)."""


    def _groups(self, keys: dict) -> Iterable[list]:
        """[profile, key, nodes] for the given nodes (node -> key), grouped by their profile and key: nodes in one
        group undergo the same change (`key` names it), so it is made once for all of them."""
        profiles = self.profiles
        if type(keys) is OneVMEach and len(keys) > 1:     # (one key for all: no list of keys built)
            return self.by_profile(keys, keys.shape)
        if len(keys) == 1:
            ((node, key),) = keys.items()
            return ([profiles[node], key, [node]],)
        if len(keys) > 1:
            # most often one group: a lease's VMs ask alike, on nodes that share a profile (idle ones, or the
            # nodes of one earlier lease)
            nodes = list(keys)
            values = list(keys.values())
            # (`count` compares by identity first: a lease's VMs alike share one vector)
            if values.count(values[0]) == len(values):
                return self.by_profile(nodes, values[0])
        groups: dict[tuple, list] = {}
        for node, key in keys.items():
            prof = profiles[node]
            group = groups.get((prof, key))
            if group is None:
                groups[(prof, key)] = [prof, key, [node]]
            else:
                group[2].append(node)
        return groups.values()

    def by_profile(self, nodes: list[int], key=None, runs: bool = True) -> Iterable[list]:
        """[profile, key, nodes] for nodes that undergo one change (`key`), grouped by their profile alone (the
        nodes of a group in no particular order). `runs`: look for stretches of consecutive nodes among them (a
        lease's nodes), rather than read each node's profile (nodes scattered over the site: every busy node)."""
        profiles = self.profiles
        found = stretches(nodes) if runs else None
        if found is None:
            if not isinstance(nodes, list):
                nodes = list(nodes)
            profs = list(map(profiles.__getitem__, nodes))
        else:
            nodes, profs = found[0], read(profiles, found[1])
        if profs and all_alike(profs, profs[0]):    # (profiles compare by identity)
            return ([profs[0], key, nodes],)
        # one change on nodes of several profiles: a stretch of nodes that share one at a time (nodes booked
        # together lie together), each cut from the nodes as one slice
        by_prof: dict[Profile, list] = {}
        for prof, i, j in same_runs(profs):
            group = by_prof.get(prof)
            if group is None:
                by_prof[prof] = [prof, key, nodes[i:j]]
            else:
                group[2].extend(nodes[i:j])
        return by_prof.values()

    def _hold(self, nodes, rr, joins: bool) -> None:
        """Add a reservation to the given nodes' reservation sets (`joins`) or take it out of them. Nodes that
        hold the same reservations share one frozen set (nodes booked together come in stretches), so each such
        stretch gets one new set, set per node in one pass in C."""
        by_node = self.by_node
        if not nodes:
            return
        found = stretches(nodes)
        if found is not None:   # stretches of consecutive nodes: their sets read as slices
            nodes, ends = found
            held = read(by_node, ends)
            first = held[0]
            if all_alike(held, first):     # shared by all: one new set, set as slices
                new = first.union((rr,)) if joins else first.difference((rr,))
                for lo, hi in ends:
                    by_node[lo:hi] = [new] * (hi - lo)
                return
            shared = ((old, len(list(group))) for old, group in groupby(held))
        else:
            nodes = nodes if type(nodes) is list else list(nodes)
            held = list(map(by_node.__getitem__, nodes))
            first = held[0]
            shared = ((first, len(held)),) if all_alike(held, first) else \
                ((old, len(list(group))) for old, group in groupby(held))
        made: dict[int, frozenset] = {}
        i = 0
        for old, k in shared:
            new = made.get(id(old))
            if new is None:
                new = made[id(old)] = old.union((rr,)) if joins else old.difference((rr,))
            fill(by_node, nodes[i:i + k], new)
            i += k

    def _change(self, prof: Profile, nodes: list[int], change, *args) -> Profile:
        """Apply `change(profile, *args)` to the usage of nodes that share `prof`. A profile other nodes share too
        is copied first, one copy for all of these; one only these hold is changed in place; a profile left empty
        is `empty`."""
        n = len(nodes)
        if self.touched is not None:
            self._touch(nodes)
        empty = self.empty
        if prof.owners == n and prof is not empty:
            change(prof, *args)
            if prof.t:
                return prof
            new = empty
        else:
            new = prof.copy()
            change(new, *args)
            if not new.t:
                new = empty
        prof.owners -= n
        new.owners += n
        holders = self.holders
        if prof is not empty:
            if prof.owners:
                holders[prof].difference_update(nodes)
            else:       # (every node that held it is among these)
                del holders[prof]
                self.alike.pop(prof, None)    # (no longer asked about)
        if new is not empty:
            held = holders.get(new)
            if held is None:
                holders[new] = set(nodes)
            else:
                held.update(nodes)
        fill(self.profiles, nodes, new)
        return new

    @property
    def busy(self) -> set[int]:
        """The nodes in planning whose profile is not empty: those that hold some profile other than `empty`, less
        those out of planning. Worked out when asked (a heterogeneous site's placement, a prune), not kept up to
        date at every change (a wide lease's nodes would each be added and taken out)."""
        held = self.holders
        busy = set().union(*held.values()) if held else set()
        return busy.difference(self.down) if self.down else busy

    def _refile(self, changed: list[tuple[Profile, Profile, list[int]]]) -> None:
        """`_file` for nodes whose profiles `_change` has just changed, given as (the old profile, the new one,
        nodes): a node in planning is idle exactly where its profile is `empty`, so a group is filed busy where it
        leaves `empty`, idle where it comes to it, and stays as it is otherwise, with no look at each node."""
        empty = self.empty
        taken = [nodes for old, new, nodes in changed if old is empty and new is not empty]
        freed = [nodes for old, new, nodes in changed if new is empty and old is not empty]
        if taken or freed:
            self._move(taken[0] if len(taken) == 1 else list(chain.from_iterable(taken)),
                       freed[0] if len(freed) == 1 else list(chain.from_iterable(freed)))

    def _move(self, taken: Collection[int], freed: Collection[int]) -> None:
        """File nodes just taken (their profile no longer empty) as busy (out of the idle lists), and nodes just freed
        as idle."""
        if self.down:
            taken = [n for n in taken if n not in self.down]
        if taken:
            for cap, nodes in self._by_cap(taken):
                self._unidle(cap, nodes)
        if freed:
            if self.down:
                freed = [n for n in freed if n not in self.down]
            for cap, nodes in self._by_cap(freed):
                self._reidle(cap, nodes)

    def _by_cap(self, nodes: Collection[int]) -> Iterable[tuple[Vec, Collection[int]]]:
        """(capacity, nodes) of the given nodes, by capacity."""
        if len(self.idle) == 1:   # one capacity on the whole site
            return ((next(iter(self.idle)), nodes),)
        caps, out = self.caps, {}
        for n in nodes:
            out.setdefault(caps[n], []).append(n)
        return out.items()

    def _unidle(self, cap: Vec, nodes: Collection[int]) -> None:
        """Take nodes out of the idle list of their capacity. A wide lease takes a run of idle nodes: one slice."""
        idle = self.idle[cap]
        if len(nodes) <= 8:
            for n in nodes:
                i = bisect_left(idle, n)
                if i < len(idle) and idle[i] == n:
                    del idle[i]
            return
        if type(nodes) is not Ordered:
            nodes = sorted(nodes)
        elif len(nodes.found[1]) > 1:
            # its stretches known: the list without them, from the slices between them
            kept = _without(idle, nodes.found[1])
            if kept is not None:
                idle[:] = kept
                return
        i = bisect_left(idle, nodes[0])
        if idle[i:i + len(nodes)] == nodes:
            del idle[i:i + len(nodes)]
        else:
            drop = set(nodes)
            idle[:] = [n for n in idle if n not in drop]

    def _reidle(self, cap: Vec, nodes: Collection[int]) -> None:
        """Give nodes back to the idle list of their capacity."""
        idle = self.idle.setdefault(cap, [])
        if len(nodes) <= 8:
            for n in nodes:
                insort(idle, n)
            return
        if type(nodes) is not Ordered:
            idle.extend(nodes)
            idle.sort()
            return
        # its stretches known: each stretch of consecutive ids goes in as one slice where it falls (no idle node lies
        # inside it), the list made again from the slices in one pass (one stretch: put in place)
        ends = nodes.found[1]
        if len(ends) == 1:
            i = bisect_left(idle, nodes[0])
            idle[i:i] = nodes
            return
        out, prev, k = [], 0, 0
        for lo, hi in ends:
            i = bisect_left(idle, lo, prev)
            out += idle[prev:i]
            out += nodes[k:k + hi - lo]
            prev, k = i, k + hi - lo
        out += idle[prev:]
        idle[:] = out

    def idle_nodes(self, need: Vec | None = None) -> Iterable[int]:
        """The nodes in planning with nothing booked at any time (where `need` fits: None, any), in node order."""
        lists = [nodes for cap, nodes in self.idle.items() if nodes and (need is None or fits(need, cap))]
        return iter(lists[0]) if len(lists) == 1 else heapq.merge(*lists)
