"""`optlease convert-data` as users run it: CSV tables over one run or many, told apart by their attribute
columns, with the data files' figures exactly; bad input as one line and a non-zero exit."""
from __future__ import annotations

import csv
import io

import pytest

from conftest import run_cli
from inproc import optlease
from optlease.accounting.datafile import read_run
from test_accounting import simulate, write_case


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The hand-worked admission case run twice with the same trace, labelled as two profiles of a sweep (as
    Haizea's multi-configuration sets [accounting] attributes), so only the attributes tell them apart."""
    paths = []
    for profile in ("first", "second"):
        tmp = tmp_path_factory.mktemp(profile)
        conf = write_case(tmp, "ar best-effort immediate")
        conf.write_text(conf.read_text().replace(
            "[accounting]\n", f"[accounting]\nattributes: profile={profile},injectfile=inj-{profile}.lwf\n"))
        proc = simulate(conf)
        assert proc.returncode == 0, proc.stderr
        paths.append(tmp / "case.parquet")
    return paths


def table(*args, cli=optlease) -> list[dict[str, str]]:
    proc = cli("convert-data", *args)
    assert proc.returncode == 0, proc.stderr
    return list(csv.DictReader(io.StringIO(proc.stdout)))


def test_per_run_has_one_row_per_run_with_the_files_figures(two_runs):
    rows = table("-t", "per-run", *two_runs, cli=run_cli)
    assert [(r["profile"], r["injectionfile"]) for r in rows] == [("first", "inj-first.lwf"),
                                                                  ("second", "inj-second.lwf")]
    for row, path in zip(rows, two_runs):
        data = read_run(path).per_run
        assert row["Total rejected AR"] == "1" and row["all-best-effort"] == "1300"
        # every figure as the data file holds it, floats to the last digit
        assert row["bounded_slowdown_avg"] == repr(data["bounded_slowdown_avg"])
        assert row["cpu_utilization"] == repr(data["cpu_utilization"])
        assert row["best_effort_all_completed_at"] == "1300"


def test_per_lease_has_one_row_per_lease_and_run(two_runs):
    rows = table("-t", "per-lease", *two_runs)
    assert len(rows) == 12
    assert list(rows[0])[:4] == ["profile", "tracefile", "injectionfile", "lease_id"]
    waits = {(r["profile"], r["lease_id"]): r["Waiting time"] for r in rows}
    # Haizea leaves a stat a probe did not collect for a lease empty
    assert waits[("first", "5")] == "1100" and waits[("second", "1")] == ""


def test_counter_with_and_without_average(two_runs):
    queue = table("-t", "counter", "-c", "Queue size", two_runs[0])
    assert [(r["time"], r["value"]) for r in queue] == [("0", "0"), ("100", "1"), ("1200", "0")]
    assert float(queue[-1]["average"]) == pytest.approx(1100 / 1200)
    rejected = optlease("convert-data", "-t", "counter", "-c", "Rejected AR", *two_runs)
    assert rejected.stdout.splitlines()[0] == "profile,tracefile,injectionfile,time,value"
    assert len(rejected.stdout.splitlines()) == 1 + 2 * 3


def test_list_counters(two_runs):
    proc = optlease("convert-data", "-l", *two_runs)
    assert proc.stdout.splitlines() == ["Accepted AR", "Rejected AR", "Best-effort completed", "Queue size",
                                        "Accepted Immediate", "Rejected Immediate"]


@pytest.mark.parametrize("args, words", [
    (["-t", "counter", "-c", "Nope"], "has no counter called 'Nope'"),
    (["-t", "counter"], "-c: -t counter needs the counter's name"),
    (["-t", "per-host"], "unknown type 'per-host'"),
    ([], "-t: say what to print"),
    (["-t", "per-run", "-f", "xlsx"], "unknown format 'xlsx'"),
    (["-t", "per-run", "--bogus"], "--bogus"),
], ids=["unknown-counter", "no-counter", "unknown-type", "no-type", "unknown-format", "unknown-option"])
def test_bad_arguments_are_one_line(two_runs, args, words):
    proc = optlease("convert-data", *args, *two_runs)
    assert proc.returncode != 0 and proc.stdout == ""
    assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_foreign_file_among_runs_is_named(two_runs, tmp_path):
    foreign = tmp_path / "notes.parquet"
    foreign.write_text("profile,value\n")
    proc = optlease("convert-data", "-t", "per-run", two_runs[0], foreign)
    assert proc.returncode != 0 and proc.stdout == ""
    assert f"{foreign}: not a Parquet file" in proc.stderr
