"""Disk-image transfers in the CP-SAT round (`mapper: cpsat` with `lease-preparation: imagetransfer`;
models/cpsat-round.md, *Image transfers*).

A hand-made scenario where the round provably saves a transfer by starting a lease on the node whose cache holds
its image, a little later than greedy starts it elsewhere; the model's link on its own (own transfers never
overlap, fixed ones are respected, a lease rides on another's multicast); and random workloads under cpsat with
images of random sizes, unicast and multicast, caches on and off, premature ends, ARs and best-effort leases: every
schedule passes the checker (link bandwidth, image ready before each VM, cache size) and nothing starts before its
image.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optlease.checker import check_schedule
from optlease.domain.lease import DiskImage, LeaseKind, LeaseRequest, LeaseState
from optlease.domain.site import Site
from optlease.scheduling.cpsat.solve import SolveOptions, solve_round
from optlease.scheduling.cpsat.transfers import LeaseImage, Link
from optlease.scheduling.preparation import PreparationOptions
from optlease.scheduling.snapshot import LeaseSnapshot, Outcome, Phase, Policy, RoundSnapshot
from test_image_transfers import VM, document, run, workloads

BE = LeaseKind.BEST_EFFORT
X = DiskImage("x.img", 1250)   # 100 s at 100 Mbit/s
CACHES = PreparationOptions("imagetransfer", mechanism="multicast", reuse="image-caches")


def lease(i, arrival, duration, image=X, n=1):
    return LeaseRequest(i, BE, arrival, duration, (VM,) * n, software=image)


def starts(result):
    return {x.id: next((h.start, tuple(h.mapping.values())) for h in x.held if h.kind == "vm") for x in result.leases}


def test_the_round_waits_for_the_node_that_caches_the_image_instead_of_sending_it_again():
    """Two nodes, one image of 100 s on the link. Lease 1 (arrives at 0) gets the image by [0, 100) and runs on
    node 1 from 100 to 2,150; node 1's cache keeps the image. Lease 2 (arrives at 2,000, one hour, weight 1):
    greedy's earliest start is node 2 at 2,100 after a second transfer [2,000, 2,100); node 1, which caches the
    image, is free at 2,150. In the round's objective the transfer costs 100 s x 10 = 1,000 and the 50 s more
    waiting of a lease of weight 1 costs 50 x 10 = 500, so the round starts lease 2 on node 1 at 2,150 from the
    cache: one transfer instead of two."""
    reqs = [lease(1, 0, 2050), lease(2, 2000, 3600)]
    greedy, _ = run(reqs, CACHES, nodes=2)
    assert greedy.images.transfers == 2 and greedy.images.figures()["cache_hits"] == 0
    assert starts(greedy)[2] == (2100, (2,))
    cpsat, log = run(reqs, CACHES, nodes=2, mapper="cpsat")
    assert starts(cpsat) == {1: (100, (1,)), 2: (2150, (1,))}
    figures = cpsat.images.figures()
    assert figures["image_transfers"] == 1 and figures["transfer_volume_mb"] == 1250
    assert figures["cache_hits"] == 1 and figures["cache_misses"] == 1
    assert log.count("Starting image transfer") == 1
    assert check_schedule(document(cpsat)) == []


def test_when_waiting_costs_more_than_the_transfer_the_round_keeps_greedys_plan():
    """The same with node 1 free at 2,250 instead: 150 s more waiting (1,500) outweighs the transfer (1,000)."""
    reqs = [lease(1, 0, 2150), lease(2, 2000, 3600)]
    cpsat, _ = run(reqs, CACHES, nodes=2, mapper="cpsat")
    assert starts(cpsat)[2] == (2100, (2,)) and cpsat.images.transfers == 2
    assert check_schedule(document(cpsat)) == []


def one_round(leases, link, nodes=2):
    site = Site.parse_resources(f"{nodes} CPU:100 Memory:1024")
    snap = RoundSnapshot(0, site, tuple(leases), Policy(non_schedulable_interval=0), link)
    return solve_round(snap, SolveOptions(workers=1, time_limit=20))


def test_own_transfers_never_overlap_and_wait_for_the_fixed_ones():
    """Three fresh leases of different images on three free nodes, the link busy on [0, 50): their transfers of
    100, 200 and 300 s go one after another from 50, the shortest first (the wait is a completion-time sum), and
    each lease starts when its transfer ends: at 150, 350 and 650."""
    imgs = {1: LeaseImage(100, "a"), 2: LeaseImage(200, "b"), 3: LeaseImage(300, "c")}
    leases = [LeaseSnapshot(LeaseRequest(i, BE, 0, 3600, (VM,)), Phase.QUEUED) for i in imgs]
    plan = one_round(leases, Link(False, ((0, 50),), imgs), nodes=3)
    got = plan.by_id
    assert sorted((got[i].transfer_start, got[i].start) for i in imgs) == [(50, 150), (150, 350), (350, 650)]
    assert plan.stats.status == "OPTIMAL"


def test_a_lease_on_a_cached_node_needs_no_transfer_and_a_multicast_feeds_two_leases():
    """Lease 1's image is cached on node 1 (free): it starts at 0 there with no transfer. Leases 2 and 3 share
    image "b" (multicast, sharing on): one transfer [0, 100) feeds both, which start at 100."""
    imgs = {1: LeaseImage(100, "a", {1: 0}), 2: LeaseImage(100, "b"), 3: LeaseImage(100, "b")}
    leases = [LeaseSnapshot(LeaseRequest(i, BE, 0, 3600, (VM,)), Phase.QUEUED) for i in imgs]
    plan = one_round(leases, Link(False, (), imgs, share=True), nodes=3)
    got = plan.by_id
    assert (got[1].start, got[1].nodes, got[1].transfer_start) == (0, (1,), None)
    assert got[2].start == got[3].start == 100
    assert sorted(x for x in (got[2].transfer_start, got[3].transfer_start) if x is not None) == [0]
    assert plan.stats.objective == plan.stats.hint_objective or plan.stats.status == "OPTIMAL"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=workloads(), prep=st.builds(
    PreparationOptions, mode=st.just("imagetransfer"), bandwidth=st.sampled_from([10, 100, 1000]),
    mechanism=st.sampled_from(["unicast", "multicast"]), avoid_redundant=st.booleans(),
    force_time=st.sampled_from([None, None, 30]), reuse=st.sampled_from(["none", "image-caches"]),
    cache_size=st.sampled_from([None, 1024, 2500])), migration=st.sampled_from(["no", "yes"]),
    nodes=st.sampled_from([2, 4]))
def test_every_cpsat_schedule_with_transfers_is_safe(reqs, prep, migration, nodes):
    """Two nodes crowd the leases, so that rounds move bookings (and their transfers) often."""
    result, _ = run(reqs, prep, nodes=nodes, mapper="cpsat", migration=migration)
    assert [str(v) for v in check_schedule(document(result))] == []
    for x in result.leases:
        assert x.state in (LeaseState.DONE, LeaseState.REJECTED), (x.id, x.state)
        fed = [h for h in x.held if h.kind == "transfer"]
        first = next((h for h in x.held if h.kind == "vm"), None)
        if first is not None:   # nothing starts before a transfer that fed it has ended
            assert all(h.end <= first.start for h in fed if set(h.mapping.values()) & set(first.mapping.values()))

