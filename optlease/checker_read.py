"""Reading a schedule document (`optlease-schedule/1`) for the checker: its site, leases, VMs and reservations as
records, each structural fault met on the way (missing key, bad time, unknown kind or node) flagged as a
violation of the schedule contract."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache, partial
from typing import Any

from optlease.formats.timefmt import iso

FORMAT = "optlease-schedule/1"
KINDS = frozenset({"vm", "suspend", "resume", "shutdown", "migrate", "transfer"})
REQUEUED = "requeued"
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")
_EPOCH = datetime(1970, 1, 1)
contract_time = partial(iso, _EPOCH)  # the contract's notation of a time in seconds since _EPOCH


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
class CheckedSite:
    types: frozenset[str]
    nodes: dict[str, dict[str, float]]


@dataclass(frozen=True)
class CheckedResv:
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
class CheckedLease:
    id: int
    type: str
    preemptible: bool
    arrival: int
    requested_start: int | None
    duration: float
    real_duration: float
    vms: dict[str, dict[str, float]]
    state: str
    reservations: tuple[CheckedResv, ...]  # sorted by time


def held_by_node(lease: CheckedLease, r: CheckedResv) -> dict[str, dict[str, float]]:
    """The demand a reservation holds on each node: its VMs' amounts summed per node. A migrating VM is on both
    nodes at once; a VM that stays put is counted once."""
    held: dict[str, dict[str, float]] = {}
    for vnode, node in r.mapping.items():
        for where in {node, r.source.get(vnode, node)} if r.kind == "migrate" else (node,):
            total = held.setdefault(where, {})
            for rtype, amount in lease.vms[vnode].items():
                total[rtype] = total.get(rtype, 0) + amount
    return held


def contract_seconds(text: Any) -> int | None:
    """Seconds since 1970 of a contract time, None when it is not `YYYY-MM-DDTHH:MM:SS` (nor a string: a list or
    an object there is no key for the cache)."""
    return _seconds(text) if isinstance(text, str) else None


@lru_cache(maxsize=1 << 16)
def _seconds(text: str) -> int | None:
    if not _TIME.fullmatch(text):
        return None
    try:
        return (datetime.fromisoformat(text) - _EPOCH) // timedelta(seconds=1)
    except ValueError:
        return None


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def amount_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class Reader:
    """Reads the document into checked records, reporting every structural fault it meets."""

    def __init__(self) -> None:
        self.out: list[Violation] = []

    def flag(self, lease: int | None, rule: str, message: str) -> None:
        self.out.append(Violation(lease, rule, message))

    def time(self, lease: int | None, where: str, obj: dict, key: str) -> int | None:
        if key not in obj:
            self.flag(lease, "format", f"{where} has no {key!r}")
            return None
        seconds = contract_seconds(obj[key])
        if seconds is None:
            self.flag(lease, "time-format", f"{where} {key} {obj[key]!r} is not an ISO 8601 time "
                                            "YYYY-MM-DDTHH:MM:SS (no zone, whole seconds)")
        return seconds

    def site(self, raw: Any) -> CheckedSite | None:
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
                if rtype in types and (not is_number(amount) or amount < 0):
                    self.flag(None, "format", f"site node {key}: {rtype} capacity {amount!r} is not a number >= 0")
        if len(self.out) > before:
            return None
        return CheckedSite(frozenset(types), {str(k): v for k, v in nodes.items()})

    def note_id(self, pos: int, raw: Any, seen: set[int]) -> None:
        """Flag a lease whose whole-number id an earlier lease has (`seen`: the ids so far, added to)."""
        lid = raw.get("id") if isinstance(raw, dict) else None
        if is_number(lid) and float(lid).is_integer():
            if int(lid) in seen:
                self.flag(int(lid), "duplicate-id", f"leases[{pos}] repeats lease id {int(lid)}")
            seen.add(int(lid))

    def lease(self, pos: int, raw: Any, site: CheckedSite | None) -> CheckedLease | None:
        """The lease, or None when it has a structural fault (its semantic rules are then not checked)."""
        if not isinstance(raw, dict):
            self.flag(None, "format", f"leases[{pos}] is not an object")
            return None
        lid = raw.get("id")
        if not is_number(lid) or not float(lid).is_integer():
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
        duration = need("duration", lambda v: is_number(v) and v >= 0, "a number of seconds >= 0")
        vms = need("vms", lambda v: isinstance(v, dict) and v, "a non-empty object of per-VM demands")
        reservations = need("reservations", lambda v: isinstance(v, list), "a list")
        arrival = self.time(lid, where, raw, "arrival")
        real = raw.get("real_duration")
        if real is not None and not (is_number(real) and real >= 0):
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
                self.flag(lid, "order", f"{later.label()} starts at {contract_time(later.start)}, before "
                                        f"{earlier.label()} at {contract_time(earlier.start)}")
        # A trace's real duration longer than the request is cut at the request, as Haizea cuts it.
        return CheckedLease(lid, ltype, preemptible, arrival, requested, duration,
                      duration if real is None else min(real, duration), vms, state, tuple(ordered))

    def demands(self, lid: int, vms: dict, site: CheckedSite | None) -> None:
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
                elif not is_number(amount) or amount < 0:
                    self.flag(lid, "format", f"vnode {vnode}: {rtype} demand {amount!r} is not a number >= 0")

    def reservation(self, lid: int, index: int, raw: Any, vms: dict, site: CheckedSite | None) -> CheckedResv | None:
        where = f"reservation {index}"
        if not isinstance(raw, dict):
            self.flag(lid, "format", f"{where} is not an object")
            return None
        kind = raw.get("kind")
        if not isinstance(kind, str) or kind not in KINDS:
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
        return CheckedResv(index, kind, start, end, mapping, source, outcome == REQUEUED, holds)

    def mapping(self, lid: int, where: str, raw: Any, key: str, vms: dict, site: CheckedSite | None,
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
