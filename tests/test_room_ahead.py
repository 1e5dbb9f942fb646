"""The queue pass's and the search's quick refusals answer as the full questions do (hypothesis, on random tables):
the site's room over a window from one instant (`RoomAhead.fits`) against `earliest_total_room`, the VMs the nodes
could hold over a window (`SlotTable.holds_over`) against each node's own count, and a placement the search keeps
(`VMScheduler._too_few_hold`) never where that count is too small."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from optlease.domain.site import Site
from optlease.scheduling.records import RR
from optlease.scheduling.roomahead import RoomAhead
from optlease.scheduling.slottable import SlotTable

from test_host_order import SIZES, apply, lease_alike, mapper_after, ops

SHAPES = [(25, 64), (50, 256), (100, 1024), (100, 0), (30, 100)]


def table_after(size: int, steps: list) -> tuple[SlotTable, int]:
    """A site of `size` nodes alike after the given changes, and the instant it was pruned to."""
    table = SlotTable(Site.homogeneous(size, SIZES[0]))
    booked: list[RR] = []
    pruned = 0
    for step in steps:
        pruned = apply(table, step, booked, pruned, most=100)
    return table, pruned


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), ops, st.integers(0, 80),
       st.lists(st.tuples(st.integers(0, 70), st.integers(0, 1300), st.integers(0, 8000)), min_size=1, max_size=8))
def test_room_over_a_window_is_what_the_earliest_room_says(size, steps, t, asks):
    """`RoomAhead(table, t).fits(need, length)` is `earliest_total_room(t, length, need) == t`, asked in any order of
    lengths (its walk is extended as asked)."""
    table, pruned = table_after(size, steps)
    t = max(t, pruned)
    ahead = RoomAhead(table, t)
    # besides the asks drawn, windows that end at each of the site's next changes, with needs at the edge of fitting
    edges = [b - t for b in table.total.t if b > t][:6]
    asks = asks + [(length, *need) for length in edges
                   for need in (RoomAhead(table, t).room(length), RoomAhead(table, t).room(length + 1))]
    for length, cpu, memory in asks:
        need = (cpu, memory)
        assert ahead.fits(need, length) == (table.earliest_total_room(t, length, need) == t), (length, need)


def held_by_each(table: SlotTable, t: int, length: int, shape: tuple) -> int:
    """What the nodes in planning could hold over [t, t + length), each node's own count, added up."""
    held = 0
    for node in table.nodes:
        if node in table.down:
            continue
        prof, cap = table.profiles[node], table.caps[node]
        k = 0
        while k < 64 and prof.fits_between(t, t + length, tuple((k + 1) * x for x in shape), cap):
            k += 1
        held += k
    return held


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 12), ops, st.integers(0, 80), st.integers(1, 70), st.sampled_from(SHAPES[:3] + SHAPES[4:]),
       st.one_of(st.none(), st.integers(1, 40)))
def test_vms_held_over_a_window_are_each_nodes_own_count(size, steps, t, length, shape, most):
    """`holds_over` counts, per profile, what each node of the site could hold over the window: the sum of each
    node's own count (counted up to `most`, when given); None with nodes out of planning."""
    table, pruned = table_after(size, steps)
    t = max(t, pruned)
    held = table.holds_over(t, length, shape, most)
    if table.down:
        assert held is None
        return
    each = held_by_each(table, t, length, shape)
    if most is None:
        assert held == each
    else:
        assert (held >= most) == (each >= most) and (held >= most or held == each)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 14), ops, st.integers(0, 80), st.integers(1, 60), st.integers(1, 40),
       st.sampled_from(SHAPES), st.booleans(), st.integers(1, 60))
def test_a_placement_the_search_keeps_has_nodes_that_hold_it(size, steps, start, duration, vms, shape, strictend,
                                                             window):
    """Where the mapper places a lease's VMs alike from `start` to an end at least `window` away (a placement the
    search keeps: `VMScheduler.asap`), the site's nodes could hold them all over that window: `_too_few_hold`'s
    refusal never drops such a placement."""
    table, mapper, start = mapper_after(size, steps, start)
    window = min(window, duration)
    lease = lease_alike(vms, shape, duration, cache={})
    mapping, end, _ = mapper.map(lease, start, start + duration, strictend)
    held = table.holds_over(start, window, shape, vms)
    if mapping is not None and end - start >= window:
        assert held >= vms
