"""Haizea's LWF (lease workload file) XML: the <lease-workload>, <site>, <nodes> and <lease> elements, read safely.

XML is parsed with entity resolution and network access off, a trace as a stream (`parse_lwf`: each request let go
once read). Every error names the file and line; a file with several is refused for the first.
A lease keeps the id its `<lease id=...>` gives (a positive whole number), as in Haizea; leases without one are
numbered 1, 2, ... in file order, skipping the ids the file gives. An id given twice is an error naming both lines
(Haizea would let the second lease overwrite the first in its lease table).
"""
from __future__ import annotations

import dataclasses
import io
import itertools
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from lxml import etree

from optlease.domain.lease import DiskImage, LeaseKind, LeaseRequest, check_vm_count
from optlease.domain.site import Site, SiteError
from optlease.errors import InputError
from optlease.numbers import parse_whole
from optlease.formats.timefmt import TimeFormatError, parse_duration, parse_time


# Resource amounts and image sizes (MB) fit 32 bits: no node or disk optlease plans for has more.
MAX_AMOUNT = 2**31 - 1


@dataclass
class Workload:
    """What a trace file holds: its requests in arrival order and, optionally, the site it was meant for."""

    name: str
    requests: list[LeaseRequest]
    site: Site | None = None
    description: str = ""
    source: str = ""
    notes: list[str] = field(default_factory=list)


def read_bounded(path: str | Path, limit: int) -> bytes:
    """A document's bytes, at most `limit` + 1 of them (so that the caller can say it is too large without reading
    it all); an unreadable file is an InputError naming it."""
    try:
        with open(path, "rb") as f:
            return f.read(limit + 1)
    except OSError as exc:
        raise InputError(exc.strerror or str(exc), str(path)) from None


# How every XML document optlease reads is parsed: no entity expansion, no network, no DTD, libxml2's size limits.
SAFE = dict(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, remove_comments=True)


def safe_parser() -> etree.XMLParser:
    return etree.XMLParser(**SAFE)


def syntax_error(exc: etree.XMLSyntaxError, path: str) -> InputError:
    """Malformed XML as one line naming the file and line."""
    line = exc.position[0] if exc.position else None
    why = (exc.msg or "unreadable").splitlines()[0]    # libxml2 may add its own lines: keep the first
    return InputError(f"malformed XML: {why}", f"{path}:{line}" if line else path)


def parse_xml(data: bytes, path: str) -> etree._Element:
    """An XML document read with `safe_parser`; malformed XML is one line naming the file and line."""
    try:
        return etree.fromstring(data, safe_parser())
    except etree.XMLSyntaxError as exc:
        raise syntax_error(exc, path) from None


def xml_root(data: bytes, path: str, what: str) -> etree._Element:
    """`parse_xml`, refusing a DOCTYPE with declarations too (entities are never expanded, so a document that relies
    on them would read as empty values)."""
    root = parse_xml(data, path)
    if root.getroottree().docinfo.internalDTD is not None:
        raise InputError(f"a DOCTYPE with declarations: optlease reads {what} documents without DTDs or entities",
                         f"{path}:1")
    return root


# The parts of a <lease> and of a <lease-request> the reader reads (each the first child of its tag).
LEASE_PARTS = ("nodes", "duration", "start", "deadline", "software")
REQUEST_PARTS = ("realduration", "lease")


def first_children(elem: etree._Element, tags: tuple[str, ...]) -> dict[str, etree._Element | None]:
    """tag -> the first child of `elem` with that tag (None when there is none), for each of `tags`."""
    found: dict[str, etree._Element | None] = dict.fromkeys(tags)
    for child in elem:
        if found.get(child.tag, elem) is None:
            found[child.tag] = child
    return found


