"""Checks a schedule document (`optlease-schedule/1`) against every rule of the schedule contract."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache, partial
from itertools import groupby
from operator import itemgetter
from typing import Any, Iterator

from optlease.checker_images import check_images
from optlease.formats.timefmt import iso

FORMAT = "optlease-schedule/1"
KINDS = frozenset({"vm", "suspend", "resume", "shutdown", "migrate", "transfer"})
REQUEUED = "requeued"
# Overheads are rounded to whole seconds, so a run may differ from real_duration by one second.
TOLERANCE = 1
# Capacities and demands may be floats; a sum of floats must not read as an overload.
EPSILON = 1e-9
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")
_EPOCH = datetime(1970, 1, 1)
_when = partial(iso, _EPOCH)  # the contract's notation of a time in seconds since _EPOCH


@dataclass(frozen=True)
class Violation:
    """One broken rule: the lease (None for the document or the site), a stable rule name and a one-line message."""

    lease: int | None
    rule: str
    message: str

    def __str__(self) -> str:
        where = "schedule" if self.lease is None else f"lease {self.lease}"
        return f"{where}: {self.rule}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"lease": self.lease, "rule": self.rule, "message": self.message}


@dataclass(frozen=True)
class _Site:
    types: frozenset[str]
    nodes: dict[str, dict[str, float]]


@dataclass(frozen=True)
class _Resv:
    index: int
    kind: str
    start: int
    end: int
    mapping: dict[str, str]  # vnode -> node key
    source: dict[str, str]  # a migrate's or transfer's `from` mapping
    requeued: bool
    holds: bool = True  # holds node capacity: not a transfer, nor the cold copy of a suspended VM's memory image

    def label(self) -> str:
        return f"reservation {self.index} ({self.kind})"


@dataclass(frozen=True)
class _Lease:
    id: int
    type: str
    preemptible: bool
    arrival: int
    requested_start: int | None
    duration: float
    real_duration: float
    vms: dict[str, dict[str, float]]
    state: str
    reservations: tuple[_Resv, ...]  # sorted by time


@lru_cache(maxsize=1 << 16)
def _seconds(text: Any) -> int | None:
    """Seconds since 1970 of a contract time, None when it is not `YYYY-MM-DDTHH:MM:SS`."""
    if not isinstance(text, str) or not _TIME.fullmatch(text):
        return None
    try:
        return (datetime.fromisoformat(text) - _EPOCH) // timedelta(seconds=1)
    except ValueError:
        return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _amount(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class _Reader:
    """Reads the document into checked records, reporting every structural fault it meets."""

    def __init__(self) -> None:
        self.out: list[Violation] = []

    def flag(self, lease: int | None, rule: str, message: str) -> None:
        self.out.append(Violation(lease, rule, message))

    def time(self, lease: int | None, where: str, obj: dict, key: str) -> int | None:
        if key not in obj:
            self.flag(lease, "format", f"{where} has no {key!r}")
            return None
        seconds = _seconds(obj[key])
        if seconds is None:
            self.flag(lease, "time-format", f"{where} {key} {obj[key]!r} is not an ISO 8601 time "
                                            "YYYY-MM-DDTHH:MM:SS (no zone, whole seconds)")
        return seconds

    def site(self, raw: Any) -> _Site | None:
        """The site, or None when it is too broken to check mappings and capacities against."""
        before = len(self.out)
        types = raw.get("resource_types") if isinstance(raw, dict) else None
        nodes = raw.get("nodes") if isinstance(raw, dict) else None
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            self.flag(None, "format", "site.resource_types is missing or not a list of strings")
            return None
        if not isinstance(nodes, dict) or not nodes:
            self.flag(None, "format", "site.nodes is missing or not a non-empty object")
            return None
        for key, capacity in nodes.items():
            if not isinstance(key, str):
                self.flag(None, "format", f"site node key {key!r} is not a string")
            if not isinstance(capacity, dict):
                self.flag(None, "format", f"site node {key} is not an object of resource amounts")
                continue
            # Keys that are not resource types are extra keys, which the contract allows anywhere.
            for rtype, amount in capacity.items():
                if rtype in types and (not _is_number(amount) or amount < 0):
                    self.flag(None, "format", f"site node {key}: {rtype} capacity {amount!r} is not a number >= 0")
        if len(self.out) > before:
            return None
        return _Site(frozenset(types), {str(k): v for k, v in nodes.items()})

    def lease(self, pos: int, raw: Any, site: _Site | None) -> _Lease | None:
        """The lease, or None when it has a structural fault (its semantic rules are then not checked)."""
        if not isinstance(raw, dict):
            self.flag(None, "format", f"leases[{pos}] is not an object")
            return None
        lid = raw.get("id")
        if not _is_number(lid) or not float(lid).is_integer():
            self.flag(None, "format", f"leases[{pos}] id {lid!r} is not a whole JSON number")
            return None
        lid = int(lid)
        before = len(self.out)
        where = f"leases[{pos}]"

        def need(key: str, ok: Any, what: str) -> Any:
            if key not in raw:
                self.flag(lid, "format", f"{where} has no {key!r}")
            elif not ok(raw[key]):
                self.flag(lid, "format", f"{where} {key} {raw[key]!r} is not {what}")
            else:
                return raw[key]
            return None

        ltype = need("type", lambda v: isinstance(v, str), "a string")
        preemptible = need("preemptible", lambda v: isinstance(v, bool), "true or false")
        state = need("state", lambda v: isinstance(v, str), "a string")
        duration = need("duration", lambda v: _is_number(v) and v >= 0, "a number of seconds >= 0")
        vms = need("vms", lambda v: isinstance(v, dict) and v, "a non-empty object of per-VM demands")
        reservations = need("reservations", lambda v: isinstance(v, list), "a list")
        arrival = self.time(lid, where, raw, "arrival")
        real = raw.get("real_duration")
        if real is not None and not (_is_number(real) and real >= 0):
            self.flag(lid, "format", f"{where} real_duration {real!r} is not a number of seconds >= 0")
        requested = None
        if raw.get("requested_start") is not None:
            requested = self.time(lid, where, raw, "requested_start")
        elif ltype == "ar":
            self.flag(lid, "format", f"{where} is an AR without a requested_start")
        resvs = []
        if isinstance(vms, dict):
            self.demands(lid, vms, site)
            if isinstance(reservations, list):
                resvs = [self.reservation(lid, i, r, vms, site) for i, r in enumerate(reservations)]
        if len(self.out) > before:
            return None
        ordered = sorted(resvs, key=lambda r: (r.start, r.end))
        for earlier, later in zip(resvs, resvs[1:]):
            if later.start < earlier.start:
                self.flag(lid, "order", f"{later.label()} starts at {_when(later.start)}, before "
                                        f"{earlier.label()} at {_when(earlier.start)}")
        # A trace's real duration longer than the request is cut at the request, as Haizea cuts it.
        return _Lease(lid, ltype, preemptible, arrival, requested, duration,
                      duration if real is None else min(real, duration), vms, state, tuple(ordered))

    def demands(self, lid: int, vms: dict, site: _Site | None) -> None:
        for vnode, demand in vms.items():
            if not isinstance(vnode, str):
                self.flag(lid, "format", f"vnode key {vnode!r} is not a string")
            if not isinstance(demand, dict):
                self.flag(lid, "format", f"vnode {vnode}: demand {demand!r} is not an object")
                continue
            for rtype, amount in demand.items():
                if site is not None and rtype not in site.types:
                    self.flag(lid, "resource-type", f"vnode {vnode} demands {rtype!r}, which is not a site "
                                                    f"resource type ({' '.join(sorted(site.types))})")
                elif not _is_number(amount) or amount < 0:
                    self.flag(lid, "format", f"vnode {vnode}: {rtype} demand {amount!r} is not a number >= 0")

    def reservation(self, lid: int, index: int, raw: Any, vms: dict, site: _Site | None) -> _Resv | None:
        where = f"reservation {index}"
        if not isinstance(raw, dict):
            self.flag(lid, "format", f"{where} is not an object")
            return None
        kind = raw.get("kind")
        if kind not in KINDS:
            self.flag(lid, "kind", f"{where} kind {kind!r} is not one of {', '.join(sorted(KINDS))}")
        where = f"{where} ({kind})"
        start = self.time(lid, where, raw, "start")
        end = self.time(lid, where, raw, "end")
        if start is not None and end is not None and start > end:
            self.flag(lid, "interval", f"{where} ends at {raw['end']}, before its start {raw['start']}")
        # a transfer lists the VMs it feeds: the others take the image from a cache or another transfer
        mapping = self.mapping(lid, where, raw.get("mapping"), "mapping", vms, site, complete=kind != "transfer")
        source: dict[str, str] = {}
        if "from" in raw:
            source = self.mapping(lid, where, raw["from"], "from", vms, site, complete=False)
        elif kind == "migrate":
            self.flag(lid, "mapping", f"{where} has no 'from' mapping: the nodes it migrates from are unknown")
        outcome = raw.get("outcome")
        if outcome is not None and not isinstance(outcome, str):
            self.flag(lid, "format", f"{where} outcome {outcome!r} is not a string")
        # A `migrate` of a suspended VM's memory image ("what": "memory-image") or disk image ("disk-image") moves a
        # file: no VM runs on either node, so, like a transfer, it holds no capacity (the VM's demand is held again
        # by its resume).
        holds = kind != "transfer" and not (kind == "migrate" and raw.get("what") in ("memory-image", "disk-image"))
        return _Resv(index, kind, start, end, mapping, source, outcome == REQUEUED, holds)

    def mapping(self, lid: int, where: str, raw: Any, key: str, vms: dict, site: _Site | None,
                complete: bool) -> dict[str, str]:
        if not isinstance(raw, dict):
            self.flag(lid, "format", f"{where} {key} {raw!r} is not an object of vnode -> node")
            return {}
        result: dict[str, str] = {}
        for vnode, node in raw.items():
            if str(vnode) not in vms:
                self.flag(lid, "mapping", f"{where} {key} maps vnode {vnode}, which the lease does not have")
            if isinstance(node, bool) or not isinstance(node, (int, str)):
                self.flag(lid, "format", f"{where} {key} maps vnode {vnode} to {node!r}, not a node id")
            elif site is not None and str(node) not in site.nodes:
                self.flag(lid, "mapping", f"{where} {key} maps vnode {vnode} to node {node}, "
                                          "which is not in site.nodes")
            result[str(vnode)] = str(node)
        if complete:
            missing = [v for v in vms if v not in result]
            if missing:
                self.flag(lid, "mapping", f"{where} {key} does not map vnode {', '.join(missing)}")
        return result


def _check_lease(lease: _Lease) -> Iterator[Violation]:
    """The per-lease rules of the contract: arrival, durations, AR, immediate, preemption, rejection."""
    flag = partial(Violation, lease.id)
    resvs = lease.reservations
    vms = [r for r in resvs if r.kind == "vm"]
    runs = [r for r in vms if not r.requeued]  # requeued runs are lost work
    early = next((r for r in resvs if r.start < lease.arrival), None)
    if early is not None:
        yield flag("arrival", f"{early.label()} starts at {_when(early.start)}, before arrival {_when(lease.arrival)}")
    if lease.state == "rejected":
        if vms:
            yield flag("rejected-has-vm", f"rejected, yet {vms[0].label()} runs from {_when(vms[0].start)}")
        return
    if lease.state == "done":
        ran = sum(r.end - r.start for r in runs)
        if abs(ran - lease.real_duration) > TOLERANCE:
            yield flag("real-duration", f"vm reservations add up to {ran} s, not real_duration "
                                        f"{_amount(lease.real_duration)} s (±{TOLERANCE} s)")
        if ran > lease.duration:
            yield flag("over-duration", f"vm reservations add up to {ran} s, more than duration "
                                        f"{_amount(lease.duration)} s")
    if lease.type == "ar" and runs:
        if runs[0].start != lease.requested_start:
            yield flag("ar-start", f"{runs[0].label()} starts at {_when(runs[0].start)}, not at requested_start "
                                   f"{_when(lease.requested_start)}")
        breaks = [r for r in resvs if r.kind in ("suspend", "resume") or (r.kind == "vm" and r is not runs[0])]
        if breaks:
            yield flag("ar-interrupted", f"{breaks[0].label()} at {_when(breaks[0].start)} interrupts the AR")
        return  # an accepted AR's one uninterrupted run is stronger than the preemption rules: one fault, one line
    if lease.type == "immediate" and vms:
        first = vms[0]
        before = resvs[:next(i for i, r in enumerate(resvs) if r is first)]
        ready = max((r.end for r in before), default=lease.arrival)
        if first.start != lease.arrival and (any(r.kind != "transfer" for r in before) or first.start != ready):
            yield flag("immediate-start", f"{first.label()} starts at {_when(first.start)}, not at arrival "
                                          f"{_when(lease.arrival)} nor right after its image transfers")
    if not lease.preemptible:
        if len(runs) > 1 or (not runs and lease.state == "done"):
            yield flag("non-preemptible", f"has {len(runs)} vm reservations that were not requeued, not exactly one")
        suspend = next((r for r in resvs if r.kind == "suspend"), None)
        if suspend is not None:
            yield flag("non-preemptible", f"{suspend.label()} at {_when(suspend.start)} suspends a "
                                          "non-preemptible lease")
        return
    position = {id(r): i for i, r in enumerate(resvs)}
    for first, second in zip(vms, vms[1:]):
        if first.requeued:
            continue  # a requeued run was cancelled, not suspended: the next run starts from scratch
        between = [r.kind for r in resvs[position[id(first)] + 1:position[id(second)]]]
        if not ("suspend" in between and "resume" in between[between.index("suspend"):]):
            yield flag("suspend-resume", f"no suspend then resume between {first.label()} ending at "
                                         f"{_when(first.end)} and {second.label()} starting at {_when(second.start)}")


def _check_capacity(leases: list[_Lease], site: _Site) -> list[Violation]:
    """Sweeps every node's held demand over time; one violation per resource each time a node goes over."""
    events: list[tuple[int, str, int, _Resv, dict[str, float]]] = []
    for lease in leases:
        for r in lease.reservations:
            if not r.holds or r.start >= r.end:
                continue
            held: dict[str, dict[str, float]] = {}
            for vnode, node in r.mapping.items():
                # A migrating VM is on both nodes at once; a VM that stays put is counted once.
                for where in {node, r.source.get(vnode, node)} if r.kind == "migrate" else (node,):
                    total = held.setdefault(where, {})
                    for rtype, amount in lease.vms[vnode].items():
                        total[rtype] = total.get(rtype, 0) + amount
            for node, demand in held.items():
                # Intervals are half-open: at the same instant, ends (2t) free capacity before starts (2t+1) take it.
                events.append((2 * r.start + 1, node, lease.id, r, demand))
                events.append((2 * r.end, node, lease.id, r, demand))
    events.sort(key=itemgetter(0))
    usage: dict[str, dict[str, float]] = {node: {} for node in site.nodes}
    holders: dict[str, dict[int, tuple[int, _Resv]]] = {node: {} for node in site.nodes}
    over: set[tuple[str, str]] = set()
    out: list[Violation] = []
    for now, group in groupby(events, key=lambda e: e[0] >> 1):
        started: dict[str, list[tuple[int, _Resv, dict[str, float]]]] = {}
        for order, node, lid, r, demand in group:
            use, sign = usage[node], 1 if order & 1 else -1
            for rtype, amount in demand.items():
                use[rtype] = use.get(rtype, 0) + sign * amount
            if order & 1:
                holders[node][id(r)] = (lid, r)
                started.setdefault(node, []).append((lid, r, demand))
            else:
                holders[node].pop(id(r), None)
                started.setdefault(node, [])
        for node, starts in started.items():
            capacity = site.nodes[node]
            for rtype, amount in usage[node].items():
                key = (node, rtype)
                if amount <= capacity.get(rtype, 0) + EPSILON:
                    over.discard(key)
                elif key not in over and starts:
                    over.add(key)
                    lid, r, _ = next((s for s in reversed(starts) if s[2].get(rtype, 0) > 0), starts[-1])
                    out.append(Violation(lid, "capacity", _overload(node, rtype, amount, capacity.get(rtype, 0),
                                                                    now, r, holders[node])))
    return out


