"""Nodes alike share one usage profile in the slot table (copy on write): after any sequence of bookings over
several nodes, cancellations, premature ends, ends and prunes, every node's profile is exactly the one a profile of
its own would hold, each shared profile counts the nodes that hold it, and no change leaks to a node it was not
made on (hypothesis). What the queue's passes ask of it: the free room of a set of nodes, added up per profile, and
whether room ahead came back or a reservation only reached its end."""
from __future__ import annotations

from itertools import groupby
from types import SimpleNamespace
from unittest.mock import patch

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from optlease.domain.site import Site
from optlease.scheduling import nodeclasses
from optlease.scheduling.policies import GreedyHosts
from optlease.scheduling.preparation import PreparedTable
from optlease.scheduling.records import RR, OneVMEach
from optlease.scheduling.roomahead import RoomAhead
from optlease.scheduling.slottable import Profile, SlotTable, fits

NODES = 24     # (more than nodeclasses.SPAN_LEAST: a run of consecutive nodes is changed by slices)
DEMANDS = ((100, 64), (50, 64), (50, 32))

# the nodes of a booking: any set of them, or a run of consecutive ones (a wide lease on idle nodes)
on_nodes = st.one_of(st.sets(st.integers(1, NODES), min_size=1),
                     st.builds(lambda a, k: set(range(a, min(NODES, a + k) + 1)), st.integers(1, NODES),
                               st.integers(0, NODES)))

ops = st.lists(st.one_of(
    # a reservation over a set of nodes, each with one of a few demands (nodes alike take the same one)
    st.tuples(st.just("book"), on_nodes, st.sampled_from(DEMANDS), st.integers(0, 40), st.integers(0, 30)),
    st.tuples(st.just("cancel"), st.integers(0, 30)),
    st.tuples(st.just("cut"), st.integers(0, 30), st.integers(0, 30)),
    st.tuples(st.just("end"), st.integers(0, 30)),
    st.tuples(st.just("prune"), st.integers(0, 10)),
    # a node leaves planning (its host went silent) or comes back
    st.tuples(st.just("down"), st.integers(1, NODES)),
    st.tuples(st.just("up"), st.integers(1, NODES)),
), max_size=30)


@pytest.mark.parametrize("least, per_stretch", [(16, 16), (2, 1)], ids=["as-run", "stretches-from-two-nodes"])
@settings(max_examples=300, deadline=None)
@given(steps=ops)
# a run of consecutive nodes of which the last holds something more, booked over again and ended
@example(steps=[("book", set(range(1, 21)), (50, 32), 0, 10), ("book", {20}, (50, 32), 0, 5),
                ("book", set(range(1, 21)), (50, 32), 0, 10), ("end", 0), ("cancel", 1)])
# two stretches of nodes, each holding something more at one end, booked over again and ended
@example(steps=[("book", set(range(1, 9)) | set(range(12, 20)), (50, 32), 0, 10), ("book", {8, 12}, (50, 32), 0, 5),
                ("book", set(range(1, 9)) | set(range(12, 20)), (50, 32), 0, 10), ("end", 0), ("cancel", 1)])
def test_shared_profiles_hold_what_a_profile_per_node_holds(least, per_stretch, steps):
    """(`stretches-from-two-nodes`: every change of two nodes or more goes by stretches of consecutive nodes, however
    short, so that a stretch cut one node short or one too long fails.)"""
    with patch.object(nodeclasses, "SPAN_LEAST", least), patch.object(nodeclasses, "STRETCH_NODES", per_stretch):
        _check_shared_profiles(steps)


