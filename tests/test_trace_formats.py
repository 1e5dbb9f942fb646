"""Trace readers and the LWF writer: broken inputs give one located error, real traces read as Haizea reads them."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optlease.domain.lease import DiskImage, LeaseKind, LeaseRequest
from optlease.domain.site import Site
from optlease.errors import InputError
from optlease.formats.lwf import Workload, load_lwf, parse_lwf
from optlease.formats.lwf_text import load_text_lwf, parse_text_lwf
from optlease.formats.lwf_write import dump_lwf
from optlease.formats.swf import load_swf, parse_swf
from optlease.formats.traces import FORMATS, detect_format, inject, load_trace

BAD = Path(__file__).parent / "data" / "bad"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "instances"
BLUE = SHARED / "haizea" / "blue"
INJECTIONS = BLUE / "injected_leases" / "30days"
needs_shared = pytest.mark.skipif(not BLUE.is_dir(), reason="the shared Haizea instances are not checked out "
                                                            "next to the repository")

# file, line named in the error (None: only the file), what the error must say
BAD_CASES = [
    ("malformed.lwf", 19, "malformed XML"),
    ("missing-arrival.lwf", 5, "no arrival= attribute"),
    ("missing-nodes.lwf", 6, "has no <nodes>"),
    ("negative-amount.lwf", 10, "amount=-1024 must be positive"),
    ("zero-amount.lwf", 9, "amount=0 must be positive"),
    ("zero-numnodes.lwf", 8, "numnodes=0 must be positive"),
    ("zero-duration.lwf", 14, "duration must be positive"),
    ("unknown-start-child.lwf", 14, "unexpected <later> in <start>"),
    ("bad-time.lwf", 5, "minutes and seconds must be below 60"),
    ("billion-laughs.lwf", 14, "entity amplification"),
    ("xxe.lwf", 13, "external entity"),
    ("site-no-cpu.lwf", 4, "site has no CPU"),
    ("site-no-memory.lwf", 4, "site has no Memory"),
    ("swf-non-numeric.swf", 4, "field 4 (run time) is '1h', not a number"),
    ("swf-short-line.swf", 4, "SWF line has 17 fields, expected 18"),
    ("swf-negative-submit.swf", 2, "submit time cannot be negative"),
    ("text-bad-line.lwf", 3, "field 5 (nodes) is 'four', not a whole number"),
    ("text-short-line.lwf", 2, "text LWF line has 9 fields, expected 10"),
    ("text-zero-nodes.lwf", 1, "field 5 (nodes) is 0, it must be positive"),
    ("text-unclosed-quote.lwf", 1, "cannot split the line into fields"),
    ("text-arabic-digit.lwf", 1, "field 6 (cpu) is '\u0663', not a whole number (digits 0-9 only)"),
    ("text-underscore.lwf", 1, "field 7 (mem) is '1_024', not a whole number"),
    ("text-huge-image.lwf", 2, "field 10 (imagesize) is 2147483648, more than 2147483647"),
    ("text-huge-duration.lwf", 1, "field 3 (dur) is 99999999999, more than 100 years"),
    ("unknown-format.trace", None, "cannot tell the trace format"),
    ("huge-numnodes.lwf", 6, "9999999999 nodes is more than optlease accepts"),
    ("swf-huge-job.swf", 1, "9999999999 nodes is more than optlease accepts"),
    ("text-huge-nodes.lwf", 1, "9999999999 nodes is more than optlease accepts"),
    ("huge-duration.lwf", 3, "'99999999:00:00' is more than 100 years"),
    ("swf-huge-time.swf", 1, "99999999999999 seconds is more than 100 years"),
]


@pytest.mark.parametrize(("name", "line", "problem"), BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_a_broken_trace_gives_one_error_naming_file_line_and_problem(name, line, problem):
    path = BAD / name
    with pytest.raises(InputError) as caught:
        load_trace(path)
    where = f"{path}:{line}" if line else str(path)
    assert str(caught.value).startswith(f"{where}: "), str(caught.value)
    assert problem in str(caught.value)
    assert "\n" not in str(caught.value)


def test_every_broken_trace_of_the_corpus_is_in_the_table():
    traces = {p.name for p in BAD.iterdir() if p.suffix in (".lwf", ".swf", ".xml", ".trace")}
    assert traces == {c[0] for c in BAD_CASES}


def test_an_external_entity_in_text_is_never_resolved(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    trace = tmp_path / "xxe-text.lwf"
    trace.write_text((BAD / "xxe.lwf").read_text().replace("file:///etc/hostname", secret.as_uri())
                     .replace('amount="&secret;"', 'amount="1024"'))
    workload = load_trace(trace)
    assert "TOP-SECRET" not in workload.description
    assert b"TOP-SECRET" not in dump_lwf(workload)


def test_an_unknown_format_name_lists_the_allowed_ones():
    with pytest.raises(InputError, match=r"unknown trace format 'csv' \(allowed: lwf, lwf-text, swf\)"):
        load_trace(BAD / "malformed.lwf", format="csv")


DETECT_CASES = [
    ("trace.swf", "whatever", "swf"),
    ("trace.lwf", "\n  <lease-workload/>", "lwf"),
    ("trace.lwf", "0 -1 60 60 1 1 1024 0 'a.img' 600", "lwf-text"),
    ("trace.xml", "not xml at all", "lwf"),
    ("trace.txt", "<lease-workload/>", "lwf"),
    ("trace.txt", "; SWF header", "swf"),
    ("trace.txt", "# text LWF comment", "lwf-text"),
    ("trace.txt", "1 0 10 60 8 -1 -1 8 120 -1 1 1 -1 -1 1 -1 -1 -1", "swf"),
    ("trace.txt", "0 -1 60 60 1 1 1024 0 'a.img' 600", "lwf-text"),
]


@pytest.mark.parametrize(("name", "content", "expected"), DETECT_CASES,
                         ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(DETECT_CASES)])
def test_the_format_is_known_by_extension_then_content(tmp_path, name, content, expected):
    path = tmp_path / name
    path.write_text(content)
    assert detect_format(path) == expected
    assert expected in FORMATS


SWF_LINE = "1 100 10 {run} {alloc} -1 -1 {procs} {req} -1 {status} 7 -1 -1 {queue} -1 -1 -1"
# fields of the line, reader options, expected (arrival, nodes, duration, real duration) or None if skipped
SWF_CASES = {
    "plain": (dict(run=3000), {}, (100, 8, 7200, 3000)),
    "run-0-is-1": (dict(run=0), {}, (100, 8, 7200, 1)),
    "run-capped-at-request": (dict(run=9000), {}, (100, 8, 7200, None)),
    "no-request-uses-run": (dict(run=3000, req=-1), {}, (100, 8, 3000, None)),
    "no-requested-procs-uses-allocated": (dict(run=60, procs=-1, alloc=32), {}, (100, 32, 7200, 60)),
    "no-processors-skipped": (dict(run=60, procs=-1, alloc=-1), {}, None),
    "cancelled-in-queue-skipped": (dict(run=-1, status=5), {}, None),
    "cancelled-with-run-0-skipped": (dict(run=0, status=5), {}, None),
    "cancelled-after-running-kept": (dict(run=500, status=5), {}, (100, 8, 7200, 500)),
    "unknown-run-skipped": (dict(run=-1, status=0), {}, None),
    "queue-kept": (dict(run=60, queue=2), dict(queues={1, 2}), (100, 8, 7200, 60)),
    "queue-filtered": (dict(run=60, queue=3), dict(queues={1, 2}), None),
    "scale": (dict(run=60, procs=64), dict(scale=8), (100, 8, 7200, 60)),
    "scale-at-least-one": (dict(run=60, procs=4), dict(scale=8), (100, 1, 7200, 60)),
    "fractions-round-up": (dict(run=59.2, req=119.5), {}, (100, 8, 120, 60)),
}
SWF_DEFAULTS = dict(alloc=8, procs=8, req=7200, status=1, queue=1)


@pytest.mark.parametrize(("fields", "options", "expected"), SWF_CASES.values(), ids=SWF_CASES.keys())
def test_swf_jobs_become_leases_by_haizeas_rules(fields, options, expected):
    line = SWF_LINE.format(**{**SWF_DEFAULTS, **fields})
    workload = parse_swf(f"; header\n\n{line}\n", "t.swf", **options)
    if expected is None:
        assert workload.requests == [] and len(workload.notes) == 1
        return
    (lease,) = workload.requests
    assert (lease.arrival, lease.numnodes, lease.duration, lease.real_duration) == expected
    assert (lease.id, lease.kind, lease.preemptible, lease.start, lease.software) == \
        (1, LeaseKind.BEST_EFFORT, True, None, None)
    assert lease.extra["trace-id"] == "1" and lease.extra["source"] == "t.swf:3"


def test_swf_vm_demands_and_preemptibility_are_the_options():
    line = SWF_LINE.format(**{**SWF_DEFAULTS, "run": 60})
    (lease,) = parse_swf(line, memory=2048, cpu=50, preemptible=False).requests
    assert lease.vms == ({"CPU": 50, "Memory": 2048},) * 8 and not lease.preemptible


# line of a text LWF, cpu_unit, expected (kind, arrival, start, duration, real, nodes, vm, software, preemptible)
TEXT_CASES = {
    "best-effort": ("60 -1 1800 900 4 1 1024 0 'NONE.img' 600", 100,
                    (LeaseKind.BEST_EFFORT, 60, None, 1800, 900, 4, {"CPU": 100, "Memory": 1024},
                     DiskImage("NONE.img", 600), True)),
    "ar": ("0 3600 1800 1800 2 2 512 0 \"img 1.img\" 600", 100,
           (LeaseKind.AR, 0, 3600, 1800, None, 2, {"CPU": 200, "Memory": 512}, DiskImage("img 1.img", 600), False)),
    "ar-before-workload-start": ("0 -1769 3190 3190 3 1 1024 0 'NONE.img' 600", 100,
                                 (LeaseKind.AR, 0, -1769, 3190, None, 3, {"CPU": 100, "Memory": 1024},
                                  DiskImage("NONE.img", 600), False)),
    "real-capped": ("5 -1 100 500 1 1 1024 0 'x.img' 0", 50,
                    (LeaseKind.BEST_EFFORT, 5, None, 100, None, 1, {"CPU": 50, "Memory": 1024}, None, True)),
}


@pytest.mark.parametrize(("line", "cpu_unit", "expected"), TEXT_CASES.values(), ids=TEXT_CASES.keys())
def test_text_lwf_lines_become_leases(line, cpu_unit, expected):
    workload = parse_text_lwf(f"# comment\n\n{line}\n", "t.lwf", cpu_unit=cpu_unit)
    (r,) = workload.requests
    kind, arrival, start, duration, real, nodes, vm, software, preemptible = expected
    assert (r.kind, r.arrival, r.start, r.duration, r.real_duration, r.numnodes, r.software, r.preemptible) == \
        (kind, arrival, start, duration, real, nodes, software, preemptible)
    assert all(v == vm for v in r.vms)
    assert r.extra == {"trace-id": "1", "source": "t.lwf:3"}


def _raw_line(source: str) -> str:
    path, _, line = source.rpartition(":")
    return Path(path).read_text().splitlines()[int(line) - 1].strip()


SWF_COUNTS = [("30days.swf", 5108), ("1000requests.swf", 951)]


@needs_shared
@pytest.mark.parametrize(("name", "count"), SWF_COUNTS, ids=[c[0] for c in SWF_COUNTS])
def test_the_blue_horizon_traces_keep_the_reference_job_counts(name, count):
    workload = load_trace(BLUE / name)
    assert len(workload.requests) == count
    assert [r.id for r in workload.requests] == list(range(1, count + 1))
    assert all(a.arrival <= b.arrival for a, b in zip(workload.requests, workload.requests[1:]))


# file, position, raw line, expected (id, trace id, kind, arrival, start, nodes, duration, real duration)
REAL_CASES = {
    "30days-first": ("30days.swf", 0, "13 0 22 43 32 0.03 -1 4 64800 -1 1 96 -1 -1 3 -1 -1 -1",
                     (1, "13", LeaseKind.BEST_EFFORT, 0, None, 4, 64800, 43)),
    "30days-last": ("30days.swf", -1, "8718 2587918 54 42 8 4.50 -1 1 3600 -1 1 55 -1 -1 2 -1 -1 -1",
                    (5108, "8718", LeaseKind.BEST_EFFORT, 2587918, None, 1, 3600, 42)),
    "injection-first": ("injected_leases/30days/work_30-dur_4h-size_2medium.lwf", 0,
                        "0 0 13075 13075 26 1 1024 0 'NONE.img' 600", (1, "1", LeaseKind.AR, 0, 0, 26, 13075, None)),
    "injection-last": ("injected_leases/30days/work_30-dur_4h-size_2medium.lwf", -1,
                       "2484286 2570686 15477 15477 47 1 1024 0 'NONE.img' 600",
                       (212, "212", LeaseKind.AR, 2484286, 2570686, 47, 15477, None)),
}


@needs_shared
@pytest.mark.parametrize(("name", "index", "raw", "expected"), REAL_CASES.values(), ids=REAL_CASES.keys())
def test_real_traces_read_their_raw_lines(name, index, raw, expected):
    lease = load_trace(BLUE / name).requests[index]
    assert _raw_line(lease.extra["source"]) == raw
    assert (lease.id, lease.extra["trace-id"], lease.kind, lease.arrival, lease.start, lease.numnodes,
            lease.duration, lease.real_duration) == expected
    assert all(vm == {"CPU": 100, "Memory": 1024} for vm in lease.vms)


def _trace(kinds_arrivals: list[tuple[str, int]]) -> Workload:
    requests = [LeaseRequest(id=i, kind=LeaseKind.BEST_EFFORT, arrival=a, duration=60, vms=({"CPU": 100},),
                             extra={"trace-id": name}) for i, (name, a) in enumerate(kinds_arrivals, start=1)]
    return Workload(name="w", requests=requests)


INJECT_CASES = {
    "interleaved": ([("t1", 0), ("t2", 20)], [("i1", 10), ("i2", 30)], ["t1", "i1", "t2", "i2"]),
    "ties-keep-the-trace-first": ([("t1", 0), ("t2", 10)], [("i1", 0), ("i2", 10)], ["t1", "i1", "t2", "i2"]),
    "empty-injection": ([("t1", 5)], [], ["t1"]),
    "empty-trace": ([], [("i1", 5), ("i2", 5)], ["i1", "i2"]),
}


@pytest.mark.parametrize(("trace", "injection", "order"), INJECT_CASES.values(), ids=INJECT_CASES.keys())
def test_injection_merges_by_arrival_and_renumbers(trace, injection, order):
    merged = inject(_trace(trace), _trace(injection))
    assert [r.extra["trace-id"] for r in merged.requests] == order
    assert [r.id for r in merged.requests] == list(range(1, len(order) + 1))
    assert [r.extra.get("injected") == "true" for r in merged.requests] == [n.startswith("i") for n in order]


@needs_shared
def test_the_30_percent_injection_merges_into_30days():
    merged = inject(load_trace(BLUE / "30days.swf"), load_trace(INJECTIONS / "work_30-dur_4h-size_2medium.lwf"))
    assert len(merged.requests) == 5108 + 212
    assert sum(r.kind is LeaseKind.AR for r in merged.requests) == 212
    assert all(a.arrival <= b.arrival for a, b in zip(merged.requests, merged.requests[1:]))
    assert [r.id for r in merged.requests] == list(range(1, 5108 + 212 + 1))


# --- round trip: what dump_lwf writes, parse_lwf reads back as the same requests -------------------------------

RTYPES = ("CPU", "Memory", "Disk", "Ponies")
capacities = st.dictionaries(st.sampled_from(RTYPES), st.integers(1, 10**6), min_size=1, max_size=4)
seconds = st.integers(0, 400 * 86400)
names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, exclude_categories=("Z", "C")), min_size=1,
                max_size=20)


@st.composite
def requests(draw, lease_id: int, arrival: int) -> LeaseRequest:
    kind = draw(st.sampled_from(list(LeaseKind)))
    duration = draw(st.integers(1, 30 * 86400))
    distinct = draw(st.lists(capacities, min_size=1, max_size=3))
    vms = tuple(draw(st.lists(st.sampled_from(distinct), min_size=1, max_size=8)))
    return LeaseRequest(
        id=lease_id, kind=kind, arrival=arrival, duration=duration, vms=vms, preemptible=draw(st.booleans()),
        start=draw(seconds) if kind is LeaseKind.AR else None,
        real_duration=draw(st.none() | st.integers(1, 40 * 86400).filter(lambda d: d != duration)),
        software=draw(st.none() | st.builds(DiskImage, names, st.integers(1, 10**5))),
        deadline=draw(st.none() | seconds))


@st.composite
def workloads(draw) -> Workload:
    arrivals = sorted(draw(st.lists(seconds, max_size=12)))
    site = draw(st.none() | st.builds(
        lambda extra, nodes: Site(("CPU", "Memory", *extra), tuple(nodes)),
        st.just(("Disk",)), st.lists(st.sampled_from([{"CPU": 100, "Memory": 1024}, {"CPU": 400, "Disk": 9}]),
                                     min_size=1, max_size=6)))
    description = draw(st.one_of(st.just(""), names))
    return Workload(name=draw(names), description=description, site=site,
                    requests=[draw(requests(i, a)) for i, a in enumerate(arrivals, start=1)])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_what_dump_lwf_writes_parse_lwf_reads_back(workload):
    back = parse_lwf(dump_lwf(workload))
    assert back.requests == workload.requests
    assert (back.name, back.description, back.site) == (workload.name, workload.description, workload.site)
    assert [r.extra["trace-id"] for r in back.requests] == [str(r.id) for r in workload.requests]


@needs_shared
@pytest.mark.parametrize("name", ["1000requests.swf", "injected_leases/30days/work_30-dur_4h-size_2medium.lwf"])
def test_real_traces_survive_the_round_trip(name):
    workload = load_trace(BLUE / name)
    assert parse_lwf(dump_lwf(workload)).requests == workload.requests


def test_loaders_name_a_missing_file(tmp_path):
    missing = tmp_path / "nothing.swf"
    for load in (load_swf, load_text_lwf, load_lwf, load_trace):
        with pytest.raises(InputError, match="No such file"):
            load(missing)


def lwf_of(*node_sets: str) -> bytes:
    leases = "".join(
        f'<lease-request arrival="00:00:0{n}"><lease id="{n}"><nodes>{sets}</nodes><start/>'
        f'<duration time="00:10:00"/></lease></lease-request>\n' for n, sets in enumerate(node_sets, start=1))
    return f"<lease-workload name='w'>\n<lease-requests>\n{leases}</lease-requests></lease-workload>".encode()


ONE = '<node-set numnodes="{n}"><res type="CPU" amount="{cpu}"/><res type="Memory" amount="1024"/></node-set>'


def test_a_shape_of_nodes_read_once_is_the_same_for_every_lease_that_repeats_it_and_a_new_one_is_checked():
    """The reader checks each <nodes> shape where it first appears and shares its VMs with the leases that repeat
    it: a repeat reads the same demands; a shape that differs in any attribute is read and checked anew, its error
    naming its own line."""
    shapes = [ONE.format(n=3, cpu=100), ONE.format(n=3, cpu=100), ONE.format(n=3, cpu=50), ONE.format(n=2, cpu=100)]
    requests = parse_lwf(lwf_of(*shapes), "w.lwf").requests
    assert [[vm["CPU"] for vm in r.vms] for r in requests] == [[100] * 3, [100] * 3, [50] * 3, [100] * 2]
    with pytest.raises(InputError) as bad:
        parse_lwf(lwf_of(ONE.format(n=3, cpu=100), ONE.format(n=3, cpu=100), ONE.format(n=3, cpu="1_00")), "w.lwf")
    assert bad.value.where == "w.lwf:5" and "amount=" in bad.value.message
