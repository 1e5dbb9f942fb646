"""The VM scheduler's start candidates with a floor (VMScheduler._candidates_above) are the walked candidates less
those below the floor when they come (hypothesis): on random tables, with random firsts, the floor raised at random
points of the walk."""
from __future__ import annotations

import io
from datetime import datetime
from types import SimpleNamespace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from optlease.domain.site import Site
from optlease.eventlog import EventLog
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.profile import INF
from optlease.scheduling.records import RR
from optlease.scheduling.slottable import SlotTable
from optlease.scheduling.vmsched import VMScheduler


@settings(max_examples=500, deadline=None)
@example(bookings=[(1, 0, 10)], now=10, offsets=[-5], raises=[])   # an end at now itself is no candidate
@example(bookings=[(1, 0, 20), (2, 0, 30), (3, 0, 40)], now=0, offsets=[0], raises=[(0, 25)])
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 60), st.integers(1, 30)), max_size=12),
       st.integers(0, 40), st.lists(st.integers(-5, 45), min_size=1, max_size=3),
       st.lists(st.tuples(st.integers(0, 6), st.integers(0, 100)), max_size=4))
def test_a_floor_skips_exactly_the_candidates_below_it(bookings, now, offsets, raises):
    table = SlotTable(Site.homogeneous(3, {"CPU": 100, "Memory": 1024}))
    for k, (node, a, length) in enumerate(bookings):
        table.add(RR(SimpleNamespace(id=k), "vm", a, a + length, {1: node}, {node: (10, 10)}, table.next_seq()))
    vm = VMScheduler(table, SchedulingOptions(), Policies(), EventLog(datetime(2006, 11, 25), "STATUS", io.StringIO()))
    firsts = {now + d for d in offsets}
    walked = list(vm._candidates(now, firsts, True, None))
    at = dict(raises)   # after the k-th candidate, the floor goes up to this (where higher)
    floor, got = [-INF], []
    for t in vm._candidates(now, firsts, True, None, floor):
        got.append(t)
        if len(got) - 1 in at:
            floor[0] = max(floor[0], at[len(got) - 1])
    expected, low = [], -INF
    for t in walked:
        if t < low:
            continue
        expected.append(t)
        if len(expected) - 1 in at:
            low = max(low, at[len(expected) - 1])
    assert got == expected
