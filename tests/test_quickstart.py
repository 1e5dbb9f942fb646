"""The manual's quickstart through the command line: the exact times of every reservation, to the second."""
from __future__ import annotations

import json

import pytest

from conftest import INSTANCES

QS = INSTANCES / "quickstart"


def reservations(doc, lease_id):
    lease = next(item for item in doc["leases"] if item["id"] == lease_id)
    return [(r["kind"], r["start"][11:], r["end"][11:], sorted(r["mapping"].values()), r.get("outcome"))
            for r in lease["reservations"]]


@pytest.mark.parametrize("conf, lease1", [
    pytest.param("quickstart.conf", [
        ("vm", "13:00:00", "13:29:28", [1], None),
        ("suspend", "13:29:28", "13:30:00", [1], None),
        ("resume", "14:00:00", "14:00:32", [1], None),
        ("vm", "14:00:32", "14:31:04", [1], None),
        ("shutdown", "14:31:04", "14:31:04", [1], None),
    ], id="suspend-resume"),
    pytest.param("quickstart-nosusp.conf", [
        ("vm", "13:00:00", "13:15:00", [1], "requeued"),
        ("vm", "14:00:00", "15:00:00", [1], None),
        ("shutdown", "15:00:00", "15:00:00", [1], None),
    ], id="cancel-and-requeue"),
])
def test_quickstart_times(cli, tmp_path, conf, lease1):
    sched, summary = tmp_path / "schedule.json", tmp_path / "summary.json"
    proc = cli("simulate", "-c", QS / conf, "--schedule-out", sched, "--summary-out", summary)
    assert proc.returncode == 0, proc.stderr
    assert "Lease 1's VMs have shutdown." in proc.stdout
    doc = json.loads(sched.read_text())
    assert reservations(doc, 1) == lease1
    assert reservations(doc, 2) == [("vm", "13:30:00", "14:00:00", [1, 2, 3, 4], None),
                                    ("shutdown", "14:00:00", "14:00:00", [1, 2, 3, 4], None)]
    assert [lease["state"] for lease in doc["leases"]] == ["done", "done"]
    figures = json.loads(summary.read_text())
    assert figures["ar"] == {"accepted": 1, "rejected": 0}
    assert figures["best_effort"]["completed"] == 1
    assert figures["preemptions"] == 1
    checked = cli("check", sched)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_demo_log_reads_like_the_manual(cli):
    proc = cli("simulate", "-c", QS / "quickstart.conf")
    lines = [line[25:] for line in proc.stdout.splitlines()]
    assert "LSCHED  ... lease #1 will be suspended at 2006-11-25 13:30:00.00." in lines
    assert "VMSCHED Started VMs for lease 2 on nodes [2, 3, 4, 1]" in lines
    assert proc.stdout.splitlines()[-4].endswith("Done:                    2 (1 Best-effort + 1 AR)")
