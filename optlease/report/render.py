"""A report's content from its runs: the comparison table, the plots and the list of runs, as one self-contained HTML
page (inline CSS and SVG, nothing fetched) and as Markdown with the plots beside it as SVG files. Pure."""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Optional

from optlease.report.gantt import gantt_svg
from optlease.report.plots import QUEUE_COUNTER, UTILIZATION_COUNTER, bars_svg, timeline_svg, wait_cdf_svg, waits
from optlease.report.table import Table, build_table, group_runs, markdown_table, run_label, shared_runs, workload

MAX_GANTTS = 4   # one per column, the first few: a chart per run of a 216-run grid is not read


@dataclass
class Report:
    html: str
    markdown: str
    figures: dict[str, str] = field(default_factory=dict)   # file name -> SVG, for the Markdown


@dataclass(frozen=True)
class Source:
    """What the report needs of one run: its data file's contents, where it came from, its schedule if any."""
    name: str
    data: Any                              # optlease.accounting.datafile.RunData
    schedule: Any = None                   # its optlease-schedule/1 document, or its file (.chart(title, prefix))
    schedule_name: str = ""


def build_report(sources: list[Source], title: str, notes: list[str]) -> Report:
    attrs = [dict(s.data.attrs) for s in sources]
    columns = group_runs(attrs)
    per_run = [s.data.per_run for s in sources]
    table = build_table(columns, per_run)
    shared = shared_runs(attrs, columns)
    paired = None if shared is None else Paired(
        build_table(shared, per_run),
        sorted({" / ".join(p for p in workload(attrs[i]) if p) for ix in shared.values() for i in ix}))
    figures: list[tuple[str, str, str]] = []     # (file name, caption, svg)

    def add(name: str, caption: str, svg: Optional[str]) -> None:
        if svg is not None:
            figures.append((name, caption, svg))

    shown = 0
    for column, indices in columns.items():
        first = next((i for i in indices if sources[i].schedule is not None), None)
        if first is None or shown == MAX_GANTTS:
            continue
        shown += 1
        s = sources[first]
        # a document in memory, or a file read as a stream when its chart is drawn (gantt_stream.ScheduleFile)
        svg = gantt_svg(s.schedule, s.schedule_name, column, f"g{shown}") if isinstance(s.schedule, dict) \
            else s.schedule.chart(column, f"g{shown}")
        add(f"gantt-{shown}.svg", f"Schedule of {run_label(attrs[first])} ({s.schedule_name})", svg)
    series = {c: _counters(sources[ix[0]].data) for c, ix in columns.items()}
    add("timeline.svg", "CPU utilization and best-effort queue length over time (first run of each column)",
        timeline_svg(series, "t"))
    add("waits.svg", "Cumulative distribution of best-effort waits (all runs of each column)",
        wait_cdf_svg({c: [w for i in ix for w in waits(sources[i].data.per_lease)] for c, ix in columns.items()}, "w"))
    add("bars.svg", "The table's figures per column: bar at the mean, whiskers from the lowest to the highest run",
        bars_svg(table, "b"))
    runs = [(run_label(a), s.name, a.get("optlease_version", "")) for a, s in zip(attrs, sources)]
    return Report(_html(title, notes, table, paired, figures, runs),
                  _markdown(title, notes, table, paired, figures, runs),
                  {name: svg for name, _, svg in figures})


@dataclass(frozen=True)
class Paired:
    """The table again over only the workloads every column ran (when the columns ran different sets)."""
    table: Table
    workloads: list[str]

    def caption(self) -> str:
        names = ", ".join(self.workloads) if len(self.workloads) <= 20 else f"{len(self.workloads)} workloads"
        return (f"The columns ran different workloads; over the {len(self.workloads)} that every column ran "
                f"({names}), each cell is the mean over those runs only:")


def _counters(data: Any) -> dict[str, list]:
    return {name: list(data.counters.get(name) or []) for name in (UTILIZATION_COUNTER, QUEUE_COUNTER)}


CSS = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 62em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #eef; }
figure { margin: 1em 0; padding: 0.4em; border: 1px solid #ccc; } figcaption { font-size: 0.85em; color: #555; }
figure svg { max-width: 100%; height: auto; }
.notes { font-size: 0.9em; }
"""


def _html(title: str, notes: list[str], table: Table, paired: Optional[Paired], figures: list[tuple[str, str, str]],
          runs: list[tuple[str, str, str]]) -> str:
    e = html.escape
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{e(title)}</title>"
             f"<style>{CSS}</style></head><body>\n<h1>{e(title)}</h1>"]
    if notes:
        parts.append("<ul class=\"notes\">" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    parts.append(f"<h2>Figures</h2><p class=\"notes\">{e(CELLS)}</p>")
    parts.append(_html_table(table, "figures"))
    if paired is not None:
        parts.append(f"<h2>On the workloads every column ran</h2><p class=\"notes\">{e(paired.caption())}</p>")
        parts.append(_html_table(paired.table, "figures-shared"))
    for name, caption, svg in figures:
        parts.append(f"<h2>{e(caption.split(' (')[0])}</h2><figure id=\"{e(name[:-4])}\">{svg}"
                     f"<figcaption>{e(caption)}</figcaption></figure>")
    parts.append("<h2>Runs</h2><table><thead><tr><th>run</th><th>data file</th><th>optlease</th></tr></thead><tbody>"
                 + "".join(f"<tr><td>{e(a)}</td><td>{e(b)}</td><td>{e(c)}</td></tr>" for a, b, c in runs)
                 + "</tbody></table></body></html>\n")
    return "\n".join(parts)


CELLS = "Each cell is the mean over the column's runs, and in brackets the lowest and highest run where they differ."


def _html_table(table: Table, ident: str) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c)}" + (f" ({table.runs[c]} runs)" if table.runs[c] > 1 else "") + "</th>"
                   for c in table.columns)
    body = "".join("<tr><td>" + e(m.label) + "</td>" + "".join(f"<td>{e(c.text(m.digits))}</td>" for c in cells)
                   + "</tr>\n" for m, cells in table.rows)
    return f"<table id=\"{ident}\"><thead><tr><th>figure</th>{head}</tr></thead><tbody>\n{body}</tbody></table>"


def _markdown(title: str, notes: list[str], table: Table, paired: Optional[Paired],
              figures: list[tuple[str, str, str]], runs: list[tuple[str, str, str]]) -> str:
    lines = [f"# {title}", ""]
    lines += [f"- {n}" for n in notes] + ([""] if notes else [])
    lines += [CELLS, "", markdown_table(table)]
    if paired is not None:
        lines += ["## On the workloads every column ran", "", paired.caption(), "", markdown_table(paired.table)]
    for name, caption, _ in figures:
        lines += [f"![{caption}]({name})", ""]
    lines += ["## Runs", "", "| run | data file | optlease |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in runs]
    return "\n".join(lines) + "\n"
