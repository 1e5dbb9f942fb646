"""Checks a schedule file (`optlease-schedule/1`) read as a stream (`formats.schedule_read`), one lease at a time:
the same rules, the same violations in the same order as `checker.check_schedule` on the whole document, with memory
bounded by one lease and what the capacity sweep keeps of each reservation (a few numbers per node it holds, on disk
past a bound: `checker_sweep`), not by the document (a year of 25 million VMs takes over 10 GB as a document).

The file is read once where its top-level members come as the writer puts them (format, starttime and site before
the leases, images after them) and the document holds no images; a second time to check the images' rules (they need
the image caches, written after the leases), or when the leases come before what reading them needs."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from optlease.checker import _check_lease
from optlease.checker_images import check_images
from optlease.checker_read import FORMAT, Reader, Violation, contract_seconds, contract_time
from optlease.checker_sweep import BUCKETS, SPILL, CapacitySweep
from optlease.errors import InputError
from optlease.formats.schedule_read import read_members

PREFIX = ("format", "starttime", "site")     # what must be known before a lease can be read


@dataclass
class StreamCheck:
    """What checking a schedule file found: its violations and its counts (as `check` reports them)."""
    violations: list[Violation] = field(default_factory=list)
    leases: int = 0
    reservations: int = 0


@dataclass
class _Pass:
    reader: Reader = field(default_factory=Reader)
    rules: list[Violation] = field(default_factory=list)
    capacity: list[Violation] = field(default_factory=list)
    leases_read: bool = False
    not_a_list: bool = False
    leases: int = 0
    reservations: int = 0


def check_file(path: Path, spill: int = SPILL, buckets: int = BUCKETS, **limits: int) -> StreamCheck:
    """Every rule of the schedule contract the file breaks; InputError naming the file when it is not a schedule
    (the errors `schedule_json.load_schedule` raises for it). `limits` bound the reader (`schedule_read`), `spill`
    and `buckets` the capacity sweep (`checker_sweep`)."""
    sweep = {"spill": spill, "buckets": buckets}
    top: dict[str, Any] = {}
    state = _Pass()
    deferred = False
    for key, value in read_members(path, **limits):
        if key != "leases":
            top[key] = value
        elif not isinstance(value, Iterator):
            state.not_a_list = True
        elif all(k in top for k in PREFIX) and top["format"] == FORMAT:
            _read_leases(state, top, value, sweep)
        else:
            deferred = True      # read once the rest of the document is known
    if top.get("format") != FORMAT:
        raise InputError(f"not a schedule: format is {top.get('format')!r}, expected {FORMAT!r}", str(path))
    if deferred:
        state = _Pass()
        for key, value in read_members(path, **limits):
            if key == "leases" and isinstance(value, Iterator):
                _read_leases(state, top, value, sweep)
    if not state.leases_read:
        # no leases member, or one that is not a list: the document's and site's faults, then that one
        state.reader.time(None, "schedule", top, "starttime")
        state.reader.site(top.get("site"))
        state.reader.flag(None, "format", "leases is missing or not a list")
        return StreamCheck(state.reader.out)
    out = state.reader.out + state.rules + state.capacity
    if top.get("images") is not None:
        out.extend(check_images(top["images"], lambda: _lease_dicts(path, limits), contract_seconds,
                                contract_time, Violation))
    return StreamCheck(out, state.leases, state.reservations)


def _read_leases(state: _Pass, top: dict[str, Any], leases: Iterator[tuple[int, Any]], limits: dict[str, int]) -> None:
    """Reads and checks each lease as it comes; the capacity sweep runs once all are read."""
    reader = state.reader
    reader.time(None, "schedule", top, "starttime")
    site = reader.site(top.get("site"))
    sweep = CapacitySweep(site, **limits) if site is not None else None
    seen: set[int] = set()
    for pos, raw in leases:
        lease = reader.lease(pos, raw, site)
        reader.note_id(pos, raw, seen)
        state.leases += 1
        if isinstance(raw, dict) and isinstance(raw.get("reservations"), list):
            state.reservations += len(raw["reservations"])
        if lease is not None:
            state.rules.extend(_check_lease(lease))
            if sweep is not None:
                sweep.add(lease)
    state.leases_read = True
    if sweep is not None:
        state.capacity = sweep.violations()


def _lease_dicts(path: Path, limits: dict[str, int]) -> Iterator[Any]:
    """The file's leases once more, one at a time (the images' rules read them after the image caches)."""
    for key, value in read_members(path, **limits):
        if key == "leases" and isinstance(value, Iterator):
            for _, raw in value:
                yield raw
