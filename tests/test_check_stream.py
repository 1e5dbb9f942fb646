"""`optlease check` reads the schedule file as a stream (checker_stream, formats/schedule_read): on every schedule
it says what the checker of the whole document says (`check_schedule(load_schedule(path))`), violation for
violation and in the same order, or refuses the file with the same one-line error; with windows of a few bytes and
the capacity sweep's records written out past a handful, so that every path of the stream is taken."""
from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import INSTANCES
from optlease.checker import check_schedule
from optlease.checker_stream import check_file
from optlease.checker_sweep import sweep_capacity
from optlease.checker_read import Reader
from optlease.engine.run import simulate
from optlease.errors import InputError
from optlease.formats.config import load_config
from optlease.formats.schedule_json import load_schedule, schedule_document
from optlease.formats.timefmt import iso
from test_checker import MUTATIONS, VALID, big_schedule, placed_schedules, quickstart

ORIGIN = datetime(2006, 11, 25, 13, 0, 0)
# a window of a few bytes and a sweep that writes its records out after every few: every path of the stream
TINY = {"chunk": 7, "max_item": 1 << 20, "spill": 3, "buckets": 3}
SPILL = {"spill": 3, "buckets": 3}
IMAGE_SCENARIOS = sorted(conf for conf in (INSTANCES / "haizea" / "expected").glob("*.conf")
                         if "lease-preparation: imagetransfer" in conf.read_text())


def whole(path: Path) -> tuple[str, list[str]]:
    """What the checker of the whole document says: ('ok', lines) or ('refused', [the error])."""
    try:
        doc = load_schedule(path)
    except InputError as exc:
        return "refused", [str(exc)]
    return "ok", [str(v) for v in check_schedule(doc)]


def streamed(path: Path, **limits) -> tuple[str, list[str]]:
    try:
        return "ok", [str(v) for v in check_file(path, **limits).violations]
    except InputError as exc:
        return "refused", [str(exc)]


