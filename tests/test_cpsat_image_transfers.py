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
from optlease.scheduling.cpsat.transfers import LeaseImage, Link, link_price
from optlease.scheduling.preparation import PreparationOptions
from optlease.scheduling.snapshot import LeaseSnapshot, Outcome, Phase, Policy, RoundSnapshot
from test_image_transfers import VM, document, run, workloads

BE = LeaseKind.BEST_EFFORT
AR = LeaseKind.AR
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


def test_a_transfer_that_begins_at_the_rounds_instant_is_still_the_rounds_to_spare():
    """Three nodes, 100 s images. Lease 1 gets image x by [0, 100) and runs on node 1, booked until 3,100 but
    ending at 2,090. Lease 3 (image y, at 1,990) takes the link [1,990, 2,090); lease 2 (image x, at 2,000) gets a
    transfer behind it, [2,090, 2,190), to start on node 3 at 2,190: node 1, which caches x, is booked until 3,100.
    At 2,090 lease 1 ends and lease 2's transfer begins. The step starts what begins at an instant before the
    round looks, so the round once found that transfer under way and lease 2 fixed; it has sent nothing yet, and
    the round now moves lease 2 to node 1 at once, from its cache: two transfers instead of greedy's three."""
    Y = DiskImage("y.img", 1250)
    reqs = [LeaseRequest(1, BE, 0, 3000, (VM,), software=X, real_duration=1990), lease(3, 1990, 3600, image=Y),
            lease(2, 2000, 3600)]
    greedy, _ = run(reqs, CACHES, nodes=3)
    assert greedy.images.transfers == 3 and starts(greedy)[2] == (2190, (3,))
    cpsat, _ = run(reqs, CACHES, nodes=3, mapper="cpsat")
    assert_safe(cpsat)
    assert starts(cpsat)[2] == (2090, (1,))
    figures = cpsat.images.figures()
    assert figures["image_transfers"] == 2 and figures["cache_hits"] == 1


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


def test_a_second_of_the_link_costs_the_weight_of_the_leases_that_need_it():
    """Node 1 caches lease 2's image and is busy until 250; node 2 is free. Lease 2 (an hour: weight 1) may start
    on node 2 at 100 after its own 100 s transfer, or on node 1 at 250 from the cache: 150 s more waiting, 1,500.
    A link second weighed 1 (one second of a weight-1 lease: 1,000 for the transfer) sends the image; weighed as
    the leases that need the link weigh on average (here 2: `link_price` of weights 1 and 3), 2,000 > 1,500: the
    round waits for the cached node."""
    busy = LeaseSnapshot(LeaseRequest(9, AR, 0, 250, (VM,), start=0), Phase.RUNNING, nodes=(1,), since=0)
    queued = LeaseSnapshot(LeaseRequest(2, BE, 0, 3600, (VM,)), Phase.QUEUED)
    imgs = {2: LeaseImage(100, "x", {1: 0})}
    assert link_price([1, 3]) == 2 and link_price([]) == 1 and link_price([0]) == 1
    for price, want in ((1, (100, (2,), 0)), (2, (250, (1,), None))):
        got = one_round([busy, queued], Link(False, (), imgs, price=price)).by_id[2]
        assert (got.start, got.nodes, got.transfer_start) == want, price


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
    assert_safe(result)


def assert_safe(result):
    """The checker finds nothing, every lease ended or was refused, and no run starts before the transfer that fed
    it has ended: a transfer feeds the first run held after it on its nodes (a lease an AR sends back to the queue
    as it starts gets a transfer of its own again for its next run)."""
    assert [str(v) for v in check_schedule(document(result))] == []
    for x in result.leases:
        assert x.state in (LeaseState.DONE, LeaseState.REJECTED), (x.id, x.state)
        for i, t in enumerate(x.held):
            if t.kind != "transfer":
                continue
            fed = next((r for r in x.held[i + 1:] if r.kind == "vm"
                        and set(r.mapping.values()) & set(t.mapping.values())), None)
            assert fed is None or t.end <= fed.start, (x.id, (t.start, t.end), (fed.start, fed.end))


