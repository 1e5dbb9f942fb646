"""The LWF reader reads the document as a stream (formats/lwf.py, lxml's iterparse): each request is read when its
end tag is, then let go. What it reads is what the whole tree gave: the root's first <site>, <description> and
<lease-requests> wherever they stand, ids given or numbered in file order around the given ones, and one-line
errors naming the place, the first in file order."""
from __future__ import annotations

import pytest

from optlease.errors import InputError
from optlease.formats.lwf import parse_lwf

NODES = '<nodes><node-set numnodes="1"><res type="CPU" amount="100"/><res type="Memory" amount="1024"/></node-set>' \
        '</nodes>'


def request(arrival: str = "00:00:01", lease_id: str | None = None, duration: str = "00:10:00") -> str:
    given = f' id="{lease_id}"' if lease_id is not None else ""
    return (f'<lease-request arrival="{arrival}"><lease{given}>{NODES}<start/><duration time="{duration}"/>'
            f'</lease></lease-request>')


def workload(*lines: str, root: str = "lease-workload") -> bytes:
    """A document with one of `lines` per line (line 1 is the root's start tag)."""
    return "\n".join([f'<{root} name="w">', *lines, f"</{root}>"]).encode()


SITE = '<site><resource-types names="CPU Memory"/><nodes><node-set numnodes="2"><res type="CPU" amount="100"/>' \
       '<res type="Memory" amount="1024"/></node-set></nodes></site>'


@pytest.mark.parametrize("lines, ids", [
    pytest.param(["<lease-requests>", request(), request(lease_id="1"), request(), "</lease-requests>"], [2, 1, 3],
                 id="ids-given-later-are-skipped"),
    pytest.param(["<lease-requests>", request(lease_id="7"), request(), "</lease-requests>"], [7, 1],
                 id="given-and-numbered"),
    pytest.param(["<lease-requests>", request(lease_id="2"), "</lease-requests>",
                  "<lease-requests>", request(lease_id="9"), "</lease-requests>"], [2], id="second-lease-requests-ignored"),
    pytest.param(["<other>", request(lease_id="5"), "</other>", "<lease-requests>", request(), "</lease-requests>"],
                 [1], id="request-outside-lease-requests-ignored"),
    pytest.param(["<lease-requests>", "</lease-requests>"], [], id="no-requests"),
])
def test_requests_read_from_the_stream_are_those_of_the_tree(lines, ids):
    assert [r.id for r in parse_lwf(workload(*lines), "w.lwf").requests] == ids


def test_the_site_and_description_are_read_wherever_they_stand():
    doc = workload("<lease-requests>", request(), "</lease-requests>", "<description> a year </description>", SITE,
                   "<description>second</description>")
    read = parse_lwf(doc, "w.lwf")
    assert read.description == "a year" and read.site is not None and len(read.site.node_ids) == 2
    assert read.name == "w"


def test_requests_are_served_in_arrival_order_ties_in_file_order():
    doc = workload("<lease-requests>", request("00:05:00", "1"), request("00:01:00", "2"), request("00:05:00", "3"),
                   "</lease-requests>")
    assert [r.id for r in parse_lwf(doc, "w.lwf").requests] == [2, 1, 3]


@pytest.mark.parametrize("lines, line, problem", [
    pytest.param(["<lease-requests>", "<bogus/>", request(), "</lease-requests>"], 3, "unexpected <bogus> in",
                 id="unexpected-first"),
    pytest.param(["<lease-requests>", request(), "<bogus/>", request(), "</lease-requests>"], 4,
                 "unexpected <bogus> in", id="unexpected-between"),
    pytest.param(["<lease-requests>", request(), request(), "<bogus/>", "<later/>", "</lease-requests>"], 5,
                 "unexpected <bogus> in", id="unexpected-after-the-last"),
    pytest.param(["<lease-requests>", request(lease_id="4"), request(), request(lease_id="4"), "</lease-requests>"],
                 5, "lease id 4 is given twice (first at line 3)", id="id-twice"),
    # the first error in file order: a broken duration before an id given twice
    pytest.param(["<lease-requests>", request(lease_id="4"), request(duration="00:61:00"), request(lease_id="4"),
                  "</lease-requests>"], 4, "minutes and seconds must be below 60", id="first-error-in-file-order"),
    pytest.param(["<lease-requests>", request(), request(arrival="soon"), "</lease-requests>"], 4,
                 "'soon' is not a duration", id="bad-arrival"),
    pytest.param([SITE], 1, "<lease-workload> has no <lease-requests>", id="no-lease-requests"),
    pytest.param(["<lease-requests>", request(), "<lease-request", "</lease-requests>"], 5, "malformed XML",
                 id="malformed-after-good-requests"),
])
def test_a_broken_stream_gives_one_error_naming_its_line(lines, line, problem):
    with pytest.raises(InputError) as caught:
        parse_lwf(workload(*lines), "w.lwf")
    assert caught.value.where == f"w.lwf:{line}", str(caught.value)
    assert problem in caught.value.message and "\n" not in str(caught.value)


def test_another_root_is_refused_before_any_request_is_read():
    doc = workload("<lease-requests>", request(arrival="never"), "</lease-requests>", root="lease-workloads")
    with pytest.raises(InputError) as caught:
        parse_lwf(doc, "w.lwf")
    assert caught.value.where == "w.lwf:1"
    assert "root element is <lease-workloads>, expected <lease-workload>" in caught.value.message


def test_a_document_with_nothing_the_reader_streams_names_its_root():
    with pytest.raises(InputError) as caught:
        parse_lwf(b"<html><body/></html>", "w.lwf")
    assert caught.value.where == "w.lwf:1" and "root element is <html>" in caught.value.message
