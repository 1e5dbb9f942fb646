"""Nodes alike in the slot table: nodes with the same usage over time share one profile (copied on write), the
nodes that hold each profile are known, and nodes with nothing booked are filed apart as idle, in node order per
capacity, so that a change or a question about nodes alike is made once for all of them."""
from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from itertools import chain, groupby
from typing import Collection, Iterable

from optlease.scheduling.profile import Profile, Vec, fits


class NodeClasses:
    """The slot table's nodes by profile and by idleness (SlotTable sets the state: `profiles`, `empty`, `holders`,
    `idle`, `busy`, `down`, `caps`, `rank`, `by_rank`, `site`)."""


    def _groups(self, keys: dict) -> Iterable[list]:
        """[profile, key, nodes] for the given nodes (node -> key), grouped by their profile and key: nodes in one
        group undergo the same change (`key` names it), so it is made once for all of them."""
        profiles = self.profiles
        if len(keys) == 1:
            ((node, key),) = keys.items()
            return ([profiles[node], key, [node]],)
        if len(keys) > 1:
            # most often one group: a lease's VMs ask alike, on nodes that share a profile (idle ones, or the
            # nodes of one earlier lease)
            nodes = list(keys)
            if len(set(keys.values())) == 1:
                return self.by_profile(nodes, keys[nodes[0]])
        groups: dict[tuple, list] = {}
        for node, key in keys.items():
            prof = profiles[node]
            group = groups.get((prof, key))
            if group is None:
                groups[(prof, key)] = [prof, key, [node]]
            else:
                group[2].append(node)
        return groups.values()

    def by_profile(self, nodes: list[int], key=None) -> Iterable[list]:
        """[profile, key, nodes] for nodes that undergo one change (`key`), grouped by their profile alone."""
        profiles = self.profiles
        profs = set(map(profiles.__getitem__, nodes))
        if len(profs) == 1:
            return ([profs.pop(), key, nodes],)
        # one change on nodes of several profiles: a stretch of nodes that share one at a time (nodes booked
        # together lie together)
        by_prof: dict[Profile, list] = {}
        for prof, stretch in groupby(nodes, profiles.__getitem__):
            group = by_prof.get(prof)
            if group is None:
                by_prof[prof] = [prof, key, list(stretch)]
            else:
                group[2].extend(stretch)
        return by_prof.values()

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
            held = holders[prof]
            held.difference_update(nodes)
            if not held:
                del holders[prof]
                self.alike.pop(prof, None)    # (no longer asked about)
        if new is not empty:
            held = holders.get(new)
            if held is None:
                holders[new] = set(nodes)
            else:
                held.update(nodes)
        if n == 1:
            self.profiles[nodes[0]] = new
        else:
            self.profiles.update(dict.fromkeys(nodes, new))
        return new

    def _file(self, nodes: Collection[int]) -> None:
        """File nodes whose profiles may have changed among the idle or the busy ones."""
        busy, profiles = self.busy, self.profiles
        if len(nodes) == 1:
            (node,) = nodes
            if node in self.down:
                return
            if profiles[node].t:
                if node not in busy:
                    busy.add(node)
                    self._unidle(self.caps[node], [self.rank[node]])
            elif node in busy:
                busy.discard(node)
                self._reidle(self.caps[node], [self.rank[node]])
            return
        fresh = set(nodes).difference(busy)      # (set operations: a wide lease's nodes at once)
        taken = [n for n in fresh if profiles[n].t] if fresh else fresh
        freed = busy.intersection(nodes)
        if freed:
            freed = [n for n in freed if not profiles[n].t]
        self._move(taken, freed)

    def _refile(self, changed: list[tuple[Profile, list[int]]]) -> None:
        """`_file` for nodes whose profiles `_change` has just set, given as (the new profile, nodes): filed by
        group, with no look at each node's profile."""
        if len(changed) == 1 and len(changed[0][1]) == 1:
            self._file(changed[0][1])
            return
        empty, busy = self.empty, self.busy
        now_busy = [nodes for new, nodes in changed if new is not empty]
        now_idle = [nodes for new, nodes in changed if new is empty]
        taken = set().union(*now_busy).difference(busy) if now_busy else ()
        freed = busy.intersection(chain.from_iterable(now_idle)) if now_idle else ()
        self._move(taken, freed)

    def _move(self, taken: Collection[int], freed: Collection[int]) -> None:
        """File nodes just taken (their profile no longer empty) as busy, and nodes just freed as idle."""
        busy = self.busy
        if self.down:
            taken = [n for n in taken if n not in self.down]
        if taken:
            busy.update(taken)
            for cap, ranks in self._by_cap(taken):
                self._unidle(cap, ranks)
        if freed:
            busy.difference_update(freed)
            for cap, ranks in self._by_cap(freed):
                self._reidle(cap, ranks)

    def _by_cap(self, nodes: list[int]) -> Iterable[tuple[Vec, list[int]]]:
        """(capacity, ranks) of the given nodes, by capacity."""
        rank = self.rank
        if len(self.idle) == 1:   # one capacity on the whole site
            return ((next(iter(self.idle)), list(map(rank.__getitem__, nodes))),)
        caps, out = self.caps, {}
        for n in nodes:
            out.setdefault(caps[n], []).append(rank[n])
        return out.items()

    def _unidle(self, cap: Vec, ranks: list[int]) -> None:
        """Take ranks out of the idle list of their capacity. A wide lease takes a run of idle nodes: one slice."""
        idle = self.idle[cap]
        if len(ranks) <= 8:
            for r in ranks:
                i = bisect_left(idle, r)
                if i < len(idle) and idle[i] == r:
                    del idle[i]
            return
        ranks.sort()
        i = bisect_left(idle, ranks[0])
        if idle[i:i + len(ranks)] == ranks:
            del idle[i:i + len(ranks)]
        else:
            drop = set(ranks)
            idle[:] = [r for r in idle if r not in drop]

    def _reidle(self, cap: Vec, ranks: list[int]) -> None:
        """Give ranks back to the idle list of their capacity."""
        idle = self.idle.setdefault(cap, [])
        if len(ranks) <= 8:
            for r in ranks:
                insort(idle, r)
        else:
            idle.extend(ranks)
            idle.sort()

    def idle_nodes(self, need: Vec | None = None) -> Iterable[int]:
        """The nodes in planning with nothing booked at any time (where `need` fits: None, any), in node order."""
        node_ids = self.by_rank
        ranks = [r for cap, r in self.idle.items() if r and (need is None or fits(need, cap))]
        return map(node_ids.__getitem__, iter(ranks[0]) if len(ranks) == 1 else heapq.merge(*ranks))
