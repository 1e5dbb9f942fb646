"""`optlease check` as users run it: exit 0 for a valid schedule, 1 with one line per violation, 2 for a bad file."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DAY = "2006-11-25T"


def resv(kind: str, start: str, end: str, node: int) -> dict:
    return {"kind": kind, "start": DAY + start, "end": DAY + end, "mapping": {"1": node}}


def contract_example() -> dict:
    """The schedule contract's own example: one best-effort lease, suspended for half an hour on node 1."""
    return {"format": "optlease-schedule/1", "starttime": DAY + "13:00:00",
            "site": {"resource_types": ["CPU", "Memory"],
                     "nodes": {"1": {"CPU": 100, "Memory": 1024}, "2": {"CPU": 100, "Memory": 1024}}},
            "leases": [{"id": 1, "type": "best-effort", "preemptible": True, "arrival": DAY + "13:00:00",
                        "requested_start": None, "duration": 3600, "real_duration": 3600,
                        "vms": {"1": {"CPU": 100, "Memory": 1024}}, "state": "done", "reservations": [
                            resv("vm", "13:00:00", "13:29:28", 1), resv("suspend", "13:29:28", "13:30:00", 1),
                            resv("resume", "14:00:00", "14:00:32", 1), resv("vm", "14:00:32", "14:31:04", 1)]}]}


def overlapping() -> dict:
    """The example plus an AR on node 1 that starts a minute before lease 1 has suspended."""
    doc = contract_example()
    doc["leases"].append({"id": 2, "type": "ar", "preemptible": False, "arrival": DAY + "13:15:00",
                          "requested_start": DAY + "13:29:00", "duration": 1860,
                          "vms": {"1": {"CPU": 100, "Memory": 1024}}, "state": "done",
                          "reservations": [resv("vm", "13:29:00", "14:00:00", 1)]})
    return doc


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "optlease.cli.main", "check", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def write(tmp_path: Path, doc) -> Path:
    path = tmp_path / "schedule.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=2), encoding="utf-8")
    return path


def test_valid_schedule_exits_0_and_says_so(tmp_path):
    result = run_check(str(write(tmp_path, contract_example())))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["schedule OK: 1 leases, 4 reservations"]
    assert result.stderr == ""


def test_violations_exit_1_one_line_each(tmp_path):
    result = run_check(str(write(tmp_path, overlapping())))
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("lease 2: capacity: node 1 CPU 200 > 100 at 2006-11-25T13:29:00")
    assert lines[1].startswith("lease 2: capacity: node 1 Memory 2048 > 1024 at 2006-11-25T13:29:00")
    assert lines[-1] == "2 violations"


def test_json_output_lists_violations(tmp_path):
    result = run_check(str(write(tmp_path, overlapping())), "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is False and (report["leases"], report["reservations"]) == (2, 5)
    assert [(v["lease"], v["rule"]) for v in report["violations"]] == [(2, "capacity"), (2, "capacity")]
    valid = json.loads(run_check(str(write(tmp_path, contract_example())), "--json").stdout)
    assert valid["ok"] is True and valid["violations"] == []


# Each file cannot be read as a schedule: one line on stderr names the file and the fault, exit 2.
BAD_FILES = [
    pytest.param('{"format": "optlease-schedule/1",\n  "leases": [,]}', "line 2 column 14", id="json-syntax"),
    pytest.param("", "line 1 column 1", id="empty-file"),
    pytest.param('{"format": "optlease-schedule/1", "leases": [NaN]}', "NaN", id="nan-is-not-json"),
    pytest.param("[1, 2]", "not a schedule", id="not-an-object"),
    pytest.param({**contract_example(), "format": "optlease-schedule/2"}, "optlease-schedule/2", id="wrong-format-key"),
    pytest.param({"leases": []}, "format is None", id="no-format-key"),
]


@pytest.mark.parametrize("content, fault", BAD_FILES)
def test_unreadable_schedule_exits_2_with_one_line(tmp_path, content, fault):
    path = write(tmp_path, content)
    result = run_check(str(path))
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert str(path) in result.stderr and fault in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def latin1_file(tmp: Path) -> Path:
    path = tmp / "latin1.json"
    path.write_bytes(b'{"format": "caf\xe9"}')
    return path


@pytest.mark.parametrize("make, fault", [
    pytest.param(lambda tmp: tmp / "missing.json", "no such file", id="missing-file"),
    pytest.param(lambda tmp: tmp, "is a directory", id="directory"),
    pytest.param(latin1_file, "not UTF-8", id="not-utf8"),
])
def test_missing_or_unreadable_file_exits_2_with_one_line(tmp_path, make, fault):
    path = make(tmp_path)
    result = run_check(str(path))
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert str(path) in result.stderr and fault in result.stderr
    assert "Traceback" not in result.stderr
