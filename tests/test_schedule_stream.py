"""The schedule file written as a stream (formats/schedule_stream.py) is, byte for byte, the document in memory
written by json (`json.dumps(schedule_document(...), indent=1)` and a newline): on the quickstart, Haizea's scenarios
with image transfers, a CP-SAT run, random workloads, and hand-made leases with every optional key; and the sha256
it gives is that of the bytes it wrote."""
from __future__ import annotations

import hashlib
import io
import json
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings

from conftest import INSTANCES
from optlease.domain.lease import DiskImage, LeaseKind, LeaseRequest, LeaseState
from optlease.domain.site import Site
from optlease.errors import InputError
from optlease.engine.run import simulate
from optlease.eventlog import EventLog
from optlease.engine.simulator import Simulator
from optlease.formats.config import load_config
from optlease.formats.schedule_json import schedule_document, write_schedule
from optlease.formats.schedule_stream import schedule_chunks, schedule_sha256, schedule_text
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.records import Held, Lease, Placement
from test_simulator_properties import options, requests, sites

ORIGIN = datetime(2006, 11, 25, 13, 0, 0)
QUICKSTART = INSTANCES / "quickstart"
IMAGE_SCENARIOS = sorted(conf for conf in (INSTANCES / "haizea" / "expected").glob("*.conf")
                         if "lease-preparation: imagetransfer" in conf.read_text())


def in_memory(site, leases, origin, images=None) -> bytes:
    """What the file held before it was streamed: the whole document, then json."""
    return (json.dumps(schedule_document(site, leases, origin, images), indent=1) + "\n").encode()


def streamed(site, leases, origin, images=None) -> bytes:
    return b"".join(schedule_chunks(site, leases, origin, images))


def assert_same_file(tmp_path, site, leases, origin, images=None) -> None:
    expected = in_memory(site, leases, origin, images)
    assert streamed(site, leases, origin, images) == expected
    path = tmp_path / "schedule.json"
    digest = write_schedule(str(path), site, leases, origin, images)
    assert path.read_bytes() == expected
    assert digest == hashlib.sha256(expected).hexdigest() == schedule_sha256(site, leases, origin, images)


@pytest.mark.parametrize("conf, overrides", [
    pytest.param(QUICKSTART / "quickstart.conf", {}, id="quickstart"),
    pytest.param(QUICKSTART / "quickstart-nosusp.conf", {}, id="quickstart-requeue"),
    pytest.param(QUICKSTART / "quickstart.conf", {"scheduling": {"mapper": "cpsat"}}, id="quickstart-cpsat"),
    *(pytest.param(conf, {}, id=conf.stem) for conf in IMAGE_SCENARIOS),
])
def test_the_streamed_file_is_the_document_in_memory(tmp_path, conf, overrides):
    cfg = load_config(conf, overrides=overrides)
    result = simulate(cfg)
    assert_same_file(tmp_path, result.site, result.leases, cfg.get("simulation", "starttime"), result.images)


def test_the_haizea_scenarios_with_images_are_there():
    """(The parametrization above runs some: a scenario list gone empty would test nothing.)"""
    assert IMAGE_SCENARIOS


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(site=sites, reqs=requests(), opts=options)
def test_random_workloads_stream_the_document_in_memory(site, reqs, opts):
    log = EventLog(ORIGIN, "INFO", io.StringIO())
    policies = Policies(opts.policy_admission, opts.policy_preemption, opts.policy_host_selection)
    result = Simulator(site, reqs, opts, policies, log).run()
    assert streamed(result.site, result.leases, ORIGIN, result.images) == in_memory(
        result.site, result.leases, ORIGIN, result.images)


class Links:
    """What a run's image transfers write as the file's `images` section (a stand-in with an empty cache list)."""

    def document(self, iso):
        return {"bandwidth": 100, "mechanism": "multicast", "reuse": "none", "cache_size": None,
                "caches": [{"node": 1, "image": "é.img", "start": iso(0), "end": None}]}