def write(tmp_path: Path, doc, indent=1, name="schedule.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=indent) + "\n", encoding="utf-8")
    return path


def assert_same(path: Path) -> tuple[str, list[str]]:
    expected = whole(path)
    assert streamed(path) == expected
    assert streamed(path, **TINY) == expected
    return expected


@pytest.mark.parametrize("mutate, rule", MUTATIONS)
def test_each_broken_rule_is_named_alike(tmp_path, mutate, rule):
    doc = quickstart()
    mutate(doc)
    for indent in (None, 1):
        verdict, lines = assert_same(write(tmp_path, doc, indent))
        if json.loads(json.dumps(doc)) == doc:   # (a node key that is a number in memory is a string in a file)
            assert lines and (verdict == "refused" or all(f": {rule}: " in line for line in lines)), lines


@pytest.mark.parametrize("mutate", VALID)
def test_allowed_variations_pass_alike(tmp_path, mutate):
    doc = quickstart()
    mutate(doc)
    assert assert_same(write(tmp_path, doc)) == ("ok", [])


@pytest.mark.parametrize("cpu", [90, 90.5, 1 << 21], ids=["whole", "fraction", "past-2^20"])
def test_the_capacity_sweep_in_buckets_written_out_is_the_sweep_in_memory(cpu):
    # whole numbers up to 2^20: the nodes to sweep are found by sums in numpy; else every node is swept
    doc = big_schedule(2_000, 40)
    for lease in doc["leases"][::97]:      # overloads on a few nodes, some at once
        lease["vms"]["1"]["CPU"] = cpu
    reader = Reader()
    site = reader.site(doc["site"])
    leases = [reader.lease(i, raw, site) for i, raw in enumerate(doc["leases"])]
    expected = [v for v in check_schedule(doc) if v.rule == "capacity"]
    assert expected
    assert sweep_capacity(leases, site) == expected
    assert sweep_capacity(leases, site, **SPILL) == expected


# --- random schedules with one defect planted: the same verdict and message -----------------------------------

def _shift(doc, data, key):
    lease = data.draw(st.sampled_from(doc["leases"]))
    r = data.draw(st.sampled_from(lease["reservations"]))
    r[key] = iso(ORIGIN, int((datetime.fromisoformat(r[key]) - ORIGIN).total_seconds()) + data.draw(
        st.integers(-900, 900)))


def _overlap(doc, data):
    node = data.draw(st.sampled_from(sorted(doc["site"]["nodes"])))
    at, length = data.draw(st.integers(0, 7200)), data.draw(st.integers(1, 3600))
    doc["leases"].insert(data.draw(st.integers(0, len(doc["leases"]))), {
        "id": data.draw(st.integers(1, 12)), "type": data.draw(st.sampled_from(["best-effort", "ar", "immediate"])),
        "preemptible": data.draw(st.booleans()), "arrival": iso(ORIGIN, at), "requested_start": iso(ORIGIN, at),
        "duration": length, "vms": {"1": {"CPU": data.draw(st.sampled_from([1, 100, 250.5]))}},
        "state": data.draw(st.sampled_from(["done", "rejected"])), "reservations": [
            {"kind": "vm", "start": iso(ORIGIN, at), "end": iso(ORIGIN, at + length), "mapping": {"1": int(node)}}]})


def _set_field(doc, data):
    lease = data.draw(st.sampled_from(doc["leases"]))
    where = data.draw(st.sampled_from([lease, *lease["reservations"], *lease["vms"].values()]))
    key = data.draw(st.sampled_from(sorted(where) + ["kind", "from", "outcome"]))
    where[key] = data.draw(st.sampled_from([None, True, "x", -1, 0, 1e308, "2006-11-25T13:00:00", {"1": "9"},
                                            [], "suspend", "requeued", {"9": 1}, 3.5]))


def _drop_field(doc, data):
    lease = data.draw(st.sampled_from(doc["leases"]))
    where = data.draw(st.sampled_from([lease, doc, doc["site"], *lease["reservations"]]))
    if where:
        del where[data.draw(st.sampled_from(sorted(where)))]


def _reorder(doc, data):
    """The top-level members in another order (leases before the site: read in a second pass)."""
    keys = data.draw(st.permutations(sorted(doc)))
    items = {k: doc.pop(k) for k in keys}
    doc.update(items)


def _plantable(doc) -> bool:
    """Whether a second defect can be planted: the shape the defects reach into is still there."""
    site, leases = doc.get("site"), doc.get("leases")
    return (isinstance(site, dict) and isinstance(site.get("nodes"), dict) and isinstance(leases, list)
            and all(isinstance(x, dict) and isinstance(x.get("vms"), dict) and isinstance(x.get("reservations"), list)
                    and x["reservations"] and all(isinstance(v, dict) for v in x["vms"].values())
                    and all(isinstance(r, dict) and all(isinstance(r.get(k), str) and r[k][:1] == "2"
                                                        for k in ("start", "end")) for r in x["reservations"])
                    for x in leases))


DEFECTS = {"shift-start": lambda d, x: _shift(d, x, "start"), "shift-end": lambda d, x: _shift(d, x, "end"),
           "overlap": _overlap, "set-field": _set_field, "drop-field": _drop_field, "reorder": _reorder}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placed_schedules(), st.data(), st.sampled_from(sorted(DEFECTS)), st.sampled_from([None, 1]))
def test_a_random_schedule_with_a_planted_defect_gets_the_same_verdict(tmp_path_factory, doc, data, defect, indent):
    DEFECTS[defect](doc, data)
    if _plantable(doc) and data.draw(st.booleans()):
        DEFECTS[data.draw(st.sampled_from(sorted(DEFECTS)))](doc, data)
    path = write(tmp_path_factory.mktemp("s"), doc, indent)
    expected = whole(path)
    assert streamed(path, **TINY) == expected
    assert streamed(path, chunk=1 << 12, **SPILL) == expected
    assert streamed(path) == expected


# --- image transfers: the link, the caches, the image before the VM ---------------------------------------------

@pytest.fixture(scope="module")
def image_docs() -> list[dict]:
    docs = []
    for conf in IMAGE_SCENARIOS:
        cfg = load_config(conf)
        result = simulate(cfg)
        docs.append(schedule_document(result.site, result.leases, cfg.get("simulation", "starttime"),
                                      result.images))
    return docs


def _tighten(doc: dict, data) -> None:
    images = doc["images"]
    what = data.draw(st.sampled_from(["bandwidth", "cache_size", "transfer-late", "nothing"]))
    if what == "bandwidth":
        images["bandwidth"] = images["bandwidth"] / data.draw(st.sampled_from([2, 10]))
    elif what == "cache_size":
        images["cache_size"] = data.draw(st.sampled_from([1, 100, 1000]))
    elif what == "transfer-late":
        transfers = [r for lease in doc["leases"] for r in lease["reservations"] if r["kind"] == "transfer"]
        if transfers:
            r = data.draw(st.sampled_from(transfers))
            r["end"] = iso(datetime(1970, 1, 1), int((datetime.fromisoformat(r["end"]) - datetime(1970, 1, 1))
                                                     .total_seconds()) + data.draw(st.integers(1, 3600)))


