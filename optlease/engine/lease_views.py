"""What the API shows of each lease, published after every commit, so that reads never take the manager's lock.

A listing of 100,000 leases must neither wait for a scheduling step nor make one wait. The manager records which
leases a change touched; once the change is committed it publishes, for each, a `View`: an immutable snapshot of
what a client sees (state, times, reason, planned window). Readers take the views under a small lock of their own
(a dictionary copy) and render them outside any lock. A view is rendered to Haizea's <lease> XML and to a
`list-leases` row once and cached: a listing renders only the leases that changed since the last one. Rendering is
plain string formatting (a few microseconds a lease), so even a first listing of 100,000 leases costs little.

Nothing is published before it is committed: a client never sees a state a restart could not rebuild.
"""
from __future__ import annotations

import functools
import threading
from datetime import datetime
from html import escape
from typing import Iterable, NamedTuple

from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from optlease.formats.lease_states import HAIZEA_CODE, state_label
from optlease.formats.timefmt import format_duration, format_time

S = LeaseState
FINISHED = (S.DONE, S.CANCELLED, S.REJECTED, S.FAILED)
PLANNED = (S.SCHEDULED, S.ACTIVE)     # states in which a best-effort lease has a planned start and end
# leases share their instants and durations (a batch starts together): each is formatted once, not per lease
format_time = functools.lru_cache(maxsize=1 << 16)(format_time)
format_duration = functools.lru_cache(maxsize=1 << 12)(format_duration)
_LABEL = {state: state_label(state) for state in LeaseState}
_KIND = {kind: kind.label for kind in LeaseKind}


class View(NamedTuple):
    """A lease as a client sees it at one commit. `planned`: its last VM reservation (start, end, state)."""

    req: LeaseRequest
    state: LeaseState
    first_start: int | None
    end: int | None
    reason: str | None
    planned: tuple[int, int, str] | None


def view_of(lease) -> View:
    """The snapshot of a Lease record (manager's lock held: the scheduler may change it at any other time)."""
    vmrr = lease.last_vmrr()
    return View(lease.req, lease.state, lease.first_start, lease.end, lease.reason,
                None if vmrr is None else (vmrr.start, vmrr.end, vmrr.state))


def _attr(value: str) -> str:
    return escape(value, quote=True)


def view_xml(view: View, origin: datetime) -> str:
    """Haizea's get_leases <lease> (its request's XML with `id` and the numeric `state`), plus optlease's `type`,
    `start-time` (planned or actual start), `end-time`, else `planned-end` while a reservation is planned."""
    req = view.req
    out = [f'<lease id="{req.id}" state="{HAIZEA_CODE[view.state]}" '
           f'preemptible="{"true" if req.preemptible else "false"}" type="{_attr(_KIND[req.kind])}"']
    start = view.first_start if view.first_start is not None else (view.planned[0] if view.planned else None)
    if start is not None:
        out.append(f' start-time="{format_time(origin, start)}"')
    if view.end is not None:
        out.append(f' end-time="{format_time(origin, view.end)}"')
    elif view.planned is not None and view.planned[2] in ("scheduled", "active"):
        out.append(f' planned-end="{format_time(origin, view.planned[1])}"')
    if view.reason:
        out.append(f' reason="{_attr(view.reason)}"')
    out.append("><nodes>")
    for vm in req.vms:
        out.append('<node-set numnodes="1">')
        out.extend(f'<res type="{_attr(rtype)}" amount="{amount}"/>' for rtype, amount in vm.items())
        out.append("</node-set>")
    out.append("</nodes>")
    if req.kind is LeaseKind.AR:
        out.append(f'<start><exact time="{format_time(origin, req.start)}"/></start>')
    elif req.kind is LeaseKind.IMMEDIATE:
        out.append("<start><now/></start>")
    else:
        out.append("<start/>")
    out.append(f'<duration time="{format_duration(req.duration)}"/>')
    if req.software is None:
        out.append("<software><none/></software>")
    else:
        out.append(f'<software><disk-image id="{_attr(req.software.id)}" size="{req.software.size}"/></software>')
    out.append("</lease>")
    return "".join(out)


