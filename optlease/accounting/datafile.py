"""The run data file (`optlease-data/1`): one Parquet file per run, a tidy long table that pandas, polars or any
Parquet reader concatenates over many runs. `write_run` writes it atomically, `read_run` reads it back or names in one
line why it cannot (missing, foreign, corrupt, or another format). The layout is documented in docs/datafile.md."""
from __future__ import annotations

import json
import math
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from optlease.errors import InputError

FORMAT = "optlease-data/1"
FORMAT_FAMILY = "optlease-data/"
SECTIONS = ("per-run", "per-lease", "counter")
COUNTER_KINDS = ("AVERAGE_NONE", "AVERAGE_NORMAL", "AVERAGE_TIMEWEIGHTED")
REQUIRED_ATTRS = ("profile", "tracefile", "injectionfile", "configuration")
# every column, in order; the first three repeat the run's attrs so that many runs' rows can be stacked
COLUMNS = ("profile", "tracefile", "injectionfile", "section", "name", "lease_id", "time", "value", "average",
           "text")
COLUMN_TYPES = {"profile": "string", "tracefile": "string", "injectionfile": "string", "section": "string",
                "name": "string", "lease_id": "int64", "time": "int64", "value": "double", "average": "double",
                "text": "string"}
# Parquet schema metadata keys
META_FORMAT = b"optlease.format"
META_ATTRS = b"optlease.attrs"
META_KINDS = b"optlease.counter_kinds"
META_INTS = b"optlease.int_fields"
_EXACT_INT = 2 ** 53  # the largest integer a float64 `value` holds exactly

Value = float | int | str | None


@dataclass
class RunData:
    """One run's accounting. `per_lease` rows each carry an int `id`; `counters` rows are (time, value, average),
    with each counter's averaging kind (one of COUNTER_KINDS) in `counter_kinds`."""
    attrs: dict[str, str] = field(default_factory=dict)
    per_run: dict[str, Value] = field(default_factory=dict)
    per_lease: list[dict[str, Value]] = field(default_factory=list)
    counters: dict[str, list[tuple[int, float, float | None]]] = field(default_factory=dict)
    counter_kinds: dict[str, str] = field(default_factory=dict)


def optlease_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("optlease")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def _cell(section: str, name: str, value: Any) -> tuple[float | None, str | None]:
    """(value, text) for one stat; a programming error (TypeError/ValueError) for what the format cannot hold."""
    if value is None:
        return None, None
    if isinstance(value, str):
        return None, value
    if isinstance(value, bool):
        return float(value), None
    if isinstance(value, int):
        if abs(value) > _EXACT_INT:
            raise ValueError(f"{section} stat {name!r}: integer {value} does not fit a float64 exactly")
        return float(value), None
    if isinstance(value, float):
        return value, None
    raise TypeError(f"{section} stat {name!r}: {type(value).__name__} is not a number, a string or None")


def _table(run: RunData):
    import pyarrow as pa

    attrs = {"profile": "", "tracefile": "", "injectionfile": "", "configuration": "", **run.attrs}
    attrs.setdefault("optlease_version", optlease_version())
    if attrs.setdefault("format", FORMAT) != FORMAT:
        raise ValueError(f"attrs format is {attrs['format']!r}; this writer writes {FORMAT}")
    for key, val in attrs.items():
        if not isinstance(key, str) or not isinstance(val, str):
            raise TypeError(f"attr {key!r}: attrs are strings")
    cols: dict[str, list] = {c: [] for c in COLUMNS[3:]}
    ints: dict[str, set[str]] = {"per-run": set(), "per-lease": set()}
    floats: dict[str, set[str]] = {"per-run": set(), "per-lease": set()}

    def row(section: str, name: str, lease_id: int | None, time: int | None, value: Any,
            average: float | None = None) -> None:
        number, text = _cell(section, name, value)
        if section in ints and number is not None:
            (ints if isinstance(value, int) else floats)[section].add(name)
        for col, val in zip(COLUMNS[3:], (section, name, lease_id, time, number, average, text)):
            cols[col].append(val)

    for name, value in run.per_run.items():
        row("per-run", str(name), None, None, value)
    seen: set[int] = set()
    for lease in run.per_lease:
        lease_id = lease.get("id")
        if not isinstance(lease_id, int) or isinstance(lease_id, bool) or lease_id in seen:
            raise ValueError(f"per-lease row without an int id of its own: {lease!r:.80}")
        seen.add(lease_id)
        # the id has a row of its own too, so a lease with no other stat is kept and a pivot gets an id column
        row("per-lease", "id", lease_id, None, lease_id)
        for name, value in lease.items():
            if name != "id":
                row("per-lease", str(name), lease_id, None, value)
    unknown = set(run.counters) ^ set(run.counter_kinds)
    if unknown:
        raise ValueError(f"counters and counter_kinds name different counters: {sorted(unknown)}")
    for name, rows in run.counters.items():
        if run.counter_kinds[name] not in COUNTER_KINDS:
            raise ValueError(f"counter {name!r}: kind {run.counter_kinds[name]!r} is not one of {COUNTER_KINDS}")
        for time, value, average in rows:
            row("counter", name, None, int(time), float(value), None if average is None else float(average))
    n = len(cols["section"])
    arrays = [pa.array([attrs[c]] * n, pa.string()) for c in COLUMNS[:3]]
    types = {"section": pa.string(), "name": pa.string(), "lease_id": pa.int64(), "time": pa.int64(),
             "value": pa.float64(), "average": pa.float64(), "text": pa.string()}
    arrays += [pa.array(cols[c], types[c]) for c in COLUMNS[3:]]
    # a name is an int field when every number it holds is an int (mixed int/float reads back as float)
    int_fields = {s: sorted(ints[s] - floats[s]) for s in ints}
    metadata = {META_FORMAT: FORMAT.encode(), META_ATTRS: json.dumps(attrs).encode(),
                META_KINDS: json.dumps(run.counter_kinds).encode(), META_INTS: json.dumps(int_fields).encode()}
    return pa.Table.from_arrays(arrays, names=list(COLUMNS)).replace_schema_metadata(metadata)


