"""The mapper's host order, which skips the per-node work for idle nodes, is exactly the host policy's order over
every node with room (hypothesis): on random sites of two node sizes, after random bookings, cancellations, ends, prunes
and nodes taken down and brought back."""
from __future__ import annotations

from types import SimpleNamespace
from unittest.mock import patch

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from optlease.domain.site import Site
from optlease.scheduling import hostruns
from optlease.scheduling.mapper import GreedyMapper
from optlease.scheduling.policies import Policies
from optlease.scheduling.records import RR
from optlease.scheduling.slottable import SlotTable

SIZES = ({"CPU": 100, "Memory": 1024}, {"CPU": 200, "Memory": 512})
WIDE = 150      # nodes of a site where many busy nodes share a score

ops = st.lists(st.one_of(
    st.tuples(st.just("book"), st.integers(1, 12), st.integers(0, 60), st.integers(0, 30), st.integers(1, 200)),
    st.tuples(st.just("cancel"), st.integers(0, 20)),
    st.tuples(st.just("end"), st.integers(0, 20)),
    st.tuples(st.just("prune"), st.integers(0, 10)),
    st.tuples(st.just("down"), st.integers(1, 12)),
    st.tuples(st.just("up"), st.integers(1, 12)),
), max_size=25)


def apply(table: SlotTable, step: tuple, booked: list[RR], pruned: int, most: int | None = None,
          skip: tuple[str, ...] = ()) -> int:
    """One of `ops`' changes made to the table (a booking's CPU capped at `most`; the kinds in `skip` left out):
    the instant the table is pruned to after it."""
    kind, *args = step
    if kind in skip:
        return pruned
    if kind == "book":
        node, begin, length, amount = args
        if node in table.caps and node not in table.down:
            rr = RR(SimpleNamespace(id=len(booked)), "vm", begin, begin + length, {1: node},
                    {node: (amount if most is None else min(amount, most), 64)}, table.next_seq())
            table.add(rr)
            booked.append(rr)
    elif kind == "cancel" and booked:
        table.remove(booked.pop(args[0] % len(booked)))
    elif kind == "end" and booked:
        rr = booked.pop(args[0] % len(booked))
        pruned = max(pruned, rr.end)    # it ends: time has come to its end
        table.forget(rr, pruned)
    elif kind == "prune":
        pruned = max(pruned, args[0])
        table.prune(pruned)
    elif kind == "down" and args[0] in table.caps:
        table.take_down(args[0])
    elif kind == "up":
        table.bring_up(args[0])
    return pruned


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(SIZES), min_size=1, max_size=12), ops, st.integers(0, 80), st.integers(1, 60),
       st.integers(1, 250), st.sampled_from(["greedy", "no-policy"]))
def test_lazy_host_order_is_the_policy_order(sizes, steps, start, duration, cpu, host_policy):
    site = Site(("CPU", "Memory"), tuple(dict(s) for s in sizes))
    table = SlotTable(site)
    policies = Policies(host_selection=host_policy)
    mapper = GreedyMapper(table, policies)
    booked: list[RR] = []
    pruned = 0
    for step in steps:
        pruned = apply(table, step, booked, pruned)
    assert {n for n in table.nodes if not table.profiles[n].t} == set(table.idle_nodes())
    start = max(start, pruned)      # no question looks before a prune
    lease = SimpleNamespace(req=SimpleNamespace(duration=duration))
    for smallest in ((cpu, 64), None):
        room = table.nodes if smallest is None else table.nodes_with_room(smallest, start, table.nodes)
        assert list(mapper._hosts(lease, start, smallest)) == policies.sort_hosts(room, start, lease, table)


@settings(max_examples=1000, deadline=None)
@given(st.integers(1, 12), ops, st.integers(0, 60), st.integers(1, 60), st.integers(1, 100))
def test_kept_scores_follow_every_change(size, steps, start, duration, cpu):
    """The busy nodes' scores the mapper keeps between mappings at one instant (hostscores.py) give the policy's
    order after every booking, cancellation, end, prune, and node taken down or brought back, asked after each."""
    table = SlotTable(Site.homogeneous(size, SIZES[0]))
    policies = Policies(host_selection="greedy")
    mapper = GreedyMapper(table, policies)
    lease = SimpleNamespace(req=SimpleNamespace(duration=duration))
    booked: list[RR] = []
    pruned = 0
    for step in steps:
        pruned = apply(table, step, booked, pruned, most=100)
        at = max(start, pruned)
        for smallest in ((cpu, 64), None):
            room = table.nodes if smallest is None else table.nodes_with_room(smallest, at, table.nodes)
            want = policies.sort_hosts(room, at, lease, table)
            # asked twice: the first ask of an instant is answered afresh, the next from the kept scores
            assert list(mapper._hosts(lease, at, smallest)) == want
            assert list(mapper._hosts(lease, at, smallest)) == want


