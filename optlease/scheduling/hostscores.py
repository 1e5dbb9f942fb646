"""The greedy host policy's scores of the busy nodes, kept from one mapping to the next at the same instant.

A busy node's score (GreedyHosts) and whether a lease's smallest VM fits there depend on the node's reservations, its
profile, the instant and the lease's duration alone. Between two mappings at one instant for leases of one duration
and one smallest VM (a batch of requests in one step, a queue of leases alike), only the nodes the slot table changed
since (`SlotTable.touched`) score differently: they alone are scored again, so a placement costs what it changes,
not the number of busy nodes. The scores are the policy's own (`GreedyHosts.score_many`), so the order is the same.
"""
from __future__ import annotations

from itertools import compress, groupby, repeat
from operator import is_not, itemgetter

from sortedcontainers import SortedList

from optlease.scheduling.nodeclasses import all_alike
from optlease.scheduling.records import Lease
from optlease.scheduling.slottable import SlotTable

VIEWS = 4    # (instant, duration, smallest VM) kept at once: a step tries a few instants for the leases it places


class InOrder:
    """Nodes of one score, kept in node order (node ids grow with it): the mapper walks them without sorting."""

    __slots__ = ("nodes",)

    def __init__(self, nodes: SortedList) -> None:
        self.nodes = nodes


class _View:
    """The busy nodes where the smallest VM fits at `start`, by -score, as of `pos` in the table's touched log."""

    def __init__(self, epoch: int, pos: int) -> None:
        self.epoch = epoch
        self.pos = pos
        self.key_of: dict[int, float] = {}          # node -> -score
        self.nodes_at: dict[float, SortedList] = {}   # -score -> the nodes, in node order


class BusyScores:
    """`keyed(start, lease, smallest)`: what Policies.keyed_groups gives for the busy nodes with room (-score ->
    collections of nodes), kept up to date node by node from the table's touched log."""

    def __init__(self, table: SlotTable, policies) -> None:
        self.table = table
        self.policies = policies
        self.hosts = policies.hosts
        self.views: dict[tuple, _View] = {}
        self._once: dict[tuple, None] = {}  # the last keys asked for with no view: a view is kept when asked again
        if table.touched is None:
            table.touched = []

    def keyed(self, start: int, lease: Lease, smallest) -> dict[float, list] | None:
        """-score -> [nodes] for the busy nodes where `smallest` fits at start (None: the table's nodes are not all
        alike or some are out of planning; the caller then asks node by node)."""
        table = self.table
        if table.one_cap is None or table.down:
            return None
        key = (start, lease.req.duration, smallest)
        view = self.views.get(key)
        log = table.touched
        if view is None or view.epoch != table.touch_epoch:
            if view is None and key not in self._once:
                # asked once: the policy's answer, scored group by group (a view pays off only when asked again)
                self._once[key] = None
                while len(self._once) > 2 * VIEWS:
                    del self._once[next(iter(self._once))]
                return self.policies.keyed_groups(table.busy_groups(smallest, start), start, lease, table)
            view = self._build(start, lease, smallest)
            self.views.pop(key, None)
            while len(self.views) >= VIEWS:
                del self.views[next(iter(self.views))]
            self.views[key] = view
        elif view.pos < len(log):
            # (each node once, in the log's order: nodes changed together come together)
            self._update(view, list(dict.fromkeys(log[view.pos:])), start, lease, smallest)
            view.pos = len(log)
        return {k: [InOrder(nodes)] for k, nodes in view.nodes_at.items()}

    def _build(self, start: int, lease: Lease, smallest) -> _View:
        table = self.table
        view = _View(table.touch_epoch, len(table.touched))
        busy = [n for _, nodes in table.busy_groups(smallest, start) for n in nodes]
        self._score(view, busy, start, lease)
        return view

    def _update(self, view: _View, nodes: list[int], start: int, lease: Lease, smallest) -> None:
        """Score again the given nodes (those the table changed since the view was last brought up to date, each
        once)."""
        key_of, nodes_at = view.key_of, view.nodes_at
        gone: dict[float, list[int]] = {}     # -score -> the nodes that leave it
        # (in C per node, in Python per stretch of nodes that had one score: nodes changed together come together)
        olds = map(key_of.pop, nodes, repeat(None))
        for old, stretch in groupby(zip(olds, nodes), itemgetter(0)):
            if old is not None:
                left = gone.get(old)
                if left is None:
                    left = gone[old] = []
                left.extend(map(itemgetter(1), stretch))
        for old, left in gone.items():
            held = nodes_at[old]
            if len(left) == len(held):
                del nodes_at[old]
            elif 8 * len(left) > len(held):     # many: the rest kept in one sort, not a removal each
                nodes_at[old] = SortedList(set(held).difference(left))
            else:
                for n in left:
                    held.discard(n)
        # the busy ones (keyed asks only when no node is down) where `smallest` fits, as busy_groups picks them
        table = self.table
        busy = list(compress(nodes, map(is_not, map(table.profiles.__getitem__, nodes), repeat(table.empty))))
        self._score(view, busy if smallest is None else table.nodes_with_room(smallest, start, busy), start, lease)

    def _score(self, view: _View, nodes: list[int], start: int, lease: Lease) -> None:
        key_of, nodes_at = view.key_of, view.nodes_at
        table = self.table
        by_node = table.by_node
        # A node's score depends on its profile and its reservations alone: nodes that share a profile (they come
        # in stretches: booked together) and hold the same reservations are scored once, for all of them.
        new: dict[float, list[int]] = {}
        for _, _, group in table.by_profile(nodes, runs=False):
            ref = by_node[group[0]]
            # (nodes booked together share one set)
            if len(group) > 1 and all_alike(list(map(by_node.__getitem__, group)), ref):
                ((score, _),) = self.hosts.score_many(group[:1], start, lease, table)
                scored = ((score, group),)
            else:
                scored = ((score, (node,)) for score, node in self.hosts.score_many(group, start, lease, table))
            for score, members in scored:
                any(map(key_of.__setitem__, members, repeat(-score)))
                new.setdefault(-score, []).extend(members)
        for key, members in new.items():
            held = nodes_at.get(key)
            if held is None:
                nodes_at[key] = SortedList(members)
            else:
                held.update(members)
