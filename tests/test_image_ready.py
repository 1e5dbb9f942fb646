"""When a waiting lease's image can first be on some node, and by which ways (`ImageTransfers.first_ready`, which
the queue's keys ask for every image at each pass, answered at once where a cache holds the image), is what
working it out from every way gives, and the earliest time `earliest` gives any node: random workloads with images
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


def checked(runner, *args, **opts) -> int:
    """Run `runner` with, before every pass over the queue, each queued lease's `first_ready` compared with what
    working it out gives; returns how many were compared."""
    process_queue = LeaseScheduler.process_queue
    asked = [0]

    def comparing(self, now):
        if self.prep is not None:
            for lease in self.queue:
                if lease.state is LeaseState.QUEUED and lease.req.software is not None:
                    found = self.prep.first_ready(lease, now)
                    assert found == worked_out(self.prep, lease, now), (lease.id, now)
                    assert found[0] == min(self.prep.earliest(lease, now).times.values()), (lease.id, now)
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