class _Reader:
    def __init__(self, path: str, origin: datetime | None) -> None:
        self.path = path
        self.origin = origin
        # a lease's VMs by the raw text of its <nodes> (a workload repeats a few shapes thousands of times): each
        # shape is checked once, where it first appears, and its VMs shared, as VMs alike within a lease are
        self._vms: dict[bytes, tuple[dict[str, int], ...]] = {}

    def error(self, elem: etree._Element | None, message: str) -> InputError:
        line = getattr(elem, "sourceline", None)
        return InputError(message, f"{self.path}:{line}" if line else self.path)

    def attr(self, elem: etree._Element, name: str) -> str:
        value = elem.get(name)
        if value is None or not value.strip():
            raise self.error(elem, f"<{elem.tag}> has no {name}= attribute")
        return value.strip()

    def positive_int(self, elem: etree._Element, name: str, high: int | None = MAX_AMOUNT) -> int:
        """A count, amount or size: ASCII digits (optlease.numbers), at least 1 and at most `high`."""
        raw = self.attr(elem, name)
        try:
            return parse_whole(raw, 1, high)
        except ValueError as exc:
            raise self.error(elem, f"<{elem.tag}> {name}={exc}") from None

    def duration(self, elem: etree._Element, name: str = "time") -> int:
        try:
            return parse_duration(self.attr(elem, name))
        except TimeFormatError as exc:
            raise self.error(elem, str(exc)) from None

    def nodes(self, elem: etree._Element) -> list[dict[str, int]]:
        """A <nodes> element as one capacity dict per node."""
        return [dict(capacity) for count, capacity in self.node_sets(elem) for _ in range(count)]

    def node_sets(self, elem: etree._Element) -> list[tuple[int, dict[str, int]]]:
        """A <nodes> element as (how many nodes, their capacity) per <node-set>."""
        sets = [c for c in elem if c.tag == "node-set"]
        if not sets:
            raise self.error(elem, "<nodes> has no <node-set>")
        out: list[tuple[int, dict[str, int]]] = []
        total = 0
        for node_set in sets:
            count = self.positive_int(node_set, "numnodes", high=None)    # check_vm_count says how many
            total += count
            if check_vm_count(total):
                raise self.error(node_set, check_vm_count(total))
            capacity: dict[str, int] = {}
            for res in node_set:
                if res.tag != "res":
                    raise self.error(res, f"unexpected <{res.tag}> in <node-set> (only <res> is allowed)")
                rtype = self.attr(res, "type")
                if rtype in capacity:
                    raise self.error(res, f"resource {rtype} given twice in one <node-set>")
                capacity[rtype] = self.positive_int(res, "amount")
            if not capacity:
                raise self.error(node_set, "<node-set> has no <res>")
            out.append((count, capacity))
        return out

    def site(self, elem: etree._Element) -> Site:
        types_el = elem.find("resource-types")
        nodes_el = elem.find("nodes")
        if types_el is None:
            raise self.error(elem, "<site> has no <resource-types>")
        if nodes_el is None:
            raise self.error(elem, "<site> has no <nodes>")
        types = tuple(self.attr(types_el, "names").split())
        try:
            return Site(types, tuple(self.nodes(nodes_el)))
        except SiteError as exc:
            raise self.error(elem, exc.message) from None

    def lease(self, elem: etree._Element, lease_id: int, arrival: int, real: int | None) -> LeaseRequest:
        # each part is the first child of its tag (as find() gives it), found in one pass over the children
        parts = first_children(elem, LEASE_PARTS)
        nodes_el = parts["nodes"]
        if nodes_el is None:
            raise self.error(elem, "<lease> has no <nodes>")
        vms = self.vms(nodes_el)
        dur_el = parts["duration"]
        if dur_el is None:
            raise self.error(elem, "<lease> has no <duration>")
        duration = self.duration(dur_el)
        if duration <= 0:
            raise self.error(dur_el, "duration must be positive")
        kind, start = self.start(parts["start"], elem, arrival)
        preemptible = self.flag(elem, "preemptible", default=kind is LeaseKind.BEST_EFFORT)
        deadline = None
        dl_el = parts["deadline"]
        if dl_el is not None:
            try:
                deadline = parse_time(self.attr(dl_el, "time"), self.origin, 0)
            except TimeFormatError as exc:
                raise self.error(dl_el, str(exc)) from None
        extra = {"source": f"{self.path}:{elem.sourceline}"}
        if elem.get("id") is not None:
            extra["trace-id"] = str(lease_id)
        return LeaseRequest(id=lease_id, kind=kind, arrival=arrival, duration=duration, vms=vms,
                            preemptible=preemptible, start=start, real_duration=real,
                            software=self.software(parts["software"]), deadline=deadline, extra=extra)

    def vms(self, nodes_el: etree._Element) -> tuple[dict[str, int], ...]:
        """A lease's <nodes> as one demand per VM. VMs alike share one demand (a wide lease holds thousands of VMs,
        each a dict otherwise; nothing changes a request's demands in place), one per <node-set>, repeated: no
        work per VM. A shape is known by its text (the element as written, which says all the reader reads)."""
        shape = etree.tostring(nodes_el, with_tail=False)
        known = self._vms.get(shape)
        if known is None:
            alike: dict[tuple, dict[str, int]] = {}
            vms: list[dict[str, int]] = []
            for count, capacity in self.node_sets(nodes_el):
                vms.extend([alike.setdefault(tuple(capacity.items()), capacity)] * count)
            known = self._vms[shape] = tuple(vms)
        return known

    def start(self, start_el, lease_el, arrival: int) -> tuple[LeaseKind, int | None]:
        if start_el is None:
            raise self.error(lease_el, "<lease> has no <start> (use <start/> for a best-effort lease)")
        children = list(start_el)
        if not children:
            return LeaseKind.BEST_EFFORT, None
        child = children[0]
        if child.tag == "now":
            return LeaseKind.IMMEDIATE, None
        if child.tag == "exact":
            raw = self.attr(child, "time")
            try:
                if raw.startswith("+"):
                    return LeaseKind.AR, arrival + parse_duration(raw)
                return LeaseKind.AR, parse_time(raw, self.origin, 0)
            except TimeFormatError as exc:
                raise self.error(child, str(exc)) from None
        raise self.error(child, f"unexpected <{child.tag}> in <start> (expected <exact time=...>, <now/> or nothing)")

    def flag(self, elem, name: str, default: bool) -> bool:
        raw = elem.get(name)
        if raw is None:
            return default
        value = raw.strip().lower()
        if value in ("true", "yes", "1"):
            return True
        if value in ("false", "no", "0"):
            return False
        raise self.error(elem, f"{name}={raw!r} must be true/yes or false/no")

    def software(self, elem) -> DiskImage | None:
        if elem is None:
            return None
        image = next(elem.iterchildren("disk-image"), None)     # (find()'s answer, without its path parser)
        if image is None:
            return None
        return DiskImage(self.attr(image, "id"), self.positive_int(image, "size"))


def parse_lwf(data: bytes, path: str = "<lwf>", origin: datetime | None = None) -> Workload:
    """The workload of an LWF document. The document is read as a stream (lxml's iterparse, with `safe_parser`'s
    options): each <lease-request> is read when its end tag is, then cleared, so that memory holds the requests and
    not the tree. Errors come in file order, the first one found ending the read."""
    reader = _Reader(path, origin)
    events = etree.iterparse(io.BytesIO(data), events=("end",), tag=STREAMED, **SAFE)
    state = _Stream(reader)
    root = None
    try:
        for _, elem in events:
            if root is None:
                root = elem.getroottree().getroot()
            state.seen(root, elem)
    except etree.XMLSyntaxError as exc:
        raise syntax_error(exc, path) from None
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


def load_lwf(path: str | Path, origin: datetime | None = None) -> Workload:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(exc.strerror or str(exc), str(path)) from None
    return parse_lwf(data, str(path), origin)