AR = LeaseKind.AR
IMG0 = DiskImage("img0.img", 300)   # 240 s a copy at 10 Mbit/s
SLOW = PreparationOptions("imagetransfer", bandwidth=10, mechanism="unicast", avoid_redundant=False)


def req(i, kind, duration, n=1, start=None, image=None, arrival=0, preemptible=False, real=None):
    return LeaseRequest(i, kind, arrival, duration, (VM,) * n, preemptible=preemptible, start=start,
                        real_duration=real, software=image)


def test_the_round_books_the_image_leases_it_plans_so_the_link_never_stands_idle():
    """Two nodes, the link at 10 Mbit/s (240 s a copy); ARs 3 and 4 hold both nodes until 60. At 0 the greedy pass
    books lease 1 (no image) at 60, aggressive backfilling's one reservation, and leaves leases 2 (two VMs, two
    copies) and 5 (one copy) queued. The round plans lease 5's copy first, [0, 240), then lease 2's, [240, 720).
    It once committed only what starts now and the head's booking: both image leases went back to the queue, the
    link stood idle until 60 (and a head left queued past its look-ahead once made the round commit nothing at
    all). A later booking whose image must come is now committed (left queued, the greedy pass would book its
    transfer at once), so the three copies go back to back from 0 and both leases start by 720."""
    reqs = [req(1, BE, 60), req(2, BE, 60, 2, image=IMG0), req(3, AR, 60, start=0), req(4, AR, 60, start=0),
            req(5, BE, 60, image=IMG0)]
    result, _ = run(reqs, SLOW, nodes=2, mapper="cpsat", migration="no")
    assert_safe(result)
    assert all(x.state is LeaseState.DONE for x in result.leases)
    got = starts(result)
    assert max(got[2][0], got[5][0]) <= 3 * 240
    assert min(h.start for x in result.leases for h in x.held if h.kind == "transfer") == 0


def test_a_lease_whose_disk_image_the_round_does_not_copy_resumes_where_it_was():
    """Lease 3 (three VMs, preemptible, 300 s) runs on nodes 3, 4 and 1 from 720, after its transfer, and is
    suspended for AR 4 at 960.
    Under the CP-SAT mapper only greedy copies disk images (over the link), so a resume on other nodes found no image
    there (the greedy pass booked it on nodes 1, 2, 3 with its memory images copied and no disk image): each VM now
    resumes on the node it was suspended on."""
    reqs = [req(1, AR, 60, start=0), req(2, BE, 60, real=1), req(3, BE, 300, 3, image=IMG0, preemptible=True),
            req(4, AR, 60, 2, start=960), req(5, AR, 60, start=0), req(6, BE, 60), req(7, BE, 60), req(8, BE, 60)]
    result, _ = run(reqs, SLOW, nodes=4, mapper="cpsat", migration="yes")
    assert_safe(result)
    lease = next(x for x in result.leases if x.id == 3)
    runs = [dict(h.mapping) for h in lease.held if h.kind == "vm"]
    assert len(runs) == 2 and runs[0] == runs[1]


def test_a_lease_sent_back_as_it_starts_waits_for_its_new_transfer_only():
    """Lease 5 (three VMs, preemptible) starts at 720 after its transfer [0, 720) (the round books it at once: the
    link is free); AR 1, arriving at 720, preempts it at once and it is requeued: no image stays without a cache, so
    its next run waits for a new transfer [720, 1440). That transfer feeds the second run, not the first (the
    safety check compares each transfer with the run that follows it)."""
    reqs = [req(1, AR, 60, start=720, arrival=720), req(2, BE, 60), req(3, AR, 60, start=0), req(4, BE, 60),
            req(5, BE, 60, 3, image=IMG0, preemptible=True), req(6, AR, 60, start=0), req(7, AR, 60, start=0),
            req(8, BE, 780), req(9, BE, 60), req(10, BE, 60)]
    result, _ = run(reqs, SLOW, nodes=4, mapper="cpsat", migration="no")
    assert_safe(result)
    lease = next(x for x in result.leases if x.id == 5)
    assert [(h.kind, h.start, h.end) for h in lease.held if h.kind in ("vm", "transfer")] == [
        ("transfer", 0, 720), ("vm", 720, 720), ("transfer", 720, 1440), ("vm", 1440, 1500)]

