"""A grid end to end through the CLI: run-experiments, then report and convert-data over the same data files. The
report's table must say what convert-data's CSV says, figure by figure and profile by profile, to the digits the
report prints: a researcher who rebuilds a table from the CSV gets the report's numbers."""
from __future__ import annotations

import csv
import io
import re
import subprocess
import sys
from collections import defaultdict
from statistics import mean

from conftest import INSTANCES, REPO


# a run without ARs (a trace alone, no injection) has no AR share: the report leaves it out of that row
def ar_share(row: dict) -> float | None:
    asked = float(row["accepted_ar"]) + float(row["rejected_ar"])
    return 100 * float(row["accepted_ar"]) / asked if asked else None


# report row -> (the per-run value from a convert-data row, the digits the report prints)
ROWS = {
    "AR accepted (%)": (ar_share, 1),
    "all best-effort done (h)": (lambda r: float(r["best_effort_all_completed_at"]) / 3600, 2),
    "best-effort wait, mean (s)": (lambda r: float(r["best_effort_wait_avg"]), 1),
    "best-effort wait, max (s)": (lambda r: float(r["best_effort_wait_max"]), 0),
    "bounded slowdown, mean": (lambda r: float(r["bounded_slowdown_avg"]), 2),
    "CPU utilization (%)": (lambda r: 100 * float(r["cpu_utilization"]), 1),
    "preemptions": (lambda r: float(r["preemptions"]), 1),
    "suspensions": (lambda r: float(r["suspensions"]), 1),
    "migrations": (lambda r: float(r["migrations"]), 1),
}
NUMBER = re.compile(r"-?[\d,]+(?:\.\d+)?")


def optlease(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "optlease.cli.main", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def report_table(markdown: str) -> tuple[list[str], dict[str, list[str]]]:
    """The profiles (in column order) and each figure's cells, from the report's first Markdown table."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    profiles = [re.sub(r" \(\d+ runs?\)$", "", cell) for cell in header[1:]]
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return profiles, rows


def numbers(cell: str) -> list[float]:
    return [float(n.replace(",", "")) for n in NUMBER.findall(cell)]


def test_convert_data_rebuilds_the_reports_table_of_a_grid(tmp_path):
    data, confs, out = tmp_path / "data", tmp_path / "confs", tmp_path / "report"
    optlease("run-experiments", "-c", str(INSTANCES / "experiments" / "multi.conf"), "-d", str(confs),
             "--datadir", str(data), "--workers", "2")
    files = sorted(str(p) for p in data.glob("*.parquet"))
    assert len(files) == 24
    optlease("report", str(data), "-o", str(out))
    profiles, cells = report_table((out / "report.md").read_text())
    by_profile: dict[str, list[dict]] = defaultdict(list)
    for row in csv.DictReader(io.StringIO(optlease("convert-data", "-t", "per-run", *files).stdout)):
        by_profile[row["profile"]].append(row)
    assert sorted(profiles) == sorted(by_profile) and all(len(rows) == 6 for rows in by_profile.values())
    for figure, (value, digits) in ROWS.items():
        assert figure in cells, f"the report has no row {figure!r}"
        for profile, cell in zip(profiles, cells[figure]):
            values = [v for v in map(value, by_profile[profile]) if v is not None]
            expected = [mean(values)] + ([min(values), max(values)] if round(min(values), digits) !=
                                         round(max(values), digits) else [])
            shown = numbers(cell)
            assert len(shown) == len(expected), (figure, profile, cell)
            for got, want in zip(shown, expected):
                assert abs(got - want) <= 0.5 * 10 ** -digits + 1e-9, (figure, profile, cell, expected)
