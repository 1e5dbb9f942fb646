"""Checks a schedule document (`optlease-schedule/1`) against every rule of the schedule contract: the per-lease
rules, node capacity at every instant and the image rules, on the records `checker_read` reads."""
from __future__ import annotations

from functools import partial
from itertools import groupby
from operator import itemgetter
from typing import Iterator

from optlease.checker_images import check_images
from optlease.checker_read import (FORMAT, CheckedLease, CheckedResv, CheckedSite, Reader, Violation, amount_text,
                                   contract_seconds, contract_time, held_by_node)

# Overheads are rounded to whole seconds, so a run may differ from real_duration by one second.
TOLERANCE = 1
# Capacities and demands may be floats; a sum of floats must not read as an overload.
EPSILON = 1e-9


def _check_lease(lease: CheckedLease) -> Iterator[Violation]:
    """The per-lease rules of the contract: arrival, durations, AR, immediate, preemption, rejection."""
    flag = partial(Violation, lease.id)
    resvs = lease.reservations
    vms = [r for r in resvs if r.kind == "vm"]
    runs = [r for r in vms if not r.requeued]  # requeued runs are lost work
    early = next((r for r in resvs if r.start < lease.arrival), None)
    if early is not None:
        yield flag("arrival", f"{early.label()} starts at {contract_time(early.start)}, before arrival {contract_time(lease.arrival)}")
    if lease.state == "rejected":
        if vms:
            yield flag("rejected-has-vm", f"rejected, yet {vms[0].label()} runs from {contract_time(vms[0].start)}")
        return
    if lease.state == "done":
        ran = sum(r.end - r.start for r in runs)
        if abs(ran - lease.real_duration) > TOLERANCE:
            yield flag("real-duration", f"vm reservations add up to {ran} s, not real_duration "
                                        f"{amount_text(lease.real_duration)} s (±{TOLERANCE} s)")
        if ran > lease.duration:
            yield flag("over-duration", f"vm reservations add up to {ran} s, more than duration "
                                        f"{amount_text(lease.duration)} s")
    if lease.type == "ar" and runs:
        if runs[0].start != lease.requested_start:
            yield flag("ar-start", f"{runs[0].label()} starts at {contract_time(runs[0].start)}, not at requested_start "
                                   f"{contract_time(lease.requested_start)}")
        breaks = [r for r in resvs if r.kind in ("suspend", "resume") or (r.kind == "vm" and r is not runs[0])]
        if breaks:
            yield flag("ar-interrupted", f"{breaks[0].label()} at {contract_time(breaks[0].start)} interrupts the AR")
        return  # an accepted AR's one uninterrupted run is stronger than the preemption rules: one fault, one line
    if lease.type == "immediate" and vms:
        first = vms[0]
        before = resvs[:next(i for i, r in enumerate(resvs) if r is first)]
        ready = max((r.end for r in before), default=lease.arrival)
        if first.start != lease.arrival and (any(r.kind != "transfer" for r in before) or first.start != ready):
            yield flag("immediate-start", f"{first.label()} starts at {contract_time(first.start)}, not at arrival "
                                          f"{contract_time(lease.arrival)} nor right after its image transfers")
    if not lease.preemptible:
        if len(runs) > 1 or (not runs and lease.state == "done"):
            yield flag("non-preemptible", f"has {len(runs)} vm reservations that were not requeued, not exactly one")
        suspend = next((r for r in resvs if r.kind == "suspend"), None)
        if suspend is not None:
            yield flag("non-preemptible", f"{suspend.label()} at {contract_time(suspend.start)} suspends a "
                                          "non-preemptible lease")
        return
    position = {id(r): i for i, r in enumerate(resvs)}
    for first, second in zip(vms, vms[1:]):
        if first.requeued:
            continue  # a requeued run was cancelled, not suspended: the next run starts from scratch
        between = [r.kind for r in resvs[position[id(first)] + 1:position[id(second)]]]
        if not ("suspend" in between and "resume" in between[between.index("suspend"):]):
            yield flag("suspend-resume", f"no suspend then resume between {first.label()} ending at "
                                         f"{contract_time(first.end)} and {second.label()} starting at {contract_time(second.start)}")


