"""The simulated clock: replays a workload through the lease scheduler, skipping from one event to the next.

At each instant, in Haizea's order: premature ends, reservations ending, reservations starting, new requests and
one scheduling round, then starts and ends again (for what the round placed now and for zero-length reservations).
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

from optlease.domain.lease import LeaseKind, LeaseRequest, LeaseState
from optlease.domain.site import Site
from optlease.engine.log import EventLog
from optlease.scheduling.leasesched import LeaseScheduler
from optlease.scheduling.options import SchedulingOptions
from optlease.scheduling.policies import Policies
from optlease.scheduling.records import Lease

STOP_WHEN = ("all-leases-done", "besteffort-submitted", "besteffort-done")


@dataclass
class SimulationResult:
    site: Site
    leases: list[Lease]
    end_time: int
    wall_time: float
    options: SchedulingOptions
    rounds: int = 0
    notes: list[str] = field(default_factory=list)


def kinds_breakdown(kinds: list[LeaseKind]) -> str:
    """`1 Best-effort + 1 AR`: counts per kind, in order of first appearance (Haizea's wording)."""
    counts: dict[LeaseKind, int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    return " + ".join(f"{n} {k.label}" for k, n in counts.items())


class Simulator:
    def __init__(self, site: Site, requests: list[LeaseRequest], opts: SchedulingOptions, policies: Policies,
                 log: EventLog, stop_when: str = "all-leases-done", status_interval: int | None = None) -> None:
        self.site = site
        self.requests = sorted(requests, key=lambda r: r.arrival)
        self.opts = opts
        self.log = log
        self.stop_when = stop_when
        self.status_interval = status_interval
        self.sched = LeaseScheduler(site, opts, policies, log)
        self.leases = [Lease(r, {v: self.sched.table.vector(d) for v, d in enumerate(r.vms, start=1)})
                       for r in self.requests]
        self._premature: list[tuple[int, int, int, Lease]] = []

    def _start(self, now: int) -> None:
        for rr in self.sched.table.starting_at(now):
            if rr.state != "scheduled":
                continue
            real_end = self.sched.start_rr(rr, now)
            if real_end is not None:
                heapq.heappush(self._premature, (real_end, rr.lease.id, rr.seq, rr.lease))

    def _end(self, now: int) -> None:
        for rr in self.sched.table.ending_at(now):
            if rr.state == "active":
                self.sched.end_rr(rr, now)

    def _prematures(self, now: int) -> None:
        while self._premature and self._premature[0][0] <= now:
            t, _, seq, lease = heapq.heappop(self._premature)
            vmrr = lease.last_vmrr()
            if t == now and vmrr is not None and vmrr.seq == seq and vmrr.state == "active" and now < vmrr.end:
                self.sched.premature_end(lease, now)

    def _next_premature(self) -> int | None:
        while self._premature:
            t, _, seq, lease = self._premature[0]
            vmrr = lease.last_vmrr()
            if vmrr is not None and vmrr.seq == seq and vmrr.state == "active" and t < vmrr.end:
                return t
            heapq.heappop(self._premature)
        return None

    def _done(self, next_arrival: int) -> bool:
        sched = self.sched
        more_requests = next_arrival < len(self.leases)
        if not sched.leases and not more_requests:
            return True
        pending_be = any(lease.kind is LeaseKind.BEST_EFFORT for lease in self.leases[next_arrival:])
        if self.stop_when == "besteffort-submitted":
            return not pending_be
        if self.stop_when == "besteffort-done":
            in_system = any(lease.kind is LeaseKind.BEST_EFFORT for lease in sched.leases.values())
            return not pending_be and not in_system
        return False

    def run(self) -> SimulationResult:
        wall = time.perf_counter()
        log, sched = self.log, self.sched
        log.status("CLOCK", "Starting simulated clock")
        now, i, rounds = 0, 0, 0
        last_status = 0
        while True:
            log.now = now
            self._prematures(now)
            self._end(now)
            self._start(now)
            while i < len(self.leases) and self.leases[i].req.arrival <= now:
                sched.request(self.leases[i], now)
                i += 1
            sched.schedule(now)
            rounds += 1
            self._start(now)
            self._end(now)
            if self.status_interval and now - last_status >= self.status_interval * 60:
                self.print_status()
                last_status = now
            if self._done(i):
                break
            candidates = [t for t in (sched.table.next_event_after(now), self._next_premature(),
                                      self.leases[i].req.arrival if i < len(self.leases) else None)
                          if t is not None]
            if not candidates:
                raise RuntimeError(f"simulation is stuck at t={now}: leases remain but nothing will happen")
            now = min(candidates)
            if rounds % 512 == 0:
                sched.table.prune(now)
        log.status("CLOCK", "Simulated clock has stopped")
        return SimulationResult(self.site, sorted(self.leases, key=lambda lease: lease.id), now,
                                time.perf_counter() - wall, self.opts, rounds)

    def print_status(self) -> None:
        """Haizea's status summary: leases by state, each with its kinds."""
        by_state: dict[LeaseState, list[LeaseKind]] = {}
        for lease in sorted(self.leases, key=lambda lease: lease.id):
            if lease.state is not LeaseState.NEW:
                by_state.setdefault(lease.state, []).append(lease.kind)
        self.log.status("RM", "--- Haizea status summary ---")
        total = 0
        for state, kinds in by_state.items():
            label = state.value.replace("-", " ").capitalize() + ":"
            self.log.status("RM", f"{label:<25}{len(kinds)} ({kinds_breakdown(kinds)})")
            total += len(kinds)
        self.log.status("RM", " " * 20 + "------")
        self.log.status("RM", f"{'TOTAL:':>20}{total:>6}")
        self.log.status("RM", "---- End summary ----")
