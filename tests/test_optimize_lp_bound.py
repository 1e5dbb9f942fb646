"""`optlease optimize --bound lp`: the LP relaxation of the time-indexed MIP (pyomo/HiGHS) bounds the offline CP-SAT
objective from below; workloads too large for one binary per second are refused with one line, and so are solver
options no search can run with."""
from __future__ import annotations

import json

import pytest

from conftest import INSTANCES

HAIZEA = INSTANCES / "haizea"


def test_lp_bound_is_below_the_cpsat_objective_on_the_reservation_scenario(tmp_path, cli):
    # Haizea's reservation scenario with its minutes read as seconds (1 h -> 60 s, 15 min -> 15 s), so that the
    # time-indexed model stays small: a 1-hour horizon is ~5,400 steps per lease
    lwf = (HAIZEA / "tests" / "reservation.lwf").read_text()
    (tmp_path / "reservation-s.lwf").write_text(lwf.replace("01:00:00.00", "00:01:00.00")
                                                .replace('"00:15:00.00"', '"00:00:15.00"'))
    conf = tmp_path / "reservation-s.conf"
    conf.write_text((HAIZEA / "expected" / "reservation.conf").read_text()
                    .replace("../tests/reservation.lwf", "reservation-s.lwf"))
    proc = cli("optimize", "-c", conf, "--bound", "lp", "--time-limit", "20")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "OPTIMAL" and out["checker_violations"] == 0
    lp = out["lp_bound"]
    assert lp["status"] == "OPTIMAL" and lp["model"]["variables"] > 0
    assert 0 < lp["bound"] <= out["best_bound"] + 1e-6 <= out["objective"] + 1e-6


def test_lp_bound_refuses_a_large_workload_in_one_line(cli):
    proc = cli("optimize", "-c", HAIZEA / "expected" / "reservation.conf", "--bound", "lp")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--bound lp" in lines[0] and "too large" in lines[0]
    assert proc.stdout == ""


@pytest.mark.parametrize("args, message", [
    (["--time-limit", "-1"], "'--time-limit'"), (["--time-limit", "nan"], "'--time-limit'"),
    (["--time-limit", "0"], "'--time-limit'"), (["--workers", "0"], "'--workers'"),
    (["--workers", "-3"], "'--workers'"),
], ids=["time-limit-negative", "time-limit-nan", "time-limit-zero", "no-workers", "workers-negative"])
def test_solver_options_no_search_can_run_with_are_one_line(cli, args, message):
    proc = cli("optimize", "-c", HAIZEA / "expected" / "reservation.conf", *args)
    assert proc.returncode == 2 and message in proc.stderr and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
