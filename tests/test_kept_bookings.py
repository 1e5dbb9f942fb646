"""A premature end keeps a booking made for the future only where booking it again would give it unchanged
(Replanning._books_again): on the Blue traces with aggressive backfilling, every booking it keeps is booked again
for real and compared, and the schedule is the same with the shortcut and without it; the slot table's change marks
say whether anything since a mark reached past an instant (on given nodes)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from optlease.domain.site import Site
from optlease.engine.run import simulate
from optlease.formats.config import load_config
from optlease.formats.schedule_json import schedule_document
from optlease.scheduling import replan, slottable
from optlease.scheduling.records import RR, NotSchedulable
from optlease.scheduling.slottable import SlotTable

from conftest import INSTANCES

BLUE = INSTANCES / "blue"
S = replan.S


def first_days(src, dst, days: int, field: int) -> str:
    kept = [line for line in src.read_text().splitlines()
            if not line.strip() or line.startswith(";") or float(line.split()[field]) < days * 86_400]
    dst.write_text("\n".join(kept) + "\n")
    return str(dst)


def run(trace: str, injection: str | None = None):
    cfg = load_config(BLUE / "blue.conf", overrides={"scheduling": {"backfilling": "aggressive"}})
    result = simulate(cfg, tracefile=trace, injection=injection)
    return json.dumps(schedule_document(result.site, result.leases, cfg.get("simulation", "starttime")))


def booking(vmrr: RR) -> tuple:
    return (vmrr.begin(), vmrr.start, vmrr.end, dict(vmrr.mapping), vmrr.checkpoint,
            [(rr.kind, rr.start, rr.end) for rr in (*vmrr.pre, *vmrr.post)])


def take_back(sched, lease, now: int, resuming: bool) -> None:
    """Give a kept booking up as a premature end's re-booking does."""
    sched.cancel_vmrr(lease.last_vmrr(), now)
    lease.vmrrs.pop()
    lease.set_state(S.SUSPENDED_PENDING if resuming else S.PENDING)


def book_again_as_before(sched, lease, now: int, booking, before: tuple) -> None:
    """Book the lease again for real: it must get the booking that was kept (`booking` reads what is compared)."""
    try:
        sched.schedule_lease(lease, now)
    except NotSchedulable:
        pytest.fail(f"lease {lease.id} at {now}: kept, but booking it again fails")
    assert booking(lease.last_vmrr()) == before, f"lease {lease.id} at {now}"
    assert lease.last_vmrr().backfill


@pytest.fixture
def ten_days(tmp_path):
    return (first_days(BLUE / "30days.swf", tmp_path / "10days.swf", 10, 1),
            first_days(BLUE / "injected" / "work_10-dur_2h-size_1small.lwf", tmp_path / "10days.lwf", 10, 0))


def test_every_kept_booking_is_the_one_booking_again_gives(monkeypatch, ten_days):
    kept = {"afresh": 0, "resume": 0}
    decide = replan.Replanning._books_again

    def checked(self, lease, now):
        if not decide(self, lease, now):
            return False
        vmrr = lease.last_vmrr()
        before, resuming = booking(vmrr), lease.state is S.SUSPENDED_SCHEDULED
        kept["resume" if resuming else "afresh"] += 1
        # booked again as reevaluate would, and compared
        take_back(self, lease, now, resuming)
        book_again_as_before(self, lease, now, booking, before)
        return True     # (its new booking is kept: `_booked_again` only renumbers it)

    monkeypatch.setattr(replan.Replanning, "_books_again", checked)
    run(*ten_days)
    assert kept["afresh"] > 100 and kept["resume"] > 10, kept


@pytest.mark.parametrize("injected", [False, True], ids=["trace", "with-ARs"])
def test_schedule_is_the_same_without_the_shortcut(monkeypatch, ten_days, injected):
    trace, injection = ten_days[0], ten_days[1] if injected else None
    fast = run(trace, injection)
    monkeypatch.setattr(replan.Replanning, "_books_again", lambda self, lease, now: False)
    assert run(trace, injection) == fast


def test_change_marks_say_how_far_changes_reached():
    table = SlotTable(Site.homogeneous(4, {"CPU": 100, "Memory": 1024}))
    lease = SimpleNamespace(id=1)

    def rr(node: int, start: int, end: int) -> RR:
        return RR(lease, "vm", start, end, {1: node}, {node: (100, 1024)}, table.next_seq())

    first = rr(1, 0, 50)
    table.add(first)
    mark = table.mark()
    assert table.unchanged_from(mark, 0) and table.untouched_from(mark, 0, {1, 2})
    table.add(rr(2, 10, 30))
    assert table.unchanged_from(mark, 30) and not table.unchanged_from(mark, 29)
    assert table.untouched_from(mark, 0, {1, 3}) and not table.untouched_from(mark, 29, {2})
    table.cut(first, 20)          # gives back [20, 50) on node 1
    assert not table.unchanged_from(mark, 49) and table.unchanged_from(mark, 50)
    assert not table.untouched_from(mark, 49, {1}) and table.untouched_from(mark, 0, {3, 4})
    table.take_down(4)            # a node out of planning: no mark taken before holds
    assert not table.unchanged_from(mark, 10 ** 9)


def test_a_change_to_many_nodes_names_them_until_the_changes_name_too_many(monkeypatch):
    table = SlotTable(Site.homogeneous(80, {"CPU": 100, "Memory": 1024}))
    mark = table.mark()
    lease = SimpleNamespace(id=1, demands=dict.fromkeys(range(1, 71), (100, 1024)), total_demand=(7000, 71680))

    def wide(start: int, end: int) -> RR:
        return RR(lease, "vm", start, end, {v: v for v in range(1, 71)}, dict.fromkeys(range(1, 71), (100, 1024)),
                  table.next_seq())

    first = wide(0, 40)
    table.add(first)
    assert table.untouched_from(mark, 40, {5})             # it does not reach past 40
    assert table.untouched_from(mark, 39, {80}) and not table.untouched_from(mark, 39, {70})
    assert table.changed_past(mark, 39) == [first.demand] and table.changed_past(mark, 40) == []
    # what the changes name is bounded: past the budget, no mark taken before holds
    monkeypatch.setattr(slottable, "EDIT_NODES_HELD", 100)
    table.add(wide(50, 60))
    assert table.changed_past(mark, 0) is not None
    table.add(wide(70, 80))
    assert table.changed_past(mark, 0) is None and not table.unchanged_from(mark, 10 ** 9)
