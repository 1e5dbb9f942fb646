"""The room free on a set of nodes at an instant (`PreparedTable.free_of`), which a pass over the queue asks for many
sets at one instant (each image's caching nodes, each suspended lease's own nodes), is what asking each node gives,
whatever changed in between: bookings added, taken out, cut short, ended at an instant (their nodes pruned), the
table pruned, a node out of planning and back (what it answers from must follow every change: a version that kept
each profile's answer at an instant while the table was unchanged was measured slower, and taken out)."""
from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from optlease.scheduling.preparation import PreparedTable
from optlease.scheduling.records import RR
from tests.test_shared_profiles import DEMANDS, NODES, booked_table, bookings, free_node_by_node

asks = st.lists(st.tuples(st.sets(st.integers(1, NODES), min_size=4), st.integers(0, 80)), min_size=1, max_size=6)
changes = st.lists(st.one_of(
    st.tuples(st.just("book"), st.sets(st.integers(1, NODES), min_size=1), st.sampled_from(DEMANDS),
              st.integers(0, 60), st.integers(1, 30)),
    st.tuples(st.sampled_from(["remove", "cut", "end"]), st.integers(0, 20)),
    st.tuples(st.just("prune"), st.integers(0, 60)),
    st.tuples(st.sampled_from(["down", "up"]), st.integers(1, NODES))), max_size=10)


def change(table: PreparedTable, live: list, step: tuple) -> None:
    """One change to the table (`live`: its reservations)."""
    what = step[0]
    if what == "book":
        _, on, demand, begin, length = step
        mapping = {v: n for v, n in enumerate(sorted(on), start=1)}
        lease = SimpleNamespace(id=len(live), demands=dict.fromkeys(mapping, demand),
                                total_demand=tuple(len(on) * x for x in demand))
        rr = RR(lease, "vm", begin, begin + length, mapping, {n: demand for n in sorted(on)}, table.next_seq())
        table.add(rr)
        live.append(rr)
    elif what in ("remove", "cut", "end") and live:
        rr = live[step[1] % len(live)]
        if what == "cut" and rr.end - rr.start > 1:
            table.cut(rr, rr.start + (rr.end - rr.start) // 2)
        elif what == "remove":
            live.remove(rr)
            table.remove(rr)
        elif what == "end":
            live.remove(rr)
            table.forget(rr, rr.end)
    elif what == "prune":
        table.prune(step[1])
    elif what == "down":
        table.take_down(step[1])
    elif what == "up":
        table.bring_up(step[1])


@settings(max_examples=400, deadline=None)
@given(booked=bookings, asked=asks, steps=changes, alike=st.booleans())
def test_the_room_free_on_many_sets_at_one_instant_is_each_nodes_own_after_any_change(booked, asked, steps, alike):
    """(Each change is followed by the same questions: sets of nodes at instants, some asked at one instant.)"""
    table = booked_table(PreparedTable, booked, alike, None)
    live = list(table.reservations)
    for step in [None, *steps]:
        if step is not None:
            change(table, live, step)
        for nodes, t in asked:
            assert table.free_of(nodes, t) == free_node_by_node(table, nodes, t)
