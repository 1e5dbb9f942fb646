"""What the plan wants the hosts to run, kept up to date lease by lease instead of rebuilt from every lease.

An enactment pass compares what the hosts run with where the plan puts each VM at the last step
(`reconcile.desired_state`). A lease's VMs move in the plan only when the scheduler changes its reservations or its
state (a step, a cancellation, a failure, a requeue: the caller says which leases with `touch`), or when the last
step reaches one of its reservations' starts or ends (`_due`, a heap of (instant, lease id)). `update` recomputes
those leases only, so a pass costs what changed, not the number of leases in the system.
"""
from __future__ import annotations

import heapq
from typing import Iterable, Mapping

from optlease.reconcile import VmPlacement, desired_state, rows_of_leases


class PlanView:
    def __init__(self, host_of: Mapping[int, str]) -> None:
        self.host_of = host_of
        self.desired: dict[str, VmPlacement] = {}       # vm -> where the plan has it at the last update
        self.on_host: dict[str, set[str]] = {}          # host -> the VMs the plan has there
        self._of_lease: dict[int, dict[str, VmPlacement]] = {}
        self._due: list[tuple[int, int]] = []
        self._touched: set[int] = set()
        self._everything = True                         # the first update reads every lease

    def touch(self, leases: Iterable) -> None:
        """These leases (Lease records) changed in the scheduler."""
        self._touched.update(lease.id for lease in leases)

    def update(self, leases: Mapping[int, object], now: int) -> set[str]:
        """Bring the view to `now` for the leases in the system (id -> Lease); the VMs whose placement changed."""
        if self._everything:
            due, self._everything = set(leases) | set(self._of_lease), False
        else:
            due = self._touched
        self._touched = set()
        while self._due and self._due[0][0] <= now:
            due.add(heapq.heappop(self._due)[1])
        changed: set[str] = set()
        for lease_id in due:
            lease = leases.get(lease_id)
            rows = rows_of_leases([lease]) if lease is not None else []
            new = desired_state(rows, now, self.host_of) if rows else {}
            old = self._of_lease.pop(lease_id, {})
            if new:
                self._of_lease[lease_id] = new
            for vm in old.keys() | new.keys():
                before, after = old.get(vm), new.get(vm)
                if before == after:
                    continue
                changed.add(vm)
                if before is not None and before.host is not None:
                    self.on_host.get(before.host, set()).discard(vm)
                if after is None:
                    self.desired.pop(vm, None)
                    continue
                self.desired[vm] = after
                if after.host is not None:
                    self.on_host.setdefault(after.host, set()).add(vm)
            later = [x for row in rows for x in (row.start, row.end) if x > now]
            if later:
                heapq.heappush(self._due, (min(later), lease_id))
        return changed


class ReportIndex:
    """The VMs the hosts report, host by host, kept up to date from the VMs whose report changed: the reconcile step
    sees the VMs of the hosts concerned without a walk over every VM of the site."""

    def __init__(self) -> None:
        self._host: dict[str, str] = {}            # vm -> the host that reports it
        self._on: dict[str, set[str]] = {}         # host -> the VMs it reports

    def update(self, changed: Iterable[str], running: Mapping[str, tuple[str, str]]) -> None:
        for vm in changed:
            old, new = self._host.get(vm), running.get(vm, (None, ""))[0]
            if old == new:
                continue
            if old is not None:
                self._on[old].discard(vm)
                del self._host[vm]
            if new is not None:
                self._on.setdefault(new, set()).add(vm)
                self._host[vm] = new

    def on(self, hosts: Iterable[str], running: Mapping[str, tuple[str, str]]):
        """(vm, (host, state)) for every VM reported on `hosts`."""
        for host in hosts:
            for vm in self._on.get(host, ()):
                where = running.get(vm)
                if where is not None:
                    yield vm, where
