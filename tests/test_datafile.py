"""The run data file: it round-trips, pandas and polars read it as one tidy table, and every file it is not (missing,
foreign, truncated, older or newer) gets one line naming the file."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from optlease.accounting.datafile import COLUMNS, FORMAT, RunData, read_frame, read_run, write_run
from optlease.errors import InputError


def sample(profile: str = "aggressive") -> RunData:
    return RunData(
        attrs={"profile": profile, "tracefile": "30days.swf", "injectionfile": "",
               "configuration": "[general]\nmode: simulated\n"},
        per_run={"Accepted AR": 3, "Rejected AR": 1, "CPU utilization": 0.625, "mapper": "greedy",
                 "All-best-effort completion time": None},
        per_lease=[{"id": 1, "kind": "AR", "state": "done", "waiting time": 0, "bounded slowdown": 1.0},
                   {"id": 2, "kind": "best-effort", "state": "done", "waiting time": 120, "bounded slowdown": 2.5,
                    "reason": None}],
        counters={"Queue size": [(0, 0.0, None), (60, 2.0, None), (120, 1.0, None)],
                  "CPU utilization": [(0, 0.5, 0.5), (100, 1.0, 0.75)]},
        counter_kinds={"Queue size": "AVERAGE_NONE", "CPU utilization": "AVERAGE_TIMEWEIGHTED"})


def test_round_trip_keeps_values_types_order_and_attrs(tmp_path):
    run = sample()
    write_run(tmp_path / "run.parquet", run)
    back = read_run(tmp_path / "run.parquet")
    assert back.per_run == run.per_run and list(back.per_run) == list(run.per_run)
    assert type(back.per_run["Accepted AR"]) is int and type(back.per_run["CPU utilization"]) is float
    assert back.per_lease == run.per_lease
    assert back.counters == run.counters and back.counter_kinds == run.counter_kinds
    assert {k: back.attrs[k] for k in run.attrs} == run.attrs
    assert back.attrs["format"] == FORMAT and back.attrs["optlease_version"]
    meta = pq.read_schema(tmp_path / "run.parquet").metadata
    assert json.loads(meta[b"optlease.attrs"])["configuration"] == run.attrs["configuration"]


stat_values = st.one_of(st.none(), st.integers(-2 ** 53, 2 ** 53), st.text(max_size=8),
                        st.floats(allow_nan=False, allow_infinity=False))
names = st.text(min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(per_run=st.dictionaries(names, stat_values, max_size=6),
       per_lease=st.lists(st.dictionaries(names.filter(lambda n: n != "id"), stat_values, max_size=4), max_size=4),
       counters=st.dictionaries(names, st.lists(st.tuples(st.integers(0, 10 ** 9), st.floats(-1e9, 1e9),
                                                          st.none() | st.floats(-1e9, 1e9)), max_size=4),
                                max_size=3))
def test_any_run_round_trips(tmp_path_factory, per_run, per_lease, counters):
    """Whatever the stats, a run reads back as written (a field mixing ints and floats reads back as floats)."""
    leases = [{"id": i, **fields} for i, fields in enumerate(per_lease, start=1)]
    run = RunData(attrs={"profile": "p"}, per_run=per_run, per_lease=leases, counters=counters,
                  counter_kinds={name: "AVERAGE_NORMAL" for name in counters})
    path = tmp_path_factory.mktemp("prop") / "r.parquet"
    write_run(path, run)
    back = read_run(path)
    assert back.per_run == per_run and back.per_lease == leases and back.counters == counters
    for name, value in per_run.items():
        assert type(back.per_run[name]) is type(value)


def test_pandas_and_polars_read_many_runs_as_one_table(tmp_path):
    pd = pytest.importorskip("pandas")
    for profile in ("aggressive", "nosuspend"):
        write_run(tmp_path / f"{profile}.parquet", sample(profile))
    frame = pd.concat([pd.read_parquet(p) for p in sorted(tmp_path.glob("*.parquet"))])
    assert list(frame.columns) == list(COLUMNS)
    accepted = frame[(frame.section == "per-run") & (frame.name == "Accepted AR")]
    assert dict(zip(accepted.profile, accepted.value)) == {"aggressive": 3.0, "nosuspend": 3.0}
    waits = frame[(frame.section == "per-lease") & (frame.name == "waiting time")]
    assert sorted(zip(waits.profile, waits.lease_id, waits.value)) == [
        ("aggressive", 1, 0.0), ("aggressive", 2, 120.0), ("nosuspend", 1, 0.0), ("nosuspend", 2, 120.0)]
    assert read_frame(sorted(tmp_path.glob("*.parquet"))).equals(frame.reset_index(drop=True))
    pl = pytest.importorskip("polars")
    lazy = pl.read_parquet(tmp_path / "aggressive.parquet")
    queue = lazy.filter((pl.col("section") == "counter") & (pl.col("name") == "Queue size"))
    assert queue["time"].to_list() == [0, 60, 120] and queue["value"].to_list() == [0.0, 2.0, 1.0]


def test_failed_write_leaves_the_old_file_whole(tmp_path):
    path = tmp_path / "run.parquet"
    write_run(path, sample())
    bad = sample()
    bad.per_run["oops"] = object()
    with pytest.raises(TypeError):
        write_run(path, bad)
    assert read_run(path).per_run == sample().per_run
    assert [p.name for p in tmp_path.iterdir()] == ["run.parquet"]


def test_the_file_has_the_users_permissions(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        write_run(tmp_path / "run.parquet", sample())
    finally:
        os.umask(old)
    assert (tmp_path / "run.parquet").stat().st_mode & 0o777 == 0o644


def _with_format(path, fmt: bytes | None):
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    if fmt is None:
        del meta[b"optlease.format"]
    else:
        meta[b"optlease.format"] = fmt
    pq.write_table(table.replace_schema_metadata(meta), path)


def _truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _foreign_parquet(path):
    pq.write_table(pa.table({"x": [1, 2]}), path)


def _value_as_text(path):
    table = pq.read_table(path)
    column = table.schema.get_field_index("value")
    table = table.set_column(column, "value", pa.array([str(v) for v in table.column("value").to_pylist()]))
    pq.write_table(table, path)


def _old_json(path):
    path.write_text(json.dumps({"summary": {"leases": 2}, "leases": []}))


def _csv(path):
    path.write_text("profile,value\naggressive,3\n")


@pytest.mark.parametrize("spoil, words", [
    (lambda p: p.unlink(), "no such data file"),
    (_csv, "not a Parquet file"),
    (_foreign_parquet, "not an optlease data file"),
    (_truncated, "corrupt or truncated"),
    (_old_json, "older optlease"),
    (lambda p: _with_format(p, b"optlease-data/0"), "older optlease (format optlease-data/0)"),
    (lambda p: _with_format(p, b"optlease-data/2"), "newer optlease (format optlease-data/2)"),
    (lambda p: _with_format(p, b"something-else"), "unknown data format"),
    (_value_as_text, "column 'value' holds string, not double"),
], ids=["missing", "csv", "foreign-parquet", "truncated", "old-json", "older", "newer", "unknown", "wrong-type"])
def test_what_is_not_a_data_file_gets_one_line(tmp_path, spoil, words):
    path = tmp_path / "run.parquet"
    write_run(path, sample())
    spoil(path)
    with pytest.raises(InputError) as err:
        read_run(path)
    text = str(err.value)
    assert words in text and text.startswith(str(path)) and "\n" not in text
    with pytest.raises(InputError):
        read_frame([path])