def hand_made() -> list[Lease]:
    """Leases with every optional key: a mapping that is a dict, a migration's origin, an outcome, extra keys (one
    replacing `end`, strings json must escape), a reason in other scripts, a deadline, an image, and a lease that
    held nothing."""
    vm = {"CPU": 100, "Memory": 1024}
    wide = LeaseRequest(id=3, kind=LeaseKind.BEST_EFFORT, arrival=0, duration=600, vms=(vm,) * 5 + ({"CPU": 50,
                        "Memory": 512},), preemptible=True, real_duration=300, deadline=7200,
                        software=DiskImage("img \"1\"", 1024))
    held = [Held("vm", 60, 120, Placement((1, 2, 1, 2, 1, 2)), outcome="requeued"),
            Held("migrate", 200, 260, {2: 1, 1: 2, 3: 1, 4: 2, 5: 1, 6: 2}, origin=Placement((2, 1, 2, 1, 2, 1))),
            Held("transfer", 0, 30, {}, extra={"image": "img", "size": 1024, "end": "later", "link": [1, 2.5],
                                                   "path": "a\\b\t\x7f \"q\"", "ok": True, "none": None}),
            Held("vm", 260, 500, {10: 1, 2: 2})]
    lease = Lease(wide, {v: (100, 1024) for v in range(1, 7)}, state=LeaseState.DONE, held=held)
    # two VMs that ask alike in dicts of their own, keys in another order: each written as it is
    rejected = Lease(LeaseRequest(id=1, kind=LeaseKind.AR, arrival=0, duration=60,
                                  vms=(vm, {"Memory": 1024, "CPU": 100}), preemptible=False, start=30,
                                  extra={"note": "ß"}), {1: (100, 1024), 2: (100, 1024)},
                     state=LeaseState.REJECTED, reason="pas de place — 空きなし")
    return [lease, rejected]


@pytest.mark.parametrize("images", [None, Links()], ids=["no-images", "images"])
def test_hand_made_leases_with_every_optional_key_stream_the_document_in_memory(tmp_path, images):
    site = Site(("CPU", "Memory"), ({"CPU": 100, "Memory": 1024}, {"CPU": 200, "Memory": 2048}))
    assert_same_file(tmp_path, site, hand_made(), ORIGIN, images)


def test_no_leases_is_an_empty_list():
    site = Site(("CPU", "Memory"), ({"CPU": 100, "Memory": 1024},))
    assert streamed(site, [], ORIGIN) == in_memory(site, [], ORIGIN)
    assert '"leases": []' in "".join(schedule_text(site, [], ORIGIN))


def test_a_wide_lease_is_written_in_pieces_no_larger_than_its_own_reservations():
    """Memory bounded by one reservation: no piece of the text holds more than one lease's VMs or one of its
    reservations' mappings (here 2,000 VMs, three reservations)."""
    vm = {"CPU": 100, "Memory": 1024}
    n = 2_000
    site = Site(("CPU", "Memory"), tuple(dict(vm) for _ in range(n)))
    req = LeaseRequest(id=1, kind=LeaseKind.BEST_EFFORT, arrival=0, duration=600, vms=(vm,) * n, preemptible=True)
    nodes = Placement(tuple(range(1, n + 1)))
    lease = Lease(req, {v: (100, 1024) for v in range(1, n + 1)}, state=LeaseState.DONE,
                  held=[Held("vm", 0, 100, nodes), Held("suspend", 100, 110, nodes), Held("resume", 200, 210, nodes)])
    pieces = list(schedule_text(site, [lease], ORIGIN))
    mapping = len(json.dumps({str(v): v for v in range(1, n + 1)}, indent=1)) + 6 * n
    assert max(map(len, pieces)) <= max(mapping, len(json.dumps({str(v): vm for v in range(1, n + 1)}, indent=1))
                                        + 16 * n)
    assert "".join(pieces).encode() == in_memory(site, [lease], ORIGIN)


def test_a_run_that_fails_while_writing_leaves_the_file_that_was_there(tmp_path):
    """A lease whose reservation ends past the calendar (an InputError while its time is written) stops the
    writing: the file written before stays as it was and nothing else is left beside it."""
    site = Site(("CPU", "Memory"), ({"CPU": 100, "Memory": 1024}, {"CPU": 200, "Memory": 2048}))
    path = tmp_path / "schedule.json"
    write_schedule(str(path), site, hand_made(), ORIGIN)
    before = path.read_bytes()
    broken = hand_made()
    broken[0].held.append(Held("vm", 600, 10**12, Placement((1, 2, 1, 2, 1, 2))))
    with pytest.raises(InputError, match="outside the years 1 to 9999"):
        write_schedule(str(path), site, broken, ORIGIN)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["schedule.json"]
