"""The `rounds` block of the run summary: under `mapper: cpsat`, the distribution of the solver's rounds."""
from __future__ import annotations

import json

from conftest import INSTANCES
from optlease.accounting.rounds import admission_summary, percentile, round_summary
from optlease.scheduling.cpsat_round import Admission, RoundRecord
from optlease.scheduling.snapshot import RoundStats

WAIT = INSTANCES / "haizea" / "expected" / "wait.conf"


def consistent(block: dict) -> None:
    assert sum(block["status"].values()) == block["count"] == sum(block["source"].values())
    assert 0 <= block["changed"] <= block["solved"] <= block["count"]
    assert block["changed"] <= block["leases_changed"]
    assert block["beat_greedy"] <= block["solved"] and block["beat_hint"] <= block["solved"]
    for key in ("wall_time_s", "variables", "constraints"):
        spread = [v for v in block[key].values() if v is not None]
        assert spread == sorted(spread), key
        assert (len(spread) == 0) == (block["solved"] == 0)
    if block["gap"]["mean"] is not None:
        assert 0 <= block["gap"]["mean"] <= block["gap"]["max"]


def record(status: str, wall: float, nvars: int, objective=None, hint=None, greedy=None, gap=None, changed=0):
    stats = RoundStats(status, objective, None, gap, wall, nvars, 2 * nvars, source="cpsat" if changed else "greedy",
                       hint_objective=hint)
    return RoundRecord(0, 1, changed, stats, greedy)


def test_round_summary_counts_and_spreads():
    records = [record("EMPTY", 0.0, 0), record("UNCHANGED", 0.001, 0),
               record("OPTIMAL", 0.2, 100, objective=5, hint=7, greedy=9, gap=0.0, changed=2),
               record("FEASIBLE", 0.9, 300, objective=7, hint=7, greedy=7, gap=0.5),
               record("OPTIMAL", 0.1, 50, objective=3, hint=3, greedy=4, gap=0.0)]
    block = round_summary(records)
    consistent(block)
    assert (block["count"], block["solved"], block["changed"], block["leases_changed"]) == (5, 3, 1, 2)
    assert block["status"] == {"EMPTY": 1, "FEASIBLE": 1, "OPTIMAL": 2, "UNCHANGED": 1}
    assert block["wall_time_s"] == {"p50": 0.2, "p95": 0.9, "max": 0.9}
    assert block["variables"] == {"p50": 100, "max": 300} and block["constraints"] == {"p50": 200, "max": 600}
    assert block["gap"] == {"mean": 0.5 / 3, "max": 0.5}
    assert (block["beat_hint"], block["beat_greedy"]) == (1, 2)
    empty = round_summary([])
    consistent(empty)
    assert empty["count"] == 0 and empty["beat_hint_share"] is None and percentile([], 0.5) is None


def test_admission_summary_counts_what_the_round_model_admitted():
    stats = [RoundStats(status, None, None, None, wall, 10, 20) for status, wall in
             (("OPTIMAL", 0.3), ("FEASIBLE", 0.1), ("OPTIMAL", 0.2))]
    block = admission_summary([Admission(10, 4, True, 3, stats[0], 2), Admission(20, 7, False, 0, stats[1]),
                               Admission(30, 9, True, 1, stats[2], 1), Admission(40, 11, True, 0, stats[2], 0, 2)])
    assert block == {"offered": 4, "admitted": 3, "bookings_moved": 4, "leases_suspended": 3, "leases_requeued": 2,
                     "wall_time_s": {"p50": 0.2, "p95": 0.3, "max": 0.3}}


def test_simulate_summary_has_the_rounds_block_under_cpsat(tmp_path, cli):
    conf = tmp_path / "wait-cpsat.conf"
    conf.write_text(WAIT.read_text().replace("mapper: greedy", "mapper: cpsat"))
    trace = INSTANCES / "haizea" / "tests" / "wait.lwf"
    proc = cli("simulate", "-c", conf, "--tracefile", trace, "-q", "--summary-out", tmp_path / "cpsat.json")
    assert proc.returncode == 0, proc.stderr
    block = json.loads((tmp_path / "cpsat.json").read_text())["rounds"]
    consistent(block)
    assert block["count"] > 0 and block["solved"] >= 1
    assert block["wall_time_s"]["max"] is not None
    assert block["admissions"] == {"offered": 0, "admitted": 0, "bookings_moved": 0, "leases_suspended": 0,
                                   "leases_requeued": 0, "wall_time_s": {"p50": None, "p95": None, "max": None}}

    proc = cli("simulate", "-c", WAIT, "-q", "--summary-out", tmp_path / "greedy.json")
    assert proc.returncode == 0, proc.stderr
    greedy = json.loads((tmp_path / "greedy.json").read_text())["rounds"]
    assert set(greedy) == {"count"} and greedy["count"] > 0
