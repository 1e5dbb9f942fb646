"""The report's plots of run data: utilization and queue length over time, the CDF of best-effort waits, and
per-column bars of the table's figures with their spread over runs. Each returns an inline SVG. Pure."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
from matplotlib.ticker import EngFormatter, FuncFormatter

from optlease.report.svg import new_figure, to_svg
from optlease.report.table import Table

# The counters of the cpu-utilization and best-effort probes, and optlease's own per-lease stats (docs/accounting.md)
UTILIZATION_COUNTER = "CPU utilization"
QUEUE_COUNTER = "Queue size"
LEASE_KIND, LEASE_WAIT = "kind", "waiting_time"
BEST_EFFORT = "best-effort"

Counter = list[tuple[int, float, Optional[float]]]


def time_unit(span: float) -> tuple[float, str]:
    """Seconds per unit and the unit's name for an axis spanning `span` seconds."""
    if span > 3 * 86400:
        return 86400.0, "days"
    if span > 3 * 3600:
        return 3600.0, "hours"
    return 60.0, "minutes"


def timeline_svg(series: dict[str, dict[str, Counter]], prefix: str) -> Optional[str]:
    """Utilization (%) and queue length (leases) over the run, one line per column (its first run); none when no
    run has either counter."""
    panels = [(UTILIZATION_COUNTER, "CPU utilization (%)", 100.0), (QUEUE_COUNTER, "queue length (leases)", 1.0)]
    panels = [p for p in panels if any(counters.get(p[0]) for counters in series.values())]
    if not panels:
        return None
    span = max((rows[-1][0] for counters in series.values() for name, *_ in panels
                for rows in [counters.get(name)] if rows), default=0)
    scale, unit = time_unit(span)
    fig = new_figure(7.5, 2.2 * len(panels))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (name, label, factor) in zip(axes, panels):
        for column, counters in series.items():
            rows = counters.get(name)
            if rows:
                t = np.array([r[0] for r in rows], dtype=float) / scale
                v = np.array([r[1] for r in rows], dtype=float) * factor
                ax.step(t, v, where="post", label=column, linewidth=0.9)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
    axes[-1].set_xlabel(f"time since the run's start ({unit})")
    _legend_below(fig, axes[0])
    return to_svg(fig, prefix)


def waits(per_lease: list[dict[str, Any]]) -> list[float]:
    """The waiting times (s) of the best-effort leases that started."""
    out = []
    for row in per_lease:
        wait = row.get(LEASE_WAIT)
        if row.get(LEASE_KIND) == BEST_EFFORT and isinstance(wait, (int, float)) and wait == wait:
            out.append(float(wait))
    return out


def wait_cdf_svg(column_waits: dict[str, list[float]], prefix: str) -> Optional[str]:
    """The share of best-effort leases that waited at most x, per column (all its runs pooled)."""
    column_waits = {c: w for c, w in column_waits.items() if w}
    if not column_waits:
        return None
    scale, unit = time_unit(max(max(w) for w in column_waits.values()))
    fig = new_figure(7.5, 3.0)
    ax = fig.add_subplot()
    for column, values in column_waits.items():
        x = np.sort(np.array(values)) / scale
        y = np.arange(1, len(x) + 1) / len(x) * 100
        ax.step(np.concatenate([[0.0], x]), np.concatenate([[0.0], y]), where="post", label=column, linewidth=1)
    # waits span seconds to weeks: linear up to a minute, logarithmic past it, so both ends can be read
    ax.set_xscale("symlog", linthresh=60 / scale, linscale=0.5)
    top = max(max(w) for w in column_waits.values()) / scale
    ax.set_xticks([0.0, *(10.0 ** e for e in range(int(np.ceil(np.log10(60 / scale))),
                                                  int(np.ceil(np.log10(max(top, 60 / scale)))) + 1))])
    ax.set_xlabel(f"best-effort wait before first start ({unit}, logarithmic past a minute)")
    ax.set_ylabel("leases waiting at most x (%)")
    ax.set_ylim(0, 100)
    ax.set_xlim(left=0)
    _legend_below(fig, ax)
    return to_svg(fig, prefix)


def bars_svg(table: Table, prefix: str) -> Optional[str]:
    """One small bar chart per figure of the table: each column's mean, whiskers from its lowest to its highest
    run (the spread over injections); none when there is only one column to compare."""
    if len(table.columns) < 2 or not table.rows:
        return None
    per_row = 3
    lines = -(-len(table.rows) // per_row)
    fig = new_figure(7.5, 1.9 * lines)
    axes = fig.subplots(lines, per_row, squeeze=False).ravel()
    x = np.arange(len(table.columns))
    colours = [f"C{i % 10}" for i in range(len(table.columns))]
    for ax, (metric, cells) in zip(axes, table.rows):
        means = np.array([c.mean if c.values else np.nan for c in cells])
        low = np.array([c.mean - c.low if c.values else 0 for c in cells])
        high = np.array([c.high - c.mean if c.values else 0 for c in cells])
        ax.bar(x, np.nan_to_num(means), color=colours, yerr=[low, high], capsize=3, ecolor="#333333")
        ax.set_title(metric.label, fontsize=8)
        ax.set_ylabel(metric.unit, fontsize=7)
        ax.yaxis.set_major_formatter(_short)    # 2M, 500k: no "1e6" above the axis
        ax.set_ylim(0, None if np.nanmax(np.nan_to_num(means) + high) > 0 else 1)
        ax.set_xticks(x, [str(i + 1) for i in x], fontsize=7)
        ax.set_xlabel("column", fontsize=7)
    for ax in axes[len(table.rows):]:
        ax.set_visible(False)
    fig.legend(handles=[_patch(c, f"{i + 1}: {n}") for i, (c, n) in enumerate(zip(colours, table.columns))], loc="outside lower center",
               ncols=min(4, len(table.columns)), fontsize=7,
               title="columns (whiskers: lowest and highest run)", title_fontsize=7)
    return to_svg(fig, prefix)


_ENG = EngFormatter(sep="")


@FuncFormatter
def _short(value: float, _position) -> str:
    return _ENG(value) if abs(value) >= 1000 else f"{value:g}"


def _legend_below(fig, ax) -> None:
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)), fontsize=7)


def _patch(colour: str, name: str):
    from matplotlib.patches import Patch
    return Patch(color=colour, label=name)
