"""The Gantt chart of a schedule (optlease-schedule/1): nodes x time, leases coloured by kind, suspensions, resumes
and migrations marked. A large schedule (a month on 144 nodes) is drawn as node occupancy over time, one pixel per
node and time bin, with a zoomed window drawn lease by lease. Pure: takes the parsed document."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional

import numpy as np

from optlease.errors import InputError
from optlease.formats.timefmt import TimeFormatError, parse_iso
from optlease.report.plots import time_unit
from optlease.report.svg import KIND_COLOURS, new_figure, to_svg

# past these, lease-by-lease bars are unreadable and the whole run is drawn as occupancy plus a zoomed window
DETAIL_NODES = 32
DETAIL_BARS = 400
BINS = 480            # time bins of the occupancy image, about one per pixel column
MARKS = {"suspend": ("v", "suspend"), "resume": ("^", "resume"), "migrate": (">", "migration")}


@dataclass(frozen=True, slots=True)   # a large schedule's zoomed window holds a million or more
class Bar:
    row: int          # the node's row in the chart
    start: int        # seconds since the schedule's start time
    end: int
    lease_kind: str   # ar | best-effort | immediate (others drawn grey)
    kind: str         # the reservation's kind: vm, suspend, resume, migrate, ...


def bars_of(doc: dict[str, Any], where: str) -> tuple[list[str], list[Bar]]:
    """The node names (rows) and every reservation on every node it holds; InputError naming the schedule file and
    lease when a field is not what the contract says."""
    origin, nodes, row_of = header(doc, where)
    try:
        leases = doc["leases"]
        if not isinstance(leases, list):
            raise TypeError("leases is not a list")
    except (KeyError, TypeError) as exc:
        raise InputError(f"not a readable schedule: {exc}", where) from None
    bars = []
    for lease in leases:
        bars.extend(lease_bars(lease, origin, row_of, where))
    return nodes, bars


def header(doc: dict[str, Any], where: str) -> tuple[datetime, list[str], dict[str, int]]:
    """The schedule's start time, its node names in row order and each one's row."""
    try:
        origin = parse_iso(str(doc["starttime"]))
        nodes = [str(n) for n in doc["site"]["nodes"]]
    except (KeyError, TypeError, TimeFormatError) as exc:
        raise InputError(f"not a readable schedule: {exc}", where) from None
    nodes.sort(key=lambda n: (0, int(n), n) if n.isdigit() else (1, 0, n))
    return origin, nodes, {n: i for i, n in enumerate(nodes)}


def lease_bars(lease: Any, origin: datetime, row_of: dict[str, int], where: str) -> list[Bar]:
    """Every reservation of one lease on every node it holds."""
    bars = []
    try:
        for r in lease["reservations"]:
            start, end = _seconds(r["start"], origin), _seconds(r["end"], origin)
            # a migration holds the lease on the nodes it leaves as well as where it goes
            held = [*r["mapping"].values(), *(r.get("from") or {}).values()]
            kind = "migrate" if r["kind"] in ("migrate", "transfer") and r.get("from") else str(r["kind"])
            for node in dict.fromkeys(str(n) for n in held):
                if node not in row_of:
                    raise InputError(f"lease {_id(lease)}: a reservation on node {node[:20]!r}, which the site "
                                     "does not have", where)
                bars.append(Bar(row_of[node], start, end, str(lease["type"]), kind))
    except TimeFormatError as exc:
        raise InputError(f"lease {_id(lease)}: {exc.message}", where) from None
    except (KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"lease {_id(lease)}: a reservation without a readable {exc} field" if isinstance(
            exc, KeyError) else f"lease {_id(lease)}: not shaped as the schedule contract says ({exc})",
            where) from None
    return bars


def _id(lease: Any) -> str:
    return str(lease.get("id"))[:20] if isinstance(lease, dict) else "?"


def _seconds(text: Any, origin: datetime) -> int:
    return int((parse_iso(str(text)) - origin).total_seconds())


def gantt_svg(doc: dict[str, Any], where: str, title: str, prefix: str) -> Optional[str]:
    nodes, bars = bars_of(doc, where)
    return draw(nodes, bars, title, prefix)


def span(bars: list[Bar]) -> tuple[int, int]:
    """From the schedule's start (schedules of the same workload line up) to the last bar's end."""
    return min(0, min(b.start for b in bars)), max(b.end for b in bars)


def detailed(nodes: int, vms: int) -> bool:
    """Whether every reservation is drawn (else occupancy and a zoomed window)."""
    return nodes <= DETAIL_NODES and vms <= DETAIL_BARS


def draw(nodes: list[str], bars: list[Bar], title: str, prefix: str) -> Optional[str]:
    if not bars:
        return None
    begin, end = span(bars)
    if detailed(len(nodes), sum(b.kind == "vm" for b in bars)):
        return draw_detail(nodes, bars, begin, end, title, prefix)
    window = window_of(sorted(b.start for b in bars if b.kind in MARKS), begin, end)
    return draw_large(nodes, occupancy(bars, len(nodes), begin, end), begin, end, window,
                      [b for b in bars if b.end > window[0] and b.start < window[1]], title, prefix)


def draw_detail(nodes: list[str], bars: list[Bar], begin: int, end: int, title: str, prefix: str) -> str:
    scale, unit = time_unit(end - begin)
    fig = new_figure(7.5, 1.2 + 0.18 * len(nodes))
    ax = fig.add_subplot()
    _detail(ax, bars, begin, end, scale)
    _frame(ax, nodes, unit, f"{title}: every reservation")
    return to_svg(fig, prefix)


def draw_large(nodes: list[str], busy: np.ndarray, begin: int, end: int, window: tuple[int, int],
               shown: list[Bar], title: str, prefix: str) -> str:
    """Occupancy (`busy`, as `occupancy` gives it) over the run, the window boxed, and the `shown` bars in it."""
    scale, unit = time_unit(end - begin)
    fig = new_figure(7.5, 7.0)
    top, bottom = fig.subplots(2, 1, height_ratios=[1.2, 1])
    _occupancy(top, busy, len(nodes), begin, end, scale)
    top.axvspan(window[0] / scale, window[1] / scale, fill=False, edgecolor="black", linewidth=1.2)
    _frame(top, nodes, unit, f"{title}: node occupancy (share of each time bin a VM ran), window boxed")
    wscale, wunit = time_unit(window[1] - window[0])
    _detail(bottom, shown, *window, wscale)
    _frame(bottom, nodes, wunit, f"zoomed window: {window[0] / scale:.1f}–{window[1] / scale:.1f} {unit}")
    return to_svg(fig, prefix)


def window_of(marks: Any, begin: int, end: int) -> tuple[int, int]:
    """A window a twentieth of the run long (at least six hours), placed where the most suspensions, resumes and
    migrations (`marks`: their starts, in order) happen (else at the start): where the schedule is most worth
    reading closely."""
    length = max((end - begin) // 20, 6 * 3600)
    if length >= end - begin:
        return begin, end
    events = np.asarray(marks, dtype=np.int64)
    if len(events) == 0:
        return begin, begin + length
    counts = np.searchsorted(events, events + length) - np.arange(len(events))
    start = int(min(events[int(np.argmax(counts))], end - length))
    return start, start + length


def occupancy(bars: list[Bar], rows: int, begin: int, end: int, bins: int = BINS) -> np.ndarray:
    """[kind, row, bin] -> the share of the time bin that VMs of leases of that kind (KIND_COLOURS' order, then any
    other) ran on the node; one per VM running, so two VMs side by side all the bin make 2."""
    edges = np.linspace(begin, end, bins + 1)
    width = edges[1] - edges[0]
    kinds = list(KIND_COLOURS)
    busy = np.zeros((len(kinds) + 1, rows, bins))
    for b in bars:
        if b.kind != "vm" or b.end <= b.start:
            continue
        k = kinds.index(b.lease_kind) if b.lease_kind in kinds else len(kinds)
        first, last = int((b.start - begin) // width), min(bins - 1, int((b.end - begin) // width))
        covered = np.minimum(edges[first + 1:last + 2], b.end) - np.maximum(edges[first:last + 1], b.start)
        busy[k, b.row, first:last + 1] += np.clip(covered, 0, None) / width
    return busy


def _occupancy(ax, busy: np.ndarray, rows: int, begin: int, end: int, scale: float) -> None:
    # several VMs on one node in one bin count once: the pixel shows the share of time the node ran any VM
    total = busy.sum(axis=0)
    share = np.clip(total, 0, 1)
    rgb = np.ones((rows, BINS, 3))
    colours = [np.array(_rgb(c)) for c in KIND_COLOURS.values()] + [np.array([0.5, 0.5, 0.5])]
    with np.errstate(invalid="ignore", divide="ignore"):
        for k, colour in enumerate(colours):
            weight = np.where(total > 0, busy[k] / total, 0) * share
            rgb -= weight[..., None] * (1 - colour)
    ax.imshow(rgb, aspect="auto", interpolation="nearest", origin="lower",
              extent=(begin / scale, end / scale, -0.5, rows - 0.5))
    _legend(ax, marks=False)


def _detail(ax, bars: list[Bar], begin: int, end: int, scale: float) -> None:
    from matplotlib.collections import PolyCollection

    vms = [b for b in bars if b.kind == "vm"]
    many = len(vms) > DETAIL_BARS
    for kind in dict.fromkeys(b.lease_kind for b in vms):
        boxes = _boxes([b for b in vms if b.lease_kind == kind], scale)
        # thousands of boxes are an image inside the SVG (one pixel each would weigh a megabyte as paths)
        ax.add_collection(PolyCollection(boxes, facecolors=KIND_COLOURS.get(kind, "grey"),
                                         edgecolors="none" if many else "white", linewidths=0.3, rasterized=many))
    for kind, (marker, _) in MARKS.items():
        xs = [b.start / scale for b in bars if b.kind == kind]
        ys = [b.row for b in bars if b.kind == kind]
        if xs:
            ax.scatter(xs, ys, marker=marker, s=5 if many else 18, color="black", linewidths=0, zorder=3)
    ax.set_xlim(begin / scale, end / scale)
    _legend(ax, marks=True)


def _boxes(vms: list[Bar], scale: float) -> np.ndarray:
    """[box, corner, x or y]: each bar's box, corners from its start's bottom, counter-clockwise."""
    x0 = np.array([b.start for b in vms], dtype=float) / scale
    x1 = np.array([b.end for b in vms], dtype=float) / scale
    row = np.array([b.row for b in vms], dtype=float)
    low, high = row - 0.4, row + 0.4
    return np.stack([np.stack([x0, low], 1), np.stack([x1, low], 1), np.stack([x1, high], 1),
                     np.stack([x0, high], 1)], 1)


def _frame(ax, nodes: list[str], unit: str, title: str) -> None:
    ax.set_xlabel(f"time since the schedule's start ({unit})")
    ax.set_ylabel(f"node ({len(nodes)})")
    ax.set_ylim(-0.5, len(nodes) - 0.5)
    step = max(1, len(nodes) // 12)
    ticks = list(range(0, len(nodes), step))
    ax.set_yticks(ticks, [nodes[i] for i in ticks])
    ax.set_title(title, fontsize=8)
    ax.grid(False)


def _legend(ax, marks: bool) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    handles = [Patch(color=c, label=k) for k, c in KIND_COLOURS.items()]
    if marks:
        handles += [Line2D([], [], marker=m, color="black", linestyle="", label=label) for m, label in MARKS.values()]
    ax.legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _rgb(hex_colour: str) -> tuple[float, float, float]:
    return tuple(int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5))  # type: ignore[return-value]
