"""The queue's index (`WaitIndex`): after random arrivals (at the end and in the middle), departures (some of leases
it does not hold), leases going back to where they stood, and rebuilds, it holds the queue's leases in order, and the leases it walks to from any lease for
a random room are exactly those of the queue from there on that a lease-by-lease walk keeps: the suspended ones and
those whose need is within the room over their window."""
from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from optlease.scheduling.profile import fits
from optlease.scheduling.waitindex import WaitIndex, order, position


def lease(i: int, arrival: int) -> SimpleNamespace:
    return SimpleNamespace(id=i, req=SimpleNamespace(arrival=arrival))


def room_of(steps: tuple):
    """A room that shrinks as the window grows (what the site has free over a longer stretch is never more)."""
    def room(window: int) -> tuple:
        return tuple(max(0, v - window * s) for v, s in zip(steps[:2], steps[2:]))
    return room


def check(index: WaitIndex, held: dict, bounds: dict, rooms: list) -> None:
    leases = sorted(held.values(), key=order)
    assert len(index) == len(leases)
    assert [x for x in index.slots[:index.used] if x is not None] == leases
    for steps in rooms:
        room = room_of(steps)
        could = [x for x in leases if bounds[x.id] is None or fits(bounds[x.id][0], room(bounds[x.id][1]))]
        for i, x in enumerate(leases):
            assert list(index.candidates(order(x), room)) == [y for y in could if order(y) >= order(x)]
            assert position(leases, x) == i
        assert list(index.candidates((10 ** 9, 0), room)) == []


bounds_st = st.one_of(st.none(), st.tuples(st.tuples(st.integers(0, 9), st.integers(0, 9)), st.integers(0, 9)))
rooms_st = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12), st.integers(0, 2), st.integers(0, 2)),
                    min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["add", "add", "add", "remove", "back", "stray", "rebuild"]),
                              st.integers(0, 40), bounds_st), max_size=90), rooms=rooms_st)
def test_the_index_walks_to_exactly_the_leases_that_could_pass(ops, rooms):
    bounds: dict = {}
    index, bound_of = WaitIndex(), (lambda x: bounds[x.id])
    held: dict = {}
    gone: dict = {}
    for n, (op, arrival, bound) in enumerate(ops):
        if op == "add":
            x = lease(n, arrival)
            bounds[n] = bound
            held[n] = x
            index.add(x, bound_of)
        elif op == "remove" and held:
            x = held.pop(sorted(held)[arrival % len(held)])
            gone[x.id] = x
            index.remove(x)
        elif op == "back" and gone:
            x = gone.pop(sorted(gone)[arrival % len(gone)])     # (a lease suspended, requeued: to its place)
            held[x.id] = x
            index.add(x, bound_of)
        elif op == "stray":
            index.remove(lease(n, arrival))     # (one it never held: nothing changes)
        elif op == "rebuild":
            index.rebuild(sorted(held.values(), key=order), bound_of)
        check(index, held, bounds, rooms)


def test_the_walk_passes_over_leases_short_of_room_and_stops_at_suspended_ones():
    bounds = {1: ((5, 5), 0), 2: ((1, 1), 4), 3: None, 4: ((2, 2), 1)}
    index, bound_of = WaitIndex(), (lambda x: bounds[x.id])
    leases = [lease(i, i) for i in (1, 2, 3, 4)]
    for x in leases:
        index.add(x, bound_of)
    room = room_of((3, 3, 1, 1))     # 3 free now, 2 over a window of 1, none from a window of 3 on
    assert [x.id for x in index.candidates(order(leases[0]), room)] == [3, 4]
    index.remove(leases[2])
    assert [x.id for x in index.candidates(order(leases[0]), room)] == [4]
