"""When a waiting lease's image can first be on some node, and by which ways (`ImageTransfers.first_ready`, which
the queue's keys ask for every image at each pass, answered at once where a cache holds the image), is what
working it out from every way gives, and the earliest time `earliest` gives any node; and `earliest` (a multicast
ride given to every node at once) is what taking each way in turn for each node gives: random workloads with images
of several sizes, caches on and off (evicting, or not), unicast and multicast, piggybacking, ARs, immediate leases,
suspensions and resumes (in place and elsewhere over the link), premature ends."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optlease.domain.lease import LeaseState
from optlease.scheduling.leasesched import LeaseScheduler
from optlease.scheduling.preparation import ImageTransfers
from optlease.scheduling.prepplan import FROM_CACHE, PIGGYBACK, Earliest, Ready
from tests.test_image_transfers import preparations, run, workloads


def worked_out(prep: ImageTransfers, lease, now: int) -> tuple[int, tuple]:
    """`first_ready` from its definition: the earliest of a transfer of its own in the link's first free stretch
    (way 0), the caches holding it (-1: now) and the transfers of it not begun that it may ride on (their ids), and
    every way that brings it then."""
    image = lease.req.software.id
    length = prep.duration(lease, lease.numnodes)
    ways = [(prep.first_gap(now, length) + length, 0)]
    if prep.caches is not None and prep.caches.holding(image):
        ways.append((now, -1))
    if prep.opts.avoid_redundant:
        ways += [(t.end, t.tid) for t in prep.open.get(image, ()) if t.end > now]
    first = min(t for t, _ in ways)
    return first, tuple(sorted(way for t, way in ways if t == first))


def walked(prep: ImageTransfers, lease, now: int) -> Earliest:
    """`earliest` as it was first written: every node from its own transfer's end, the nodes whose caches hold the
    image from now, then each transfer of it not begun, in turn, to the nodes it may reach (a multicast: every
    node) where it ends strictly sooner."""
    image = lease.req.software.id
    length = prep.duration(lease, lease.numnodes)
    start = prep.first_gap(now, length)
    times = dict.fromkeys(prep.table.nodes, start + length)
    ready = Earliest(times, start, {})
    if prep.caches is not None:
        for n in prep.caches.holding(image):
            times[n] = now
            ready.how[n] = Ready(now, FROM_CACHE)
    if prep.opts.avoid_redundant:
        for t in prep.open.get(image, ()):
            if t.end <= now:
                continue
            nodes = list(times) if prep.opts.mechanism == "multicast" else {p for _, _, p in t.feeds}
            for n in nodes:
                if n in times and t.end < times[n]:
                    times[n] = t.end
                    ready.how[n] = Ready(t.end, PIGGYBACK, on=t)
    return ready


def reached_first(prep: ImageTransfers, lease, now: int, ready: Earliest) -> None:
    """The nodes `nodes_by` names for the ways `first_ready` gives (None: every node) are those `earliest` has the
    image on by then."""
    first, ways = prep.first_ready(lease, now)
    nodes = prep.nodes_by(lease, ways)
    named = set(ready.times) if nodes is None else set(nodes) & set(ready.times)
    assert named == {n for n, t in ready.times.items() if t <= first}, (lease, now, ways)


def checked(runner, *args, **opts) -> int:
    """Run `runner` with, before every pass over the queue, each queued lease's `first_ready` and `earliest`
    compared with what working them out gives; returns how many were compared."""
    process_queue = LeaseScheduler.process_queue
    asked = [0]

    def comparing(self, now):
        if self.prep is not None:
            for lease in self.queue:
                if lease.state is LeaseState.QUEUED and lease.req.software is not None:
                    found = self.prep.first_ready(lease, now)
                    assert found == worked_out(self.prep, lease, now), (lease.id, now)
                    ready = self.prep.earliest(lease, now)
                    assert ready == walked(self.prep, lease, now), (lease.id, now)
                    assert found[0] == min(ready.times.values()), (lease.id, now)
                    reached_first(self.prep, lease, now, ready)
                    asked[0] += 1
        return process_queue(self, now)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LeaseScheduler, "process_queue", comparing)
        runner(*args, **opts)
    return asked[0]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=workloads(), prep=preparations, instant=st.booleans(), migration=st.sampled_from(["no", "yes"]),
       backfilling=st.sampled_from(["off", "aggressive", "conservative"]))
def test_the_first_ready_time_of_an_image_is_what_every_way_gives(reqs, prep, instant, migration, backfilling):
    """(`instant`: every transfer takes no time, `force-imagetransfer-time: 0`, so that its own transfer may bring an
    image as soon as a cache does.)"""
    if instant:
        prep = replace(prep, force_time=0)
    checked(run, reqs, prep, migration=migration, backfilling=backfilling)


def test_the_comparison_sees_cached_images_queued_leases_wait_for():
    """The property compares answers where a cache holds the image a queued lease waits for (the shortcut), on a
    workload made to have them: leases of one image, more than the nodes can run at once, caches on."""
    from optlease.domain.lease import LeaseKind, LeaseRequest
    from optlease.scheduling.preparation import PreparationOptions
    from tests.test_image_transfers import IMAGES, VM

    reqs = [LeaseRequest(i, LeaseKind.BEST_EFFORT, 60 * i, 600, (VM,), software=IMAGES[i % 2]) for i in range(1, 9)]
    prep = PreparationOptions("imagetransfer", mechanism="multicast", reuse="image-caches", cache_size=1024)
    hits = []
    first_ready = ImageTransfers.first_ready

    def noting(self, lease, now):
        found = first_ready(self, lease, now)
        hits.append(found[1] == (-1,))
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ImageTransfers, "first_ready", noting)
        assert checked(run, reqs, prep, 2, backfilling="aggressive") > 0
    assert any(hits)


def test_an_image_every_cache_has_evicted_is_cached_nowhere():
    """Found by the property above with a shortcut that took an image some cache had ever held for one held now:
    lease 2's image (2,048 MB) evicts lease 4's (300 MB) from the one cache of 2,500 MB that held it, and lease 3,
    queued at 240 s for that image, must wait for a transfer of its own (under way at 270 s), not start at once."""
    from optlease.domain.lease import LeaseKind, LeaseRequest
    from optlease.scheduling.preparation import PreparationOptions
    from tests.test_image_transfers import IMAGES, VM

    small, large = IMAGES[0], IMAGES[3]
    reqs = [LeaseRequest(1, LeaseKind.BEST_EFFORT, 180, 60, (VM,), software=IMAGES[1]),
            LeaseRequest(2, LeaseKind.AR, 0, 60, (VM,), start=120, software=large),
            LeaseRequest(3, LeaseKind.BEST_EFFORT, 240, 60, (VM,), software=small),
            LeaseRequest(4, LeaseKind.BEST_EFFORT, 0, 60, (VM,), software=small)]
    prep = PreparationOptions("imagetransfer", bandwidth=10, mechanism="unicast", avoid_redundant=False,
                              force_time=30, reuse="image-caches", cache_size=2500)
    assert checked(run, reqs, prep, migration="no", backfilling="off") > 0


@settings(max_examples=400, deadline=None)
@given(items=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 12), st.sets(st.integers(1, 4), min_size=1)),
                      max_size=6),
       holders=st.sets(st.integers(1, 4)), mechanism=st.sampled_from(["unicast", "multicast"]),
       force_time=st.sampled_from([0, 4, 9]), width=st.integers(1, 3), now=st.integers(0, 20))
def test_earliest_is_each_way_taken_in_turn_for_each_node(items, holders, mechanism, force_time, width, now):
    """`earliest` and `first_ready` of an image some caches hold and several transfers of which are booked and not
    begun (ending at, before or after its own transfer would: the link in the making may hold overlapping items),
    against taking each way in turn for each node, and working the first out from every way; and the nodes
    `nodes_by` names for the first ways."""
    from types import SimpleNamespace

    from optlease.domain.lease import DiskImage
    from optlease.domain.site import Site
    from optlease.eventlog import EventLog
    from optlease.scheduling.preparation import PreparationOptions, PreparedTable, Transfer
    from optlease.scheduling.records import TRANSFER
    from tests.test_image_transfers import ORIGIN

    table = PreparedTable(Site.parse_resources("4 CPU:100 Memory:1024"))
    prep = ImageTransfers(table, PreparationOptions("imagetransfer", mechanism=mechanism, force_time=force_time,
                                                    reuse="image-caches"), EventLog(ORIGIN, "INFO", None))
    image = DiskImage("img.img", 300)
    owner = SimpleNamespace(id=0)
    for i, (start, span, nodes) in enumerate(items, start=1):
        t = Transfer(owner, TRANSFER, start, start + span, {}, {}, table.next_seq())
        t.image, t.size, t.tid, t.copies = image.id, image.size, i, 1
        t.feeds = [(owner, v, p) for v, p in enumerate(sorted(nodes), start=1)]
        prep._put_on(t)
        prep.open.setdefault(image.id, []).append(t)
    for n in holders:
        prep.caches.nodes[n].admit(image.id, image.size, 0, 0)
    lease = SimpleNamespace(req=SimpleNamespace(software=image, numnodes=width), numnodes=width, cache={})
    ready = prep.earliest(lease, now)
    assert ready == walked(prep, lease, now)
    assert prep.first_ready(lease, now) == worked_out(prep, lease, now)
    reached_first(prep, lease, now, ready)
