"""The room index (roomindex.RoomIndex) answers busy_groups exactly as the slot table's pass over every busy profile
does (hypothesis): kept attached while random bookings, cancellations, ends and prunes change the table, asked after
each change at random instants for VMs of random sizes."""
from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from optlease.domain.site import Site
from optlease.scheduling.profile import INF, Profile
from optlease.scheduling.records import RR
from optlease.scheduling.roomindex import RoomIndex, room_intervals
from optlease.scheduling.slottable import SlotTable
from test_host_order import apply, ops

CAP = {"CPU": 100, "Memory": 1024}


def answer(groups) -> dict:
    return {id(prof): (prof, frozenset(nodes)) for prof, nodes in groups}


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10), st.lists(st.tuples(ops, st.lists(st.tuples(st.integers(0, 90), st.integers(1, 100)),
                                                            min_size=1, max_size=4)), max_size=6))
def test_the_index_answers_as_the_pass_over_every_profile(size, rounds):
    table = SlotTable(Site.homogeneous(size, CAP))
    table.touched = []
    index = RoomIndex(table)
    booked: list[RR] = []
    pruned = 0
    for steps, questions in rounds:
        for step in steps:
            pruned = apply(table, step, booked, pruned, skip=("down", "up"))
        for t, cpu in questions:
            t = max(t, pruned)   # no question looks before a prune
            need = (cpu, 64)
            table.room = None
            expected = table.busy_groups(need, t)
            table.room = index
            for _ in range(2):   # the first question of a limit is the table's pass, the next the index's
                assert answer(table.busy_groups(need, t)) == answer(expected)


def test_a_change_between_two_questions_is_seen():
    """A node booked, then freed, between questions at one instant: the index follows (a stale answer is caught)."""
    table = SlotTable(Site.homogeneous(3, CAP))
    table.touched = []
    table.room = RoomIndex(table)
    lease = SimpleNamespace(id=1)
    first = RR(lease, "vm", 0, 100, {1: 1}, {1: (100, 1024)}, table.next_seq())
    table.add(first)
    need = (50, 64)
    assert table.busy_groups(need, 150) == table.busy_groups(need, 150)   # now indexed
    later = RR(lease, "vm", 120, 200, {1: 1}, {1: (60, 64)}, table.next_seq())
    table.add(later)
    assert table.busy_groups(need, 150) == []
    assert [sorted(nodes) for _, nodes in table.busy_groups(need, 110)] == [[1]]
    table.remove(later)
    assert [sorted(nodes) for _, nodes in table.busy_groups(need, 150)] == [[1]]
    table.remove(first)
    assert table.busy_groups(need, 150) == []


def test_room_intervals_are_the_maximal_runs_within_the_limit():
    prof = Profile((0, 0))
    prof.add(10, 20, (60, 0))
    prof.add(15, 30, (30, 0))
    prof.add(40, 50, (100, 0))
    # usage: 60 on [10, 15), 90 on [15, 20), 30 on [20, 30), 100 on [40, 50)
    assert room_intervals(prof, (60, 0)) == [(-INF, 15), (20, 40), (50, INF)]
    assert room_intervals(prof, (100, 0)) == [(-INF, INF)]
    assert room_intervals(prof, (20, 0)) == [(-INF, 10), (30, 40), (50, INF)]


def test_a_hole_is_found_at_each_of_its_instants():
    """A node free on [10, 25) between two bookings (a hole of 15 s): asked at every instant from 0 to 50, the index
    finds it exactly where the pass does (a hole is filed by its length, and found among those that begin late
    enough to reach t)."""
    table = SlotTable(Site.homogeneous(2, CAP))
    table.touched = []
    lease = SimpleNamespace(id=1)
    for a, b in ((0, 10), (25, 40)):
        table.add(RR(lease, "vm", a, b, {1: 1}, {1: (100, 1024)}, table.next_seq()))
    need = (100, 1024)
    index = RoomIndex(table)
    for t in range(51):
        table.room = None
        expected = answer(table.busy_groups(need, t))
        table.room = index
        assert [answer(table.busy_groups(need, t)) for _ in range(2)] == [expected, expected]
        assert bool(expected) == (10 <= t < 25 or t >= 40)



def test_a_question_after_the_touched_log_was_emptied_is_answered():
    """The slot table empties its touched log when it grows long (a new `touch_epoch`); the index then files every
    profile afresh, and the question that noticed it is answered from the new filing (it read the old one, whose
    keys were gone, and failed with a KeyError on the fifth day of the Blue month under cpsat)."""
    table = SlotTable(Site.homogeneous(3, CAP))
    table.touched = []
    index = table.room = RoomIndex(table)
    lease = SimpleNamespace(id=1)
    table.add(RR(lease, "vm", 0, 100, {1: 1}, {1: (100, 1024)}, table.next_seq()))
    need = (50, 64)
    assert table.busy_groups(need, 150) == table.busy_groups(need, 150)   # now indexed
    table.touched.clear()
    table.touch_epoch += 1   # what SlotTable._touch does past TOUCHED_MOST
    table.add(RR(lease, "vm", 0, 200, {2: 1}, {2: (100, 1024)}, table.next_seq()))
    table.room = None
    expected = answer(table.busy_groups(need, 150))
    table.room = index
    assert answer(table.busy_groups(need, 150)) == expected
    assert [sorted(nodes) for _, nodes in expected.values()] == [[1]]
