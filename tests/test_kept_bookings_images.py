"""A premature end keeps a booking made for the future of a lease whose image is managed (its transfers booked again
for real) only where booking it again would give the same booking (Replanning._starts_again_with_image): on five days
of the Blue month in the HPDC'08 VM profiles with and without caches, and on random image workloads (hypothesis),
every booking it keeps is booked again for real and compared, and the schedule is the same with the shortcut and
without it."""
from __future__ import annotations

import io
import json

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from optlease.domain.lease import DiskImage, LeaseKind, LeaseRequest
from optlease.domain.site import Site
from optlease.engine.run import simulate
from optlease.engine.simulator import Simulator
from optlease.eventlog import EventLog
from optlease.formats.config import load_config
from optlease.formats.schedule_json import schedule_document
from optlease.scheduling import replan
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.records import MIGRATE

from test_image_transfers import ORIGIN, document, preparations
from test_kept_bookings import book_again_as_before, take_back
from test_schedule_hashes import BLUE, NOREUSE, REUSE, VM_PROFILE, first_days, images_file

S = replan.S
VM = {"CPU": 100, "Memory": 1024}
HALF = {"CPU": 50, "Memory": 512}
IMAGES = [DiskImage(f"img{i}.img", size) for i, size in enumerate([300, 1024, 2048])]


def booking(vmrr) -> tuple:
    """A VM booking with its resume, suspension or shutdown (the copies of its images over the link, like its
    transfers, a kept booking gets booked again for real)."""
    return (vmrr.start, vmrr.end, dict(vmrr.mapping), vmrr.checkpoint,
            [(rr.kind, rr.start, rr.end) for rr in (*vmrr.pre, *vmrr.post) if rr.kind != MIGRATE])


def checking_every_kept_booking(patch, kept: dict) -> None:
    """Patch `_books_again` to book every booking it keeps again for real, as `reevaluate` would, and compare: the
    same VM booking, and (images managed) the same ways its image may come as the check found without giving its
    transfers up. `_booked_again` then leaves that new booking as it is: the run is the one without the shortcut."""
    decide, renumber = replan.Replanning._books_again, replan.Replanning._booked_again
    rebooked = set()

    def checked(self, lease, now):
        if not decide(self, lease, now):
            return False
        vmrr = lease.last_vmrr()
        before, resuming = booking(vmrr), lease.state is S.SUSPENDED_SCHEDULED
        image = self.prep is not None and self.prep.needs(lease) and not resuming
        kept["image" if image else "resume" if resuming else "afresh"] += 1
        ways = self.prep.earliest(lease, now, self.prep.given_up(lease)) if image else None
        take_back(self, lease, now, resuming)
        if image:
            assert self.prep.earliest(lease, now) == ways, f"lease {lease.id} at {now}"
        book_again_as_before(self, lease, now, booking, before)
        rebooked.add(lease.id)
        return True

    def booked_again(self, lease, now):
        if lease.id in rebooked:
            rebooked.discard(lease.id)
        else:
            renumber(self, lease, now)

    patch.setattr(replan.Replanning, "_books_again", checked)
    patch.setattr(replan.Replanning, "_booked_again", booked_again)


def five_days(tmp_path, reuse: dict):
    return load_config(VM_PROFILE, overrides={"deploy-imagetransfer": reuse, "tracefile": {
        "tracefile": first_days(BLUE / "30days.swf", tmp_path / "5days.swf", 1),
        "injectionfile": first_days(BLUE / "injected" / "work_10-dur_2h-size_1small.lwf", tmp_path / "5days.lwf", 0),
        "imagefile": str(images_file(tmp_path / "37.images"))}})


def month_schedule(cfg) -> str:
    result = simulate(cfg)
    return json.dumps(schedule_document(result.site, result.leases, cfg.get("simulation", "starttime"),
                                        result.images))


@pytest.mark.parametrize("reuse", [NOREUSE, REUSE], ids=["vm+noreuse", "vm+reuse"])
def test_every_kept_image_booking_is_the_one_booking_again_gives(monkeypatch, tmp_path, reuse):
    kept = {"image": 0, "resume": 0, "afresh": 0}
    cfg = five_days(tmp_path, reuse)
    fast = month_schedule(cfg)
    checking_every_kept_booking(monkeypatch, kept)
    assert month_schedule(cfg) == fast
    assert kept["image"] > 100 and kept["resume"] > 30, kept
    monkeypatch.setattr(replan.Replanning, "_books_again", lambda self, lease, now: False)
    assert month_schedule(cfg) == fast