def _check_shared_profiles(steps):
    table = SlotTable(Site.homogeneous(NODES, {"CPU": 100, "Memory": 64}))
    zero = table.zero
    own = {n: Profile(zero) for n in table.nodes}   # one profile per node, changed in place
    booked: list[RR] = []
    now = 0
    for kind, *args in steps:
        if kind == "book":
            nodes, demand, begin, length = args
            begin += now
            mapping = {v: n for v, n in enumerate(sorted(nodes), start=1)}
            lease = SimpleNamespace(id=len(booked), demands=dict.fromkeys(mapping, demand),
                                    total_demand=tuple(len(nodes) * x for x in demand))
            rr = RR(lease, "vm", begin, begin + length, mapping, {n: demand for n in sorted(nodes)},
                    table.next_seq())
            table.add(rr)
            for n in nodes:
                own[n].add(rr.start, rr.end, demand)
            booked.append(rr)
        elif kind == "cancel" and booked:
            rr = booked.pop(args[0] % len(booked))
            table.remove(rr)
            for n, d in rr.demand.items():
                own[n].add(rr.start, rr.end, d, -1)
        elif kind == "cut" and booked and (rr := booked[args[0] % len(booked)]).end > max(now, rr.start):
            # a premature end: the reservation ends earlier, not before now
            old = rr.end
            end = max(rr.start, now) + args[1] % (old - max(rr.start, now))
            table.cut(rr, end)
            for n, d in rr.demand.items():     # what a removal and a shorter booking leave
                own[n].add(rr.start, old, d, -1)
                own[n].add(rr.start, end, d)
        elif kind == "end" and booked:
            rr = booked.pop(args[0] % len(booked))
            now = max(now, rr.end)             # it ends: time has come to its end
            table.forget(rr, now)
            for n in rr.demand:
                own[n].prune(now)
        elif kind == "prune":
            now += args[0]
            busy = set(table.busy)
            table.prune(now)
            for n in busy:
                own[n].prune(now)
        elif kind == "down":
            table.take_down(args[0])
        elif kind == "up":
            table.bring_up(args[0])
        for n in table.nodes:
            assert (table.profiles[n].t, table.profiles[n].u) == (own[n].t, own[n].u), n
        holders: dict[int, int] = {}
        for n in table.site.node_ids:     # (a node out of planning keeps its profile: it still counts)
            holders[id(table.profiles[n])] = holders.get(id(table.profiles[n]), 0) + 1
        for n in table.site.node_ids:
            prof = table.profiles[n]
            assert prof.owners == holders[id(prof)]
            assert prof.t or prof is table.empty       # a profile left empty is the shared empty one
        assert not table.empty.t
        assert {n for n in table.nodes if table.profiles[n].t} == table.busy
        # each node's reservations (shared frozen sets): exactly those booked on it
        for n in table.site.node_ids:
            assert table.by_node[n] == {rr for rr in booked if n in rr.demand}, n
        # the others in planning are filed idle, in node order (the mapper cuts its runs from these lists)
        assert table.idle.get(table.one_cap, []) == [n for n in table.nodes if not table.profiles[n].t]
        assert list(table.idle_nodes()) == [n for n in table.nodes if not table.profiles[n].t]
        # the nodes holding each profile, which busy nodes are asked about by
        held: dict[Profile, set] = {}
        for n in table.site.node_ids:
            prof = table.profiles[n]
            if prof is not table.empty:
                held.setdefault(prof, set()).add(n)
        assert table.holders == held
        # whether a profile's holders hold the same reservations, as the greedy policy keeps it between changes
        # (SlotTable.alike, forgotten only for the profiles of the nodes a change reaches): asked after every step,
        # a kept "alike" is never wrong (its nodes are then scored once); a kept "not alike" may be, where nodes with
        # other reservations have since left the profile, and costs only a score per node
        asker = SimpleNamespace(req=SimpleNamespace(duration=10))
        GreedyHosts().score_groups(list(table.holders.items()), now, asker, table)
        for prof, same in table.alike.items():
            if same:
                assert len({frozenset(table.by_node[n]) for n in table.holders[prof]}) == 1, prof


def free_node_by_node(table: SlotTable, nodes, t: int) -> tuple:
    """What `free_on` adds up, asked of each node in planning on its own (a node over its capacity adds nothing)."""
    free = table.zero
    for n in nodes:
        if n not in table.down:
            free = tuple(x + max(0, y) for x, y in zip(free, table.free_at(n, t)))
    return free


bookings = st.lists(st.tuples(st.sets(st.integers(1, NODES), min_size=1), st.sampled_from(DEMANDS),
                              st.integers(0, 40), st.integers(1, 30)), max_size=12)


def booked_table(kind, booked, alike: bool, down):
    """A slot table (`kind`) of NODES nodes, alike or of two sizes, with the drawn bookings and one node down."""
    sizes = [{"CPU": 100, "Memory": 64} if alike or n % 2 else {"CPU": 200, "Memory": 32} for n in range(NODES)]
    table = kind(Site(("CPU", "Memory"), tuple(sizes)))
    for i, (on, demand, begin, length) in enumerate(booked):
        mapping = {v: n for v, n in enumerate(sorted(on), start=1)}
        lease = SimpleNamespace(id=i, demands=dict.fromkeys(mapping, demand),
                                total_demand=tuple(len(on) * x for x in demand))
        table.add(RR(lease, "vm", begin, begin + length, mapping, {n: demand for n in sorted(on)}, table.next_seq()))
    if down is not None:
        table.take_down(down)
    return table


