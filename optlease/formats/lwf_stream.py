"""Reads an LWF trace as a stream (lxml's iterparse, with the same parser options as every XML document optlease
reads: `lwf.SAFE`): it stops only at the end of <site>, <description>, <lease-requests> and each <lease-request>;
each request is read (by `lwf._Reader`) when its end tag is, then cleared and let go with the one before it. What it
reads is what the whole tree gave: the root's first <site>, <description> and <lease-requests> wherever they stand;
ids given, or numbered 1, 2, ... in file order around the given ones once the whole file is known. A file with
several errors is refused for the first in file order.
"""
from __future__ import annotations

import dataclasses
import gc
import io
import itertools
from pathlib import Path

from lxml import etree

from optlease.domain.lease import LeaseRequest
from optlease.domain.site import Site
from optlease.formats.lwf import REQUEST_PARTS, SAFE, Workload, _Reader, first_children, syntax_error
from optlease.formats.timefmt import TimeFormatError, parse_time


def read_workload(reader: _Reader, data: bytes) -> Workload:
    """The workload of an LWF document (`parse_lwf`), its elements read by `reader` (which names the file)."""
    path = reader.path
    events = etree.iterparse(io.BytesIO(data), events=("end",), tag=STREAMED, **SAFE)
    state = _Stream(reader)
    root = None
    # The reader makes no reference cycles: the collector, run while thousands of requests are built, would only
    # walk them again and again (a sixth of the time to read the generated year).
    collecting = gc.isenabled()
    gc.disable()
    try:
        for _, elem in events:
            if root is None:
                root = elem.getroottree().getroot()
            state.seen(root, elem)
    except etree.XMLSyntaxError as exc:
        raise syntax_error(exc, path) from None
    finally:
        if collecting:
            gc.enable()
    root = events.root
    state.check_root(root)
    if state.requests_el is None:
        raise reader.error(root, "<lease-workload> has no <lease-requests>")
    requests = state.numbered()
    # Requests are served in arrival order; ties keep file order (a stable sort).
    requests.sort(key=lambda r: r.arrival)
    return Workload(name=root.get("name", Path(path).stem), requests=requests, site=state.site,
                    description=state.description, source=path)


# The elements whose end the stream stops at: the workload's parts (the root's children) and each request.
STREAMED = ("site", "description", "lease-requests", "lease-request")


class _Stream:
    """What the stream has read so far: the site, the description, the requests (ids given or still to give)."""

    def __init__(self, reader: _Reader) -> None:
        self.reader = reader
        self.root_checked = False
        self.site: Site | None = None
        self.site_seen = False
        self.description = ""
        self.description_seen = False
        self.requests_el: etree._Element | None = None  # the root's first <lease-requests>: the one read
        self.requests: list[LeaseRequest] = []
        self.unnumbered: list[int] = []                 # positions of the requests whose <lease> gives no id
        self.first_line: dict[int, int] = {}            # id given -> line of the <lease> that gives it

    def check_root(self, root: etree._Element) -> None:
        if not self.root_checked:
            if root is None or root.tag != "lease-workload":
                raise self.reader.error(root, f"root element is <{getattr(root, 'tag', '?')}>, "
                                              "expected <lease-workload>")
            self.root_checked = True

    def seen(self, root: etree._Element, elem: etree._Element) -> None:
        """An element of STREAMED has ended: read it if it is a part of the workload the reader reads."""
        self.check_root(root)
        parent = elem.getparent()
        tag = elem.tag
        if tag == "lease-request":
            if parent is not None and self.is_requests(parent, root):
                self.request(elem, parent)
        elif parent is not root:
            return
        elif tag == "site" and not self.site_seen:
            self.site_seen = True
            self.site = self.reader.site(elem)
        elif tag == "description" and not self.description_seen:
            self.description_seen = True
            self.description = (elem.text or "").strip()
        elif tag == "lease-requests" and self.is_requests(elem, root):
            self.unexpected(elem, None)

    def is_requests(self, elem: etree._Element, root: etree._Element) -> bool:
        """Whether `elem` is the root's first <lease-requests> (an earlier one would have ended before it)."""
        if self.requests_el is None and elem.tag == "lease-requests" and elem.getparent() is root:
            self.requests_el = elem
        return elem is self.requests_el

    def unexpected(self, parent: etree._Element, upto: etree._Element | None) -> None:
        """Anything but a request among the children of <lease-requests> before `upto` (None: all) is an error."""
        for child in parent:
            if child is upto:
                return
            if child.tag != "lease-request":
                raise self.reader.error(child, f"unexpected <{child.tag}> in <lease-requests>")

    def request(self, req: etree._Element, parent: etree._Element) -> None:
        reader = self.reader
        # what comes before it: the request before (read and cleared, let go now) and nothing else
        self.unexpected(parent, req)
        while parent[0] is not req:
            del parent[0]
        try:
            arrival = parse_time(reader.attr(req, "arrival"), reader.origin, 0)
        except TimeFormatError as exc:
            raise reader.error(req, str(exc)) from None
        parts = first_children(req, REQUEST_PARTS)
        real_el = parts["realduration"]
        real = reader.duration(real_el) if real_el is not None else None
        if real is not None and real <= 0:
            raise reader.error(real_el, "realduration must be positive")
        lease_el = parts["lease"]
        if lease_el is None:
            raise reader.error(req, "<lease-request> has no <lease>")
        lease_id = self.given_id(lease_el)
        if lease_id is None:
            self.unnumbered.append(len(self.requests))
        self.requests.append(reader.lease(lease_el, lease_id or 0, arrival, real))
        req.clear(keep_tail=False)

    def given_id(self, lease_el: etree._Element) -> int | None:
        """The id a <lease> gives, None when it gives none; an id given twice is an error naming both lines."""
        if lease_el.get("id") is None:
            return None
        lease_id = self.reader.positive_int(lease_el, "id")
        if lease_id in self.first_line:
            raise self.reader.error(lease_el, f"lease id {lease_id} is given twice "
                                              f"(first at line {self.first_line[lease_id]})")
        self.first_line[lease_id] = lease_el.sourceline
        return lease_id

    def numbered(self) -> list[LeaseRequest]:
        """The requests, those without an id numbered 1, 2, ... in file order, skipping the ids the file gives."""
        free = (n for n in itertools.count(1) if n not in self.first_line)
        for position in self.unnumbered:
            self.requests[position] = dataclasses.replace(self.requests[position], id=next(free))
        return self.requests
