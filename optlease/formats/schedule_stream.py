"""Writes the schedule file (contract `optlease-schedule/1`) as a stream: the bytes of `json.dumps(doc, indent=1)`
and a newline for the document `schedule_json.schedule_document` builds, generated lease by lease and reservation by
reservation and hashed as they are written, so that memory is bounded by what one reservation needs (a year of a
large site holds tens of millions of VMs: its document in memory takes over 20 GB, its file a few GB).

Each part of the document is built by the same functions as the document in memory (schedule_json's
`document_entry`, `lease_entry`, `reservation_entry`) and written as Python's JSON encoder writes it with `indent=1`:
a value nested `level` deep is its own `json.dumps(value, indent=1)` with `level` spaces after each line break. Only
the parts that grow with a lease's VMs (its per-VM demands, its reservations' mappings) and the lists of leases and
reservations are written here rather than by `json`; `tests/test_schedule_stream.py` compares the bytes.
"""
from __future__ import annotations

import hashlib
import json
import operator
import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from optlease.domain.site import Site
from optlease.formats.schedule_json import (document_entry, in_time_order, keyed, lease_entry, reservation_entry)
from optlease.scheduling.records import Lease, Placement

# What is gathered before it is hashed and written: a few hundred of the year's reservations, or one wide one.
CHUNK = 1 << 20


class _Mapping:
    """A reservation's mapping vnode -> pnode, written as `keyed` would give it without building that dict."""

    __slots__ = ("mapping",)

    def __init__(self, mapping) -> None:
        self.mapping = mapping


class _VMs:
    """A request's per-VM demands, written as `vms_keyed` would give them without building that dict."""

    __slots__ = ("vms",)

    def __init__(self, vms) -> None:
        self.vms = vms