def view_row(view: View, origin: datetime) -> tuple[str, ...]:
    """The `list-leases` row: id, type, state, starting time (an AR's requested start, a planned best-effort
    lease's planned start), ending time (when it ended, or where its plan ends it), duration, nodes."""
    req = view.req
    planned = view.state in PLANNED
    xml_start = view.first_start if view.first_start is not None else (view.planned[0] if view.planned else None)
    if req.kind is LeaseKind.AR:
        start = format_time(origin, req.start)
    elif req.kind is LeaseKind.IMMEDIATE:
        start = "Now"
    else:
        start = format_time(origin, xml_start) if planned and xml_start is not None else "Unspecified"
    if view.end is not None:
        end = format_time(origin, view.end)
    elif planned and view.planned is not None and view.planned[2] in ("scheduled", "active"):
        end = format_time(origin, view.planned[1])
    else:
        end = "Unspecified"
    return (str(req.id), _KIND[req.kind], _LABEL[view.state], start, end, format_duration(req.duration),
            str(len(req.vms)))


BLOCK_BITS = 10         # leases are kept in blocks of 1,024 consecutive ids: a change marks its block, nothing else


class LeaseViews:
    """The published views, by block of ids (id >> BLOCK_BITS -> id -> View), the blocks changed since a listing
    last took them, and the leases touched since the last publication."""

    def __init__(self, origin: datetime) -> None:
        self.origin = origin
        self._blocks: dict[int, dict[int, View]] = {}
        self._lock = threading.Lock()             # guards `_blocks` and `_dirty`: held for a few copies at most
        self._dirty: set[int] = set()             # blocks published since `take_dirty` last took them
        self._touched: dict[int, object] = {}     # id -> Lease record (manager's lock)
        self._xml: dict[int, tuple[View, str]] = {}     # id -> (view, its XML): readers' caches, each rendered
        self._row: dict[int, tuple[View, tuple]] = {}   # id -> (view, its row)    once per view

    def touch(self, leases: Iterable) -> None:
        """These Lease records changed (manager's lock held); they are published at the next `publish`."""
        for lease in leases:
            self._touched[lease.id] = lease

    def publish(self) -> None:
        """Publish the touched leases (after their commit; manager's lock held)."""
        views = [view_of(lease) for lease in self._touched.values()]
        self._touched.clear()
        self._store(views)

    def publish_new(self, leases: Iterable) -> None:
        """Publish leases just committed that no step can see yet (no lock needed: nothing else touches them)."""
        self._store([view_of(lease) for lease in leases])

    def _store(self, views: list[View]) -> None:
        if views:
            with self._lock:
                blocks, dirty = self._blocks, self._dirty
                for view in views:
                    key = view.req.id >> BLOCK_BITS
                    block = blocks.get(key)
                    if block is None:
                        block = blocks[key] = {}
                    block[view.req.id] = view
                    dirty.add(key)

    def get(self, lease_id: int) -> View | None:
        with self._lock:
            return self._blocks.get(lease_id >> BLOCK_BITS, {}).get(lease_id)

    def listing(self, include_finished: bool) -> list[View]:
        """Every published view in id order (leases in the system only, unless `include_finished`)."""
        with self._lock:
            blocks = [(key, dict(block)) for key, block in self._blocks.items()]
        blocks.sort(key=lambda kv: kv[0])
        views = [view for _, block in blocks for view in _in_order(block)]
        if not include_finished:
            views = [v for v in views if v.state not in FINISHED]
        return views

    def take_dirty(self) -> dict[int, list[View]]:
        """The blocks published since the last call, each as its views in id order (a consistent cut: whatever is
        published after it marks its block again)."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            taken = {key: dict(self._blocks[key]) for key in dirty}
        return {key: _in_order(views) for key, views in taken.items()}

    def xml(self, view: View) -> str:
        """The view's <lease> XML, rendered once per view."""
        cached = self._xml.get(view.req.id)
        if cached is None or cached[0] is not view:
            cached = self._xml[view.req.id] = (view, view_xml(view, self.origin))
        return cached[1]

    def row(self, view: View) -> tuple:
        """The view's `list-leases` row, rendered once per view."""
        cached = self._row.get(view.req.id)
        if cached is None or cached[0] is not view:
            cached = self._row[view.req.id] = (view, view_row(view, self.origin))
        return cached[1]

    def rendered(self, view: View) -> tuple[str, tuple]:
        """The view's XML and row."""
        return self.xml(view), self.row(view)


def _in_order(block: dict[int, View]) -> list[View]:
    """A block's views in id order."""
    return [block[i] for i in sorted(block)]
