"""`optlease simulate`'s additions as users run them: --injection, the headline figures on standard error after
Haizea's log, the progress bar on a terminal only, and the data file beside its schedule."""
from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest

from conftest import run_cli
from inproc import optlease
from optlease.accounting.datafile import read_run
from optlease.domain.lease import LeaseKind, LeaseRequest
from optlease.formats.lwf import Workload
from optlease.formats.lwf_write import dump_lwf
from test_accounting import ADMISSIONS, write_case


def injection(path, arrival: int, nodes: int = 1) -> None:
    vms = tuple({"CPU": 100, "Memory": 1024} for _ in range(nodes))
    path.write_bytes(dump_lwf(Workload("inj", [LeaseRequest(1, LeaseKind.BEST_EFFORT, arrival, 50, vms)])))


def test_injection_replaces_the_configurations_and_is_recorded(tmp_path):
    conf = write_case(tmp_path, "best-effort")
    injection(tmp_path / "in-conf.lwf", 10)
    injection(tmp_path / "given.lwf", 20, nodes=2)
    conf.write_text(conf.read_text().replace("[tracefile]\n", f"[tracefile]\ninjectionfile: {tmp_path}/in-conf.lwf\n"))
    proc = optlease("simulate", "-c", conf, "-q", "--injection", tmp_path / "given.lwf", "--schedule-out",
                   tmp_path / "case.schedule.json")
    assert proc.returncode == 0, proc.stderr
    run = read_run(tmp_path / "case.parquet")
    assert run.attrs["injectionfile"] == str(tmp_path / "given.lwf")
    injected = [row for row in run.per_lease if row["arrival"] == 20]
    assert len(run.per_lease) == len(ADMISSIONS) + 1 and [row["numnodes"] for row in injected] == [2]
    assert (tmp_path / "case.schedule.json").is_file()
    # the configuration's own injection, without --injection
    assert optlease("simulate", "-c", conf, "-q").returncode == 0
    assert [row["arrival"] for row in read_run(tmp_path / "case.parquet").per_lease].count(10) == 1


def test_a_missing_injection_is_one_line(tmp_path):
    proc = optlease("simulate", "-c", write_case(tmp_path, "ar"), "--injection", tmp_path / "nowhere.lwf")
    assert proc.returncode != 0 and "nowhere.lwf" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--tracefile", "{tmp}/binary"], "cannot tell the trace format"),
    (["--tracefile", "{tmp}"], "Is a directory"),
    (["--injection", "{tmp}/empty"], "cannot tell the trace format"),
    (["--schedule-out", "{tmp}"], "Is a directory"),
    (["--summary-out", "{tmp}/no/such/folder/summary.json"], "No such file or directory"),
], ids=["binary-trace", "trace-is-a-folder", "empty-injection", "schedule-into-a-folder", "summary-nowhere"])
def test_files_it_cannot_read_or_write_are_one_line(tmp_path, args, message):
    """Files given on the command line that are not traces, or places a result cannot be written: one line naming
    the file, exit 2, and nothing written halfway."""
    conf = write_case(tmp_path, "ar")
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00\x01" * 64)
    (tmp_path / "empty").write_bytes(b"")
    args = [a.format(tmp=tmp_path) for a in args]
    proc = optlease("simulate", "-c", conf, "-q", *args)
    assert proc.returncode == 2 and message in proc.stderr and args[1] in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_figures_come_after_the_log_on_stderr(tmp_path):
    proc = run_cli("simulate", "-c", write_case(tmp_path, "ar"))
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[-1].endswith("---- End summary ----")
    assert "run figures" not in proc.stdout
    lines = proc.stderr.splitlines()
    assert lines[0] == "optlease: run figures (6 leases, mapper greedy)"
    assert "  ARs rejected:                         1" in lines
    assert any(line.startswith("  best-effort wait, max:") and line.endswith(" s") for line in lines)


def stderr_on_a_terminal(args) -> tuple[int, str]:
    """Run the CLI with its standard error on a pseudo-terminal (standard output on a pipe)."""
    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm", COLUMNS="120")
    proc = subprocess.Popen([sys.executable, "-m", "optlease.cli.main", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=slave, env=env)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    proc.stdout.read()
    return proc.wait(timeout=120), seen.decode(errors="replace")


def test_progress_shows_on_a_terminal_only(tmp_path):
    conf = write_case(tmp_path, "ar")
    code, seen = stderr_on_a_terminal(["simulate", "-c", conf, "-q"])
    assert code == 0 and f"{len(ADMISSIONS)}/{len(ADMISSIONS)}" in seen and "requests" in seen
    assert "run figures" in seen
    piped = optlease("simulate", "-c", conf, "-q")
    assert "simulating" not in piped.stderr and f"{len(ADMISSIONS)}/" not in piped.stderr



def test_schedule_file_from_the_configuration(tmp_path):
    conf = write_case(tmp_path, "ar")
    conf.write_text(conf.read_text().replace("[accounting]\n", "[accounting]\nschedule-file: case.schedule.json\n"))
    assert optlease("simulate", "-c", conf, "-q").returncode == 0
    schedule = json.loads((tmp_path / "case.schedule.json").read_text())
    assert schedule["format"] == "optlease-schedule/1" and len(schedule["leases"]) == len(ADMISSIONS)
