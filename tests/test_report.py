"""`optlease report` as users run it: the table's figures are the data files' (read here with pandas, not with
optlease's reader), the HTML page opens offline, plots carry labelled axes, headless Chromium (Debian's package)
shows the table and every plot, and bad inputs are one line."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, strategies as st
from PIL import Image

from conftest import REPO
from optlease.accounting.datafile import RunData, write_run
from optlease.cli.main import main
from optlease.errors import InputError
from optlease.report.gantt import Bar, gantt_svg, occupancy
from optlease.report.render import Source, build_report
from optlease.report.table import group_runs

# label of the table's row -> (per-run stat(s), how the figure is computed from it); stated here again on purpose,
# from docs/accounting.md and docs/reports.md, so that the report's own reading is checked
FIGURES = {
    "AR accepted (%)": (("accepted_ar", "rejected_ar"), lambda a, r: 100 * a / (a + r)),
    "all best-effort done (h)": (("best_effort_all_completed_at",), lambda v: v / 3600),
    "best-effort wait, mean (s)": (("best_effort_wait_avg",), lambda v: v),
    "best-effort wait, max (s)": (("best_effort_wait_max",), lambda v: v),
    "bounded slowdown, mean": (("bounded_slowdown_avg",), lambda v: v),
    "CPU utilization (%)": (("cpu_utilization",), lambda v: 100 * v),
    "preemptions": (("preemptions",), lambda v: v),
}


def optlease(*args) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "optlease.cli.main", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def schedule(nodes: int, leases: list[tuple[str, int, int, int]]) -> dict:
    """A small optlease-schedule/1 document: (type, node, start, end) per lease, times in seconds."""
    def t(s: int) -> str:
        return (datetime(2006, 11, 25, 13) + timedelta(seconds=s)).isoformat()
    return {"format": "optlease-schedule/1", "starttime": t(0),
            "site": {"resource_types": ["CPU"], "nodes": {str(n): {"CPU": 100} for n in range(1, nodes + 1)}},
            "leases": [{"id": i, "type": kind, "reservations": [
                {"kind": "vm", "start": t(s), "end": t(e), "mapping": {"1": node}}]}
                for i, (kind, node, s, e) in enumerate(leases, start=1)]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Two profiles x three injections, each run's figures different, one run with a schedule beside it."""
    root = tmp_path_factory.mktemp("runs")
    for p, profile in enumerate(["aggressive", "nosusp"]):
        for i in range(3):
            k = 1 + p * 3 + i
            per_run = {"accepted_ar": 10 + k, "rejected_ar": k % 3, "best_effort_all_completed_at": 7200 + 977 * k,
                       "best_effort_wait_avg": 100.25 * k, "best_effort_wait_max": 1000 + 333 * k,
                       "bounded_slowdown_avg": 1 + k / 7, "cpu_utilization": 0.5 + k / 50,
                       "preemptions": k * (p + 1)}
            leases = [{"id": j, "kind": "best-effort" if j % 4 else "ar", "waiting_time": float(j * k * 10)}
                      for j in range(1, 40)]
            counters = {"CPU utilization": [(t * 600, ((t + k) % 7) / 7, None) for t in range(30)],
                        "Queue size": [(t * 600, (t * k) % 9, None) for t in range(30)]}
            write_run(root / profile / f"inj{i}.parquet", RunData(
                attrs={"profile": profile, "tracefile": "trace.lwf", "injectionfile": f"inj{i}.lwf",
                       "configuration": "[general]\n"},
                per_run=per_run, per_lease=leases, counters=counters,
                counter_kinds={"CPU utilization": "AVERAGE_TIMEWEIGHTED", "Queue size": "AVERAGE_NONE"}))
    doc = schedule(6, [("best-effort", 1, 0, 3600), ("ar", 2, 600, 4000), ("immediate", 3, 0, 900)])
    (root / "aggressive" / "inj0.schedule.json").write_text(json.dumps(doc))
    return root


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory) -> Path:
    return report_of(runs, tmp_path_factory.mktemp("report"))


def markdown_rows(text: str) -> dict[str, list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split(" | ")] for line in lines)}