def write_run(path: str | Path, run: RunData) -> None:
    """Write `run` to `path` atomically: readers see the old file or the whole new one, never a part."""
    import pyarrow.parquet as pq

    path = Path(path)
    table = _table(run)  # a bad RunData fails here, before anything touches the disk
    path.parent.mkdir(parents=True, exist_ok=True)
    # a temporary name of our own rather than mkstemp's, so that the file gets the user's umask, not 0600
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            pq.write_table(table, out, compression="zstd")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _foreign(path: Path) -> InputError:
    """Why a file that is not Parquet cannot be read, with the likely cause when it is recognisable."""
    try:
        with open(path, "rb") as f:
            head = f.read(64).lstrip()
    except OSError:
        head = b""
    if head.startswith(b"{"):
        return InputError("a JSON data file from an older optlease (before optlease-data/1); run the simulation "
                          "again to write a Parquet data file", str(path))
    return InputError(f"not a Parquet file: an optlease data file is Parquet ({FORMAT})", str(path))


def _check_format(path: Path, metadata: dict[bytes, bytes] | None) -> None:
    fmt = (metadata or {}).get(META_FORMAT)
    if fmt is None:
        raise InputError(f"a Parquet file, but not an optlease data file (no {META_FORMAT.decode()} in its "
                         "metadata)", str(path))
    fmt_text = fmt.decode(errors="replace")
    if fmt_text == FORMAT:
        return
    version = fmt_text[len(FORMAT_FAMILY):] if fmt_text.startswith(FORMAT_FAMILY) else ""
    mine = int(FORMAT[len(FORMAT_FAMILY):])
    if version.isdigit() and int(version) > mine:
        raise InputError(f"written by a newer optlease (format {fmt_text}); this optlease reads {FORMAT}",
                         str(path))
    if version.isdigit():
        raise InputError(f"written by an older optlease (format {fmt_text}); this optlease reads {FORMAT}: "
                         "run the simulation again", str(path))
    raise InputError(f"unknown data format {fmt_text[:40]!r}; this optlease reads {FORMAT}", str(path))


def _read_table(path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise InputError("no such data file", str(path))
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        with open(path, "rb") as f:
            head = f.read(4)
        if head == b"PAR1":
            raise InputError(f"corrupt or truncated Parquet file ({_first_line(exc)})", str(path)) from None
        raise _foreign(path) from None
    _check_format(path, schema.metadata)
    missing = [c for c in COLUMNS if c not in schema.names]
    if missing:
        raise InputError(f"an {FORMAT} file without the column {missing[0]!r}", str(path))
    for column, kind in COLUMN_TYPES.items():
        found = schema.field(column).type
        # strings may come back dictionary-encoded or as large strings from other writers: compare the values' type
        if str(getattr(found, "value_type", found)).replace("large_", "") != kind:
            raise InputError(f"column {column!r} holds {found}, not {kind}", str(path))
    try:
        return pq.read_table(path, columns=list(COLUMNS))
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"corrupt or truncated Parquet file ({_first_line(exc)})", str(path)) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:160] if text else type(exc).__name__


def _json_meta(path: Path, metadata: dict[bytes, bytes], key: bytes, kind: type) -> Any:
    try:
        value = json.loads(metadata.get(key, b"null"))
    except ValueError:
        value = None
    if not isinstance(value, kind):
        raise InputError(f"corrupt metadata {key.decode()}", str(path))
    return value


def read_run(path: str | Path) -> RunData:
    """The run in `path`; InputError (one line naming the file) when it is not an `optlease-data/1` file."""
    path = Path(path)
    table = _read_table(path)
    meta = table.schema.metadata or {}
    attrs = _json_meta(path, meta, META_ATTRS, dict)
    kinds = _json_meta(path, meta, META_KINDS, dict)
    int_fields = _json_meta(path, meta, META_INTS, dict)
    ints = {s: set(int_fields.get(s, [])) for s in ("per-run", "per-lease")}
    run = RunData(attrs={str(k): str(v) for k, v in attrs.items()}, counter_kinds=dict(kinds))
    run.counters = {name: [] for name in kinds}
    leases: dict[int, dict[str, Value]] = {}
    cols = {c: table.column(c).to_pylist() for c in COLUMNS[3:]}
    for section, name, lease_id, time, value, average, text in zip(*cols.values()):
        if section == "counter":
            if name not in run.counters or time is None or value is None:
                raise InputError(f"counter row for {name!r} is incomplete or has no kind", str(path))
            run.counters[name].append((time, value, average))
            continue
        if section not in SECTIONS:
            raise InputError(f"unknown section {str(section)[:40]!r}", str(path))
        stat: Value = text if text is not None else value
        if value is not None and name in ints[section] and math.isfinite(value):
            stat = int(value)
        if section == "per-run":
            run.per_run[name] = stat
        elif lease_id is None:
            raise InputError(f"per-lease row {name!r} without a lease_id", str(path))
        else:
            leases.setdefault(lease_id, {"id": lease_id})[name] = lease_id if name == "id" else stat
    run.per_lease = list(leases.values())
    return run


def read_frame(paths: Iterable[str | Path]):
    """Many runs' rows stacked in one pandas DataFrame (the columns COLUMNS), each file checked first."""
    import pandas as pd

    frames = [_read_table(Path(p)).to_pandas() for p in paths]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(COLUMNS))
