"""The repository link's first free stretch (`RepositoryLink.first_gap`), found from its free stretches between
items, is the one walking its items finds: random links (transfers and copies, some of no length, some overlapping
as a link in the making may hold them), instants and lengths, with items taken off and put back."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from optlease.scheduling.imagelink import RepositoryLink
from optlease.scheduling.preparation import PreparationOptions
from optlease.scheduling.records import RR

OWNER = object()


def walked(link: RepositoryLink, t: int, length: int) -> int:
    """The first free stretch by walking every item, as the link's search was first written."""
    found = t
    for _, _, x in link.link:
        if x.end <= found:
            continue
        if x.start >= found + length:
            break
        found = x.end
    return found


@settings(max_examples=400, deadline=None)
@given(items=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 15)), max_size=14),
       asks=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 20)), min_size=1, max_size=8),
       off=st.lists(st.integers(0, 13), max_size=4))
def test_the_first_free_stretch_is_the_one_walking_the_link_finds(items, asks, off):
    link = RepositoryLink()
    link.opts = PreparationOptions("imagetransfer")
    link._init_link()
    rrs = []
    for seq, (start, span) in enumerate(items):
        rr = RR(OWNER, "migrate", start, start + span, {}, {}, seq)
        link.copy_on(rr)
        rrs.append(rr)
    for t, length in asks:
        assert link.first_gap(t, length) == walked(link, t, length)
    for i in off:
        if i < len(rrs):
            link.copy_off(rrs[i])
            for t, length in asks:
                assert link.first_gap(t, length) == walked(link, t, length)
                assert link.first_gap(t, length, {rrs[-1]}) == walked_without(link, t, length, rrs[-1])


def walked_without(link: RepositoryLink, t: int, length: int, gone) -> int:
    found = t
    for _, _, x in link.link:
        if x.end <= found or x is gone:
            continue
        if x.start >= found + length:
            break
        found = x.end
    return found
