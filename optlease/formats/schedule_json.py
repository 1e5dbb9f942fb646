"""Writes the schedule file of a run (contract `optlease-schedule/1`) and reads one back."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from optlease.domain.site import Site
from optlease.errors import InputError
from optlease.formats.timefmt import iso
from optlease.scheduling.records import Held, Lease, Placement

FORMAT = "optlease-schedule/1"


def keyed(mapping: dict[int, int]) -> dict[str, int]:
    """A reservation's mapping vnode -> pnode as the file keys it (vnode ids as strings, in vnode order)."""
    if type(mapping) is Placement:      # vnodes 1..n in order: the pnodes as they are kept, no sort
        return dict(zip(map(str, range(1, len(mapping) + 1)), mapping.pnodes))
    return {str(v): p for v, p in sorted(mapping.items())}


def vms_keyed(vms) -> dict[str, dict[str, int]]:
    """A request's per-VM demands keyed by vnode id (each VM's demand as it is, not a copy each: the same JSON)."""
    return dict(zip(map(str, range(1, len(vms) + 1)), vms))


def reservation_entry(held: Held, origin: datetime, mapping: Callable = keyed) -> dict[str, Any]:
    """One reservation of the file; `mapping` writes its mappings (the streaming writer's keeps them unbuilt)."""
    item: dict[str, Any] = {"kind": held.kind, "start": iso(origin, held.start), "end": iso(origin, held.end),
                            "mapping": mapping(held.mapping)}
    if held.origin is not None:
        item["from"] = mapping(held.origin)
        item["what"] = "memory-image"
    if held.outcome is not None:
        item["outcome"] = held.outcome
    if held.extra is not None:
        item.update(held.extra)
    return item


def in_time_order(lease: Lease) -> list[Held]:
    """What a lease held, in the file's order (by start, then end)."""
    return sorted(lease.held, key=lambda h: (h.start, h.end))


def lease_entry(lease: Lease, origin: datetime, images: Any, vms: Any, reservations: Any) -> dict[str, Any]:
    """One lease of the file, its per-VM demands and reservations given as the caller writes them."""
    req = lease.req
    entry: dict[str, Any] = {
        "id": lease.id, "type": req.kind.value, "preemptible": req.preemptible,
        "arrival": iso(origin, req.arrival),
        "requested_start": iso(origin, req.start) if req.start is not None else None,
        "duration": req.duration, "real_duration": req.actual_duration,
        "vms": vms, "state": lease.state.value, "reservations": reservations,
    }
    if lease.reason:
        entry["reason"] = lease.reason
    if req.deadline is not None:
        entry["deadline"] = iso(origin, req.deadline)
    if images is not None and req.software is not None:
        entry["image"] = {"id": req.software.id, "size": req.software.size}
    return entry


def document_entry(site: Site, origin: datetime, leases: Any, images: Any) -> dict[str, Any]:
    """The document's top level, its leases given as the caller writes them."""
    doc = {
        "format": FORMAT,
        "starttime": iso(origin, 0),
        "site": {"resource_types": list(site.resource_types),
                 "nodes": {str(n): dict(site.capacity(n)) for n in site.node_ids}},
        "leases": leases,
    }
    if images is not None:
        doc["images"] = images.document(lambda t: iso(origin, t))
    return doc


def schedule_document(site: Site, leases: list[Lease], origin: datetime,
                      images: Any = None) -> dict[str, Any]:
    """The schedule as a document in memory; `images` (the run's scheduling.preparation.ImageTransfers, None when
    images are not managed) adds each lease's disk image, the repository's link and what the node caches held.
    A run's file is written by `schedule_stream.write_schedule`, whose bytes are this document's
    `json.dumps(doc, indent=1)` and a newline, without building it."""
    doc_leases = [lease_entry(lease, origin, images, vms_keyed(lease.req.vms),
                              [reservation_entry(held, origin) for held in in_time_order(lease)])
                  for lease in sorted(leases, key=lambda lease: lease.id)]
    return document_entry(site, origin, doc_leases, images)


def write_schedule(path: str, site: Site, leases: list[Lease], origin: datetime, images: Any = None) -> str:
    """Writes the run's schedule file as a stream (schedule_stream.write_schedule); its sha256."""
    from optlease.formats.schedule_stream import write_schedule as write_stream

    return write_stream(path, site, leases, origin, images)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def load_schedule(path: Path) -> dict:
    """The document in a schedule file; InputError, naming the file, when it is not one."""
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", where) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a schedule file", where) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", where) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", where) from None
    try:
        # Python's reader takes NaN and Infinity, which JSON (and every other reader of the file) does not.
        doc = json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        raise InputError(f"line {exc.lineno} column {exc.colno}: {exc.msg}", where) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"not valid JSON: {exc}", where) from None
    if not isinstance(doc, dict):
        raise InputError(f"not a schedule: the document is a JSON {type(doc).__name__}, not an object", where)
    # Any other file with a format key is someone else's document: refuse it rather than list a hundred faults.
    if doc.get("format") != FORMAT:
        raise InputError(f"not a schedule: format is {doc.get('format')!r}, expected {FORMAT!r}", where)
    return doc
