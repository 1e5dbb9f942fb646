"""The slot table's usage profile: the one-pass earliest-room search that every as-soon-as-possible placement starts
with agrees with testing each possible start on its own (hypothesis), on random usage with several resources."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from optlease.scheduling.slottable import INF, Profile, fits, vadd, vsub

CAP = (4, 8)

usages = st.lists(st.tuples(st.integers(0, 40), st.integers(1, 20), st.integers(0, 3), st.integers(0, 6)),
                  max_size=12)


def profile_of(usage) -> Profile:
    prof = Profile((0, 0))
    for start, length, cpu, mem in usage:
        prof.add(start, start + length, (cpu, mem))
    return prof


def earliest_by_trying(prof: Profile, a: int, length: int, need) -> float:
    """Every start a room can begin at (a, or where usage changes after a), each tested over its whole window."""
    for x in [a, *sorted(t for t in prof.t if t > a)]:
        if prof.fits_between(x, x + length, need, CAP):
            return x
    return INF


@settings(max_examples=300, deadline=None)
@given(usages, st.integers(0, 50), st.integers(1, 30), st.tuples(st.integers(0, 4), st.integers(0, 8)))
def test_earliest_room_is_the_first_start_whose_whole_window_fits(usage, a, length, need):
    prof = profile_of(usage)
    found = prof.earliest_room(a, length, need, CAP)
    assert found == earliest_by_trying(prof, a, length, need)
    if found != INF:
        assert prof.fits_between(found, found + length, need, CAP)


def test_earliest_room_skips_a_gap_too_short_and_never_fits_an_oversized_need():
    prof = profile_of([(0, 10, 4, 0), (12, 10, 4, 0)])   # the whole CPU on [0, 10) and [12, 22); a 2 s gap between
    assert prof.earliest_room(0, 2, (1, 0), CAP) == 10
    assert prof.earliest_room(0, 3, (1, 0), CAP) == 22
    assert prof.earliest_room(5, 3, (0, 8), CAP) == 5    # memory is free throughout
    assert prof.earliest_room(0, 1, (5, 0), CAP) == INF


def widened(prof: Profile) -> Profile:
    """The same usage with a third resource type that nothing uses (the profile's general path, for any number of
    types)."""
    wide = Profile((0, 0, 0))
    wide.t, wide.u = prof.t[:], [(*v, 0) for v in prof.u]
    return wide


@settings(max_examples=300, deadline=None)
@given(usages, usages, st.integers(0, 50), st.integers(1, 30), st.tuples(st.integers(0, 4), st.integers(0, 8)))
def test_two_resource_types_answer_as_any_number_does(usage, taken, a, length, need):
    """Sites of two resource types (most) take written-out paths in adding usage and asking about room: they give
    what the general path gives."""
    prof = profile_of(usage)
    wide = widened(prof)
    for start, span, cpu, mem in taken:       # usage added and taken back by both paths
        for sign in (1, -1):
            prof.add(start, start + span, (cpu, mem), sign)
            wide.add(start, start + span, (cpu, mem, 0), sign)
            assert (prof.t, [(*v, 0) for v in prof.u]) == (wide.t, wide.u)
    wide_need, wide_cap = (*need, 0), (*CAP, 0)
    assert prof.earliest_room(a, length, need, CAP) == wide.earliest_room(a, length, wide_need, wide_cap)
    assert prof.fits_between(a, a + length, need, CAP) == wide.fits_between(a, a + length, wide_need, wide_cap)
    assert prof.first_exceeding(a, need, CAP) == wide.first_exceeding(a, wide_need, wide_cap)
    free = vsub(CAP, prof.at(a))
    assert (*free, 0) == vsub(wide_cap, wide.at(a)) and (*vadd(need, free), 0) == vadd(wide_need, (*free, 0))
    assert fits(need, free) == fits(wide_need, (*free, 0))


def canonical(bookings, horizon: int = 200) -> tuple[list, list]:
    """The breakpoints and usage a profile of these (start, end, vector) bookings must hold, from the usage at every
    instant: a breakpoint wherever usage changes, none before the first use."""
    t, u, last = [], [], (0, 0)
    for x in range(horizon):
        now = (sum(d[0] for s, e, d in bookings if s <= x < e), sum(d[1] for s, e, d in bookings if s <= x < e))
        if now != last:
            t.append(x)
            u.append(now)
            last = now
    return t, u


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 10), st.integers(1, 15), st.integers(0, 3),
                          st.integers(0, 6)), max_size=14))
def test_bookings_at_the_last_breakpoint_and_tails_taken_back_keep_the_profile_exact(steps):
    """A booking that starts where usage last went back to zero, and the tail of the last booking taken back (a lease
    that ends early), change the last breakpoint in place: the profile holds what the usage at every instant says."""
    prof, bookings = Profile((0, 0)), []
    for cut, gap, length, cpu, mem in steps:
        if cut and bookings:
            start, end, d = bookings[-1]
            if end - start > 1:
                at = start + 1 + gap % (end - start - 1)
                prof.add(at, end, d, -1)
                bookings[-1] = (start, at, d)
                assert (prof.t, prof.u) == canonical(bookings)
                continue
        start = (prof.t[-1] if prof.t else 0) + (gap if gap > 5 else 0)     # most often at the last breakpoint
        bookings.append((start, start + length, (cpu, mem)))
        prof.add(start, start + length, (cpu, mem))
        assert (prof.t, prof.u) == canonical(bookings)