def check_table(files: list[Path], markdown: str, columns: list[str]) -> None:
    """The report's table holds, for every column (profile), the mean of the column's runs and its lowest and
    highest run, each figure computed here from the per-run rows pandas reads from the files."""
    frame = pd.concat(pd.read_parquet(p) for p in files)
    stats = frame[frame.section == "per-run"].pivot_table(index=["profile", "injectionfile"], columns="name",
                                                         values="value")
    rows = markdown_rows(markdown)
    assert [c.split(" (")[0] for c in rows["figure"]] == columns
    for label, (names, figure) in FIGURES.items():
        for column, profile in enumerate(columns):
            values = [figure(*(stats.loc[index, n] for n in names)) for index in stats.index if index[0] == profile]
            shown = [float(x.replace(",", "")) for x in re.findall(r"[\d,]+\.?\d*", rows[label][column])]
            digits = len(rows[label][column].split(" ")[0].partition(".")[2])
            want = [sum(values) / len(values)] + ([min(values), max(values)] if len(set(values)) > 1 else [])
            # each to the digits shown
            assert len(shown) == len(want), (label, profile, rows[label][column])
            for got, value in zip(shown, want):
                assert abs(got - value) <= 0.5 * 10 ** -digits + 1e-9, (label, profile, got, value)


def test_table_figures_are_the_data_files(runs, report):
    check_table(sorted(runs.rglob("*.parquet")), (report / "report.md").read_text(), ["aggressive", "nosusp"])
    rows = markdown_rows((report / "report.md").read_text())
    assert rows["figure"] == ["aggressive (3 runs)", "nosusp (3 runs)"]
    # the HTML page shows the same cells
    page = (report / "report.html").read_text()
    for label, cells in rows.items():
        if label in FIGURES:
            assert re.search(r"<tr><td>" + re.escape(label) + "</td>" + "".join(
                f"<td>{re.escape(c)}</td>" for c in cells), page), label


def test_columns_that_ran_different_workloads_are_also_compared_on_the_ones_they_share(runs, tmp_path):
    """A third profile run on one of the three injections: the report keeps the table over every run and adds the
    table over that injection alone, whose cells are the figures of that injection's runs in every column."""
    extra = tmp_path / "cpsat" / "inj1.parquet"
    write_run(extra, RunData(
        attrs={"profile": "cpsat", "tracefile": "trace.lwf", "injectionfile": "inj1.lwf", "configuration": "[x]\n"},
        per_run={"accepted_ar": 30, "rejected_ar": 0, "best_effort_all_completed_at": 9000,
                 "best_effort_wait_avg": 42.5, "best_effort_wait_max": 777, "bounded_slowdown_avg": 1.5,
                 "cpu_utilization": 0.9, "preemptions": 12},
        per_lease=[{"id": 1, "kind": "best-effort", "waiting_time": 42.5}], counters={}, counter_kinds={}))
    out = tmp_path / "report"
    done = optlease("report", runs, extra.parent, "-o", out)
    assert done.returncode == 0, done.stderr
    markdown = (out / "report.md").read_text()
    everything, shared = markdown.split("## On the workloads every column ran")
    assert "over the 1 that every column ran (trace / inj1)" in shared
    files = sorted(runs.rglob("*.parquet"))
    check_table(files + [extra], everything, ["aggressive", "nosusp", "cpsat"])
    check_table([f for f in files if f.stem == "inj1"] + [extra], shared.split("![")[0],
                ["aggressive", "nosusp", "cpsat"])
    assert 'id="figures-shared"' in (out / "report.html").read_text()
    # columns that ran the same workloads get no second table
    assert "every column ran" not in (report_of(runs, tmp_path / "same") / "report.md").read_text()


def report_of(runs: Path, out: Path) -> Path:
    done = optlease("report", runs, "-o", out)
    assert done.returncode == 0, done.stderr
    return out


class Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.tags: set[str] = set()
        self.svg_text: list[list[str]] = []
        self._in_text = False

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.refs += [v or "" for k, v in attrs if k in ("src", "href", "xlink:href", "action", "srcset")]
        if tag == "svg":
            self.svg_text.append([])
        self._in_text = tag == "text"

    def handle_endtag(self, tag):
        self._in_text = False

    def handle_data(self, data):
        if self._in_text and self.svg_text:
            self.svg_text[-1].append(data.strip())


