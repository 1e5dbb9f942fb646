"""The Gantt chart of a schedule file read as a stream (formats/schedule_read), a lease at a time: the chart
`gantt.gantt_svg` draws of the whole document, with memory bounded by the chart (node occupancy per time bin and
lease kind) and the bars of its zoomed window, not by the file (a year of a large site: 25 million VMs in a file of a
few GB, over 10 GB as a document).

A schedule of at most `SMALL` bars is drawn from its bars as `gantt_svg` draws it. A larger one is read twice: first
for the span of time, the count of VMs and the starts of suspensions, resumes and migrations (where the window goes),
then for the occupancy, added up a block of bars at a time, and the bars inside the window."""
from __future__ import annotations

from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np

from optlease.errors import InputError
from optlease.formats.schedule_read import FORMAT, read_members
from optlease.report.gantt import (BINS, KIND_COLOURS, MARKS, Bar, detailed, draw, draw_detail, draw_large, header,
                                   lease_bars, window_of)

SMALL = 200_000      # bars kept from the first reading: a schedule with no more is drawn from them
BLOCK = 1 << 16      # bars added to the occupancy at once


@dataclass(frozen=True)
class ScheduleFile:
    """A run's schedule file, read only when its chart is drawn."""
    path: Path

    def chart(self, title: str, prefix: str) -> Optional[str]:
        return gantt_file_svg(self.path, title, prefix)


def gantt_file_svg(path: Path, title: str, prefix: str) -> Optional[str]:
    where = str(path)
    nodes: list[str] = []
    kept: list[Bar] | None = []
    marks, count, vms = array("q"), 0, 0
    begin, end = 0, None

    def first(bars: list[Bar], names: list[str]) -> None:
        nonlocal kept, count, vms, begin, end
        nodes[:] = names
        for b in bars:
            begin, end = min(begin, b.start), b.end if end is None else max(end, b.end)
            vms += b.kind == "vm"
            if b.kind in MARKS:
                marks.append(b.start)
        count += len(bars)
        if kept is not None:
            kept.extend(bars)
            if count > SMALL:
                kept = None

    _each_lease(path, where, first)
    if kept is not None:
        return draw(nodes, kept, title, prefix)
    assert end is not None
    window = (begin, end) if detailed(len(nodes), vms) else window_of(sorted(marks), begin, end)
    del marks
    occupancy = Occupancy(len(nodes), begin, end)
    shown: list[Bar] = []

    def second(bars: list[Bar], _: list[str]) -> None:
        occupancy.add(bars)
        shown.extend(b for b in bars if b.end > window[0] and b.start < window[1])

    _each_lease(path, where, second)
    if detailed(len(nodes), vms):
        return draw_detail(nodes, shown, begin, end, title, prefix)
    return draw_large(nodes, occupancy.busy(), begin, end, window, shown, title, prefix)


def _each_lease(path: Path, where: str, take: Callable[[list[Bar], list[str]], None]) -> None:
    """Gives `take` each lease's bars and the node names, once the format, the start time and the site are read (in
    a second reading of the file when the leases come before them); InputError as `schedule_json.load_schedule`
    and `gantt.bars_of` raise it."""
    top: dict[str, Any] = {}
    later = False
    for key, value in read_members(path):
        if key == "leases" and isinstance(value, Iterator):
            if "starttime" in top and "site" in top and top.get("format") == FORMAT:
                _take(top, value, where, take)
            else:
                later = True
            top[key] = []
        else:
            top[key] = value
    if top.get("format") != FORMAT:    # someone else's document, as `schedule_json.load_schedule` refuses it
        raise InputError(f"not a schedule: format is {top.get('format')!r}, expected {FORMAT!r}", where)
    if later:
        for key, value in read_members(path):
            if key == "leases" and isinstance(value, Iterator):
                _take(top, value, where, take)
    header(top, where)
    if "leases" not in top or not isinstance(top["leases"], list):
        fault = KeyError("leases") if "leases" not in top else "leases is not a list"
        raise InputError(f"not a readable schedule: {fault}", where)


def _take(top: dict[str, Any], leases: Iterator, where: str, take: Callable[[list[Bar], list[str]], None]) -> None:
    origin, nodes, row_of = header(top, where)
    for _, lease in leases:
        take(lease_bars(lease, origin, row_of, where), nodes)


class Occupancy:
    """`gantt.occupancy` added up a block of bars at a time: [kind, row, bin] -> the share of the bin VMs of leases
    of that kind ran on the node (the same sums, up to the rounding of their order)."""

    def __init__(self, rows: int, begin: int, end: int, bins: int = BINS) -> None:
        self.edges = np.linspace(begin, end, bins + 1)
        self.width = self.edges[1] - self.edges[0]
        self.begin, self.bins, self.kinds = begin, bins, list(KIND_COLOURS)
        self.part = np.zeros((len(self.kinds) + 1, rows, bins))           # bins a bar covers in part
        self.whole = np.zeros((len(self.kinds) + 1, rows, bins + 1), dtype=np.int32)   # bars covering a bin whole
        self.pending: list[Bar] = []

    def add(self, bars: list[Bar]) -> None:
        self.pending.extend(b for b in bars if b.kind == "vm" and b.end > b.start)
        if len(self.pending) >= BLOCK:
            self._flush()

    def _flush(self) -> None:
        bars, self.pending = self.pending, []
        if not bars:
            return
        kind_no = {k: i for i, k in enumerate(self.kinds)}
        k = np.array([kind_no.get(b.lease_kind, len(self.kinds)) for b in bars])
        row = np.array([b.row for b in bars])
        start = np.array([b.start for b in bars], dtype=float)
        end = np.array([b.end for b in bars], dtype=float)
        first = ((start - self.begin) // self.width).astype(np.int64)
        last = np.minimum(self.bins - 1, ((end - self.begin) // self.width).astype(np.int64))
        live = first <= last
        k, row, start, end, first, last = (a[live] for a in (k, row, start, end, first, last))
        edges = self.edges
        # the first bin and the last (when it is another), each in part, as `gantt.occupancy` works them out
        covered = np.minimum(edges[first + 1], end) - np.maximum(edges[first], start)
        np.add.at(self.part, (k, row, first), np.clip(covered, 0, None) / self.width)
        two = last != first
        covered = np.minimum(edges[last[two] + 1], end[two]) - np.maximum(edges[last[two]], start[two])
        np.add.at(self.part, (k[two], row[two], last[two]), np.clip(covered, 0, None) / self.width)
        inner = last - first >= 2   # the bins between, whole: a count per bin, by differences
        np.add.at(self.whole, (k[inner], row[inner], first[inner] + 1), 1)
        np.add.at(self.whole, (k[inner], row[inner], last[inner]), -1)

    def busy(self) -> np.ndarray:
        """The occupancy (its arrays are taken: worked out in place, a kind at a time, on the site's rows)."""
        self._flush()
        busy, whole, share = self.part, self.whole, np.diff(self.edges) / self.width
        for k in range(len(busy)):
            busy[k] += np.cumsum(whole[k], axis=1)[:, :self.bins] * share
        return busy