class _Items:
    """A list written item by item as it is produced (the leases; a lease's reservations)."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable) -> None:
        self.items = items


def nested(value: Any, level: int) -> str:
    """`value` as json.dumps(indent=1) writes it nested `level` deep in a document."""
    if value is None:
        return "null"
    kind = type(value)
    if kind is int:                     # (json writes an int as int.__repr__; a bool is not one here)
        return int.__repr__(value)
    if kind is str and value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return '"' + value + '"'        # (json escapes only quotes, backslashes and what is not printable ASCII)
    text = json.dumps(value, indent=1)
    return text.replace("\n", "\n" + " " * level) if level and kind is not str else text


def _key(key: Any) -> str:
    """A dict key as json writes it (a str quoted and escaped; a number, bool or None as the str json makes it)."""
    return nested(key, 0) if type(key) is str else json.dumps({key: 0})[1:-4]


class _Writer:
    """Writes the parts of one document; keeps the text of the keys "1".."n" of the vnode dicts at each depth (the
    same for every lease: a comma, a line break, the depth's spaces, `"7": `), so that a VM costs a join of texts
    already made."""

    def __init__(self) -> None:
        self.keys: dict[int, list[str]] = {}

    def vnode_keys(self, n: int, level: int) -> list[str]:
        """The texts before the values of vnodes 1..n at index 1..n, each with its comma (the first's is cut)."""
        keys = self.keys.setdefault(level, [""])
        if len(keys) <= n:
            lead = ",\n" + " " * (level + 1) + '"'
            keys.extend([lead + str(v) + '": ' for v in range(len(keys), n + 1)])
        return keys

    def vnodes_to(self, values: list[str], level: int, alike: str | None = None) -> str:
        """A dict vnode id ("1".."n") -> already written value (`alike`: the one value of all), nested `level`
        deep."""
        n = len(values)
        if not n:
            return "{}"
        keys = self.vnode_keys(n, level)
        if alike is not None:
            body = alike.join(keys[1:n + 1]) + alike
        else:
            body = "".join(map(operator.add, keys[1:n + 1], values))
        return "{" + body[1:] + "\n" + " " * level + "}"

    def mapping(self, mapping, level: int) -> str:
        """A mapping vnode -> pnode as `keyed` gives it, nested `level` deep; a Placement of ints without a dict."""
        if type(mapping) is Placement and set(map(type, mapping.pnodes)) <= {int}:
            return self.vnodes_to(list(map(int.__repr__, mapping.pnodes)), level)
        return nested(keyed(mapping), level)

    def vms(self, vms, level: int) -> str:
        """Per-VM demands as `vms_keyed` gives them, nested `level` deep; VMs that share one demand dict (as a
        workload's readers give them) share its text."""
        if len(set(map(id, vms))) == 1:         # (one dict for every VM: the same object, not equal ones)
            return self.vnodes_to(vms, level, alike=nested(vms[0], level + 1))
        written = {key: nested(demand, level + 1) for key, demand in dict(zip(map(id, vms), vms)).items()}
        return self.vnodes_to(list(map(written.__getitem__, map(id, vms))), level)

    def value(self, value: Any, level: int) -> Iterator[str]:
        kind = type(value)
        if kind is dict:
            yield from self.object(value, level)
        elif kind is _Items:
            yield from self.array(value.items, level)
        elif kind is _Mapping:
            yield self.mapping(value.mapping, level)
        elif kind is _VMs:
            yield self.vms(value.vms, level)
        else:
            yield nested(value, level)

    def object(self, obj: dict, level: int) -> Iterator[str]:
        """A dict nested `level` deep, its values written by `value`."""
        if not obj:
            yield "{}"
            return
        inner = "\n" + " " * (level + 1)
        lead = "{" + inner
        for key, value in obj.items():
            yield lead + _key(key) + ": "
            yield from self.value(value, level + 1)
            lead = "," + inner
        yield "\n" + " " * level + "}"

    def array(self, items: Iterable, level: int) -> Iterator[str]:
        """A list nested `level` deep, written item by item as `items` yields them."""
        inner = "\n" + " " * (level + 1)
        lead = "[" + inner
        for item in items:
            yield lead
            yield from self.value(item, level + 1)
            lead = "," + inner
        yield "[]" if lead[0] == "[" else "\n" + " " * level + "]"


def _reservations(lease: Lease, origin: datetime) -> Iterator[dict]:
    for held in in_time_order(lease):
        yield reservation_entry(held, origin, mapping=_Mapping)


def _leases(leases: list[Lease], origin: datetime, images: Any) -> Iterator[dict]:
    for lease in sorted(leases, key=lambda lease: lease.id):
        yield lease_entry(lease, origin, images, _VMs(lease.req.vms), _Items(_reservations(lease, origin)))


def schedule_text(site: Site, leases: list[Lease], origin: datetime, images: Any = None) -> Iterator[str]:
    """The schedule file's text in pieces: together, `json.dumps(schedule_document(...), indent=1)` and a newline."""
    yield from _Writer().object(document_entry(site, origin, _Items(_leases(leases, origin, images)), images), 0)
    yield "\n"


def schedule_chunks(site: Site, leases: list[Lease], origin: datetime, images: Any = None) -> Iterator[bytes]:
    """The schedule file's bytes in chunks of about CHUNK (the text is ASCII: json escapes everything else)."""
    pieces: list[str] = []
    size = 0
    for piece in schedule_text(site, leases, origin, images):
        pieces.append(piece)
        size += len(piece)
        if size >= CHUNK:
            yield "".join(pieces).encode()
            pieces.clear()
            size = 0
    if pieces:
        yield "".join(pieces).encode()


def schedule_sha256(site: Site, leases: list[Lease], origin: datetime, images: Any = None) -> str:
    """The sha256 of the schedule file `write_schedule` writes, computed without writing it."""
    digest = hashlib.sha256()
    for chunk in schedule_chunks(site, leases, origin, images):
        digest.update(chunk)
    return digest.hexdigest()


def write_schedule(path: str, site: Site, leases: list[Lease], origin: datetime, images: Any = None) -> str:
    """Writes the run's schedule file, whole or not at all (a run that fails while writing leaves the file that
    was there: the text goes to a file beside it, put in its place when complete); its sha256."""
    target = Path(path)
    if target.exists() and not target.is_file():        # (a device or a pipe: written as it comes)
        return _write(target, site, leases, origin, images)
    part = target.with_name(f".{target.name}.part")
    try:
        digest = _write(part, site, leases, origin, images)
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)
    return digest


def _write(path: Path, site: Site, leases: list[Lease], origin: datetime, images: Any) -> str:
    digest = hashlib.sha256()
    with open(path, "wb") as fh:
        for chunk in schedule_chunks(site, leases, origin, images):
            digest.update(chunk)
            fh.write(chunk)
    return digest.hexdigest()
