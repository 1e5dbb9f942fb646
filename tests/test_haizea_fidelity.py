"""Haizea 1.1's decisions on workloads beyond its own scenarios: one small LWF per behaviour (tests/data/fidelity/,
each `<description>` says what Haizea does and why), run with Haizea's scenario configuration. The expected times
follow from Haizea 1.1's scheduler code (lease_scheduler.py, vm_scheduler.py) and the manual."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from optlease.accounting.metrics import run_summary
from optlease.checker import check_schedule
from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from optlease.engine.run import simulate
from optlease.errors import InputError
from optlease.formats.config import load_config
from optlease.formats.lwf import parse_lwf
from optlease.formats.schedule_json import schedule_document
from optlease.scheduling import overheads as oh
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.records import Lease

FIDELITY = Path(__file__).parent / "data" / "fidelity"
T0 = "[2006-11-25 "


def run(name: str):
    """Simulate one fidelity workload: (result by lease id, log lines, schedule document)."""
    cfg = load_config(FIDELITY / "fidelity.conf")
    out = io.StringIO()
    result = simulate(cfg, tracefile=str(FIDELITY / name), out=out)
    doc = schedule_document(result.site, result.leases, cfg.get("simulation", "starttime"))
    assert [str(v) for v in check_schedule(doc)] == []
    return {lease.id: lease for lease in result.leases}, out.getvalue().splitlines(), doc


def at(hms: str) -> int:
    """Seconds after the workload's start (13:00:00) of a time of that day."""
    h, m, s = map(int, hms.split(":"))
    return (h - 13) * 3600 + m * 60 + s


def held(lease: Lease, kind: str) -> list[tuple[int, int]]:
    return [(h.start, h.end) for h in lease.held if h.kind == kind]


def line(hms: str, component: str, message: str) -> str:
    return f"{T0}{hms}.00] {component:<7} {message}"


def test_30days_with_aggressive_backfilling_waits_as_long_as_in_haizea():
    """Haizea 1.1 on 30days.swf (144 nodes, aggressive backfilling, suspension all, rates 32 MB/s, no migration)."""
    blue = Path(__file__).parents[1] / "instances" / "blue"
    cfg = load_config(blue / "blue.conf", overrides={"scheduling": {"suspend-rate": "32", "resume-rate": "32"}})
    out = io.StringIO()
    result = simulate(cfg, tracefile=str(blue / "30days.swf"), out=out)
    figures = run_summary(result.site, result.leases, result.end_time)["best_effort"]
    assert figures["completed"] == 5108
    assert round(figures["wait_avg"], 1) == 3645.1
    # Haizea's summary: the state left-aligned in 20 columns, the count right-aligned in 6
    assert "RM      Done:                 5108 (5108 Best-effort)" in out.getvalue()


def test_a_short_lease_that_fits_whole_before_an_ar_is_backfilled():
    leases, log, _ = run("backfill-window.lwf")
    assert held(leases[2], "vm") == [(0, 30)]
    assert line("13:00:00", "VMSCHED", "Lease #2 can be scheduled on nodes [1] from 2006-11-25 13:00:00.00 to "
                                       "2006-11-25 13:00:32.00") in log


def test_a_start_with_room_for_the_run_but_not_its_shutdown_is_not_taken():
    leases, log, _ = run("shutdown-gap.lwf")
    assert held(leases[2], "vm") == [(at("14:10:02"), at("14:20:01"))]
    assert held(leases[2], "suspend") == []


def test_memory_images_move_in_rounds_and_the_resume_waits_for_the_estimate():
    leases, log, doc = run("migration-rounds.lwf")
    lease = leases[1]
    # node 1 sends both images: two rounds of 82 s (1024 MB at 100 Mbit/s), not one
    assert held(lease, "migrate") == [(at("13:30:00"), at("13:31:22")), (at("13:31:22"), at("13:32:44"))]
    assert sorted(v for h in lease.held if h.kind == "migrate" for v in h.origin) == [1, 2]
    # the resume begins at the next instant plus 2 x 164 s (each VM counted with the 2048 MB on its node)
    assert held(lease, "resume")[0][0] == at("13:35:28")
    assert lease.migrations == 1
    assert [entry for entry in log if "VMSCHED Migrat" in entry] == [
        line("13:30:00", "VMSCHED", "Migrating lease 1..."), line("13:31:22", "VMSCHED", "Migrated lease 1..."),
        line("13:31:22", "VMSCHED", "Migrating lease 1..."), line("13:32:44", "VMSCHED", "Migrated lease 1...")]
    # two VMs on one node suspend one after the other: one line per step
    assert [entry for entry in log if "suspended." in entry] == [
        line("13:29:26", "VMSCHED", "Lease 1 suspended."), line("13:30:00", "VMSCHED", "Lease 1 suspended.")]
    # the schedule file calls the copies migrations (the contract keeps `transfer` for disk images)
    copies = [r for r in doc["leases"][0]["reservations"] if r.get("what") == "memory-image"]
    assert [(r["kind"], r["start"][11:], r["from"]) for r in copies] == [
        ("migrate", "13:30:00", {"1": 1}), ("migrate", "13:31:22", {"2": 1})]