def _overload(node: str, rtype: str, amount: float, capacity: float, now: int, r: _Resv,
              holders: dict[int, tuple[int, _Resv]]) -> str:
    others = [f"lease {o} {h.label()}" for o, h in sorted(holders.values(), key=lambda oh: (oh[0], oh[1].index))
              if h is not r]
    shown = ", ".join(others[:4]) + (f" and {len(others) - 4} more" if len(others) > 4 else "")
    return (f"node {node} {rtype} {_amount(amount)} > {_amount(capacity)} at {_when(now)} by {r.label()}"
            + (f", with {shown}" if others else ""))


def check_schedule(doc: dict) -> list[Violation]:
    """Every rule of the schedule contract that `doc` breaks; an empty list when it obeys them all.

    A lease with a structural fault (missing key, bad time, unknown kind or node) is reported for that fault only:
    its other rules and its share of node capacity are checked once it can be read.
    """
    reader = _Reader()
    if not isinstance(doc, dict):
        return [Violation(None, "format", "the schedule is not a JSON object")]
    if doc.get("format") != FORMAT:
        reader.flag(None, "format", f"format is {doc.get('format')!r}, not {FORMAT!r}")
    reader.time(None, "schedule", doc, "starttime")
    site = reader.site(doc.get("site"))
    raw_leases = doc.get("leases")
    if not isinstance(raw_leases, list):
        reader.flag(None, "format", "leases is missing or not a list")
        return reader.out
    leases: list[_Lease] = []
    seen: set[int] = set()
    for pos, raw in enumerate(raw_leases):
        lease = reader.lease(pos, raw, site)
        lid = raw.get("id") if isinstance(raw, dict) else None
        if _is_number(lid) and float(lid).is_integer():
            if int(lid) in seen:
                reader.flag(int(lid), "duplicate-id", f"leases[{pos}] repeats lease id {int(lid)}")
            seen.add(int(lid))
        if lease is not None:
            leases.append(lease)
    out = reader.out
    for lease in leases:
        out.extend(_check_lease(lease))
    if site is not None:
        out.extend(_check_capacity(leases, site))
    out.extend(check_images(doc, _seconds, _when, Violation))
    return out