class HighestFirst:
    """A host policy of a user's that scores idle nodes apart (by node id) and does not say they are alike."""

    def score(self, node, time, lease, table) -> float:
        return float(node)


def test_a_policy_that_does_not_say_idle_nodes_are_alike_is_asked_about_each():
    table = SlotTable(Site.homogeneous(4, SIZES[0]))
    policies = Policies(host_selection="test_host_order.HighestFirst")
    assert not policies.empty_nodes_alike
    lease = SimpleNamespace(demands={1: (50, 64), 2: (50, 64), 3: (80, 64)}, total_demand=(180, 192),
                            req=SimpleNamespace(duration=10))
    mapping, _, _ = GreedyMapper(table, policies).map(lease, 0, 10, strictend=True)
    assert mapping == {1: 4, 2: 4, 3: 3}


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 14), ops, st.integers(0, 80), st.integers(1, 60), st.integers(1, 12),
       st.sampled_from([(25, 64), (50, 256), (100, 1024), (30, 0)]), st.booleans(), st.booleans())
def test_runs_of_idle_nodes_place_vms_as_one_node_at_a_time_does(size, steps, start, duration, vms, shape,
                                                                 strictend, preemptable):
    """Where all nodes are alike the mapper hands runs of idle nodes a lease's VMs at once and walks nodes that
    share a profile once: the mapping (and the end it holds until) is the one that trying the nodes one at a time in
    the same order gives."""
    table, mapper, start, lease, demands, vnodes = alike_lease(size, steps, start, duration, vms, shape)
    smallest = None if preemptable else shape
    one_by_one = list(mapper._hosts(lease, start, smallest))
    expected = node_by_node(table, vnodes, demands, one_by_one, start, start + duration, strictend)
    assert mapper._try(lease, vnodes, demands, one_by_one, start, start + duration, strictend, []) == expected
    runs = list(mapper._host_runs(lease, start, smallest))
    assert mapper._try(lease, vnodes, demands, runs, start, start + duration, strictend, []) == expected


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), st.lists(st.tuples(st.just("book"), st.integers(1, 8), st.integers(0, 40),
                                              st.integers(1, 30), st.integers(1, 200)), max_size=25),
       st.integers(0, 40), st.integers(1, 60), st.integers(1, 30),
       st.sampled_from([(25, 64), (50, 256), (100, 1024), (30, 0)]), st.booleans(),
       st.sets(st.integers(0, 12), min_size=1, max_size=6))
def test_vms_alike_placed_with_leases_assumed_gone_as_one_node_at_a_time(size, steps, start, duration, vms, shape,
                                                                          strictend, gone):
    """An AR that may preempt is placed against each node's usage without the leases assumed gone; its VMs, which
    ask alike, take runs of idle nodes at once and nodes that share that usage in one step, as any lease's do: the
    mapping (and the end it holds until) is the one that trying the nodes one at a time in the same order gives."""
    table, mapper, start, lease, demands, vnodes = alike_lease(size, steps, start, duration, vms, shape)
    preempting = [SimpleNamespace(id=i) for i in sorted(gone)]
    without, held = table.usage_without(preempting, start), table.nodes_of(preempting)
    one_by_one = list(mapper._hosts(lease, start, None))
    expected = node_by_node(table, vnodes, demands, one_by_one, start, start + duration, strictend,
                            lambda n: without(n) if n in held else table.profiles[n])
    assert mapper._try(lease, vnodes, demands, one_by_one, start, start + duration, strictend, preempting) == expected
    runs = list(mapper._host_runs(lease, start, None))
    assert mapper._try(lease, vnodes, demands, runs, start, start + duration, strictend, preempting) == expected


def alike_lease(size: int, steps, start: int, duration: int, vms: int, shape: tuple):
    """A site of `size` alike nodes with `steps` booked on it, the greedy mapper over it, and a lease of `vms` VMs
    asking `shape` each for `duration` from `start` (moved past what the steps pruned): (table, mapper, start,
    lease, demands, vnodes)."""
    table = SlotTable(Site.homogeneous(size, SIZES[0]))
    mapper = GreedyMapper(table, Policies(host_selection="greedy"))
    booked: list[RR] = []
    pruned = 0
    for step in steps:
        pruned = apply(table, step, booked, pruned, most=100, skip=("cancel", "down", "up"))
    demands = dict.fromkeys(range(1, vms + 1), shape)
    lease = SimpleNamespace(demands=demands, total_demand=tuple(vms * x for x in shape),
                            req=SimpleNamespace(duration=duration))
    return table, mapper, max(start, pruned), lease, demands, sorted(demands)


