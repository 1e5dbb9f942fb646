"""Golden scenarios: optlease's greedy mode logs exactly what Haizea 1.1 logged on its own scenarios and on the
manual's quickstart (same decisions, nodes and times), and every schedule it writes obeys the contract."""
from __future__ import annotations

import io

import pytest

from optlease.checker import check_schedule
from optlease.engine.run import simulate
from optlease.formats.config import load_config
from optlease.formats.schedule_json import schedule_document

from conftest import INSTANCES

EXPECTED = INSTANCES / "haizea" / "expected"
CASES = sorted(p.stem for p in EXPECTED.glob("*.conf"))


def test_every_reference_scenario_is_covered():
    assert set(CASES) >= {"quickstart-qs2", "quickstart-qs2-nosusp", "preemption", "preemption_prematureend",
                          "preemption_prematureend2", "reservation", "reservation_prematureend", "migrate", "wait",
                          "quickstart-qs2-imagetransfer", "quickstart-qs2-imagetransfer-nosusp", "reuse1", "reuse2"}


@pytest.mark.parametrize("name", CASES)
def test_log_matches_haizea(name):
    cfg = load_config(EXPECTED / f"{name}.conf")
    out = io.StringIO()
    result = simulate(cfg, out=out)
    expected = (EXPECTED / f"{name}.log").read_text().splitlines()
    assert out.getvalue().splitlines() == expected
    doc = schedule_document(result.site, result.leases, cfg.get("simulation", "starttime"), result.images)
    assert [str(v) for v in check_schedule(doc)] == []