def test_the_haizea_scenarios_with_images_are_there(image_docs):
    assert image_docs and all(doc.get("images") for doc in image_docs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(st.data())
def test_image_rules_give_the_same_verdict(tmp_path_factory, image_docs, data):
    doc = copy.deepcopy(data.draw(st.sampled_from(image_docs)))
    _tighten(doc, data)
    path = write(tmp_path_factory.mktemp("i"), doc)
    expected = whole(path)
    assert streamed(path, chunk=64) == expected


# --- files that are not schedules: the same one-line error, or the stream's own -------------------------------

@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_truncated_or_corrupted_file_is_refused_as_the_whole_reader_refuses_it(tmp_path_factory, data):
    text = json.dumps(quickstart(), indent=data.draw(st.sampled_from([None, 1]))) + "\n"
    at = data.draw(st.integers(0, len(text)))
    how = data.draw(st.sampled_from(["truncate", "replace", "insert", "delete"]))
    char = data.draw(st.sampled_from(list('{}[]",: \n0aé\\') + ["\x01", "NaN", "1e999", "tru"]))
    text = {"truncate": text[:at], "replace": text[:at] + char + text[at + 1:], "insert": text[:at] + char + text[at:],
            "delete": text[:at] + text[at + 1:]}[how]
    path = write(tmp_path_factory.mktemp("t"), text)
    expected = whole(path)
    got = streamed(path, **TINY)
    if expected[0] == "refused" and "given twice" in got[1][0]:
        return      # a top-level key given twice: the stream refuses it (the whole reader keeps the last)
    assert got == expected


def test_a_huge_string_is_refused_after_reading_a_bounded_window(tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "w") as f:
        f.write('{"format": "optlease-schedule/1", "starttime": "2006-11-25T13:00:00", "site": ')
        f.write(json.dumps(quickstart()["site"]) + ', "leases": [{"id": "')
        for _ in range(64):
            f.write("x" * (1 << 20))
        f.write('"}]}\n')
    with pytest.raises(InputError, match=r"line 1 column \d+: leases\[0\] is longer than 16 MiB of text"):
        check_file(path, max_item=1 << 24)


def test_nesting_deeper_than_the_decoder_goes_is_one_line(tmp_path):
    path = write(tmp_path, '{"format": "optlease-schedule/1", "leases": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    with pytest.raises(InputError, match=r"^.*: line 1 column 46: leases\[0\] nests deeper than this reader goes$"):
        check_file(path)


def test_a_top_level_key_given_twice_is_refused_where_it_is(tmp_path):
    doc = json.dumps(quickstart(), indent=1)
    path = write(tmp_path, doc[:-2] + ',\n "site": {}\n}')
    with pytest.raises(InputError, match=r"line \d+ column 2: the top-level key 'site' is given twice"):
        check_file(path)


def test_leases_before_the_site_are_read_in_a_second_pass(tmp_path):
    doc = quickstart()
    doc["leases"][1]["vms"]["2"]["CPU"] = 101
    reordered = {"leases": doc.pop("leases"), **doc}
    verdict, lines = assert_same(write(tmp_path, reordered))
    assert verdict == "ok" and lines and all(": capacity: " in line for line in lines)


def test_counts_are_the_documents(tmp_path):
    checked = check_file(write(tmp_path, quickstart()))
    assert (checked.violations, checked.leases, checked.reservations) == ([], 2, 5)


@pytest.mark.parametrize("field, value", [("transfer", [1, 2]), ("bandwidth", "fast"), ("cache_size", "x"),
                                          ("start", {"at": 0}), ("kind", ["vm"])])
def test_hostile_image_and_reservation_fields_are_violations_not_crashes(tmp_path, image_docs, field, value):
    doc = copy.deepcopy(image_docs[0])
    if field == "cache_size":
        doc["images"]["cache_size"] = value
    else:
        transfer = next(r for lease in doc["leases"] for r in lease["reservations"] if r["kind"] == "transfer")
        transfer[field] = value
    verdict, lines = assert_same(write(tmp_path, doc))
    assert verdict == "ok" and all("\n" not in line for line in lines)
    # an id of any shape names a transfer: nothing wrong; every other field is a violation naming it
    assert lines or field == "transfer"
    if field == "bandwidth":
        assert any("bandwidth is not a positive number: fast" in line for line in lines), lines