def test_a_lease_preempted_while_it_migrates_is_requeued_suspended_and_ends():
    """An AR takes the nodes a migrating lease was to resume on, in the middle of its copies (Haizea 1.1 fails here)."""
    leases, log, _ = run("migration-preempted.lwf")
    lease = leases[1]
    assert line("13:32:00", "LSCHED", "... lease #1 has been cancelled and requeued.") in log
    # the first round stays done, the one under way is given up, and only the image still on node 1 is copied again
    copies = [(h.start, h.end, h.origin, h.outcome) for h in lease.held if h.kind == "migrate"]
    assert copies == [(at("13:30:00"), at("13:31:22"), {1: 1}, None),
                      (at("13:31:22"), at("13:32:00"), {2: 1}, "cancelled"),
                      (at("13:32:00"), at("13:33:22"), {2: 1}, None)]
    # it resumes where its images are once AR 3 is over, and keeps all it ran before its suspension
    (resume,) = [h for h in lease.held if h.kind == "resume"]
    assert resume.start >= held(leases[3], "vm")[0][1] and resume.mapping == {1: 2, 2: 3}
    assert sum(end - start for start, end in held(lease, "vm")) == 3600
    assert (lease.state, lease.suspensions, lease.migrations) == (LeaseState.DONE, 1, 1)
    assert all(other.state is LeaseState.DONE for other in leases.values())


def test_a_lease_preempted_while_it_resumes_is_requeued_suspended_and_ends():
    leases, log, _ = run("resume-preempted.lwf")
    lease = leases[1]
    assert line("13:35:40", "LSCHED", "... lease #1 has been cancelled and requeued.") in log
    resumes = [(h.start, h.outcome) for h in lease.held if h.kind == "resume"]
    assert resumes[0] == (at("13:35:28"), "cancelled") and len(resumes) == 2
    # nothing is copied again: the images stayed on nodes 2 and 3, where it resumes after AR 3
    assert len(held(lease, "migrate")) == 2 and lease.image_nodes == {1: 2, 2: 3}
    assert resumes[1][0] >= held(leases[3], "vm")[0][1]
    assert sum(end - start for start, end in held(lease, "vm")) == 3600
    assert all(other.state is LeaseState.DONE for other in leases.values())


def test_a_premature_end_books_a_migrated_resume_again_sooner():
    leases, log, _ = run("premature-resume.lwf")
    lease = leases[1]
    assert held(lease, "migrate") == [(at("13:30:00"), at("13:31:22"))]
    assert [(h.start, h.mapping) for h in lease.held if h.kind == "resume"] == [(at("13:41:22"), {1: 2})]
    assert line("13:40:00", "VMSCHED", "Lease #1 can be scheduled on nodes [2] from 2006-11-25 13:41:22.00 "
                                       "(resuming) to 2006-11-25 14:12:32.00") in log


def test_an_ar_requeues_a_non_preemptible_booking_that_has_not_begun():
    leases, log, _ = run("ar-over-booking.lwf")
    assert held(leases[3], "vm") == [(at("14:30:00"), at("15:00:00"))]
    assert held(leases[2], "vm") == [(at("15:00:02"), at("16:00:02"))]   # one run, never interrupted
    assert held(leases[1], "vm") == [(0, at("14:00:00"))]
    assert [entry for entry in log if entry.startswith(T0 + "13:10:00")][4:] == [
        line("13:10:00", "LSCHED", "Must preempt leases [2] to make room for lease #3"),
        line("13:10:00", "LSCHED", "Preempting lease #2..."),
        line("13:10:00", "LSCHED", "... lease #2 has been cancelled and requeued."),
        line("13:10:00", "LSCHED", "Lease #3 has been scheduled."),
        line("13:10:00", "LSCHED", "Next request in the queue is lease 2. Attempting to schedule..."),
        line("13:10:00", "VMSCHED", "Lease #2 can be scheduled on nodes [1] from 2006-11-25 15:00:02.00 to "
                                    "2006-11-25 16:00:04.00")]


def test_workload_lease_ids_are_kept():
    leases, log, _ = run("lease-ids.lwf")
    assert sorted(leases) == [1, 7, 10]
    assert (leases[10].kind, leases[7].kind, leases[1].kind) == (LeaseKind.BEST_EFFORT, LeaseKind.AR,
                                                                LeaseKind.BEST_EFFORT)
    assert line("13:01:00", "LSCHED", "Lease #7 has been requested.") in log


LEASE = ('<lease-request arrival="00:00:00.00"><lease{attr}><nodes><node-set numnodes="1"><res type="CPU" '
         'amount="100"/></node-set></nodes><start/><duration time="00:10:00.00"/></lease></lease-request>\n')