def test_html_is_self_contained_and_every_plot_labels_its_axes(report):
    page = (report / "report.html").read_text()
    refs = Refs()
    refs.feed(page)
    assert not re.search(r"https?:|//[a-z]", page, re.I)
    assert all(r.startswith(("#", "data:")) for r in refs.refs), [r[:40] for r in refs.refs if r[:1] != "#"]
    assert not refs.tags & {"script", "link", "iframe", "object", "embed"}
    assert not re.search(r"url\((?!#)|@import|@font-face", page)
    # Gantt, timeline, waits, bars: in that order, each with its axes' labels (with units)
    labels = [" ".join(texts) for texts in refs.svg_text]
    assert len(labels) == 4
    wanted = [["time since the schedule's start (minutes)", "node (6)"],
              ["time since the run's start (hours)", "CPU utilization (%)", "queue length (leases)"],
              ["best-effort wait before first start (minutes, logarithmic past a minute)", "leases waiting at most x (%)"],
              ["AR accepted (%)", "CPU utilization (%)", "column"]]
    for text, want in zip(labels, wanted):
        assert all(w in text for w in want), (want, text[:300])


CHROMIUM = shutil.which("chromium")
HEADER = np.array([0xee, 0xee, 0xff])   # the tables' header background (report CSS)


def screenshot(page: Path, png: Path, height: int) -> np.ndarray:
    # no network at all: the page must not need it
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--proxy-server=127.0.0.1:9", f"--user-data-dir={png.parent / 'chromium'}",
                    f"--window-size=1000,{height}",
                    f"--screenshot={png}", page.as_uri()], capture_output=True, timeout=180, check=True)
    return np.asarray(Image.open(png).convert("RGB")).astype(int)


def blocks(image: np.ndarray) -> list[tuple[int, int]]:
    """(top, bottom) of each band of rows with something drawn, the bands parted by blank rows."""
    inked = (image < 245).any(axis=2).any(axis=1)
    out, top = [], None
    for y, ink in enumerate([*inked, False]):
        if ink and top is None:
            top = y
        elif not ink and top is not None:
            out.append((top, y))
            top = None
    return out


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/setup.sh test installs it)")
def test_chromium_shows_the_table_and_every_plot(report, tmp_path):
    html = (report / "report.html").read_text()
    refs = Refs()
    refs.feed(html)
    image = screenshot(report / "report.html", tmp_path / "report.png", 5000)
    assert (image[-40:] >= 245).all(), "the page is longer than the screenshot"
    # tall bands: the figures table, each figure in its frame, the table of runs (headings and notes are short)
    tall = [(a, b) for a, b in blocks(image) if b - a >= 60]
    assert len(tall) == 2 + len(refs.svg_text) == 6
    for a, b in (tall[0], tall[-1]):
        region = image[a:b]
        assert (np.abs(region - HEADER).sum(axis=2) <= 6).sum() > 1000      # a header row
        assert ((region < 100).all(axis=2)).sum() > 300                      # dark text in the cells
    for a, b in tall[1:-1]:
        region = image[a:b]
        drawn = (region < 245).any(axis=2).mean()
        colour = (region.max(axis=2) - region.min(axis=2) > 60).sum()        # lines, bars, leases: not grey
        text = ((region < 100).all(axis=2)).sum()                            # axis labels and ticks
        assert drawn > 0.03 and colour > 500 and text > 300, (a, b, drawn, colour, text)


def foreign(d: Path) -> Path:
    (d / "x.parquet").write_text("id,wait\n1,2\n")
    return d / "x.parquet"


def empty(d: Path) -> Path:
    (d / "empty").mkdir()
    return d / "empty"