def node_by_node(table, vnodes, demands, pnodes, start, end, strictend, usage=None):
    """Haizea's greedy walk, literally: each node in turn takes the next VMs while they fit over the window; without
    a strict end, a node where they fit for a while shortens the window to that. `usage`: node -> its usage from
    `start` on (None: its profile)."""
    mapping, maxend, pos = {}, end, 0
    for pnode in pnodes:
        prof, cap = (table.profiles[pnode] if usage is None else usage(pnode)), table.caps[pnode]
        need = demands[vnodes[pos]]
        while True:
            if prof.fits_between(start, maxend, need, cap):
                mapping[vnodes[pos]] = pnode
                pos += 1
                if pos == len(vnodes):
                    return mapping, maxend
                need = tuple(a + b for a, b in zip(need, demands[vnodes[pos]]))
                continue
            latest = prof.first_exceeding(start, need, cap)
            if strictend or latest <= start or latest == float("inf"):
                break
            maxend = latest
    return None, None


@pytest.mark.parametrize("least, most", [(64, 64), (0, 16), (0, 64)], ids=["as-run", "heap-16", "heap-64"])
@settings(max_examples=100, deadline=None)
@given(bookings=st.lists(st.tuples(st.sets(st.integers(1, WIDE), min_size=1), st.integers(0, 40), st.integers(1, 30),
                                   st.sampled_from([30, 50, 100])), max_size=8),
       start=st.integers(0, 50), duration=st.integers(1, 60), cpu=st.sampled_from([20, 50, 100]))
def test_many_busy_nodes_of_one_score_come_in_node_order(least, most, bookings, start, duration, cpu):
    """Busy nodes of one score not kept in order (the first placement asked at an instant) are handed to the mapper in
    node order, their first chunks taken off a heap and the rest sorted (`heap-*`: from any number of nodes): the
    walk is the policy's order."""
    table = SlotTable(Site.homogeneous(WIDE, SIZES[0]))
    policies = Policies(host_selection="greedy")
    mapper = GreedyMapper(table, policies)
    for i, (nodes, begin, length, amount) in enumerate(bookings):
        mapping = {v: n for v, n in enumerate(sorted(nodes), 1)}
        booker = SimpleNamespace(id=i, demands=dict.fromkeys(mapping, (amount, 64)),
                                 total_demand=(len(nodes) * amount, len(nodes) * 64))
        table.add(RR(booker, "vm", begin, begin + length, mapping, {n: (amount, 64) for n in sorted(nodes)},
                     table.next_seq()))
    lease = SimpleNamespace(req=SimpleNamespace(duration=duration))
    with patch.object(hostruns, "HEAP_LEAST", least), patch.object(hostruns, "HEAP_MOST", most):
        for smallest in ((cpu, 64), None):
            room = table.nodes if smallest is None else table.nodes_with_room(smallest, start, table.nodes)
            assert list(mapper._hosts(lease, start, smallest)) == policies.sort_hosts(room, start, lease, table)


def mapper_after(size: int, steps: list, start: int) -> tuple[SlotTable, GreedyMapper, int]:
    """A site of `size` nodes alike after the given changes (no node down), its greedy mapper, and `start` moved to
    no earlier than the instant the table was pruned to."""
    table = SlotTable(Site.homogeneous(size, SIZES[0]))
    booked: list[RR] = []
    pruned = 0
    for step in steps:
        pruned = apply(table, step, booked, pruned, most=100, skip=("down", "up"))
    return table, GreedyMapper(table, Policies(host_selection="greedy")), max(start, pruned)


def lease_alike(vms: int, shape: tuple, duration: int, **more) -> SimpleNamespace:
    """A lease of `vms` VMs each asking `shape`, for `duration`."""
    return SimpleNamespace(demands=dict.fromkeys(range(1, vms + 1), shape), total_demand=tuple(vms * x for x in shape),
                           req=SimpleNamespace(duration=duration), **more)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 14), ops, st.integers(0, 80), st.integers(1, 60), st.integers(1, 40),
       st.sampled_from([(25, 64), (50, 256), (100, 1024), (100, 0)]), st.booleans())
def test_a_lease_refused_without_a_walk_is_one_the_walk_refuses(size, steps, start, duration, vms, shape, strictend):
    """The mapper refuses a lease whose VMs ask alike without walking the nodes where the idle ones and the busy ones
    with room could not hold them all, each taking as many as an empty node: exactly where the walk finds no
    mapping (and otherwise it gives the walk's mapping)."""
    table, mapper, start = mapper_after(size, steps, start)
    lease = lease_alike(vms, shape, duration)
    demands = lease.demands
    walked = mapper._try(lease, sorted(demands), demands, list(mapper._host_runs(lease, start, shape)), start,
                         start + duration, strictend, [])
    mapping, end, preempt = mapper.map(lease, start, start + duration, strictend)
    assert (mapping, end) == walked and preempt in (None, [])
    if strictend and walked == (None, None):    # (the site-wide test may refuse it before either)
        return
    keyed = mapper._keyed(lease, start, shape)
    assert mapper._cannot_hold(lease, keyed, shape) is False or walked == (None, None)
