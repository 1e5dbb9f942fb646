"""Runs' data files as CSV tables, as Haizea's `haizea-convert-data` prints them: one row per run (per-run), per
lease (per-lease) or per counter row (counter), each led by the columns that tell the runs apart (profile,
tracefile, injectionfile, then the runs' other attributes). Pure: data in, rows out."""
from __future__ import annotations

import csv
import io
from typing import Any, Iterable

from optlease.accounting.datafile import RunData
from optlease.errors import InputError

TYPES = ("per-run", "per-lease", "counter")
# attributes that describe the file rather than label the run (the configuration's text is many lines long)
NOT_COLUMNS = ("configuration", "format", "optlease_version")


def _union(names: Iterable[Iterable[str]]) -> list[str]:
    """Every name, once, in the order first met."""
    return list(dict.fromkeys(n for group in names for n in group))


def counter_names(runs: list[RunData]) -> list[str]:
    return _union(run.counter_kinds for run in runs)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def table(runs: list[tuple[str, RunData]], kind: str, counter: str | None = None) -> list[list[str]]:
    """The header and rows of `kind` over the runs (name, data): `counter` names the counter for kind counter."""
    if kind not in TYPES:
        raise InputError(f"unknown type {kind!r} (one of {', '.join(TYPES)})", "-t")
    data = [run for _, run in runs]
    attrs = _union(run.attrs for run in data)
    attrs = [a for a in attrs if a not in NOT_COLUMNS]
    if kind == "per-run":
        stats = _union(run.per_run for run in data)
        header = attrs + stats
        body = [[run.attrs.get(a, "") for a in attrs] + [_text(run.per_run.get(s)) for s in stats] for run in data]
    elif kind == "per-lease":
        stats = [s for s in _union(row for run in data for row in run.per_lease) if s != "id"]
        header = attrs + ["lease_id"] + stats
        body = [[run.attrs.get(a, "") for a in attrs] + [str(row["id"])] + [_text(row.get(s)) for s in stats]
                for run in data for row in run.per_lease]
    else:
        if not counter:
            raise InputError("-t counter needs the counter's name (-c NAME; -l lists them)", "-c")
        for name, run in runs:
            if counter not in run.counter_kinds:
                raise InputError(f"the data file has no counter called {counter!r} (-l lists its counters)", name)
        # Haizea prints an average column unless the counter keeps none
        averaged = any(run.counter_kinds[counter] != "AVERAGE_NONE" for run in data)
        header = attrs + ["time", "value"] + (["average"] if averaged else [])
        body = [[run.attrs.get(a, "") for a in attrs] + [str(t), _number(v)] + ([_text(avg)] if averaged else [])
                for run in data for t, v, avg in run.counters[counter]]
    return [header] + body


def _number(value: float) -> str:
    """A counter value as Haizea prints it: an integer count without a decimal point."""
    return str(int(value)) if float(value).is_integer() else str(value)


def to_csv(rows: list[list[str]]) -> str:
    """Comma-separated, quoted only where a field holds a comma, quote or line break (so plain tables read as
    Haizea's)."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()