@st.composite
def image_workloads(draw):
    """Best-effort leases with images that end before their time (premature ends), among ARs in the way."""
    out = []
    for i in range(1, draw(st.integers(2, 12)) + 1):
        kind = draw(st.sampled_from([LeaseKind.BEST_EFFORT] * 3 + [LeaseKind.AR]))
        arrival = draw(st.integers(0, 30)) * 60
        duration = draw(st.integers(1, 40)) * 60
        real = draw(st.one_of(st.none(), st.integers(1, duration)))
        start = arrival + draw(st.integers(0, 40)) * 60 if kind is LeaseKind.AR else None
        software = draw(st.one_of(st.none(), st.sampled_from(IMAGES), st.sampled_from(IMAGES)))
        vms = draw(st.sampled_from([(VM,), (HALF,), (VM, VM), (HALF, HALF, HALF)]))
        out.append(LeaseRequest(i, kind, arrival, duration, vms, preemptible=draw(st.booleans()), start=start,
                                real_duration=real, software=software))
    return out


def run(reqs, prep, nodes: int, level: str, **opts):
    """The workload on `nodes` nodes, with suspension, AR preemption and the log at `level` (a resume elsewhere is
    kept only where the log does not write its booking's line)."""
    site = Site.parse_resources(f"{nodes} CPU:100 Memory:1024")
    options = SchedulingOptions(**{"suspension": "all", "policy_preemption": "ar-preempts-everything",
                                   "preparation": prep, **opts})
    out = io.StringIO()
    policies = Policies(options.policy_admission, options.policy_preemption, options.policy_host_selection)
    result = Simulator(site, reqs, options, policies, EventLog(ORIGIN, level, out)).run()
    return result, out.getvalue()


def same_with_and_without_keeping(reqs, prep, **opts) -> dict:
    """Run the workload with the shortcut, with every kept booking booked again and compared, and without the
    shortcut: the same schedule and log each time. What was kept, by kind."""
    kept = {"image": 0, "resume": 0, "afresh": 0}
    fast, fast_log = run(reqs, prep, **opts)
    with pytest.MonkeyPatch.context() as patch:
        checking_every_kept_booking(patch, kept)
        checked, _ = run(reqs, prep, **opts)
        patch.setattr(replan.Replanning, "_books_again", lambda self, lease, now: False)
        slow, slow_log = run(reqs, prep, **opts)
    assert document(fast) == document(checked) == document(slow)
    assert fast_log == slow_log
    return kept


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=image_workloads(), prep=preparations, migration=st.sampled_from(["no", "yes", "yes"]),
       backfilling=st.sampled_from(["aggressive", "conservative"]), nodes=st.integers(2, 4),
       level=st.sampled_from(["INFO", "STATUS", "STATUS"]))
def test_keeping_image_bookings_changes_no_decision(reqs, prep, migration, backfilling, nodes, level):
    kept = same_with_and_without_keeping(reqs, prep, nodes=nodes, level=level, migration=migration,
                                         backfilling=backfilling)
    for what in ("image", "resume"):
        event(f"{what} bookings kept: {min(kept[what], 3)}{'+' if kept[what] >= 3 else ''}")


@st.composite
def resume_workloads(draw):
    """Preemptible best-effort leases with images, suspended by ARs and resumed (often elsewhere), among leases
    that end before their time."""
    out = []
    n = draw(st.integers(4, 10))
    for i in range(1, n + 1):
        duration = draw(st.integers(10, 40)) * 60
        real = draw(st.one_of(st.none(), *[st.integers(60, duration)] * 4))
        out.append(LeaseRequest(i, LeaseKind.BEST_EFFORT, draw(st.integers(0, 10)) * 60, duration,
                                draw(st.sampled_from([(VM,), (HALF,), (HALF, HALF)])), preemptible=True,
                                real_duration=real, software=draw(st.sampled_from(IMAGES))))
    for i in range(n + 1, n + 1 + draw(st.integers(1, 3))):
        start = draw(st.integers(5, 30)) * 60
        out.append(LeaseRequest(i, LeaseKind.AR, start - 300, draw(st.integers(5, 20)) * 60,
                                draw(st.sampled_from([(VM,), (VM, VM)])), preemptible=False, start=start,
                                software=draw(st.sampled_from(IMAGES))))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=resume_workloads(), prep=preparations, backfilling=st.sampled_from(["aggressive", "conservative"]),
       nodes=st.integers(2, 3))
def test_keeping_bookings_that_resume_over_the_link_changes_no_decision(reqs, prep, backfilling, nodes):
    kept = same_with_and_without_keeping(reqs, prep, nodes=nodes, level="STATUS", migration="yes",
                                         backfilling=backfilling)
    event(f"resume bookings kept: {min(kept['resume'], 3)}{'+' if kept['resume'] >= 3 else ''}")
