"""Haizea's LWF (lease workload file) XML: the <lease-workload>, <site>, <nodes> and <lease> elements, read safely.

XML is parsed with entity resolution and network access off, a trace as a stream (`parse_lwf`, formats/lwf_stream.py:
each request let go once read). Every error names the file and line; a file with several is refused for the first.
A lease keeps the id its `<lease id=...>` gives (a positive whole number), as in Haizea; leases without one are
numbered 1, 2, ... in file order, skipping the ids the file gives. An id given twice is an error naming both lines
(Haizea would let the second lease overwrite the first in its lease table).
"""
from __future__ import annotations

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
    """The workload of an LWF document, read as a stream (formats/lwf_stream.py): each <lease-request> is read when
    its end tag is, then let go, so that memory holds the requests and not the tree. Errors come in file order, the
    first one found ending the read."""
    from optlease.formats.lwf_stream import read_workload

    return read_workload(_Reader(path, origin), data)


def load_lwf(path: str | Path, origin: datetime | None = None) -> Workload:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(exc.strerror or str(exc), str(path)) from None
    return parse_lwf(data, str(path), origin)