@pytest.mark.parametrize("setup, message", [
    (foreign, "not a Parquet file"),
    (empty, "no data files (*.parquet) in this directory"),
    (lambda d: d / "missing.parquet", "no such file or directory"),
], ids=["foreign-file", "empty-directory", "missing"])
def test_bad_runs_are_one_line_and_exit_2(tmp_path, capsys, setup, message):
    # the CLI's entry point in this process (the report fixture runs it as a subprocess)
    assert main(["report", str(setup(tmp_path)), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not (tmp_path / "out" / "report.html").exists()


def test_a_corrupt_schedule_beside_a_run_is_one_line_naming_it(runs, tmp_path, capsys):
    (tmp_path / "a.parquet").write_bytes((runs / "nosusp" / "inj0.parquet").read_bytes())
    (tmp_path / "a.schedule.json").write_text('{"format": "optlease-schedule/1", "starttime": "2006-11-25T13:00:00",'
                                              ' "site": {"nodes": {"1": {}}}, "leases": [{"id": 7, "type": "ar", '
                                              '"reservations": [{"kind": "vm", "start": "soon"}]}]}')
    assert main(["report", str(tmp_path / "a.parquet"), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a.schedule.json" in err and "lease 7" in err


def test_an_output_that_is_a_file_is_one_line(runs, tmp_path):
    # (a schedule of any size is drawn: it is read as a stream, tests/test_report_stream.py)
    from optlease.report import files
    run = runs / "aggressive" / "inj0.parquet"
    (tmp_path / "taken").write_text("")
    with pytest.raises(InputError, match=r"taken: exists and is not a directory"):
        files.write_report([run], tmp_path / "taken")


def test_names_from_data_files_are_text_not_markup(tmp_path):
    hostile = '<script>alert("x")</script> & <img src=http://x>'
    runs = [RunData(attrs={"profile": f"{hostile}{i}", "tracefile": hostile, "injectionfile": "",
                           "configuration": ""}, per_run={"accepted_ar": i, "rejected_ar": 1},
                    per_lease=[{"id": 1, "kind": "best-effort", "waiting_time": 5.0 * i}],
                    counters={"Queue size": [(0, 1.0, None), (60, float(i), None)]},
                    counter_kinds={"Queue size": "AVERAGE_NONE"}) for i in (1, 2)]
    page = build_report([Source(f"run{i}.parquet", r) for i, r in enumerate(runs)], hostile, [hostile]).html
    refs = Refs()
    refs.feed(page)
    assert not refs.tags & {"script", "img"} and all(r.startswith(("#", "data:")) for r in refs.refs)
    assert page.count("&lt;script&gt;") >= 4     # the title, the note, the table's head, the runs


def test_a_month_on_144_nodes_is_drawn_as_occupancy_with_a_zoomed_window():
    leases = [("best-effort" if i % 3 else "ar", 1 + i % 144, i * 1800, i * 1800 + 86400) for i in range(1440)]
    svg = gantt_svg(schedule(144, leases), "month", "month", "m")
    assert svg.count("<image") == 1            # the occupancy, one pixel per node and time bin
    assert "zoomed window" in svg and "node occupancy" in svg and "(days)" in svg and "(hours)" in svg


def test_an_unreadable_reservation_names_the_file_and_lease():
    doc = schedule(2, [("ar", 1, 0, 60)])
    doc["leases"][0]["reservations"][0]["mapping"] = {"1": 9}   # a node the site does not have
    with pytest.raises(InputError, match=r"^f\.json: lease 1: a reservation on node '9', which the site does not have$"):
        gantt_svg(doc, "f.json", "t", "p")


@given(st.integers(1, 50), st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10_000), st.integers(0, 10_000),
                                              st.sampled_from(["ar", "best-effort", "immediate", "other"])),
                                    min_size=1, max_size=30))
def test_occupancy_keeps_every_vm_second_on_its_node_and_kind(bins, spans):
    bars = [Bar(row, min(a, b), max(a, b), kind, "vm") for row, a, b, kind in spans]
    end = max(b.end for b in bars) or 1
    busy = occupancy(bars, 4, 0, end, bins)
    width = end / bins
    kinds = ["ar", "best-effort", "immediate", "other"]
    for k, kind in enumerate(kinds):
        for row in range(4):
            held = sum(b.end - b.start for b in bars if b.row == row and b.lease_kind == kind)
            assert abs(busy[k, row].sum() * width - held) < 1e-6 * max(1, held)
    assert busy.min() >= 0


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", ""]), st.sampled_from(["t1", "t2"]),
                          st.sampled_from(["", "i1", "i2"])), min_size=1, max_size=12))
def test_every_run_is_in_exactly_one_column(runs):
    attrs = [{"profile": p, "tracefile": t, "injectionfile": i} for p, t, i in runs]
    columns = group_runs(attrs)
    assert sorted(i for ix in columns.values() for i in ix) == list(range(len(runs)))
