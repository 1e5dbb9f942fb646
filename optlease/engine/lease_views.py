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
           f'preemptible="{"true" if req.preemptible else "false"}" type="{_attr(req.kind.label)}"']
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
    return (str(req.id), req.kind.label, state_label(view.state), start, end, format_duration(req.duration),
            str(len(req.vms)))


class LeaseViews:
    """The published views, id -> View, and the leases touched since the last publication."""

    def __init__(self, origin: datetime) -> None:
        self.origin = origin
        self._views: dict[int, View] = {}
        self._lock = threading.Lock()             # guards `_views` only: held for a dictionary copy at most
        self._touched: dict[int, object] = {}     # id -> Lease record (manager's lock)
        self._rendered: dict[int, tuple[View, str, tuple]] = {}   # id -> (view, XML, row); readers' cache
        self._render_lock = threading.Lock()

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
                for view in views:
                    self._views[view.req.id] = view

    def get(self, lease_id: int) -> View | None:
        with self._lock:
            return self._views.get(lease_id)

    def listing(self, include_finished: bool) -> list[View]:
        """Every published view in id order (leases in the system only, unless `include_finished`)."""
        with self._lock:
            views = list(self._views.values())
        if not include_finished:
            views = [v for v in views if v.state not in FINISHED]
        if any(a.req.id > b.req.id for a, b in zip(views, views[1:])):
            views.sort(key=lambda v: v.req.id)
        return views

    def rendered(self, view: View) -> tuple[str, tuple]:
        """The view's XML and row, rendered once per view."""
        cached = self._rendered.get(view.req.id)
        if cached is None or cached[0] is not view:
            cached = (view, view_xml(view, self.origin), view_row(view, self.origin))
            with self._render_lock:
                self._rendered[view.req.id] = cached
        return cached[1], cached[2]