def _check_capacity(leases: list[CheckedLease], site: CheckedSite) -> list[Violation]:
    """Sweeps every node's held demand over time; one violation per resource each time a node goes over."""
    events: list[tuple[int, str, int, CheckedResv, dict[str, float]]] = []
    for lease in leases:
        for r in lease.reservations:
            if not r.holds or r.start >= r.end:
                continue
            held = held_by_node(lease, r)
            for node, demand in held.items():
                # Intervals are half-open: at the same instant, ends (2t) free capacity before starts (2t+1) take it.
                events.append((2 * r.start + 1, node, lease.id, r, demand))
                events.append((2 * r.end, node, lease.id, r, demand))
    events.sort(key=itemgetter(0))
    usage: dict[str, dict[str, float]] = {node: {} for node in site.nodes}
    holders: dict[str, dict[int, tuple[int, CheckedResv]]] = {node: {} for node in site.nodes}
    over: set[tuple[str, str]] = set()
    out: list[Violation] = []
    for now, group in groupby(events, key=lambda e: e[0] >> 1):
        started: dict[str, list[tuple[int, CheckedResv, dict[str, float]]]] = {}
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
            for rtype, amount, lid, r in newly_over(node, usage[node], capacity, over, starts):
                out.append(Violation(lid, "capacity", _overload(node, rtype, amount, capacity.get(rtype, 0), now, r,
                                                                holders[node])))
    return out


def newly_over(node, usage: dict[str, float], capacity: dict[str, float], over: set, starts: list):
    """The resource types of a node over its capacity at an instant that were not over before it, each with the
    reservation that brought it there (the last of the instant's `starts` asking for that type): (type, amount,
    lease id, reservation). `over` (node, type) is kept up to date; a start's demand is a dict or its items."""
    for rtype, amount in usage.items():
        key = (node, rtype)
        if amount <= capacity.get(rtype, 0) + EPSILON:
            over.discard(key)
        elif key not in over and starts:
            over.add(key)
            lid, r, _ = next((s for s in reversed(starts) if dict(s[2]).get(rtype, 0) > 0), starts[-1])
            yield rtype, amount, lid, r


def _overload(node: str, rtype: str, amount: float, capacity: float, now: int, r: CheckedResv,
              holders: dict[int, tuple[int, CheckedResv]]) -> str:
    others = [f"lease {o} {h.label()}" for o, h in sorted(holders.values(), key=lambda oh: (oh[0], oh[1].index))
              if h is not r]
    shown = ", ".join(others[:4]) + (f" and {len(others) - 4} more" if len(others) > 4 else "")
    return (f"node {node} {rtype} {amount_text(amount)} > {amount_text(capacity)} at {contract_time(now)} by {r.label()}"
            + (f", with {shown}" if others else ""))


def check_schedule(doc: dict) -> list[Violation]:
    """Every rule of the schedule contract that `doc` breaks; an empty list when it obeys them all.

    A lease with a structural fault (missing key, bad time, unknown kind or node) is reported for that fault only:
    its other rules and its share of node capacity are checked once it can be read.
    """
    reader = Reader()
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
    leases: list[CheckedLease] = []
    seen: set[int] = set()
    for pos, raw in enumerate(raw_leases):
        lease = reader.lease(pos, raw, site)
        reader.note_id(pos, raw, seen)
        if lease is not None:
            leases.append(lease)
    out = reader.out
    for lease in leases:
        out.extend(_check_lease(lease))
    if site is not None:
        out.extend(_check_capacity(leases, site))
    out.extend(check_images(doc.get("images"), lambda: raw_leases, contract_seconds, contract_time, Violation))
    return out

