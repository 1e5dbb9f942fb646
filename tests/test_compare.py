"""`optlease compare` as users run it: the manual's quickstart under two greedy modes, cpsat rounds and the offline
optimum, each run's data file and schedule written, the report's figures those of the data files."""
from __future__ import annotations

import json

import pytest

from conftest import INSTANCES
from optlease.checker import check_schedule
from optlease.errors import InputError
from optlease.report.compare import parse_estimates, parse_schedulers
from test_report import check_table, markdown_rows, optlease

SCHEDULERS = ["greedy-aggressive", "greedy-intermediate-4", "cpsat", "offline"]


def test_compare_quickstart_writes_every_run_and_the_report(tmp_path):
    done = optlease("compare", "-c", INSTANCES / "quickstart" / "quickstart.conf", "--schedulers",
                    ",".join(SCHEDULERS), "-o", tmp_path, "--offline-time-limit", "10")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"report: {tmp_path / 'report.html'}"
    files = [tmp_path / f"{name}.parquet" for name in SCHEDULERS]
    markdown = (tmp_path / "report.md").read_text()
    check_table(files, markdown, SCHEDULERS)
    # every schedule obeys the schedule contract, the offline optimum's too
    for name in SCHEDULERS:
        doc = json.loads((tmp_path / f"{name}.schedule.json").read_text())
        assert check_schedule(doc) == [], name
    rows = markdown_rows(markdown)
    # the manual's quickstart: the AR is accepted and suspends the best-effort lease under greedy backfilling;
    # knowing the AR in advance, the offline optimum starts the best-effort lease after it and suspends nothing
    assert rows["AR accepted (%)"] == ["100.0"] * 4
    assert rows["suspensions"][:2] == ["1.0", "1.0"] and rows["suspensions"][3] == "0.0"
    assert rows["offline bound (objective)"][:3] == ["-"] * 3 and rows["offline bound (objective)"][3] != "-"
    assert "- Run-time estimate booked by every scheduler: requested." in markdown
    assert markdown.count("](gantt-") == 4


@pytest.mark.parametrize("args, message", [
    (["--schedulers", "greedy-aggressive,greedy-fast"],
     "--schedulers: unknown scheduler 'greedy-fast' (known: greedy-off"),
    (["--schedulers", "greedy-off", "--injection", "no-such-injection.lwf"],
     "Invalid value for '--injection': file 'no-such-injection.lwf' does not exist."),
], ids=["unknown-scheduler", "missing-injection"])
def test_bad_requests_are_one_line_and_write_no_report(tmp_path, args, message):
    done = optlease("compare", "-c", INSTANCES / "quickstart" / "quickstart.conf", *args, "-o", tmp_path / "out")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and message in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text, message", [
    ("", "no scheduler named"),
    ("cpsat,cpsat", "a scheduler is named twice"),
    ("greedy-intermediate-0", "unknown scheduler 'greedy-intermediate-0'"),
    ("greedy-intermediate-x", "unknown scheduler"),
    (",".join(["cpsat"] * 17), "17 schedulers; at most 16"),
], ids=["empty", "twice", "zero-reservations", "not-a-number", "too-many"])
def test_bad_scheduler_lists(text, message):
    with pytest.raises(InputError, match=message):
        parse_schedulers(text)


@pytest.mark.parametrize("text, want", [
    (None, {"greedy-aggressive": "requested", "cpsat": "requested"}),
    ("user-history", {"greedy-aggressive": "user-history", "cpsat": "user-history"}),
    ("cpsat=user-history", {"greedy-aggressive": "requested", "cpsat": "user-history"}),
    ("user-history,greedy-aggressive=requested", {"greedy-aggressive": "requested", "cpsat": "user-history"}),
], ids=["the-configuration's", "all", "one", "all-but-one"])
def test_runtime_estimates(text, want):
    schedulers = parse_schedulers("greedy-aggressive,cpsat")
    assert parse_estimates(text, schedulers, "requested", ("requested", "user-history")) == want


@pytest.mark.parametrize("text, message", [
    ("guess", "'guess': the estimate must be one of requested, user-history"),
    ("offline=requested", "'offline' is not one of the schedulers compared"),
], ids=["unknown-estimate", "scheduler-not-compared"])
def test_bad_runtime_estimates(text, message):
    with pytest.raises(InputError, match=message):
        parse_estimates(text, parse_schedulers("cpsat"), "requested", ("requested", "user-history"))