def workload(*attrs: str) -> bytes:
    return ('<lease-workload name="w">\n<lease-requests>\n' + "".join(LEASE.format(attr=a) for a in attrs)
            + "</lease-requests>\n</lease-workload>\n").encode()


@pytest.mark.parametrize("attrs, ids", [
    pytest.param(("", "", ""), [1, 2, 3], id="none-given"),
    pytest.param((' id="2"', "", ""), [2, 1, 3], id="free-numbers-skip-given-ones"),
    pytest.param((' id="1000001"', ' id="5"'), [1000001, 5], id="kept-as-given"),
])
def test_unnumbered_leases_take_the_free_numbers_in_file_order(attrs, ids):
    assert [r.id for r in parse_lwf(workload(*attrs), "w.lwf").requests] == ids


@pytest.mark.parametrize("attrs, message", [
    pytest.param((' id="4"', "", ' id="4"'), "w.lwf:5: lease id 4 is given twice (first at line 3)", id="duplicate"),
    pytest.param((' id="x"',), "w.lwf:3: <lease> id='x' is not a whole number (digits 0-9 only)", id="not-a-number"),
    pytest.param((' id="0"',), "w.lwf:3: <lease> id=0 must be positive (allowed: 1 to 2147483647)", id="zero"),
])
def test_a_bad_lease_id_is_one_line_naming_the_place(attrs, message):
    with pytest.raises(InputError) as exc:
        parse_lwf(workload(*attrs), "w.lwf")
    assert str(exc.value) == message


def test_the_cli_refuses_a_duplicate_lease_id_in_one_line(tmp_path, cli):
    trace = tmp_path / "dup.lwf"
    trace.write_bytes(workload(' id="3"', ' id="3"'))
    proc = cli("simulate", "-c", FIDELITY / "fidelity.conf", "--tracefile", trace, "-q")
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [f"optlease: error: {trace}:4: lease id 3 is given twice (first at line 3)"]


def test_log_wording_is_haizeas():
    leases, log, _ = run("log-wording.lwf")
    for expected in [
            line("13:05:00", "LSCHED", "Scheduling lease #2 (2 nodes) -- Immediate"),
            line("13:05:00", "LSCHED", "Lease request #2 cannot be scheduled: Could not find enough resources for "
                                       "this request"),
            line("13:10:00", "LSCHED", "Lease request #3 cannot be scheduled: Not enough resources in specified "
                                       "interval"),
            line("13:16:00", "LSCHED", "Lease 5 could not be scheduled at this time.")]:
        assert expected in log
    # an AR and an immediate lease arriving together are taken by id, as Haizea walks its lease table
    assert [entry for entry in log if entry.startswith(T0 + "13:20:00") and "Scheduling" in entry] == [
        line("13:20:00", "LSCHED", "Scheduling lease #6 (1 nodes) -- AR"),
        line("13:20:00", "LSCHED", "Scheduling lease #7 (1 nodes) -- Immediate")]
    assert (leases[6].state.value, leases[7].state.value) == ("done", "rejected")
    summary = log[log.index(line("13:50:10", "RM", "--- Haizea status summary ---")) + 1:][:2]
    assert summary == [line("13:50:10", "RM", "Rejected:                3 (2 Immediate + 1 AR)"),
                       line("13:50:10", "RM", "Done:                    4 (3 Best-effort + 1 AR)")]


def _lease(memories: list[int]) -> Lease:
    vms = tuple({"CPU": 10, "Memory": m} for m in memories)
    return Lease(LeaseRequest(1, LeaseKind.BEST_EFFORT, 0, 600, vms), {v: (10, m) for v, m in
                                                                       enumerate(memories, start=1)})


@given(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4), st.sampled_from([256, 512, 1024])),
                min_size=1, max_size=8))
def test_migration_rounds_never_use_a_node_twice_and_move_each_image_once(moves):
    lease = _lease([m for _, _, m in moves])
    lease.image_nodes = {v: origin for v, (origin, _, _) in enumerate(moves, start=1)}
    target = {v: dest for v, (_, dest, _) in enumerate(moves, start=1)}
    opts = SchedulingOptions(migration="yes", bandwidth=100)
    rounds = oh.migration_rounds(lease, target, opts)
    moved = [v for _, round_ in rounds for v in round_]
    assert sorted(moved) == [v for v in target if target[v] != lease.image_nodes[v]]
    for duration, round_ in rounds:
        nodes = [n for v in round_ for n in (round_[v], target[v])]
        assert len(nodes) == len(set(nodes))
        assert duration == max(oh.transfer_time(lease.req.memory_of(v), opts) for v in round_)
    # Haizea's estimate, which the resume waits for, is never shorter than the rounds
    assert sum(d for d, _ in rounds) <= oh.migration_estimate(lease, opts)