@settings(max_examples=200, deadline=None)
@given(bookings, st.sets(st.integers(1, NODES)), st.integers(0, 80), st.booleans(), st.sampled_from([None, 2, 5]))
def test_free_on_adds_up_what_each_node_has_free(booked, nodes, t, alike, down):
    """The free room of a set of nodes at an instant, added up per shared profile, is what asking each node gives:
    nodes alike or of two sizes, a node out of planning adding nothing, nodes booked past their capacity nothing."""
    table = booked_table(SlotTable, booked, alike, down)
    assert table.free_on(nodes, t) == free_node_by_node(table, nodes, t)


@settings(max_examples=300, deadline=None)
@given(bookings, st.sets(st.integers(1, NODES)), st.data(), st.booleans(), st.sampled_from([None, 2]),
       st.tuples(st.sampled_from([0, 50, 100, 250, 400, 700]), st.sampled_from([0, 32, 64, 200, 384])))
def test_the_room_a_pass_shares_is_what_each_lease_would_find(booked, nodes, data, alike, down, need):
    """What a pass over the queue shares between waiting leases with image transfers (PreparedTable): the room the
    site has over a stretch fits a need exactly when the site-wide walk finds room for it right at the stretch's
    start, and the free room of a few nodes, added up node by node, is what `free_on` gives."""
    table = booked_table(PreparedTable, booked, alike, down)
    # stretches that begin or end where a booking does, most often
    edges = sorted({x for _, _, begin, span in booked for x in (begin, begin + span)} | {0, 80})
    t = data.draw(st.one_of(st.sampled_from(edges), st.integers(0, 80)))
    length = data.draw(st.one_of(st.sampled_from([e - t for e in edges if e >= t]), st.integers(0, 40)))
    assert fits(need, RoomAhead(table, t).room(length)) is (table.earliest_total_room(t, length, need) == t)
    assert table.free_of(nodes, t) == free_node_by_node(table, nodes, t) == table.free_on(nodes, t)


def _booked(table: SlotTable, start: int, end: int) -> RR:
    mapping = {1: 1}
    lease = SimpleNamespace(id=start, demands={1: (50, 32)}, total_demand=(50, 32))
    rr = RR(lease, "vm", start, end, mapping, {1: (50, 32)}, table.next_seq())
    table.add(rr)
    return rr


@pytest.mark.parametrize("change, gives_back", [
    (lambda table, rr: table.forget(rr, 10), False),       # it ends at its end: only the past comes back
    (lambda table, rr: table.forget(rr, 12), False),
    (lambda table, rr: table.remove(rr), True),             # taken out before it ends
    (lambda table, rr: table.cut(rr, 7), True),             # cut short: [7, 10) comes back
    (lambda table, rr: table.retime(rr, 20, 30), True),
], ids=["ends", "ends-later", "removed", "cut", "moved"])
def test_room_given_back_ahead_is_told_from_an_end(change, gives_back):
    """A waiting lease whose try is at a later instant is tried again when room at or after now comes back, not when
    a reservation reaches its end; the ends that have passed are counted, so that the ends still ahead are known."""
    table = SlotTable(Site.homogeneous(NODES, {"CPU": 100, "Memory": 64}))
    rr = _booked(table, 5, 10)
    gave_back, ahead = table.gave_back, table.ends.bisect_right(50) + table.past_ends
    change(table, rr)
    assert (table.gave_back > gave_back) is gives_back
    if not gives_back:
        assert table.ends.bisect_right(50) + table.past_ends == ahead


