"""A report's files: finds the runs it is asked for (data files given by name or found in directories, each read with
the data file's reader, and the schedule written beside it, `X.parquet` and `X.schedule.json`, when there is one) and
writes the report (HTML, Markdown and its SVG figures) into a directory."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from optlease.errors import InputError

SUFFIX = ".parquet"
SCHEDULE_SUFFIX = ".schedule.json"
MAX_RUNS = 10_000   # a report of more runs than this is a mistake in its arguments (a whole disk), not a study


@dataclass
class Run:
    path: Path
    data: Any                       # optlease.accounting.datafile.RunData
    schedule: Optional[Path]        # its optlease-schedule/1 file, when one was written beside it


def data_files(paths: list[Path]) -> list[Path]:
    """The data files named, and those under the directories named (recursively, in name order); InputError naming
    the path for one that does not exist or a directory without any."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.rglob(f"*{SUFFIX}") if p.is_file())
            if not inside:
                raise InputError(f"no data files (*{SUFFIX}) in this directory", str(path))
            found.extend(inside)
        elif path.exists():
            found.append(path)
        else:
            raise InputError("no such file or directory", str(path))
        if len(found) > MAX_RUNS:
            raise InputError(f"more than {MAX_RUNS} data files: name the runs to compare", str(path))
    if not found:
        raise InputError("no runs to report on")
    return list(dict.fromkeys(found))


def schedule_beside(path: Path) -> Optional[Path]:
    name = path.name[:-len(SUFFIX)] if path.name.endswith(SUFFIX) else path.stem
    candidate = path.with_name(name + SCHEDULE_SUFFIX)
    return candidate if candidate.is_file() else None


def load_runs(paths: list[Path]) -> list[Run]:
    from optlease.accounting.datafile import read_run
    return [Run(p, read_run(p), schedule_beside(p)) for p in data_files(paths)]


def write_report(paths: list[Path], out: Path, title: str = "optlease report", notes: tuple[str, ...] = ()) -> Path:
    """Reads the runs, writes `report.html`, `report.md` and the Markdown's SVG figures into `out` (made if need
    be); returns the HTML file's path."""
    from optlease.report.gantt_stream import ScheduleFile
    from optlease.report.render import Source, build_report

    # a schedule is read, as a stream, only if its chart is drawn (a year of a large site is a file of a few GB)
    sources = [Source(str(run.path), run.data, ScheduleFile(run.schedule) if run.schedule else None,
                      str(run.schedule or "")) for run in load_runs(paths)]
    report = build_report(sources, title, list(notes))
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a directory", str(out))
    out.mkdir(parents=True, exist_ok=True)
    for name, svg in report.figures.items():
        _write(out / name, svg)
    _write(out / "report.md", report.markdown)
    _write(out / "report.html", report.html)
    return out / "report.html"


def _write(path: Path, text: str) -> None:
    """Whole or not at all: a report read while it is written is never half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
