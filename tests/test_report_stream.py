"""The report's Gantt chart of a schedule file read as a stream (report/gantt_stream.py) is the chart of the whole
document (`gantt_svg(load_schedule(path))`): the same SVG for small schedules, drawn from their bars; for large ones,
read twice, the same occupancy up to the rounding of its sums and the same bars in the zoomed window; a file that is
not a readable schedule is the same one-line error."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optlease.errors import InputError
from optlease.formats.schedule_json import load_schedule
from optlease.report import gantt_stream
from optlease.report.gantt import Bar, gantt_svg, occupancy
from optlease.report.gantt_stream import Occupancy, gantt_file_svg
from test_report import schedule


def write(tmp_path: Path, doc, name: str = "s.schedule.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=1), encoding="utf-8")
    return path


def whole(path: Path) -> str:
    try:
        return gantt_svg(load_schedule(path), str(path), "t", "p")
    except InputError as exc:
        return str(exc)


def streamed(path: Path) -> str:
    try:
        return gantt_file_svg(path, "t", "p")
    except InputError as exc:
        return str(exc)


def month(n: int = 1440) -> dict:
    doc = schedule(144, [("best-effort" if i % 3 else "ar", 1 + i % 144, i * 1800, i * 1800 + 86400)
                         for i in range(n)])
    for i, lease in enumerate(doc["leases"][::7]):     # suspensions, where the zoomed window goes
        lease["reservations"].append({**lease["reservations"][0], "kind": "suspend"})
        lease["reservations"][0]["mapping"] = {"1": 1 + (i * 5) % 144}
    return doc


@pytest.mark.parametrize("doc", [
    pytest.param(schedule(6, [("best-effort", 1, 0, 3600), ("ar", 2, 600, 4000), ("immediate", 3, 0, 900)]),
                 id="every-reservation"),
    pytest.param(month(), id="occupancy-and-window"),
])
def test_a_small_schedule_is_drawn_as_the_document_is(tmp_path, doc):
    path = write(tmp_path, doc)
    assert streamed(path) == whole(path)


def test_a_large_schedule_read_twice_is_drawn_as_the_document_is(tmp_path, monkeypatch):
    path = write(tmp_path, month())
    expected = whole(path)
    monkeypatch.setattr(gantt_stream, "SMALL", 10)         # read twice: the bars are not kept
    monkeypatch.setattr(gantt_stream, "BLOCK", 100)        # the occupancy added up a block at a time
    assert streamed(path) == expected
    assert "zoomed window" in expected and expected.count("<image") >= 1


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 50), st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10_000), st.integers(0, 10_000),
                                              st.sampled_from(["ar", "best-effort", "immediate", "other"])),
                                    min_size=1, max_size=40), st.integers(1, 7))
def test_occupancy_added_a_block_at_a_time_is_the_occupancy(bins, spans, block):
    bars = [Bar(row, min(a, b), max(a, b), kind, "vm") for row, a, b, kind in spans]
    end = max(b.end for b in bars) or 1
    acc = Occupancy(4, 0, end, bins)
    for i in range(0, len(bars), block):
        acc.add(bars[i:i + block])
    assert np.allclose(acc.busy(), occupancy(bars, 4, 0, end, bins), rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("text", [
    pytest.param(json.dumps({**schedule(2, [("ar", 1, 0, 60)]), "format": "other"}), id="other-format"),
    pytest.param('{"format": "optlease-schedule/1", "starttime": "2006-11-25T13:00:00", "leases": []}',
                 id="no-site"),
    pytest.param('{"format": "optlease-schedule/1", "starttime": "2006-11-25T13:00:00", "site": {"nodes": {}}}',
                 id="no-leases"),
    pytest.param('{"format": "optlease-schedule/1", "starttime": "2006-11-25T13:00:00", "site": {"nodes": {}}, '
                 '"leases": {}}', id="leases-not-a-list"),
    pytest.param('{"format": "optlease-schedule/1", "starttime": "2006-11-25T13:00:00", "site": {"nodes": '
                 '{"1": {}}}, "leases": [{"id": 7, "type": "ar", "reservations": [{"kind": "vm", "start": "soon"}]}]}',
                 id="bad-time"),
    pytest.param(json.dumps(schedule(2, [("ar", 9, 0, 60)])), id="unknown-node"),
    pytest.param(json.dumps(schedule(2, [("ar", 1, 0, 60)]))[:-30], id="truncated"),
])
def test_an_unreadable_schedule_is_the_same_one_line_error(tmp_path, text):
    path = write(tmp_path, text)
    assert streamed(path) == whole(path)
    assert "\n" not in streamed(path)


def test_leases_before_the_site_are_drawn_alike(tmp_path):
    doc = schedule(6, [("best-effort", 1, 0, 3600), ("ar", 2, 600, 4000)])
    path = write(tmp_path, {"leases": doc.pop("leases"), **doc})
    assert streamed(path) == whole(path) and streamed(path).startswith("<")