@settings(max_examples=500, deadline=None)
@given(st.sets(st.integers(1, 300), min_size=1), st.sampled_from([(16, 16), (2, 1), (4, 3)]), st.randoms())
def test_stretches_are_the_runs_of_consecutive_nodes(nodes, thresholds, rnd):
    """`stretches`: the nodes in order and their maximal runs of consecutive ids, found by halving, are those a
    walk over the ordered nodes gives; none below SPAN_LEAST nodes or with fewer than STRETCH_NODES nodes a run."""
    least, per_stretch = thresholds
    given_order = list(nodes)
    rnd.shuffle(given_order)
    ordered = sorted(nodes)
    runs = []
    for n in ordered:
        if runs and runs[-1][1] == n:
            runs[-1][1] = n + 1
        else:
            runs.append([n, n + 1])
    with patch.object(nodeclasses, "SPAN_LEAST", least), patch.object(nodeclasses, "STRETCH_NODES", per_stretch):
        found = nodeclasses.stretches(given_order)
        if len(nodes) < least or len(runs) > len(nodes) // per_stretch:
            assert found is None
        else:
            assert found == (ordered, [tuple(r) for r in runs])
            values = [None] * 302
            nodeclasses.fill(values, given_order, "x")
            assert [i for i, v in enumerate(values) if v == "x"] == ordered


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 40)), max_size=12), st.integers(0, 5),
       st.sampled_from([1, 4, nodeclasses.SPAN_LEAST]))
def test_same_runs_are_the_groups_of_one_object(runs, start, least):
    """`same_runs`: the stretches of one object (objects that compare by identity, as profiles do), from a given index
    on, are the groups `groupby` makes there, a value's stretch found by tests at a few items or, where the value
    comes again after another in between or fewer than SPAN_LEAST items are left, item by item."""
    objects = [object() for _ in range(4)]
    values = [objects[k] for k, length in runs for _ in range(length)]
    start = min(start, len(values))
    expected, i = [], start
    for value, same in groupby(values[start:]):
        k = len(list(same))
        expected.append((value, i, i + k))
        i += k
    with patch.object(nodeclasses, "SPAN_LEAST", least):
        assert list(nodeclasses.same_runs(values, start)) == expected


@settings(max_examples=200, deadline=None)
@given(bookings, st.sets(st.integers(0, 11)), st.integers(0, 60))
def test_usage_without_some_leases_is_each_nodes_own(booked, gone, a):
    """A node's usage from an instant on as if some leases were gone (what an AR that preempts is placed against),
    built once for the nodes whose other reservations hold the same, is the sum of those reservations on it."""
    table = booked_table(SlotTable, booked, True, None)
    leases = [SimpleNamespace(id=i) for i in gone]
    usage = table.usage_without(leases, a)
    for n in table.site.node_ids:
        own = Profile(table.zero)
        for rr in sorted(table.by_node[n], key=lambda rr: rr.seq):
            if rr.lease.id not in gone and rr.end > a:
                own.add(rr.start, rr.end, rr.demand[n])
        assert (usage(n).t, usage(n).u) == (own.t, own.u), n


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(on_nodes, st.sampled_from(DEMANDS), st.integers(0, 40), st.integers(1, 30), st.booleans()),
                max_size=12), st.sets(st.integers(0, 11)), st.integers(0, 60), st.lists(st.integers(1, NODES)))
def test_usage_without_some_leases_is_each_nodes_own_with_one_vm_each(booked, gone, a, asked):
    """`usage_without` where reservations hold one VM of one demand on each of their nodes (`OneVMEach`: one set of
    reservations is worked out once for every node that holds it) beside reservations whose demand differs from
    node to node: each node's usage is still the sum of its own reservations but those of the leases gone, asked
    in any order."""
    table = SlotTable(Site(("CPU", "Memory"), tuple({"CPU": 200, "Memory": 128} for _ in range(NODES))))
    for i, (on, demand, begin, length, one_each) in enumerate(booked):
        nodes = tuple(sorted(on))
        held = OneVMEach(nodes, demand) if one_each else \
            {n: tuple(x * (1 + n % 2) for x in demand) for n in nodes}
        lease = SimpleNamespace(id=i, demands=dict.fromkeys(range(1, len(nodes) + 1), demand),
                                total_demand=tuple(len(nodes) * x for x in demand))
        table.add(RR(lease, "vm", begin, begin + length, dict(enumerate(nodes, start=1)), held, table.next_seq()))
    usage = table.usage_without([SimpleNamespace(id=i) for i in gone], a)
    for n in asked + list(table.site.node_ids):
        own = Profile(table.zero)
        for rr in sorted(table.by_node[n], key=lambda rr: rr.seq):
            if rr.lease.id not in gone and rr.end > a:
                own.add(rr.start, rr.end, rr.demand[n])
        assert (usage(n).t, usage(n).u) == (own.t, own.u), n
