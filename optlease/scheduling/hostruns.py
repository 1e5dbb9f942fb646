"""The order in which the greedy mapper walks a site whose nodes are all alike (GreedyMapper._host_runs): the busy
nodes by the host policy's score, in node order within a score, each score's nodes put in order only when the walk
comes to them, and the idle nodes (which all score alike) merged in as runs where their score falls."""
from __future__ import annotations

import heapq
import itertools
from bisect import bisect_right

from optlease.scheduling.hostscores import InOrder
from optlease.scheduling.records import Lease
from optlease.scheduling.slottable import SlotTable, fits


HEAP_LEAST = 64     # nodes of one score from which the first chunks come off a heap rather than a sort
HEAP_MOST = 64      # the largest chunk taken off the heap (the rest is then sorted)


class Nodes(list):
    """Nodes in the host policy's order, some of them busy, walked one by one (a plain list from `_host_runs` is a
    run of idle nodes)."""


def keyed_runs(table: SlotTable, policies, keyed: dict, lease: Lease, start: int, smallest):
    """GreedyMapper._host_runs on a site whose nodes are all alike and in planning: the busy nodes (`keyed`: -score ->
    collections of nodes, Policies.keyed_groups) by score, in node order within a score, each score's nodes
    put in order only when the walk comes to them, with the idle ones merged in as runs where their one score
    falls."""
    cap = table.one_cap
    # the idle nodes, in node order (node ids grow with it)
    idle = table.idle.get(cap, ()) if smallest is None or fits(smallest, cap) else ()
    keys = sorted(keyed)

    def in_order(key: float):
        # one score's nodes in node order (node ids grow with it)
        colls = keyed[key]
        if len(colls) == 1 and type(colls[0]) is InOrder:    # kept in node order (hostscores)
            return colls[0].nodes
        return sorted(itertools.chain.from_iterable(colls))

    def score_runs(key: float):
        # one score's nodes in node order, in chunks that double: a lease most often takes the first
        colls = keyed[key]
        size, lo = 16, 0
        if len(colls) != 1 or type(colls[0]) is not InOrder:
            # not kept in order: the first chunks popped off a heap (a lease that takes few of many nodes sorts
            # none of the rest), the rest sorted once a walk goes on
            heap = list(itertools.chain.from_iterable(colls))
            if len(heap) > HEAP_LEAST:
                heapq.heapify(heap)
                pop = heapq.heappop
                while heap and size <= HEAP_MOST:
                    yield Nodes([pop(heap) for _ in range(min(size, len(heap)))])
                    size *= 2
            ordered = sorted(heap)
        else:
            ordered = colls[0].nodes
        while lo < len(ordered):
            yield Nodes(ordered[lo:lo + size])
            lo, size = lo + size, 2 * size

    if not idle:
        for key in keys:
            yield from score_runs(key)
        return

    def runs(lo: int, hi: int):
        # idle[lo:hi] as node lists, in chunks that double: a lease takes a few idle nodes or many
        size = 16
        while lo < hi:
            top = min(hi, lo + size)
            yield idle[lo:top]
            lo, size = top, 2 * size

    if not keys:
        yield from runs(0, len(idle))
        return
    idle_key = -policies.score_hosts([idle[0]], start, lease, table)[0][0]
    i, lo = 0, 0
    while i < len(keys) and keys[i] < idle_key:     # busy nodes that score higher than idle ones
        yield from score_runs(keys[i])
        i += 1
    if i < len(keys) and keys[i] == idle_key:       # busy nodes that score as idle ones: by node order
        # the idle nodes in chunks that double, each with the busy nodes that come before its last idle node
        # merged in (a chunk with none is a run)
        busy, j, size, n = in_order(keys[i]), 0, 16, len(idle)
        while lo < n:
            top = min(n, lo + size)
            jj = len(busy) if top == n else bisect_right(busy, idle[top - 1], j)
            if jj == j:
                yield idle[lo:top]
            else:
                yield Nodes(sorted(idle[lo:top] + list(busy[j:jj])))
                j = jj
            lo, size = top, 2 * size
        i += 1
    yield from runs(lo, len(idle))
    while i < len(keys):                             # busy nodes that score lower
        yield from score_runs(keys[i])
        i += 1
